"""GPU acceptance: grid end to end against real SGLang on this machine's NVIDIA GPU, then PASS/FAIL per check.

    python experiments/gpu_acceptance.py                    # installs grid[sglang] into .gpu-acceptance/venv
    python experiments/gpu_acceptance.py --python PY        # use an environment that already has grid[sglang]
    python experiments/gpu_acceptance.py --dry-run          # print the steps; plan the sweep without SGLang or a GPU

Needs an NVIDIA GPU, its driver, and the package index (or a filled pip cache). Steps:

1. install grid with the ``sglang`` extra (SGLang, torch, nvidia-ml-py) into a fresh virtual environment;
2. write a tiny random-weight Llama (2 layers, hidden 256, 4 heads, word-level tokenizer) on the spot with
   experiments/real_server/make_tiny_model.py (nothing is downloaded);
3. run a two-configuration sweep (``cuda_graph`` on / off) with ``engine=sglang probe.enabled=false`` (the random
   model answers garbage by construction) through launch, readiness, load at two concurrency levels, /metrics,
   the scheduler's log lines, NVML telemetry and stop;
4. check the Parquet tables and the GPU afterwards; print PASS/FAIL per check; exit 1 when any check fails.

Everything lands in ``--workdir`` (default ``.gpu-acceptance/``, git-ignored); the run directory is
``<workdir>/run`` (``report.md``, ``parquet/``, ``logs/``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAKE_MODEL = ROOT / "experiments" / "real_server" / "make_tiny_model.py"
#: The tiny model's facts are conf/model/tiny_llama.yaml, the same model the CPU test of real SGLang serves
#: (tests/engines/test_sglang_cpu.py): the GPU run repeats on a GPU what the CPU already ran.
#: GPU memory (MiB) a stopped run may leave in use above the level before it (driver/context noise).
GPU_MEMORY_SLACK_MIB = 1024


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


def sweep_overrides(model_dir: Path, run_dir: Path, python: str, hardware: str) -> list[str]:
    """The ``python -m grid.run`` overrides of the acceptance sweep."""
    return ["engine=sglang", f"engine.python={python}", "engine.startup_timeout_s=1200", "engine.stop_grace_s=30",
            "model=tiny_llama", f"model.path={model_dir}", f"hardware={hardware}",
            "probe.enabled=false", "+sweep={name: gpu_acceptance, grid: {cuda_graph: [true, false]}}",
            "search=exhaustive",
            "server.mem_fraction_static=0.5", "server.tp_size=1", "load.concurrency=[1,8]", "load.min_prompts=16",
            "load.input_len=128", "load.output_len=256", "ray.dashboard=false", "fresh=true",
            f"hydra.run.dir={run_dir}"]


def check_tables(tables: dict[str, list[dict]], configs: int = 2, points: int = 2) -> list[Check]:
    """The acceptance checks over a run's tables (``load_points``, ``requests``, ``server_log``,
    ``server_metrics``, ``gpu_telemetry`` as lists of rows). Pure."""
    lp = tables.get("load_points", [])
    hashes = sorted({r["config_hash"] for r in lp})
    by_config = {h: [r for r in lp if r["config_hash"] == h] for h in hashes}
    reqs = tables.get("requests", [])
    logs, metrics, gpu = tables.get("server_log", []), tables.get("server_metrics", []), tables.get("gpu_telemetry", [])
    failed = [f"{r['label']}: {r['trial_error_class']} {r['trial_error_message']}" for r in lp
              if r["trial_status"] != "ok"]
    checks = [
        Check("two configurations recorded", len(hashes) == configs and all(len(v) == points for v in by_config.values()),
              f"{len(hashes)} configurations, {len(lp)} load points"),
        Check("launch and readiness", bool(lp) and all(r["trial_status"] == "ok" and (r["startup_s"] or 0) > 0
                                                      for r in lp), "; ".join(failed[:2]) or
              f"startup {sorted({round(r['startup_s'] or 0, 1) for r in lp})} s"),
        Check("command is SGLang's", bool(lp) and all("sglang.launch_server" in (r["command"] or "") for r in lp),
              (lp[0]["command"] or "")[:160] if lp else ""),
        Check("probe skipped and recorded", bool(lp) and {r["probe_status"] for r in lp} == {"skipped"},
              str(sorted({str(r.get("probe_status")) for r in lp}))),
        Check("load: every point ok", bool(lp) and all(r["status"] == "ok" and (r["output_tok_per_s"] or 0) > 0
                                                       for r in lp),
              str([(r["label"], r["point_value"], r["status"], r["error_class"]) for r in lp if r["status"] != "ok"])),
        Check("requests: all ok", bool(reqs) and all(r["status"] == "ok" for r in reqs),
              f"{sum(r['status'] == 'ok' for r in reqs)} of {len(reqs)} ok"),
        Check("engine version read", bool(lp) and all(r["engine_version"] and r["engine_version"][0].isdigit()
                                                      for r in lp), str({r["engine_version"] for r in lp})),
        Check("/metrics scraped", bool(metrics) and any(r["srv_running_max"] is not None for r in lp),
              f"{len(metrics)} scrapes; srv_running_max {[r['srv_running_max'] for r in lp]}"),
        Check("scheduler log lines parsed", all(any(x["config_hash"] == h for x in logs) for h in hashes) and
              bool(logs), f"{len(logs)} Decode/Prefill lines"),
        Check("NVML telemetry", bool(gpu) and {r["source"] for r in gpu} == {"nvml"} and
              any(r.get("gpu_sm_util_mean") is not None for r in lp),
              f"{len(gpu)} samples, sources {sorted({str(r['source']) for r in gpu})}"),
        Check("stopped cleanly", bool(lp) and not any("env_dirty" in (r["trial_error_message"] or "") for r in lp),
              "; ".join(sorted({r["trial_error_message"] for r in lp if r["trial_error_message"]}))[:300]),
    ]
    return checks


def read_tables(run_dir: Path) -> dict[str, list[dict]]:
    from grid.storage.parquet import read_table

    return {t: read_table(run_dir, t).to_pylist()
            for t in ("load_points", "requests", "server_log", "server_metrics", "gpu_telemetry")}


def gpu_memory_used_mib() -> list[int] | None:
    """Memory in use per GPU (nvidia-smi), or None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True,
                         text=True)
    return [int(x) for x in out.stdout.split()] if out.returncode == 0 else None


