"""Fault effects the twin can play: the failure modes of grid/twin/failures.py and the faults injected through
``GRID_TWIN_FAULTS`` (a JSON list of ``{"kind": ..., params}``), each a class registered by ``kind`` in
:data:`FAULT_KINDS`. A fault only declares hooks (startup event, bind/ready times, garbled output, a runtime
condition and action); grid/twin/server.py calls them.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, ClassVar

from grid.server.statuses import FAILURE_CLASSES

if TYPE_CHECKING:
    from aiohttp import web

    from grid.twin.server import Twin


class Fault:
    """A fault effect. Subclasses set hooks; params come from a FailureMode row or a GRID_TWIN_FAULTS entry."""

    kind: ClassVar[str] = ""

    def __init__(self, params: dict, source: str = "injected") -> None:
        self.params = params
        self.source = source
        self.at_s = float(params.get("at_s", params.get("after_s", 0.0)) or 0.0)
        self.exit_code = int(params.get("exit_code", 1) if params.get("exit_code") is not None else 1)
        self.log_lines = tuple(params.get("log_lines") or ())

    # startup (modelled seconds since process start)
    def startup_event(self) -> tuple[float, str] | None:
        """``(at_s, "crash"|"hang")`` to fire during startup, or None."""
        return None

    bind_at_s: float | None = None  # override of when the port opens
    ready_at_s: float | None = None  # health answers 503 until this modelled time

    def garbage(self, since_decode_s: float) -> str | None:
        """The piece every completion repeats when this fault garbles output ``since_decode_s`` modelled seconds after
        the first decode step (0 before it)."""
        return None

    def diverge_at(self, twin: Twin, prompt: str) -> int | None:
        """The output token from which the completion of ``prompt`` differs from the healthy stream (None: it does
        not)."""
        return None

    def runtime_due(self, twin: Twin) -> bool:
        return False

    def admit(self, twin: Twin, request) -> web.StreamResponse | None:
        """Called for every generation request (``/generate``, ``/v1/completions``, ``/v1/chat/completions``) before
        its handler: a response to answer with instead (an HTTP error), or None to serve it."""
        return None

    def fire_runtime(self, twin: Twin) -> None:
        pass


FAULT_KINDS: dict[str, type[Fault]] = {}


def register(cls: type[Fault]) -> type[Fault]:
    FAULT_KINDS[cls.kind] = cls
    return cls


@register
class StartupCrash(Fault):
    """Print the row's log lines at ``at_s`` (modelled since start) and exit ``exit_code``; before the port opens when
    ``at_s`` falls inside the loading phases, otherwise while warming up/serving."""

    kind = "startup_crash"

    def startup_event(self):
        return (self.at_s, "crash")


@register
class StartupOom(StartupCrash):
    kind = "startup_oom"


@register
class StartupOomAt(StartupCrash):
    """Injected ``{"kind": "startup_oom_at_s", "at_s": S, "exit_code": 1}``: a CUDA OOM at S modelled seconds."""

    kind = "startup_oom_at_s"


@register
class StartupHang(Fault):
    """Progress stops at ``at_s``: never binds (inside loading) or never becomes ready (later)."""

    kind = "startup_hang"

    def startup_event(self):
        return (self.at_s, "hang")


@register
class NanOutput(Fault):
    """Garbage output (``"!"`` repeated) from ``at_s`` modelled seconds after the first decode step on; meanwhile
    every ``Decode batch`` line is followed by what the release logs for NaN in the logits (grid/twin/logs.py
    ``nan_lines``): the row's log lines (SGLang's sampler line) on 0.5.9-0.5.12 with --enable-nan-detection, the
    sanitize warning once on 0.5.14+ with SGLANG_SANITIZE_NAN_LOGITS set, nothing otherwise."""

    kind = "nan_output"
    piece = "!"

    def garbage(self, since_decode_s):
        return str(self.params.get("token", self.piece)) if since_decode_s >= self.at_s else None


@register
class RepeatToken(NanOutput):
    """Injected ``{"kind": "repeat_token", "token": " the"}``: every completion repeats one token."""

    kind = "repeat_token"
    piece = " the"


@register
class SpeculativeDivergence(Fault):
    """Injected ``{"kind": "speculative_divergence", "after_tokens": 0, "prompt_contains": "17 + 26"}``: a server
    running speculative decoding answers prompts containing ``prompt_contains`` (default: every prompt) differently
    from token ``after_tokens`` on, greedy or not (a broken verify step, which SGLang's lossless greedy speculation
    must never show); without speculative decoding it answers as usual. Plants what the accuracy guard's
    speculative correctness gate must catch (grid.accuracy ``speculative_mismatches``): on one prompt of twenty the
    exact-match share drops 5 points, under the default ``accuracy.max_drop``."""

    kind = "speculative_divergence"

    def diverge_at(self, twin, prompt):
        from grid.twin.speculative import SpeculativePerf

        if not isinstance(twin.perf, SpeculativePerf) or str(self.params.get("prompt_contains", "")) not in prompt:
            return None
        return int(self.params.get("after_tokens", 0))


@register
class RuntimeCrash(Fault):
    """Print the row's log lines and exit ``exit_code`` ``at_s`` modelled seconds after the first decode step."""

    kind = "runtime_crash"

    def runtime_due(self, twin):
        return twin.first_decode_at is not None and twin.mclock - twin.first_decode_at >= self.at_s

    def fire_runtime(self, twin):
        twin.crash(self.log_lines or ("Received sigquit from a child process. It usually means the child failed.",),
                   self.exit_code)


