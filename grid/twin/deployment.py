"""The twin's simulation of a deployment: several SGLang servers behind a router, in virtual time (pure).

A deployment (grid/topology/deployment.py) is ``n`` aggregated servers, or prefill and decode servers. Each server
is its own ``Scheduler`` over its own ``PerfModel`` (its role's parallel shape and flags); one event loop advances
them on one clock, so a replica's or a role's step is simulated exactly as :func:`grid.twin.simulate.simulate`
simulates a lone server's, and a deployment of one aggregated server gives the same timings to the bit
(tests/twin/test_deployment.py).

The request path, as SGLang serves it:

* **Aggregated**: the router sends the request to one server (``router_policy``), which prefills and decodes it.
* **Disaggregated** (SGLang's ``--disaggregation-mode prefill|decode`` behind ``sglang_router --pd-disaggregation``):
  the router picks a prefill and a decode server for each request. The prefill server prefills it and samples its
  first token (a request of one output token); its KV then moves to the decode server, taking ``transfer(prefill
  index, decode index, prompt tokens, transfers in flight)`` seconds (grid/topology/kv.py: a fixed cost plus the
  bytes over the link, shared with the transfers in flight when it starts). SGLang's decode server never prefills:
  the request arrives with its KV and first token, is admitted when its KV fits (SGLang's prebuilt extend: no
  forward pass, ``TwinRequest.kv_ready``), streams that first token then and joins the next decode batch. TTFT is
  therefore prefill queue + prefill + transfer + waiting for room on the decode server; TPOT is the decode server's
  alone.

Router policies (``sglang_router --policy``): ``round_robin`` cycles each role's servers; ``random`` draws one with
the seeded generator; ``power_of_two`` draws two and takes the one with fewer requests in flight (the first on a
tie); ``cache_aware`` routes by shared prompt prefixes, which a replay's independent prompts never have, so it is
played as round robin (its load-balancing fallback).

Left out (documented in docs/topology.md): the prefill server holds a request's KV until its transfer ends (here it
is freed when the prefill finishes), and the decode server reserves KV when the request is routed (here when its KV
arrives); the router's own latency; retries after a failed transfer.
"""

from __future__ import annotations

import functools
import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grid.config.specs import HardwareSpec, ModelSpec
from grid.topology.deployment import Deployment, Role, kv_transfer_s
from grid.topology.kv import DEFAULT_COST, TransferCost
from grid.twin.perf import PerfModel
from grid.twin.scheduler import Scheduler, Step, StepStats, TwinRequest
from grid.twin.simulate import SimResult

#: The router policies the replay plays (``sglang_router`` 0.3.2 ``--policy``; grid/server/router.py POLICIES).
ROUTER_POLICIES: tuple[str, ...] = ("round_robin", "random", "power_of_two", "cache_aware")
#: ``transfer(prefill index, decode index, prompt tokens, transfers in flight)``: seconds to move one request's KV.
Transfer = Callable[[int, int, int, int], float]


@dataclass(frozen=True)
class DeployedServer:
    """One server of the simulated deployment: its ``role`` and its performance model (its shape and flags)."""

    role: Role
    perf: PerfModel


@dataclass
class DeploymentResult:
    """What the client saw (``sim``: per-request timings, as :func:`grid.twin.simulate.simulate` reports them) and
    what moved inside: each request's KV ``transfers_s`` (disaggregated only) and the server indexes that served it
    (``served_by``: one aggregated server, or (prefill, decode)), indexes into the ``servers`` given."""

    sim: SimResult
    transfers_s: dict[str, float] = field(default_factory=dict)
    served_by: dict[str, tuple[int, ...]] = field(default_factory=dict)


