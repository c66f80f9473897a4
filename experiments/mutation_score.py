"""Mutation score per module from mutmut's results in mutants/ (run experiments/mutation.sh first).

Usage: python experiments/mutation_score.py [MODULE ...]   (default: every module with results)

Score = killed / (killed + survived + timeout + suspicious), over the mutants of the functions in scope (the probe's
I/O functions are out of scope: see experiments/mutation.sh). Mutants with no test that reaches them ("no tests")
are counted apart and listed, since none of them should exist in scope. Exit status 1 when a module is under
``--target`` percent (default 85).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

# mutmut's exit-code meanings (mutmut/stats.py, mutmut 3.x)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}
OUT_OF_SCOPE = {"grid.server.probe": ("x_run_probe__", "x__post__", "x_probe__")}


def results(root: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(root.glob("grid/**/*.py.meta")):
        module = ".".join(meta.relative_to(root).with_suffix("").with_suffix("").parts)
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        skip = OUT_OF_SCOPE.get(module, ())
        out[module] = {k: STATUS.get(v, "suspicious") for k, v in codes.items()
                       if not any(f".{s}" in k for s in skip)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs="*")
    ap.add_argument("--root", default="mutants")
    ap.add_argument("--target", type=float, default=85.0)
    args = ap.parse_args()
    by_module = results(Path(args.root))
    modules = args.modules or sorted(by_module)
    worst = 100.0
    print(f"{'module':28} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} {'no tests':>8} "
          f"{'unchecked':>9} {'score':>6}")
    for module in modules:
        counts = Counter(by_module.get(module, {}).values())
        judged = counts["killed"] + counts["survived"] + counts["timeout"] + counts["suspicious"]
        score = 100.0 * counts["killed"] / judged if judged else float("nan")
        worst = min(worst, score) if judged else worst
        print(f"{module:28} {sum(counts.values()):7} {counts['killed']:6} {counts['survived']:8} "
              f"{counts['timeout']:7} {counts['no tests']:8} {counts['not checked']:9} {score:5.1f}%")
    return 0 if worst >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
