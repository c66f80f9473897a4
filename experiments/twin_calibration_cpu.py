"""Does the twin learn a real server from two of its configurations? (benchmark script, not a test)

Ground truth measured on this machine: the released SGLang server on the host CPU (``engine=sglang
hardware=cpu_host``, the tiny random-weight Llama of experiments/real_server/setup_sglang_cpu.sh) runs
conf/sweep/cpu_calibration.yaml (running-request cap x prefill chunk, concurrency 1 / 4 / 8) through grid. The twin
is then calibrated (grid/twin/coefficients.py) on the load points of ``k`` configurations (k = 1, 2; every choice of
them) and forecasts the load points of the others, replayed as the load generator ran them (grid/search/predict.py
``replay_point``). Printed: per metric and ``k``, the geometric-mean absolute error of those forecasts before
calibration (the CPU's spec-sheet figures in conf/hardware/cpu_host.yaml) and after; the coefficients of each
calibration on two configurations; and whether the calibrated twin ranks the configurations it did not see as they
measured (by the sweep's objective, output tok/s at the best level).

    experiments/real_server/setup_sglang_cpu.sh 0.5.23       # then export the three lines it prints
    python experiments/twin_calibration_cpu.py [--run-dir DIR] [--markdown] [-- more grid overrides]

Without ``--run-dir`` it runs the sweep first (about 10 minutes on 2 idle cores) in a new directory under
outputs/cpu_calibration; with it, it reads a directory that sweep wrote.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grid.compose import compose_spec  # noqa: E402
from grid.search.calibration import observations  # noqa: E402
from grid.storage.parquet import read_table  # noqa: E402
from grid.sweep.space import expand  # noqa: E402
from grid.twin.coefficients import METRICS, Observation, calibrated, fit, geomean_abs, memoized  # noqa: E402

KS = (1, 2)


def overrides(extra: list[str]) -> list[str]:
    python, model = os.environ.get("GRID_SGLANG_PYTHON"), os.environ.get("GRID_SGLANG_MODEL")
    if not python or not model:
        sys.exit("GRID_SGLANG_PYTHON / GRID_SGLANG_MODEL are not set: run experiments/real_server/setup_sglang_cpu.sh "
                 "and export the three lines it prints")
    lib = os.environ.get("GRID_SGLANG_LD_LIBRARY_PATH", "")
    return ["+sweep=cpu_calibration", "engine=sglang", "hardware=cpu_host", "model=tiny_llama",
            f"model.path={model}", f"engine.python={python}", "probe.enabled=false", "search=exhaustive",
            f"+engine.env={{LD_LIBRARY_PATH:{lib}}}", *extra]


def run_sweep(args: list[str], run_dir: Path) -> None:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "grid.run", *args, f"hydra.run.dir={run_dir}"], cwd=ROOT)
    print(f"sweep: exit status {out.returncode} in {time.monotonic() - t0:.0f} s ({run_dir})", file=sys.stderr)
    if out.returncode not in (0,):
        sys.exit(out.returncode)


def by_config(obs: list[Observation]) -> dict[str, list[Observation]]:
    """Observations grouped by configuration (their source starts ``<label> (<hash>)``)."""
    out: dict[str, list[Observation]] = defaultdict(list)
    for o in obs:
        out[o.source.rsplit(" ", 2)[0]].append(memoized(o))
    return dict(out)


def score(obs: list[Observation], coefficients=None) -> tuple[float, float]:
    """(measured, twin) output tok/s at the best level of one configuration; the twin calibrated to
    ``coefficients``."""
    measured = max(o.measured["output_tok_per_s"] for o in obs)
    twin = max(o.replay(calibrated(o.perf, coefficients))["output_tok_per_s"] for o in obs)
    return measured, twin


def order(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda k: -values[k])


def kendall(a: dict[str, float], b: dict[str, float]) -> float:
    """Kendall's tau between two scorings of the same keys (1: the same order)."""
    keys = sorted(a)
    pairs = list(combinations(keys, 2))
    s = sum(math.copysign(1, (a[x] - a[y]) * (b[x] - b[y])) if (a[x] - a[y]) * (b[x] - b[y]) else 0 for x, y in pairs)
    return s / len(pairs) if pairs else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, help="a directory the sweep wrote (default: run it now)")
    ap.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    ap.add_argument("extra", nargs="*", help="more grid overrides (after --)")
    args = ap.parse_args()
    over = overrides(args.extra)
    run_dir = args.run_dir or ROOT / "outputs" / "cpu_calibration" / time.strftime("%Y%m%d-%H%M%S")
    if args.run_dir is None:
        run_sweep(over, run_dir)
    spec = compose_spec(over, run_dir)
    plans = {p.config_hash: p for p in expand(spec)}
    rows = read_table(run_dir, "load_points").to_pylist()
    version = next((r["engine_version"] for r in rows if r.get("engine_version")), spec.version)
    configs = by_config(observations(spec, plans, rows, version))
    names = sorted(configs)
    print(f"{len(rows)} load points, {sum(len(v) for v in configs.values())} that count, {len(names)} configurations "
          f"(SGLang {version} on {spec.hardware.name})")
    for name in names:
        for o in configs[name]:
            twin = o.replay(o.perf)
            print(f"  {o.source}: " + ", ".join(f"{m} {o.measured[m]:.4g} (spec-sheet twin {twin[m]:.4g})"
                                                for m in METRICS if m in o.measured))
    sep = " | " if args.markdown else "  "
    pooled: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    ranking: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    fits = []
    for k in KS:
        for chosen in combinations(names, k):
            cal = fit([o for n in chosen for o in configs[n]])
            if k == 2:
                fits.append((chosen, cal))
            rest = [n for n in names if n not in chosen]
            for n in rest:
                for o in configs[n]:
                    before, after = o.replay(o.perf), o.replay(calibrated(o.perf, cal.coefficients))
                    for m in METRICS:
                        if m in o.measured:
                            pooled[(m, k)].append((math.log(o.measured[m] / before[m]),
                                                   math.log(o.measured[m] / after[m])))
            if len(rest) >= 2:
                measured = {n: score(configs[n])[0] for n in rest}
                twin = {n: score(configs[n], cal.coefficients)[1] for n in rest}
                ranking[k].append((kendall(measured, twin), order(measured)[0] == order(twin)[0]))
    head = ["metric", "k", "forecasts", "spec sheet", "calibrated"]
    print()
    print(("| " if args.markdown else "") + sep.join(head) + (" |" if args.markdown else ""))
    if args.markdown:
        print("|" + "---|" * len(head))
    for m in METRICS:
        for k in KS:
            pairs = pooled.get((m, k), [])
            if pairs:
                cells = [m, str(k), str(len(pairs)), f"{geomean_abs([b for b, _ in pairs]):.1%}",
                         f"{geomean_abs([a for _, a in pairs]):.1%}"]
                print(("| " if args.markdown else "") + sep.join(cells) + (" |" if args.markdown else ""))
    print()
    for k in KS:
        taus = [t for t, _ in ranking[k] if not math.isnan(t)]
        if taus:
            print(f"ranking of the configurations not calibrated on, k={k}: Kendall tau {sum(taus) / len(taus):+.2f} "
                  f"on average over {len(taus)} calibrations, best named in {sum(b for _, b in ranking[k])} of "
                  f"{len(ranking[k])}")
    print()
    for chosen, cal in fits:
        print(f"calibrated on {' + '.join(chosen)}: {cal.text()}")
    measured = {n: score(configs[n])[0] for n in names}
    print("measured order (output tok/s at the best level): "
          + ", ".join(f"{n} {measured[n]:.1f}" for n in order(measured)))


if __name__ == "__main__":
    main()
