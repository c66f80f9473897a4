"""One server process: start it in its own process group, wait until it is ready, stop the whole group.

Readiness follows SGLang's three phases (../shared/reference/sglang.md §7.2): connection refused while loading,
503 from ``/health_generate`` while warming up, 200 once "The server is fired up and ready to roll!" is logged.
Deadlines are in modelled seconds and are divided by the engine's ``time_scale`` (the twin's clock may run faster).

Whoever starts a process reaps its whole process group: ``stop`` sends SIGTERM to the group, waits up to a grace
period, then SIGKILLs it. No Ray here: grid/cluster/actor.py wraps this class.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

OOM_PATTERNS = re.compile(r"out of memory|OutOfMemoryError|Capture cuda graph failed", re.IGNORECASE)


class StartupError(RuntimeError):
    """The server did not become ready. ``error_class``: startup_exit | startup_oom | startup_timeout | port_in_use."""

    def __init__(self, error_class: str, message: str, exit_code: int | None = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.error_class = error_class
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


class ManagedServer:
    """A server process in its own session (process group), logging to ``log_path``."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: str | Path, host: str, port: int,
                 time_scale: float = 1.0) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.port = port
        self.time_scale = time_scale
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self._t0_perf_ns = 0

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Launch. Raises ``StartupError('port_in_use')`` when something already listens on the port."""
        if not port_is_free(self.host, self.port):
            raise StartupError("port_in_use", f"port {self.port} on {self.host} is already in use")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "OMP_NUM_THREADS"}
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.pgid = self.proc.pid
        self._t0_perf_ns = time.perf_counter_ns()

    def elapsed_s(self) -> float:
        """Modelled seconds since launch."""
        return (time.perf_counter_ns() - self._t0_perf_ns) / 1e9 * self.time_scale

    def wait_ready(self, timeout_s: float, poll_s: float = 0.05, path: str = "/health_generate") -> ReadyInfo:
        """Poll until ``path`` answers 200. ``timeout_s`` is modelled. Raises ``StartupError``."""
        info = ReadyInfo(startup_s=0.0)
        while True:
            code = self.proc.poll() if self.proc else None
            if code is not None:
                tail = self.log_tail()
                cls = "startup_oom" if OOM_PATTERNS.search(tail) else "startup_exit"
                raise StartupError(cls, f"server exited with code {code} before it was ready", code, tail)
            status = http_status(self.host, self.port, path, timeout_s=max(1.0, poll_s * 20))
            phase = "refused" if status is None else str(status)
            if not info.phases or info.phases[-1] != phase:
                info.phases.append(phase)
            if status is not None and info.port_open_s is None:
                info.port_open_s = self.elapsed_s()
            if status == 200:
                info.startup_s = self.elapsed_s()
                return info
            if self.elapsed_s() > timeout_s:
                tail = self.log_tail()
                self.stop()
                raise StartupError("startup_timeout",
                                   f"not ready after {timeout_s:.0f} s (modelled); phases seen: {'→'.join(info.phases)}",
                                   None, tail)
            time.sleep(poll_s)

    def alive(self) -> bool:
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A zombie leader still counts its group; reap it if it exited.
        if self.proc is not None and self.proc.poll() is not None:
            try:
                os.killpg(self.pgid, 0)
            except ProcessLookupError:
                return False
        return True

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the whole group, wait up to ``grace_s`` real seconds, then SIGKILL what is left."""
        if self.pgid is None:
            return
        try:
            os.killpg(self.pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if self.proc is not None:
                self.proc.poll()
            if not self._group_exists():
                break
            time.sleep(0.05)
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.pgid = None

    def _group_exists(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

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