@register
class ExitAfterLoad(RuntimeCrash):
    """Injected ``{"kind": "exit_after_load_s", "after_s": S, "exit_code": N}``: exit N after S modelled seconds of
    serving load (time with work in the scheduler, warm-up excluded)."""

    kind = "exit_after_load_s"

    def runtime_due(self, twin):
        return twin.ready and twin.busy_s >= self.at_s


@register
class SchedulerDies(Fault):
    """Injected ``{"kind": "scheduler_dies_after_s", "after_s": S}``: S modelled seconds after ready
    (:meth:`Twin.served_s`; checked after each scheduler step) the scheduler stops producing tokens (requests hang
    until their clients give up); the port stays open and ``/health`` keeps answering 200."""

    kind = "scheduler_dies_after_s"

    def runtime_due(self, twin):
        return twin.ready and twin.served_s() >= self.at_s

    def fire_runtime(self, twin):
        twin.sched_dead = True


@register
class Health503Until(Fault):
    """Injected ``{"kind": "health_503_until_s", "open_at_s": X, "until_s": Y}``: the port opens at X modelled seconds
    (default: when loading ends) and the health endpoints answer 503 until Y; the ready line is printed at Y."""

    kind = "health_503_until_s"

    def __init__(self, params, source="injected"):
        super().__init__(params, source)
        open_at = params.get("open_at_s", params.get("bind_at_s"))
        self.bind_at_s = float(open_at) if open_at is not None else None
        self.ready_at_s = float(params.get("until_s", params.get("at_s", 0.0)))


@register
class PortHolderChild(Fault):
    """Injected ``{"kind": "port_holder_child", "pid_file": F, "escape": false}``: once the port is bound the server
    starts a child that inherits the listening socket and sleeps (as SGLang's TP workers and detokenizer outlive a
    killed launcher); its pid goes to F. ``escape: true`` puts the child in a new session, out of the server's process
    group, so a group kill misses it (a process that called setsid())."""

    kind = "port_holder_child"

    def __init__(self, params, source="injected"):
        super().__init__(params, source)
        self.spawned = False

    def runtime_due(self, twin):
        return twin.bound and not self.spawned

    def fire_runtime(self, twin):
        import subprocess

        self.spawned = True
        server = getattr(twin.site, "_server", None)
        fds = tuple(s.fileno() for s in (getattr(server, "sockets", None) or ()))
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], pass_fds=fds,
                                 stdin=subprocess.DEVNULL, start_new_session=bool(self.params.get("escape")))
        if self.params.get("pid_file"):
            with open(self.params["pid_file"], "w") as fh:
                fh.write(str(child.pid))


# -- faults that strike partway through a load point ----------------------------------------------------------------
# "After N requests" counts the generation requests the twin finished after it became ready (grid's correctness probe
# sends three, each load point's warm-up requests count too; internal health-check requests do not): ``twin.served``.
# The fault strikes when the next generation request arrives, so that the N-th request is answered in full.


class _AfterRequests(Fault):
    """Base of the faults that strike at the first generation request that arrives once ``after_requests`` requests
    have finished (``twin.served``): ``strike`` is called once, then ``admit_broken`` for that and every later one."""

    def __init__(self, params, source="injected"):
        super().__init__(params, source)
        self.after_requests = int(params.get("after_requests", 0))
        self.fired = False

    def admit(self, twin, request):
        if not self.fired and twin.ready and twin.served >= self.after_requests:
            self.fired = True
            self.strike(twin)
        return self.admit_broken(twin, request) if self.fired else None

    def strike(self, twin) -> None:
        """What happens to the server when the fault strikes."""

    def admit_broken(self, twin, request):
        """The answer to a generation request once struck (None: handle it, e.g. into a stuck scheduler)."""
        return None


@register
class HangAfterRequests(_AfterRequests):
    """Injected ``{"kind": "hang_after_requests", "after_requests": N}``: once N requests have finished, the scheduler
    stops producing tokens; requests in flight and later ones hang, the port stays open and ``/health`` answers 200
    (SGLang's front end outlives a stuck scheduler; sgl-project/sglang#435)."""

    kind = "hang_after_requests"

    def strike(self, twin):
        twin.sched_dead = True


