"""A scripted HTTP test server: each request gets a list of (offset_s, bytes) writes, due at absolute offsets from
the moment the request was received, so chunk timings are under the test's control."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from tests.timing import SLACK_CAP

SSE = "text/event-stream"

JITTER_MS = 8.0
"""Timing margin on a quiet shared machine (ms): how far an event may land from its scripted time when the loop ran
on time. Stalls of a loaded host come on top, measured in each run (``ScriptedServer.tol_ms``)."""

TOL_CAP_MS = JITTER_MS * SLACK_CAP
"""The widest timing margin a run may take (ms), whatever stalls it measured: the quiet margin stretched by the most
load the suite is claimed to pass under (tests/timing.py ``SLACK_CAP``, 4 runnable threads per core: 32 ms). The
stalls are measured on the event loop the client under test runs on, so without a cap a client that blocked its own
loop would widen the margin its timings are checked against; a stall longer than this fails the test."""

_WATCH_S = 0.002  # the loop watcher's period: it wakes this often and records how late it woke


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


DONE = b"data: [DONE]\n\n"


@dataclass
class Reply:
    """What the server does for one request."""

    writes: list[tuple[float, bytes]] = field(default_factory=list)  # (offset s after receipt, bytes)
    status: int = 200
    content_type: str = SSE
    body: bytes | None = None  # a non-streamed body (sent at once, or after `body_delay_s`)
    body_delay_s: float = 0.0
    hang_after_s: float | None = None  # keep the connection open (silent) this long after the last write


Script = Callable[[int, dict], Reply]


class ScriptedServer:
    """``async with ScriptedServer(script) as srv: srv.url``; ``srv.requests`` holds every request body seen."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._runner: web.AppRunner | None = None
        self._watcher: asyncio.Task | None = None
        self.url = ""
        self.max_loop_lag_ms = 0.0

    @property
    def tol_ms(self) -> float:
        """This run's timing margin (ms): ``JITTER_MS`` plus twice the longest stall of the event loop seen while the
        server ran, at most :data:`TOL_CAP_MS`. A stall delays both ends of an interval at most once each, so an
        interval's error is bounded by twice the longest stall; on a quiet machine the margin stays ``JITTER_MS`` plus
        a few ms. The loop is the one the client under test shares, so its own stalls count too: the cap keeps them
        from widening the margin past what a loaded host explains."""
        return min(JITTER_MS + 2 * self.max_loop_lag_ms, TOL_CAP_MS)

    async def _watch_loop(self) -> None:
        # server and client share this loop, so a late wake-up here is the delay every timed event may have seen
        while True:
            due = time.monotonic() + _WATCH_S
            await asyncio.sleep(_WATCH_S)
            self.max_loop_lag_ms = max(self.max_loop_lag_ms, (time.monotonic() - due) * 1e3)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        # the real clock, not loop.time(): uvloop's loop time is cached per iteration in whole ms, and its timers can
        # fire up to ~1 ms early, so offsets are kept by re-checking time.monotonic() after each sleep
        t0 = time.monotonic()
        body = await request.json()
        index = len(self.requests)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        reply = self.script(index, body)
        if reply.body is not None or reply.status != 200:
            if reply.body_delay_s:
                await asyncio.sleep(reply.body_delay_s)
            return web.Response(status=reply.status, body=reply.body or b"", content_type="application/json")
        resp = web.StreamResponse(status=200, headers={"Content-Type": reply.content_type})
        await resp.prepare(request)
        for offset, data in reply.writes:
            while (delay := t0 + offset - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            await resp.write(data)
        if reply.hang_after_s:
            await asyncio.sleep(reply.hang_after_s)
        return resp

    async def __aenter__(self) -> ScriptedServer:
        app = web.Application()
        for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            app.router.add_post(path, self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._watcher = asyncio.create_task(self._watch_loop())
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._runner is not None and self._watcher is not None
        self._watcher.cancel()
        await self._runner.cleanup()


def gen_event(text: str, completion_tokens: int, prompt_tokens: int = 8, finish=None) -> bytes:
    """A /generate stream event: cumulative text, running completion_tokens."""
    return sse({"text": text, "meta_info": {"id": "x", "prompt_tokens": prompt_tokens,
                                            "completion_tokens": completion_tokens, "finish_reason": finish}})


def chat_event(delta: dict | None = None, finish=None, usage=None, choices=True) -> bytes:
    obj: dict = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


def cmpl_event(text: str | None, finish=None, usage=None, choices=True) -> bytes:
    obj: dict = {"id": "c", "object": "text_completion", "model": "m"}
    obj["choices"] = [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}] if choices else []
    if usage is not None:
        obj["usage"] = usage
    return sse(obj)


def usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
