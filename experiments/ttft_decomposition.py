"""Split published and twin mean TTFTs of closed-loop runs into their first wave and their steady state.

    python experiments/ttft_decomposition.py

For every run of ``grid/twin/calibration_rows.yaml`` with a ``tail`` block (InferenceX #870 today) it prints, in ms,
what :func:`grid.twin.fidelity.ttft_split` computes (its docstring defines each column):

* published mean and P99 TTFT and ``pub rest``, the published steady-state mean if the first wave's c requests took
  the P99. The client sends ``N = 10 c`` prompts, so a one-time cost of the first wave shows as a P99 near it;
* the twin's mean, P99, first-wave mean and steady-state mean;
* ``stall``: P99 minus mean inter-chunk latency, about one prefill as the running requests see it when ``stalled``
  (the share of chunks that hold a prefill) is above 1%; the twin's prefill step for the mean prompt beside it;
* ``err if wave`` / ``err if rest``: the twin's mean TTFT error if only its first wave / only its steady state were
  as published.

Rows, P99 and ITL figures are published values (each run's ``source``); nothing here is fitted.
"""

from __future__ import annotations

import time

from grid.twin.fidelity import load_runs, ttft_split


def main() -> None:
    t0 = time.perf_counter()
    head = (f"{'run':16s} {'c':>3s} {'N':>4s} | {'pub mean':>8s} {'pub p99':>8s} {'pub rest':>8s} | "
            f"{'twin mean':>9s} {'twin p99':>8s} {'1st wave':>8s} {'rest':>6s} | {'stall':>6s} {'stalled':>7s} "
            f"{'twin prefill':>12s} | {'err if wave':>11s} {'err if rest':>11s}")
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
              f"{100 * s.error_if_first_wave:+10.1f}% {100 * s.error_if_rest:+10.1f}%")
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
