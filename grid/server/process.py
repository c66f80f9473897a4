"""One server process: start it in its own process group, wait until it is ready, stop the whole group.

Readiness follows SGLang's three phases (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes):
connection refused while loading,
503 from ``/health_generate`` while warming up, 200 once "The server is fired up and ready to roll!" is logged.
Deadlines are in modelled seconds and are divided by the engine's ``time_scale`` (the twin's clock may run faster).

Whoever starts a process reaps its whole process group: ``stop`` sends SIGTERM to the group, waits up to a grace
period, then SIGKILLs it. The process is started through grid/server/watchdog.py, which kills the group when the
launching process dies (docs/sources.md#ray-process-cleanup). No Ray here: grid/cluster/actor.py wraps this class.

Leftovers: a process that leaves its group's supervision (the supervisor SIGKILLed on its own, a machine that stopped
the driver, its actor and the supervisor at once) can outlive its run and hold a port or GPU memory. Every group a run
starts is recorded in the run directory (``processes/<run id>.<pgid>.json``: group id, the group leader's start time,
the run id) and carries the run id in its environment (``GRID_RUN_ID``); the next invocation ends what is left of an
earlier run's groups (:func:`reap_leftovers`), touching only processes that match all three.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grid.releases.devices import exit_meaning
from grid.releases.dialect import SGLANG
from grid.server.logparse import startup_phase
from grid.server.statuses import STARTUP_LOG_CLASSES, TrialErrorClass, log_class

RUN_ID_ENV = "GRID_RUN_ID"                  # the run-id marker in every server's environment
REGISTRY_ENV = "GRID_PROCESS_REGISTRY"      # where ManagedServer records the groups it starts (a directory)
#: Real seconds a server process gets before a startup timeout may end it, whatever its modelled timeout: the
#: interpreter starting and importing its modules, which no clock scale models. The twin's modelled startup runs 200x
#: faster than real time (conf/engine/sim.yaml), so its 1800 modelled seconds are 9 real ones; on a 2-core host loaded
#: to about 7 runnable threads per core, two twins launched by the calibration test did not open their port in those
#: 9 s and were recorded startup_timeout (a finding made of host load); another had logged its weights loaded when
#: the import time, counted 200x from launch, used up its timeout. A real server's modelled timeout (1200 s at
#: scale 1) is far above it.
MIN_REAL_STARTUP_S = 60.0



class StartupError(RuntimeError):
    """The server did not become ready. ``error_class``: startup_exit | startup_oom | startup_kv_pool |
    startup_timeout | port_in_use."""

    def __init__(self, error_class: TrialErrorClass, message: str, exit_code: int | None = None,
                 log_tail: str = "") -> None:
        super().__init__(message)
        self.error_class: TrialErrorClass = error_class
        self.exit_code = exit_code
        self.log_tail = log_tail


@dataclass
class ReadyInfo:
    """When each readiness phase was first seen, in modelled seconds since launch."""

    startup_s: float
    port_open_s: float | None = None
    phases: list[str] = field(default_factory=list)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_status(host: str, port: int, path: str, timeout_s: float = 5.0) -> int | None:
    """HTTP status of GET ``path``; None when the connection is refused or drops."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose process group is ``pgid``, from ``/proc/<pid>/stat`` (Linux).

    Zombies are left out on purpose: an orphaned process whose parent is a container init that never reaps stays a
    zombie forever, holds no port and no GPU memory, and must not make a stopped group look alive. Where ``/proc`` is
    missing the answer falls back to ``killpg(pgid, 0)`` (``[pgid]`` when the group exists).
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp ...; the name may contain spaces
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def group_alive(pgid: int | None) -> bool:
    """Whether any live process is left in process group ``pgid``."""
    return pgid is not None and bool(group_members(pgid))


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22, proc(5)); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def process_env(pid: int, name: str) -> str | None:
    """The value of ``name`` in the environment ``pid`` was started with (``/proc/<pid>/environ``); None when unset
    or unreadable (another user's process, a process that is gone)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def port_holders(port: int) -> list[int]:
    """Pids of the processes listening on TCP ``port`` (any address), from ``psutil.net_connections``; processes of
    other users are not listed where the system hides their sockets."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:
        return []
    return sorted({c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   and c.pid})


