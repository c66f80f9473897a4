"""Print the twin's fidelity table against published measurements and the geometric-mean errors.

    python experiments/twin_fidelity.py            # every row of grid/twin/calibration_rows.yaml
    python experiments/twin_fidelity.py --markdown # the table as docs/twin.md shows it

Rows marked ``held_out`` were named before any constant was fitted; see docs/twin.md.
"""

from __future__ import annotations

import argparse
import time

from grid.twin.fidelity import evaluate, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the rows as a Markdown table")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = evaluate()
    elapsed = time.perf_counter() - t0
    if args.markdown:
        print("| split | run | source | condition | metric | published | twin | error |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            metric = f"{r.metric} ({r.stat})" if r.stat else r.metric
            print(f"| {r.split} | {r.run_id} | {r.source} | {r.engine}: {r.condition} | {metric} | "
                  f"{r.published:,.2f} | {r.twin:,.2f} | {100 * r.error:+.1f}% |")
    else:
        print(f"{'split':9s} {'run':34s} {'metric':24s} {'published':>11s} {'twin':>11s} {'error':>8s} {'tol':>6s}")
        for r in rows:
            metric = f"{r.metric} ({r.stat})" if r.stat else r.metric
            tol = f"{100 * r.tol:.0f}%" if r.tol is not None else "-"
            print(f"{r.split:9s} {r.run_id:34s} {metric:24s} {r.published:11.2f} {r.twin:11.2f} "
                  f"{100 * r.error:+7.1f}% {tol:>6s}")
    print()
    print("geometric-mean absolute error (rows):")
    for (split, metric), (n, g) in summary(rows).items():
        print(f"  {split:9s} {metric:17s} {100 * g:5.1f}%  ({n})")
    print(f"({len(rows)} rows replayed in {elapsed:.1f} s)")


if __name__ == "__main__":
    main()
