"""The node's ServerActor is killed mid-trial in a real sweep: an infrastructure failure, never
charged to the configuration. A new actor is made, the configuration runs again within the invocation, every
configuration gets its verdict once, nothing of the lost attempt is stored twice, and the exit status is 0."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.timing import COUNT_HOST_NOISE, slack
from tests.grid_cli import grid_argv

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.integration, pytest.mark.faults]

ARGS = ["model=llama3_1_8b", "hardware=h100_x1", "+sweep.name=lost", "+sweep.grid.mem_fraction_static=[0.80,0.81]",
        "load.concurrency=[1]", "load.repeats=3", "load.min_prompts=2", "load.input_len=16", "load.output_len=256",
        "engine.clock=real", "engine.time_scale=2",  # the kill must land inside a trial: real time
        "engine.startup_time_scale=50", "engine.stop_grace_s=3", "ray.dashboard=false",
        "ray.num_cpus=2",
        "search=exhaustive",  # every configuration runs (the default search skips hopeless ones)
        COUNT_HOST_NOISE]

KILL = """
import sys, ray
ray.init(address=sys.argv[1], namespace="grid", log_to_driver=False)
(name,) = [n for n in ray.util.list_named_actors() if n.startswith("grid-server:")]
ray.kill(ray.get_actor(name))
print("killed", name)
"""


def test_killed_server_actor_is_replaced_and_the_configuration_rerun(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")  # this run's own Ray temp dir (short socket paths)
    # no token auth: ~/.ray/auth_token is shared by every local cluster of the user, and a cluster started meanwhile
    # by someone else rewrites it, so the second driver below could not prove it belongs to this one
    env = {**os.environ, "COLUMNS": "200", "RAY_TMPDIR": ray_tmp, "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled"}
    cmd = grid_argv(*ARGS, run_dir=tmp_path)
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, gcs, killed = [], None, None
    try:
        deadline = time.monotonic() + 400 * slack()
        for line in driver.stdout:
            lines.append(line)
            if "GCS at " in line:
                gcs = line.split("GCS at ")[1].split()[0]
            if killed is None and "point 0 (" in line:  # the first trial measured its first load point
                # a second driver joins grid's cluster; it is on 127.0.0.1 only (grid/cluster/local.py)
                killed = subprocess.run([sys.executable, "-c", KILL, gcs], env={
                    **env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}, capture_output=True, text=True,
                    timeout=120 * slack())
            if time.monotonic() > deadline:
                break
        driver.wait(60 * slack())
    finally:
        if driver.poll() is None:
            driver.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = "".join(lines)
    assert killed is not None and killed.returncode == 0, (killed and killed.stderr[-2000:], out[-3000:])
    assert driver.returncode == 0, out[-4000:]
    assert "attempt 1: the server actor of node" in out and "running the configuration again on a new server actor" in out
    lp = pd.read_parquet(tmp_path / "parquet" / "load_points")
    assert len(lp) == 6 and lp.config_hash.nunique() == 2
    assert set(lp.trial_status) == {"ok"} and set(lp.status) == {"ok"}
    requests = pd.read_parquet(tmp_path / "parquet" / "requests")
    assert requests.groupby(["config_hash", "point_index"]).size().tolist() == [2] * 6  # no request stored twice
    assert list((tmp_path / "processes").glob("*.json")) == []  # the lost actor's server group is gone
    assert "Incomplete" not in out and "Traceback" not in out
