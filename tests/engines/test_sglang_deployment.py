"""A deployment of several released SGLang servers behind SGLang's router, through grid's main path:
``python -m grid.run engine=sglang hardware=cpu_host`` with ``sweep.deployments`` of two aggregated replicas.

SGLang's prefill-decode mode cannot run on a CPU (docs/topology.md "SGLang's prefill-decode mode on a CPU"), so the
deployment measured here is two replicas under round robin: the trial starts both servers and the router
(grid/server/session.py), measures through the router, records the deployment with every row, and stops all of it.
It runs when experiments/real_server/setup_sglang_cpu.sh has been run and its variables are exported (as
tests/engines/test_sglang_cpu.py), and skips otherwise, saying so.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from grid.storage.parquet import read_table
from tests.engines.test_sglang_cpu import ROOT, _env, _setup, sglang_processes
from tests.grid_cli import grid_argv
from tests.timing import COUNT_HOST_NOISE, slack

RUN_TIMEOUT_S = 900  # real seconds on a quiet host (two CPU servers start together: about 3 minutes on 2 cores)
pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(RUN_TIMEOUT_S * 4 + 120)]
REPLICAS = "[{groups:[{role:aggregated,count:2,tp:1}],router_policy:round_robin}]"


def _router_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines()
            if ("sglang::router" in line or "sglang_router.launch_router" in line) and " Z" not in line]


def assert_round_robin_split(row) -> None:
    """Each of the two replicas, where it ran and what it served (``deployment_servers_json``): round robin gives each
    about half of what the point sent (measured and warm-up requests; 12 and 10 of 21 sent in one run, 11 and 11 in
    another)."""
    servers = json.loads(row["deployment_servers_json"])
    assert [s["server"] for s in servers] == ["aggregated 0", "aggregated 1"], servers
    assert all(s["node"] and s["url"].startswith("http://127.0.0.1:") for s in servers), servers
    served = [s["requests"] for s in servers]
    assert sum(served) >= row["requests_total"] + row["warmup_requests_run"], (servers, row["warmup_requests_run"])
    assert min(served) >= sum(served) / 3, servers


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    python, model, lib = _setup()
    assert not sglang_processes(), f"SGLang processes already running: {sglang_processes()}"
    run_dir = tmp_path_factory.mktemp("real_sglang_deployment") / "run"
    env_override = f"+engine.env={{LD_LIBRARY_PATH:{lib}}}" if lib else "engine.env={}"
    cmd = grid_argv("+sweep=cpu_serving", "engine=sglang", "hardware=cpu_host", "model=tiny_llama",
                    f"model.path={model}", f"engine.python={python}", "probe.enabled=false", env_override,
                    COUNT_HOST_NOISE, "sweep.grid.schedule_policy=[fcfs]", "sweep.grid.chunked_prefill_size=[4096]",
                    "sweep.configs=[]", "sweep.base.max_total_tokens=16384", "sweep.load.concurrency=[4]",
                    "+sweep.load.num_prompts=16", f"+sweep.deployments={REPLICAS}", run_dir=run_dir)
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S * slack())
    return {"run_dir": run_dir, "done": done, "left": sglang_processes(), "routers": _router_processes()}


def test_the_deployment_is_measured_through_the_router_and_recorded(run):
    done = run["done"]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lp = read_table(run["run_dir"], "load_points").to_pandas()
    assert len(lp) == 1 and lp["label"].iloc[0].startswith("2x TP1")
    row = lp.iloc[0]
    assert (row["status"], row["trial_status"]) == ("ok", "ok"), row["trial_error_message"]
    assert json.loads(row["deployment_json"])["groups"] == [
        {"role": "aggregated", "count": 2, "tp": 1, "attn_dp": 1, "ep": 1, "settings": {}}]
    servers, router = row["command"].splitlines()[:2], row["command"].splitlines()[2]
    assert all("sglang.launch_server" in s and "--device cpu" in s for s in servers)
    ports = [s.split("--port ")[1].split()[0] for s in servers]
    assert "sglang_router.launch_router" in router and "--policy round_robin" in router
    assert all(f"http://127.0.0.1:{p}" in router for p in ports), (ports, router)
    req = read_table(run["run_dir"], "requests").to_pandas()
    ok = req[req["status"] == "ok"]
    assert len(ok) == len(req) >= 16 and (ok["output_tokens"] == 32).all()
    # the servers' own /metrics, read together (the router's endpoint serves no SGLang gauges)
    assert row["srv_gauges_found"] > 0 and row["srv_scrapes"] > 2
    metrics = read_table(run["run_dir"], "server_metrics").to_pandas()
    assert (metrics["max_total_num_tokens"] == 2 * 16384).all()  # both pools of --max-total-tokens 16384
    assert_round_robin_split(row)


def test_both_servers_served_and_wrote_the_trials_log(run):
    log = next((run["run_dir"] / "logs").glob("*[0-9a-f].log")).read_text()
    # each server logs its own start and the batches it ran; round robin sends each half of the requests
    assert log.count("The server is fired up and ready to roll!") == 2, log[-3000:]
    server_log = read_table(run["run_dir"], "server_log").to_pandas()
    assert {"prefill", "decode"} <= set(server_log["kind"])


def test_nothing_is_left_running(run):
    assert run["left"] == [], run["left"]
    assert run["routers"] == [], run["routers"]


def test_the_report_writes_the_deployment_it_measured(run):
    run_dir = run["run_dir"]
    report = (run_dir / "report.md").read_text()
    assert "2x TP1" in report and "bash deploy/launch.sh" in report, report[:3000]
    assert "Requests per server at its best load point (warm-up included): aggregated 0 on " in report
    launch = (run_dir / "deploy" / "launch.sh").read_text()
    assert launch.count("sglang.launch_server") == 2 and "sglang_router.launch_router" in launch
