"""Resume after the driver is killed with SIGKILL, through the command line, Ray Tune and the server actor.

10 configurations; the driver is killed once 4 have completed, 1 has failed (its server cannot start) and the 6th is
launching, with 4 pending. The killed run's server group must die with it (watchdog). Re-running the same command
runs exactly the 5 configurations not recorded; the failed one only with retry_failed=true; the final table holds
each of the 10 configurations once.
"""

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from grid.compose import compose_spec
from grid.server.process import group_alive
from grid.sweep.driver import plan_run
from tests.timing import slack
from tests.grid_cli import grid_argv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.faults]
FRACTIONS = [0.80, 0.81, 0.10, 0.82, 0.83, 0.84, 0.85, 0.86, 0.87, 0.88]  # 0.10 cannot hold the weights: fails
ARGS = ["model=llama3_1_8b", "hardware=h100_x1", "+sweep.name=resume",
        f"+sweep.grid.mem_fraction_static=[{','.join(map(str, FRACTIONS))}]",
        "load.concurrency=[1]", "load.min_prompts=2", "load.input_len=16", "load.output_len=8",
        "load.stall_timeout_s=600", "ray.dashboard=false", "engine.stop_grace_s=3",
        "search=exhaustive",  # every configuration runs (the default search skips hopeless ones)
        "search.try_known_failures=true"]  # 0.10 (the failure table: weights do not fit) runs first, not last


def command(run_dir, *extra):
    return grid_argv(*ARGS, *extra, run_dir=run_dir)


def spec_for(run_dir, *extra):
    return compose_spec([*ARGS, *extra], run_dir)


def wait_for(pred, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_sigkill_driver_then_resume(tmp_path, printed):
    env = {**os.environ, "COLUMNS": "200"}
    lp_dir, logs = tmp_path / "parquet" / "load_points", tmp_path / "logs"
    driver = subprocess.Popen(command(tmp_path), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        # 1 failed (first: a known failure, try_known_failures) + 4 completed recorded, and the 6th configuration launching: its supervisor has written the
        # group's state (the log file alone is opened before the supervisor starts)
        wait_for(lambda: len(list(lp_dir.glob("*.parquet"))) >= 5 and len(list(logs.glob("*.log.state"))) >= 6
                 or driver.poll() is not None, 300 * slack(), "5 recorded trials and a 6th launching")
        assert driver.poll() is None, driver.stdout.read()
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
    before = pd.read_parquet(lp_dir)
    assert len(before) == 5 and sorted(before.trial_status) == ["failed", "ok", "ok", "ok", "ok"], before[["label", "trial_status", "trial_error_class", "trial_error_message", "log_tail"]].to_dict("records")
    assert before[before.trial_status == "failed"].config_json.str.contains('"mem_fraction_static": 0.1').all()
    # the killed run's servers do not survive it: every launched group is gone (watchdog; Ray's cleanup alone
    # misses grandchildren, ray_hydra.md §3.6)
    groups = []
    for state in logs.glob("*.log.state"):
        groups.append(int(state.read_text().split('"pgid": ')[1].split(",")[0]))
    assert len(groups) == 6
    wait_for(lambda: not any(group_alive(g) for g in groups), 60 * slack(), "the killed run's server groups to exit")

    out = subprocess.run(command(tmp_path), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600 * slack())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    plan = printed.plan_line(out.stdout)
    assert (plan["configurations"], plan["recorded"], plan["to_run"]) == (10, 5, 5)
    after = pd.read_parquet(lp_dir)
    assert len(after) == 10 and after.config_hash.nunique() == 10               # every configuration once
    assert sorted(after.trial_status.value_counts().items()) == [("failed", 1), ("ok", 9)]
    kept = after.set_index("config_hash").loc[before.config_hash]
    assert list(kept.trial_id) == list(before.trial_id)                          # nothing completed ran again
    assert list(kept.finished_unix_ns) == list(before.finished_unix_ns)
    requests = pd.read_parquet(tmp_path / "parquet" / "requests")
    assert requests.groupby("config_hash").size().to_dict() == {
        h: 2 for h in after[after.trial_status == "ok"].config_hash}             # no duplicated requests

    # the failed configuration runs again only when asked
    assert plan_run(spec_for(tmp_path)).todo == []
    retry = plan_run(spec_for(tmp_path, "retry_failed=true")).todo
    assert [p.settings["mem_fraction_static"] for p in retry] == [0.10]


def test_ctrl_c_exits_130_keeps_what_completed_and_resumes(tmp_path):
    """SIGINT (Ctrl-C) to the driver once 2 configurations are recorded: grid says it was interrupted and exits 130
    (README, "Exit status"), keeps what completed, and the same command then runs only the rest."""
    env = {**os.environ, "COLUMNS": "200"}
    lp_dir = tmp_path / "parquet" / "load_points"
    driver = subprocess.Popen(command(tmp_path), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(list(lp_dir.glob("*.parquet"))) >= 2 or driver.poll() is not None, 300 * slack(),
                 "2 recorded trials")
        assert driver.poll() is None, driver.stdout.read()
        os.kill(driver.pid, signal.SIGINT)
        out, _ = driver.communicate(timeout=120 * slack())
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, out[-3000:]
    assert "Interrupted; completed trials are saved" in out
    kept = pd.read_parquet(lp_dir)
    assert 2 <= len(kept) < 10 and kept.config_hash.nunique() == len(kept)
    rest = plan_run(spec_for(tmp_path)).todo  # recorded configurations (ok or failed) do not run again
    assert len(rest) == 10 - len(kept)
    assert not {p.config_hash for p in rest} & set(kept.config_hash)
