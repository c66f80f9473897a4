"""How much error does running the twin's clock faster than real time add? (benchmark script, not a test)

For each time scale, launch the twin exactly as a sweep does (GLM-5-NVFP4, TP8, 8x RTX PRO 6000 in a VM, trtllm NSA
backends, no CUDA graphs), send one wave of N identical requests (ISL 256 / OSL 256) at once through grid's load
generator, and compare what the client measured (modelled time = real x scale) with the twin's own performance
model run in virtual time (grid.twin.simulate: no HTTP, no sleeping, so no clock error at all).

    python experiments/twin_clock_error.py [--scales 5 10 20 50] [--streams 1 64]

Prints one row per (scale, streams): output tok/s, median TTFT and median TPOT, measured vs simulated, in %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grid.config.specs import HardwareSpec, ModelSpec  # noqa: E402
from grid.loadgen.dataset import random_prompts  # noqa: E402
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync  # noqa: E402
from grid.metrics.loadpoint import summarize  # noqa: E402
from grid.server.handle import LaunchRequest  # noqa: E402
from grid.server.session import ServerSession  # noqa: E402
from grid.twin.perf import PerfModel, ServingConfig  # noqa: E402
from grid.twin.scheduler import TwinRequest  # noqa: E402
from grid.twin.simulate import simulate  # noqa: E402

SETTINGS = {"tp_size": 8, "mem_fraction_static": 0.85, "cuda_graph": False, "dsa_prefill_backend": "trtllm",
            "dsa_decode_backend": "trtllm", "kv_cache_dtype": "bfloat16"}
ISL = OSL = 256


def specs() -> tuple[ModelSpec, HardwareSpec]:
    model = ModelSpec(**yaml.safe_load((ROOT / "conf/model/glm5_nvfp4.yaml").read_text()))
    hw = HardwareSpec(**yaml.safe_load((ROOT / "conf/hardware/rtx_pro_6000_x8_vm.yaml").read_text()))
    return model, hw


def simulated(model: ModelSpec, hw: HardwareSpec, streams: int) -> dict:
    cfg = ServingConfig(tp_size=8, mem_fraction_static=0.85, cuda_graph=False, dsa_prefill_backend="trtllm",
                        dsa_decode_backend="trtllm", kv_cache_dtype="bfloat16")
    res = simulate(PerfModel(model, hw, cfg), [(0.0, TwinRequest(f"r{i}", ISL, OSL)) for i in range(streams)])
    ttft = [r.ttft_s * 1e3 for r in res.requests]
    tpot = [(r.e2e_s - r.ttft_s) * 1e3 / (r.output_tokens - 1) for r in res.requests]
    return {"output_tok_per_s": res.output_throughput, "ttft_median_ms": statistics.median(ttft),
            "tpot_median_ms": statistics.median(tpot)}


def measured(model: ModelSpec, hw: HardwareSpec, scale: float, streams: int, workdir: Path) -> dict:
    import json

    from grid.releases.flags import to_argv

    model_dir = workdir / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(model.to_hf_config()))
    session = ServerSession()
    port, _ = session.pick_port()
    argv = [sys.executable, "-m", "grid.twin", "--model-path", str(model_dir), *to_argv(SETTINGS, (0, 5, 9)),
            "--port", str(port)]
    env = {"GRID_TWIN_HARDWARE": hw.model_dump_json(), "GRID_TWIN_TIME_SCALE": repr(scale)}
    try:
        res = session.launch(LaunchRequest(argv=argv, env=env, port=port, log_path=str(workdir / f"twin-{scale}.log"),
                                           time_scale=scale, startup_timeout_s=3600, api="generate", model="m"))
        assert res.status == "ok", res
        prompts = random_prompts(streams, ISL, OSL, 1.0, model.vocab_size, seed=7)
        out = run_load_point_sync(Target(res.base_url, "generate", "m", None, scale),
                                  LoadPoint("concurrency", streams, streams), prompts, read_timeout_s=600)
        s = summarize(out)
        return {k: s[k] for k in ("output_tok_per_s", "ttft_median_ms", "tpot_median_ms")}
    finally:
        session.stop(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[5, 10, 20, 50])
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 64])
    args = ap.parse_args()
    model, hw = specs()
    print(f"{'scale':>6} {'streams':>7} | {'out tok/s meas/sim':>22} {'err':>7} | {'TTFT p50 ms':>19} {'err':>7} | "
          f"{'TPOT p50 ms':>17} {'err':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for streams in args.streams:
            sim = simulated(model, hw, streams)
            for scale in args.scales:
                m = measured(model, hw, scale, streams, Path(tmp))
                cells = []
                for key in ("output_tok_per_s", "ttft_median_ms", "tpot_median_ms"):
                    err = (m[key] - sim[key]) / sim[key] * 100
                    cells.append(f"{m[key]:9.1f} / {sim[key]:9.1f} {err:+6.1f}%")
                print(f"{scale:6g} {streams:7d} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
