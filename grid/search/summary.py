"""``summary.json``: what a run cost and what it found, in one small file in the run directory (pure).

* ``launches``: configurations of the sweep that were launched (recorded, and not refused before launch);
* ``gpu_seconds``: GPU-seconds those launches held the node: for each, its recorded startup (``startup_s``; the
  twin's modelled startup when the server never became ready) plus the modelled duration of every load point it ran
  (``(finished_unix_ns - started_unix_ns) x time_scale``), times ``hardware.total_gpus``;
* ``best_label`` / ``best_value``: the ranked best configuration and its score (null when none ranked);
* ``objective``, ``search``: the objective kind and search kind;
* ``configurations``, ``refused``, ``known_to_fail``, ``not_run``: counts of the sweep's configurations, those
  refused before launch, those the failure table says fail here, and those the search left out;
* ``early_stopped_points`` / ``early_stop_gpu_seconds_saved``: load points early stopping skipped (grid/search/levels.py)
  and what they would have cost: the twin's forecast of their modelled durations (``forecast_duration_s``) times
  ``hardware.total_gpus``.

Its keys, with types and units, are listed once in grid/storage/summary.py ``SUMMARY_FIELDS`` (docs/schema.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping, Sequence


def launch_seconds(rows: Iterable[Mapping], modelled_startup_s: Mapping[str, float] | None = None) -> dict[str, float]:
    """``config_hash`` -> modelled seconds the launch held the node (startup + load points); refused ones left out."""
    modelled_startup_s = modelled_startup_s or {}
    out: dict[str, float] = {}
    started: set[str] = set()
    for r in rows:
        h = r["config_hash"]
        if r.get("trial_error_class") == "refused":
            continue
        if h not in started:
            started.add(h)
            startup = r.get("startup_s")
            out[h] = float(startup if startup is not None else modelled_startup_s.get(h, 0.0))
        if r.get("status") != "not_run" and r.get("started_unix_ns") and r.get("finished_unix_ns"):
            out[h] += (r["finished_unix_ns"] - r["started_unix_ns"]) / 1e9 * float(r.get("time_scale") or 1.0)
    return out


def summarize(rows: Sequence[Mapping], verdicts: list, *, objective: str, search: str, gpu_count: int,
              configurations: int, refused: int = 0, known_to_fail: int = 0, not_run: int = 0,
              modelled_startup_s: Mapping[str, float] | None = None) -> dict:
    """The summary of a run from its load-point rows and the report's verdicts (grid.report.select.rank)."""
    from grid.search.levels import EARLY_STOP_CLASSES

    seconds = launch_seconds(rows, modelled_startup_s)
    best = next((v for v in verdicts if v.outcome == "best"), None)
    stopped = [r for r in rows if r.get("status") == "not_run" and r.get("error_class") in EARLY_STOP_CLASSES]
    return {
        "launches": len(seconds),
        "gpu_seconds": round(sum(seconds.values()) * gpu_count, 3),
        "best_label": best.label if best else None,
        "best_value": best.score if best else None,
        "objective": objective,
        "search": search,
        "configurations": configurations,
        "refused": refused,
        "known_to_fail": known_to_fail,
        "not_run": not_run,
        "early_stopped_points": len(stopped),
        "early_stop_gpu_seconds_saved": round(sum((r.get("forecast_duration_s") or 0.0 for r in stopped), 0.0)
                                              * gpu_count, 3),
    }


def write(run_dir: str, summary: dict) -> Path:
    path = Path(run_dir) / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path