class _Router:
    def __init__(self, policy: str, seed: int) -> None:
        if policy not in ROUTER_POLICIES:
            raise ValueError(f"router_policy must be one of {', '.join(ROUTER_POLICIES)}, got {policy!r}")
        self.policy = policy
        self.rng = random.Random(seed)
        self.turn: dict[str, int] = {}

    def pick(self, role: str, candidates: list[int], in_flight: list[int]) -> int:
        if self.policy == "random":
            return candidates[self.rng.randrange(len(candidates))]
        if self.policy == "power_of_two" and len(candidates) > 1:
            a, b = self.rng.sample(candidates, 2)
            return b if in_flight[b] < in_flight[a] else a
        k = self.turn.get(role, 0)
        self.turn[role] = k + 1
        return candidates[k % len(candidates)]


class DeploymentScheduler:
    """A deployment as one scheduler: the interface of :class:`grid.twin.scheduler.Scheduler` (``add``, ``step``,
    ``abort``, ``has_work``, ``used_tokens``, ``uncached_tokens``) over the schedulers of its ``servers`` and the
    router in front of them, so that what drives one server's scheduler (:func:`grid.twin.simulate.simulate`, the
    live twin's loop) drives a deployment the same way: one simulation, forecast and served.

    ``add(request, t)``: the request reaches the router at modelled time ``t`` (s), which picks its server (or its
    prefill and decode servers, module docstring). ``step(now, until)``: every server that is idle and has work
    starts its next batch at ``now``; the deployment then advances to the first moment something happens (a server's
    batch ends, a KV transfer lands) or to ``until``, whichever is first, and returns that span as one ``Step``:
    ``duration_s`` from ``now``, the tokens that reached clients at its end (an aggregated or decode server's; a
    prefill server's sampled token reaches the client from the decode server) and the requests that ended for their
    clients. A server's batch is never cut: ``until`` only bounds the span, so that an arrival before the next
    event starts an idle server then. Its stats sum the servers' queues and KV (``kind``: ``decode`` when a decode
    batch ended in it, else ``prefill`` when a prefill did, else ``idle``; queues and KV as each server's latest batch
    left them).

    ``transfer`` is required when there are prefill and decode servers; ``on_transfer(rid, seconds)`` is told of each
    KV transfer as it starts (the live twin's ``sglang:kv_transfer_latency_ms``). Raises ``ValueError`` for a mix of
    aggregated and disaggregated servers, a disaggregated deployment without both roles or without ``transfer``, or
    an unknown ``router_policy``."""

    def __init__(self, servers: Sequence[DeployedServer], transfer: Transfer | None = None,
                 router_policy: str = "round_robin", seed: int = 0,
                 on_transfer: Callable[[str, float], None] | None = None) -> None:
        roles = {s.role for s in servers}
        if not servers or ("aggregated" in roles and roles != {"aggregated"}):
            raise ValueError("a deployment is one or more aggregated servers, or prefill and decode servers")
        self.pd = roles != {"aggregated"}
        if self.pd and roles != {"prefill", "decode"}:
            raise ValueError(f"a disaggregated deployment needs prefill and decode servers; it has {sorted(roles)}")
        if self.pd and transfer is None:
            raise ValueError("a disaggregated deployment needs a transfer model (grid/topology/kv.py)")
        self.servers = list(servers)
        self.transfer = transfer
        self.on_transfer = on_transfer
        self.router = _Router(router_policy, seed)
        self.scheds = [Scheduler(s.perf) for s in servers]
        self.capacity = sum(s.capacity for s in self.scheds)
        self.by_role = {r: [i for i, s in enumerate(servers) if s.role == r] for r in roles}
        self.entry = self.by_role["prefill" if self.pd else "aggregated"]
        self.busy_until: list[float | None] = [None] * len(servers)  # the end of the batch a server runs
        self.running_step: list[Step | None] = [None] * len(servers)
        # each server's queues and KV as its latest batch left them (what a step's stats sum)
        self.latest: list[StepStats | None] = [None] * len(servers)
        self.in_flight = [0] * len(servers)
        self.landing: list[tuple[float, int, int, TwinRequest]] = []  # (lands at, order, decode server, request)
        self.transferring: list[float] = []  # end times of the transfers in flight (a heap)
        self.requests: dict[str, TwinRequest] = {}  # disaggregated: each request as the client sent it
        self.decode_of: dict[str, int] = {}
        #: each request's KV transfer (s), disaggregated only
        self.transfers_s: dict[str, float] = {}
        #: the servers that served each request: one aggregated server, or (prefill, decode); indexes into servers
        self.served_by: dict[str, tuple[int, ...]] = {}
        self._aborted: dict[str, str] = {}  # aborted outside any server (its KV in flight): reported next step
        self._order = 0

    def add(self, req: TwinRequest, now_s: float) -> None:
        first = self.router.pick("prefill" if self.pd else "aggregated", self.entry, self.in_flight)
        self.in_flight[first] += 1
        if self.pd:
            d = self.router.pick("decode", self.by_role["decode"], self.in_flight)
            self.in_flight[d] += 1
            self.decode_of[req.rid] = d
            self.served_by[req.rid] = (first, d)
            self.requests[req.rid] = req
            req = TwinRequest(req.rid, req.input_tokens, 1, None, req.priority, req.cached_tokens)
        else:
            self.served_by[req.rid] = (first,)
        self.scheds[first].add(req, now_s)

    def abort(self, rid: str) -> None:
        for k, (_, _, d, req) in enumerate(self.landing):
            if req.rid == rid:  # its KV is on the wire: the decode server will not see it
                self.landing.pop(k)
                heapq.heapify(self.landing)
                self.in_flight[d] -= 1
                self._aborted[rid] = "abort"
                return
        for i in self.served_by.get(rid, ()):
            self.scheds[i].abort(rid)

    def has_work(self) -> bool:
        return bool(self.landing or self._aborted or any(t is not None for t in self.busy_until)
                    or any(s.has_work() for s in self.scheds))

    def used_tokens(self) -> int:
        return sum(s.used_tokens() for s in self.scheds)

    def running_count(self) -> int:
        """Requests admitted on any server (a disaggregated request counts on each server that holds it)."""
        return sum(len(s.running) for s in self.scheds)

    def waiting_count(self) -> int:
        """Requests queued on any server, and KV transfers on the wire."""
        return sum(len(s.waiting) for s in self.scheds) + len(self.landing)

    def decoding_load(self) -> tuple[PerfModel, int, int]:
        """The busiest server that decodes (aggregated or decode): its performance model, running requests and KV
        tokens held (what the twin's GPU telemetry shows for the deployment)."""
        i = max((i for i, s in enumerate(self.servers) if s.role != "prefill"),
                key=lambda i: len(self.scheds[i].running))
        return self.servers[i].perf, len(self.scheds[i].running), self.scheds[i].used_tokens()

    def uncached_tokens(self) -> int:
        return sum(s.uncached_tokens() for s in self.scheds)

    def step(self, now_s: float, until_s: float = math.inf) -> Step:
        now = now_s
        while self.landing and self.landing[0][0] <= now + 1e-12:
            t, _, d, req = heapq.heappop(self.landing)
            self.scheds[d].add(req, t)
        for i, sched in enumerate(self.scheds):
            if self.busy_until[i] is not None or not sched.has_work():
                continue
            step = sched.step(now)
            if step.stats.kind == "idle" and step.stats.duration_s == 0 and not step.finished:
                continue  # nothing it can run until something arrives
            self.running_step[i], self.busy_until[i] = step, now + step.stats.duration_s
            self.latest[i] = step.stats
        ends = [t for t in self.busy_until if t is not None]
        if self.landing:
            ends.append(self.landing[0][0])
        emitted: dict[str, int] = {}
        finished, self._aborted = self._aborted, {}
        kinds: set[str] = set()
        new = [0, 0, 0]  # new sequences, new tokens, cached tokens of the prefill batches that ended
        graph = False
        at = max(now, min(min(ends, default=now), until_s))
        for i, end in enumerate(self.busy_until):
            ending = self.running_step[i]
            if end is not None and end <= at and ending is not None:
                kinds.add(ending.stats.kind)
                graph = graph or ending.stats.cuda_graph
                if ending.stats.kind == "prefill":
                    new = [new[0] + ending.stats.new_seqs, new[1] + ending.stats.new_tokens,
                           new[2] + ending.stats.cached_tokens]
                self._finish_step(i, at, emitted, finished)
        kind = "decode" if "decode" in kinds else "prefill" if "prefill" in kinds else "idle"
        latest = [st for st in self.latest if st is not None]
        used = sum(st.used_tokens for st in latest)
        stats = StepStats(kind=kind, duration_s=at - now, new_seqs=new[0], new_tokens=new[1], cached_tokens=new[2],
                          running=sum(st.running for st in latest), queued=sum(st.queued for st in latest),
                          used_tokens=used, token_usage=used / max(1, self.capacity), cuda_graph=graph)
        return Step(stats, emitted, finished)

    def _finish_step(self, i: int, now: float, emitted: dict[str, int], finished: dict[str, str]) -> None:
        step = self.running_step[i]
        self.running_step[i], self.busy_until[i] = None, None
        assert step is not None
        role = self.servers[i].role
        if role != "prefill":  # the first token reaches the client from the decode server
            for rid, n in step.emitted.items():
                emitted[rid] = emitted.get(rid, 0) + n
        for rid, reason in step.finished.items():
            self.in_flight[i] -= 1
            if role == "prefill" and reason != "abort":
                req = self.requests.pop(rid)
                d = self.decode_of[rid]
                while self.transferring and self.transferring[0] <= now + 1e-12:
                    heapq.heappop(self.transferring)
                assert self.transfer is not None
                took = self.transfer(i, d, req.input_tokens, len(self.transferring) + 1)
                self.transfers_s[rid] = took
                if self.on_transfer is not None:
                    self.on_transfer(rid, took)
                heapq.heappush(self.transferring, now + took)
                # the decode server admits it with its KV, no forward pass, and streams the first token the prefill
                # server sampled
                self._order += 1
                heapq.heappush(self.landing, (now + took, self._order, d, TwinRequest(
                    req.rid, req.input_tokens, req.max_new_tokens, req.eos_after, req.priority, kv_ready=True)))
                continue
            if role == "prefill":  # aborted before its KV moved: the decode server never sees it
                self.in_flight[self.decode_of[rid]] -= 1
                self.requests.pop(rid, None)
            finished[rid] = reason


