"""The twin's HTTP API (SGLang's routes, docs/sources.md#sglang-http-api-and-bench_serving), as a mixin of
:class:`grid.twin.server.Twin`.

Routes: /health, /health_generate, /ready (0.5.20+), /generate (stream or not, cumulative text), /v1/completions,
/v1/chat/completions, /v1/models, /server_info and /get_server_info, /model_info and /get_model_info, /flush_cache,
/metrics (with --enable-metrics) and the twin-only /grid/telemetry. Handlers read the twin's state and submit
requests to its scheduler; the lifecycle and the scheduler loop live in grid/twin/server.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from grid.releases import catalog
from grid.twin import logs, textgen
from grid.loadgen import vclock as vproto
from grid.twin.metrics import CONTENT_TYPE
from grid.twin.vclock import VCLOCK_TAG, parse_tag
from grid.releases.features import holds

if TYPE_CHECKING:
    from grid.twin.server import Req, Twin

HEALTH_CHECK_TIMEOUT_S = 20.0  # SGLANG_HEALTH_CHECK_TIMEOUT default (docs/sources.md#sglang-http-api-and-bench_serving)
#: Virtual clock: real seconds a /health_generate waits at most for its request (a backstop: the answer is decided in
#: modelled time)
HEALTH_BACKSTOP_REAL_S = 30.0
FLUSH_OK = ("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, "
            "the operation will not be performed.)\n")  # /flush_cache body (docs/sources.md, SGLang HTTP API)


class BadRequest(Exception):
    pass


#: Twin-only telemetry route (grid/telemetry/modelled.py reads it when engine=sim).
TELEMETRY_PATH = "/grid/telemetry"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj), status=status, content_type="application/json")


def stream_due(sent: int, n: int, interval: int, done: bool) -> bool:
    """Whether a stream that has sent ``sent`` output tokens sends a chunk now that ``n`` are generated, as SGLang's
    scheduler decides with ``--stream-interval`` / ``sampling_params.stream_interval`` k: a finished request always;
    with k > 1 when the count passes 1, k + 1, 2k + 1, ... (``len(req.output_ids) % stream_interval == 1``, so the
    first token goes out at once), with k = 1 on every new token (python/sglang/srt/managers/
    scheduler_output_processor_mixin.py ``stream_output_generation``; read in the released 0.5.9 and 0.5.10 wheels).
    Several tokens may arrive between two wake-ups,
    so a boundary passed since ``sent`` counts."""
    if done:
        return True
    if interval <= 1:
        return n > sent
    return (n - 1) // interval > (sent - 1) // interval


def _vt(vt: float | None) -> str:
    """The ``"grid_vt"`` member (with its leading comma) an event of a virtual-clock request carries, else ""."""
    return "" if vt is None else f',"{vproto.FIELD}":{vt!r}'


class _Chunks:
    """The bytes a streamed response has ready, written together when its handler is about to wait (one socket write
    per wake-up, not one per event: on the virtual clock a handler finds many steps' events at once)."""

    __slots__ = ("resp", "parts", "sealed")

    def __init__(self, resp: web.StreamResponse) -> None:
        self.resp = resp
        self.parts: list[bytes] = []
        self.sealed = False  # the response ended early (a timeout the twin played): later bytes are dropped

    def add(self, data: bytes) -> None:
        if not self.sealed:
            self.parts.append(data)

    def seal(self, data: bytes) -> None:
        """End the response with ``data``: nothing added after it is written."""
        self.add(data)
        self.sealed = True

    async def flush(self) -> None:
        if self.parts:
            data = b"".join(self.parts)
            self.parts.clear()
            await self.resp.write(data)


def _sse_headers() -> dict:
    return {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class _AccessLogger(AbstractAccessLogger):
    twin: ClassVar[Twin | None] = None

    def log(self, request, response, time_):  # noqa: D102
        tw = self.twin
        if tw is None:
            return
        peer = request.transport.get_extra_info("peername") if request.transport else None
        peer_s = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
        tw.log.access(logs.access_line(peer_s, request.method, request.path_qs, response.status, response.reason))


# --- the twin ----------------------------------------------------------------------------------------------------------


class _TwinState:
    """What the handlers read of the Twin they are mixed into (grid/twin/server.py sets each), declared for the type
    checker only."""

    if TYPE_CHECKING:
        args: Any
        version: str
        ver: Any
        model: Any
        hw: Any
        perf: Any
        faults: list[Any]
        serve_scale: float
        startup_scale: float
        scale: float
        m_base: float
        t0: float
        unix0: float
        log: Any
        sched: Any
        deployment: bool
        capacity: int
        context_len: int
        cache: Any
        metrics: Any
        stop: asyncio.Event
        ready: bool
        ready_at: float
        startup_s: float | None
        busy_s: float
        last_gen_throughput: float
        last_output_real: float
        generation_requests: dict[Any, Any]
        sched_dead: bool
        reasoning_model: bool
        eos_id: int
        submit: Callable[..., Any]
        abort: Callable[[Req], None]
        new_rid: Callable[[], str]
        validate: Callable[[int, int], None]
        mnow: Callable[[], float]
        model_unix: Callable[[], float]
        virtual: bool
        vclock_begin: Callable[[int, int | None], float]
        vclock_done: Callable[[int], None]
        samples_between: Callable[[float, float], list[dict]]
        resolved_args: Callable[[], dict[str, Any]]
        garbage: Callable[[], str | None]
        diverge_at: Callable[[str], int | None]
        _mem: Callable[[], dict[str, float]]


class TwinAPI(_TwinState):
    """HTTP handlers; mixed into Twin, whose attributes they use."""

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_mw, self._fault_mw, self._vclock_mw], client_max_size=1 << 30)
        r = app.router
        for path in ("/health", "/health_generate"):
            r.add_get(path, self.h_health)
        if "/ready" in catalog.release(self.ver).route_paths():  # the catalog: http_server.py has it from 0.5.20
            r.add_get("/ready", self.h_ready)
        r.add_route("POST", "/generate", self.h_generate)
        r.add_route("PUT", "/generate", self.h_generate)
        r.add_post("/v1/completions", self.h_completions)
        r.add_post("/v1/chat/completions", self.h_chat)
        r.add_get("/v1/models", self.h_models)
        r.add_get("/v1/models/{name:.+}", self.h_model_one)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.h_server_info)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.h_model_info)
        r.add_route("GET", "/flush_cache", self.h_flush)
        r.add_route("POST", "/flush_cache", self.h_flush)
        if self.args.enable_metrics:
            r.add_get("/metrics", self.h_metrics)
        r.add_get(TELEMETRY_PATH, self.h_telemetry)  # twin-only: the GPU telemetry its model implies
        r.add_post(vproto.BEGIN_PATH, self.h_vclock_begin)  # twin-only: the virtual clock (grid/loadgen/vclock.py)
        r.add_post(vproto.DONE_PATH, self.h_vclock_done)
        r.add_get(vproto.SAMPLES_PATH, self.h_vclock_samples)
        return app

    @web.middleware
    async def _vclock_mw(self, request: web.Request, handler):
        """On the virtual clock, a generation request's grid headers (its stream and modelled send time) for
        ``submit`` (a context variable: the handler runs in this task)."""
        if not self.virtual or request.path not in self.GENERATION_PATHS:
            return await handler(request)
        token = VCLOCK_TAG.set(parse_tag(request.headers))
        try:
            return await handler(request)
        finally:
            VCLOCK_TAG.reset(token)

    async def h_vclock_begin(self, request: web.Request) -> web.Response:
        """Twin-only: a closed-loop point of ``streams`` streams begins (``measured``: a steady-state point's count of
        measured requests, grid/loadgen/vclock.py); answers ``{"vt": first send time (s)}``
        (409 when the twin is not on the virtual clock, or not ready)."""
        if not self.virtual:
            return _json({"error": "the twin is not on the virtual clock (yet)"}, 409)
        body = await request.json()
        measured = body.get("measured")
        return _json({"vt": self.vclock_begin(int(body["streams"]), None if measured is None else int(measured))})

    async def h_vclock_done(self, request: web.Request) -> web.Response:
        """Twin-only: stream ``stream`` of the running point sends no more."""
        if not self.virtual:
            return _json({"error": "the twin is not on the virtual clock"}, 409)
        body = await request.json()
        self.vclock_done(int(body["stream"]))
        return _json({"ok": True})

    async def _progress(self, req: Req, out: _Chunks) -> AsyncIterator[tuple[int, bool, float | None]]:
        """``(tokens so far, finished, modelled time or None)`` each time the request moved. On the wall clock, at each
        wake-up (what a late handler finds coalesces); on the virtual clock with grid's headers, once per scheduler
        step that moved it, stamped with the step's end (so the events are the same however late the handler runs).
        What the handler added to ``out`` is written before each wait. Ends after the finished entry; a request whose
        client's timeout the twin played (``Req.timeout``) ends instead with the timeout line
        (grid/loadgen/vclock.py), and whatever the handler adds after it is dropped."""
        steps = req.steps
        if steps is None:
            while True:
                await out.flush()
                await req.event.wait()
                req.event.clear()
                done = req.finished
                yield req.n_out, done, None
                if done:
                    return
        i = 0
        while True:
            while i >= len(steps):
                await out.flush()
                await req.event.wait()
                req.event.clear()
            t, n, done = steps[i]
            i += 1
            if done and req.timeout is not None:
                out.seal(vproto.timeout_line(*req.timeout))
                return
            yield n, done, t
            if done:
                return

    @web.middleware
    async def _auth_mw(self, request: web.Request, handler):
        key = self.args.api_key
        if key:
            p = request.path
            exempt = p.startswith(("/health", "/metrics")) or (holds("ready_exempt_from_api_key", self.ver) and p.startswith("/ready"))
            if not exempt and request.headers.get("Authorization", "") != f"Bearer {key}":
                return _json({"error": "Unauthorized"}, 401)
        return await handler(request)

    GENERATION_PATHS: ClassVar[tuple[str, ...]] = ("/generate", "/v1/completions", "/v1/chat/completions")

    @web.middleware
    async def _fault_mw(self, request: web.Request, handler):
        """Tracks the generation requests in flight and lets injected faults answer them instead (``Fault.admit``)."""
        if request.path not in self.GENERATION_PATHS:
            return await handler(request)
        self.generation_requests[id(request)] = request
        try:
            for fault in self.faults:
                response = fault.admit(self, request)
                if response is not None:
                    return response
            return await handler(request)
        finally:
            self.generation_requests.pop(id(request), None)

    async def h_health(self, request: web.Request) -> web.StreamResponse:
        if not self.ready or self.stop.is_set():
            return web.Response(status=503)
        if request.path == "/health":
            return web.Response(status=200)
        tic_unix = self.model_unix()
        comp = textgen.Completion(head=(), seed=0, eos_after=None)
        healthy = await (self._health_virtual(comp) if self.virtual else self._health_real(comp))
        if healthy:
            return web.Response(status=200)
        hms = time.strftime("%H:%M:%S", time.localtime(tic_unix))
        self.log.info(f"Health check failed. Server couldn't get a response from detokenizer for last "
                      f"{HEALTH_CHECK_TIMEOUT_S:.0f} seconds. tic start time: {hms}. last_heartbeat time: {hms}",
                      level="error")
        return web.Response(status=503)

    async def _health_real(self, comp: textgen.Completion) -> bool:
        """Wall clock: a 1-token request; healthy when it (or any request) produced a token within
        ``HEALTH_CHECK_TIMEOUT_S`` modelled seconds."""
        tic = time.perf_counter()
        req = self.submit(comp, prompt=[0], max_new=1, rid=f"HEALTH_CHECK_{time.time()}", internal=True)
        deadline = tic + HEALTH_CHECK_TIMEOUT_S / self.scale
        try:
            while True:
                if req.n_out > 0 or req.finished or self.last_output_real > tic:
                    return True
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                req.event.clear()
                try:
                    await asyncio.wait_for(req.event.wait(), min(remaining, 0.05))
                except asyncio.TimeoutError:
                    pass
        finally:
            self.abort(req)

    async def _health_virtual(self, comp: textgen.Completion) -> bool:
        """Virtual clock: a dead scheduler answers no token, ever (so: unhealthy at once); otherwise a 1-token request
        through the scheduler is healthy when its first token came within ``HEALTH_CHECK_TIMEOUT_S`` modelled seconds
        of its arrival. :data:`HEALTH_BACKSTOP_REAL_S` real seconds bound the wait (a scheduler that died meanwhile
        ends it sooner)."""
        if self.sched_dead:
            return False
        req = self.submit(comp, prompt=[0], max_new=1, rid=f"HEALTH_CHECK_{time.time()}", internal=True)
        backstop = time.perf_counter() + HEALTH_BACKSTOP_REAL_S
        try:
            while req.t_first is None and not req.finished and not self.sched_dead:
                if time.perf_counter() > backstop:
                    return False
                req.event.clear()
                try:
                    await asyncio.wait_for(req.event.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
        finally:
            self.abort(req)
        return req.t_first is not None and req.t_first - req.t_arrive <= HEALTH_CHECK_TIMEOUT_S

    async def h_ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    # request parsing helpers
    def _int(self, v: Any, default: int) -> int:
        return default if v is None else int(v)

    def _finish_reason_native(self, req: Req) -> dict | None:
        if not req.finished:
            return None
        if req.reason == "length":
            return {"type": "length", "length": req.n_out}
        if req.reason == "stop":
            return {"type": "stop", "matched": self.eos_id}
        return {"type": "abort", "message": "Abort request", "status_code": 499, "err_type": None}

    def _oai_finish(self, req: Req) -> str | None:
        if not req.finished:
            return None
        return {"length": "length", "stop": "stop"}.get(req.reason or "", "abort")

    def _matched(self, req: Req):
        return self.eos_id if req.finished and req.reason == "stop" else None

    async def _read_json(self, request: web.Request, openai: bool) -> dict:
        if openai and "application/json" not in request.headers.get("Content-Type", ""):
            raise BadRequest("Unsupported Media Type: Only 'application/json' is allowed")
        try:
            body = await request.json()
        except Exception as e:  # noqa: BLE001
            raise BadRequest(f"Invalid JSON body: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object")
        return body

    @staticmethod
    def _error(msg: str, openai: bool) -> web.Response:
        if openai:
            return _json({"object": "error", "message": msg, "type": "BadRequestError", "param": None, "code": 400},
                         400)
        return _json({"error": {"message": msg}}, 400)

    async def _wait_done(self, req: Req) -> None:
        try:
            while not req.finished:
                await req.event.wait()
                req.event.clear()
        except asyncio.CancelledError:
            self.abort(req)
            raise

    def _completion_for(self, prompt_text: str, sp: dict, rid: str, max_new: int, *, raw: bool,
                        reasoning: bool = False) -> textgen.Completion:
        return textgen.make_completion(
            prompt_text, max_new_tokens=max_new, ignore_eos=bool(sp.get("ignore_eos", False)),
            temperature=float(sp.get("temperature", 1.0) if sp.get("temperature") is not None else 1.0), rid=rid,
            sampling_seed=sp.get("sampling_seed", sp.get("seed")), raw=raw, reasoning=reasoning,
            garbage=self.garbage(), diverge_at=self.diverge_at(prompt_text))

    # /generate
    async def h_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read_json(request, openai=False)
            if isinstance(body.get("text"), list) and not body.get("stream"):
                outs = await asyncio.gather(*(self._generate_one({**body, "text": t}) for t in body["text"]))
                return _json(outs)
            sp = body.get("sampling_params") or {}
            if isinstance(sp, list):
                sp = sp[0] if sp else {}
            max_new = self._int(sp.get("max_new_tokens"), 128)
            rid = str(body.get("rid") or self.new_rid())
            if body.get("input_ids") is not None:
                ids = list(body["input_ids"])
                prompt_text, pieces = " ".join(map(str, ids)), ids
            else:
                prompt_text = str(body.get("text") or "")
                pieces = textgen._PIECE_RE.findall(prompt_text)
            self.validate(len(pieces), max_new)
        except BadRequest as e:
            return self._error(str(e), openai=False)
        comp = self._completion_for(prompt_text, sp, rid, max_new, raw=True)
        prio = int(body.get("priority") or 0) if self.args.enable_priority_scheduling else 0
        req = self.submit(comp, prompt=pieces, max_new=max_new, priority=prio, rid=rid)
        if not body.get("stream"):
            await self._wait_done(req)
            return _json(self._native_obj(req, comp.text(0, req.n_out), final=True))
        return await self._stream_native(request, req, sp)

    async def _generate_one(self, body: dict) -> dict:
        sp = body.get("sampling_params") or {}
        max_new = self._int(sp.get("max_new_tokens"), 128)
        rid = self.new_rid()
        text = str(body.get("text") or "")
        comp = self._completion_for(text, sp, rid, max_new, raw=True)
        req = self.submit(comp, prompt=text, max_new=max_new, rid=rid)
        await self._wait_done(req)
        return self._native_obj(req, comp.text(0, req.n_out), final=True)

    def _meta(self, req: Req, final: bool, at: float | None = None, n: int | None = None) -> dict:
        """SGLang's ``meta_info`` of ``req`` once it had ``n`` tokens (None: now) and, if ``final``, ended at modelled
        time ``at`` (None: now). A handler that writes several steps' events at once passes each step's own."""
        meta: dict[str, Any] = {"id": req.rid, "finish_reason": self._finish_reason_native(req) if final else None,
                                "prompt_tokens": req.prompt_tokens,
                "weight_version": "default"}
        meta["num_retractions" if holds("meta_info_num_retractions", self.ver) else "total_retractions"] = 0
        meta["completion_tokens"] = req.n_out if n is None else n
        meta["cached_tokens"] = req.cached
        if holds("meta_info_reasoning_tokens", self.ver):
            meta["reasoning_tokens"] = 0
        if final:
            meta["e2e_latency"] = round((self.mnow() if at is None else at) - req.t_arrive, 6)
        return meta

    def _native_obj(self, req: Req, text: str, final: bool) -> dict:
        comp = req.comp
        return {"text": text, "output_ids": [comp.token_id(i) for i in range(req.n_out)],
                "meta_info": self._meta(req, final)}

    async def _stream_native(self, request: web.Request, req: Req, sp: dict) -> web.StreamResponse:
        resp = web.StreamResponse(headers=_sse_headers())
        comp = req.comp
        incremental = bool(self.args.stream_output)
        interval = max(1, int(sp.get("stream_interval") or self.args.stream_interval))
        text = ""
        ids: list[int] = []
        sent = 0
        out = _Chunks(resp)
        try:
            await resp.prepare(request)
            async for n, done, vt in self._progress(req, out):
                if not stream_due(sent, n, interval, done):
                    continue
                delta = comp.text(sent, n)
                new_ids = [comp.token_id(i) for i in range(sent, n)]
                if incremental:
                    text, ids = delta, new_ids
                else:
                    text += delta
                    ids.extend(new_ids)
                sent = n
                # SGLang writes each chunk with orjson (compact, UTF-8; http_server.py generate_request, 0.5.9-0.5.23)
                obj: dict[str, Any] = {"text": text, "output_ids": ids, "meta_info": self._meta(req, done, vt, n)}
                if vt is not None:
                    obj[vproto.FIELD] = vt
                out.add(b"data: " + orjson.dumps(obj) + b"\n\n")
                if done:
                    break
            out.add(b"data: [DONE]\n\n")
            await out.flush()
        finally:  # a client that disconnects (CancelledError, ConnectionError) aborts its request
            if not req.finished:
                self.abort(req)
        return resp

    # /v1/completions
    async def h_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read_json(request, openai=True)
            prompt = body.get("prompt", "")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
                if len(prompt) != 1:
                    raise BadRequest("The twin serves one prompt per /v1/completions request")
                prompt = prompt[0]
            if isinstance(prompt, list):
                pieces, prompt_text = list(prompt), " ".join(map(str, prompt))
            else:
                prompt_text = str(prompt)
                pieces = textgen._PIECE_RE.findall(prompt_text)
            max_new = self._int(body.get("max_tokens"), 16)
            self.validate(len(pieces), max_new)
        except BadRequest as e:
            return self._error(str(e), openai=True)
        rid = self.new_rid()
        comp = self._completion_for(prompt_text, body, rid, max_new, raw=True)
        req = self.submit(comp, prompt=pieces, max_new=max_new, rid=rid)
        cid = f"cmpl-{rid}"
        created = int(time.time())
        model = body.get("model") or self.args.served_model_name
        so = body.get("stream_options") or {}
        interval = max(1, int(body.get("stream_interval") or self.args.stream_interval))
        if not body.get("stream"):
            await self._wait_done(req)
            return _json({"id": cid, "object": "text_completion", "created": created, "model": model,
                          "choices": [{"index": 0, "text": comp.text(0, req.n_out), "logprobs": None,
                                       "finish_reason": self._oai_finish(req), "matched_stop": self._matched(req)}],
                          "usage": self._usage(req), "metadata": {"weight_version": "default"}})
        resp = web.StreamResponse(headers=_sse_headers())
        pre = (f'data: {{"id":"{cid}","object":"text_completion","created":{created},"model":{json.dumps(model)},'
               f'"choices":[{{"index":0,"text":')
        sent = 0
        out = _Chunks(resp)
        try:
            await resp.prepare(request)
            vt = None
            async for n, done, vt in self._progress(req, out):
                if not stream_due(sent, n, interval, done):
                    continue
                delta = comp.text(sent, n)
                sent = n
                fin = json.dumps(self._oai_finish(req)) if done else "null"
                matched = json.dumps(self._matched(req)) if done else "null"
                usage = json.dumps(self._usage(req, n=n)) if so.get("continuous_usage_stats") else "null"
                out.add((f'{pre}{json.dumps(delta)},"logprobs":null,"finish_reason":{fin},'
                         f'"matched_stop":{matched}}}],"usage":{usage}{_vt(vt)}}}\n\n').encode())
                if done:
                    break
            if so.get("include_usage"):
                out.add(self._usage_chunk(cid, "text_completion", created, model, req, vt=vt))
            out.add(b"data: [DONE]\n\n")
            await out.flush()
        finally:  # a client that disconnects (CancelledError, ConnectionError) aborts its request
            if not req.finished:
                self.abort(req)
        return resp

    def _usage(self, req: Req, reasoning_tokens: int = 0, n: int | None = None) -> dict:
        """OpenAI ``usage`` of ``req`` once it had ``n`` completion tokens (None: now)."""
        n = req.n_out if n is None else n
        details = ({"cached_tokens": req.cached} if self.args.enable_cache_report and req.cached > 0 else None)
        return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + n,
                "completion_tokens": n, "prompt_tokens_details": details, "reasoning_tokens": reasoning_tokens}

    def _usage_chunk(self, cid: str, obj: str, created: int, model: str, req: Req, reasoning_tokens: int = 0,
                     vt: float | None = None) -> bytes:
        usage = {k: v for k, v in self._usage(req, reasoning_tokens).items() if v is not None}
        body: dict[str, Any] = {"id": cid, "object": obj, "created": created, "model": model, "choices": [],
                                "usage": usage}
        if vt is not None:
            body[vproto.FIELD] = vt
        return ("data: " + json.dumps(body) + "\n\n").encode()

    # /v1/chat/completions
    async def h_chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read_json(request, openai=True)
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list")
            n_in = textgen.chat_prompt_tokens(messages)
            max_new = body.get("max_completion_tokens", body.get("max_tokens"))
            max_new = self._int(max_new, max(1, self.context_len - n_in - 1))
            self.validate(n_in, max_new)
        except BadRequest as e:
            return self._error(str(e), openai=True)
        ctk = body.get("chat_template_kwargs") or {}
        thinking = self.reasoning_model and ctk.get("enable_thinking", True) is not False
        separate = bool(body.get("separate_reasoning", True)) and self.reasoning_model
        rid = self.new_rid()
        question = textgen.last_user_text(messages)
        comp = self._completion_for(question, body, rid, max_new, raw=False, reasoning=thinking)
        if thinking and not separate and comp.repeat is None:
            comp.head = tuple("</think>" if p == "" and i == comp.reasoning - 1 else p
                              for i, p in enumerate(comp.head))
        pieces: list = []
        for m in messages:
            pieces.append(f"<|{m.get('role', 'user')}|>")
            c = m.get("content")
            pieces += textgen._PIECE_RE.findall(c if isinstance(c, str) else json.dumps(c))
        pieces.append("<|assistant|>")  # the generation prompt: the answer follows it, as in the next turn's history
        req = self.submit(comp, prompt=pieces, prompt_tokens=n_in, max_new=max_new, rid=rid)
        cid = f"chatcmpl-{rid}"
        created = int(time.time())
        model = body.get("model") or self.args.served_model_name
        R = comp.reasoning if (separate and comp.repeat is None) else 0
        if not body.get("stream"):
            await self._wait_done(req)
            n = req.n_out
            reasoning = comp.text(0, min(n, R)) if R else ""
            content = comp.text(min(n, R), n)
            msg = {"role": "assistant", "content": content or None,
                   "reasoning_content": (reasoning or None) if self.reasoning_model else None, "tool_calls": None}
            return _json({"id": cid, "object": "chat.completion", "created": created, "model": model,
                          "choices": [{"index": 0, "message": msg, "logprobs": None,
                                       "finish_reason": self._oai_finish(req), "matched_stop": self._matched(req)}],
                          "usage": self._usage(req, min(n, R)), "metadata": {"weight_version": "default"}})
        so = body.get("stream_options") or {}
        include_usage = bool(so.get("include_usage")) or bool(self.args.stream_response_default_include_usage)
        resp = web.StreamResponse(headers=_sse_headers())
        pre = (f'data: {{"id":"{cid}","object":"chat.completion.chunk","created":{created},'
               f'"model":{json.dumps(model)},"choices":[{{"index":0,"delta":')
        mid = ',"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null'
        sent = 0
        vt = req.t_arrive if req.steps is not None else None
        out = _Chunks(resp)
        try:
            await resp.prepare(request)
            out.add((pre + '{"role":"assistant","content":""}' + mid + _vt(vt) + "}\n\n").encode())
            async for n, done, vt in self._progress(req, out):
                end = _vt(vt) + "}\n\n"
                if n > sent:
                    parts = []
                    if sent < R:
                        rtext = comp.text(sent, min(n, R))
                        if rtext:
                            parts.append(pre + '{"reasoning_content":' + json.dumps(rtext) + "}" + mid + end)
                    ctext = comp.text(max(sent, R), n) if n > R else ""
                    if ctext:
                        parts.append(pre + '{"content":' + json.dumps(ctext) + "}" + mid + end)
                    sent = n
                    if parts:
                        out.add("".join(parts).encode())
                if done:
                    break
            fin = json.dumps(self._oai_finish(req))
            out.add((pre + "{}" + f',"logprobs":null,"finish_reason":{fin},"matched_stop":'
                     f'{json.dumps(self._matched(req))}}}],"usage":null{_vt(vt)}}}\n\n').encode())
            if include_usage:
                out.add(self._usage_chunk(cid, "chat.completion.chunk", created, model, req, min(req.n_out, R),
                                          vt=vt))
            out.add(b"data: [DONE]\n\n")
            await out.flush()
        finally:  # a client that disconnects (CancelledError, ConnectionError) aborts its request
            if not req.finished:
                self.abort(req)
        return resp

    # info endpoints
    async def h_models(self, request: web.Request) -> web.Response:
        name = self.args.served_model_name
        return _json({"object": "list", "data": [
            {"id": name, "object": "model", "created": int(self.unix0), "owned_by": "sglang", "root": name,
             "parent": None, "max_model_len": self.context_len}]})

    async def h_model_one(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name != self.args.served_model_name:
            return _json({"error": {"message": f"The model '{name}' does not exist", "type": "invalid_request_error",
                                    "param": "model", "code": "model_not_found"}}, 404)
        return _json({"id": name, "object": "model", "created": int(self.unix0), "owned_by": "sglang", "root": name,
                      "parent": None, "max_model_len": self.context_len})

    def server_info(self) -> dict:
        d = self.resolved_args()
        m = self._mem()
        max_req_input_len = max(1, min(self.context_len - 1, self.capacity - 1))
        mrr = int(getattr(self.perf, "max_running_requests", 0) or 0)
        state = {**d, "last_gen_throughput": self.last_gen_throughput,
                 "memory_usage": {"weight": round(m["w"], 2), "kvcache": round(m["kv"], 2),
                                  "token_capacity": self.capacity, "graph": round(m["g"], 2)},
                 "effective_max_running_requests_per_dp": mrr}
        info = {**d, "status": "ready" if self.ready else "starting", "max_total_num_tokens": self.capacity,
                "max_req_input_len": max_req_input_len, "internal_states": [state], "version": self.version,
                "time_scale": self.serve_scale, "startup_time_scale": self.startup_scale,
                # the twin's modelled startup (s): its startup phases, warm-up request and any fault's ready time,
                # without host latency; the launcher's clock also scales the host's process start and polling by
                # startup_time_scale (grid/sweep/measure.py startup_seconds)
                "twin_startup_s": None if self.startup_s is None else round(self.startup_s, 3)}
        if holds("server_info_launch_command", self.ver):
            # SGLang joins the arguments it parsed, without the program (srt/server_args.py prepare_server_args);
            # the twin also hides the API key
            info["launch_command"] = " ".join(self.argv_redacted())
        if holds("server_info_startup_time", self.ver):
            info["startup_time"] = round(self.ready_at, 3)
        if holds("server_info_frontend", self.ver):
            info["frontend"] = "python"
        if holds("internal_state_world_size", self.ver):
            state["world_size"] = self.args.tp_size * self.args.pp_size
        if holds("internal_state_decode_cuda_graph_bs", self.ver):
            state["decode_cuda_graph_bs"] = list(getattr(self.perf, "cuda_graph_batch_sizes", []) or [])
        return info

    def argv_redacted(self) -> list[str]:
        out, skip = [], False
        for a in sys.argv[1:]:
            if skip:
                out.append("***")
                skip = False
                continue
            out.append(a)
            skip = a == "--api-key"
        return out

    async def h_server_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_server_info":
            self.log.info("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                          "Please use '/server_info' instead.", level="warning")
        return _json(self.server_info())

    async def h_model_info(self, request: web.Request) -> web.Response:
        if request.path == "/get_model_info":
            self.log.info("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                          "Please use '/model_info' instead.", level="warning")
        info = {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path,
                "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False,
                "model_type": self.model.model_type, "architectures": [self.model.architecture]}
        if holds("model_info_serving_fields", self.ver):
            info.update(served_model_name=self.args.served_model_name, load_format=self.args.load_format,
                        reasoning_parser=self.args.reasoning_parser, tool_call_parser=self.args.tool_call_parser)
        if holds("model_info_disaggregation_mode", self.ver):
            info["disaggregation_mode"] = "null"
        return _json(info)

    async def h_flush(self, request: web.Request) -> web.Response:
        if self.sched.has_work():
            # 0.5.9 answers a refused flush with the text of a done one (srt/entrypoints/http_server.py flush_cache)
            return web.Response(text="Flush cache failed.\n" if holds("flush_cache_failure_text", self.ver)
                                else FLUSH_OK, status=400)
        self.cache.flush()
        self.log.sched("Cache flushed successfully!")
        return web.Response(text=FLUSH_OK)

    async def h_telemetry(self, request: web.Request) -> web.Response:
        """Twin-only (no SGLang route): :meth:`telemetry` now."""
        return _json(self.telemetry())

    async def h_vclock_samples(self, request: web.Request) -> web.Response:
        """Twin-only, virtual clock: the snapshots of /metrics and :meth:`telemetry` the twin took (at each point's
        start, every ``VCLOCK_SAMPLE_S`` modelled seconds and at its end) with modelled times in ``[from, to]`` (query
        parameters, s), as ``{"samples": [{"vt", "kind", "metrics", "telemetry"}, ...]}`` (409 when the twin is not
        on the virtual clock)."""
        if not self.virtual:
            return _json({"error": "the twin is not on the virtual clock"}, 409)
        try:
            since, until = float(request.query["from"]), float(request.query["to"])
        except (KeyError, ValueError):
            return _json({"error": "from and to (modelled s) are required numbers"}, 400)
        return _json({"samples": self.samples_between(since, until)})

    def telemetry(self) -> dict:
        """Modelled per-GPU telemetry for the running batch (PerfModel.decode_telemetry) plus cumulative busy time,
        so a sampler can scale by the busy fraction between two readings. Modelled seconds."""
        sched = self.sched
        running = sched.running_count()
        # a deployment's GPUs as its busiest decoding server's (the one whose batch a tail request waits on)
        perf, batch, context = sched.decoding_load() if self.deployment else (self.perf, running, sched.used_tokens())
        hw = self.hw
        return {
            "modelled": True, "mnow_s": self.mnow(), "busy_s": self.busy_s, "running": running,
            "queued": sched.waiting_count(), "used_tokens": sched.used_tokens(),
            "decode": perf.decode_telemetry(batch, context) if batch else None,
            "gpu": hw.gpu, "gpu_count": hw.gpu_count, "tdp_w": hw.tdp_w, "memory_total_gb": hw.memory_gb,
            "memory_bandwidth_gbps": hw.memory_bandwidth_gbps, "interconnect": hw.interconnect, "p2p": hw.p2p,
            "pcie_gbps": hw.pcie_gbps, "allreduce_bus_gbps": hw.allreduce_bus_gbps,
            "memory_used_gb": self.perf.weight_gb_per_gpu + self.perf.kv_gb_per_gpu + self.perf.graph_gb_per_gpu,
        }

    async def h_metrics(self, request: web.Request) -> web.Response:
        assert self.metrics is not None
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})


# --- entry point -------------------------------------------------------------------------------------------------------
