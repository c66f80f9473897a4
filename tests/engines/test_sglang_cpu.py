"""grid's main path against the released SGLang server: ``python -m grid.run engine=sglang hardware=cpu_host``.

Installs nothing: it runs when ``GRID_SGLANG_PYTHON`` names a Python with a released SGLang and ``GRID_SGLANG_MODEL``
the tiny random-weight model built with it (``GRID_SGLANG_LD_LIBRARY_PATH``: the folder of ``libcuda.so.1`` its
kernel wheels import); experiments/real_server/setup_sglang_cpu.sh [VERSION] makes all three and prints them. It skips
otherwise, saying so. Every server listens on 127.0.0.1.

The sweep is conf/sweep/cpu_serving.yaml with ``search=exhaustive``: four configurations SGLang's CPU engine serves
(schedule_policy x chunked_prefill_size) and three it starts and dies on (``attention_backend=fa3``,
``torch_compile=true``, ``speculative_algorithm=NGRAM``: rules ``cpu_fa3``, ``cpu_torch_compile`` and
``cpu_speculative`` of grid/releases/checks.py). Checked:

1. every configuration gets its verdict: four ``ok``; the three known failures ``failed`` / ``startup_exit`` with
   SGLang's own message in the recorded error and the launcher's exit status read as SGLang killing itself, not as
   an out-of-memory;
2. tokens are counted as tokens (each request's output length is SGLang's ``completion_tokens``, whatever the
   number of stream chunks);
3. the release's ``Prefill batch`` / ``Decode batch`` lines land in ``server_log`` (``cpu_graph`` set), its
   ``/metrics`` gauges in ``server_metrics`` and the ``srv_*`` columns, its version in ``engine_version``;
4. no SGLang process (launcher, ``sglang::scheduler``, ``sglang::detokenizer``) is left after the run, nor after
   ``python -m grid.run`` is SIGKILLed mid-trial; running the same command again resumes without measuring a
   recorded configuration twice;
5. the report's launch command is the one grid launched, less ``--port``.

Run: ``experiments/real_server/setup_sglang_cpu.sh 0.5.23``, paste its three ``export`` lines, then
``python -m pytest -m real_sglang`` (7-8 minutes on 2 idle cores, the conformance test included).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from grid.metrics.hostnoise import host_noise
from grid.releases.checks import RULES
from grid.releases.flags import parse_version
from grid.search.calibration import counts
from grid.storage.parquet import read_table
from tests.timing import COUNT_HOST_NOISE, slack
from tests.grid_cli import grid_argv
from tests.real_servers import unavailable

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 1800          # real seconds for the whole sweep on a quiet host (about 6 minutes on 2 idle cores)
# the module's sweep fixture (a first run SIGKILLed, then the resumed run: about 13 minutes on 2 quiet cores) counts
# against the first test's pytest-timeout, which the default 600 s does not cover on a quiet host (where
# tests/conftest.py does not stretch it)
pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(RUN_TIMEOUT_S + 600)]
SGLANG_PROCESS = re.compile(r"sglang\.launch_server|sglang::(?:scheduler|detokenizer)")


def _setup() -> tuple[str, str, str]:
    python, model = os.environ.get("GRID_SGLANG_PYTHON"), os.environ.get("GRID_SGLANG_MODEL")
    lib = os.environ.get("GRID_SGLANG_LD_LIBRARY_PATH", "")
    if not python or not model:
        unavailable("GRID_SGLANG_PYTHON / GRID_SGLANG_MODEL are not set: run experiments/real_server/"
                    "setup_sglang_cpu.sh and export the three lines it prints, then python -m pytest -m real_sglang")
    for name, path in (("GRID_SGLANG_PYTHON", python), ("GRID_SGLANG_MODEL", model)):
        if not Path(path).exists():
            unavailable(f"{name}={path} does not exist")
    return python, model, lib


def _version(python: str) -> str:
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def sglang_processes() -> list[str]:
    """``pid stat args`` of every live SGLang process on the machine: the launcher, ``sglang::scheduler``,
    ``sglang::detokenizer``, and any process of SGLang's environment (its children before they rename themselves,
    multiprocessing's resource tracker)."""
    venv = str(Path(os.environ.get("GRID_SGLANG_PYTHON", "/nonexistent")).parent.parent)
    out = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines()
            if (SGLANG_PROCESS.search(line) or venv in line) and not line.split()[1].startswith("Z")]


