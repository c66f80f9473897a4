"""The twin's simulation of a deployment (grid/twin/deployment.py): replicas and prefill-decode servers on one clock,
held to the single-server simulation and to the request path's own terms."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest

from tests.twin._specs import hardware, model
from grid.twin.deployment import DeployedServer, simulate_deployment
from grid.twin.perf_of_flags import perf_model
from grid.twin.scheduler import TwinRequest
from grid.twin.simulate import simulate


@pytest.fixture(scope="module")
def perf():
    return perf_model(model("llama3_1_8b"), hardware("h100_x8"), ["--tp-size", "1"], "0.5.9", {})


def _burst(n: int, isl: int = 1024, osl: int = 128, step: int = 0) -> list[tuple[float, TwinRequest]]:
    return [(0.0, TwinRequest(f"r{i}", isl + step * i, osl)) for i in range(n)]


def test_one_aggregated_server_is_the_single_server_simulation_to_the_bit(perf):
    for requests, cap in ((_burst(64, step=37), 16), ([(0.05 * i, TwinRequest(f"r{i}", 512, 64)) for i in range(40)],
                                                       None)):
        alone = simulate(perf, requests, max_concurrency=cap, trace=True)
        deployed = simulate_deployment([DeployedServer("aggregated", perf)], requests, max_concurrency=cap,
                                       trace=True)
        assert deployed.sim.requests == alone.requests
        # every token event at the same modelled time (a deployment's steps are spans between events: not counted
        # the same)
        assert (deployed.sim.duration_s, deployed.sim.emissions) == (alone.duration_s, alone.emissions)
        assert set(deployed.served_by.values()) == {(0,)} and deployed.transfers_s == {}


def test_two_round_robin_replicas_each_serve_half_exactly_as_one_server_serves_its_share(perf):
    one = simulate(perf, _burst(32), max_concurrency=8)
    two = simulate_deployment([DeployedServer("aggregated", perf)] * 2, _burst(64), max_concurrency=16)
    assert Counter(two.served_by.values()) == {(0,): 32, (1,): 32}
    timings = sorted((r.ttft_s, r.e2e_s) for r in two.sim.requests)
    assert timings[::2] == timings[1::2] == sorted((r.ttft_s, r.e2e_s) for r in one.requests)
    assert two.sim.duration_s == one.duration_s and two.sim.output_throughput == 2 * one.output_throughput


def test_a_disaggregated_request_is_prefill_then_transfer_then_the_decode_servers_extend_and_steps(perf):
    calls = []

    def transfer(p: int, d: int, tokens: int, concurrent: int) -> float:
        calls.append((p, d, tokens, concurrent))
        return 0.020 + tokens * 131072 / 40e9

    isl, osl = 2048, 16
    res = simulate_deployment([DeployedServer("prefill", perf), DeployedServer("decode", perf)],
                              [(0.0, TwinRequest("r0", isl, osl))], transfer=transfer)
    r = res.sim.requests[0]
    moved = 0.020 + isl * 131072 / 40e9
    assert calls == [(0, 1, isl, 1)] and res.transfers_s == {"r0": moved} and res.served_by == {"r0": (0, 1)}
    # front end, the prefill server's prefill, the KV transfer; the decode server admits it without a forward pass
    ttft = perf.frontend_latency_s(isl) + perf.prefill_step_s(isl, 0, 1) + moved
    assert r.ttft_s == pytest.approx(ttft, rel=1e-12)
    # then one decode step per further token, each over the KV held: the prompt and the tokens so far
    decode = sum(perf.decode_step_s(1, isl + k) for k in range(1, osl))
    assert r.e2e_s == pytest.approx(ttft + decode, rel=1e-12)
    assert (r.output_tokens, r.finish_reason) == (osl, "length")


def test_transfers_in_flight_share_the_link(perf):
    calls = []

    def transfer(p: int, d: int, tokens: int, concurrent: int) -> float:
        calls.append(concurrent)
        return 0.5  # long enough that both are in flight together
    res = simulate_deployment([DeployedServer("prefill", perf), DeployedServer("decode", perf)], _burst(3),
                              transfer=transfer)
    assert calls == [1, 2, 3]   # one prefill batch finishes all three at once: each starts beside the earlier ones
    assert all(r.finish_reason == "length" and r.output_tokens == 128 for r in res.sim.requests)


def test_xpyd_routes_each_role_round_robin_and_power_of_two_prefers_the_idler_server(perf):
    servers = [DeployedServer("prefill", perf)] * 2 + [DeployedServer("decode", perf)] * 3
    res = simulate_deployment(servers, _burst(6), transfer=lambda *a: 0.01)
    assert [res.served_by[f"r{i}"] for i in range(6)] == [(0, 2), (1, 3), (0, 4), (1, 2), (0, 3), (1, 4)]
    replicas = [DeployedServer("aggregated", perf)] * 4
    p2 = simulate_deployment(replicas, _burst(40), router_policy="power_of_two", seed=3)
    assert sum(Counter(p2.served_by.values()).values()) == 40
    assert max(Counter(p2.served_by.values()).values()) - min(Counter(p2.served_by.values()).values()) <= 2
    again = simulate_deployment(replicas, _burst(40), router_policy="random", seed=3)
    assert again.served_by == simulate_deployment(replicas, _burst(40), router_policy="random", seed=3).served_by


def test_bad_deployments_are_refused_with_the_reason(perf):
    with pytest.raises(ValueError, match="one or more aggregated servers, or prefill and decode"):
        simulate_deployment([DeployedServer("aggregated", perf), DeployedServer("decode", perf)], _burst(1))
    with pytest.raises(ValueError, match="needs prefill and decode servers"):
        simulate_deployment([DeployedServer("prefill", perf)], _burst(1), transfer=lambda *a: 0.0)
    with pytest.raises(ValueError, match="needs a transfer model"):
        simulate_deployment([DeployedServer("prefill", perf), DeployedServer("decode", perf)], _burst(1))
    with pytest.raises(ValueError, match="router_policy must be one of round_robin, random, power_of_two"):
        simulate_deployment([DeployedServer("aggregated", perf)], _burst(1), router_policy="least_load")
    assert math.isfinite(simulate_deployment([DeployedServer("aggregated", perf)], []).sim.duration_s)


def test_a_load_point_replayed_through_a_one_server_deployment_is_the_servers_replay(perf):
    from grid.loadgen.runner import LoadPoint
    from grid.metrics.loadpoint import summarize
    from grid.twin.deployment import replay_deployment
    from grid.twin.simulate import replay

    for point in (LoadPoint("concurrency", 8, 24, warmup_requests=1, steady=True),
                  LoadPoint("rate", 30.0, 24, warmup_requests=1, seed=11)):
        alone = summarize(replay(perf, point, 96, 48, sequential_shortcut=False))
        deployed = summarize(replay_deployment([DeployedServer("aggregated", perf)], point, 96, 48))
        assert deployed == alone


def test_a_deployments_servers_are_the_twins_models_of_their_shapes_and_their_transfers_take_their_link():
    from grid.topology.deployment import Deployment, RoleGroup, ServerShape, kv_transfer_s
    from grid.twin.deployment import servers_of, transfer_of

    qwen, hw = model("qwen3_30b_a3b"), hardware("h100_x16_ib")
    pd = Deployment((RoleGroup("prefill", 1, ServerShape(tp=8)),
                     RoleGroup("decode", 1, ServerShape(tp=8, attn_dp=8, ep=8))), router_policy="round_robin")
    servers = servers_of(pd, qwen, hw, "0.5.23", {"kv_cache_dtype": "auto"})
    assert [s.role for s in servers] == ["prefill", "decode"]
    assert (servers[0].perf.tp, servers[0].perf.dp_attention) == (8, False)
    assert (servers[1].perf.tp, servers[1].perf.dp, servers[1].perf.dp_attention) == (8, 8, True)
    transfer = transfer_of(pd, qwen, hw)
    # the prefill server fills node 0, the decode server node 1: the KV crosses the network
    assert transfer(0, 1, 4096, 2) == kv_transfer_s(pd, qwen, hw, 4096, 2) > 0.020
    # DeepSeek-V3's FP8 weights do not fit eight 80 GB GPUs: known to fail at start, no forecast
    with pytest.raises(ValueError, match=r"the prefill server TP8 is known to fail on h100_x16_ib: weights_oom"):
        servers_of(pd, model("deepseek_v3_fp8"), hw, "0.5.23", {})
    # pipeline parallelism with speculative decoding on the decode servers: SGLang 0.5.23 refuses it at launch
    with pytest.raises(ValueError, match=r"1P1D P:TP8 D:TP8 DP8 EP8: the twin refuses the decode server TP8 DP8 EP8"):
        servers_of(Deployment((pd.groups[0], dataclasses.replace(pd.groups[1], settings=(
            ("pp_size", 2), ("speculative_algorithm", "EAGLE")))), router_policy="round_robin"), qwen, hw, "0.5.23", {})
