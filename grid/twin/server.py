"""The twin's server process: readiness phases, logs and the scheduler loop, driven by the performance model.

The HTTP routes are in grid/twin/api.py (a mixin of :class:`Twin`); fault effects in grid/twin/faults.py.

One asyncio loop, one aiohttp application. Lifecycle
(docs/sources.md#sglang-log-formats-readiness-phases-failure-modes):

1. *loading*: the port is not bound (connection refused) while the modelled startup phases
   (``PerfModel.startup_phases_s()``, divided by time_scale) elapse; their log lines are printed as each phase begins
   and ends. Startup failures (``startup_crash``/``startup_oom``/``startup_hang``) fire here at their ``at_s``.
2. *bound, warming up*: uvicorn's lines; ``/health`` and ``/health_generate`` answer 503 while the warm-up request
   (``"The capital city of France is"``, 8 tokens) runs through the scheduler.
3. *ready*: ``The server is fired up and ready to roll!``; health answers 200.

The scheduler is driven by one task (:meth:`Twin._sched_loop`). On the virtual clock (the default,
``GRID_TWIN_CLOCK=virtual``) it moves the modelled clock only with its own steps, up to where no stream of the load
generator can still send earlier (grid/loadgen/vclock.py), and every chunk carries its modelled emission time: a point's
numbers depend on the configuration, load and seed, not on the host. On the wall clock (``real``) it waits for each
step's absolute deadline ``t0 + (t + step.duration_s) / time_scale`` on ``perf_counter`` and delivers the step's
tokens then; the modelled clock never runs behind real time (after idling, or when the CPU falls behind, it resyncs
to ``elapsed_real x time_scale``), so a busy host moves its numbers. Delivery is coalescing: each request has a token
counter and an ``asyncio.Event``; its HTTP handler wakes, sends one chunk with everything produced since its last
chunk, and sleeps again. All reported times (``e2e_latency``, metrics, log timestamps, throughputs) are modelled
seconds.

Health: ``/health`` answers 200 as soon as the server is up (SGLang with
``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false``); ``/health_generate`` sends a 1-token request through the scheduler
and answers 503 when nothing comes back within 20 modelled seconds (``SGLANG_HEALTH_CHECK_TIMEOUT``).

Faults: every failure mode from ``find_failures`` and every injected fault of ``GRID_TWIN_FAULTS`` (a JSON list of
``{"kind": ..., params}``) becomes a :class:`grid.twin.faults.Fault` from the registry
``grid.twin.faults.FAULT_KINDS``; see each class there.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import signal
import sys
import time
import math
import uuid

from grid.loadgen import vclock as vproto
from typing import Any, Literal, get_args

from aiohttp import web

from grid.releases.features import holds
from grid.twin import cli, logs, textgen
from grid.twin.api import BadRequest, TwinAPI, _AccessLogger
from grid.twin.faults import Fault, NanOutput, RepeatToken, faults_from_failures, parse_faults
from grid.twin.metrics import TwinMetrics
from grid.twin.speculative import acceptance as speculative_acceptance
from grid.twin.vclock import VCLOCK_TAG, Deadlines, VClock, limit_of

ENV_HARDWARE = "GRID_TWIN_HARDWARE"
ENV_VERSION = "GRID_TWIN_VERSION"
ENV_TIME_SCALE = "GRID_TWIN_TIME_SCALE"
ENV_STARTUP_TIME_SCALE = "GRID_TWIN_STARTUP_TIME_SCALE"
ENV_FAULTS = "GRID_TWIN_FAULTS"
ENV_CLOCK = vproto.ENV_CLOCK
#: The deployment the twin serves as its router's endpoint (JSON: ``Deployment.identity()`` plus ``settings``, the
#: configuration's settings in grid's names); unset: the twin is one server
ENV_DEPLOYMENT = "GRID_TWIN_DEPLOYMENT"
#: Real clock: the longest modelled span a deployment's scheduler advances in one go, so that a request arriving in
#: the meantime reaches an idle server within it (one server's batch is never cut)
REAL_CLOCK_SPAN_S = 0.005
#: Real seconds the virtual clock waits for a stream that may still send before it gives up on the point's streams
#: (a client that went away without saying so); the load generator's own timeouts are the first backstop.
VCLOCK_STALL_S = 120.0
#: Steps the scheduler runs on the virtual clock before it lets the HTTP handlers run (it also stops at the horizon,
#: when a request's end lets its stream send again). Each handler then writes every event of those steps in one go:
#: the events carry their own modelled times, so batching changes no number, only the real CPU (one socket write
#: per batch instead of per token: with orjson chunks, 2.3x fewer real seconds for a 64-stream GLM-5 point,
#: experiments/vclock_cost.py, docs/twin.md "The virtual clock").
VCLOCK_YIELD_STEPS = 64
#: Modelled seconds between two snapshots of the twin's /metrics and telemetry on the virtual clock, taken as its clock
#: passes each multiple of this from a point's start (besides one at its start and one at its end, SNAPSHOT_KINDS):
#: what grid's samplers read for the point (GET
#: /grid/vclock/samples) instead of polling in real time, which a host's speed would move. 20 s, the density the
#: samplers' one poll per real second gave the wall-clock twin at its usual time scale of 20: a 64-stream GLM-5 point
#: (~170 modelled s) gets 8, a one-stream one (~2,300 s) 115. Each snapshot's /metrics (12 KB for Llama-3.1-8B) is
#: rendered by the twin and parsed by the client (3.4 ms measured here); the main job took 86 s with them and 90 s
#: without, one after the other on one 2-core host: no cost above its noise.
VCLOCK_SAMPLE_S = 20.0
#: Why a virtual-clock snapshot was taken: a point's start (its streams not yet sending: the baseline of the
#: telemetry's busy time), every VCLOCK_SAMPLE_S after it, the end of a steady-state point's measured window (before
#: its tail requests are cut), or the end of a point without one (its last stream done). A point of any length gets a
#: start and an end, as the wall-clock samplers poll once at start and once at stop.
SnapshotKind = Literal["start", "tick", "window_end", "end"]
SNAPSHOT_KINDS: tuple[SnapshotKind, ...] = get_args(SnapshotKind)
#: Snapshots kept (the oldest go first): a few points' worth; grid reads a point's when the point ends.
VCLOCK_SAMPLES_MAX = 4096
#: Connections the listening socket queues before they are accepted: SGLang serves HTTP with uvicorn, whose
#: ``--backlog`` defaults to 2048 (uvicorn ``config.py``); aiohttp's own default, 128, resets connections that an open
#: loop on the virtual clock opens all at once while the twin simulates
LISTEN_BACKLOG = 2048
WARMUP_TEXT = "The capital city of France is"
OOM_LINES = (
    "Scheduler hit an exception: Traceback (most recent call last):",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "{total:.2f} GiB of which 1.06 GiB is free.",
    "Received sigquit from a child process. It usually means the child failed.",
)


# --- prefix cache ------------------------------------------------------------------------------------------------------
#: SGLang's host-memory tier for the radix cache (``--enable-hierarchical-cache``): ``--hicache-ratio`` times the
#: device pool unless ``--hicache-size`` (GB) is given; 2.0 is the option's default in 0.5.9-0.5.17 (the release
#: catalogs); 0.5.18+ leave it None and resolve it to 2.0 at start-up (0.5.23 ``arg_groups/hicache_hook.py``
#: ``_handle_hicache_ratio_default``; 1.2 in its ``buffer_only`` host-memory mode).
HICACHE_RATIO_DEFAULT = 2.0


class PrefixCache:
    """The radix cache of a running twin (:class:`grid.twin.radix.RadixCache` over the prompt's pieces): a prompt's
    longest cached prefix is matched on arrival and held while the request runs; prompt and output are cached when it
    finishes (SGLang ``cache_finished_req``: the output less its last token), and the tree is cut back to the pool
    less what running requests hold beyond their cached prefixes. ``host_tokens`` (hierarchical cache) adds a host-memory tier: evicted prefixes stay
    findable there (loading them back is not modelled). Disabled (``--disable-radix-cache``): nothing is found."""

    def __init__(self, capacity_tokens: int, enabled: bool, host_tokens: int = 0) -> None:
        from grid.twin.radix import RadixCache

        self.enabled = enabled
        self.device_tokens = capacity_tokens
        self.tree = RadixCache(capacity_tokens + host_tokens)

    def match(self, pieces: list) -> int:
        """How many leading pieces of ``pieces`` are cached; they are held until :meth:`release`."""
        if not self.enabled:
            return 0
        hit = self.tree.match(pieces)
        self.tree.lock(pieces[:hit])
        return hit

    def release(self, pieces: list, held: int, output: list | None, running_tokens: int) -> None:
        """A request ended: unlock the ``held`` pieces :meth:`match` found, cache ``pieces + output`` (None: aborted,
        nothing cached) and cut the tree to what the pool leaves beside ``running_tokens`` (KV that running requests
        hold outside the tree)."""
        if not self.enabled:
            return
        if held:
            self.tree.lock(pieces[:held], -1)
        if output is not None:
            self.tree.insert(list(pieces) + list(output))
        self.tree.evict(self.tree.size - max(0, self.tree.capacity - running_tokens))

    def flush(self) -> None:
        self.tree.flush()


# --- requests ----------------------------------------------------------------------------------------------------------
class Req:
    __slots__ = ("rid", "comp", "prompt_tokens", "max_new", "cached", "n_out", "finished", "reason", "event",
                 "t_arrive", "t_first", "t_last", "internal", "pieces", "held", "stream", "steps", "limit", "timeout", "role")

    def __init__(self, rid: str, comp: textgen.Completion, prompt_tokens: int, max_new: int, cached: int,
                 t_arrive: float, internal: bool = False) -> None:
        self.rid = rid
        self.comp = comp
        self.prompt_tokens = prompt_tokens
        self.max_new = max_new
        self.cached = cached
        self.n_out = 0
        self.finished = False
        self.reason: str | None = None
        self.event = asyncio.Event()
        self.t_arrive = t_arrive
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.internal = internal
        self.pieces: list = []  # the prompt's pieces, the radix cache's key (PrefixCache)
        self.held = 0  # leading pieces found cached and held while it runs
        self.stream: int | None = None  # virtual clock: the load point's stream that sent it
        # virtual clock, requests with grid's headers: (modelled time, tokens so far, finished) per step that moved it;
        # the handlers write one event per entry, stamped with its time
        self.steps: list[tuple[float, int, bool]] | None = None
        # virtual clock: the client's timeout that fires first (error class, modelled s; vclock.limit_of), and once
        # the twin played it, (error class, modelled time it fired)
        self.limit: tuple[str, float] | None = None
        self.timeout: tuple[str, float] | None = None
        self.role: str | None = None  # virtual clock: "measured" or "tail" in a steady-state point (vclock.Tag.role)


class Twin(TwinAPI):
    def __init__(self, args, *, model, hardware, perf, faults: list[Fault], time_scale: float, notes: list[str],
                 startup_time_scale: float | None = None, clock: str = "real", scheduler=None):
        """``scheduler``: a deployment's (grid/twin/deployment.py ``DeploymentScheduler``): the twin then serves
        as that deployment's router, ``perf`` the server of it that takes longest to start; None: one server,
        ``Scheduler(perf)``."""
        from grid.twin.scheduler import Scheduler

        self.args = args
        self.version = args._version
        self.ver = cli.parse_version(self.version)
        self.model = model
        self.hw = hardware
        self.perf = perf
        self.faults = faults
        # The modelled clock is piecewise linear: until ready it runs at startup_time_scale, then at time_scale.
        self.serve_scale = float(time_scale)
        self.startup_scale = float(startup_time_scale or time_scale)
        self.scale = self.startup_scale
        self.m_base = 0.0
        self.notes = notes
        if clock not in vproto.CLOCKS:
            raise ValueError(f"{ENV_CLOCK} must be one of {vproto.CLOCKS}, got {clock!r}")
        # virtual clock (grid/twin/vclock.py): modelled time moves only with the scheduler's steps and the start-up
        # phases, which then take no real time (self.virtual). A start-up with a fault's own timeline (a crash, a
        # hang, a late bind or ready) runs on the scaled wall clock until ready, as with clock=real.
        self.clock = clock
        self.virtual = clock == "virtual" and not any(
            f.startup_event() is not None or f.bind_at_s is not None or f.ready_at_s is not None for f in faults)
        self.vclock = VClock()
        # virtual clock: when the clients of requests in flight would give up
        self.deadlines = Deadlines(done=lambda req: req.finished)
        self.skipped_s = 0.0  # virtual clock: modelled seconds skipped to align each point's start (VClock.begin)
        # virtual clock: (modelled s, kind, /metrics text or None, telemetry) of each point's snapshots
        self.vsamples: collections.deque[tuple[float, SnapshotKind, str | None, dict]] = collections.deque(
            maxlen=VCLOCK_SAMPLES_MAX)
        # the running point's next tick (modelled s); inf when no point is open (none began, or its end snapshot
        # was taken)
        self._next_sample = math.inf
        self.t0 = time.perf_counter()
        self.unix0 = time.time()
        ep = args.ep_size
        self.log = logs.LogWriter(self.model_unix, level=args.log_level, sched_prefix=logs.rank_prefix(
            tp_size=args.tp_size, ep_size=ep, dp_attention=cli.dp_attention_on(args), pp_size=args.pp_size))
        self.sched = scheduler if scheduler is not None else Scheduler(perf)
        self.deployment = scheduler is not None
        self.capacity = int(getattr(perf, "kv_capacity_tokens", 0) or 0)
        self.context_len = int(getattr(perf, "context_length", 0) or model.context_length)
        # a deployment's servers each keep their own radix cache, which the twin does not model yet: none is found
        self.cache = PrefixCache(self.capacity or 1 << 20, not args.disable_radix_cache and not self.deployment,
                                 self._host_cache_tokens())
        disaggregated = bool(getattr(scheduler, "pd", False))
        self.metrics = TwinMetrics(args.served_model_name, disaggregated) if args.enable_metrics else None
        if self.metrics is not None and self.metrics.kv_transfer_ms is not None:
            observe = self.metrics.kv_transfer_ms.observe
            scheduler.on_transfer = lambda rid, seconds: observe(seconds * 1e3)
        if self.metrics:
            self.metrics.max_total_num_tokens.set(self.capacity)
        self.reqs: dict[str, Req] = {}
        self.wake = asyncio.Event()
        self.stop = asyncio.Event()
        self.bound = False
        self.ready = False
        self.ready_at = 0.0
        # modelled seconds from start to ready by the model alone (startup phases, warm-up request, a fault's ready
        # time), without the host's latency that ready_at, read off the clock, carries x startup_time_scale
        self.startup_s: float | None = None
        self._bind_at = 0.0
        self.never_ready = False
        self.sched_dead = False
        self.decode_s = 0.0
        self.first_decode_at: float | None = None
        self.busy_s = 0.0
        self.last_gen_throughput = 0.0
        self.last_output_real = 0.0
        self.mclock = 0.0
        self.runner: web.AppRunner | None = None
        self.site: web.TCPSite | None = None
        self.loop_task: asyncio.Task | None = None
        self.exit_code = 0
        self.served = 0  # generation requests finished (not aborted) since ready; internal ones not counted
        self.generation_requests: dict = {}  # id -> generation request (aiohttp) being handled now
        self._seq = 0
        self._prefill_last_t = 0.0
        self._prefill_prev_tokens = 0
        self._decode_steps = 0
        self._decode_tokens = 0
        self._decode_last_t = 0.0
        self._runtime_faults = [f for f in faults if type(f).runtime_due is not Fault.runtime_due]
        self._garble_faults = [f for f in faults if type(f).garbage is not Fault.garbage]
        self._faults_diverging = [f for f in faults if type(f).diverge_at is not Fault.diverge_at]
        self._nan_lines = next((f.log_lines or (logs.NAN_LINE,) for f in faults
                                if isinstance(f, NanOutput) and not isinstance(f, RepeatToken)), ())
        self._nan_warned = False
        self.reasoning_model = bool(args.reasoning_parser)
        self.eos_id = max(2, model.vocab_size - 1)

    # clocks
    def mnow(self) -> float:
        if self.virtual:
            return self.mclock
        return self.m_base + (time.perf_counter() - self.t0) * self.scale

    def real_at(self, m: float) -> float:
        """The perf_counter time at which modelled time ``m`` falls (in the current clock segment)."""
        return self.t0 + (m - self.m_base) / self.scale

    def set_scale(self, scale: float) -> None:
        """Continue the modelled clock from now at another speed."""
        now_real = time.perf_counter()
        self.m_base = self.m_base + (now_real - self.t0) * self.scale
        self.t0, self.scale = now_real, float(scale)

    def model_unix(self) -> float:
        return self.unix0 + self.mnow()

    async def sleep_until(self, m: float) -> bool:
        """Sleep until modelled time ``m``; False if a stop was requested meanwhile. On the virtual clock the clock
        jumps to ``m`` at once."""
        if self.virtual:
            self.mclock = max(self.mclock, m)
            await asyncio.sleep(0)
            return not self.stop.is_set()
        delay = self.real_at(m) - time.perf_counter()
        if delay > 0:
            try:
                await asyncio.wait_for(self.stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
        return not self.stop.is_set()

    def log_error_lines(self, lines) -> None:
        """Write error lines as SGLang does: exception lines raw, the rest as scheduler errors."""
        for line in lines:
            line = line.format(total=self.hw.memory_gb * 1e9 / 2**30) if "{total" in line else line
            if line.startswith(("[", " ", "\t", "Traceback")) or re.match(r"^[\w.]+(Error|Exception)\b", line):
                self.log.raw(line)
            else:
                self.log.sched(line, level="error")

    def crash(self, lines, code: int) -> None:
        self.log_error_lines(lines)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    # --- startup ------------------------------------------------------------------------------------------------------
    def _mem(self) -> dict[str, float]:
        """GPU memory numbers for the log lines, from the perf model. SGLang prints GiB and calls them "GB"; the perf
        model's ``*_gb_per_gpu`` are 1e9 bytes."""
        p = self.perf
        gib = 2**30 / 1e9
        total = float(getattr(p, "gpu_mem_gib", 0.0) or self.hw.memory_gb / gib)
        w = float(getattr(p, "weight_gb_per_gpu", 0.0) or 0.0) / gib
        kv = float(getattr(p, "kv_gb_per_gpu", 0.0) or 0.0) / gib
        g = float(getattr(p, "graph_gb_per_gpu", 0.0) or 0.0) / gib
        avail0 = total - 0.5
        after_w = avail0 - w
        after_kv = getattr(p, "avail_gb_after_kv", None)
        after_kv = float(after_kv) / gib if after_kv is not None else after_w - kv
        after_g = getattr(p, "avail_gb_after_init", None)
        after_g = float(after_g) / gib if after_g is not None else after_kv - g
        return {"total": total, "avail0": avail0, "w": w, "after_w": after_w, "kv": kv, "after_kv": after_kv,
                "g": g, "after_g": max(0.0, after_g)}

    def server_args_repr(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in self.resolved_args().items())
        return f"server_args=ServerArgs({items})"

    def resolved_args(self) -> dict[str, Any]:
        d = cli.public_args(self.args)
        p = self.perf
        for k in ("mem_fraction_static", "chunked_prefill_size", "max_running_requests", "kv_cache_dtype",
                  "dsa_prefill_backend", "dsa_decode_backend", "page_size"):
            v = getattr(p, k, None)
            if v is not None:
                d[k] = v
        d["cuda_graph_max_bs"] = getattr(p, "cuda_graph_max_bs", d["cuda_graph_max_bs"])
        d["context_length"] = self.context_len
        d["enable_dp_attention"] = cli.dp_attention_on(self.args)
        if d.get("api_key"):
            d["api_key"] = "***"
        return d

    def _phase_lines(self, kind: str, begin: bool, dur: float) -> list[str]:
        m = self._mem()
        v = self.version
        p = self.perf
        if kind == "dist":
            return ["Init torch distributed begin."] if begin else [
                f"Init torch distributed ends. elapsed={dur:.2f} s, mem usage=0.57 GB"]
        if kind == "weights":
            return [f"Load weight begin. avail mem={m['avail0']:.2f} GB"] if begin else [
                logs.load_weight_end_line(v, elapsed=dur, arch=self.model.architecture, avail=m["after_w"],
                                          usage=m["w"])]
        if kind == "kv":
            if begin:
                return []
            return [logs.kv_cache_line(v, tokens=self.capacity, kv_gb=m["kv"], mla=self.model.attention == "mla",
                                       kv_cache_dtype=str(getattr(p, "kv_cache_dtype", "auto"))),
                    f"Memory pool end. avail mem={m['after_kv']:.2f} GB"]
        if kind == "graph":
            bs = list(getattr(p, "cuda_graph_batch_sizes", []) or [])
            if not getattr(p, "cuda_graph_max_bs", 0):
                return []
            if begin:
                return logs.graph_begin_lines(v, avail=m["after_kv"], bs=bs)
            return [logs.graph_end_line(v, elapsed=dur, usage=m["g"], avail=m["after_g"], bs=bs)]
        return []

    @staticmethod
    def _phase_kind(name: str) -> str | None:
        n = name.lower()
        if "warm" in n:
            return "warmup"
        if "weight" in n or "load" in n:
            return "weights"
        if "kv" in n or "memory" in n or "pool" in n or "profile" in n:
            return "kv"
        if "graph" in n or "capture" in n or "compile" in n:
            return "graph"
        if "dist" in n or "init" in n or "nccl" in n:
            return "dist"
        return None

    def capacity_line(self) -> str:
        p = self.perf
        return logs.capacity_line(
            max_total_num_tokens=self.capacity, chunked_prefill_size=int(getattr(p, "chunked_prefill_size", -1) or -1),
            max_prefill_tokens=self.args.max_prefill_tokens,
            max_running_requests=int(getattr(p, "max_running_requests", 0) or 0), context_len=self.context_len,
            available_gpu_mem=self._mem()["after_g"])

    def startup_plan(self) -> tuple[list[tuple[float, int, Any]], float, float]:
        """Events ``(t, order, action)`` before binding, the bind time and the post-bind (warm-up) phase time."""
        phases = list(self.perf.startup_phases_s().items())
        events: list[tuple[float, int, Any]] = []
        t = 0.0
        post = 0.0
        seen: set[str] = set()
        order = 0
        for name, dur in phases:
            dur = float(dur)
            kind = self._phase_kind(name)
            if kind == "warmup":
                post += dur
                continue
            if kind and kind in seen:
                kind = None
            if kind:
                seen.add(kind)
                events.append((t, order, ("lines", self._phase_lines(kind, True, dur))))
                order += 1
            t += dur
            if kind:
                events.append((t, order, ("lines", self._phase_lines(kind, False, dur))))
                order += 1
        missing = [k for k in ("weights", "kv", "graph") if k not in seen]
        tail = [line for k in missing for line in self._phase_lines(k, True, 0.0) + self._phase_lines(k, False, 0.0)]
        events.append((t, order, ("lines", tail + [self.capacity_line()])))
        bind_at = t
        for f in self.faults:
            if f.bind_at_s is not None:
                bind_at = f.bind_at_s
        for f in self.faults:
            ev = f.startup_event()
            if ev is not None:
                events.append((ev[0], 10_000, (ev[1], f)))
        events.sort(key=lambda e: (e[0], e[1]))
        return events, bind_at, post

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        for note in self.args._deprecations:
            self.log.info(note, level="warning")
        for note in self.notes:
            self.log.info(note)
        self.log.info(self.server_args_repr())
        if self.model.dsa is not None:
            word = "DSA" if holds("dsa_named", self.ver) else "NSA"
            kv = getattr(self.perf, "kv_cache_dtype", "auto")
            self.log.info(f"Set {word} backends for {kv} KV Cache: prefill={getattr(self.perf, 'dsa_prefill_backend', None)}, "
                          f"decode={getattr(self.perf, 'dsa_decode_backend', None)}.")
        events, bind_at, post = self.startup_plan()
        self._bind_at = bind_at
        bound_task = None
        hang = False
        for t, _, action in events:
            if t > bind_at and bound_task is None and not hang:
                if not await self.sleep_until(bind_at):
                    return await self.shutdown()
                await self.bind()
                bound_task = asyncio.create_task(self._warmup(post))
            if action[0] in ("crash", "hang") and bound_task is not None:
                asyncio.create_task(self._late_event(t, action))
                continue
            if hang:
                continue
            if not await self.sleep_until(t):
                return await self.shutdown()
            if action[0] == "lines":
                for line in action[1]:
                    self.log.sched(line)
            elif action[0] == "crash":
                f = action[1]
                self.crash(f.log_lines or OOM_LINES, f.exit_code)
            elif action[0] == "hang":
                hang = True
        if bound_task is None and not hang:
            if not await self.sleep_until(bind_at):
                return await self.shutdown()
            await self.bind()
            bound_task = asyncio.create_task(self._warmup(post))
        await self.stop.wait()
        return await self.shutdown()

    async def _late_event(self, t: float, action) -> None:
        if not await self.sleep_until(t):
            return
        if action[0] == "crash":
            self.crash(action[1].log_lines or OOM_LINES, action[1].exit_code)
        elif not self.ready:
            self.never_ready = True

    async def bind(self) -> None:
        app = self.make_app()
        _AccessLogger.twin = self
        self.runner = web.AppRunner(app, access_log_class=_AccessLogger, handler_cancellation=True,
                                    shutdown_timeout=0.5)
        await self.runner.setup()
        host, port = self.args.host, self.args.port
        self.site = web.TCPSite(self.runner, host, port, shutdown_timeout=0.5, backlog=LISTEN_BACKLOG)
        try:
            await self.site.start()
        except OSError as e:
            self.log.info(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address ('{host}', {port}): "
                          f"{(e.strerror or str(e)).lower()}", level="error")
            self.crash((), 1)
        self.bound = True
        pid = os.getpid()
        for msg in (f"Started server process [{pid}]", "Waiting for application startup.",
                    "Application startup complete.", f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"):
            self.log.info(logs.uvicorn(msg))
        self.mclock = max(self.mclock, self.mnow())
        self.loop_task = asyncio.create_task(self._sched_loop())

    async def _warmup(self, post_s: float) -> None:
        start = self.mnow()
        if post_s > 0 and not await self.sleep_until(start + post_s):
            return
        warmup_s = 0.0
        if not self.args.skip_server_warmup:
            self.log.access(logs.access_line("127.0.0.1:0", "GET", "/model_info", 200, "OK"))
            comp = textgen.make_completion(WARMUP_TEXT, max_new_tokens=8, ignore_eos=False, temperature=0.0,
                                           rid="warmup")
            req = self.submit(comp, prompt=WARMUP_TEXT, max_new=8, internal=True)
            while not req.finished:
                await req.event.wait()
                req.event.clear()
            warmup_s = (req.t_last or req.t_arrive) - req.t_arrive
            self.log.access(logs.access_line("127.0.0.1:0", "POST", "/generate", 200, "OK"))
        ready_at = max([f.ready_at_s for f in self.faults if f.ready_at_s is not None], default=0.0)
        if ready_at and not await self.sleep_until(ready_at):
            return
        if self.never_ready:
            return
        self.set_scale(self.serve_scale)
        if self.clock == "virtual":  # from here on modelled time moves with the scheduler's steps only
            self.mclock = max(self.mclock, self.mnow())
            self.virtual = True
            self.wake.set()
        self.ready = True
        self.ready_at = self.mnow()
        self.startup_s = max(self._bind_at + post_s + warmup_s, ready_at)
        self.busy_s = 0.0
        self.log.info(logs.READY_LINE)

    # --- shutdown -------------------------------------------------------------------------------------------------------
    def _on_signal(self, sig: int) -> None:
        if self.stop.is_set():
            return
        self.log.info(f"SIGTERM received. signum={int(sig)} frame=None. Draining requests and shutting down...",
                      level="warning")
        self.stop.set()

    async def shutdown(self) -> int:
        self.stop.set()
        if self.loop_task:
            self.loop_task.cancel()
        if self.runner is not None:
            self.log.info(logs.uvicorn("Shutting down"))
            self.log.info(logs.uvicorn("Waiting for application shutdown."))
            try:
                await asyncio.wait_for(self.runner.cleanup(), 2.0)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
            self.log.info(logs.uvicorn("Application shutdown complete."))
            self.log.info(logs.uvicorn(f"Finished server process [{os.getpid()}]"))
        return self.exit_code

    # --- requests -------------------------------------------------------------------------------------------------------
    def _host_cache_tokens(self) -> int:
        """Tokens of the hierarchical cache's host tier (0 without ``--enable-hierarchical-cache``): ``--hicache-size``
        GB per rank at the model's KV bytes per token when given, else ``--hicache-ratio`` (default
        :data:`HICACHE_RATIO_DEFAULT`) times the device pool."""
        if not getattr(self.args, "enable_hierarchical_cache", False) or not self.capacity:
            return 0
        size_gb = getattr(self.args, "hicache_size", 0) or 0
        cell = getattr(self.perf, "kv_cell_bytes", 0)  # KV bytes per token per GPU (the host pool is per rank)
        if size_gb > 0 and cell > 0:
            return int(size_gb * 1e9 / cell)
        ratio = getattr(self.args, "hicache_ratio", None) or HICACHE_RATIO_DEFAULT
        return int(self.capacity * ratio)

    def garbage(self) -> str | None:
        since = self.mnow() - self.first_decode_at if self.first_decode_at is not None else 0.0
        for f in self._garble_faults:
            g = f.garbage(since)
            if g is not None:
                return g
        return None

    def diverge_at(self, prompt: str) -> int | None:
        """The token from which the completion of ``prompt`` differs from the healthy stream (a planted fault), or
        None."""
        return min((d for f in self._faults_diverging if (d := f.diverge_at(self, prompt)) is not None), default=None)

    def new_rid(self) -> str:
        return uuid.uuid4().hex

    def validate(self, prompt_tokens: int, max_new: int) -> None:
        L = self.context_len
        if prompt_tokens >= L:
            raise BadRequest(f"The input ({prompt_tokens} tokens) is longer than the model's context length ({L} tokens).")
        if prompt_tokens + max_new >= L:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {L} tokens. You requested a "
                f"total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the input messages and "
                f"{max_new} tokens for the completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit.")

    def submit(self, comp: textgen.Completion, *, prompt: str | list, max_new: int, prompt_tokens: int | None = None,
               priority: int = 0, rid: str | None = None, internal: bool = False) -> Req:
        from grid.twin.scheduler import TwinRequest

        pieces = prompt if isinstance(prompt, list) else textgen._PIECE_RE.findall(prompt)
        n_in = prompt_tokens if prompt_tokens is not None else len(pieces)
        n_in = max(1, n_in)
        held = self.cache.match(pieces)
        cached = min(held, max(0, n_in - 1))  # the last prompt token is always computed
        rid = rid or self.new_rid()
        if self.virtual:
            return self._vsubmit(comp, pieces, n_in, max_new, priority, rid, internal)
        now = self.mnow()
        req = Req(rid, comp, n_in, max_new, cached, now, internal)
        req.pieces, req.held = pieces, held
        self.reqs[rid] = req
        eos = comp.eos_after if comp.eos_after is not None and comp.eos_after < max_new else None
        treq = TwinRequest(rid=rid, input_tokens=n_in, max_new_tokens=max_new, eos_after=eos, priority=priority,
                           cached_tokens=cached)
        # The front end (HTTP, tokenization, first-token delivery; PerfModel.frontend_latency_s) delays the request's
        # arrival at the scheduler; grid's own health and warm-up requests skip it.
        frontend_s = 0.0 if internal else self.perf.frontend_latency_s(n_in)
        if frontend_s > 0:
            asyncio.get_running_loop().call_later(frontend_s / self.scale, self._enqueue, req, treq)
        else:
            self._enqueue(req, treq)
        return req

    def _vsubmit(self, comp: textgen.Completion, pieces: list, n_in: int, max_new: int, priority: int, rid: str,
                 internal: bool) -> Req:
        """Virtual clock: the request arrives at the scheduler at its send time (grid's headers, else now) plus the
        front-end latency; the prefix cache is matched when it arrives there (VClock's order, not the host's)."""
        tag = None if internal else VCLOCK_TAG.get()
        if tag is None:
            send = self.mclock
        elif self.vclock.running(tag.stream):
            send = tag.vt  # a stream of the running point: the horizon kept the clock from passing its send time
        else:
            send = max(tag.vt, self.mclock)  # a stream of no running point: it cannot arrive in the past
        req = Req(rid, comp, n_in, max_new, 0, send, internal)
        req.pieces = pieces
        if tag is not None:
            req.stream, req.steps, req.role = tag.stream, [], tag.role
            self.vclock.sent(tag.stream, tag.last)
            if tag.role == "tail" and self.vclock.window_end is not None:  # sent once the window had ended
                self.reqs[rid] = req
                self._cut(req, send)
                return req
            req.limit = limit_of(tag)
            if req.limit is not None:
                self.deadlines.push(send + req.limit[1], req)
        self.reqs[rid] = req
        frontend_s = 0.0 if internal else self.perf.frontend_latency_s(n_in)
        self.vclock.push(send + frontend_s, tag.seq if tag is not None else 1 << 62, (req, priority))
        self.wake.set()
        return req

    def _vrelease(self, at: float, req: Req, priority: int) -> None:
        from grid.twin.scheduler import TwinRequest

        if req.finished:  # aborted before it reached the scheduler
            return
        held = self.cache.match(req.pieces)
        req.held = held
        req.cached = min(held, max(0, req.prompt_tokens - 1))
        comp = req.comp
        eos = comp.eos_after if comp.eos_after is not None and comp.eos_after < req.max_new else None
        self.sched.add(TwinRequest(rid=req.rid, input_tokens=req.prompt_tokens, max_new_tokens=req.max_new,
                                   eos_after=eos, priority=priority, cached_tokens=req.cached), at)

    def vclock_begin(self, streams: int, measured: int | None = None) -> float:
        """A load point of ``streams`` streams begins (POST /grid/vclock/begin; ``measured``: a steady-state point's
        count of measured requests, whose last end cuts its tail requests): their first send time (modelled s)."""
        t0 = self.vclock.begin(streams, self.mclock, measured)
        self.skipped_s += t0 - self.mclock
        self.mclock = t0
        self._snapshot(t0, "start")
        self._next_sample = t0 + VCLOCK_SAMPLE_S
        self.wake.set()
        return t0

    def vclock_done(self, stream: int) -> None:
        self.vclock.done(stream)
        self._point_ended(self.mclock)
        self.wake.set()

    def _point_ended(self, t: float) -> None:
        """The end snapshot (at modelled ``t``, s) of a point without a measured window once its last stream is done:
        every request it sent has then ended."""
        if math.isfinite(self._next_sample) and not self.vclock.bounds:
            self._snapshot(t, "end")

    def _enqueue(self, req: Req, treq) -> None:
        if req.finished:  # aborted while in the front end
            return
        now = self.mnow()
        self.sched.add(treq, now)
        self.wake.set()

    def abort(self, req: Req) -> None:
        if req.finished:
            return
        try:
            self.sched.abort(req.rid)
        except Exception:  # noqa: BLE001 - the scheduler may already have dropped it
            pass
        self._finish(req, "abort")

    def _cut(self, req: Req, t: float) -> None:
        """End tail request ``req`` at modelled time ``t``, the window's end, as the wall-clock runner cancels it there
        (its KV freed, nothing cached); its response ends with the ``tail_cut`` line (grid/loadgen/vclock.py)."""
        from grid.loadgen.vclock import TAIL_CUT

        req.timeout = (TAIL_CUT, t)
        if req.steps is not None:  # an entry of its own: the tokens of the step that ended the window are written
            req.steps.append((t, req.n_out, True))  # first, then the cut line (a timeout's entry replaces them)
        try:
            self.sched.abort(req.rid)
        except Exception:  # noqa: BLE001 - not yet released to the scheduler
            pass
        self._finish(req, "abort", at=t)

    def _finish(self, req: Req, reason: str, at: float | None = None) -> None:
        """``req`` ends for ``reason`` (``at``: the modelled time it ended on the virtual clock, default now)."""
        if req.finished:
            return
        req.finished = True
        req.reason = reason
        req.t_last = req.t_last or self.mnow()
        if req.steps is not None:
            t = self.mclock if at is None else at
            if req.steps and req.steps[-1][0] == t and req.steps[-1][1] == req.n_out:
                req.steps[-1] = (t, req.n_out, True)
            else:
                req.steps.append((t, req.n_out, True))
            self.vclock.ended(req.stream, t)
        req.event.set()
        self.reqs.pop(req.rid, None)
        # SGLang caches the prompt and every generated token but the last, whose KV was never computed; 0.5.9 the
        # last one too (grid.releases.features "caches_last_output_token", measured on both)
        pieces = textgen._PIECE_RE.findall(req.comp.text(0, req.n_out))
        output = None if reason == "abort" else (pieces if holds("caches_last_output_token", self.ver)
                                                 else pieces[:-1])
        self.cache.release(req.pieces, req.held, output, self.sched.uncached_tokens())
        if not req.internal and self.ready and reason != "abort":
            self.served += 1
        if self.metrics and not req.internal:
            now = self.mnow()
            self.metrics.on_finish(prompt_tokens=req.prompt_tokens, completion_tokens=req.n_out,
                                   cached_tokens=req.cached,
                                   ttft_s=(req.t_first - req.t_arrive) if req.t_first is not None else None,
                                   e2e_s=now - req.t_arrive, queue_s=0.0, aborted=reason == "abort")
        if req.steps is not None:
            if req.role == "measured" and self.vclock.measured_ended(t):  # the window ends: cut its tail requests
                self._snapshot(t, "window_end")
                for other in [r for r in self.reqs.values() if r.role == "tail" and not r.finished]:
                    self._cut(other, t)
            else:
                self._point_ended(t)

    # --- the scheduler loop ---------------------------------------------------------------------------------------------
    async def _sched_loop(self) -> None:
        sched = self.sched
        perf_counter = time.perf_counter
        resume = True  # after an idle wait the modelled clock catches up with real time; while busy it never does
        while not self.stop.is_set():
            if self.sched_dead:
                await self.stop.wait()
                return
            if self.virtual:
                await self._vloop()
                return
            if not sched.has_work():
                self.wake.clear()
                if not sched.has_work():
                    await self.wake.wait()
                resume = True
                continue
            # Back-to-back steps follow each other in modelled time exactly (end of one = start of the next), so
            # the loop's own latency is never multiplied by the time scale; deliveries that run late do not drift.
            now = max(self.mclock, self.mnow()) if resume else self.mclock
            resume = False
            step = sched.step(now, now + REAL_CLOCK_SPAN_S)
            st = step.stats
            dur = float(st.duration_s)
            end = now + dur
            self.mclock = end
            delay = self.real_at(end) - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif st.kind == "idle" and dur <= 0:
                await asyncio.sleep(0.001)
            else:
                await asyncio.sleep(0)
            if self.stop.is_set():
                return
            self._apply(step, end, dur)

    def _apply(self, step, end: float, dur: float) -> None:
        st = step.stats
        kind = st.kind
        if kind != "idle" and self.ready:
            self.busy_s += dur
        if kind == "prefill":
            self._log_prefill(st, end)
        elif kind == "decode":
            self.decode_s += dur
            if self.first_decode_at is None:
                self.first_decode_at = end - dur
            self._decode_steps += 1
            self._decode_tokens += sum(step.emitted.values())
            interval = max(1, self.args.decode_log_interval)
            if self._decode_steps % interval == 0:
                self._log_decode(st, end)
        if self.metrics is not None and kind != "idle":
            self.metrics.on_step(running=st.running, queued=st.queued, used_tokens=st.used_tokens,
                                 token_usage=st.token_usage, cuda_graph=bool(st.cuda_graph))
        if step.emitted:
            self.last_output_real = time.perf_counter()
            reqs = self.reqs
            itl = self.metrics.itl if self.metrics is not None else None
            for rid, n in step.emitted.items():
                r = reqs.get(rid)
                if r is None or r.finished:
                    continue
                if r.t_first is None:
                    r.t_first = end
                elif itl is not None and n and r.t_last is not None:
                    gap = (end - r.t_last) / n
                    for _ in range(n):
                        itl.observe(gap)
                r.t_last = end
                r.n_out += n
                if r.steps is not None:
                    r.steps.append((end, r.n_out, False))
                r.event.set()
        for rid, reason in step.finished.items():
            r = self.reqs.get(rid)
            if r is not None:
                self._finish(r, reason)
        for f in self._runtime_faults:
            if f.runtime_due(self):
                f.fire_runtime(self)

    async def _vloop(self) -> None:
        """The scheduler on the virtual clock (after ready): arrivals are released in modelled-time order and steps
        run back to back without sleeping, but only from a time no stream can still send before
        (:meth:`VClock.horizon`) and no client can still give up before (:class:`Deadlines`); otherwise it waits for
        a send, a stream's end or a new point. A dead scheduler makes no steps: its requests wait until their
        clients' timeouts, which the clock then jumps to. Real time is only the backstop: a point whose streams stay
        silent for :data:`VCLOCK_STALL_S` real seconds is forgotten."""
        sched, vc, deadlines = self.sched, self.vclock, self.deadlines
        steps = 0
        while not self.stop.is_set():
            horizon = vc.horizon()
            due = deadlines.next_at()
            stepping = not self.sched_dead and sched.has_work()
            # arrivals due by now, or, with nothing to step, the next one unless a client gives up first
            while (at := vc.next_at()) is not None and at < horizon and (
                    at <= self.mclock or (not stepping and at <= due)):
                at, (req, priority) = vc.pop()
                self._sample_to(at)
                self.mclock = max(self.mclock, at)
                self._vrelease(at, req, priority)
                stepping = not self.sched_dead and sched.has_work()
            if due <= self.mclock:
                self._expire(self.mclock, inclusive=True)
                continue
            if stepping and self.mclock < min(horizon, due):
                now = self.mclock
                arrival = vc.next_at()
                step = sched.step(now, min(horizon, due, math.inf if arrival is None else arrival))
                dur = float(step.stats.duration_s)
                end = now + dur
                self._sample_to(end)
                self.mclock = end
                if due < end:  # a client gave up during the step: before its tokens of this step reached it
                    self._expire(end, inclusive=False)
                self._apply(step, end, dur)
                steps += 1
                if step.stats.kind == "idle" and dur <= 0:
                    await asyncio.sleep(0.001)
                elif steps % VCLOCK_YIELD_STEPS == 0:
                    await asyncio.sleep(0)  # let the handlers write what the steps since produced, in one go each
                continue
            if not stepping and due < math.inf and due <= horizon:
                self._sample_to(due)
                self.mclock = max(self.mclock, due)  # nothing happens before a client gives up: jump there
                continue
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), VCLOCK_STALL_S)
            except asyncio.TimeoutError:
                if math.isfinite(vc.horizon()):
                    self.log.sched(f"virtual clock: no stream sent for {VCLOCK_STALL_S:g} s; forgetting the load "
                                   "point's streams", level="warning")
                    vc.drop_all()

    def _sample_to(self, t: float) -> None:
        """Virtual clock: snapshot /metrics and the telemetry at every multiple of :data:`VCLOCK_SAMPLE_S` from the
        point's start up to modelled time ``t``, where the clock is about to go: what held until then (the running
        batch of the step that spans it, or an idle twin), the same on any host."""
        while self._next_sample <= t:
            self._snapshot(self._next_sample, "tick")
            self._next_sample += VCLOCK_SAMPLE_S

    def _snapshot(self, t: float, kind: SnapshotKind) -> None:
        """Keep /metrics and the telemetry as they stand, stamped modelled time ``t`` (s) and ``kind``
        (:data:`SNAPSHOT_KINDS`). A window's end or a point's end is the point's last snapshot: no tick follows."""
        self.vsamples.append((t, kind, self.metrics.render().decode() if self.metrics else None, self.telemetry()))
        if kind in ("window_end", "end"):
            self._next_sample = math.inf

    def samples_between(self, since: float, until: float) -> list[dict]:
        """The snapshots taken at modelled times in ``[since, until]`` (s), oldest first (GET /grid/vclock/samples):
        ``{"vt", "kind", "metrics", "telemetry"}`` each."""
        return [{"vt": t, "kind": kind, "metrics": text, "telemetry": tel}
                for t, kind, text, tel in self.vsamples if since <= t <= until]

    def _expire(self, now: float, inclusive: bool) -> None:
        """Time out every request whose client gave up before modelled time ``now`` (``inclusive``: or at it): no
        token (or no byte) for its timeout since its last token, or since its send. It is aborted at that instant
        (its KV freed, nothing cached) and its response ends with the timeout line (grid/loadgen/vclock.py); a
        request that made progress since its entry was pushed is pushed again at its new deadline."""
        deadlines = self.deadlines
        while (at := deadlines.next_at()) < now or (inclusive and at == now):
            _, req = deadlines.pop()
            if req.finished or req.limit is None:
                continue
            error_class, limit_s = req.limit
            fires = (req.t_last if req.t_last is not None else req.t_arrive) + limit_s
            if fires < now or (inclusive and fires == now):
                req.timeout = (error_class, fires)
                try:
                    self.sched.abort(req.rid)
                except Exception:  # noqa: BLE001 - not yet released to the scheduler, or already dropped
                    pass
                self._finish(req, "abort", at=fires)
            else:
                deadlines.push(fires, req)

    def served_s(self) -> float:
        """Modelled seconds since ready: on the virtual clock without the jumps that align each point's start
        (``skipped_s``), so that a fault timed from ready falls where the load put it."""
        return self.mnow() - self.ready_at - (self.skipped_s if self.virtual else 0.0)

    def _log_prefill(self, st, end: float) -> None:
        elapsed = max(1e-9, end - self._prefill_last_t)
        tokens = st.new_tokens if holds("prefill_throughput_of_this_batch", self.ver) else self._prefill_prev_tokens
        self._prefill_prev_tokens = st.new_tokens
        self._prefill_last_t = end
        total = st.new_tokens + st.cached_tokens
        if self.metrics is not None:
            self.metrics.cache_hit_rate.set(st.cached_tokens / total if total else 0.0)
        self.log.sched(logs.prefill_line(
            self.ver, new_seq=st.new_seqs, new_token=st.new_tokens, cached_token=st.cached_tokens,
            token_usage=st.token_usage, running_req=st.running, queue_req=st.queued,
            input_throughput=tokens / elapsed, cuda_graph=bool(st.cuda_graph),
            pending_token=0))

    def _log_decode(self, st, end: float) -> None:
        elapsed = max(1e-9, end - self._decode_last_t) if self._decode_last_t else None
        gen = self._decode_tokens / elapsed if elapsed else 0.0
        self._decode_last_t = end
        self._decode_tokens = 0
        self.last_gen_throughput = gen
        if self.metrics is not None:
            self.metrics.gen_throughput.set(gen)
        accept_len, accept_rate = speculative_acceptance(self.perf)
        if self.metrics is not None and accept_len is not None:
            self.metrics.spec_accept_length.set(accept_len)
            self.metrics.spec_accept_rate.set(accept_rate)
        self.log.sched(logs.decode_line(self.ver, running_req=st.running, num_token=st.used_tokens,
                                        token_usage=st.token_usage, cuda_graph=bool(st.cuda_graph),
                                        gen_throughput=gen, queue_req=st.queued, accept_len=accept_len,
                                        accept_rate=accept_rate))
        if self._nan_lines and not self._nan_warned and self.garbage() is not None:
            lines = logs.nan_lines(self.ver, self._nan_lines, env=os.environ,
                                   nan_detection=bool(getattr(self.args, "enable_nan_detection", False)))
            for line in lines:
                self.log.sched(line, level="warning")
            # 0.5.14+ warn once per process (srt/utils/async_probe.py _AsyncNanWarner); 0.5.9-0.5.12 at every step
            self._nan_warned = lines == (logs.NAN_SANITIZED_LINE,)



