"""Importing grid's modules changes nothing: no environment variables set, no tables registered by side effect
(reading gpu_telemetry used to fail unless grid.sweep.samplers had been imported)."""

import os
import subprocess
import sys
from pathlib import Path
from tests.timing import slack

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_driver_sets_no_environment_and_tables_need_no_sampler_import():
    code = (
        "import os, sys\n"
        "before = dict(os.environ)\n"
        "import grid.sweep.driver, grid.app\n"
        "assert dict(os.environ) == before, sorted(set(os.environ) ^ set(before))\n"
        "assert 'grid.sweep.samplers' not in sys.modules\n"
        "from grid.storage.parquet import TABLES\n"
        "print(','.join(TABLES))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TUNE_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120 * slack())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "requests,server_log,accuracy,server_metrics,gpu_telemetry,load_points"


def test_the_driver_sets_its_ray_environment_when_it_runs(monkeypatch):
    from grid.sweep.driver import RAY_ENVIRONMENT, set_ray_environment

    for key in RAY_ENVIRONMENT:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_DEDUP_LOGS", "1")  # the user's own value wins
    set_ray_environment()
    assert {k: os.environ[k] for k in RAY_ENVIRONMENT} == {**RAY_ENVIRONMENT, "RAY_DEDUP_LOGS": "1"}
