"""Split published and twin mean TTFTs of closed-loop runs into their first wave and their steady state.

    python experiments/ttft_decomposition.py
    python experiments/ttft_decomposition.py --prefill-floor-ms 100   # the floor tried and not adopted


For every run of ``grid/twin/calibration_rows.yaml`` with a ``tail`` block (InferenceX #870 today) it prints, in ms,
what :func:`grid.twin.fidelity.ttft_split` computes (its docstring defines each column):

* published mean and P99 TTFT and ``pub rest``, the published steady-state mean if the first wave's c requests took
  the P99. The client sends ``N = 10 c`` prompts, so a one-time cost of the first wave shows as a P99 near it;
* the twin's mean, P99, first-wave mean and steady-state mean;
* ``stall``: P99 minus mean inter-chunk latency, about one prefill as the running requests see it when ``stalled``
  (the share of chunks that hold a prefill) is above 1%; the twin's prefill step for the mean prompt beside it;
* ``err if wave`` / ``err if rest``: the twin's mean TTFT error if only its first wave / only its steady state were
  as published;
* ``at p99``: the fewest requests the published P99 shows at or above it (numpy's interpolated percentile): the
  first-wave reading above assumes ``c`` of them.

Rows, P99 and ITL figures are published values (each run's ``source``); nothing here is fitted.

``--prefill-floor-ms F`` replays, in this process only, every run of an MLA + MoE model (DeepSeek-style) with each
eager prefill step taking at least F ms (plus the scheduler's per-step CPU time) and prints those runs' errors per
metric; docs/twin.md reports the 100 ms case. The twin itself is unchanged.
"""

from __future__ import annotations

import argparse
import time

import grid.twin.perf as perf_module
from grid.twin.fidelity import evaluate, load_runs, perf_for, ttft_split


def with_prefill_floor(floor_ms: float) -> None:
    """Make every eager prefill step of an MLA + MoE model take at least ``floor_ms`` (this process only)."""
    original = perf_module.PerfModel.prefill_step_s

    def floored(self, new_tokens: int, cached_tokens: float = 0, num_seqs: int = 1) -> float:
        t = original(self, new_tokens, cached_tokens, num_seqs)
        deepseek_style = self.model.is_moe and self.model.attention == "mla"
        if new_tokens > 0 and deepseek_style and not self.cfg.piecewise_cuda_graph:
            t = max(t, floor_ms / 1e3 + perf_module.T_STEP_CPU)
        return t

    perf_module.PerfModel.prefill_step_s = floored  # type: ignore[method-assign]


def floor_errors() -> None:
    """Errors per metric of every MLA + MoE run, as replayed now."""
    runs = [r for r in load_runs() if r["workload"]["kind"] != "decode"]
    runs = [r for r in runs if perf_for(r).model.is_moe and perf_for(r).model.attention == "mla"]
    for row in evaluate(runs):
        print(f"  {row.split:9s} {row.run_id:34s} {row.metric:17s} {100 * row.error:+7.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefill-floor-ms", type=float, default=None,
                    help="replay MLA + MoE runs with this floor on each eager prefill step and print their errors")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.prefill_floor_ms is not None:
        print("MLA + MoE runs as the twin replays them now:")
        floor_errors()
        with_prefill_floor(args.prefill_floor_ms)
        print(f"with a {args.prefill_floor_ms:g} ms floor on each eager prefill step:")
        floor_errors()
        print()
        print(f"first wave and steady state, the twin with the {args.prefill_floor_ms:g} ms floor:")
    head = (f"{'run':16s} {'c':>3s} {'N':>4s} | {'pub mean':>8s} {'pub p99':>8s} {'pub rest':>8s} | "
            f"{'twin mean':>9s} {'twin p99':>8s} {'1st wave':>8s} {'rest':>6s} | {'stall':>6s} {'stalled':>7s} "
            f"{'twin prefill':>12s} | {'err if wave':>11s} {'err if rest':>11s} | {'at p99':>6s}")
    print(head)
    print("-" * len(head))
    for run in load_runs():
        if not run.get("tail"):
            continue
        s = ttft_split(run)
        print(f"{run['id'].removeprefix('ix870-'):16s} {s.concurrency:3d} {s.requests:4d} | "
              f"{s.published_mean_ms:8.1f} {s.published_p99_ms:8.1f} {s.published_rest_ms:8.1f} | "
              f"{s.twin_mean_ms:9.1f} {s.twin_p99_ms:8.1f} {s.twin_first_wave_ms:8.1f} {s.twin_rest_ms:6.1f} | "
              f"{s.prefill_stall_ms:6.1f} {100 * s.stalled_chunk_fraction:6.1f}% {s.twin_prefill_ms:12.1f} | "
              f"{100 * s.error_if_first_wave:+10.1f}% {100 * s.error_if_rest:+10.1f}% | {s.requests_at_p99:6d}")
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
