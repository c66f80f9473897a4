"""Does the twin learn a setup from a few of its measurements? (benchmark script, not a test)

Every setup of the published rows (grid/twin/calibration_rows.yaml, rejected runs left out) with at least three runs
of one model, hardware and engine is split: the twin is calibrated (grid/twin/coefficients.py) on ``k`` of its runs
(k = 1, 2, 3; up to ``--subsets`` choices of them, evenly spread) and forecasts the others. Per metric and ``k`` it
prints the geometric-mean absolute error of those forecasts before and after calibration, over the setups none of
whose runs any constant of the twin was fitted on (``held out``) and over all of them; ``--by-setup`` adds one line
per setup. Targets: after two measured runs, at most 10% for TPOT and output tok/s and 15% for TTFT on
the held-out setups.

    python experiments/twin_calibration.py [--subsets 6] [--by-setup] [--markdown] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grid.twin.coefficients import METRICS, geomean_abs, holdout  # noqa: E402
from grid.twin.fidelity import load_runs, observation  # noqa: E402

KS = (1, 2, 3)


def setups() -> dict[tuple[str, str, str], list[dict]]:
    """(model, hardware, engine) -> its runs, for setups with at least three runs that are not rejected."""
    out: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for run in load_runs():
        if run["split"] != "rejected":
            out[(run["model"], run["hardware"], run.get("engine", ""))].append(run)
    return {k: v for k, v in out.items() if len(v) >= 3}


def split(job: tuple[tuple[str, str, str], int, int]) -> dict[str, list[tuple[float, float]]]:
    """One setup calibrated on ``k`` of its runs, ``subsets`` times (a worker process)."""
    setup, k, subsets = job
    return holdout([observation(r) for r in setups()[setup]], k, subsets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", type=int, default=6, help="calibration subsets per setup and k (evenly spread)")
    ap.add_argument("--by-setup", action="store_true", help="one line per setup as well")
    ap.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes")
    args = ap.parse_args()
    t0 = time.monotonic()
    # (pool, metric, k) -> [(before, after)]; pool: "held out" or "all"
    pooled: dict[tuple[str, str, int], list[tuple[float, float]]] = defaultdict(list)
    lines = []
    jobs = [(setup, k, args.subsets) for setup, runs in setups().items() for k in KS if k < len(runs)]
    with ProcessPoolExecutor(max_workers=args.workers) as pool_:
        for (setup, k, _), result in zip(jobs, pool_.map(split, jobs)):
            runs = setups()[setup]
            held_out = all(r["split"] == "held_out" for r in runs)
            for metric, pairs in result.items():
                for pool in ("held out", "all") if held_out else ("all",):
                    pooled[(pool, metric, k)] += pairs
                lines.append((f"{setup[0]} / {setup[1]} / {setup[2][:40]}", "held out" if held_out else "fitted",
                              len(runs), metric, k, len(pairs), geomean_abs([b for b, _ in pairs]),
                              geomean_abs([a for _, a in pairs])))
            print(f"  {setup[0]} / {setup[1]}, k={k}: done at {time.monotonic() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    sep = " | " if args.markdown else "  "
    head = ["setups", "metric", "k", "forecasts", "before", "after"]
    print(("| " if args.markdown else "") + sep.join(head) + (" |" if args.markdown else ""))
    if args.markdown:
        print("|" + "---|" * len(head))
    for pool in ("held out", "all"):
        for metric in METRICS:
            for k in KS:
                pairs = pooled.get((pool, metric, k))
                if not pairs:
                    continue
                row = [pool, metric, str(k), str(len(pairs)), f"{geomean_abs([b for b, _ in pairs]):.1%}",
                       f"{geomean_abs([a for _, a in pairs]):.1%}"]
                print(("| " if args.markdown else "") + sep.join(row) + (" |" if args.markdown else ""))
    if args.by_setup:
        print()
        for setup, kind, n, metric, k, count, before, after in lines:
            print(f"{setup:70} {kind:8} runs {n}  {metric:16} k={k}  {count:3} forecasts  "
                  f"before {before:6.1%}  after {after:6.1%}")
    print(f"\n{len(setups())} setups in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
