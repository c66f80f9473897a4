"""The twin's forecasts of published multi-server deployments against what they measured (benchmark script).

Replays every row of grid/twin/deployment_rows.yaml through the twin's deployment simulation and prints, per row and
metric, the published value, the twin's forecast and the error; docs/topology.md quotes the table.

    python experiments/pd_published.py [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grid.twin.deployment_fidelity import deployment_of, forecast, load_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args()
    head = ("row", "deployment", "metric", "published", "twin", "error")
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for row in load_rows():
        t0 = time.monotonic()
        label = deployment_of(row).label()
        for c in forecast(row):
            cells = (c.row, label, c.metric, f"{c.measured:g}", f"{c.twin:.4g}", f"{c.error:+.1%}")
            print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(f"{x:<26}" for x in cells))
        print(f"  {row['id']}: {time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
