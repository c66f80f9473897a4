"""`+experiment=seed_session` replays the seed session on the twin: every row within 25% of the seed's value, on any
host. The twin keeps its virtual clock (the default), so no load point can be host noise (grid/metrics/hostnoise.py:
neither the load generator nor the twin records a loss there) and every condition is compared."""

import csv
from pathlib import Path

import pandas as pd
import pytest

from tests.grid_cli import run_grid

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_seed_session_within_25_percent(tmp_path):
    run_grid("+experiment=seed_session", "ray.dashboard=false", run_dir=tmp_path, timeout_s=900)
    with open(tmp_path / "seed_vs_twin.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["condition", "metric", "unit", "seed", "twin"]
    assert len(rows) == 15
    assert len({r["condition"] for r in rows}) == 5
    points = pd.read_parquet(tmp_path / "parquet" / "load_points")
    assert set(points.status) == {"ok"} and points.client_lag_pct.isna().all() and points.twin_behind_pct.isna().all()
    off = [r for r in rows if r["twin"] == "" or abs(float(r["twin"]) - float(r["seed"])) / float(r["seed"]) > 0.25]
    assert off == []
