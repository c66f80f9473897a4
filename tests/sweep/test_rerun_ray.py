"""Re-running chosen configurations through the whole pipeline (grid/sweep/rerun.py): ``probe.enabled=false`` re-runs
what a probe had marked invalid, ``rerun.label`` the configurations it names, and the others stay as recorded. On the
twin's virtual clock no point is host noise (grid/metrics/hostnoise.py), so every check is made on any host."""

from pathlib import Path

import pandas as pd
import pytest

from tests.grid_cli import run_grid

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

SWEEP = ["+sweep=nsa_backends", "~sweep.load", "sweep.grid.dsa_prefill_backend=[trtllm]",
         "sweep.grid.dsa_decode_backend=[trtllm,flashmla_kv]", "load.concurrency=[4]", "load.input_len=64",
         "load.output_len=32", "ray.dashboard=false", "search=exhaustive",
         "load.min_prompts=8"]  # re-runs, not tails (tests/config/test_tails.py): 8 requests per point
OK, NAN = "decode=trtllm", "decode=flashmla_kv"  # labels name the settings that vary


def grid_run(run_dir, *extra):
    return run_grid(*SWEEP, *extra, run_dir=run_dir).stdout


def trials(run_dir) -> dict[str, tuple[str, str, str | None]]:
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    return {r.label: (r.trial_id, r.trial_status, r.probe_status) for r in lp.itertuples()}


def test_rerun_by_probe_change_and_by_label(tmp_path):
    grid_run(tmp_path)
    first = trials(tmp_path)
    assert first[OK][1:] == ("ok", "passed") and first[NAN][1:] == ("invalid", "failed")
    # the probe that marked it invalid is off now: it runs again (and NaN in the log during load still marks it)
    out = grid_run(tmp_path, "probe.enabled=false")
    assert "Running 1 recorded configuration(s) again" in out
    assert "the probe that marked it invalid is now off" in out
    second = trials(tmp_path)
    assert second[OK] == first[OK]                                   # untouched
    assert second[NAN][0] != first[NAN][0] and second[NAN][2] == "skipped"
    # re-run one chosen by its label; the other stays as recorded
    out = grid_run(tmp_path, f"rerun.label=['{OK}']")
    third = trials(tmp_path)
    assert third[OK][0] != first[OK][0] and third[OK][1] == "ok"
    assert third[NAN] == second[NAN]
    superseded = pd.read_parquet(next((tmp_path / "parquet" / "_superseded").glob("*/load_points")))
    assert set(superseded.trial_id) <= {first[OK][0], first[NAN][0], second[OK][0], second[NAN][0]}
    # every earlier result kept: one file per configuration re-run in each run
    kept = list((tmp_path / "parquet" / "_superseded").glob("*/load_points/*.parquet"))
    assert len(kept) == 2, kept
    assert "Best configuration: decode=trtllm" in out
