"""Re-running chosen configurations through the whole pipeline (issue 26 item 3): before, ``probe.enabled=false`` and
``retry_failed=true`` re-ran nothing a probe had marked invalid, and only ``fresh=true`` (every result deleted) did."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.timing import slack

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

SWEEP = ["+sweep=nsa_backends", "~sweep.load", "sweep.grid.dsa_prefill_backend=[trtllm]",
         "sweep.grid.dsa_decode_backend=[trtllm,flashmla_kv]", "load.concurrency=[4]", "load.input_len=64",
         "load.output_len=32", "ray.dashboard=false", "engine.time_scale=50", "search=exhaustive",
         "load.min_prompts=8"]  # re-runs, not tails (tests/config/test_tails.py): 8 requests per point
OK, NAN = "decode=trtllm", "decode=flashmla_kv"  # labels name the settings that vary


def grid_run(run_dir, *extra):
    # 10 minutes on a quiet machine, stretched by the host's load (at 4x load one run took over 10 minutes)
    out = subprocess.run([sys.executable, "-m", "grid.run", *SWEEP, *extra, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600 * slack(), env={**__import__("os").environ,
                                                                            "COLUMNS": "200"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def trials(run_dir) -> dict[str, tuple[str, str, str | None]]:
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    return {r.label: (r.trial_id, r.trial_status, r.probe_status) for r in lp.itertuples()}


def noisy(run_dir) -> set[str]:
    """Labels whose every measured point was host noise (grid/metrics/hostnoise.py): on a host loaded to several
    runnable threads per core (issue 26 item 8) a re-run measures them again as well, as it should."""
    from grid.metrics.hostnoise import all_host_noise

    rows = pd.read_parquet(run_dir / "parquet" / "load_points").to_dict("records")
    return {label for label in {r["label"] for r in rows}
            if all_host_noise([r for r in rows if r["label"] == label])}


def test_rerun_by_probe_change_and_by_label(tmp_path):
    grid_run(tmp_path)
    first, first_noisy = trials(tmp_path), noisy(tmp_path)
    assert first[OK][1:] == ("ok", "passed") and first[NAN][1:] == ("invalid", "failed")
    # the probe that marked it invalid is off now: it runs again (and NaN in the log during load still marks it)
    out = grid_run(tmp_path, "probe.enabled=false")
    again = 1 + (OK in first_noisy)
    assert f"Running {again} recorded configuration(s) again" in out
    assert "the probe that marked it invalid is now off" in out
    second, second_noisy = trials(tmp_path), noisy(tmp_path)
    if OK not in first_noisy:
        assert second[OK] == first[OK]                               # untouched
    assert second[NAN][0] != first[NAN][0] and second[NAN][2] == "skipped"
    # re-run one chosen by its label; the other stays as recorded (unless all it measured was host noise)
    out = grid_run(tmp_path, f"rerun.label=['{OK}']")
    third = trials(tmp_path)
    assert third[OK][0] != first[OK][0] and third[OK][1] == "ok"
    if NAN not in second_noisy:
        assert third[NAN] == second[NAN]
    superseded = pd.read_parquet(next((tmp_path / "parquet" / "_superseded").glob("*/load_points")))
    assert set(superseded.trial_id) <= {first[OK][0], first[NAN][0], second[OK][0], second[NAN][0]}
    assert len(superseded) >= 1
    # every earlier result kept, one file per configuration re-run in each run (a configuration re-run twice, as a
    # host-noise one is under load, leaves a file under each run's folder, with the same name)
    kept = list((tmp_path / "parquet" / "_superseded").glob("*/load_points/*.parquet"))
    assert len(kept) == again + 1 + (NAN in second_noisy), kept
    if OK not in noisy(tmp_path):
        assert "Best configuration: decode=trtllm" in out