def _command(run_dir: Path, python: str, model: str, lib: str, *extra: str) -> list[str]:
    env_override = f"+engine.env={{LD_LIBRARY_PATH:{lib}}}" if lib else "engine.env={}"
    return grid_argv("+sweep=cpu_serving", "engine=sglang", "hardware=cpu_host", "model=tiny_llama",
                     f"model.path={model}", f"engine.python={python}", "probe.enabled=false", "search=exhaustive",
                     env_override, COUNT_HOST_NOISE, *extra, run_dir=run_dir)


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep run once: SIGKILLed while its second configuration is measured, then run again to the end."""
    python, model, lib = _setup()
    assert not sglang_processes(), f"SGLang processes already running: {sglang_processes()}"
    run_dir = tmp_path_factory.mktemp("real_sglang") / "run"
    cmd = _command(run_dir, python, model, lib)
    # 1. start, wait until the first configuration is recorded and the next one is being measured, SIGKILL the driver
    first = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    deadline = time.monotonic() + RUN_TIMEOUT_S * slack()
    killed_after: list[str] = []
    while time.monotonic() < deadline and first.poll() is None:
        recorded = list((run_dir / "parquet" / "load_points").glob("*.parquet"))
        running = list((run_dir / "status" / "running").glob("*.json"))
        if recorded and running and sglang_processes():
            killed_after = [p.stem for p in recorded]
            os.kill(first.pid, signal.SIGKILL)
            break
        time.sleep(0.5)
    first.wait(timeout=60 * slack())
    # the servers die with their supervisors once the driver is gone
    leftover_deadline = time.monotonic() + 120 * slack()
    while sglang_processes() and time.monotonic() < leftover_deadline:
        time.sleep(1.0)
    left_after_kill = sglang_processes()
    # 2. the same command again: resumes
    second = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S * slack())
    return {"run_dir": run_dir, "version": _version(python), "killed_after": killed_after,
            "left_after_kill": left_after_kill, "left_after_run": sglang_processes(), "second": second}


def _load_points(run_dir: Path):
    return read_table(run_dir, "load_points").to_pandas()


def test_the_resumed_sweep_completes_and_measures_nothing_twice(sweep):
    second = sweep["second"]
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert sweep["killed_after"], "the driver was never SIGKILLed mid-sweep (the first configuration was not seen)"
    assert "already recorded" in second.stdout
    lp = _load_points(sweep["run_dir"])
    # one row per (configuration, load point): nothing measured twice, nothing lost
    assert not lp.duplicated(["config_hash", "point_index", "repeat_index"]).any()
    assert set(sweep["killed_after"]) <= set(lp["config_hash"])
    assert lp["config_hash"].nunique() == 7


def test_no_sglang_process_is_left(sweep):
    assert sweep["left_after_kill"] == [], f"left after SIGKILL of grid.run: {sweep['left_after_kill']}"
    assert sweep["left_after_run"] == [], f"left after the run: {sweep['left_after_run']}"


def test_every_configuration_gets_its_verdict(sweep):
    lp = _load_points(sweep["run_dir"])
    by_label = lp.groupby("label")
    ok = [label for label, rows in by_label if (rows["status"] == "ok").all() and (rows["trial_status"] == "ok").all()]
    assert len(ok) == 4 and all("attention=default torch_compile=default speculative_algorithm=default" in label
                                for label in ok), ok
    version = parse_version(sweep["version"])
    ngram = "cpu_ngram" if any(r.name == "cpu_ngram" and r.releases(version) for r in RULES) else "cpu_speculative"
    for setting, rule in (("attention=fa3", "cpu_fa3"), ("torch_compile=True", "cpu_torch_compile"),
                          ("speculative_algorithm=NGRAM", ngram)):
        rows = lp[lp["label"].str.contains(setting, regex=False)]
        (found,) = [r for r in RULES if r.name == rule and r.releases(version)]
        error = rows["trial_error_message"].iloc[0]
        assert found.message in error, error   # SGLang's own words, as the release's rule records them
        if found.stage == "launch":  # SGLang's argument checks refuse it: grid refuses it before launch
            assert set(rows["trial_status"]) == {"invalid"} and set(rows["trial_error_class"]) == {"refused"}, error
            continue
        assert set(rows["trial_status"]) == {"failed"}, rows[["trial_status", "trial_error_class"]]
        assert set(rows["trial_error_class"]) == {"startup_exit"}, rows["trial_error_message"].tolist()
        assert "out of memory" not in error.lower()
        assert "killed itself" in error, error                  # exit 137 / -9 read as SGLang's own SIGKILL


def test_tokens_are_counted_as_tokens(sweep):
    req = read_table(sweep["run_dir"], "requests").to_pandas()
    ok = req[req["status"] == "ok"]
    assert len(ok) >= 4 * 2 * 8   # 4 configurations x 2 load points x 8 measured requests
    # SGLang may put two tokens in one stream chunk: the count is SGLang's completion_tokens, not the chunks
    assert (ok["output_tokens"] == ok["usage_completion_tokens"]).all()
    assert (ok["output_tokens"] == ok["chunk_tokens"].map(sum)).all()
    assert (ok["output_tokens"] == 32).all(), ok["output_tokens"].value_counts()   # load.output_len
    assert (ok["input_tokens"] > 0).all()


def test_a_point_holds_the_real_server_for_its_wall_clock_time(sweep):
    # held_s (what the cost counts) on the real server is wall-clock seconds: at least the measured window, at most
    # the point's own wall-clock span (its warm-up request, then first send to the window's end)
    ok = _load_points(sweep["run_dir"]).query("status == 'ok'")
    wall_s = (ok["finished_unix_ns"] - ok["started_unix_ns"]) / 1e9
    assert (ok["time_scale"] == 1.0).all()
    assert (ok["held_s"] >= ok["duration_s"]).all() and (ok["held_s"] <= wall_s).all(), \
        ok[["duration_s", "held_s"]].assign(wall_s=wall_s)


def test_the_release_speaks_to_the_tables(sweep):
    run_dir = sweep["run_dir"]
    lp = _load_points(run_dir)
    ok = lp[lp["status"] == "ok"]
    assert set(ok["engine_version"]) == {sweep["version"]}
    log = read_table(run_dir, "server_log").to_pandas()
    assert {"prefill", "decode"} <= set(log["kind"])
    assert log["cpu_graph"].notna().all() and not log["cpu_graph"].any()   # 'cpu graph: False' on every line
    assert (log.loc[log["kind"] == "decode", "gen_throughput_tok_per_s"] > 0).all()
    metrics = read_table(run_dir, "server_metrics").to_pandas()
    assert len(metrics) > 0
    assert ok["srv_gauges_found"].min() > 0


def test_the_report_command_is_the_one_launched(sweep):
    run_dir = sweep["run_dir"]
    lp = _load_points(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    best = lp[lp["label"] == summary["best_label"]].iloc[0]
    launched = shlex.split(best["command"])
    i = launched.index("--port")
    expected = shlex.join(launched[:i] + launched[i + 2:]).replace(shlex.quote(launched[launched.index("-m") - 1]),
                                                                    "python", 1)
    report = (run_dir / "report.md").read_text()
    assert expected in report, f"{expected}\nnot in the report:\n{report[:3000]}"
    assert "SGLANG_USE_CPU_ENGINE=1" in expected and "--device cpu" in expected
    html = (run_dir / "report.html").read_text()  # the page too, naming the release it measured
    assert summary["best_label"] in html and f"SGLang release {sweep['version']}" in html


def test_the_twin_calibrates_itself_on_the_real_server(sweep):
    """The calibration runs inside a real sweep too. On a CPU host the twin's spec-sheet forecasts decide
    nothing until it is calibrated (grid/twin/perf.py ``forecasts_need_calibration``); the resumed run fits every
    point recorded before the SIGKILL and updates on each configuration it measures after."""
    run_dir = sweep["run_dir"]
    saved = json.loads((run_dir / "calibration.json").read_text())
    assert saved["key"] == {"hardware": "cpu_host", "model": "tiny_llama", "engine": "sglang",
                            "release": sweep["version"]}
    # one observation per configuration and level that counts: of the four configurations SGLang serves, at
    # concurrency 1 and 4, less the levels early stopping skipped once the calibrated twin ruled them out (how many
    # depends on the host's timing) and host noise
    rows = read_table(run_dir, "load_points").to_pylist()
    levels = {(r["config_hash"], r["point_value"]) for r in rows if counts(r)}
    served = {r["config_hash"] for r in rows if r["trial_status"] == "ok"}
    unexplained = [r for r in rows if r["config_hash"] in served and not counts(r)
                   and not (r["status"] == "not_run" and r["early_stop_objective"]) and not host_noise(r)]
    assert not unexplained, unexplained
    assert len(saved["sources"]) == len(levels) and len({h for h, _ in levels}) >= 3, (saved["sources"], levels)
    # the spec-sheet twin is of a GPU-like machine; the calibrated one fits the measured points far better
    for metric in ("tpot_ms", "output_tok_per_s"):
        assert saved["error_after"][metric] < saved["error_before"][metric] / 2, saved
    assert f"The twin was calibrated (calibration.json) on {len(levels)} load points" in (run_dir / "report.md").read_text()