def _marked_by_run(run_ids: set[str]) -> dict[str, list[int]]:
    """Run id -> pids of the live processes whose environment carries ``GRID_RUN_ID`` equal to it, for ``run_ids``
    (one scan of the process table): every process a run's server started, including those that left its process
    group (``setsid``, a daemonizing child)."""
    import psutil

    out: dict[str, list[int]] = {}
    for pid in psutil.pids():
        if pid != os.getpid() and (run_id := process_env(pid, RUN_ID_ENV)) in run_ids:
            out.setdefault(run_id, []).append(pid)
    return out


def end_processes(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM ``pids``, wait up to ``grace_s`` real seconds, SIGKILL what is left, wait up to 5 s; the pids still
    alive after that (none, normally). Zombies count as ended."""

    left = list(pids)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [p for p in left if _alive(p)]
        if not left:
            break
    return left


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, or one that exits while asked, counts as ended)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_escaped_holders(port: int, run_id: str | None, grace_s: float = 5.0) -> str | None:
    """After a server's group was stopped: end the processes that still listen on its ``port`` and carry its
    ``run_id`` (children that left the group, e.g. by ``setsid``); what is still there after that, named by pid
    and command line (None: the port is not held by anyone). A holder without the marker is not grid's: it is named,
    never signalled."""
    import psutil

    holders = port_holders(port)
    if not holders:
        return None
    ours = [p for p in holders if run_id and process_env(p, RUN_ID_ENV) == run_id]
    left = end_processes(ours, grace_s) if ours else []
    notes = []
    if ours:
        notes.append(f"ended {len(ours) - len(left)} process(es) {ours} of this run that left the server's group and "
                     f"held port {port}" + (f"; could not end {left}" if left else ""))
    for pid in [p for p in holders if p not in ours]:
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())[:200]
        except psutil.Error:
            cmd = "?"
        notes.append(f"port {port} held by pid {pid} ({cmd}), not started by this run")
    return "; ".join(notes)


@dataclass
class GroupRecord:
    """A process group a run started: its id, its leader's start time (``process_start_ticks``) and the run id that
    its processes carry in ``GRID_RUN_ID``."""

    pgid: int
    start_ticks: int
    run_id: str
    command: str = ""


class ProcessRegistry:
    """The process groups started by grid runs, one JSON file per group in ``directory`` (the run directory's
    ``processes/``). A group is recorded when its supervisor reports it and removed once it is stopped."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, run_id: str, pgid: int) -> Path:
        return self.directory / f"{run_id}.{pgid}.json"

    def add(self, record: GroupRecord) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(record.run_id, record.pgid)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, path)

    def remove(self, run_id: str, pgid: int) -> None:
        self._path(run_id, pgid).unlink(missing_ok=True)

    def records(self) -> list[GroupRecord]:
        out = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                out.append(GroupRecord(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                continue
        return out


def leftover_members(record: GroupRecord) -> list[int]:
    """Live processes of ``record``'s group that belong to it: process group ``pgid``, started no earlier than the
    group's leader, and ``GRID_RUN_ID`` equal to its run id. A recycled group id or an unrelated process that joined
    the group carries no marker (or another run's) and is not listed."""
    return [pid for pid in group_members(record.pgid)
            if (process_start_ticks(pid) or -1) >= record.start_ticks
            and process_env(pid, RUN_ID_ENV) == record.run_id]


def reap_leftovers(directory: str | Path, current_run_id: str | None = None, grace_s: float = 5.0) -> list[str]:
    """End what is left of the process groups earlier runs recorded in ``directory``; one line per group that had
    processes left (what was ended). Only processes matching :func:`leftover_members`, or carrying the record's run
    id and started after its group (:func:`_marked_by_run`: children that left the group), get a signal (SIGTERM,
    then SIGKILL after ``grace_s`` real seconds); records of ``current_run_id`` are left alone. Records are
    removed."""
    registry = ProcessRegistry(directory)
    notes = []
    records = [r for r in registry.records() if r.run_id != current_run_id]
    marked = _marked_by_run({r.run_id for r in records}) if records else {}
    for record in records:
        # the group's members, and the run's processes that left the group (they still carry its marker)
        found = sorted({*leftover_members(record), *(p for p in marked.get(record.run_id, [])
                                                     if (process_start_ticks(p) or -1) >= record.start_ticks)})
        pids = end_processes(found, grace_s) if found else []
        if found:
            what = f" ({record.command})" if record.command else ""
            notes.append(f"ended {len(found) - len(pids)} leftover process(es) {found} of group {record.pgid} from "
                         f"run {record.run_id}{what}" + (f"; could not end {pids}" if pids else ""))
        registry.remove(record.run_id, record.pgid)
    return notes


def _run_registry() -> tuple[ProcessRegistry | None, str]:
    """The registry and run id this process records its groups under: ``GRID_PROCESS_REGISTRY`` and ``GRID_RUN_ID``,
    set by the server actor (grid/cluster/actor.py) for its process; (None, "") outside a sweep (tests, tools)."""
    directory, run_id = os.environ.get(REGISTRY_ENV), os.environ.get(RUN_ID_ENV)
    return (ProcessRegistry(directory), run_id) if directory and run_id else (None, "")


class ManagedServer:
    """A server process in its own session (process group), logging to ``log_path``, supervised by
    grid/server/watchdog.py: the group dies with the process that created this object (the Ray actor), even when that
    process is SIGKILLed, and the server's exit status survives in ``<state_path>.exit`` (``state_path`` defaults to
    ``<log_path>.state``; servers that share one log each need their own)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: str | Path, host: str, port: int,
                 time_scale: float = 1.0, state_path: str | Path | None = None) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.port = port
        self.time_scale = time_scale
        self.pgid: int | None = None     # the supervisor's pid = the group id
        self.pid: int | None = None      # the server process itself (the watchdog's child)
        self.last_pgid: int | None = None  # the group of the last stopped launch (for leak checks)
        self.escaped: str | None = None    # after stop: who else held the port, and what was ended (end_escaped_holders)
        self._state = Path(state_path) if state_path else self.log_path.with_name(self.log_path.name + ".state")
        self._exit_code: int | None = None
        self._t0_perf_ns = 0

    @property
    def state_path(self) -> Path:
        """Where the watchdog writes the server's pid and group (``<state_path>.exit``: its exit status)."""
        return self._state

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self, grace_s: float = 10.0) -> None:
        """Launch under the watchdog. Raises ``StartupError('port_in_use')`` when something already listens on the
        port, ``StartupError('startup_exit')`` when the watchdog does not report the server's pid within 30 s."""
        if not port_is_free(self.host, self.port):
            raise StartupError("port_in_use", f"port {self.port} on {self.host} is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (self._state, Path(f"{self._state}.exit")):
            stale.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "OMP_NUM_THREADS"}
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [sys.executable, "-m", "grid.server.watchdog", "--owner", str(os.getpid()), "--state", str(self._state),
               "--grace", str(grace_s), "--", *self.argv]
        self._t0_perf_ns = time.perf_counter_ns()
        with open(self.log_path, "ab") as log:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=True,
                           timeout=30)
        deadline = time.monotonic() + 30
        while not self._state.exists():
            if time.monotonic() > deadline:
                raise StartupError("startup_exit", "the server supervisor did not start", None, self.log_tail())
            time.sleep(0.01)
        state = json.loads(self._state.read_text())
        self.pgid, self.pid = int(state["pgid"]), int(state["pid"])
        registry, run_id = _run_registry()
        if registry is not None:
            registry.add(GroupRecord(self.pgid, process_start_ticks(self.pgid) or 0, run_id,
                                     " ".join(self.argv)[:300]))

    def elapsed_s(self) -> float:
        """Modelled seconds since launch."""
        return (time.perf_counter_ns() - self._t0_perf_ns) / 1e9 * self.time_scale

    def wait_ready(self, timeout_s: float, poll_s: float = 0.05, path: str = SGLANG.ready_path,
                   min_real_s: float = MIN_REAL_STARTUP_S) -> ReadyInfo:
        """Poll until ``path`` answers 200. ``timeout_s`` is modelled. Raises ``StartupError``: when the process
        exited, the first of ``STARTUP_LOG_CLASSES`` whose wordings its log shows (``startup_kv_pool``: no room for a
        KV pool, ``startup_oom``: a CUDA OOM, ``port_in_use``: it failed to bind its port; grid/server/statuses.py),
        else ``startup_exit``; ``startup_timeout`` when it is not ready in time (the group is stopped before
        raising). A process that has neither opened its port nor written a line to its log is still starting its
        interpreter, which no clock scale models: it gets at least ``min_real_s`` real seconds
        (:data:`MIN_REAL_STARTUP_S`), and once it shows life ``timeout_s`` counts from then."""
        info = ReadyInfo(startup_s=0.0)
        life_ns: int | None = None  # when it first logged a line or opened its port
        while True:
            if not self.alive():
                code = self.exit_code()
                tail = self.log_tail()
                cls: TrialErrorClass = log_class(tail, STARTUP_LOG_CLASSES) or "startup_exit"
                self.stop(1.0)
                meaning = exit_meaning(code, tail)
                raise StartupError(cls, f"server exited with code {code} before it was ready"
                                   + (f" ({meaning})" if meaning else ""), code, tail)
            status = http_status(self.host, self.port, path, timeout_s=max(1.0, poll_s * 20))
            phase = "refused" if status is None else str(status)
            if not info.phases or info.phases[-1] != phase:
                info.phases.append(phase)
            if status is not None and info.port_open_s is None:
                info.port_open_s = self.elapsed_s()
            if status == 200:
                info.startup_s = self.elapsed_s()
                return info
            if life_ns is None and (info.port_open_s is not None or self.log_tail(64).strip()):
                life_ns = time.perf_counter_ns()
            if life_ns is None:  # still starting its interpreter: modelled time from launch, min_real_s at least
                late = self.elapsed_s() > timeout_s and self.elapsed_s() / self.time_scale >= min_real_s
            else:  # modelled time from its first sign of life
                late = (time.perf_counter_ns() - life_ns) / 1e9 * self.time_scale > timeout_s
            if late:
                tail = self.log_tail()
                self.stop()
                shown = startup_phase(tail)
                raise StartupError("startup_timeout",
                                   f"not ready after {timeout_s:.0f} s (modelled); HTTP phases seen: "
                                   f"{'→'.join(info.phases)}"
                                   + (f"; the log shows it {shown[0]} ({shown[1]!r})" if shown else ""), None, tail)
            time.sleep(poll_s)

    def alive(self) -> bool:
        """The server process has not exited (its exit status is not recorded) and its group has a live member."""
        if self.pgid is None or self.exit_code() is not None:
            return False
        return group_alive(self.pgid)

    def exit_code(self) -> int | None:
        """The server's exit status (negative: killed by that signal); None while running or when unknown."""
        if self._exit_code is None:
            try:
                self._exit_code = int(json.loads(Path(f"{self._state}.exit").read_text())["exit_code"])
            except (OSError, ValueError, KeyError):
                return None
        return self._exit_code

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the whole group, wait up to ``grace_s`` real seconds, then SIGKILL what is left (all of it: the
        watchdog, the server and every descendant that stayed in the group)."""
        if self.pgid is None:
            return
        try:
            os.killpg(self.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(self.pgid):
            time.sleep(0.05)
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and group_alive(self.pgid):
            time.sleep(0.02)
        self.exit_code()
        # a child that left the group (setsid, a daemon) may still hold the port: ended when it carries the run id
        self.escaped = end_escaped_holders(self.port, self.env.get(RUN_ID_ENV) or os.environ.get(RUN_ID_ENV), grace_s)
        registry, run_id = _run_registry()
        if registry is not None and not group_alive(self.pgid):
            registry.remove(run_id, self.pgid)
        self.last_pgid, self.pgid = self.pgid, None

    # -- logs ------------------------------------------------------------------------------------------------
    def log_tail(self, max_bytes: int = 8000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
