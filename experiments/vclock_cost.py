"""What does a twin load point cost on the virtual clock, in real seconds and CPU? (benchmark script, not a test)

Launches the twin as the main job does (GLM-5-NVFP4, TP8, 8x RTX PRO 6000 in a VM, trtllm NSA backends, no CUDA
graphs) with ``GRID_TWIN_CLOCK=virtual`` and runs steady-state closed-loop points (ISL 256 / OSL 256, the load's
default prompts per stream) through grid's load generator. On the virtual clock a point's numbers do not depend on
the host, so what is left to measure is what the simulation and the HTTP streaming cost the machine.

    python experiments/vclock_cost.py [--levels 8 64] [--repeats 2]

Prints one row per point: real seconds, CPU seconds of the twin and of the client, streamed tokens (warm-up wave,
measured and tail requests), microseconds of real time per token, and the point's output tok/s and TTFT p50 (the
same on every repeat, each with new prompts of the same lengths, or the clock is not virtual).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grid.loadgen.dataset import random_prompts  # noqa: E402
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync  # noqa: E402
from grid.metrics.loadpoint import summarize  # noqa: E402
from grid.server.handle import LaunchRequest  # noqa: E402
from grid.server.session import ServerSession  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from twin_clock_error import ISL, OSL, SETTINGS, specs  # noqa: E402


def _cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (``/proc/<pid>/stat`` fields 14 and 15, clock ticks; proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    import json

    from grid.releases.flags import to_argv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--prompts-per-stream", type=int, default=2)
    args = ap.parse_args()
    model, hw = specs()
    print(f"{'level':>5} {'rep':>3} | {'real s':>7} {'twin cpu s':>10} {'client cpu s':>12} {'tokens':>7} "
          f"{'us/token':>8} | {'out tok/s':>9} {'TTFT p50 ms':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        model_dir = workdir / "model"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(model.to_hf_config()))
        session = ServerSession()
        port, _ = session.pick_port()
        argv = [sys.executable, "-m", "grid.twin", "--model-path", str(model_dir), *to_argv(SETTINGS, (0, 5, 9)),
                "--port", str(port)]
        env = {"GRID_TWIN_HARDWARE": hw.model_dump_json(), "GRID_TWIN_TIME_SCALE": "200",
               "GRID_TWIN_CLOCK": "virtual"}
        try:
            res = session.launch(LaunchRequest(argv=argv, env=env, port=port, log_path=str(workdir / "twin.log"),
                                               time_scale=200, startup_timeout_s=3600, api="generate", model="m"))
            assert res.status == "ok", res
            pid = session.server.pid if session.server is not None else None
            for level in args.levels:
                n = args.prompts_per_stream * level
                point = LoadPoint("concurrency", level, n, warmup_requests=1, steady=True)
                for rep in range(args.repeats):
                    # new prompts each time, enough for the warm-up, the wave, the measured and the tail requests:
                    # a prompt sent again would hit the radix cache
                    count = n + point.warmup_requests + point.wave_warmup + point.tail_prompts
                    prompts = random_prompts(count, ISL, OSL, 1.0, model.vocab_size, seed=7 + 1000 * rep + level)
                    twin0 = _cpu_s(pid) if pid else float("nan")
                    me0 = resource.getrusage(resource.RUSAGE_SELF)
                    t0 = time.perf_counter()
                    out = run_load_point_sync(Target(res.base_url, "generate", "m", None, 1.0, clock="virtual"),
                                              point, prompts, read_timeout_s=600)
                    real = time.perf_counter() - t0
                    me1 = resource.getrusage(resource.RUSAGE_SELF)
                    twin_cpu = (_cpu_s(pid) if pid else float("nan")) - twin0
                    client_cpu = (me1.ru_utime + me1.ru_stime) - (me0.ru_utime + me0.ru_stime)
                    tokens = sum(r.output_tokens or 0 for r in out.records + out.warmup_records + out.tail_records)
                    s = summarize(out)
                    print(f"{level:5d} {rep:3d} | {real:7.2f} {twin_cpu:10.2f} {client_cpu:12.2f} {tokens:7d} "
                          f"{real / tokens * 1e6:8.1f} | {s['output_tok_per_s']:9.2f} {s['ttft_median_ms']:11.2f}",
                          flush=True)
        finally:
            session.stop(5)


if __name__ == "__main__":
    main()