def _run(argv: list[str], dry: bool, **kwargs) -> subprocess.CompletedProcess | None:
    print("$ " + shlex.join(argv), flush=True)
    if dry:
        return None
    return subprocess.run(argv, check=True, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="grid's GPU acceptance run (real SGLang, tiny random model)")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".gpu-acceptance")
    parser.add_argument("--python", help="a Python that already has grid[sglang] (skips the install)")
    parser.add_argument("--hardware", default="h100_x1", help="conf/hardware entry (labels the run; default h100_x1)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print every step; plan the sweep (grid dry_run, SGLang 0.5.9 flags) without running it")
    parser.add_argument("--check-only", type=Path, metavar="RUN_DIR", help="only check the tables of RUN_DIR")
    args = parser.parse_args(argv)

    if args.check_only:
        checks = check_tables(read_tables(args.check_only))
        for c in checks:
            print(f"{'PASS' if c.ok else 'FAIL'}  {c.name}  {c.detail}")
        return 0 if all(c.ok for c in checks) else 1

    work = args.workdir.resolve()
    model_dir, run_dir = work / "tiny-llama", work / "run"
    dry = args.dry_run
    t0 = time.monotonic()
    if args.python:
        python = args.python
    else:
        venv = work / "venv"
        python = str(venv / "bin" / "python")
        _run([sys.executable, "-m", "venv", str(venv)], dry)
        _run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], dry)
        _run([python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[sglang,dev]"], dry)
    _run([python, str(MAKE_MODEL), str(model_dir)], dry)
    overrides = sweep_overrides(model_dir, run_dir, python, args.hardware)
    if dry:  # plan it for real (validates every override) with this interpreter's grid, SGLang's flags of 0.5.9
        _run([python, "-m", "grid.run", *overrides], True)
        plan = subprocess.run([sys.executable, "-m", "grid.run", *[o for o in overrides if not o.startswith(
            ("hydra.run.dir", "fresh"))], "dry_run=true", "engine.version=0.5.9",
            f"hydra.run.dir={work / 'dry-run'}"], cwd=ROOT, capture_output=True, text=True)
        print(plan.stdout[-4000:] + plan.stderr[-2000:])
        print(f"$ {shlex.join([python, str(Path(__file__)), '--check-only', str(run_dir)])}")
        return plan.returncode
    before = gpu_memory_used_mib()
    if before is None:
        print("FAIL  NVIDIA GPU present  nvidia-smi not found or failing")
        return 1
    _run([python, "-m", "grid.run", *overrides], False, cwd=ROOT)
    after = gpu_memory_used_mib() or []
    checked = subprocess.run([python, str(Path(__file__)), "--check-only", str(run_dir)], cwd=ROOT)
    freed = all(a <= b + GPU_MEMORY_SLACK_MIB for a, b in zip(after, before))
    print(f"{'PASS' if freed else 'FAIL'}  GPU memory released after stop  before {before} MiB, after {after} MiB")
    print(json.dumps({"run_dir": str(run_dir), "seconds": round(time.monotonic() - t0)}))
    return 0 if checked.returncode == 0 and freed else 1


if __name__ == "__main__":
    sys.exit(main())
