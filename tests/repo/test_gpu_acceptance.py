"""The GPU acceptance command (experiments/gpu_acceptance.py) cannot run without a GPU: its dry run plans the real
sweep, and its checks are exercised on a twin trial's tables (where exactly the GPU-only checks fail)."""

import subprocess
import sys
from pathlib import Path

from tests.sweep.test_measure import run_one, spec_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import gpu_acceptance  # noqa: E402


def test_dry_run_plans_two_sglang_configurations(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "gpu_acceptance.py"), "--dry-run",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "pip install -q -e" in done.stdout and "[sglang,dev]" in done.stdout
    assert "make_tiny_model.py" in done.stdout and "probe.enabled=false" in done.stdout
    launches = [line for line in done.stdout.splitlines() if "-m sglang.launch_server" in line]
    assert len(launches) == 2 and sum("--disable-cuda-graph" in line for line in launches) == 1
    assert all(f"--model-path {tmp_path}/tiny-llama" in line for line in launches)


def test_checks_on_a_twin_run_fail_only_where_a_gpu_is_needed(tmp_path):
    # the twin on the wall clock: the /metrics check reads the gauges scraped while a point runs, in real time, as on a
    # GPU server; on the virtual clock a point can end before the first scrape (grid/sweep/samplers.py FIRST_POLL_S)
    spec = spec_for(tmp_path, "probe.enabled=false", "load.output_len=512", "load.min_prompts=8", "engine.clock=real")
    _, rows, _ = run_one(spec)
    assert {r["probe_status"] for r in rows} == {"skipped"}
    checks = gpu_acceptance.check_tables(gpu_acceptance.read_tables(tmp_path), configs=1, points=2)
    failed = {c.name for c in checks if not c.ok}
    assert failed == {"command is SGLang's", "NVML telemetry"}, [(c.name, c.detail) for c in checks]
    assert len(checks) == 11
