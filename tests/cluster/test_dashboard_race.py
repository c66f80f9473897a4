"""Two runs started together: the dashboard port grid checked as free is taken by the other run's
Ray before grid's own Ray binds it. Ray 2.60 then failed with a traceback and exit 1 ('Failed to find a valid port
for dashboard after 0 retries'); grid starts again on another port and says so."""

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from .test_cluster_network import ARGS
from tests.timing import slack
from tests.grid_cli import grid_argv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.mark.unit
def test_both_of_rays_port_taken_wordings_are_recognised():
    from grid.cluster.local import _dashboard_port_taken

    # ray/_private/services.py start_api_server and ray/dashboard/http_server_head.py (Ray 2.60)
    assert _dashboard_port_taken(ValueError("Failed to bind to 127.0.0.1:8265 because it's already occupied. You can "
                                            "use `ray start --dashboard-port ...`"))
    assert _dashboard_port_taken(Exception("\n...\nException: Failed to find a valid port for dashboard after 0 "
                                           "retries: [Errno 98] error while attempting to bind on address"))
    assert not _dashboard_port_taken(RuntimeError("Failed to start the GCS"))


RACE = textwrap.dedent("""
    import json, socket
    from grid.cluster.local import ray_init_args, start_ray
    from grid.config.schema import RaySpec
    from grid.server.process import free_port
    # a port checked free (the default 8265 may be another run's on this host: a note of its own)
    init = ray_init_args(RaySpec(num_cpus=1, dashboard_port=free_port("127.0.0.1")), "grid", "grid_node")
    checked = init.kwargs["dashboard_port"]
    other = socket.socket()                                           # the other run's Ray takes it now
    other.bind(("127.0.0.1", checked))
    other.listen(1)
    ctx = start_ray(init)
    print(json.dumps({"checked": checked, "url": ctx.dashboard_url, "notes": init.notes}))
""")


def test_a_dashboard_port_taken_after_the_check_moves_to_another_port(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", RACE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240 * slack())
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    got = json.loads(out.stdout.strip().splitlines()[-1])
    port = int(got["url"].rsplit(":", 1)[1])
    assert port != got["checked"]
    assert got["notes"] == [f"the Ray dashboard's port {got['checked']} was taken by another process while Ray "
                            f"started; the Ray dashboard uses port {port}"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_runs_started_in_the_same_second_both_complete(tmp_path):
    # both ask for the same dashboard port; whichever Ray binds second moves (before its check or after it)
    port = _free_port()
    runs = []
    for name in ("a", "b"):
        ray_tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")
        env = {**os.environ, "COLUMNS": "200", "RAY_TMPDIR": ray_tmp}
        env.pop("RAY_ADDRESS", None)
        cmd = grid_argv(*[a for a in ARGS if not a.startswith("ray.num_cpus")], "ray.num_cpus=1",
                        f"ray.dashboard_port={port}", run_dir=tmp_path / name)
        runs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True))
    outs = [r.communicate(timeout=600 * slack())[0] for r in runs]
    for name, run, out in zip("ab", runs, outs):
        assert run.returncode == 0, out[-4000:]
        assert "Traceback" not in out
        points = pd.read_parquet(tmp_path / name / "parquet" / "load_points")
        assert set(points.status) == {"ok"} and len(points) == 3  # concurrency 1, 3 repeats
    dashboards = [int(out.split("Ray dashboard: http://127.0.0.1:")[1].split()[0]) for out in outs]
    assert len(set(dashboards)) == 2 and port in dashboards
