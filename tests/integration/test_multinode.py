"""Sweeps on the twin through a real multi-node Ray cluster on this machine (tests/integration/multinode_cluster.py):
two nodes of one hardware run two trials at once, each row names its node, the status command and Ray's state API
show what runs where, and a sweep runs only on nodes of its hardware."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from grid.server.process import free_port
from grid.status import read_status
from tests.integration.multinode_cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

VM, H200 = "rtx_pro_6000_x8_vm", "h200_x8"
WORKERS = [{"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}},
           {"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}},
           {"resources": {"grid_node": 1, f"grid_hw:{H200}": 1}}]
# every configuration runs (search=exhaustive), under the load set here rather than the sweep file's (~sweep.load)
SWEEP = ["+sweep=mem_fraction", "~sweep.load", "search=exhaustive",
         "sweep.grid.mem_fraction_static=[0.85,0.88,0.9,0.92]", "load.concurrency=[1,4]", "load.input_len=64",
         "load.output_len=64", "ray.dashboard=false", "engine.time_scale=20"]


def grid_run(cluster, run_dir, *args, popen=False):
    cmd = [sys.executable, "-m", "grid.run", *SWEEP, f"ray.address={cluster.address}", *args,
           f"hydra.run.dir={run_dir}"]
    env = {**cluster.env, "COLUMNS": "200"}
    if popen:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(WORKERS, dashboard_port=free_port("127.0.0.1")) as c:
        yield c


def _watch(cluster, run_dir, proc, seen):
    """While the sweep runs: the status command's view and the RUNNING tasks of Ray's state API, every 0.5 s."""
    from ray.util.state import list_tasks

    while proc.poll() is None:
        try:
            seen["status"].append(read_status(run_dir))
        except FileNotFoundError:
            pass
        try:
            tasks = list_tasks(address=f"http://127.0.0.1:{cluster.dashboard_port}",
                               filters=[("state", "=", "RUNNING")], raise_on_missing_output=False)
            seen["tasks"].append({(t.name, t.node_id) for t in tasks if t.name.startswith("grid-serving ")})
        except Exception as err:  # the API answers once the dashboard is up
            seen["errors"].append(repr(err))
        time.sleep(0.5)


@pytest.fixture(scope="module")
def sweep(cluster, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("multinode")
    proc = grid_run(cluster, run_dir, popen=True)
    seen = {"status": [], "tasks": [], "errors": []}
    watcher = threading.Thread(target=_watch, args=(cluster, run_dir, proc, seen))
    watcher.start()
    out, _ = proc.communicate(timeout=600)
    watcher.join()
    assert proc.returncode == 0, out[-4000:]
    return run_dir, out, seen


def test_two_trials_at_once_on_two_nodes(cluster, sweep):
    run_dir, out, _ = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    assert lp.config_hash.nunique() == 4 and len(lp) == 8  # no configuration lost or duplicated
    assert not lp.duplicated(["config_hash", "point_index"]).any()
    vm_nodes = set(cluster.node_ids[:2])
    assert set(lp.node_id) == vm_nodes  # both nodes of the sweep's hardware worked; the H200 node did not
    assert lp.node_hostname.notna().all() and lp.gpu_uuids.isna().all()  # the twin: no NVML GPUs
    windows = lp.groupby("config_hash").agg(node=("node_id", "first"), start=("launch_unix_ns", "min"),
                                            end=("finished_unix_ns", "max"), cmd=("command", "first"))
    overlapping = [(a, b) for a in windows.itertuples() for b in windows.itertuples()
                   if a.node != b.node and a.start < b.end and b.start < a.end]
    assert overlapping, windows  # two trials measured at the same time, on different nodes
    a, b = overlapping[0]
    port = lambda cmd: cmd.split("--port ")[1].split()[0]  # noqa: E731
    assert (a.node, port(a.cmd)) != (b.node, port(b.cmd))  # each its own server (own node actor, own process)
    assert "Node " in out and "grid_node slot" in out


def test_every_table_names_the_node(cluster, sweep):
    run_dir, _, _ = sweep
    for table in ("requests", "server_log", "server_metrics", "gpu_telemetry"):
        df = pd.read_parquet(run_dir / "parquet" / table)
        assert len(df) and df.node_id.notna().all() and set(df.node_id) <= set(cluster.node_ids[:2]), table
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    req = pd.read_parquet(run_dir / "parquet" / "requests")
    merged = req.merge(lp[["config_hash", "node_id"]].drop_duplicates(), on="config_hash", suffixes=("", "_lp"))
    assert (merged.node_id == merged.node_id_lp).all()  # a trial's requests name the node its load points name
    assert "| node |" in (run_dir / "report.md").read_text()


def test_running_trials_visible_while_the_sweep_runs(cluster, sweep):
    run_dir, _, seen = sweep
    # the status command (run directory only): at some moment two configurations ran, on two nodes
    both = [s for s in seen["status"] if len({m["node_id"] for m in s.running}) == 2]
    assert both, [(len(s.running), len(s.done)) for s in seen["status"]]
    assert all(m["label"].startswith("mem_fraction_static=") for m in both[0].running)
    # Ray's state API: each node's server actor runs a task named after the configuration it serves
    serving = set().union(*seen["tasks"]) if seen["tasks"] else set()
    assert {node for _, node in serving} == set(cluster.node_ids[:2]), (serving, seen["errors"][-3:])
    assert all(name.startswith("grid-serving mem_fraction: mem_fraction_static=") for name, _ in serving)
    # after the sweep: 4 done, nothing running or left, per node
    final = subprocess.run([sys.executable, "-m", "grid.status", str(run_dir)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert final.returncode == 0 and final.stdout.startswith("4 done, 0 running, 0 left of 4"), final.stdout
    assert final.stdout.count("  node ") == 2


def test_sweep_runs_only_on_nodes_of_its_hardware(cluster, tmp_path):
    out = grid_run(cluster, tmp_path, f"hardware={H200}", "sweep.grid.mem_fraction_static=[0.85,0.9]")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lp = pd.read_parquet(tmp_path / "parquet" / "load_points")
    assert set(lp.node_id) == {cluster.node_ids[2]} and set(lp.hardware) == {H200}


def test_no_node_of_the_hardware_is_a_clear_error(cluster, tmp_path):
    out = grid_run(cluster, tmp_path, "hardware=a100_x1")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert "no node of the Ray cluster declares hardware=a100_x1" in text
    assert f"{VM}: 2 nodes" in text and f"{H200}: 1 node" in text and "ray.any_hardware=true" in text
    assert not (tmp_path / "parquet" / "load_points").exists()


def test_node_lost_mid_trial_is_skipped_then_run_on_another_node(tmp_path):
    workers = [{"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}} for _ in range(2)]
    with LocalCluster(workers) as cluster:
        proc = grid_run(cluster, tmp_path, "load.concurrency=[1,4]", "load.output_len=256", "engine.time_scale=5",
                        popen=True)
        victim, deadline = None, time.monotonic() + 300
        while victim is None and proc.poll() is None and time.monotonic() < deadline:
            try:
                running = read_status(tmp_path).running
            except FileNotFoundError:
                running = []
            victim = next((m for m in running if m["node_id"] == cluster.node_ids[1]
                           and time.time() - m["started_unix_s"] > 2), None)
            time.sleep(0.3)
        assert victim is not None, "no trial ran on the second node"
        cluster.remove(1)  # its raylet and every process of the node, trial and server included
        out, _ = proc.communicate(timeout=600)
    (tmp_path / "driver.out").write_text(out)
    assert proc.returncode == 0, out[:6000]
    assert f"skipped (node_lost)[/] {victim['label']}" in out or f"skipped (node_lost) {victim['label']}" in out, out
    assert "Running 1 configuration(s) again whose node was lost" in out
    assert "Leftover" not in out  # the lost node's server died with its actor (watchdog); nothing to reap
    lp = pd.read_parquet(tmp_path / "parquet" / "load_points")
    assert lp.config_hash.nunique() == 4 and len(lp) == 8 and not lp.duplicated(["config_hash", "point_index"]).any()
    assert set(lp.trial_status) == {"ok"}
    rerun = lp[lp.label == victim["label"]]
    assert set(rerun.node_id) == {cluster.node_ids[0]}  # measured again on the node that was left
