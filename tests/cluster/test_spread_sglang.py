"""A deployment across nodes with released SGLang servers, through grid's main path on a real multi-node Ray cluster
on this machine (tests/cluster/multinode_cluster.py): ``engine=sglang`` on two CPU hosts (``hardware=cpu_host
hardware.nodes=2``), two aggregated replicas behind SGLang's router. The trial holds both nodes (a placement group
of two ``grid_node`` slots), each node's actor starts the server placed on it, the router runs on the first, the load
goes through it, and every process is reaped. It runs when experiments/real_server/setup_sglang_cpu.sh has been run
and its variables are exported (tests/engines/test_sglang_cpu.py), and skips otherwise, saying so."""

from __future__ import annotations

import json
import subprocess

import pytest

from grid.storage.parquet import read_table
from tests.cluster.multinode_cluster import LocalCluster
from tests.engines.test_sglang_cpu import ROOT, _env, _setup, sglang_processes
from tests.engines.test_sglang_deployment import REPLICAS, _router_processes, assert_round_robin_split
from tests.grid_cli import grid_argv
from tests.timing import COUNT_HOST_NOISE, slack

RUN_TIMEOUT_S = 900  # real seconds on a quiet host (two CPU servers start together: about 3 minutes on 2 cores)
pytestmark = [pytest.mark.real_sglang, pytest.mark.integration, pytest.mark.timeout(RUN_TIMEOUT_S * 4 + 300)]
CPU_NODE = {"resources": {"grid_node": 1, "grid_hw:cpu_host": 1}}
# two CPU hosts on a network: the internode figures describe it for the record (the twin does not model CPU serving)
TWO_HOSTS = ("+hardware.nodes=2", "+hardware.internode_link=ethernet", "+hardware.internode_gbps_per_gpu=1.25",
             "+hardware.internode_hop_latency_us=50")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    python, model, lib = _setup()
    assert not sglang_processes(), f"SGLang processes already running: {sglang_processes()}"
    run_dir = tmp_path_factory.mktemp("real_sglang_spread") / "run"
    env_override = f"+engine.env={{LD_LIBRARY_PATH:{lib}}}" if lib else "engine.env={}"
    with LocalCluster([CPU_NODE, CPU_NODE]) as cluster:
        cmd = grid_argv("+sweep=cpu_serving", "engine=sglang", "hardware=cpu_host", *TWO_HOSTS, "model=tiny_llama",
                        f"model.path={model}", f"engine.python={python}", "probe.enabled=false", env_override,
                        COUNT_HOST_NOISE, "sweep.grid.schedule_policy=[fcfs]", "sweep.grid.chunked_prefill_size=[4096]",
                        "sweep.configs=[]", "sweep.base.max_total_tokens=16384", "sweep.load.concurrency=[4]",
                        "+sweep.load.num_prompts=16", f"+sweep.deployments={REPLICAS}", "ray.dashboard=false",
                        f"ray.address={cluster.address}", run_dir=run_dir)
        done = subprocess.run(cmd, cwd=ROOT, env={**_env(), **cluster.env}, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S * slack())
        nodes = cluster.node_ids
    return {"run_dir": run_dir, "done": done, "nodes": nodes, "left": sglang_processes(),
            "routers": _router_processes()}


def test_the_deployment_over_two_nodes_is_measured_through_the_router(run):
    done = run["done"]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lp = read_table(run["run_dir"], "load_points").to_pandas()
    assert len(lp) == 1, lp[["label", "status"]]
    row = lp.iloc[0]
    assert (row["status"], row["trial_status"]) == ("ok", "ok"), row["trial_error_message"]
    assert json.loads(row["deployment_json"])["groups"][0]["count"] == 2
    assert row["node_id"] in run["nodes"]  # the trial's node: the first of the two, where the router ran
    # the router's command as it ran: both servers where they listened (one machine here: loopback reaches both)
    router = row["command"].splitlines()[-1]
    workers = router.split("--worker-urls ")[1].split(" --policy")[0].split()
    assert "sglang_router.launch_router" in router and len(workers) == 2, router
    assert all(w.startswith("http://127.0.0.1:") for w in workers), router
    req = read_table(run["run_dir"], "requests").to_pandas()
    assert len(req) >= 16 and (req["status"] == "ok").all() and (req["output_tokens"] == 32).all()
    metrics = read_table(run["run_dir"], "server_metrics").to_pandas()
    assert (metrics["max_total_num_tokens"] == 2 * 16384).all()  # both servers' /metrics, each on its node
    assert_round_robin_split(row)


def test_each_node_started_and_logged_its_own_server(run):
    logs = run["run_dir"] / "logs"
    first = next(p for p in logs.glob("*.log") if p.stem.isalnum() and ".node" not in p.name)
    second = first.with_name(f"{first.stem}.node1.log")
    for log in (first, second):
        text = log.read_text()
        assert text.count("The server is fired up and ready to roll!") == 1, (log, text[-3000:])
    server_log = read_table(run["run_dir"], "server_log").to_pandas()
    assert {"prefill", "decode"} <= set(server_log["kind"])  # read from both nodes' logs


def test_nothing_is_left_running_on_either_node(run):
    assert run["left"] == [], run["left"]
    assert run["routers"] == [], run["routers"]