def simulate_deployment(
    servers: Sequence[DeployedServer],
    requests: list[tuple[float, TwinRequest]],
    transfer: Transfer | None = None,
    router_policy: str = "round_robin",
    max_concurrency: int | None = None,
    frontend: bool = True,
    seed: int = 0,
    max_steps: int = 10_000_000,
    trace: bool = False,
) -> DeploymentResult:
    """Run ``requests`` ((send_s, request) pairs) through the deployment of ``servers`` to completion in virtual time:
    :func:`grid.twin.simulate.simulate` over its :class:`DeploymentScheduler`.

    ``max_concurrency`` replays a closed-loop client over the whole deployment, as for one server; with ``frontend``
    a request reaches the router ``perf.frontend_latency_s(input_tokens)`` after it is sent (the same for every
    server: grid/twin/perf.py). ``transfer`` is required when there are prefill and decode servers; ``trace`` keeps
    each request's token events as the client receives them (``SimResult.emissions``: the aggregated or decode
    server's steps). Raises ``ValueError`` as :class:`DeploymentScheduler` does."""
    from grid.twin.simulate import simulate

    sched = DeploymentScheduler(servers, transfer, router_policy, seed)
    sim = simulate(servers[0].perf, requests, max_steps=max_steps, max_concurrency=max_concurrency,
                   frontend=frontend, trace=trace, scheduler=sched)
    return DeploymentResult(sim, sched.transfers_s, sched.served_by)