@register
class ResetAfterRequests(_AfterRequests):
    """Injected ``{"kind": "reset_after_requests", "after_requests": N}``: once N requests have finished, every
    generation connection in flight is reset (TCP RST) and so is every later one; the process lives and ``/health``
    answers 200 (a front end whose backend is gone)."""

    kind = "reset_after_requests"

    def strike(self, twin):
        for request in list(twin.generation_requests.values()):
            reset(request.transport)

    def admit_broken(self, twin, request):
        reset(request.transport)
        from aiohttp import web

        return web.Response(status=500)  # never reaches the client: its connection is already reset


def reset(transport) -> None:
    """Close ``transport`` with a TCP RST (SO_LINGER 0), as a process that dies with open connections does."""
    import socket
    import struct

    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


#: SGLang's scheduler line before the exception it died of (srt/managers/scheduler.py run_scheduler_process).
SCHEDULER_EXCEPTION_LINE = "Scheduler hit an exception: Traceback (most recent call last):"
#: Log lines per runtime error class the twin can write: the scheduler's line, then the class's own line
#: (grid/server/statuses.py ``FailureClass.twin_line``, which its wordings match; ``{total}``: the GPU's memory in GiB).
#: The classes that break the server (trial status ``failed``); NaN output is the failure table's (grid/twin/failures.py).
RUNTIME_ERROR_LINES: dict[str, tuple[str, ...]] = {
    c.name: (SCHEDULER_EXCEPTION_LINE, c.twin_line) for c in FAILURE_CLASSES
    if c.classifier == "runtime_log" and c.status == "failed" and c.twin_line is not None}
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


@register
class RuntimeErrorAfterRequests(_AfterRequests):
    """Injected ``{"kind": "runtime_error_after_requests", "after_requests": N, "error": "runtime_oom"|"nccl_error"|"cuda_error",
    "then": "hang"|"exit", "exit_code": 1}``: once N requests have finished, the scheduler writes the error to the
    log (``RUNTIME_ERROR_LINES``) and dies. ``then: hang`` (default): the front end stays up with the port open and
    requests hang (sgl-project/sglang#435); ``then: exit``: SGLang's SIGQUIT line, then the process exits
    ``exit_code``."""

    kind = "runtime_error_after_requests"

    def __init__(self, params, source="injected"):
        super().__init__(params, source)
        self.error = str(params.get("error", "runtime_oom"))
        if self.error not in RUNTIME_ERROR_LINES:
            raise ValueError(f"runtime_error_after_requests: error={self.error!r}; allowed: "
                             f"{sorted(RUNTIME_ERROR_LINES)}")
        self.then = str(params.get("then", "hang"))
        if self.then not in ("hang", "exit"):
            raise ValueError(f"runtime_error_after_requests: then={self.then!r}; allowed: ['exit', 'hang']")

    def strike(self, twin):
        lines = RUNTIME_ERROR_LINES[self.error]
        if self.then == "exit":
            twin.crash((*lines, SIGQUIT_LINE), self.exit_code)
        twin.log_error_lines(lines)
        twin.sched_dead = True


@register
class OverloadStatus(Fault):
    """Injected ``{"kind": "overload_status", "max_running": K, "status": 429}``: while K generation requests are in
    flight, a new one is refused at once with ``status`` (429 Too Many Requests or 503 Service Unavailable, what a
    rate-limiting front end answers under load) and an OpenAI-style error body; the server itself stays healthy and
    serves every request it admits."""

    kind = "overload_status"

    def __init__(self, params, source="injected"):
        super().__init__(params, source)
        self.max_running = int(params.get("max_running", 1))
        self.status = int(params.get("status", 429))

    def admit(self, twin, request):
        if len(twin.generation_requests) <= self.max_running:  # this request itself is counted
            return None
        from aiohttp import web

        body = {"object": "error", "message": f"Too many requests in flight (limit {self.max_running})",
                "type": "TooManyRequests" if self.status == 429 else "ServiceUnavailable", "param": None,
                "code": self.status}
        return web.json_response(body, status=self.status)


def parse_faults(text: str | None) -> list[Fault]:
    if not text:
        return []
    items = json.loads(text)
    if isinstance(items, dict):
        items = [items]
    out = []
    for item in items:
        params = dict(item.get("params") or {})
        params.update({k: v for k, v in item.items() if k not in ("kind", "params")})
        kind = item["kind"]
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(FAULT_KINDS)}")
        out.append(FAULT_KINDS[kind](params))
    return out


def faults_from_failures(failures: list) -> list[Fault]:
    """The faults that play ``failures`` (grid/twin/failures.py ``FailureMode`` rows), one per row. Raises
    ``KeyError`` naming the known kinds for an effect no fault plays (grid.releases.checks ``Effect`` lists them)."""
    out = []
    for fm in failures:
        cls = FAULT_KINDS.get(fm.effect)
        if cls is None:
            raise KeyError(f"failure {fm.id}: effect {fm.effect!r} has no fault; known: {sorted(FAULT_KINDS)}")
        out.append(cls({"at_s": fm.at_s, "exit_code": fm.exit_code, "log_lines": fm.log_lines}, source=fm.id))
    return out
