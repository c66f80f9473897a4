"""Does the test suite pass on a machine loaded to 4x its cores? (benchmark script, not a test)

Starts ``--per-core`` CPU-burning processes per core (default 4), waits until the 1-minute load average has risen to
three quarters of the target (it lags a change in load by about a minute; tests/timing.py ``slack`` reads it), runs
pytest with the given arguments under that load, and prints its outcome, the wall time and the load average at the
start and end.

    python experiments/loaded_suite.py [--per-core 4] [-- pytest arguments]
    python experiments/loaded_suite.py -- tests/server tests/loadgen/test_client_scripted.py -q
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURN = "while True: pass"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-core", type=float, default=4.0, help="CPU burners per core")
    ap.add_argument("--settle-s", type=float, default=180.0, help="longest wait for the load average to rise")
    ap.add_argument("pytest_args", nargs="*", default=["-q", "-p", "no:cacheprovider"])
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    n = max(1, round(args.per_core * cores))
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]
    try:
        t0 = time.monotonic()
        while os.getloadavg()[0] < 0.75 * n and time.monotonic() - t0 < args.settle_s:
            time.sleep(5)
        start_load = os.getloadavg()[0]
        t1 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "pytest", *args.pytest_args], cwd=ROOT)
        wall = time.monotonic() - t1
        end_load = os.getloadavg()[0]
    finally:
        for b in burners:
            b.kill()
    print(f"\n{n} CPU burners on {cores} cores: pytest exit status {out.returncode} in {wall:.0f} s; 1-minute load "
          f"average {start_load:.1f} at the start ({time.monotonic() - t0 - wall:.0f} s after the burners started), "
          f"{end_load:.1f} at the end")
    sys.exit(out.returncode)


if __name__ == "__main__":
    main()
