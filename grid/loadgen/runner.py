"""The asyncio load runner: one load point against one server.

* HTTP/1.1 on the asyncio transport (``grid.loadgen.http``): one keep-alive connection pool per load point, never
  limited (a closed loop opens one connection per worker before the first send), so no request waits for a
  connection; aiohttp's exception classes are kept for errors.
* One clock: ``time.perf_counter_ns``. Every read of a streamed response is stamped on arrival (in the socket
  callback) and its raw bytes kept; ``send_perf_ns`` is when the request's last byte was written to the socket
  (connection set-up and event-loop delays before the write are not TTFT). Parsing happens after the request ends, one request per event-loop iteration in a background task (or,
  for a request that looks stalled, from the watchdog), never between a read and its stamp.
* Closed loop (``kind="concurrency"``): exactly ``value`` workers; each sends the next prompt when its previous
  request finishes. ``scheduled`` = the moment the worker was ready, so client queue time is ~0.
* Sessions (prompts with a ``session``: ``grid.loadgen.dataset`` kind ``sessions``, closed loop only): each worker is
  a user who plays one conversation after another, sending turn k+1 ``think_s`` (modelled) after turn k's answer
  was parsed, with every earlier message and answer as its history (``Prompt.history``); ``num_prompts`` turns are
  measured, in sending order. No steady-state wave: the users follow their conversations.
* Open loop (``kind="rate"``): request i is due at ``t0 + offset_i / time_scale`` (offsets from
  ``grid.loadgen.arrivals``, modelled seconds). The dispatcher sleeps to each absolute deadline; when it is behind it
  sends at once and the lateness shows up as ``client_queue_ms``. ``kind="trace"`` is the same with the offsets a
  dataset recorded (``LoadPoint.offsets_s``, divided by ``value``, the replay speed).
* A cap on requests in flight (``max_concurrency``, open loop only: ``--request-rate`` with ``--max-concurrency`` in
  SGLang's bench_serving and vLLM's benchmark client): a request that is due while ``max_concurrency`` are in flight
  waits on the client for a slot (first due, first served); ``slot_wait_ns`` is how long it waited. Its latencies
  count from the actual send; the wait is ``slot_wait_ms`` (and part of ``client_queue_ms``).
* Warm-up requests run first and are excluded from the measured window and from ``records``.
* Steady state (``LoadPoint.steady``, closed loop only): a closed loop whose workers all start at once sends
  synchronized waves (with fixed lengths they finish together and start again together), so TTFT is bimodal and the
  window includes the ramp-down. A steady point measures it the way AIPerf's ``--steady-state`` mode does (a warm-up
  loop, a measurement loop, a tail loop that keeps the load on until every measured request has finished;
  https://github.com/nvda-ci/aiperf/blob/main/docs/tutorials/steady-state.md), with the workers' phases spread
  evenly over one request time *at the target concurrency*: every worker starts at once with a warm-up request, and
  worker k's (of c) asks for ``ceil(output_len x (k + 1) / c)`` tokens, so under the same load the first wave ends
  one worker after another, spread over the time one full request takes at that load (a stagger in time, by the
  lone warm-up request's duration, spreads them over the *unloaded* request time only: at 64 streams less than half
  the cycle, and the requests then arrive in bursts). The next ``num_prompts`` requests are measured; once they are
  all handed out each free worker sends *tail* requests until the last measured request ends, and the tail requests
  still in flight are then cancelled (the connection is closed, which aborts the request in SGLang and in the twin).
  The measured window runs from the first measured send to the last measured end: every worker is busy throughout,
  so the load is at its target concurrency for the whole window and every measured request ran under it. Warm-up
  wave request j uses prompt ``prompts[(num_prompts + warmup_requests + j) % len(prompts)]`` (its output length
  shortened as above) and tail request j (``tail_prompts`` of them, reused in turn when more are needed)
  ``prompts[(num_prompts + warmup_requests + wave_warmup + j) % len(prompts)]``; their records are
  ``warmup_records`` and ``tail_records``. ``grid.metrics.loadpoint.summarize`` counts the tokens of every request by
  arrival inside the window (``window_kind="steady_state"``).
* Measured request i uses ``prompts[i % len(prompts)]``; warm-up request j uses ``prompts[(num_prompts + j) %
  len(prompts)]``, so pass ``num_prompts + warmup_requests`` prompts to keep warm-up prompts out of the measured set.
* Timeouts are in real seconds (modelled ones on the virtual clock): ``read_timeout_s`` is the longest silence (no
  bytes) a response may have; ``stall_timeout_s`` the longest time without a new generated token (counted from the
  send while no token has arrived yet). A request hit by either fails with ``read_timeout`` / ``stall_timeout``; the
  load point goes on.
* A failed request is never dropped: it is in ``records`` with its error class.

``time_scale`` (modelled seconds per real second) rescales the schedule and is carried to the result; raw
nanoseconds are never scaled.

Virtual clock (``Target.clock="virtual"``, a twin started with ``GRID_TWIN_CLOCK=virtual``; streamed points): the
protocol of grid/loadgen/vclock.py. Every load plan is a set of streams: a closed-loop worker, a session's user, a
slot of a capped open loop, or (uncapped open loop) each request on its own. A stream sends its first request at
the modelled time the twin gave for the point (or, open loop, when the request is due) and each next one at the
time the previous answer's last event carried (plus a session's think time; a capped slot waits for the next
request to be due). Every ``*_perf_ns`` stamp of a record (scheduled, send, each event, end) and the window are then
modelled nanoseconds, the result's ``time_scale`` is 1 and its ``clock`` is ``"virtual"``: the point's numbers
depend on the configuration, the load plan and the seed, not on the host. The client never sleeps: the twin's clock
waits for it. Sessions follow a plan fixed in advance (``_session_loop``). The timeouts travel with each request in
modelled seconds and the twin plays them (it aborts the request when its client would have given up); in real time
only :data:`VIRTUAL_BACKSTOP_S` remains.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Iterable

import aiohttp

from grid.loadgen import vclock
from grid.loadgen.arrivals import offsets_to_ns, send_offsets
from grid.loadgen.client import Endpoint, StreamParser, dumps_body, get_endpoint
from grid.loadgen.http import Exchange, Pool
from grid.loadgen.looplag import LoopLag
from grid.loadgen.records import TAIL_CANCELLED, Prompt, RequestRecord, exceeds_context

log = logging.getLogger(__name__)

POINT_KINDS = ("concurrency", "rate", "trace")


@dataclass(frozen=True)
class Target:
    """Where and how to send requests."""

    base_url: str
    api: str = "generate"
    model: str = "default"
    api_key: str | None = field(default=None, repr=False)  # sent as Authorization: Bearer; never logged
    time_scale: float = 1.0  # modelled seconds per real second; *_ms metrics = real x time_scale
    stream: bool = True
    ignore_eos: bool = True
    extra_body: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    clock: str = "real"  # "virtual": the twin's virtual clock (grid/loadgen/vclock.py), closed loop only


@dataclass(frozen=True)
class LoadPoint:
    """One load level: ``value`` concurrent requests (closed loop), ``value`` req/s of modelled time (open loop), or a
    recorded arrival trace replayed at speed ``value`` (``kind="trace"``, ``offsets_s`` in modelled seconds).
    ``max_concurrency``: open loop only, the cap on requests in flight (None: no cap)."""

    kind: str
    value: float
    num_prompts: int
    arrival: str = "poisson"
    burstiness: float = 1.0
    warmup_requests: int = 0
    seed: int = 0
    max_concurrency: int | None = None
    offsets_s: tuple[float, ...] | None = field(default=None, repr=False)
    steady: bool = False  # closed loop: a warm-up wave of spread lengths, then measured requests, then a tail

    @property
    def wave_warmup(self) -> int:
        """Warm-up requests sent inside the running closed loop before the measured ones (steady points only)."""
        return int(self.value) if self.steady and self.kind == "concurrency" else 0

    @property
    def tail_prompts(self) -> int:
        """Distinct prompts for the tail requests of a steady point (two per worker: with spread phases a worker runs
        out of measured work at most about one request time before the last measured request ends)."""
        return 2 * int(self.value) if self.steady and self.kind == "concurrency" else 0

    def __post_init__(self) -> None:
        if self.kind not in POINT_KINDS:
            raise ValueError(f"LoadPoint.kind must be one of {POINT_KINDS}, got {self.kind!r}")
        if self.kind == "concurrency" and (self.value < 1 or self.value != int(self.value)):
            raise ValueError(f"concurrency must be a positive integer, got {self.value}")
        if self.kind in ("rate", "trace") and not self.value > 0:
            raise ValueError(f"{self.kind} must be > 0 ({'req/s' if self.kind == 'rate' else 'speed'}), "
                             f"got {self.value}")
        if self.num_prompts < 0 or self.warmup_requests < 0:
            raise ValueError("num_prompts and warmup_requests must be >= 0")
        if self.max_concurrency is not None and (self.kind == "concurrency" or self.max_concurrency < 1):
            raise ValueError(f"max_concurrency caps an open loop (kind rate or trace) and must be >= 1, got "
                             f"{self.max_concurrency} with kind {self.kind!r}")
        if self.kind == "trace" and (self.offsets_s is None or len(self.offsets_s) < self.num_prompts):
            raise ValueError(f"a trace point needs offsets_s for its {self.num_prompts} requests")


#: How a load point's measured window was taken (``LoadPointResult.window_kind``; the ``window_kind`` column).
WINDOW_KINDS = ("all_requests", "steady_state")


@dataclass
class LoadPointResult:
    records: list[RequestRecord]  # measured requests (warm-up excluded), every one, failed ones too
    window_start_perf_ns: int  # first scheduled send
    window_end_perf_ns: int  # last request end
    time_scale: float
    warmup_records: list[RequestRecord] = field(default_factory=list)
    stalled: bool = False  # at least one measured request hit the token-progress watchdog
    point: LoadPoint | None = None
    #: all_requests: throughputs count the measured requests whole over the window; steady_state: every request's
    #: tokens by arrival inside the window (warm-up and tail requests included), see grid.metrics.loadpoint
    window_kind: str = "all_requests"
    tail_records: list[RequestRecord] = field(default_factory=list)  # steady points: load kept on, not measured
    #: real seconds the load generator's own event loop ran late while the point ran (grid/loadgen/looplag.py), and
    #: the real seconds the point took: a starved client sends and reads late, whatever the server does
    loop_late_s: float = 0.0
    real_s: float = 0.0
    #: how long the point held the server, in its clock's ns (x time_scale for modelled): the warm-up requests' span
    #: plus the main phase's, from its first send (the steady-state wave included) to the window's end; on the virtual
    #: clock the two phases begin at separate epochs of the twin's clock, so a span across them would mean nothing
    held_ns: int = 0
    #: "virtual": every stamp is the twin's modelled time (ns) and time_scale is 1 (grid/loadgen/vclock.py)
    clock: str = "real"


class _Session:
    """State shared by the requests of one load point."""

    def __init__(self, target: Target, pool: Pool, endpoint: Endpoint, read_timeout_s: float,
                 stall_timeout_s: float | None, on_request_done: Callable[[RequestRecord], None] | None) -> None:
        self.target = target
        self.pool = pool
        self.endpoint = endpoint
        self.headers = {"Content-Type": "application/json", "Accept": "*/*", "Accept-Encoding": "identity",
                        "User-Agent": "grid-loadgen"}
        if target.api_key:
            self.headers["Authorization"] = f"Bearer {target.api_key}"
        self.read_timeout_s = read_timeout_s
        self.read_timeout_ns = int(read_timeout_s * 1e9)
        self.stall_ns = None if stall_timeout_s is None else int(stall_timeout_s * 1e9)
        self.on_request_done = on_request_done
        self.virtual = target.clock == "virtual"
        # virtual clock: the client's timeouts in modelled seconds, which the twin plays (grid/loadgen/vclock.py)
        self.vlimits: tuple[float | None, float | None] = (None, None)
        # request in flight -> (parser, io task, [exchange]); read by the watchdog
        self.inflight: dict[int, tuple[StreamParser, asyncio.Task, list]] = {}
        self._abort: dict[int, tuple[str, str]] = {}  # request index -> (error class, message) of a cancellation
        # finished requests wait here to be parsed, one per loop iteration, so parsing never delays a stamp by more
        # than one request's parse (and a closed-loop worker sends its next request without waiting for it)
        self._parse_queue: asyncio.Queue[StreamParser] = asyncio.Queue()
        self._parse_task: asyncio.Task | None = None
        self._parsed: dict[int, asyncio.Future] = {}  # request index -> set once its record is parsed (sessions)

    async def _parse_loop(self) -> None:
        while True:
            parser = await self._parse_queue.get()
            try:
                self._finish(parser)
            finally:
                self._parse_queue.task_done()
            await asyncio.sleep(0)

    def start(self) -> None:
        self._parse_task = asyncio.ensure_future(self._parse_loop())

    async def drain(self) -> None:
        """Wait until every finished request is parsed."""
        await self._parse_queue.join()

    async def stop(self) -> None:
        if self._parse_task is not None:
            self._parse_task.cancel()
            await asyncio.gather(self._parse_task, return_exceptions=True)

    def new_record(self, index: int, prompt: Prompt, warmup: bool) -> RequestRecord:
        return RequestRecord(
            request_index=index, prompt_index=prompt.index, api=self.endpoint.name, stream=self.target.stream,
            max_tokens=prompt.output_len, planned_input_len=prompt.input_len, warmup=warmup,
            session=prompt.session, turn=prompt.turn,
        )

    async def vclock_post(self, path: str, obj: dict) -> dict:
        """POST ``obj`` to the twin's virtual-clock route ``path`` (grid/loadgen/vclock.py); its JSON answer."""
        headers = {k: v for k, v in self.headers.items() if k == "Authorization"}
        timeout = aiohttp.ClientTimeout(total=min(self.read_timeout_s, 60.0))
        async with aiohttp.ClientSession(timeout=timeout) as s, \
                s.post(self.target.base_url.rstrip("/") + path, json=obj, headers=headers) as r:
            if r.status != 200:
                raise RuntimeError(f"{path}: HTTP {r.status}: {(await r.text())[:300]}")
            return await r.json()

    async def _io(self, rec: RequestRecord, body: bytes, box: list, headers: dict[str, str] | None = None) -> None:
        """Send and read on a pooled connection (``grid.loadgen.http``). The send stamp is taken when the request's
        bytes were handed to the socket; every read is stamped in the protocol callback, which wakes this task only
        for the response head and when the response may have ended, so it sleeps through the stream."""
        clock = time.perf_counter_ns
        pool = self.pool
        rec.send_unix_ns, rec.send_perf_ns = time.time_ns(), clock()  # replaced at the write; kept if connecting fails
        conn = await pool.acquire()
        ex = Exchange(conn, rec.raw_reads if rec.stream else [])
        box.append(ex)
        reuse = False
        try:
            conn.transport.write(pool.request_bytes(  # type: ignore[union-attr]
                self.headers if headers is None else {**self.headers, **headers}, body))
            rec.send_perf_ns = clock()
            rec.send_unix_ns = time.time_ns()
            loop = asyncio.get_running_loop()
            timeout_ns = self.read_timeout_ns
            while True:
                ex.pump()
                if ex.done:
                    break
                delay = max(conn.last_rx_ns, rec.send_perf_ns) + timeout_ns - clock()
                if delay <= 0:
                    raise asyncio.TimeoutError(f"no bytes for {self.read_timeout_s:g} s")
                fut = loop.create_future()
                conn.waiter = fut
                timer = loop.call_later(delay / 1e9, _wake, fut)
                try:
                    await fut
                finally:
                    timer.cancel()
                    if conn.waiter is fut:
                        conn.waiter = None
            reuse = ex.reusable()
        finally:
            pool.release(conn, reuse)
        rec.http_status = ex.status
        if ex.status != 200:
            text = b"".join(d for _, d in ex.payload).decode("utf-8", errors="replace")
            if rec.stream:
                rec.raw_reads.clear()
            rec.end_perf_ns = clock()
            rec.fail("context_exceeded" if exceeds_context(text) else "http_error", f"HTTP {ex.status}: {text[:500]}")
            return
        if not rec.stream:
            last = ex.payload[-1][0] if ex.payload else ex.head_ts
            rec.raw_reads.append((last, b"".join(d for _, d in ex.payload)))
        rec.end_perf_ns = clock()

    def want_parsed(self, rec: RequestRecord) -> asyncio.Future:
        """A future set once ``rec`` is parsed (its text and token counts are known); call before sending it, and
        :meth:`forget_parsed` after."""
        fut = self._parsed[rec.request_index] = asyncio.get_running_loop().create_future()
        return fut

    def forget_parsed(self, rec: RequestRecord) -> None:
        self._parsed.pop(rec.request_index, None)

    async def request_parsed(self, rec: RequestRecord, prompt: Prompt) -> RequestRecord:
        """:meth:`request`, returning once the record is parsed (its text and token counts are known)."""
        fut = self.want_parsed(rec)
        try:
            await self.request(rec, prompt)
            await fut
        finally:
            self.forget_parsed(rec)
        return rec

    async def request(self, rec: RequestRecord, prompt: Prompt, headers: dict[str, str] | None = None
                      ) -> RequestRecord:
        parser = StreamParser(self.endpoint, rec, virtual=self.virtual)
        try:
            body = dumps_body(self.endpoint.payload(prompt, rec.stream))
        except Exception as exc:  # a prompt the api cannot take: fail this request, not the load point
            rec.send_unix_ns, rec.send_perf_ns = time.time_ns(), time.perf_counter_ns()
            rec.end_perf_ns = rec.send_perf_ns
            rec.fail("client_error", f"{type(exc).__name__}: {exc}")
            self._parse_queue.put_nowait(parser)
            return rec
        box: list = []
        task = asyncio.ensure_future(self._io(rec, body, box, headers))
        self.inflight[rec.request_index] = (parser, task, box)
        try:
            await asyncio.wait({task})
        finally:
            self.inflight.pop(rec.request_index, None)
            if not task.done():  # the runner itself is being cancelled
                task.cancel()
        if rec.end_perf_ns is None:
            rec.end_perf_ns = time.perf_counter_ns()
        abort = self._abort.pop(rec.request_index, None)
        if task.cancelled():
            rec.fail(*(abort or ("client_error", "cancelled")))
        elif (error := task.exception()) is not None:
            rec.fail(*_classify(error))
        self._parse_queue.put_nowait(parser)
        return rec

    def _finish(self, parser: StreamParser) -> None:
        try:
            rec = parser.finish()
        except Exception as exc:  # a parser bug must fail this request, not hang or kill the load point
            log.exception("parsing request %d failed", parser.rec.request_index)
            rec = parser.rec
            rec.raw_reads = []
            rec.fail("client_error", f"parser: {type(exc).__name__}: {exc}")
        fut = self._parsed.get(rec.request_index)
        if fut is not None and not fut.done():
            fut.set_result(None)
        if self.on_request_done is not None:
            try:
                self.on_request_done(rec)
            except Exception:  # a progress callback must not take the load point down
                log.exception("on_request_done callback failed")

    def cancel(self, index: int, error_class: str, message: str) -> None:
        """Cancel request ``index`` if it is in flight: its connection is closed (the server aborts it) and its record
        fails with ``error_class`` and ``message``, keeping what arrived before."""
        entry = self.inflight.get(index)
        if entry is not None and not entry[1].done():
            self._abort[index] = (error_class, message)
            entry[1].cancel()

    def _progress_ns(self, rec: RequestRecord) -> int:
        """perf ns of the in-flight request's last known progress: its last token, else its send (the wall clock
        only: on the virtual clock the twin plays the timeouts)."""
        return rec.last_token_perf_ns or rec.send_perf_ns or 0

    async def watchdog(self) -> None:
        """Fail requests that made no token progress for stall_timeout_s (parses pending reads lazily)."""
        assert self.stall_ns is not None
        period = min(max(self.stall_ns / 4e9, 0.005), 0.5)
        while True:
            await asyncio.sleep(period)
            for n, (index, (parser, task, box)) in enumerate(list(self.inflight.items())):
                rec = parser.rec
                if rec.send_perf_ns is None or task.done():
                    continue
                now = time.perf_counter_ns()
                if now - self._progress_ns(rec) <= self.stall_ns:
                    continue  # recent progress already known: no need to parse
                if box:
                    try:
                        box[0].pump()  # de-frame what arrived since (the io task raises any error itself)
                    except Exception:
                        pass
                parser.consume()  # parse what arrived since, then decide
                if now - self._progress_ns(rec) > self.stall_ns:
                    self._abort[index] = ("stall_timeout", "cancelled by the watchdog")
                    task.cancel()
                if n % 16 == 15:
                    await asyncio.sleep(0)  # let arrivals be stamped between parses


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _classify(exc: BaseException) -> tuple[str, str]:
    msg = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return "read_timeout", msg
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return "conn_error", msg
    return "client_error", msg


