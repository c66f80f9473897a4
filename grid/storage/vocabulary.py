"""Every status and error class grid stores, with its meaning: the one list docs/schema.md shows (rendered by
``grid.storage.schema.describe_schema``). Tests check that the classes the code produces are listed here.

Where each comes from: request classes, grid/loadgen/records.py; launch and probe, grid/server/process.py, session.py
and probe.py; classes found during load, grid/sweep/measure.py with the log patterns of grid/server/logparse.py.
The code spells them with the Literal types of grid/server/statuses.py, checked against this table.
"""

from __future__ import annotations

from typing import Any

from grid.loadgen.records import REQUEST_ERROR_CLASSES
from grid.server.statuses import (
    FAILURE_CLASS,
    FAILURE_CLASSES,
    TRIAL_CLASSES,
    PointStatus,
    RequestErrorClass,
    RequestStatus,
    TrialErrorClass,
    TrialStatus,
)

#: (column, value, meaning). Statuses first, then classes (the trial error classes from grid/server/statuses.py
#: ``FAILURE_CLASSES``); ``trial_error_class`` of a trial whose every load point
#: failed on a healthy server is the load point's ``error_class`` (a request class), or ``all_points_failed``.
VOCABULARY: tuple[tuple[str, str, str], ...] = (
    # requests.status / error_class
    ("requests.status", "ok", "the request finished and produced at least one token"),
    ("requests.status", "failed", "the request failed; `error_class` says how"),
    *(("requests.error_class", name, meaning) for name, meaning in REQUEST_ERROR_CLASSES.items()),
    # load_points.status
    ("load_points.status", "ok", "every measured request of the load point succeeded; only these points rank"),
    ("load_points.status", "partial", "some requests succeeded, some failed: the failures count against goodput and "
                                      "SLO attainment, and the point does not rank"),
    ("load_points.status", "failed", "no request of the load point succeeded"),
    ("load_points.status", "not_run", "not measured: the trial ended before it (its `error_class` is the trial's), "
                                      "or early stopping skipped it (`error_class` early_stop_slo or "
                                      "early_stop_twin_bound, `skip_reason`)"),
    # load_points.error_class of points skipped by early stopping (grid/search/levels.py, search.early_stop)
    ("load_points.error_class", "early_stop_slo", "not_run: a lower level of the same kind already missed the SLOs "
                                                  "(latency does not fall as load rises); `skip_reason` names it"),
    ("load_points.error_class", "early_stop_twin_bound", "not_run: the twin's upper bound at this level (forecast / "
                                                         "(1 - search.twin_bound_error)) is below the best score "
                                                         "measured so far, so it cannot win; `skip_reason` gives the "
                                                         "numbers"),
    # load_points.trial_status
    ("load_points.trial_status", "ok", "the server started, answered the probe and did not break under load; its "
                                       "load points may rank"),
    ("load_points.trial_status", "failed", "the server did not start, crashed, hung or broke under load; never "
                                           "ranked"),
    ("load_points.trial_status", "invalid", "the configuration was refused before launch, or its output is wrong "
                                            "(probe, or NaN in the logits during load); never ranked"),
    ("load_points.trial_status", "skipped", "an infrastructure problem, never charged to the configuration; run "
                                            "again on resume"),
) + tuple(("load_points.trial_error_class", c.name, f"{c.status}: {c.meaning}") for c in FAILURE_CLASSES)


def describe_vocabulary() -> str:
    """A Markdown table of :data:`VOCABULARY`."""
    out = ["### statuses and error classes", "",
           "Each `trial_error_class` also gives its phase and whether it is charged to the configuration "
           "(grid/server/statuses.py `TRIAL_CLASSES`, the one map from a class to its status).", "",
           "| column | value | meaning |", "|---|---|---|"]
    for col, value, meaning in VOCABULARY:
        if col == "load_points.trial_error_class":
            known = TRIAL_CLASSES[value]  # type: ignore[index]
            meaning += f" (phase: {known.phase}; {'charged to the configuration' if known.charged else 'not charged'})"
            wordings = FAILURE_CLASS[value].wordings
            if wordings:
                meaning += "; in the log: " + "; ".join(f"`{w.example}` ({w.source})" for w in wordings)
        out.append(f"| `{col}` | `{value}` | {meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(out) + "\n"


#: Each Literal type of grid/server/statuses.py and the ``VOCABULARY`` column it spells
#: (tests/storage/test_vocabulary_types.py checks that each lists exactly that column's values, in order).
TYPED_COLUMNS: dict[str, Any] = {
    "requests.status": RequestStatus,
    "requests.error_class": RequestErrorClass,
    "load_points.status": PointStatus,
    "load_points.trial_status": TrialStatus,
    "load_points.trial_error_class": TrialErrorClass,
}
