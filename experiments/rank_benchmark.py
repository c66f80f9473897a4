"""How long does the twin take to rank a configuration space of 1,000+ in virtual time? (Target:
under a minute on 2 cores; a benchmark script, not a timed test.)

The space is the joint sweep (conf/sweep/joint.yaml, 640 configurations) with a finer memory-fraction axis (7 values
instead of 4): 7 x 4 x 5 x 2 x 2 x 2 = 1,120 configurations. Every one is checked before launch and forecast by
grid/search/plan.py ``build`` (grid/search/predict.py: each load point replayed through grid/twin/simulate.py), then
ranked by the objective's score.

    python experiments/rank_benchmark.py
    python experiments/rank_benchmark.py --override 'sweep.grid.mem_fraction_static=[0.85,0.92]'

Prints the configuration count, the wall time of the checks + forecasts (one monotonic clock), and the top five.
"""

from __future__ import annotations

import argparse
import time

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.report.select import OBJECTIVES
from grid.search.plan import build
from grid.sweep.space import expand

FINE_MEM_FRACTION = "sweep.grid.mem_fraction_static=[0.78,0.80,0.82,0.85,0.88,0.90,0.92]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", default="joint")
    ap.add_argument("--override", action="append", default=None,
                    help=f"Hydra overrides (default: {FINE_MEM_FRACTION})")
    args = ap.parse_args()
    overrides = args.override if args.override is not None else [FINE_MEM_FRACTION]
    spec = compose_spec([f"+sweep={args.sweep}", *overrides], "/tmp/grid-rank-benchmark")
    engine = get_engine(spec)
    plans = expand(spec)
    t0 = time.perf_counter()
    sp = build(spec, engine, plans, engine.version())
    elapsed = time.perf_counter() - t0
    scored = [(c.forecast, c.settings) for c in sp.policy.candidates if c.forecast is not None]
    better = OBJECTIVES[spec.objective.kind].higher_is_better
    scored.sort(key=lambda x: x[0], reverse=better)
    refused = sum(c.refused for c in sp.policy.candidates)
    print(f"{len(plans)} configurations checked and forecast in virtual time in {elapsed:.1f} s "
          f"({elapsed / max(1, len(plans)) * 1e3:.1f} ms each; {refused} refused, {len(scored)} scored; "
          f"objective {spec.objective.kind})")
    for score, settings in scored[:5]:
        varied = {k: v for k, v in settings.items() if k in spec.sweep.grid}
        print(f"  {score:10.2f}  {varied}")


if __name__ == "__main__":
    main()
