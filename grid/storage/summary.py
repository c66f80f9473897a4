"""The keys of ``summary.json`` (written by grid/search/summary.py), listed with the other stored columns so that
docs/schema.md documents every file a run writes (``grid.storage.schema.describe_schema``)."""

from __future__ import annotations

import json
from pathlib import Path

#: The search record a run writes beside summary.json (grid/search/measured.py ``write_record``): what the search
#: launched and what it left out, and why.
SEARCH_FILE = "search.json"


def read_record(run_dir: str) -> dict:
    """The last run's search record (``{}`` when none or unreadable)."""
    try:
        return json.loads((Path(run_dir) / SEARCH_FILE).read_text())
    except (OSError, ValueError):
        return {}

#: Every key of summary.json: (key, JSON type, unit, meaning). docs/schema.md shows this table.
SUMMARY_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("launches", "int", "servers", "configurations launched (recorded and not refused before launch)"),
    ("gpu_seconds", "float", "GPU-s", "sum over launches of recorded startup (the twin's modelled startup when the "
     "server never became ready) plus the modelled duration of each load point run, times hardware.total_gpus"),
    ("best_label", "string", "", "label of the best configuration (null: none ranked)"),
    ("best_value", "float", "objective's unit", "its score under the objective"),
    ("objective", "string", "", "objective.kind"),
    ("search", "string", "", "search.kind"),
    ("configurations", "int", "", "configurations in the sweep"),
    ("refused", "int", "", "configurations refused before launch (recorded invalid / refused, no launch)"),
    ("known_to_fail", "int", "", "configurations a failure-table row says fail on this hardware"),
    ("not_run", "int", "", "configurations the search chose not to launch (search.json says why)"),
    ("early_stopped_points", "int", "load points", "load points skipped by early stopping (status not_run, "
     "error_class early_stop_slo | early_stop_twin_bound)"),
    ("early_stop_gpu_seconds_saved", "float", "GPU-s", "the twin's forecast of those points' modelled durations "
     "(forecast_duration_s), times hardware.total_gpus"),
    ("estimated_gpu_seconds", "float", "GPU-s", "the pre-run cost estimate (the twin's startup and every load point, "
     "as the plan prints it) of the configurations launched; null when some launch has no estimate"),
    ("estimate_error", "float", "fraction", "gpu_seconds / estimated_gpu_seconds - 1: the estimate's measured error "
     "on this run (early stopping makes it negative, a host slower than the twin's clock positive)"),
)


def key_table(name: str, intro: str, fields: tuple[tuple[str, str, str, str], ...]) -> str:
    """docs/schema.md's section on one JSON file of the run directory: ``### name``, ``intro``, then a markdown table
    of its keys (key, type, unit, definition)."""
    out = [f"### {name}", "", intro, "", "| key | type | unit | definition |", "|---|---|---|---|"]
    out += [f"| `{k}` | {t} | {u} | {d.replace('|', chr(92) + '|')} |" for k, t, u, d in fields]
    return "\n".join(out) + "\n"


def describe_summary() -> str:
    """Markdown table of summary.json's keys."""
    return key_table("summary.json", "One JSON object in the run directory, written with the report "
                     "(grid/search/summary.py).", SUMMARY_FIELDS)
