"""A small sweep through Ray Tune and the server actor against the twin, end to end, as a user runs it."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

SWEEP = [
    "+sweep=nsa_backends",
    "~sweep.load",
    "sweep.grid.dsa_prefill_backend=[trtllm,fa3]",
    "sweep.grid.dsa_decode_backend=[trtllm,flashmla_kv]",
    "load.concurrency=[1,4]",
    "load.input_len=64",
    "load.output_len=32",
    "ray.dashboard=false",
    "engine.time_scale=50",
]


def grid_run(args, run_dir):
    return subprocess.run([sys.executable, "-m", "grid.run", *args, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**__import__("os").environ,
                                                                             "COLUMNS": "200"})


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sweep")
    out = grid_run(SWEEP, run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out.stdout


def test_every_configuration_recorded_with_verdict(sweep):
    run_dir, stdout = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    assert lp.config_hash.nunique() == 4 and len(lp) == 8
    by_label = lp.groupby("label").first()
    assert by_label.loc["prefill=trtllm decode=trtllm", "trial_status"] == "ok"
    fa3 = lp[lp.label.str.contains("prefill=fa3")]
    assert set(fa3.trial_status) == {"failed"} and set(fa3.status) == {"not_run"}
    assert fa3.trial_error_class.str.startswith("startup").all()
    kv = by_label.loc["prefill=trtllm decode=flashmla_kv"]
    assert kv.trial_status == "invalid" and kv.trial_error_class in ("nan_output", "garbage_output")
    assert "Best configuration: prefill=trtllm decode=trtllm" in stdout


def test_printed_numbers_equal_parquet(sweep):
    run_dir, stdout = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    best = lp[(lp.label == "prefill=trtllm decode=trtllm")].sort_values("point_index")
    for value in best.output_tok_per_s:
        assert f"{value:.1f}" in stdout
    report = (run_dir / "report.md").read_text()
    assert f"{best.output_tok_per_s.max():.1f}" in report


def test_requests_table_has_every_request(sweep):
    run_dir, _ = sweep
    rq = pd.read_parquet(run_dir / "parquet" / "requests")
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    ran = lp[lp.status != "not_run"]
    assert len(rq) == int(ran.num_prompts.sum())
    assert (rq.output_tokens == 32).all() and (rq.ttft_ms > 0).all()


def test_rerun_resumes_without_running_anything(sweep):
    run_dir, _ = sweep
    out = grid_run(SWEEP, run_dir)
    assert out.returncode == 0
    assert "4 already recorded, 0 to run" in out.stdout
    assert "Best configuration: prefill=trtllm decode=trtllm" in out.stdout
