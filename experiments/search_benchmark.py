"""How close does a search get to the exhaustive optimum, and for how many GPU-seconds? (issue 13's benchmark;
not a timed test.)

The twin cannot grade itself, so the "measured" score of each configuration is the twin's forecast (grid/search/
predict.py, virtual time) times a seeded per-configuration bias drawn from the twin's documented error (normal,
sigma = ``--bias``, default 7.4%: held-out output tok/s geometric-mean error, docs/twin.md) times run-to-run noise
(normal, sigma = ``--noise``, default 1%: grid.report.select.TIE_PERCENT). Each search sees only those measured
scores, through the same policy object a sweep runs (grid/search/policy.py). GPU-seconds are the twin's modelled
GPU-seconds of each launch (grid/search/plan.py ``gpu_seconds``).

    python experiments/search_benchmark.py                      # +sweep=joint, 5 seeds, default search vs exhaustive
    python experiments/search_benchmark.py --seeds 5 --override search.max_launches=32

Prints, per search: the median and worst distance from the exhaustive optimum (%), and the median GPU-seconds as a
fraction of exhaustive's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.search.plan import build
from grid.search.policy import DONE, WAIT, Budget, Exhaustive
from grid.sweep.space import expand



def load_spec(overrides: list[str], run_dir: str):
    return compose_spec(overrides, run_dir)


def measured_scores(cands, seed: int, bias: float, noise: float) -> dict[str, float | None]:
    """The benchmark's stand-in for measurement: forecast x (1 + per-configuration bias) x (1 + noise)."""
    out = {}
    for c in cands:
        if c.refused or c.known_to_fail or c.forecast is None:
            out[c.config_hash] = None
            continue
        rng = random.Random(f"{seed}:{c.config_hash}")
        out[c.config_hash] = c.forecast * (1 + rng.gauss(0, bias)) * (1 + rng.gauss(0, noise))
    return out


def drive(policy, scores) -> tuple[float | None, float, int]:
    """Run a policy to the end against ``scores``: (best measured, GPU-seconds, launches)."""
    gpu_s, launches = 0.0, 0
    while True:
        h = policy.next()
        if h == DONE:
            break
        if h == WAIT:  # one at a time: nothing is running here, so a wait cannot happen
            raise RuntimeError("policy waits with nothing running")
        c = policy.by_hash[h]
        if not c.refused:
            launches += 1
            gpu_s += c.gpu_s
        policy.record(h, scores[h])
    return policy.best(), gpu_s, launches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", default="joint")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--bias", type=float, default=0.074)
    ap.add_argument("--noise", type=float, default=0.01)
    ap.add_argument("--override", action="append", default=[], help="Hydra override for the default search")
    ap.add_argument("--variant", action="append", default=[],
                    help="also run the search with these policy settings, e.g. twin_error=0.15,max_launches=64")
    args = ap.parse_args()
    spec = load_spec([f"+sweep={args.sweep}", *args.override], "/tmp/grid-search-benchmark")
    engine = get_engine(spec)
    plans = expand(spec)
    t0 = time.perf_counter()
    sp = build(spec, engine, plans, engine.version())
    print(f"{len(plans)} configurations forecast on the twin in {time.perf_counter() - t0:.0f} s "
          f"({spec.search.kind} search, bias sigma {args.bias:.1%}, noise sigma {args.noise:.1%})")
    variants = [("default", {})] + [(v, {k: float(x) for k, x in (kv.split("=") for kv in v.split(","))})
                                     for v in args.variant]
    for name, settings in variants:
        report(spec, sp, args, name, settings)


def report(spec, sp, args, name: str, settings: dict) -> None:
    from grid.search import SEARCHES

    p = sp.policy
    dist, frac, launches = [], [], []
    for seed in range(args.seeds):
        scores = measured_scores(p.candidates, seed, args.bias, args.noise)
        ex_best, ex_gpu, ex_n = drive(Exhaustive(p.candidates, Budget()), scores)
        max_launches = settings.get("max_launches", p.budget.max_launches)
        fresh = SEARCHES[spec.search.kind].policy(
            p.candidates, Budget(None if max_launches is None else int(max_launches), p.budget.max_gpu_s),
            higher_is_better=p.higher_is_better, try_known_failures=p.try_known_failures,
            twin_error=settings.get("twin_error", p.twin_error), spread=settings.get("spread", p.spread), seed=seed)
        best, gpu, n = drive(fresh, scores)
        d = abs(ex_best - best) / ex_best * 100 if best is not None else 100.0
        dist.append(d)
        frac.append(gpu / ex_gpu * 100)
        launches.append(n)
        print(f"  seed {seed}: exhaustive {ex_best:.1f} ({ex_n} launches, {ex_gpu:.0f} GPU-s); {spec.search.kind} "
              f"[{name}] {best:.1f} ({n} launches, {gpu:.0f} GPU-s): {d:.2f}% from the optimum, "
              f"{gpu / ex_gpu:.1%} of the GPU-seconds")
    print(f"{spec.search.kind} [{name}]: distance from the exhaustive optimum median {statistics.median(dist):.2f}%, "
          f"worst {max(dist):.2f}%; GPU-seconds median {statistics.median(frac):.1f}% of exhaustive's; launches "
          f"median {statistics.median(launches):g}")

if __name__ == "__main__":
    main()
