"""``summary.json``: what a run cost and what it found, in one small file in the run directory (pure).

* ``launches``: configurations of the sweep that were launched (recorded, and not refused before launch);
* ``gpu_seconds``: GPU-seconds those launches held the node: for each, its recorded startup (``startup_s``; the
  twin's modelled startup when the server never became ready) plus the modelled seconds every load point it ran held
  the server (``held_s``: first send, warm-up included, to last end; rows written before that column:
  ``(finished_unix_ns - started_unix_ns) x time_scale``), times ``hardware.total_gpus``;
* ``best_label`` / ``best_value``: the ranked best configuration and its score (null when none ranked);
* ``objective``, ``search``: the objective kind and search kind;
* ``configurations``, ``refused``, ``known_to_fail``, ``not_run``: counts of the sweep's configurations, those
  refused before launch, those the failure table says fail here, and those the search left out;
* ``early_stopped_points`` / ``early_stop_gpu_seconds_saved``: load points early stopping skipped (grid/search/levels.py)
  and what they would have cost: the twin's forecast of their modelled durations (``forecast_duration_s``) times
  ``hardware.total_gpus``;
* ``estimated_gpu_seconds`` / ``estimate_error``: the pre-run estimate (grid/search/plan.py ``cost_lines``: the twin's
  startup and every load point) of the configurations launched, and how far ``gpu_seconds`` came out from it
  (``gpu_seconds / estimated_gpu_seconds - 1``); null when some launch has no estimate (an engine the twin does not
  model). The plan calls its figure an estimate; this is its measured error, run by run (:func:`cost_note`).

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
        if r["trial_error_class"] == "refused":
            continue
        if h not in started:
            started.add(h)
            startup = r["startup_s"]
            out[h] = float(startup if startup is not None else modelled_startup_s.get(h, 0.0))
        if r["status"] == "not_run":
            continue
        if _present(r["held_s"]):
            out[h] += float(r["held_s"])
        elif r["started_unix_ns"] and r["finished_unix_ns"]:  # rows written before held_s
            out[h] += (r["finished_unix_ns"] - r["started_unix_ns"]) / 1e9 * float(r["time_scale"] or 1.0)
    return out


def _present(value: object) -> bool:
    return value is not None and value == value  # NaN: a column the row's writer did not have


def summarize(rows: Sequence[Mapping], verdicts: list, *, objective: str, search: str, gpu_count: int,
              configurations: int, refused: int = 0, known_to_fail: int = 0, not_run: int = 0,
              modelled_startup_s: Mapping[str, float] | None = None,
              estimated_s: Mapping[str, float] | None = None) -> dict:
    """The summary of a run from its load-point rows and the report's verdicts (grid.report.select.rank).
    ``estimated_s``: config hash -> the pre-run estimate of that launch in modelled seconds (startup + load, per GPU:
    grid.search.predict ``Forecast.gpu_s``)."""
    from grid.search.levels import EARLY_STOP_CLASSES

    seconds = launch_seconds(rows, modelled_startup_s)
    best = next((v for v in verdicts if v.outcome == "best"), None)
    stopped = [r for r in rows if r["status"] == "not_run" and r["error_class"] in EARLY_STOP_CLASSES]
    estimated_s = estimated_s or {}
    estimated = (round(sum(estimated_s[h] for h in seconds) * gpu_count, 3)
                 if seconds and all(estimated_s.get(h) for h in seconds) else None)
    gpu_seconds = round(sum(seconds.values()) * gpu_count, 3)
    return {
        "launches": len(seconds),
        "gpu_seconds": gpu_seconds,
        "best_label": best.label if best else None,
        "best_value": best.score if best else None,
        "objective": objective,
        "search": search,
        "configurations": configurations,
        "refused": refused,
        "known_to_fail": known_to_fail,
        "not_run": not_run,
        "early_stopped_points": len(stopped),
        "early_stop_gpu_seconds_saved": round(sum((r["forecast_duration_s"] or 0.0 for r in stopped), 0.0)
                                              * gpu_count, 3),
        "estimated_gpu_seconds": estimated,
        "estimate_error": round(gpu_seconds / estimated - 1, 4) if estimated else None,
    }


def cost_note(summary: Mapping) -> str | None:
    """The report's line on what the run cost against the pre-run estimate (a ``summarize`` dict), split into what
    early stopping saved and how far the rest ran from the twin's forecast (a host slower than the twin's clock, the
    gaps between points, failed launches that ran no load); None without an estimate. Pure."""
    est, used = summary.get("estimated_gpu_seconds"), summary.get("gpu_seconds")
    if not est or used is None:
        return None
    saved = summary.get("early_stop_gpu_seconds_saved") or 0.0
    n = summary.get("launches", 0)
    text = (f"Cost: {used / 3600:.2f} GPU-hours recorded for {n} launch{'es' if n != 1 else ''}; the plan estimated "
            f"{est / 3600:.2f} for them ({used / est - 1:+.1%}")
    if saved and est - saved > 0:
        text += (f": early stopping skipped {saved / 3600:.2f} GPU-hours of load points, and what ran took "
                 f"{used / (est - saved) - 1:+.1%} against its forecast")
    return text + "; summary.json estimate_error)"


def write(run_dir: str, summary: dict) -> Path:
    path = Path(run_dir) / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path
