"""What does early stopping across load levels save, and does it ever change the winner? (not a timed test)

Every launchable configuration of a sweep (not refused, not known to fail) is "measured" at every load level in
virtual time: the twin's per-level forecast (grid/search/predict.py ``level_forecasts``) times a seeded bias per
configuration and level, drawn from the twin's documented error (normal, sigma ``--bias``, default 7.4%: held-out
output tok/s geometric-mean error, docs/twin.md), times run-to-run noise (sigma ``--noise``, default 1%:
grid.report.select.TIE_PERCENT); a level meets the SLOs when the twin's point does. The configurations run one after
another in the order the default search launches them (best forecast first) or in the sweep's order (``--order
plan``), and before each level the same ``grid.search.levels.Levels`` a trial uses decides whether it runs. The
winner with early stopping is compared with the winner measuring every level on the same measured values.

GPU-seconds: the twin's modelled startup plus the modelled duration of each level run, times ``hardware.gpu_count``;
"of the load time": the share of the load points' GPU-seconds alone (startups are not saved by skipping levels).

    python experiments/early_stop_benchmark.py                                  # shipped sweeps, 5 seeds
    python experiments/early_stop_benchmark.py --sweeps mem_fraction --override objective=max_goodput
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.loadgen.runner import LoadPoint
from grid.report.select import OBJECTIVES
from grid.search.levels import Levels
from grid.search.plan import build
from grid.search.predict import level_forecasts
from grid.sweep.measure import TWIN_BOUND_METRICS
from grid.sweep.space import expand

SWEEPS = ("cuda_graph", "mem_fraction", "moe_runner", "schedule_policy", "torch_compile", "two_batch_overlap",
          "seed_tuning")


def measured(seed: int, h: str, level: tuple, value: float | None, bias: float, noise: float) -> float | None:
    if value is None:
        return None
    rng = random.Random(f"{seed}:{h}:{level}")
    return value * (1 + rng.gauss(0, bias)) * (1 + rng.gauss(0, noise))


def run_sweep(spec, configs, forecasts, startup_s, seed, args, early_stop: bool):
    """(winner hash, its score, GPU-seconds, GPU-seconds of load points, points skipped)."""
    obj = OBJECTIVES[spec.objective.kind]
    bounded = obj.higher_is_better and obj.metric in TWIN_BOUND_METRICS
    best, winner, gpu_s, load_s, skipped = None, None, 0.0, 0.0, 0
    for p in configs:
        fc = forecasts[p.config_hash]
        points = [LoadPoint(kind, level, 1) for kind, level in fc]
        levels = Levels(points, early_stop=early_stop, forecasts=fc if bounded else {}, best=best,
                        error=spec.search.twin_bound_error, unit=obj.unit, own_best=True,
                        metric=obj.metric if bounded else None)
        gpu_s += startup_s[p.config_hash]
        score = None
        for _, point, skip in levels:
            key = (point.kind, float(point.value))
            if skip is not None:
                skipped += 1
                continue
            gpu_s += fc[key].duration_s
            load_s += fc[key].duration_s
            value = measured(seed, p.config_hash, key, fc[key].value, args.bias, args.noise)
            met = fc[key].slo_met
            levels.record(point, "ok", met, value)
            if met is not False and value is not None and (score is None or value > score):
                score = value
        if score is not None and (best is None or score > best):
            best, winner = score, p.config_hash
    return winner, best, gpu_s * spec.hardware.gpu_count, load_s * spec.hardware.gpu_count, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweeps", nargs="*", default=list(SWEEPS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--bias", type=float, default=0.074)
    ap.add_argument("--noise", type=float, default=0.01)
    ap.add_argument("--order", choices=("search", "plan"), default="search")
    ap.add_argument("--override", action="append", default=[])
    args = ap.parse_args()
    print("| sweep | objective | configurations | levels | points skipped, median | GPU-s saved, median / least "
          "| of the load time, median | winner changed |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.sweeps:
        t0 = time.monotonic()
        spec = compose_spec([f"+sweep={name}", *args.override], tempfile.mkdtemp())
        engine = get_engine(spec)
        plans = expand(spec)
        sp = build(spec, engine, plans, engine.version())
        by_hash = {p.config_hash: p for p in plans}
        order = [c.config_hash for c in sp.policy.queue] if args.order == "search" else [p.config_hash
                                                                                         for p in plans]
        configs = [by_hash[h] for h in order if not sp.known[h].refused and not sp.known[h].known_to_fail
                   and sp.forecasts[h] is not None]
        forecasts = {p.config_hash: level_forecasts(spec, p, engine.version()) for p in configs}
        startup_s = {p.config_hash: sp.forecasts[p.config_hash].startup_s for p in configs}
        saved, load_saved, skipped, changed, none = [], [], [], 0, 0
        for seed in range(args.seeds):
            w_on, s_on, g_on, l_on, k = run_sweep(spec, configs, forecasts, startup_s, seed, args, True)
            w_off, s_off, g_off, l_off, _ = run_sweep(spec, configs, forecasts, startup_s, seed, args, False)
            changed += (w_on, s_on) != (w_off, s_off)
            none += w_off is None
            saved.append((g_off - g_on) / g_off * 100 if g_off else 0.0)
            load_saved.append((l_off - l_on) / l_off * 100 if l_off else 0.0)
            skipped.append(k)
        n_levels = sum(len(f) for f in forecasts.values())
        print(f"| {name} | {spec.objective.kind} | {len(configs)} | {n_levels} | {statistics.median(skipped):g} "
              f"| {statistics.median(saved):.1f}% / {min(saved):.1f}% | {statistics.median(load_saved):.1f}% "
              f"| {changed} of {args.seeds} seeds{f' (no winner in {none})' if none else ''} |  "
              f"<!-- {time.monotonic() - t0:.0f} s -->")


if __name__ == "__main__":
    main()
