"""A multi-node Ray cluster on this one machine, for tests and experiments/bench_multinode.py.

``python -m tests.cluster.multinode_cluster '<json list of worker nodes>'`` starts a head node (no ``grid_node``
slot, so trials run on the workers only) and one Ray node per entry (``{"resources": {...}, "num_cpus": n}``) with
``ray.cluster_utils.Cluster``: every node is a raylet of its own with its own ports and object store, exactly as on
separate machines, all on 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, grid/cluster/local.py) and under a
temp dir of its own (``RAY_TMPDIR``), so other Ray clusters on the machine are neither joined nor disturbed.

It prints one JSON line ``{"address": GCS address, "nodes": [node ids of the workers]}``, then reads commands from
stdin: ``remove <i>`` kills worker ``i`` (all its processes, raylet included; prints ``removed <i>``); end of input
shuts the cluster down. :class:`LocalCluster` drives it from a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.timing import slack

ROOT = Path(__file__).resolve().parents[2]


def cluster_env(tmpdir: str) -> dict[str, str]:
    """The environment of the cluster process and of every driver that joins it."""
    return {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": tmpdir,
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}


class LocalCluster:
    """Context manager: the cluster process, its ``address``, worker ``node_ids`` and ``env`` for drivers."""

    def __init__(self, workers: list[dict], dashboard_port: int | None = None) -> None:
        self.workers = workers
        self.dashboard_port = dashboard_port  # None: no dashboard (its state API lists tasks and actors)
        self.tmpdir = tempfile.mkdtemp(prefix="gmn", dir="/tmp")  # short: AF_UNIX paths are limited to 107 bytes
        self.env = cluster_env(self.tmpdir)

    def __enter__(self) -> LocalCluster:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.cluster.multinode_cluster",
                                      json.dumps(self.workers),
                                      *([str(self.dashboard_port)] if self.dashboard_port else [])],
                                     cwd=ROOT, env=self.env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the cluster did not start (exit {self.proc.wait(30 * slack())})")
        info = json.loads(line)
        self.address, self.node_ids = info["address"], info["nodes"]
        return self

    def remove(self, index: int) -> None:
        self.proc.stdin.write(f"remove {index}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == f"removed {index}"

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(120 * slack())
        except subprocess.TimeoutExpired:
            self.proc.kill()
        import shutil

        shutil.rmtree(self.tmpdir, ignore_errors=True)


def main(workers: list[dict], dashboard_port: int | None = None) -> None:
    import ray
    from ray.cluster_utils import Cluster

    os.makedirs(os.path.join(os.environ["RAY_TMPDIR"], "ray"), exist_ok=True)  # where Ray notes the address
    common = dict(node_ip_address="127.0.0.1", object_store_memory=80 * 1024**2,
                  temp_dir=os.path.join(os.environ["RAY_TMPDIR"], "ray"))
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, include_dashboard=dashboard_port is not None, dashboard_host="127.0.0.1",
        dashboard_port=dashboard_port, **common))
    nodes = [cluster.add_node(num_cpus=w.get("num_cpus", 1), resources=w.get("resources", {}), **common)
             for w in workers]
    cluster.wait_for_nodes()
    print(json.dumps({"address": cluster.address, "nodes": [n.node_id for n in nodes]}), flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "remove":
            cluster.remove_node(nodes[int(arg)], allow_graceful=False)
            print(f"removed {arg}", flush=True)
    cluster.shutdown()
    del ray


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
