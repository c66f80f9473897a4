"""Single-machine mode as a new user on a shared machine meets it: another process holds the
dashboard port, RAY_ADDRESS points elsewhere and a `ray start` cluster is recorded as the latest one. grid starts its
own local cluster anyway, moves the dashboard to a free port and says so, and nothing it starts (Ray's GCS, raylet,
object manager, workers, dashboard, dashboard and runtime-env agents, the twin server) listens beyond 127.0.0.1."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from tests.timing import slack
from tests.grid_cli import grid_argv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}

ARGS = ["model=llama3_1_8b", "hardware=h100_x1", "load.concurrency=[1]", "load.repeats=3", "load.min_prompts=2",
        "load.input_len=16", "load.output_len=256", "engine.startup_time_scale=50",
        "engine.stop_grace_s=3", "ray.num_cpus=2",
        # the wall clock, so that the twin serves for seconds, long enough to be seen listening (virtual: under one)
        "engine.clock=real", "engine.time_scale=2"]


def niceness(procs) -> dict[str, int]:
    """Niceness by process name of the processes that do a trial's work: Ray's workers for grid's actors and Tune's
    trials, and the server and its watchdog (not Ray's idle pool, started before any job)."""
    out = {}
    for p in procs:
        try:
            name = " ".join(p.cmdline()[:3]) or p.name()
            if (name.startswith("ray::") and not name.startswith("ray::IDLE")) or "grid." in name:
                out[name] = p.nice()
        except psutil.Error:
            continue
    return out


def listeners(procs) -> dict[tuple[str, int], str]:
    out = {}
    for p in procs:
        try:
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out[(c.laddr.ip, c.laddr.port)] = name
        except psutil.Error:
            continue
    return out


def grid_processes(driver: psutil.Process, registry: Path) -> list[psutil.Process]:
    """The driver, its descendants (Ray's processes and workers) and the server groups it recorded (the servers
    leave the driver's tree: the watchdog double-forks)."""
    procs = [driver, *driver.children(recursive=True)]
    pgids = {json.loads(f.read_text())["pgid"] for f in registry.glob("*.json")}
    procs += [p for p in psutil.process_iter() if _pgid(p) in pgids]
    return procs


def _pgid(p):
    try:
        return os.getpgid(p.pid)
    except OSError:
        return None


def test_own_loopback_cluster_despite_held_port_and_other_clusters(tmp_path):
    holder = socket.socket()  # "another sweep's dashboard"
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    held = holder.getsockname()[1]
    ray_tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    Path(ray_tmp, "ray_current_cluster").write_text("127.0.0.1:9")  # a `ray start` cluster, "the latest one"
    env = {**os.environ, "COLUMNS": "200", "RAY_ADDRESS": "127.0.0.1:9", "RAY_TMPDIR": ray_tmp}
    cmd = grid_argv(*ARGS, f"ray.dashboard_port={held}", run_dir=tmp_path)
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[tuple[str, int], str] = {}
    nice: dict[str, int] = {}
    try:
        proc = psutil.Process(driver.pid)
        deadline = time.monotonic() + 300 * slack()
        while driver.poll() is None and time.monotonic() < deadline:
            procs = grid_processes(proc, tmp_path / "processes")
            seen.update(listeners(procs))
            nice.update(niceness(procs))
            time.sleep(0.3)
        out = driver.communicate(timeout=60 * slack())[0]
    finally:
        if driver.poll() is None:
            driver.kill()
        holder.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert driver.returncode == 0, out[-4000:]
    assert f"ray.dashboard_port {held} is in use by another process; the Ray dashboard uses port" in out
    assert "RAY_ADDRESS=127.0.0.1:9 is ignored" in out and "Ray cluster: local, GCS at 127.0.0.1:" in out
    assert "Traceback" not in out
    dashboard = int(out.split("the Ray dashboard uses port ")[1].split()[0])
    gcs = int(out.split("GCS at 127.0.0.1:")[1].split()[0])
    names = set(seen.values())
    # a process name is the kernel's 15-character comm ("ray::DashboardA") when psutil cannot read the full one
    assert {"gcs_server", "raylet"} <= names and any(n.startswith("ray::DashboardA") for n in names), seen
    ports = {port for _, port in seen}
    assert {gcs, dashboard} <= ports, seen
    command = pd.read_parquet(tmp_path / "parquet" / "load_points").command[0].split()
    server_port = int(command[command.index("--port") + 1])
    assert server_port in ports                                    # the twin was seen listening
    assert {ip for ip, _ in seen} <= LOOPBACK, {k: v for k, v in seen.items() if k[0] not in LOOPBACK}
    assert list((tmp_path / "processes").glob("*.json")) == []     # every server group stopped and unrecorded
    # the server actor, the trial (the load generator) and the twin run at the driver's priority, not Ray's
    # worker niceness 15: at 15 they got a sliver of a busy host's CPU (grid/cluster/local.py)
    assert any(n.startswith("ray::ServerActor") for n in nice) and any("grid.twin" in n for n in nice), nice
    assert any("train" in n for n in nice), nice
    assert set(nice.values()) == {0}, nice
