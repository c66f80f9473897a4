"""`+experiment=seed_session` replays the seed session on the twin: every row within 25% of the seed's value. A
condition whose load point grid flagged as host noise (grid/metrics/hostnoise.py) may miss, but the test counts the
conditions it checked in full and fails below :data:`MIN_CHECKED_CONDITIONS`: a busy host makes it fail, never check
less."""

import csv
from pathlib import Path

import pandas as pd
import pytest

from grid.metrics.hostnoise import host_noise
from tests.grid_cli import run_grid

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

#: Conditions (the seed session's five workloads, conf/experiment/seed_session.yaml) whose every row must be compared
#: and found within 25%: all five but one. The one is the margin for other work taking a single load point over the
#: host-noise bound (each condition is one point of a few seconds): README "The twin's clock" measured losses of at
#: most 18.9% (the bound is 20%) beside two CPU burners per core, so even one is rare on a host within the load the
#: suite is claimed for (tests/timing.py SLACK_CAP); two would leave three workloads compared, and fail instead.
MIN_CHECKED_CONDITIONS = 4


def test_seed_session_within_25_percent(tmp_path):
    run_grid("+experiment=seed_session", "ray.dashboard=false", run_dir=tmp_path, timeout_s=900)
    with open(tmp_path / "seed_vs_twin.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["condition", "metric", "unit", "seed", "twin"]
    assert len(rows) == 15
    conditions = {r["condition"] for r in rows}
    assert len(conditions) == 5
    points = pd.read_parquet(tmp_path / "parquet" / "load_points").to_dict("records")
    noisy = {p["label"] for p in points if p["status"] in ("ok", "partial") and host_noise(p)}
    assert noisy <= conditions
    measured = {p["label"] for p in points if p["status"] in ("ok", "partial") and not host_noise(p)}
    missed = set()  # conditions with a row not measured or off by more than 25%: allowed only for host noise
    for r in rows:
        if r["twin"] == "":  # not measured (grid.experiments.twin_value): only where the host was too busy
            assert r["condition"] in noisy and r["condition"] not in measured, r
            missed.add(r["condition"])
            continue
        seed, twin = float(r["seed"]), float(r["twin"])
        if abs(twin - seed) / seed > 0.25:
            assert r["condition"] in noisy, r
            missed.add(r["condition"])
    checked = conditions - missed
    assert len(checked) >= MIN_CHECKED_CONDITIONS, (
        f"only {len(checked)} of {len(conditions)} conditions checked within 25% ({sorted(checked)}); host noise "
        f"excused {sorted(missed)}, at most {len(conditions) - MIN_CHECKED_CONDITIONS} may be")
