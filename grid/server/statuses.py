"""Every status and error class grid stores, as ``Literal`` types for the code that produces them (the trial
boundary in grid/server/handle.py, the probe, the process, the log patterns, the trial's verdict in
grid/sweep/measure.py). What each value means is the table of grid/storage/vocabulary.py (docs/schema.md shows it);
tests/storage/test_vocabulary_types.py checks that each type lists exactly the values of its column there, in
order. The types are written out, not computed from the table, so that a type checker reads them; they sit in
grid.server, below grid.storage, so that the server's modules may use them (the package layers in pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RequestStatus = Literal["ok", "failed"]
RequestErrorClass = Literal["http_error", "conn_error", "read_timeout", "stall_timeout", "parse_error", "server_error",
                            "decode_error", "truncated_stream", "empty_output", "client_error"]
PointStatus = Literal["ok", "partial", "failed", "not_run"]
TrialStatus = Literal["ok", "failed", "invalid", "skipped"]
TrialErrorClass = Literal["refused", "startup_exit", "startup_oom", "startup_timeout", "probe_error", "garbage_output",
                          "empty_output", "nan_output", "server_crash", "server_hang", "server_broken", "runtime_oom",
                          "nccl_error", "cuda_error", "all_points_failed", "external_unreachable", "env_dirty",
                          "port_in_use", "actor_lost", "node_lost"]
#: ``probe_status``: the correctness probe passed, failed, or was not sent (``probe.enabled=false``).
ProbeStatus = Literal["passed", "failed", "skipped"]

#: The phase of a trial in which a trial error class is decided: ``before_launch`` (nothing started), ``startup``
#: (launched, not ready), ``probe`` (ready; the correctness probe), ``load`` (during or after a load point).
Phase = Literal["before_launch", "startup", "probe", "load"]


@dataclass(frozen=True)
class TrialClass:
    """What a trial error class means for the configuration: the ``trial_status`` it gives and its phase. A class
    whose status is ``skipped`` is an infrastructure problem, never charged to the configuration (run again)."""

    status: TrialStatus
    phase: Phase

    @property
    def charged(self) -> bool:
        """True when the class counts against the configuration (it is not an infrastructure problem)."""
        return self.status != "skipped"


#: Every trial error class with its status and phase: the one place the code maps a class to a status (the
#: session, the trial's verdict, the lost-actor and lost-node paths) and the report reads a class's phase.
#: docs/schema.md shows both beside each class's meaning (grid/storage/vocabulary.py); tests/storage/
#: test_vocabulary_types.py checks that this table lists exactly the ``TrialErrorClass`` values and that each
#: meaning there starts with this status.
TRIAL_CLASSES: dict[TrialErrorClass, TrialClass] = {
    "refused": TrialClass("invalid", "before_launch"),
    "startup_exit": TrialClass("failed", "startup"),
    "startup_oom": TrialClass("failed", "startup"),
    "startup_timeout": TrialClass("failed", "startup"),
    "probe_error": TrialClass("failed", "probe"),
    "garbage_output": TrialClass("invalid", "probe"),
    "empty_output": TrialClass("invalid", "probe"),
    "nan_output": TrialClass("invalid", "probe"),         # NaN in the logits: at the probe, or noticed during load
    "server_crash": TrialClass("failed", "load"),
    "server_hang": TrialClass("failed", "load"),
    "server_broken": TrialClass("failed", "load"),
    "runtime_oom": TrialClass("failed", "load"),
    "nccl_error": TrialClass("failed", "load"),
    "cuda_error": TrialClass("failed", "load"),
    "all_points_failed": TrialClass("failed", "load"),
    "external_unreachable": TrialClass("failed", "startup"),
    "env_dirty": TrialClass("skipped", "before_launch"),
    "port_in_use": TrialClass("skipped", "startup"),
    "actor_lost": TrialClass("skipped", "load"),
    "node_lost": TrialClass("skipped", "load"),
}


def status_of(error_class: str | None) -> TrialStatus:
    """The ``trial_status`` a trial error class gives (:data:`TRIAL_CLASSES`). A request class that ended a trial
    (every point failed that way on a healthy server, e.g. ``stall_timeout``), or none, gives ``failed``."""
    known = trial_class(error_class)
    return known.status if known is not None else "failed"


def trial_class(error_class: str | None) -> TrialClass | None:
    """:data:`TRIAL_CLASSES`' entry for ``error_class`` (None for a request class, an unknown one, or none)."""
    return TRIAL_CLASSES.get(error_class) if error_class else None  # type: ignore[call-overload]