def servers_of(deployment: Deployment, model: ModelSpec, hardware: HardwareSpec, version: str,
               settings: Mapping[str, Any], env: Mapping[str, str] | None = None,
               coefficients: Any = None) -> list[DeployedServer]:
    """The deployment's servers in :meth:`Deployment.place` order, each the twin's ``PerfModel`` of SGLang ``version``
    launched with ``settings`` (grid's names), its group's shape (:meth:`ServerShape.settings`) and its group's own
    settings, calibrated to ``coefficients`` (grid/twin/coefficients.py; None: the spec-sheet model). Raises ``ValueError`` naming the role and shape when the twin refuses a server's flags, as
    SGLang would (grid/twin/perf_of_flags.py), or knows the server fails on this hardware (grid/twin/failures.py:
    e.g. ``weights_oom``, DeepSeek-V3's FP8 weights on eight 80 GB GPUs)."""
    from grid.releases.flags import parse_version, to_argv
    from grid.twin.coefficients import calibrated
    from grid.twin.failures import find_failures
    from grid.twin.perf_of_flags import perf_model

    out = []
    for group in deployment.groups:
        chosen = group.settings_over(settings)
        perf = perf_model(model, hardware, to_argv(chosen, parse_version(version)), version, env)
        if perf is None:
            raise ValueError(f"deployment {deployment.label()}: the twin refuses the {group.role} server "
                             f"{group.shape.label()} ({chosen}) on {hardware.name} at SGLang {version}")
        failing = find_failures(model, hardware, perf.cfg, perf)
        if failing:
            raise ValueError(f"deployment {deployment.label()}: the {group.role} server {group.shape.label()} is known "
                             f"to fail on {hardware.name}: " + "; ".join(f"{f.id} ({f.effect})" for f in failing))
        out += [DeployedServer(group.role, calibrated(perf, coefficients))] * group.count
    return out


