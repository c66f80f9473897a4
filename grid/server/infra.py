"""Infrastructure failures: faults of the machinery around a server, never charged to the configuration it serves.

A trial that ends in one of these is recorded ``trial_status = skipped`` with the class below as
``trial_error_class``; its configuration has no verdict yet and runs again (on a later attempt of the same
invocation, or when the same command runs again). Load points measured before the fault are kept as measured.

The classes that the server session itself raises (``env_dirty``, ``port_in_use``) are documented in
grid/server/session.py; this module holds the ones from outside the session (the Ray actor that owns it).
"""

from __future__ import annotations

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

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


# What a server whose owner is gone answers, per ServerSession method, once the loss is known.
_GONE = {"alive": False, "exit_code": None, "wait_exit": None, "log_tail": "", "log_size": 0, "read_log": "",
         "server_info": None, "stop": None, "dirty": None}


class GuardedServer:
    """A server handle (the ServerSession interface) that survives the loss of the machinery behind it.

    The first call that raises ``InfrastructureLost`` is remembered in ``lost`` (with the method, ``lost_in``); from
    then on every call answers as for a server that is gone (``alive()`` False, empty logs, ``stop()`` None), and
    ``launch`` returns a ``skipped`` result with the loss's class. The trial's measurement therefore stops at the load
    point during which the loss was found; :func:`infra_verdict` then turns that into an infrastructure verdict.
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.lost: InfrastructureLost | None = None
        self.lost_in: str | None = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self.inner, name)

        def call(*args, **kwargs):
            if self.lost is None:
                try:
                    return method(*args, **kwargs)
                except InfrastructureLost as err:
                    self.lost, self.lost_in = err, name
            if name == "launch":
                return {"status": "skipped", "error_class": self.lost.error_class, "message": str(self.lost),
                        "port": kwargs.get("port", 0), "base_url": "", "startup_s": None, "log_tail": "",
                        "infra_retries": []}
            if name == "pick_port":
                preferred = args[0] if args else kwargs.get("preferred", 0)
                return preferred or 0, []
            return _GONE.get(name)

        return call


def infra_verdict(lost: InfrastructureLost, lost_in: str | None, rows: list[dict],
                  tables: dict[str, list[dict]]) -> None:
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
        row.update(trial_status="skipped", trial_error_class=lost.error_class, trial_error_message=str(lost))


# Columns of a load-point row that describe the trial, not a measurement (kept when a point is cut).
BASE_KEYS = {"schema_version", "run_name", "trial_id", "config_hash", "config_json", "label", "command", "engine",
             "engine_version", "model", "hardware", "trial_status", "trial_error_class", "trial_error_message",
             "startup_s", "log_tail", "input_len", "output_len", "time_scale", "kv_capacity_tokens",
             "server_info_json", "finished_unix_ns"}