def _deployment(text: str, model, hardware, version: str):
    """The servers of the deployment :data:`ENV_DEPLOYMENT` describes, as the twin serves it: the perf model of its
    server that takes longest to start (whose start-up the twin plays: the router waits for every server) and the
    deployment's scheduler (grid/twin/deployment.py). Raises ``ValueError`` for a deployment that is not one, or one
    a server of which the twin refuses or knows to fail (the message names the role and shape)."""
    from grid.topology.deployment import Deployment
    from grid.twin.deployment import DeploymentScheduler, deployment_model

    d = json.loads(text)
    built = deployment_model(Deployment.from_identity(d), model, hardware, version, d.get("settings") or {},
                             dict(os.environ))
    slowest = max(built.servers, key=lambda s: sum(s.perf.startup_phases_s().values()))
    return slowest.perf, DeploymentScheduler(built.servers, built.transfer, built.deployment.router_policy
                                             or "round_robin")


def _fail(log_raw, exc_type: str, msg: str, **kw) -> int:
    log_raw(logs.traceback_text(exc_type, msg, **kw))
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    version = os.environ.get(ENV_VERSION) or cli.DEFAULT_VERSION
    args = cli.parse_args(argv, version)  # argparse exits 2 on bad flags
    raw = logs.LogWriter(time.time).raw
    from grid.config.specs import HardwareSpec, ModelSpec

    cfg_path = os.path.join(args.model_path, "config.json")
    try:
        with open(cfg_path) as fh:
            model = ModelSpec.from_hf_config(json.load(fh))
    except FileNotFoundError:
        return _fail(raw, "OSError", f"{args.model_path} does not appear to have a file named config.json.",
                     where="configs/model_config.py", func="__init__")
    except ValueError as e:
        return _fail(raw, "ValueError", str(e), where="configs/model_config.py", func="__init__")
    hw_text = os.environ.get(ENV_HARDWARE)
    if not hw_text:
        return _fail(raw, "RuntimeError", f"{ENV_HARDWARE} is not set: the twin needs the HardwareSpec JSON of the GPUs "
                                          "it plays")
    hardware = HardwareSpec.model_validate_json(hw_text)
    try:
        notes = cli.resolve_args(args, model)
        cli.check_server_args(args, model, hardware)
    except (ValueError, AssertionError) as e:
        return _fail(raw, type(e).__name__, str(e))
    scale = float(os.environ.get(ENV_TIME_SCALE) or 1.0)
    clock = os.environ.get(ENV_CLOCK) or "real"
    if clock not in vproto.CLOCKS:
        return _fail(raw, "ValueError", f"{ENV_CLOCK} must be one of {vproto.CLOCKS}, got {clock!r}")
    startup_scale = float(os.environ.get(ENV_STARTUP_TIME_SCALE) or scale)
    if scale <= 0 or startup_scale <= 0:
        return _fail(raw, "ValueError", f"{ENV_TIME_SCALE} and {ENV_STARTUP_TIME_SCALE} must be > 0")
    from grid.twin.failures import find_failures
    from grid.twin.perf import PerfModel

    scheduler = None
    if os.environ.get(ENV_DEPLOYMENT):
        try:
            perf, scheduler = _deployment(os.environ[ENV_DEPLOYMENT], model, hardware, version)
        except (ValueError, KeyError) as e:
            return _fail(raw, "ValueError", f"{ENV_DEPLOYMENT}: {e}")
        faults = parse_faults(os.environ.get(ENV_FAULTS))
    else:
        try:
            cfg = cli.to_serving_config(args, cli.accept_length_from(os.environ))
        except ValueError as e:
            return _fail(raw, "ValueError", str(e))
        try:
            perf = PerfModel(model, hardware, cfg)
        except (ValueError, AssertionError) as e:
            return _fail(raw, type(e).__name__, str(e), where="model_executor/model_runner.py",
                         func="init_memory_pool")
        faults = faults_from_failures(find_failures(model, hardware, cfg, perf)) + parse_faults(
            os.environ.get(ENV_FAULTS))

    async def _amain() -> int:
        twin = Twin(args, model=model, hardware=hardware, perf=perf, faults=faults, time_scale=scale, notes=notes,
                    startup_time_scale=startup_scale, clock=clock, scheduler=scheduler)
        return await twin.run()

    return asyncio.run(_amain())
