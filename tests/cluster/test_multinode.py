"""Sweeps on the twin through a real multi-node Ray cluster on this machine (tests/cluster/multinode_cluster.py):
two nodes of one hardware run two trials at once, each row names its node, the status command and Ray's state API
show what runs where, a sweep runs only on nodes of its hardware, and a node lost mid-trial (also together with a
killed driver) loses nothing."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from grid.server.process import free_port, group_alive
from grid.status import read_status
from tests.cluster.multinode_cluster import LocalCluster
from tests.cluster.test_cluster_network import niceness
from tests.sweep.test_resume import wait_for
from tests.timing import slack
from tests.grid_cli import grid_argv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

VM, H200 = "rtx_pro_6000_x8_vm", "h200_x8"
WORKERS = [{"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}},
           {"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}},
           {"resources": {"grid_node": 1, f"grid_hw:{H200}": 1}}]
# every configuration runs (search=exhaustive), under the load set here rather than the sweep file's (~sweep.load)
SWEEP = ["+sweep=mem_fraction", "~sweep.load", "search=exhaustive",
         "sweep.grid.mem_fraction_static=[0.85,0.88,0.9,0.92]", "load.concurrency=[1,4]", "load.input_len=64",
         "load.output_len=64", "ray.dashboard=false",
         "load.min_prompts=8"]  # orchestration, not tails (tests/config/test_tails.py): 8 requests per point


def grid_run(cluster, run_dir, *args, popen=False):
    cmd = grid_argv(*SWEEP, f"ray.address={cluster.address}", *args, run_dir=run_dir)
    env = {**cluster.env, "COLUMNS": "200"}
    if popen:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600 * slack())


def _server_group(run_dir, config_hash):
    """The process group of the server last launched for ``config_hash`` (its supervisor's state file)."""
    state = Path(run_dir) / "logs" / f"{config_hash}.log.state"
    return int(state.read_text().split('"pgid": ')[1].split(",")[0])


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(WORKERS, dashboard_port=free_port("127.0.0.1")) as c:
        yield c


def _watch(cluster, run_dir, proc, seen):
    """While the sweep runs: the status command's view, the RUNNING tasks of Ray's state API and the niceness of
    the processes doing the trials' work, every 0.5 s."""
    from ray.util.state import list_tasks

    while proc.poll() is None:
        seen["nice"].update(niceness(psutil.process_iter()))
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
    seen = {"status": [], "tasks": [], "errors": [], "nice": {}}
    watcher = threading.Thread(target=_watch, args=(cluster, run_dir, proc, seen))
    watcher.start()
    out, _ = proc.communicate(timeout=600 * slack())
    watcher.join()
    assert proc.returncode == 0, out[-4000:]
    seen["tasks"].append(_serving_tasks_after(cluster))
    return run_dir, out, seen


def _serving_tasks_after(cluster) -> set[tuple[str, str]]:
    """The ``grid-serving`` tasks Ray's state API lists once the sweep is over, in any state (what the dashboard's
    task table shows after the run): a trial on the virtual clock may finish before a poll of RUNNING tasks sees it,
    since workers report task events to the dashboard about a second late. Waits for both serving nodes to appear."""
    from ray.util.state import list_tasks

    deadline, found = time.monotonic() + 30 * slack(), set()
    while time.monotonic() < deadline:
        tasks = list_tasks(address=f"http://127.0.0.1:{cluster.dashboard_port}", limit=10_000,
                           raise_on_missing_output=False)
        found = {(t.name, t.node_id) for t in tasks if t.name.startswith("grid-serving ")}
        if len({node for _, node in found}) >= 2:
            break
        time.sleep(1)
    return found


def test_two_trials_at_once_on_two_nodes(cluster, sweep):
    run_dir, out, _ = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    assert lp.config_hash.nunique() == 4 and len(lp) == 8  # no configuration lost or duplicated
    assert not lp.duplicated(["config_hash", "point_index"]).any()
    vm_nodes = set(cluster.node_ids[:2])
    assert set(lp.node_id) == vm_nodes  # both nodes of the sweep's hardware worked; the H200 node did not
    assert set(lp.hardware) == {VM}
    assert lp.node_hostname.notna().all() and lp.gpu_uuids.isna().all()  # the twin: no NVML GPUs
    windows = lp.groupby("config_hash").agg(node=("node_id", "first"), start=("launch_unix_ns", "min"),
                                            end=("finished_unix_ns", "max"), cmd=("command", "first"))
    overlapping = [(a, b) for a in windows.itertuples() for b in windows.itertuples()
                   if a.node != b.node and a.start < b.end and b.start < a.end]
    assert overlapping, windows  # two trials measured at the same time, on different nodes
    a, b = overlapping[0]
    port = lambda cmd: cmd.split("--port ")[1].split()[0]  # noqa: E731
    # each its own server: two process groups listening at once on this one host, so on two ports
    assert port(a.cmd) != port(b.cmd)
    assert _server_group(run_dir, a.Index) != _server_group(run_dir, b.Index)
    assert "Node " in out and "grid_node slot" in out


def test_the_joined_clusters_workers_run_at_the_drivers_priority(sweep):
    # Ray starts a cluster's workers at niceness 15; grid's job asks for 0 in its runtime environment, on a cluster
    # it joins as on its own (grid/cluster/local.py WORKER_ENV): at 15 a busy host left them a sliver of the CPU
    nice = sweep[2]["nice"]
    work = {n: v for n, v in nice.items() if n.startswith("ray::ServerActor") or "train" in n or "grid.twin" in n}
    assert any(n.startswith("ray::ServerActor") for n in work) and any("grid.twin" in n for n in work), nice
    assert any("train" in n for n in work), nice
    assert set(work.values()) == {0}, work


def test_every_table_names_the_node(cluster, sweep):
    run_dir, _, _ = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    where = lp[["config_hash", "node_id", "node_hostname"]].drop_duplicates()
    assert len(where) == 4 and where.node_hostname.notna().all()  # one node per configuration
    for table in ("requests", "server_log", "server_metrics", "gpu_telemetry"):
        df = pd.read_parquet(run_dir / "parquet" / table)
        assert len(df) and df.node_id.notna().all() and df.node_hostname.notna().all(), table
        assert set(df.config_hash) == set(lp.config_hash), table  # every trial wrote rows here
        merged = df.merge(where, on="config_hash", how="left", suffixes=("", "_lp"))
        assert len(merged) == len(df), table
        # every row names the node its configuration's load points name (the node its server ran on)
        assert (merged.node_id == merged.node_id_lp).all(), table
        assert (merged.node_hostname == merged.node_hostname_lp).all(), table
    assert pd.read_parquet(run_dir / "parquet" / "gpu_telemetry").gpu_uuid.isna().all()  # modelled GPUs
    assert "| node |" in (run_dir / "report.md").read_text()


def test_running_trials_visible_while_the_sweep_runs(cluster, sweep):
    run_dir, _, seen = sweep
    # the status command (run directory only): at some moment two configurations ran, on two nodes
    both = [s for s in seen["status"] if len({m["node_id"] for m in s.running}) == 2]
    assert both, [(len(s.running), len(s.done)) for s in seen["status"]]
    assert all(m["label"].startswith("mem_fraction_static=") for m in both[0].running)
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    ran_on = set(zip(lp.label, lp.node_id))  # (configuration, node) of every trial, from the tables
    marked = {(m["label"], m["node_id"]) for s in seen["status"] for m in s.running}
    assert marked == ran_on  # every trial was seen running, with its configuration, on the node it ran on
    # Ray's state API: each node's server actor runs a task named after the configuration it serves (seen RUNNING
    # while the sweep ran, or listed after it)
    serving = set().union(*seen["tasks"])
    assert {node for _, node in serving} == set(cluster.node_ids[:2]), (serving, seen["errors"][-3:])
    assert all(name.startswith("grid-serving mem_fraction: mem_fraction_static=") for name, _ in serving)
    # ``grid-serving <run>: <label> @ <host>``: the configuration the node served then is the one that ran there
    assert {(name.split(": ", 1)[1].rsplit(" @ ", 1)[0], node) for name, node in serving} <= ran_on
    # after the sweep: 4 done, nothing running or left, per node
    final = subprocess.run([sys.executable, "-m", "grid.status", str(run_dir)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60 * slack())
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


def measuring_on(node_id, run_dir, proc, timeout_s=300.0):
    """The running marker (grid/status.py) of the first trial seen measuring a load point on ``node_id``: its
    server's log shows the samplers' ``GET /grid/telemetry`` (the twin's GPU telemetry, polled only while a load
    point runs). Raises ``AssertionError`` when none does within ``timeout_s x slack()`` or the driver ``proc`` ends
    first."""
    deadline = time.monotonic() + timeout_s * slack()
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            running = read_status(run_dir).running
        except FileNotFoundError:
            running = []
        for mark in running:
            log = Path(run_dir) / "logs" / f"{mark['config_hash']}.log"
            if mark["node_id"] == node_id and log.exists() and "GET /grid/telemetry" in log.read_text():
                return mark
        time.sleep(0.2)
    raise AssertionError(f"no trial measured on node {node_id[:12]} (driver exit {proc.poll()})")


def test_node_lost_mid_trial_is_skipped_then_run_on_another_node(tmp_path):
    workers = [{"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}} for _ in range(2)]
    with LocalCluster(workers) as cluster:
        # the wall clock at 5x: a trial lasts long enough in real time for its node to be removed while it measures
        proc = grid_run(cluster, tmp_path, "load.concurrency=[1,4]", "load.output_len=256", "engine.clock=real",
                        "engine.time_scale=5", popen=True)
        victim = measuring_on(cluster.node_ids[1], tmp_path, proc)
        cluster.remove(1)  # its raylet and every process of the node, trial and server included
        out, _ = proc.communicate(timeout=600 * slack())
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


def test_node_lost_and_driver_killed_then_resume(tmp_path, printed):
    """Both faults in one sweep: a worker node's raylet is killed while its trial measures, and once the driver has
    recorded that trial ``skipped`` / ``node_lost`` (before it could run it again) the driver is SIGKILLed too. The
    same command on the same run directory then measures the lost configuration on the node left, with those the
    killed driver never finished (usually one was measuring on the other node when it died, and one had not started),
    and every configuration is in the tables exactly once."""
    workers = [{"resources": {"grid_node": 1, f"grid_hw:{VM}": 1}} for _ in range(2)]
    # the wall clock at 5x: the victim is still measuring when its node is removed (on the virtual clock a trial of
    # these points can end between the marker's read and the removal, and record ok)
    args = ("sweep.grid.mem_fraction_static=[0.85,0.88,0.9]", "load.output_len=128", "engine.clock=real",
            "engine.time_scale=5")
    lp_dir = tmp_path / "parquet" / "load_points"
    with LocalCluster(workers) as cluster:
        lost_node, left_node = cluster.node_ids[1], cluster.node_ids[0]
        driver = grid_run(cluster, tmp_path, *args, popen=True)
        try:
            victim = measuring_on(lost_node, tmp_path, driver)
            victim_group = _server_group(tmp_path, victim["config_hash"])
            cluster.remove(1)  # its raylet and every process of the node, trial and server included
            lost_file = lp_dir / f"{victim['config_hash']}.parquet"
            wait_for(lambda: lost_file.exists() or driver.poll() is not None, 120 * slack(), "the lost trial's record")
            assert driver.poll() is None, driver.stdout.read()
            os.kill(driver.pid, signal.SIGKILL)
            first, _ = driver.communicate(timeout=30 * slack())
        finally:
            if driver.poll() is None:
                driver.kill()
        (tmp_path / "driver1.out").write_text(first)
        assert driver.returncode == -signal.SIGKILL
        assert "Running 1 configuration(s) again whose node was lost" not in first  # killed before its re-run

        before = pd.read_parquet(lp_dir)
        lost = before[before.config_hash == victim["config_hash"]]
        assert len(lost) == 2 and set(lost.point_index) == {0, 1}
        assert set(lost.trial_status) == {"skipped"} and set(lost.trial_error_class) == {"node_lost"}
        assert set(lost.status) == {"not_run"} and set(lost.node_id) == {lost_node}
        assert set(lost.trial_id) == {victim["trial_id"]}
        kept = before[before.config_hash != victim["config_hash"]]
        assert set(kept.trial_status) <= {"ok"} and set(kept.node_id) <= {left_node}
        status = read_status(tmp_path)  # what `python -m grid.status` shows between the two drivers
        assert status.driver_alive is False and status.done[victim["config_hash"]] == "skipped"
        assert victim["label"] in status.left and {m["node_id"] for m in status.running} <= {left_node}
        assert len(status.left) + len(status.running) == 3 - kept.config_hash.nunique()  # running: interrupted
        # the lost node's server is gone with its node (watchdog), and the killed driver's servers with it
        wait_for(lambda: not group_alive(victim_group), 60 * slack(), "the lost node's server group to exit")
        groups = [_server_group(tmp_path, s.name.split(".")[0]) for s in (tmp_path / "logs").glob("*.log.state")]
        wait_for(lambda: not any(group_alive(g) for g in groups), 60 * slack(),
                 "the killed driver's server groups to exit")

        out = grid_run(cluster, tmp_path, *args)  # the same command, same run directory: resume
    (tmp_path / "driver2.out").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    plan = printed.plan_line(out.stdout)
    # a skipped (node_lost) configuration is not charged to it: it counts as not recorded and runs again
    assert (plan["configurations"], plan["recorded"], plan["to_run"]) == (3, kept.config_hash.nunique(),
                                                                          3 - kept.config_hash.nunique())
    assert "skipped (node_lost)" not in out.stdout and "Leftover" not in out.stdout
    after = pd.read_parquet(lp_dir)
    assert len(after) == 6 and after.config_hash.nunique() == 3  # every configuration once, none lost
    assert not after.duplicated(["config_hash", "point_index"]).any()
    assert set(after.trial_status) == {"ok"} and set(after.node_id) == {left_node}
    again = after[after.config_hash == victim["config_hash"]]
    assert again.trial_id.nunique() == 1 and again.trial_id.iloc[0] != victim["trial_id"]  # by a new trial
    key = ["config_hash", "point_index"]
    kept_after = after.set_index(key).loc[kept.set_index(key).index]
    assert list(kept_after.trial_id) == list(kept.trial_id)  # what completed before the kill did not run again
    assert list(kept_after.finished_unix_ns) == list(kept.finished_unix_ns)
    requests = pd.read_parquet(tmp_path / "parquet" / "requests")
    assert requests.groupby("config_hash").size().to_dict() == \
        after.groupby("config_hash").num_prompts.sum().to_dict()  # each configuration's requests once
    assert set(requests.node_id) == {left_node}  # nothing of the lost trial's measuring was kept
