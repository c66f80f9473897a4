"""Run-to-run spread of one closed-loop load point on the twin, all-at-once vs steady state (benchmark script).

For each closed-loop start (``together``: all workers at once, requests counted whole; ``staggered``: grid's steady
state, phases spread by a warm-up wave of spread output lengths, grid/loadgen/runner.py, grid/metrics/loadpoint.py),
launch the twin ``--runs`` times exactly as the main job does (GLM-5-NVFP4, TP8, 8x RTX PRO 6000 in a VM, trtllm NSA backends, no CUDA graphs, the twin's wall clock 20x, as
the main job's ran before the virtual clock), each run with its own prompt seed (as two separate grid runs would be), and measure
one load point per level: ISL 256 / OSL 256 fixed, ``--per-stream`` requests per stream after one warm-up request.

    python experiments/steady_state.py [--levels 64] [--per-stream 2] [--runs 3]

Prints per run: output tok/s, mean concurrency, TTFT p10/p50/p90 and the largest gap between consecutive sorted
TTFTs (a bimodal TTFT has one gap of seconds between its two modes), TPOT p50; then per start and level the spread
over the runs, (max - min) / mean in percent, of each metric ``grid.report.compare`` compares. That spread is where
``grid.report.compare.DEFAULT_THRESHOLD_PERCENT`` comes from. Last, the twin's own model replays both schedules in
virtual time (grid/twin/simulate.py: no HTTP, no clock), as the reference the measured output tok/s can be held
against: ``together`` as the burst's whole-request rate, ``staggered`` as the tokens of every request inside the
steady window, each request's tokens after its first spread evenly up to its end (simulate keeps no per-token
times). ``--model-only`` prints just that.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grid.config.specs import HardwareSpec, ModelSpec  # noqa: E402
from grid.releases.flags import to_argv  # noqa: E402
from grid.loadgen.dataset import random_prompts  # noqa: E402
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync  # noqa: E402
from grid.metrics.loadpoint import summarize  # noqa: E402
from grid.metrics.request import request_metrics  # noqa: E402
from grid.server.session import ServerSession  # noqa: E402
from grid.twin.perf import PerfModel, ServingConfig  # noqa: E402
from grid.twin.scheduler import TwinRequest  # noqa: E402
from grid.twin.simulate import simulate  # noqa: E402

SETTINGS = {"tp_size": 8, "mem_fraction_static": 0.85, "cuda_graph": False, "dsa_prefill_backend": "trtllm",
            "dsa_decode_backend": "trtllm", "kv_cache_dtype": "bfloat16"}
ISL = OSL = 256
SCALE = 20.0  # the wall-clock scale the main job's twin ran at before the virtual clock (modelled s per real s)
COMPARED = ("output_tok_per_s", "tpot_median_ms", "tpot_p99_ms", "ttft_median_ms", "ttft_p99_ms")


def specs() -> tuple[ModelSpec, HardwareSpec]:
    model = ModelSpec(**yaml.safe_load((ROOT / "conf/model/glm5_nvfp4.yaml").read_text()))
    hw = HardwareSpec(**yaml.safe_load((ROOT / "conf/hardware/rtx_pro_6000_x8_vm.yaml").read_text()))
    return model, hw


def one_run(model: ModelSpec, hw: HardwareSpec, start: str, levels: list[int], per_stream: int, seed: int,
            workdir: Path) -> list[dict]:
    model_dir = workdir / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(model.to_hf_config()))
    session = ServerSession()
    port, _ = session.pick_port()
    argv = [sys.executable, "-m", "grid.twin", "--model-path", str(model_dir), *to_argv(SETTINGS, (0, 5, 9)),
            "--port", str(port)]
    env = {"GRID_TWIN_HARDWARE": hw.model_dump_json(), "GRID_TWIN_TIME_SCALE": repr(SCALE),
           "GRID_TWIN_STARTUP_TIME_SCALE": "200"}
    out = []
    try:
        res = session.launch(argv=argv, env=env, port=port, log_path=str(workdir / f"twin-{start}-{seed}.log"),
                             time_scale=SCALE, startup_timeout_s=3600, api="generate", model="m", api_key=None)
        assert res["status"] == "ok", res
        for level in levels:
            point = LoadPoint("concurrency", level, level * per_stream, warmup_requests=1, seed=seed,
                              steady=start == "staggered")
            count = point.num_prompts + point.warmup_requests + point.wave_warmup + point.tail_prompts
            prompts = random_prompts(count, ISL, OSL, 1.0, model.vocab_size, seed=seed * 1000 + level)
            result = run_load_point_sync(Target(res["base_url"], "generate", "m", None, SCALE), point, prompts,
                                         read_timeout_s=600)
            s = summarize(result)
            ttft = sorted(request_metrics(r, SCALE).ttft_ms for r in result.records if r.status == "ok")
            out.append({"start": start, "seed": seed, "level": level, **{k: s[k] for k in COMPARED},
                        "concurrency_mean": s["concurrency_mean"], "duration_s": s["duration_s"],
                        "failed": s["failed"], "ttft_p10_ms": float(np.percentile(ttft, 10)),
                        "ttft_p90_ms": float(np.percentile(ttft, 90)),
                        "ttft_gap_ms": max((b - a for a, b in zip(ttft, ttft[1:])), default=0.0)})
    finally:
        session.stop(5)
    return out


def modelled(model: ModelSpec, hw: HardwareSpec, level: int, per_stream: int) -> tuple[float, float]:
    """(together, steady) output tok/s of the twin's model in virtual time (module docstring)."""
    cfg = ServingConfig(tp_size=8, mem_fraction_static=0.85, cuda_graph=False, dsa_prefill_backend="trtllm",
                        dsa_decode_backend="trtllm", kv_cache_dtype="bfloat16")
    perf = PerfModel(model, hw, cfg)
    n = level * per_stream
    together = simulate(perf, [(0.0, TwinRequest(f"m{i}", ISL, OSL)) for i in range(n)], max_concurrency=level)
    wave = [(0.0, TwinRequest(f"w{k}", ISL, -(-OSL * (k + 1) // level))) for k in range(level)]
    rest = [(1e-9, TwinRequest(f"m{i}", ISL, OSL)) for i in range(n)]
    tail = [(2e-9, TwinRequest(f"t{i}", ISL, OSL)) for i in range(2 * level)]
    res = simulate(perf, wave + rest + tail, max_concurrency=level)
    measured = [r for r in res.requests if r.rid.startswith("m")]
    start = min(r.arrival_s for r in measured)
    end = max(r.arrival_s + r.e2e_s for r in measured)
    tokens = 0.0
    for r in res.requests:
        first, last = r.arrival_s + r.ttft_s, r.arrival_s + r.e2e_s
        if r.output_tokens < 1:
            continue
        tokens += 1 if start <= first <= end else 0
        lo, hi = max(first, start), min(last, end)
        if last > first and hi > lo:
            tokens += (r.output_tokens - 1) * (hi - lo) / (last - first)
    return together.output_throughput, tokens / (end - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[64])
    ap.add_argument("--per-stream", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--starts", nargs="+", default=["together", "staggered"])
    ap.add_argument("--model-only", action="store_true")
    args = ap.parse_args()
    model, hw = specs()
    if args.model_only:
        for level in args.levels:
            together, steady = modelled(model, hw, level, args.per_stream)
            print(f"twin model, virtual time, {level} streams: together {together:.1f} tok/s, steady {steady:.1f} tok/s")
        return
    rows: list[dict] = []
    print(f"{'start':>9} {'seed':>4} {'c':>3} | {'out tok/s':>9} {'conc':>5} | {'TTFT p10':>8} {'p50':>7} {'p90':>7} "
          f"{'max gap':>7} ms | {'TPOT p50':>8} ms | window s")
    with tempfile.TemporaryDirectory() as tmp:
        for start in args.starts:
            for seed in range(1, args.runs + 1):
                for r in one_run(model, hw, start, args.levels, args.per_stream, seed, Path(tmp)):
                    rows.append(r)
                    print(f"{start:>9} {seed:>4} {r['level']:>3} | {r['output_tok_per_s']:9.1f} "
                          f"{r['concurrency_mean']:5.1f} | {r['ttft_p10_ms']:8.0f} {r['ttft_median_ms']:7.0f} "
                          f"{r['ttft_p90_ms']:7.0f} {r['ttft_gap_ms']:7.0f}    | {r['tpot_median_ms']:8.2f}    | "
                          f"{r['duration_s']:.1f}" + (f"  ({r['failed']} failed)" if r["failed"] else ""), flush=True)
    print("\nspread over runs, (max - min) / mean, %")
    print(f"{'start':>9} {'c':>3} | " + " ".join(f"{m:>15}" for m in COMPARED))
    for start in args.starts:
        for level in args.levels:
            mine = [r for r in rows if r["start"] == start and r["level"] == level]
            cells = []
            for m in COMPARED:
                v = [r[m] for r in mine]
                cells.append(f"{(max(v) - min(v)) / statistics.fmean(v) * 100:15.1f}")
            print(f"{start:>9} {level:>3} | " + " ".join(cells))
    print()
    for level in args.levels:
        together, steady = modelled(model, hw, level, args.per_stream)
        print(f"twin model, virtual time, {level} streams: together {together:.1f} tok/s, steady {steady:.1f} tok/s")


if __name__ == "__main__":
    main()
