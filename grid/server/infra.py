"""Infrastructure failures: faults of the machinery around a server, never charged to the configuration it serves.

A trial that ends in one of these is recorded ``trial_status = skipped`` with the class below as
``trial_error_class``; its configuration has no verdict yet and runs again (on a later attempt of the same
invocation, or when the same command runs again). Load points measured before the fault are kept as measured.

The classes that the server session itself raises (``env_dirty``, ``port_in_use``) are documented in
grid/server/session.py; this module holds the ones from outside the session (the Ray actor that owns it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from grid.server.handle import LaunchRequest, LaunchResult, ServerHandle
from grid.server.statuses import TrialErrorClass, status_of

T = TypeVar("T")

INFRA_CLASSES = {
    "env_dirty": "the node was not clean after the previous server stopped (its processes, port or GPU memory)",
    "port_in_use": "the server's port stayed taken by another process through every retry",
    "actor_lost": "the Ray actor that owns the node's server died (killed, its worker crashed, its node was lost); "
                  "its server's process group died with it",
    "node_lost": "the Ray node the trial ran on left the cluster mid-trial (its raylet died: machine down, pod "
                 "evicted); the trial, the node's actor and its server went with it (grid/cluster/lost.py)",
}


class InfrastructureLost(RuntimeError):
    """The machinery that runs the server went away mid-trial. ``error_class`` is one of ``INFRA_CLASSES``.
    Deliberately not an ``OSError``: code that tolerates a failed HTTP poll must not swallow it."""

    def __init__(self, error_class: TrialErrorClass, message: str) -> None:
        super().__init__(message)
        self.error_class: TrialErrorClass = error_class


class GuardedServer:
    """A ServerHandle (grid/server/handle.py) around another that survives the loss of the machinery behind it.

    The first call that raises ``InfrastructureLost`` is remembered in ``lost`` (with the method, ``lost_in``); from
    then on every call answers as for a server that is gone (``alive()`` False, no exit code, empty logs, no server
    info, ``stop()`` None, though it still stops what is left), ``pick_port`` returns the preferred port untouched, and ``launch`` returns a ``skipped``
    result with the loss's class. The trial's measurement therefore stops at the load point during which the loss was
    found; :func:`infra_verdict` then turns that into an infrastructure verdict.
    """

    def __init__(self, inner: ServerHandle) -> None:
        self.inner = inner
        self.lost: InfrastructureLost | None = None
        self.lost_in: str | None = None

    def _call(self, name: str, call: Callable[[], T], gone: T) -> T:
        """``call()`` while the machinery lives; ``gone`` once it is lost (this call's loss included)."""
        if self.lost is None:
            try:
                return call()
            except InfrastructureLost as err:
                self.lost, self.lost_in = err, name
        return gone

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        unpicked: tuple[int, list[str]] = (preferred or 0, [])
        return self._call("pick_port", lambda: self.inner.pick_port(preferred), unpicked)

    def launch(self, request: LaunchRequest) -> LaunchResult:
        result = self._call("launch", lambda: self.inner.launch(request), None)
        if result is not None:
            return result
        assert self.lost is not None
        return LaunchResult(status_of(lost_class := self.lost.error_class), lost_class, str(self.lost), request.port)

    def alive(self) -> bool:
        return self._call("alive", self.inner.alive, False)

    def exit_code(self) -> int | None:
        return self._call("exit_code", self.inner.exit_code, None)

    def wait_exit(self, timeout_s: float) -> int | None:
        return self._call("wait_exit", lambda: self.inner.wait_exit(timeout_s), None)

    def log_tail(self, max_bytes: int = 8000) -> str:
        return self._call("log_tail", lambda: self.inner.log_tail(max_bytes), "")

    def log_size(self) -> int:
        return self._call("log_size", self.inner.log_size, 0)

    def read_log(self, start: int, end: int | None = None) -> str:
        return self._call("read_log", lambda: self.inner.read_log(start, end), "")

    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        return self._call("server_info", lambda: self.inner.server_info(api_key), None)

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Stop the server. After a loss the inner handle is still asked, its own loss ignored: what is left of the
        machinery (another node's servers of a deployment across nodes, grid/cluster/spread.py) is stopped too;
        a single node's lost actor answers None without asking (grid/cluster/actor.py)."""
        if self.lost is not None:
            try:
                self.inner.stop(grace_s)
            except InfrastructureLost:
                pass
            return None
        return self._call("stop", lambda: self.inner.stop(grace_s), None)


def infra_verdict(lost: InfrastructureLost, lost_in: str | None, rows: list[dict[str, Any]],
                  tables: dict[str, list[dict[str, Any]]]) -> None:
    """Give a trial whose infrastructure was lost its verdict, in place: every row ``trial_status = skipped`` with
    the loss's class and message. The load point during which the loss was found (the last one measured) is marked
    ``not_run`` with that class and its requests and samples are dropped: they measured the loss, not the
    configuration. Points measured before it are kept as measured. A loss found only when the server was being
    stopped after the last point (``lost_in == 'stop'``) leaves the measurement and its verdict alone."""
    measured = [r for r in rows if r.get("status") != "not_run"]
    if lost_in == "stop" and measured and len(measured) == len(rows):
        return
    if measured:
        cut = measured[-1]
        keep = {k: cut.get(k) for k in ("point_index", "point_kind", "point_value", "num_prompts")}
        for key in list(cut):
            if key not in BASE_KEYS and key not in keep:
                cut[key] = None
        cut.update(keep, status="not_run", error_class=lost.error_class)
        for table in tables.values():
            table[:] = [r for r in table if r.get("point_index") != cut["point_index"]]
    for row in rows:
        if row.get("status") == "not_run":
            row["error_class"] = lost.error_class
        row.update(trial_status=status_of(lost.error_class), trial_error_class=lost.error_class, trial_error_message=str(lost))


# Columns of a load-point row that describe the trial, not a measurement (kept when a point is cut).
BASE_KEYS = {"schema_version", "run_name", "trial_id", "config_hash", "config_json", "label", "command", "engine",
             "engine_version", "model", "hardware", "trial_status", "trial_error_class", "trial_error_message",
             "startup_s", "log_tail", "input_len", "output_len", "time_scale", "kv_capacity_tokens",
             "server_info_json", "finished_unix_ns"}
