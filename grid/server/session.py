"""A node's server session: launch one configuration, check it is ready and sane, report on it, stop it.

This is everything the Ray server actor does, without Ray, so it runs and tests on its own. One session owns at
most one configuration at a time, one server or a deployment of several behind SGLang's router
(``LaunchRequest.members``); ``launch`` stops the previous one first.

Infrastructure faults are never charged to a configuration (status vocabulary: docs/schema.md, trial_status):

* ``port_in_use``: the preferred port is held (a leftover listener) or is taken between the check and the server's
  bind; a free port is used and the launch retried (up to ``PORT_RETRIES`` times), the note kept in ``infra_retries``.
* ``env_dirty``: after a stop, a process of the server's group is still alive, its port is still held, or (on a GPU
  node) GPU memory has not come back to its level before the launch. The node is marked dirty and ``launch`` refuses
  to start anything (status ``skipped``) until a re-check finds it clean.

Secrets (the API key) are redacted from every log tail this session hands out.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from grid.server.handle import LaunchRequest, LaunchResult, MemberLaunch
from grid.server.logparse import error_headline, strip_poll_lines, taken_port
from grid.server.pairs import PairServer, check_pairs
from grid.server.probe import probe
from grid.server.process import ManagedServer, ReadyInfo, StartupError, free_port, group_members, port_is_free
from grid.server.net import urlopen
from grid.server.router import Router, router_argv
from grid.server.statuses import status_of

log = logging.getLogger(__name__)
T = TypeVar("T")

PORT_RETRIES = 3
GPU_MEMORY_SLACK_MIB = 1024  # GPU memory still in use after a stop beyond this (MiB, per GPU) marks the node dirty
TAIL_READ_FACTORS = (8, 64)  # a log tail reads this many times its size (the next factor if too little is left),
                             # then drops grid's own poll lines
CLEAN_WAIT_S = 30.0          # real seconds a stopped server gets to release its port and GPU memory


def redact_secrets(text: str, secrets: list[str] | tuple[str, ...]) -> str:
    """``text`` with every occurrence of each non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def gpu_memory_used_mib() -> list[int] | None:
    """Memory in use per GPU (MiB) from ``nvidia-smi --query-gpu=memory.used``; None without NVIDIA GPUs."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30)
        return [int(float(x)) for x in out.stdout.split()] if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


class ServerSession:
    """The ServerHandle (grid/server/handle.py) of a server process on this node: owns at most one.
    ``clean_wait_s``: real seconds a stopped server gets to release its group, port and GPU memory before the node is
    marked env_dirty."""

    def __init__(self, host: str = "127.0.0.1", clean_wait_s: float = CLEAN_WAIT_S) -> None:
        self.host = host
        self.clean_wait_s = clean_wait_s
        self.server: ManagedServer | None = None  # the server; of a deployment, its first (their log is one)
        self.members: list[tuple[MemberLaunch, ManagedServer]] = []  # a deployment's servers
        self.router: Router | None = None                               # and the router in front of them
        self.label = "idle"
        self.dirty: str | None = None          # why the node is not clean (env_dirty), None when clean
        self.secrets: tuple[str, ...] = ()
        self._gpu_baseline: list[int] | None = None
        self._last: list[tuple[int | None, int]] = []  # the groups and ports of the last stop, re-checked when dirty
        self._ready: list[ReadyInfo] = []  # a deployment's servers' readiness, for :meth:`front`
        self._notes: list[str] = []      # and the port notes of their start
        self._moves: dict[int, int] = {}  # how often each of them moved to free ports (PORT_RETRIES)

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        """``preferred`` if free, else a free port; the second item notes an occupied preferred port."""
        notes: list[str] = []
        if preferred:
            if port_is_free(self.host, preferred):
                return preferred, notes
            notes.append(f"port_in_use: {preferred} held by another process; used a free port")
        return free_port(self.host), notes

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Start the server, wait for readiness, run the correctness probe.

        ``request.startup_time_scale`` converts real seconds to modelled ones until ready (default ``time_scale``).
        When the port turns out to be taken the launch is retried on a free port and ``port`` in the result is the
        one used (``argv`` must carry it as ``--port P``). A dirty node returns status ``skipped``, class
        ``env_dirty``.
        """
        self.stop()
        argv, port, api_key = list(request.argv), request.port, request.api_key
        self.secrets = (api_key,) if api_key else ()
        if self.dirty is not None and not self.recheck_clean():
            return LaunchResult(status_of("env_dirty"), "env_dirty", f"node not clean, nothing launched: {self.dirty}", port)
        self.label = request.label or "server"
        self._gpu_baseline = gpu_memory_used_mib()
        if request.members:
            return self._launch_deployment(request)
        notes: list[str] = []
        for attempt in range(PORT_RETRIES + 1):
            server = self.server = ManagedServer(argv, request.env, request.log_path, self.host, port,
                                                 request.startup_time_scale or request.time_scale)
            base_url = f"http://{server.host}:{port}"
            try:
                server.start()
                ready = server.wait_ready(request.startup_timeout_s, path=request.ready_path)
                break
            except StartupError as err:
                code = server.exit_code()
                self.stop()
                if err.error_class == "port_in_use" and attempt < PORT_RETRIES:
                    new_port = free_port(self.host)
                    notes.append(port_note(port, new_port, err.log_tail or server.log_tail()))
                    argv = _with_port(argv, port, new_port)
                    port = new_port
                    continue
                status = status_of(err.error_class)
                tail = self._redact(strip_poll_lines(err.log_tail or server.log_tail()))
                cause = error_headline(tail)  # the server's own words say more than "exited before ready"
                return LaunchResult(status, err.error_class, f"{err}: {cause}" if cause else str(err), port, base_url,
                                    exit_code=code, log_tail=tail, infra_retries=notes)
        verdict = probe(base_url, request.api, request.model, api_key, server.log_tail,
                        timeout_s=max(10.0, 600 / request.time_scale), enabled=request.probe_enabled)
        if verdict.error_class == "probe_error" and "timed out" in verdict.detail and server.alive():
            verdict.error_class = "server_hang"  # alive, port open, yet no answer: not the configuration's output
        status = "ok" if verdict.ok else status_of(verdict.error_class)
        return LaunchResult(status, verdict.error_class, verdict.detail, port, base_url, ready.startup_s,
                            ready.port_open_s, ready.phases, None, "" if verdict.ok else self.log_tail(),
                            verdict.answers, notes, verdict.status)

    def _launch_deployment(self, request: LaunchRequest) -> LaunchResult:
        """Start every server of ``request.members`` (each on its port, or a free one when that is taken) and wait
        until each is ready; then, unless ``request.router`` is False, start the router in front of them
        (:meth:`front`). A server whose port is taken between the check and its bind (``port_in_use``: another
        process, e.g. an outbound connection, got it meanwhile) is started again on free ports, the others left
        running, up to ``PORT_RETRIES`` times, with a note in ``infra_retries``. A server that fails to start
        otherwise stops everything started and fails the launch, naming which (``aggregated 1: ...``). Without the
        router the result is ``ok`` once every server is ready, with ``server_urls`` and no probe."""
        self._notes = []
        log_path = Path(request.log_path)
        scale = request.startup_time_scale or request.time_scale
        for member in request.members:
            if not port_is_free(self.host, member.port):
                new_port = free_port(self.host)
                self._notes.append(f"port_in_use: {member.name}'s port {member.port} held by another process; "
                                   f"used {new_port}")
                member = moved_member(member, new_port, member.bootstrap_port)
            state = log_path.with_name(f"{log_path.name}.{member.role}{member.index}.state")
            self.members.append((member, ManagedServer(member.argv, {**request.env, **member.env}, log_path,
                                                       self.host, member.port, scale, state_path=state)))
        self.server = self.members[0][1]
        first = f"http://{self.host}:{request.port}"
        self._ready, self._moves, i = [], {}, 0
        try:
            for i in range(len(self.members)):
                self._start_member(i)
            for i in range(len(self.members)):
                self._ready.append(self._ready_member(i, request.startup_timeout_s, request.ready_path))
        except StartupError as err:
            return self._failed_deployment(err, self.members[i][0].name, request.port, first, self._notes)
        if request.router:
            return self.front(request)
        ready, urls = self._ready, self._member_urls()
        opened = [r.port_open_s for r in ready if r.port_open_s is not None]
        return LaunchResult("ok", None, "", request.port, urls[0], max(r.startup_s for r in ready),
                            max(opened) if opened else None, ready[0].phases, infra_retries=list(self._notes),
                            server_urls=urls, server_names=[m.name for m, _ in self.members],
                            server_nodes=[socket.gethostname()] * len(urls))

    def _member_urls(self) -> list[str]:
        return [f"http://{server.host}:{server.port}" for _, server in self.members]

    def _start_member(self, i: int) -> None:
        """Start member ``i`` (:meth:`_port_retried`)."""
        self._port_retried(i, lambda server: server.start())

    def _ready_member(self, i: int, timeout_s: float, path: str) -> ReadyInfo:
        """Wait until member ``i`` answers 200 on ``path`` (``timeout_s`` modelled), starting it first where a lost
        port moved it (:meth:`_port_retried`)."""
        def ready(server: ManagedServer) -> ReadyInfo:
            if server.pgid is None:  # moved to free ports: not started yet
                server.start()
            return server.wait_ready(timeout_s, path=path)
        return self._port_retried(i, ready)

    def _port_retried(self, i: int, step: Callable[[ManagedServer], T]) -> T:
        """``step`` on member ``i``'s server; when it fails with ``port_in_use`` (its port taken since the check, or
        before it bound it) the member moves to free ports (:meth:`_move_member`), the others running on, and
        ``step`` runs again on it: ``PORT_RETRIES`` moves per member at most, start and readiness together. Raises
        the StartupError of the last try."""
        while True:
            try:
                return step(self.members[i][1])
            except StartupError as err:
                if err.error_class != "port_in_use" or self._moves.get(i, 0) >= PORT_RETRIES:
                    raise
                self._moves[i] = self._moves.get(i, 0) + 1
                self._move_member(i, err)

    def _move_member(self, i: int, err: StartupError) -> None:
        """Member ``i`` (stopped) with a free HTTP port and, for a prefill server, a free bootstrap port; noted."""
        member, server = self.members[i]
        server.stop(1.0)
        new_port = free_port(self.host)
        bootstrap = free_port(self.host) if member.bootstrap_port is not None else None
        note = port_note(member.port, new_port, err.log_tail)
        self._notes.append(note.replace("port_in_use: ", f"port_in_use: {member.name}: ", 1))
        moved = moved_member(member, new_port, bootstrap)
        self.members[i] = (moved, ManagedServer(moved.argv, server.env, server.log_path, self.host, new_port,
                                                server.time_scale, state_path=server.state_path))
        if i == 0:
            self.server = self.members[0][1]

    def front(self, request: LaunchRequest) -> LaunchResult:
        """Start SGLang's router on ``request.port`` in front of the servers this session started (a launch of
        ``request.members``) and of ``request.remote`` (servers other nodes started), wait until it lists every one
        healthy, send one request through each prefill-decode pair (grid/server/pairs.py; with the probe), then probe
        through the router. A router that fails to start stops this session's servers and fails the launch
        (``router: ...``); a pair that fails its request fails it as ``probe_error``, naming the pair.
        ``server_urls``: this session's servers, then the remote ones."""
        notes = self._notes
        first = f"http://{self.host}:{request.port}"
        local = [(m.role, url, m.bootstrap_port, m.name) for (m, _), url in zip(self.members, self._member_urls())]
        every = local + [(r.role, r.url, r.bootstrap_port, r.name) for r in request.remote]
        urls = [url for _, url, _, _ in every]
        prefill = [(url, bootstrap) for role, url, bootstrap, _ in every if role == "prefill"]
        decode = [url for role, url, _, _ in every if role == "decode"]
        workers = [] if prefill else urls
        log_path = Path(request.log_path)
        argv = router_argv(port=request.port, metrics_port=free_port(self.host), policy=request.router_policy or "",
                           workers=workers, prefill=prefill, decode=decode, host=self.host)
        self.router = Router(argv, urls, log_path.with_name(f"{log_path.stem}.router.log"), self.host, request.port)
        try:
            self.router.start(request.startup_timeout_s / request.time_scale)
        except StartupError as err:
            return self._failed_deployment(err, "router", request.port, first, notes)
        ready = self._ready
        startup_s = max(r.startup_s for r in ready)
        opened = [r.port_open_s for r in ready if r.port_open_s is not None]
        if prefill and decode and request.probe_enabled:  # one request through each new pair, as the router sends it
            failed = check_pairs([PairServer(n, u, b) for role, u, b, n in every if role == "prefill"],
                                 [PairServer(n, u) for role, u, _, n in every if role == "decode"],
                                 request.api_key, timeout_s=max(10.0, 600 / request.time_scale))
            if failed:
                return LaunchResult(status_of("probe_error"), "probe_error",
                                    f"the first request through {len(failed)} prefill-decode pair(s) failed: "
                                    + " | ".join(failed), request.port, self.router.url, startup_s,
                                    log_tail=self.log_tail(), infra_retries=list(notes), probe_status="failed",
                                    server_urls=urls, router_argv=argv)
        verdict = probe(self.router.url, request.api, request.model, request.api_key, self.log_tail,
                        timeout_s=max(10.0, 600 / request.time_scale), enabled=request.probe_enabled)
        if verdict.error_class == "probe_error" and "timed out" in verdict.detail and self.alive():
            verdict.error_class = "server_hang"
        status = "ok" if verdict.ok else status_of(verdict.error_class)
        names = [m.name for m, _ in self.members] + [r.name for r in request.remote]
        nodes = [socket.gethostname()] * len(self.members) + [r.node for r in request.remote]
        return LaunchResult(status, verdict.error_class, verdict.detail, request.port, self.router.url, startup_s,
                            max(opened) if opened else None, ready[0].phases, None,
                            "" if verdict.ok else self.log_tail(), verdict.answers, list(notes), verdict.status, urls,
                            argv, names, nodes)

    def _failed_deployment(self, err: StartupError, who: str, port: int, base_url: str,
                           notes: list[str]) -> LaunchResult:
        """The result of a deployment one of whose processes (``who``) failed to start; everything is stopped."""
        code = err.exit_code
        tail = self._redact(strip_poll_lines(err.log_tail or self.log_tail()))
        self.stop()
        cause = error_headline(tail)
        message = f"{who}: {err}" + (f": {cause}" if cause else "")
        return LaunchResult(status_of(err.error_class), err.error_class, message, port, base_url, exit_code=code,
                            log_tail=tail, infra_retries=notes)

    # -- node cleanliness ------------------------------------------------------------------------------------------
    def check_clean(self, pgid: int | None, port: int | None, wait_s: float | None = None) -> str | None:
        """Why the node is not clean after a stop (None: clean): live processes left in the server's group, its port
        still held, GPU memory above the level before launch + ``GPU_MEMORY_SLACK_MIB``. Waits up to ``wait_s``
        real seconds for all three to clear (a killed server can hold its port while GPU teardown completes)."""
        deadline = time.monotonic() + (self.clean_wait_s if wait_s is None else wait_s)
        while True:
            problems = []
            left = group_members(pgid) if pgid is not None else []
            if left:
                problems.append(f"processes {left} of group {pgid} still alive")
            if port and not port_is_free(self.host, port):
                problems.append(f"port {port} still held")
            used = gpu_memory_used_mib() if self._gpu_baseline is not None else None
            if used is not None and self._gpu_baseline is not None and len(used) == len(self._gpu_baseline):
                over = [u - b for u, b in zip(used, self._gpu_baseline) if u - b > GPU_MEMORY_SLACK_MIB]
                if over:
                    problems.append(f"GPU memory {over} MiB above its level before launch")
            if not problems or time.monotonic() > deadline:
                return "; ".join(problems) or None
            time.sleep(0.1)

    def recheck_clean(self) -> bool:
        """Re-check a dirty node (its port and GPU memory); clears ``dirty`` and returns True once clean."""
        reasons = [self.check_clean(pgid, port, wait_s=min(2.0, self.clean_wait_s)) for pgid, port in self._last]
        self.dirty = "; ".join(r for r in reasons if r) or None
        return self.dirty is None

    _checked_pgid: int | None = None

    def _redact(self, text: str) -> str:
        return redact_secrets(text, self.secrets)

    def alive(self) -> bool:
        """The server is up; of a deployment, every server and the router (when this session started one)."""
        if self.members:
            return (self.router is None or self.router.proc.alive()) and all(s.alive() for _, s in self.members)
        return self.server is not None and self.server.alive()

    def exit_code(self) -> int | None:
        """The server's exit code once it ended; of a deployment, the first server's (or the router's) that ended."""
        if self.members:
            codes = [server.exit_code() for _, server in self.members]
            codes.append(self.router.proc.exit_code() if self.router is not None else None)
            return next((c for c in codes if c is not None), None)
        return None if self.server is None else self.server.exit_code()

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` real seconds for the server to exit; its exit code, or None if still running."""
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return None if self.alive() else self.exit_code()

    def log_tail(self, max_bytes: int = 8000) -> str:
        """The server's own last lines, at most ``max_bytes`` of them, secrets redacted: the access-log lines of
        grid's own polls (/metrics, /health, /server_info, ...; ``logparse.strip_poll_lines``) are left out, from a
        read of ``TAIL_READ_FACTORS`` x ``max_bytes`` of the log."""
        if self.server is None:
            return ""
        for factor in TAIL_READ_FACTORS:
            raw = self.server.log_tail(max_bytes * factor)
            cut = len(raw.encode("utf-8", "replace")) >= max_bytes * factor
            if cut and "\n" in raw:
                raw = raw[raw.index("\n") + 1:]  # the read began inside a line: start at the next one
            text = strip_poll_lines(raw)
            if len(text) >= max_bytes or not cut:
                break
        if len(text) > max_bytes:
            last = text[-max_bytes:]
            text = last[last.find("\n") + 1:] if "\n" in last[:-1] else last  # start at a whole line
        return self._redact(text)

    def log_size(self) -> int:
        if self.server is None:
            return 0
        try:
            return Path(self.server.log_path).stat().st_size
        except OSError:
            return 0

    def read_log(self, start: int, end: int | None = None) -> str:
        if self.server is None:
            return ""
        with open(self.server.log_path, "rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
        return self._redact(data.decode("utf-8", "replace"))

    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        if self.server is None:
            return None
        req = urllib.request.Request(f"http://{self.server.host}:{self.server.port}/server_info")
        if api_key:
            req.add_header("Authorization", f"Bearer {api_key}")
        try:
            with urlopen(req, timeout=10) as resp:
                info = json.loads(resp.read())
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Stop the server's whole group and check the node is clean; returns (and keeps in ``dirty``) the reason
        it is not (env_dirty), None when it is."""
        if self.members:
            return self._stop_deployment(grace_s)
        server = self.server
        pgid = None if server is None else (server.pgid if server.pgid is not None else server.last_pgid)
        if server is not None and pgid is not None and pgid != self._checked_pgid:
            server.stop(grace_s)
            self._last = [(pgid, server.port)]
            self._checked_pgid = pgid
            self.dirty = self.check_clean(pgid, server.port)
            if server.escaped:
                log.warning("%s: %s", self.label, server.escaped)
                if self.dirty:
                    self.dirty += f" ({server.escaped})"
        self.label = "idle"
        return self.dirty


    def _stop_deployment(self, grace_s: float) -> str | None:
        """Stop the router, then every server (each its whole group), and check the node is clean of all of them."""
        procs = ([self.router.proc] if self.router is not None else []) + [server for _, server in self.members]
        for proc in procs:
            proc.stop(grace_s)
        self._last = [(proc.last_pgid, proc.port) for proc in procs if proc.last_pgid is not None]
        problems = [self.check_clean(pgid, port) for pgid, port in self._last]
        self.dirty = "; ".join(p for p in problems if p) or None
        escaped = [proc.escaped for proc in procs if proc.escaped]
        if escaped:
            log.warning("%s: %s", self.label, "; ".join(escaped))
            if self.dirty:
                self.dirty += f" ({'; '.join(escaped)})"
        self.members, self.router = [], None
        if self.server is not None:  # its log (the deployment's) stays readable; a second stop finds nothing to do
            self._checked_pgid = self.server.last_pgid
        self.label = "idle"
        return self.dirty


def port_note(port: int, new_port: int, log_tail: str | None) -> str:
    """The retry note of a start that found a port taken: the port the server's log names (grid's HTTP port, or an
    internal one such as torch.distributed's, which SGLang derives from the HTTP port), and the HTTP port tried
    next. Pure."""
    named = taken_port(log_tail)
    if named is None or named[0] == port:
        return f"port_in_use: {port} taken at launch; retried on {new_port}"
    return (f"port_in_use: {named[1]} {named[0]} taken at launch (the log names it; the HTTP port was {port}); "
            f"retried with the HTTP port {new_port}")


def moved_member(member: MemberLaunch, port: int, bootstrap_port: int | None) -> MemberLaunch:
    """``member`` listening on ``port`` (its ``--port``) and, for a prefill server, serving the KV cache on
    ``bootstrap_port`` (its ``--disaggregation-bootstrap-port``). Pure."""
    argv = _with_port(member.argv, member.port, port)
    if member.bootstrap_port is not None and bootstrap_port is not None:
        argv = _with_port(argv, member.bootstrap_port, bootstrap_port, flag="--disaggregation-bootstrap-port")
    return replace(member, argv=argv, port=port, bootstrap_port=bootstrap_port)


def _with_port(argv: list[str], old: int, new: int, flag: str = "--port") -> list[str]:
    """``argv`` with the value of ``--port`` (``--port P`` or ``--port=P``) replaced."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out) and out[i + 1] == str(old):
            out[i + 1] = str(new)
        elif arg == f"{flag}={old}":
            out[i] = f"{flag}={new}"
    return out
