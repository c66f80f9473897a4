"""Every status and error class grid stores, as ``Literal`` types for the code that produces them (the trial
boundary in grid/server/handle.py, the probe, the process, the log patterns, the trial's verdict in
grid/sweep/measure.py). What each value means is the table of grid/storage/vocabulary.py (docs/schema.md shows it);
tests/storage/test_vocabulary_types.py checks that each type lists exactly the values of its column there, in
order. The types are written out, not computed from the table, so that a type checker reads them; they sit in
grid.server, below grid.storage, so that the server's modules may use them (the package layers in pyproject.toml).
"""

from __future__ import annotations

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
