"""Command line: ``python -m grid.compare RUN_A RUN_B [--out FILE]``: the configurations both runs measured, side by
side, with what got faster, slower, broke or was fixed (grid/report/compare.py). RUN_A and RUN_B are run directories
(``outputs/<name>``); A is "before" (e.g. the older SGLang release). Exit status 0, or 2 for a missing run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grid.report.compare import compare, markdown
from grid.storage.parquet import read_points, table_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grid.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path, help="run directory measured first (before)")
    parser.add_argument("run_b", type=Path, help="run directory measured second (after)")
    parser.add_argument("--out", type=Path, help="also write the comparison to this markdown file")
    args = parser.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not any(table_dir(run, "load_points").glob("*.parquet")):
            print(f"{run}: no parquet/load_points/*.parquet here (not a grid run directory?)", file=sys.stderr)
            return 2
    rows = [read_points(run) for run in (args.run_a, args.run_b)]
    text = markdown(compare(*rows), str(args.run_a), str(args.run_b))
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