@dataclass(frozen=True, eq=False)
class DeploymentModel:
    """The twin's model of a deployment, as the search forecasts a configuration with it: its servers, their
    transfers and router, the GPUs it holds and its start-up (the slowest server's: they start together and the
    router waits for every one)."""

    deployment: Deployment
    servers: tuple[DeployedServer, ...]
    transfer_at: Callable[[TransferCost], Transfer] | None  # each pair's KV transfer under a cost (None: aggregated)
    cost: TransferCost = DEFAULT_COST

    @functools.cached_property
    def transfer(self) -> Transfer | None:
        """Each prefill-decode pair's KV transfer time under :attr:`cost` (None for an aggregated deployment)."""
        return None if self.transfer_at is None else self.transfer_at(self.cost)

    @property
    def gpus(self) -> int:
        return self.deployment.gpus

    def startup_phases_s(self) -> dict[str, float]:
        """The start-up phases (modelled s) of the server that takes longest to start."""
        return max((s.perf.startup_phases_s() for s in self.servers), key=lambda p: sum(p.values()))

    def with_coefficients(self, coefficients: Any) -> DeploymentModel:
        """This deployment with every server's model calibrated to ``coefficients`` (grid/twin/coefficients.py
        ``calibrated``; None: the spec-sheet models) and every KV transfer's cost to their ``kv_fixed`` and
        ``kv_link`` (from the spec-sheet cost, whatever this deployment's was)."""
        from grid.twin.coefficients import calibrated

        servers = tuple(DeployedServer(s.role, calibrated(s.perf, coefficients)) for s in self.servers)
        cost = DEFAULT_COST if coefficients is None else DEFAULT_COST.calibrated(coefficients.kv_fixed,
                                                                                 coefficients.kv_link)
        return DeploymentModel(self.deployment, servers, self.transfer_at, cost)

    def replay(self, point, input_len: int, output_len: int, transfers: list[float] | None = None):
        """:func:`replay_deployment` of ``point`` through this deployment; each KV transfer's seconds are appended to
        ``transfers`` when given."""
        return replay_deployment(self.servers, point, input_len, output_len, self.transfer,
                                 self.deployment.router_policy or "round_robin", transfers=transfers)


