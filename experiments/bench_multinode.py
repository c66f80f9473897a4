"""Wall time of one sweep on the twin on one node and on two nodes of a local multi-node Ray cluster.

    python experiments/bench_multinode.py            # 6 configurations, ~3-5 min on 2 cores
    python experiments/bench_multinode.py --configs 4

Each run starts a fresh cluster (tests/cluster/multinode_cluster.py: a head node without a ``grid_node`` slot and
N worker nodes with one slot each, all on 127.0.0.1), runs ``python -m grid.run`` with ``ray.address=<cluster>``
into a new run directory and times it from start to exit (Ray start-up of the driver included, cluster start-up
not). It prints both wall times and their ratio. The twin's servers share the machine's CPUs, so on a small machine
the two-node run is slower per trial than on one node; the ratio is a floor for real GPU nodes, where each node has
its own GPUs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.multinode_cluster import LocalCluster  # noqa: E402

HW = "rtx_pro_6000_x8_vm"
FRACTIONS = [0.8, 0.82, 0.85, 0.88, 0.9, 0.92, 0.94, 0.95]


def sweep_wall_s(nodes: int, configs: int) -> float:
    workers = [{"resources": {"grid_node": 1, f"grid_hw:{HW}": 1}} for _ in range(nodes)]
    with LocalCluster(workers) as cluster, tempfile.TemporaryDirectory(prefix="gbench") as run_dir:
        fractions = ",".join(str(f) for f in FRACTIONS[:configs])
        cmd = [sys.executable, "-m", "grid.run", "+sweep=mem_fraction", "~sweep.load", "search=exhaustive",
               f"sweep.grid.mem_fraction_static=[{fractions}]",
               "load.concurrency=[1,4,8]", "load.input_len=128", "load.output_len=128", "ray.dashboard=false",
               f"hardware={HW}", f"ray.address={cluster.address}", f"hydra.run.dir={run_dir}"]
        t0 = time.monotonic()
        out = subprocess.run(cmd, cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - t0
        if out.returncode != 0:
            raise SystemExit(f"sweep on {nodes} node(s) failed ({out.returncode}):\n"
                             f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=6,
                        help=f"configurations in the sweep (at most {len(FRACTIONS)})")
    args = parser.parse_args()
    one = sweep_wall_s(1, args.configs)
    print(f"1 node : {one:6.1f} s for {args.configs} configurations", flush=True)
    two = sweep_wall_s(2, args.configs)
    print(f"2 nodes: {two:6.1f} s for {args.configs} configurations")
    print(f"ratio 1 node / 2 nodes: {one / two:.2f}")


if __name__ == "__main__":
    main()
