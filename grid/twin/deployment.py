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
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grid.config.specs import HardwareSpec, ModelSpec
from grid.topology.deployment import Deployment, Role, kv_transfer_s
from grid.topology.kv import DEFAULT_COST, TransferCost
from grid.twin.perf import PerfModel
from grid.twin.scheduler import Scheduler, Step, TwinRequest
from grid.twin.simulate import RequestResult, SimResult

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
    """Run ``requests`` ((send_s, request) pairs) through the deployment of ``servers`` to completion in virtual time.

    ``max_concurrency`` replays a closed-loop client over the whole deployment, as
    :func:`grid.twin.simulate.simulate` does for one server; with ``frontend`` a request reaches its (first) server
    ``perf.frontend_latency_s(input_tokens)`` of that server after it is sent. ``transfer`` is required when there are
    prefill and decode servers; ``trace`` keeps each request's token events as the client receives them
    (``SimResult.emissions``: the aggregated or decode server's steps). Raises ``ValueError`` for a mix of aggregated
    and disaggregated servers, a disaggregated deployment without both roles or without ``transfer``, or an unknown
    ``router_policy``."""
    roles = {s.role for s in servers}
    if not servers or ("aggregated" in roles and roles != {"aggregated"}):
        raise ValueError("a deployment is one or more aggregated servers, or prefill and decode servers")
    pd = roles != {"aggregated"}
    if pd and roles != {"prefill", "decode"}:
        raise ValueError(f"a disaggregated deployment needs prefill and decode servers; it has {sorted(roles)}")
    if pd and transfer is None:
        raise ValueError("a disaggregated deployment needs a transfer model (grid/topology/kv.py)")
    router = _Router(router_policy, seed)
    scheds = [Scheduler(s.perf) for s in servers]
    by_role = {r: [i for i, s in enumerate(servers) if s.role == r] for r in roles}
    entry = by_role["prefill" if pd else "aggregated"]
    busy_until: list[float | None] = [None] * len(servers)  # the end of the step a server is running
    running_step: list[Step | None] = [None] * len(servers)
    in_flight = [0] * len(servers)
    queue = deque(sorted(requests, key=lambda x: x[0]))
    cap = max_concurrency if max_concurrency and max_concurrency > 0 else None
    client_in_flight = 0
    free_at: list[float] = [float("-inf")] * (cap or 0)
    events: list[tuple[float, int, int, TwinRequest]] = []  # (time, order, server, request): reaches the server
    order = 0
    sent: dict[str, tuple[float, TwinRequest]] = {}
    decode_of: dict[str, int] = {}
    first_tok: dict[str, float] = {}
    out_tok: dict[str, int] = {}
    done: dict[str, tuple[float, str]] = {}
    transfers: dict[str, float] = {}
    transferring: list[float] = []  # end times of the transfers in flight (a heap)
    served: dict[str, tuple[int, ...]] = {}
    emissions: dict[str, list[tuple[float, int]]] = {}
    t0 = queue[0][0] if queue else 0.0
    now = t0
    steps = 0

    def finish_step(i: int) -> None:
        nonlocal client_in_flight, order
        step = running_step[i]
        running_step[i], busy_until[i] = None, None
        if step is None:
            return
        role = servers[i].role
        for rid, n in step.emitted.items():
            if role == "prefill":
                continue  # the first token reaches the client from the decode server
            first_tok.setdefault(rid, now)
            out_tok[rid] = out_tok.get(rid, 0) + n
            if trace and n:
                emissions.setdefault(rid, []).append((now, n))
        for rid, reason in step.finished.items():
            in_flight[i] -= 1
            if role == "prefill" and reason != "abort":
                _, req = sent[rid]
                d = decode_of[rid]
                while transferring and transferring[0] <= now + 1e-12:
                    heapq.heappop(transferring)
                assert transfer is not None
                took = transfer(i, d, req.input_tokens, len(transferring) + 1)
                transfers[rid] = took
                heapq.heappush(transferring, now + took)
                # the decode server admits it with its KV, no forward pass, and streams the first token the prefill
                # server sampled
                arriving = TwinRequest(req.rid, req.input_tokens, req.max_new_tokens, req.eos_after, req.priority,
                                       kv_ready=True)
                order += 1
                heapq.heappush(events, (now + took, order, d, arriving))
                continue
            if role == "prefill":  # aborted before its KV moved: the decode server never sees it
                in_flight[decode_of[rid]] -= 1
            done[rid] = (now, reason)
            client_in_flight -= 1
            if cap is not None:
                heapq.heappush(free_at, now)

    def release() -> None:
        nonlocal client_in_flight, order
        while queue and queue[0][0] <= now + 1e-12 and (cap is None or client_in_flight < cap):
            t, req = queue.popleft()
            send = max(t, heapq.heappop(free_at)) if cap is not None else t
            sent[req.rid] = (send, req)
            client_in_flight += 1
            first = router.pick("prefill" if pd else "aggregated", entry, in_flight)
            in_flight[first] += 1
            if pd:
                d = router.pick("decode", by_role["decode"], in_flight)
                in_flight[d] += 1
                decode_of[req.rid] = d
                served[req.rid] = (first, d)
                req = TwinRequest(req.rid, req.input_tokens, 1, None, req.priority)
            else:
                served[req.rid] = (first,)
            delay = servers[first].perf.frontend_latency_s(req.input_tokens) if frontend else 0.0
            order += 1
            heapq.heappush(events, (send + delay, order, first, req))
        while events and events[0][0] <= now + 1e-12:
            t, _, i, req = heapq.heappop(events)
            scheds[i].add(req, t)

    def next_time() -> float | None:
        cands = [t for t in busy_until if t is not None]
        if events:
            cands.append(events[0][0])
        if queue and (cap is None or client_in_flight < cap):
            cands.append(queue[0][0])
        return min(cands) if cands else None

    while steps < max_steps:
        for i, t in enumerate(busy_until):
            if t is not None and t <= now:
                finish_step(i)
        release()
        started = False
        for i, sched in enumerate(scheds):
            if busy_until[i] is not None or not sched.has_work():
                continue
            step = sched.step(now)
            steps += 1
            if step.stats.kind == "idle" and step.stats.duration_s == 0 and not step.finished:
                continue  # nothing it can run until something arrives
            running_step[i], busy_until[i] = step, now + step.stats.duration_s
            started = True
        nxt = next_time()
        if nxt is None:
            break
        if not started and nxt <= now and not any(t is not None and t <= now for t in busy_until):
            break  # nothing can move (a request no server can admit)
        now = max(now, nxt)
    results = []
    for t, req in list(queue):
        sent.setdefault(req.rid, (t, req))
    for rid, (arr, req) in sent.items():
        end, reason = done.get(rid, (now, "abort"))
        results.append(RequestResult(rid=rid, arrival_s=arr, input_tokens=req.input_tokens,
                                     output_tokens=out_tok.get(rid, 0), ttft_s=first_tok.get(rid, end) - arr,
                                     e2e_s=end - arr, finish_reason=reason))
    last_end = max((r.arrival_s + r.e2e_s for r in results), default=t0)
    return DeploymentResult(SimResult(requests=results, duration_s=last_end - t0, steps=steps, emissions=emissions),
                            transfers, served)


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
    transfer: Transfer | None

    @property
    def gpus(self) -> int:
        return self.deployment.gpus

    def startup_phases_s(self) -> dict[str, float]:
        """The start-up phases (modelled s) of the server that takes longest to start."""
        return max((s.perf.startup_phases_s() for s in self.servers), key=lambda p: sum(p.values()))

    def replay(self, point, input_len: int, output_len: int):
        """:func:`replay_deployment` of ``point`` through this deployment."""
        return replay_deployment(self.servers, point, input_len, output_len, self.transfer,
                                 self.deployment.router_policy or "round_robin")