def deployment_model(deployment: Deployment, model: ModelSpec, hardware: HardwareSpec, version: str,
                     settings: Mapping[str, Any], env: Mapping[str, str] | None = None,
                     coefficients: Any = None) -> DeploymentModel:
    """:class:`DeploymentModel` of ``deployment`` (:func:`servers_of`, :func:`transfer_of`). Raises ``ValueError`` as
    they do, and naming the pair when SGLang ``version`` fails the first KV transfer of a prefill-decode pair of it
    (grid/releases/checks.py ``PAIR_RULES``; the twin does not play a failed transfer: it refuses the deployment)."""
    for p, d, _, message in deployment.failing_pairs(settings, version, model)[:1]:
        raise ValueError(f"deployment {deployment.label()}: prefill {p.shape.label()} to decode {d.shape.label()} "
                         f"fails its first KV transfer on SGLang {version}: {message}")
    servers = servers_of(deployment, model, hardware, version, settings, env, coefficients)
    transfer_at = functools.partial(transfer_of, deployment, model, hardware, settings.get("kv_cache_dtype")) \
        if deployment.disaggregated else None
    return DeploymentModel(deployment, tuple(servers), transfer_at)


def transfer_of(deployment: Deployment, model: ModelSpec, hardware: HardwareSpec, kv_cache_dtype: str | None = None,
                cost: TransferCost = DEFAULT_COST) -> Transfer:
    """The :data:`Transfer` of a disaggregated deployment on ``hardware``: each prefill-decode pair's KV transfer
    time over the link between their places (grid/topology/deployment.py ``kv_transfer_s``), server indexes as
    :func:`servers_of` orders them. Raises ``ValueError`` for an aggregated deployment or one that does not fit."""
    places = deployment.place(hardware)
    if not deployment.disaggregated:
        raise ValueError(f"deployment {deployment.label()} is aggregated: no KV moves between its servers")

    # kv_transfer_s places the deployment on every call: a replay asks it once per request, mostly the same pair,
    # length and concurrency, so the answers are kept
    @functools.lru_cache(maxsize=4096)
    def transfer(prefill: int, decode: int, tokens: int, concurrent: int) -> float:
        return kv_transfer_s(deployment, model, hardware, tokens, concurrent, kv_cache_dtype, cost,
                             prefill=places[prefill].index, decode=places[decode].index)
    return transfer


def replay_deployment(servers: Sequence[DeployedServer], point, input_len: int, output_len: int,
                      transfer: Transfer | None = None, router_policy: str = "round_robin", seed: int = 0,
                      transfers: list[float] | None = None):
    """``point`` (a ``grid.loadgen.runner.LoadPoint``) as grid's load generator plays it against the deployment's
    router, simulated here: the ``LoadPointResult`` it would record (grid/twin/simulate.py ``replay``, the plan the
    same as for one server), for ``grid.metrics.loadpoint.summarize``. ``transfers``: when given, each KV
    transfer's seconds (warm-up requests included, as SGLang's histogram counts them) are appended to it."""
    from grid.twin.simulate import replay

    def run(requests: list[tuple[float, TwinRequest]], cap: int | None) -> SimResult:
        done = simulate_deployment(servers, requests, transfer, router_policy, cap, seed=seed, trace=True)
        if transfers is not None:
            transfers.extend(done.transfers_s.values())
        return done.sim
    return replay(None, point, input_len, output_len, sequential_shortcut=False, run=run)