#: Virtual clock: the real seconds without a byte after which a request fails with ``read_timeout`` all the same (a
#: twin that stopped answering; the modelled timeouts are the twin's to play). A point's requests may legitimately
#: wait long in real time while the twin simulates the ones sent before them.
VIRTUAL_BACKSTOP_S = 600.0


async def run_load_point(
    target: Target,
    point: LoadPoint,
    prompts: list[Prompt],
    *,
    read_timeout_s: float = 600.0,
    stall_timeout_s: float | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> LoadPointResult:
    """Run one load point and return every measured request's raw record plus the measured window."""
    if not prompts:
        raise ValueError("prompts is empty")
    if not (target.time_scale > 0) or math.isinf(target.time_scale):
        raise ValueError(f"time_scale must be a finite number > 0, got {target.time_scale}")
    endpoint = get_endpoint(target.api, model=target.model, ignore_eos=target.ignore_eos, extra_body=target.extra_body)
    closed = point.kind == "concurrency"
    virtual = target.clock == "virtual"
    if target.clock not in vclock.CLOCKS:
        raise ValueError(f"Target.clock must be one of {vclock.CLOCKS}, got {target.clock!r}")
    if virtual and not target.stream:
        raise ValueError("the virtual clock runs streamed points only: its times travel in the streamed events")
    workers = int(point.value) if closed else 0
    offsets_s: list[float] = []  # open loop: each request's send time after the start, modelled s
    if point.kind == "trace":
        assert point.offsets_s is not None  # checked by LoadPoint
        offsets_s = [o / point.value for o in point.offsets_s[:point.num_prompts]]
    elif not closed:
        offsets_s = send_offsets(point.num_prompts, point.value, point.arrival, burstiness=point.burstiness,
                                 seed=point.seed)
    offsets_ns = offsets_to_ns(offsets_s, target.time_scale)
    n = len(prompts)
    pool = Pool(target.base_url.rstrip("/") + endpoint.path, connect_timeout_s=min(read_timeout_s, 60.0))
    vlimits = (stall_timeout_s, read_timeout_s)
    if virtual:  # the twin plays the timeouts in modelled time; real time keeps only a backstop
        read_timeout_s, stall_timeout_s = max(read_timeout_s, VIRTUAL_BACKSTOP_S), None
    try:
        sess = _Session(target, pool, endpoint, read_timeout_s, stall_timeout_s, on_request_done)
        if virtual:
            sess.vlimits = vlimits
        if closed:  # one connection per worker, open before the first send (connecting is not part of any request)
            await pool.prewarm(min(workers, max(point.num_prompts, point.warmup_requests)))
        elif point.max_concurrency is not None:  # the cap bounds the connections needed: open them ahead too
            await pool.prewarm(min(point.max_concurrency, point.num_prompts))
        sess.start()
        lag = LoopLag()
        lag.start()
        started_perf_ns = time.perf_counter_ns()
        dog = asyncio.ensure_future(sess.watchdog()) if stall_timeout_s is not None else None
        try:
            warm_items = [(j, prompts[(point.num_prompts + j) % n]) for j in range(point.warmup_requests)]
            if virtual:
                warm, _ = await _virtual_loop(sess, warm_items, workers if closed else 1, warmup=True)
            else:
                warm = await _closed_loop(sess, warm_items, workers if closed else 1, warmup=True, t0=None)
            await sess.drain()
            warm_span = span_ns(warm)
            warm_held_ns = max(warm_span[1] - warm_span[0], 0) if warm_span else 0
            t0 = time.perf_counter_ns()
            items = [(i, prompts[i % n]) for i in range(point.num_prompts)]
            tail: list[RequestRecord] = []
            main_phase: list[RequestRecord] = []
            t1: int | None = None
            if closed and point.wave_warmup:
                base = point.num_prompts + point.warmup_requests
                wave = [(base + j, _shortened(prompts[(base + j) % n], j + 1, point.wave_warmup))
                        for j in range(point.wave_warmup)]
                base += point.wave_warmup
                tails = [(base + j, prompts[(base + j) % n]) for j in range(point.tail_prompts)]
                records, more_warm, tail, t0, t1 = await _steady_loop(sess, wave, items, tails, workers)
                warm += more_warm
                main_phase = [*more_warm, *records]
            elif closed and any(p.session is not None for p in prompts):
                records, t0 = await _session_loop(sess, prompts, point.num_prompts, workers, t0, target.time_scale)
            elif virtual and closed:
                records, t0 = await _virtual_loop(sess, items, workers)
            elif virtual:  # capped: a stream per slot; uncapped: a stream per request
                cap = point.max_concurrency
                records, t0 = await _virtual_loop(sess, items, len(items) if cap is None else cap,
                                                  offsets_s=offsets_s, last=cap is None)
            elif closed:
                records = await _closed_loop(sess, items, workers, warmup=False, t0=t0)
            else:
                records = await _open_loop(sess, items, offsets_ns, t0, point.max_concurrency)
            await sess.drain()
        finally:
            await lag.stop()
            real_s = (time.perf_counter_ns() - started_perf_ns) / 1e9
            if dog is not None:
                dog.cancel()
                await asyncio.gather(dog, return_exceptions=True)
            await sess.stop()
    finally:
        pool.close()
    records.sort(key=lambda r: r.request_index)
    warm.sort(key=lambda r: r.request_index)
    tail.sort(key=lambda r: r.request_index)
    end = max((r.end_perf_ns for r in records if r.end_perf_ns is not None), default=t0)
    window_end = end if t1 is None else t1
    sends = [r.send_perf_ns for r in (main_phase if t1 is not None else records) if r.send_perf_ns is not None]
    start = min([*sends, t0]) if sends else t0  # an open loop starts before its first send
    held_ns = warm_held_ns + max(window_end - start, 0) if sends else warm_held_ns
    return LoadPointResult(
        records=records, window_start_perf_ns=t0, window_end_perf_ns=end if t1 is None else t1,
        time_scale=1.0 if virtual else target.time_scale, warmup_records=warm,
        stalled=any(r.error_class == "stall_timeout" for r in records), point=point,
        window_kind="steady_state" if t1 is not None else "all_requests", tail_records=tail,
        loop_late_s=lag.late_s, real_s=real_s, clock=target.clock, held_ns=held_ns,
    )


def span_ns(records: Iterable[RequestRecord]) -> tuple[int, int] | None:
    """(first send, last end) of ``records``, ns of their clock (modelled on the virtual clock); None when none was
    sent."""
    records = list(records)
    sends = [r.send_perf_ns for r in records if r.send_perf_ns is not None]
    ends = [r.end_perf_ns for r in records if r.end_perf_ns is not None]
    return (min(sends), max(ends)) if sends and ends else None


async def _closed_loop(sess: _Session, items: list[tuple[int, Prompt]], workers: int, *, warmup: bool,
                       t0: int | None) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    it = iter(items)

    async def worker() -> None:
        for index, prompt in it:  # a shared iterator: each worker takes the next prompt when it is free
            rec = sess.new_record(index, prompt, warmup)
            rec.scheduled_perf_ns = time.perf_counter_ns()
            if t0 is not None:
                rec.scheduled_offset_ns = rec.scheduled_perf_ns - t0
            out.append(await sess.request(rec, prompt))

    await asyncio.gather(*(worker() for _ in range(min(workers, len(items)))))
    return out


class _Streams:
    """How the workers of a point send: on the wall clock (every send is now), or as the streams of the twin's
    virtual clock (grid/loadgen/vclock.py), each sending at or after the modelled time its previous answer ended."""

    def __init__(self, sess: _Session) -> None:
        self.sess = sess
        self.vt: list[float] = []
        self._ended: set[int] = set()  # streams whose request marked last was answered: the twin dropped them

    async def open(self, k: int, measured: int | None = None) -> None:
        """Begin a point of ``k`` streams (``measured``: a steady-state point's count of measured requests, whose last
        end has the twin cut the tail requests; grid/loadgen/vclock.py). A twin that cannot be reached (it exited)
        gets its requests all the same, each failing as on the wall clock (``conn_error``)."""
        if self.sess.virtual and k:
            body = {"streams": k} if not measured else {"streams": k, "measured": measured}
            try:
                vt0 = float((await self.sess.vclock_post(vclock.BEGIN_PATH, body))["vt"])
            except (aiohttp.ClientConnectionError, OSError):
                vt0 = 0.0
            self.vt = [vt0] * k

    def now_ns(self, s: int) -> int:
        """Stream ``s``'s present: perf ns on the wall clock, modelled ns on the virtual one."""
        return vclock.to_ns(self.vt[s]) if self.vt else time.perf_counter_ns()

    async def pause(self, s: int, think_s: float, since_ns: int, time_scale: float) -> None:
        """Stream ``s`` waits ``think_s`` modelled seconds from ``since_ns`` (its last answer's end) before it sends
        again: on the virtual clock its send time moves on, on the wall clock it sleeps to an absolute deadline
        (asyncio may wake a little early, so the deadline is re-checked)."""
        if self.vt:
            self.vt[s] += think_s
            return
        due = since_ns + int(think_s / time_scale * 1e9)
        while (now := time.perf_counter_ns()) < due:
            await asyncio.sleep((due - now) / 1e9)

    async def send(self, s: int, rec: RequestRecord, prompt: Prompt, *, at: float | None = None,
                   last: bool = False, parsed: bool = False, role: str | None = None) -> None:
        """Send ``rec`` from stream ``s``. A request whose answer carried no time (refused with an HTTP error, a reset
        connection, a twin that exited) leaves the stream's present where it was.
        Virtual clock: it is sent at the stream's present, or at ``at`` (modelled s) if that is later; ``last``: the
        stream sends nothing after it. ``parsed``: return once the record is parsed (its text is known). ``role``:
        ``measured`` or ``tail`` in a steady-state point (a tail the twin cut at the window's end fails as the
        wall-clock runner's cancelled ones do, ``TAIL_CANCELLED``)."""
        if not self.vt:
            await (self.sess.request_parsed(rec, prompt) if parsed else self.sess.request(rec, prompt))
            return
        vt = self.vt[s] if at is None else max(self.vt[s], at)
        fut = self.sess.want_parsed(rec) if parsed else None
        try:
            await self.sess.request(rec, prompt, vclock.headers(vt, s, rec.request_index, last, *self.sess.vlimits,
                                                                role=role))
            timeout = vclock.timed_out(rec.raw_reads) if rec.error_class is None else None
            end: float | None
            if timeout is not None and timeout[0] == vclock.TAIL_CUT:
                end = timeout[1]
                rec.fail("client_error", TAIL_CANCELLED)
            elif timeout is not None:  # the twin played this client's timeout: the stream goes on from that instant
                error_class, end = timeout
                limit = self.sess.vlimits[0 if error_class == "stall_timeout" else 1]
                rec.fail(error_class, f"no {'token' if error_class == 'stall_timeout' else 'bytes'} for {limit:g} "
                                      "modelled s (played by the twin on its virtual clock)")
            else:
                end = vclock.last_vt(rec.raw_reads) if rec.error_class is None else None
            rec.send_perf_ns = vclock.to_ns(vt)  # the parser runs later, in the session's parse task
            rec.end_perf_ns = rec.send_perf_ns if end is None else vclock.to_ns(end)
            if fut is not None:
                await fut
        finally:
            if fut is not None:
                self.sess.forget_parsed(rec)
        if end is None:  # refused before it reached the scheduler, or the twin is gone: the stream's present holds
            return
        self.vt[s] = end
        if last:
            self._ended.add(s)

    async def close(self, s: int) -> None:
        if self.vt and s not in self._ended:
            try:
                await self.sess.vclock_post(vclock.DONE_PATH, {"stream": s})
            except (aiohttp.ClientConnectionError, OSError):
                pass  # the twin is gone, and its streams with it


async def _virtual_loop(sess: _Session, items: list[tuple[int, Prompt]], k: int, *, warmup: bool = False,
                        offsets_s: list[float] | None = None, last: bool = False) -> tuple[list[RequestRecord], int]:
    """``k`` streams on the twin's virtual clock (grid/loadgen/vclock.py), each taking the next item when its previous
    answer ended: a closed loop of ``k`` workers, or with ``offsets_s`` an open loop in which item i is due at the
    point's start plus ``offsets_s[i]`` (modelled s) and is sent when due, or at once if its stream freed later
    (``slot_wait_ns``: how long it waited for the stream). An uncapped open loop is one stream per item, each
    sending once (``last``). The twin's clock waits for every stream, so the client never sleeps. A request whose
    answer carries no time (it failed) leaves its stream's present unchanged. Returns the records,
    stamped in modelled ns, and the point's start (modelled ns)."""
    k = min(k, len(items))
    if k == 0:
        return [], 0
    streams = _Streams(sess)
    await streams.open(k)
    t0, vt0 = streams.now_ns(0), streams.vt[0]
    out: list[RequestRecord] = []
    it = iter(zip(items, offsets_s if offsets_s is not None else [None] * len(items)))

    async def stream(s: int) -> None:
        try:
            for (index, prompt), offset in it:
                due = None if offset is None else vt0 + offset
                rec = sess.new_record(index, prompt, warmup)
                rec.scheduled_perf_ns = streams.now_ns(s) if due is None else vclock.to_ns(due)
                if not warmup:
                    rec.scheduled_offset_ns = rec.scheduled_perf_ns - t0
                if due is not None and not last:
                    rec.slot_wait_ns = max(0, streams.now_ns(s) - rec.scheduled_perf_ns)
                await streams.send(s, rec, prompt, at=due, last=last)
                out.append(rec)
        finally:
            await streams.close(s)

    await asyncio.gather(*(stream(s) for s in range(k)))
    return out, t0


def sessions_of(prompts: list[Prompt]) -> list[list[Prompt]]:
    """The conversations among ``prompts`` (those with a ``session``), each its turns in order, in the order each
    conversation first appears. Pure."""
    by: dict[int, list[Prompt]] = {}
    for p in prompts:
        if p.session is not None:
            by.setdefault(p.session, []).append(p)
    return [sorted(turns, key=lambda p: p.turn) for turns in by.values()]


async def _session_loop(sess: _Session, prompts: list[Prompt], num: int, workers: int, t0: int,
                        time_scale: float) -> tuple[list[RequestRecord], int]:
    """Multi-turn sessions in a closed loop of ``workers`` users: each user plays conversations one after another
    and sends their turns one by one, turn k+1 ``think_s`` (modelled) after turn k's answer arrived, carrying the whole
    history (every earlier message and answer). A failed turn ends its conversation (its answer is unknown).

    On the wall clock each user takes the next conversation when free and ``num`` turns are measured in all, numbered
    in order of sending. On the virtual clock the plan is fixed in advance, so that users who finish in the same
    modelled instant cannot swap conversations between runs: user u plays conversations u, u + workers, ...; the first
    ``num`` turns in conversation order are measured, numbered in that order. Returns the records and the point's
    start (perf ns, or modelled ns on the virtual clock)."""
    out: list[RequestRecord] = []
    convs = sessions_of(prompts)
    streams = _Streams(sess)
    await streams.open(workers)
    plan: list[tuple[int, list[Prompt]]] = []  # virtual: (index of the first turn, the turns measured) per conversation
    if streams.vt:
        t0 = streams.now_ns(0)
        planned = 0
        for turns in convs:
            take = turns[:num - planned]
            if not take:
                break
            plan.append((planned, take))
            planned += len(take)
    shared = iter(convs)
    sent = [0]

    def next_conversation(mine) -> tuple[int | None, list[Prompt]] | None:
        if mine is not None:
            return next(mine, None)
        if sent[0] >= num:
            return None
        turns = next(shared, None)
        return None if turns is None else (None, turns)

    async def user(s: int) -> None:
        mine = iter(plan[s::workers]) if streams.vt else None
        while (conversation := next_conversation(mine)) is not None:
            first, turns = conversation
            history: list[tuple[str, str]] = []
            tokens_before = 0  # the history's tokens as the server counted them
            answered_ns = 0  # when the previous turn's answer ended
            for i, turn in enumerate(turns):
                if first is None and sent[0] >= num:
                    return
                if i and turn.think_s > 0:
                    await streams.pause(s, turn.think_s, answered_ns, time_scale)
                if first is None:
                    index = sent[0]
                    sent[0] += 1
                else:
                    index = first + i
                prompt = dataclasses.replace(turn, history=tuple(history), input_len=tokens_before + turn.input_len)
                rec = sess.new_record(index, prompt, False)
                rec.scheduled_perf_ns = streams.now_ns(s)
                rec.scheduled_offset_ns = rec.scheduled_perf_ns - t0
                await streams.send(s, rec, prompt, parsed=True)
                out.append(rec)
                if rec.status != "ok":
                    break
                answered_ns = rec.end_perf_ns or time.perf_counter_ns()
                history.append((turn.text or "", rec.text))
                tokens_before = (rec.input_tokens or prompt.input_len) + (rec.output_tokens or 0)

    async def closing(s: int) -> None:
        try:
            await user(s)
        finally:
            await streams.close(s)

    await asyncio.gather(*(closing(s) for s in range(workers)))
    return out, t0


def _shortened(prompt: Prompt, k: int, of: int) -> Prompt:
    """``prompt`` asking for ``ceil(output_len x k / of)`` tokens (at least 1): warm-up request k of a steady wave."""
    return dataclasses.replace(prompt, output_len=max(1, -(-prompt.output_len * k // of)))


async def _steady_loop(sess: _Session, wave: list[tuple[int, Prompt]], items: list[tuple[int, Prompt]],
                       tail: list[tuple[int, Prompt]], workers: int
                       ) -> tuple[list[RequestRecord], list[RequestRecord], list[RequestRecord], int, int | None]:
    """A closed loop of ``workers`` workers started at once; the ``wave`` items go first (one per worker), as
    warm-up, then ``items`` are measured, then free workers send ``tail`` items (in turn, again from the first when
    they run out, each with a new request index) until the last measured request has ended, when the tail requests
    still in flight are cancelled; a worker whose tail request fails sends no more. Returns (measured records,
    warm-up records, tail records, window start, window end): the window starts when the first measured request is
    scheduled and ends when the last one ends (None when nothing was measured)."""
    out: list[RequestRecord] = []
    warm: list[RequestRecord] = []
    tails: list[RequestRecord] = []
    queue = iter([(i, p, "warm") for i, p in wave] + [(i, p, "measured") for i, p in items])
    start: list[int] = []
    left = len(items)
    finished = asyncio.Event()
    if not items:
        finished.set()
    in_tail: set[int] = set()
    next_tail = [0]
    top = max([i for i, _ in wave + items + tail], default=-1) + 1  # tail request j beyond the first round: top + j

    def tail_item() -> tuple[int, Prompt]:
        j = next_tail[0]
        next_tail[0] += 1
        index, prompt = tail[j % len(tail)]
        return (index if j < len(tail) else top + j), prompt

    k = min(workers, len(wave) + len(items))
    streams = _Streams(sess)
    await streams.open(k, measured=len(items))

    async def worker(s: int) -> None:
        try:
            await work(s)
        finally:
            await streams.close(s)

    async def work(s: int) -> None:
        nonlocal left
        while True:
            nxt = next(queue, None)
            if nxt is None:
                if finished.is_set() or not tail:
                    return
                index, prompt = tail_item()
                kind = "tail"
            else:
                index, prompt, kind = nxt
            rec = sess.new_record(index, prompt, kind != "measured")
            rec.scheduled_perf_ns = streams.now_ns(s)
            if kind == "measured" and (not start or rec.scheduled_perf_ns < start[0]):
                start[:] = [rec.scheduled_perf_ns]
            if kind == "tail":
                in_tail.add(index)
            await streams.send(s, rec, prompt, role=None if kind == "warm" else kind)
            in_tail.discard(index)
            {"warm": warm, "measured": out, "tail": tails}[kind].append(rec)
            if kind == "tail" and rec.status != "ok":
                return  # a tail request cancelled at the end
            if kind == "measured":
                left -= 1
                if left == 0:
                    finished.set()
                    # on the virtual clock the twin cuts them at the window's end itself: which of their events had
                    # arrived when this worker saw the end would depend on the host
                    for i in [] if streams.vt else list(in_tail):
                        sess.cancel(i, "client_error", TAIL_CANCELLED)

    await asyncio.gather(*(worker(s) for s in range(k)))
    t0 = start[0] if start else time.perf_counter_ns()
    for rec in out:  # every record was stamped when its worker took it
        rec.scheduled_offset_ns = None if rec.scheduled_perf_ns is None else rec.scheduled_perf_ns - t0
    t1 = max((r.end_perf_ns for r in out if r.end_perf_ns is not None), default=None)
    if streams.vt and t1 is not None:  # a tail sent at the window's end or after (the twin cut it on arrival): a
        tails = [r for r in tails if r.send_perf_ns is None or r.send_perf_ns < t1]  # host's timing sent it
    return out, warm, tails, t0, t1


async def _open_loop(
    sess: _Session, items: list[tuple[int, Prompt]], offsets_ns: list[int], t0: int, max_concurrency: int | None = None
) -> list[RequestRecord]:
    tasks = []
    clock = time.perf_counter_ns
    slots = None if max_concurrency is None else asyncio.Semaphore(max_concurrency)
    for (index, prompt), offset in zip(items, offsets_ns):
        due = t0 + offset
        while (now := clock()) < due:  # absolute deadline; asyncio may wake a little early, so re-check
            await asyncio.sleep((due - now) / 1e9)
        rec = sess.new_record(index, prompt, False)
        rec.scheduled_perf_ns, rec.scheduled_offset_ns = due, offset
        send = sess.request(rec, prompt) if slots is None else _in_slot(sess, rec, prompt, slots)
        tasks.append(asyncio.ensure_future(send))
    return list(await asyncio.gather(*tasks))


async def _in_slot(sess: _Session, rec: RequestRecord, prompt: Prompt, slots: asyncio.Semaphore) -> RequestRecord:
    """Send once one of the ``max_concurrency`` slots is free (asyncio's semaphore wakes waiters in arrival order)."""
    start = time.perf_counter_ns()
    async with slots:
        rec.slot_wait_ns = time.perf_counter_ns() - start
        return await sess.request(rec, prompt)


def run_load_point_sync(
    target: Target,
    point: LoadPoint,
    prompts: list[Prompt],
    *,
    read_timeout_s: float = 600.0,
    stall_timeout_s: float | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> LoadPointResult:
    """Run ``run_load_point`` on a fresh event loop (for callers without one): uvloop's when it is importable (less
    CPU per streamed token), else asyncio's default loop.

    The main task returns ``None`` and the result travels in a list: on CPython 3.11, ``asyncio.Runner.run`` ends
    with ``signal.getsignal(SIGINT)``, which formats its handler (a partial holding the main task) into an error
    message it then discards, i.e. ``repr`` of the task and of its result. With the load point's records as the
    result that is a ``repr`` of every request (about 3 % of the client's CPU at 256 streams, measured with py-spy).
    """
    box: list[LoadPointResult] = []

    async def main() -> None:
        box.append(await run_load_point(target, point, prompts, read_timeout_s=read_timeout_s,
                                        stall_timeout_s=stall_timeout_s, on_request_done=on_request_done))

    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
    return box[0]
