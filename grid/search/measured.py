"""Scores already measured, read back from the run directory's Parquet tables (the report's own judgement:
grid.report.select.rejudge + rank under the current objective), and the search's record ``search.json``."""

from __future__ import annotations

import json
from pathlib import Path

from grid.config.schema import RunSpec
from grid.storage.summary import SEARCH_FILE

#: The requests columns the SLO judgement needs (as grid.app.REQUEST_COLUMNS).
REQUEST_COLUMNS = ("config_hash", "point_index", "status", "ttft_ms", "tpot_ms", "e2e_ms")


def scores(spec: RunSpec, hashes: set[str] | None = None) -> dict[str, float | None]:
    """``config_hash`` -> the objective's score of each recorded configuration (None: failed, invalid, or no point
    meeting the SLOs); only ``hashes`` when given."""
    from grid.report.select import rank, rejudge
    from grid.storage.parquet import read_points, read_table

    rows = read_points(spec.run_dir, hashes)
    if not rows:
        return {}
    wanted = {r["config_hash"] for r in rows}
    requests = [r for r in read_table(spec.run_dir, "requests", list(REQUEST_COLUMNS)).to_pylist()
                if r["config_hash"] in wanted]
    verdicts = rank(rejudge(rows, requests, spec.objective.slo), spec.objective)
    return {v.config_hash: v.score if v.outcome in ("best", "lost") else None for v in verdicts}


def only_host_noise(spec: RunSpec, config_hash: str) -> bool:
    """Whether every load point ``config_hash`` measured was host noise (grid/metrics/hostnoise.py): nothing of it
    counts, and the search takes it as a sign the host is too busy."""
    from grid.metrics.hostnoise import all_host_noise
    from grid.storage.parquet import read_points

    try:
        rows = read_points(spec.run_dir, {config_hash})
    except (OSError, KeyError, ValueError):
        return False
    return all_host_noise(rows)


def write_record(run_dir: str, record: dict) -> Path:
    path = Path(run_dir) / SEARCH_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.replace(path)
    return path


#: search.json's keys: (key, type, unit, definition), for docs/schema.md (grid/docs.py).
SEARCH_FILE_KEYS = (
    ("search", "string", "", "the search that ran (`search.kind`)"),
    ("issued", "list", "", "config hashes in the order the search handed them out (refused ones first)"),
    ("skipped", "object", "", "config hash -> label and reason of each configuration the search chose not to launch"),
    ("known_to_fail", "object", "", "config hash -> label and text of each configuration known to fail here"),
    ("objective", "string", "", "the objective the scores below are of (`objective.kind`)"),
    ("calibrated", "bool", "", "whether the forecasts are the twin calibrated on the sweep's measurements "
                               "(calibration.json) or its spec-sheet model"),
    ("forecasts", "object", "objective's unit",
     "config hash -> `label`, `forecast` (the twin's score), `expected` (with the twin's error learned from the "
     "measured configurations, grid/search/intervals.py), `low` / `high` (its 95% interval for a measurement) and "
     "`measured` (null: not run), for every configuration that could launch and has a positive forecast"),
)


def describe_search_file() -> str:
    """docs/schema.md's section on ``search.json``."""
    from grid.storage.summary import key_table

    return key_table("search.json", "The search's record (grid/sweep/driver.py `record_search`), written when the "
                     "sweep's trials end: what it launched, what it left out and why, and each configuration's "
                     "forecast with its interval (the report's \"The twin's forecasts\" table).", SEARCH_FILE_KEYS)
