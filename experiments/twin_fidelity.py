"""Print the twin's fidelity table against published measurements and the geometric-mean errors.

    python experiments/twin_fidelity.py            # every row of grid/twin/calibration_rows.yaml
    python experiments/twin_fidelity.py --markdown # the table as docs/twin.md shows it
    python experiments/twin_fidelity.py --write-uncertainty  # also rewrite grid/twin/uncertainty_table.yaml

Rows marked ``held_out`` were named before any constant was fitted; see docs/twin.md.
"""

from __future__ import annotations

import argparse
import time

import yaml

from grid.twin.fidelity import evaluate, summary, uncertainty_cells
from grid.twin.uncertainty import TABLE_FILE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the rows as a Markdown table")
    ap.add_argument("--write-uncertainty", action="store_true",
                    help=f"write the spread table grid.twin.uncertainty reads ({TABLE_FILE.name})")
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
    cells = uncertainty_cells(rows)
    print()
    print("relative spread (RMS of twin/published - 1) by metric / model kind / GPU family:")
    for key, cell in cells.items():
        print(f"  {key:36s} {100 * cell['rms_rel_error']:5.1f}%  ({cell['rows']})")
    if args.write_uncertainty:
        header = ("# Written by `python experiments/twin_fidelity.py --write-uncertainty` from the replay of\n"
                  "# grid/twin/calibration_rows.yaml (fitted + held-out rows); read by grid.twin.uncertainty.\n")
        TABLE_FILE.write_text(header + yaml.safe_dump({"cells": cells}, sort_keys=True))
        print(f"wrote {TABLE_FILE}")


if __name__ == "__main__":
    main()