def deployment_model(deployment: Deployment, model: ModelSpec, hardware: HardwareSpec, version: str,
                     settings: Mapping[str, Any], env: Mapping[str, str] | None = None,
                     coefficients: Any = None) -> DeploymentModel:
    """:class:`DeploymentModel` of ``deployment`` (:func:`servers_of`, :func:`transfer_of`). Raises ``ValueError`` as
    they do."""
    servers = servers_of(deployment, model, hardware, version, settings, env, coefficients)
    transfer = transfer_of(deployment, model, hardware, settings.get("kv_cache_dtype")) \
        if deployment.disaggregated else None
    return DeploymentModel(deployment, tuple(servers), transfer)


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
                      transfer: Transfer | None = None, router_policy: str = "round_robin", seed: int = 0):
    """``point`` (a ``grid.loadgen.runner.LoadPoint``) as grid's load generator plays it against the deployment's
    router, simulated here: the ``LoadPointResult`` it would record (grid/twin/simulate.py ``replay``, the plan the
    same as for one server), for ``grid.metrics.loadpoint.summarize``."""
    from grid.twin.simulate import replay

    def run(requests: list[tuple[float, TwinRequest]], cap: int | None) -> SimResult:
        return simulate_deployment(servers, requests, transfer, router_policy, cap, seed=seed, trace=True).sim
    return replay(None, point, input_len, output_len, sequential_shortcut=False, run=run)
