"""Every status and error class grid stores, with its meaning: the one list docs/schema.md shows (rendered by
``grid.storage.schema.describe_schema``). Tests check that the classes the code produces are listed here.

Where each comes from: request classes, grid/loadgen/records.py; launch and probe, grid/server/process.py, session.py
and probe.py; classes found during load, grid/sweep/measure.py with the log patterns of grid/server/logparse.py.
The code spells them with the Literal types of grid/server/statuses.py, checked against this table.
"""

from __future__ import annotations

from typing import Any

from grid.server.statuses import (
    TRIAL_CLASSES,
    PointStatus,
    RequestErrorClass,
    RequestStatus,
    TrialErrorClass,
    TrialStatus,
)

#: (column, value, meaning). Statuses first, then classes; ``trial_error_class`` of a trial whose every load point
#: failed on a healthy server is the load point's ``error_class`` (a request class), or ``all_points_failed``.
VOCABULARY: tuple[tuple[str, str, str], ...] = (
    # requests.status / error_class
    ("requests.status", "ok", "the request finished and produced at least one token"),
    ("requests.status", "failed", "the request failed; `error_class` says how"),
    ("requests.error_class", "http_error", "the server answered with an HTTP status other than 200 (`http_status`)"),
    ("requests.error_class", "conn_error", "connecting failed, or the connection broke (reset) mid-response"),
    ("requests.error_class", "read_timeout", "no bytes for `load.read_timeout_s`"),
    ("requests.error_class", "stall_timeout", "no new token for `load.stall_timeout_s` (counted from the send "
                                              "until the first token)"),
    ("requests.error_class", "parse_error", "an event (or the body) was not valid JSON of the expected shape"),
    ("requests.error_class", "server_error", "the server reported an error inside the stream, or finished with "
                                             "reason abort"),
    ("requests.error_class", "decode_error", "the body was not valid UTF-8 (e.g. a multi-byte character cut off at "
                                             "the end of the stream)"),
    ("requests.error_class", "truncated_stream", "the stream ended with neither a `finish_reason` nor the [DONE] "
                                                 "marker"),
    ("requests.error_class", "empty_output", "the response carried no generated token"),
    ("requests.error_class", "client_error", "an unexpected exception in grid's client (a bug in grid)"),
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
    # load_points.trial_error_class
    ("load_points.trial_error_class", "refused", "invalid: the installed SGLang would refuse this configuration "
                                                 "(flag, choice or combination); nothing launched"),
    ("load_points.trial_error_class", "startup_exit", "failed: the server exited before it was ready"),
    ("load_points.trial_error_class", "startup_oom", "failed: the server exited before ready with a CUDA out of "
                                                     "memory in its log"),
    ("load_points.trial_error_class", "startup_timeout", "failed: not ready within `engine.startup_timeout_s`"),
    ("load_points.trial_error_class", "probe_error", "failed: the correctness probe's requests failed"),
    ("load_points.trial_error_class", "garbage_output", "invalid: the probe's answers are garbage (one token "
                                                        "repeated, not text, none correct)"),
    ("load_points.trial_error_class", "empty_output", "invalid: a probe answer was empty"),
    ("load_points.trial_error_class", "nan_output", "invalid: the server logged NaN in the logits (at the probe or "
                                                    "during load)"),
    ("load_points.trial_error_class", "server_crash", "failed: the server process exited during a load point (exit "
                                                      "code in the message)"),
    ("load_points.trial_error_class", "server_hang", "failed: the process lives but produced no token, neither for "
                                                     "the load point's requests nor for a short check request sent "
                                                     "after it (or for the probe); the message names the timeout "
                                                     "that fired"),
    ("load_points.trial_error_class", "server_broken", "failed: the process lives but requests of a load point "
                                                       "failed fast (reset, HTTP 5xx or 429, an error in the stream) "
                                                       "and so did the check request after it"),
    ("load_points.trial_error_class", "runtime_oom", "failed: the server broke under load (exit, hang or failed "
                                                     "check) and its log shows a CUDA out of memory (or SGLang's "
                                                     "'Decode/Prefill out of memory')"),
    ("load_points.trial_error_class", "nccl_error", "failed: as runtime_oom, with an NCCL error or a collective "
                                                    "timeout in the log"),
    ("load_points.trial_error_class", "cuda_error", "failed: as runtime_oom, with a CUDA error (illegal memory "
                                                    "access, device-side assert) in the log"),
    ("load_points.trial_error_class", "all_points_failed", "failed: every load point failed on a server that still "
                                                           "answered (else the point's request class, e.g. "
                                                           "stall_timeout when the timeout is shorter than the TTFT)"),
    ("load_points.trial_error_class", "external_unreachable", "failed: an external server (engine=openai) did not "
                                                              "answer its readiness paths within "
                                                              "`engine.startup_timeout_s`"),
    ("load_points.trial_error_class", "env_dirty", "skipped: the node was not clean (a process of the last server "
                                                   "left, its port held, GPU memory not freed); nothing launched"),
    ("load_points.trial_error_class", "port_in_use", "skipped: every port tried was taken at launch"),
    ("load_points.trial_error_class", "actor_lost", "skipped: the Ray actor that owns the node's server died "
                                                    "(killed, its worker crashed, its node was lost); points measured "
                                                    "before are kept, the configuration runs again"),
    ("load_points.trial_error_class", "node_lost", "skipped: the Ray node the trial ran on left the cluster "
                                                   "mid-trial (the trial, the node's actor and its server went with "
                                                   "it); every point not_run, the configuration runs again on another "
                                                   "node"),
)


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
