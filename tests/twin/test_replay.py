"""One simulation: a load point replayed in process (grid/twin/simulate.py ``replay``: the same scheduler and
performance model, no HTTP) against the same point measured on a live twin on its virtual clock through grid's load
generator. Both go through ``grid.metrics.loadpoint.summarize``; every metric agrees within 1 %."""

from __future__ import annotations

import math

import pytest

from grid.loadgen.dataset import random_prompts
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync
from grid.metrics.loadpoint import summarize
from grid.twin import cli
from grid.twin.perf import PerfModel
from grid.twin.simulate import replay

from .test_server import H100_X1, LLAMA_8B, TwinProc

ISL, OSL = 96, 48
#: load-point metrics that describe the host, not the model
HOST_KEYS = ("client_lag_pct", "real_s")
POINTS = {
    "steady closed loop": LoadPoint("concurrency", 8, 24, warmup_requests=1, steady=True),
    "closed loop, all at once": LoadPoint("concurrency", 4, 12, warmup_requests=1),
    "Poisson open loop": LoadPoint("rate", 30.0, 24, warmup_requests=1, seed=11),
    "capped open loop": LoadPoint("rate", 60.0, 24, warmup_requests=1, seed=12, max_concurrency=3),
}


def _perf() -> PerfModel:
    args = cli.parse_args(["--model-path", "/m", "--served-model-name", "m"], "0.5.9")
    cli.resolve_args(args, LLAMA_8B)
    return PerfModel(LLAMA_8B, H100_X1, cli.to_serving_config(args))


def test_replay_of_a_point_is_what_the_live_twin_measures(tmp_path):
    perf = _perf()
    twin = TwinProc(tmp_path, ["--served-model-name", "m"], scale=1.0, env={"GRID_TWIN_CLOCK": "virtual"})
    assert twin.wait_ready(60)[-1] == 200, twin.log()
    compared = 0
    try:
        for seed, (name, point) in enumerate(POINTS.items()):
            n = point.num_prompts + point.warmup_requests + point.wave_warmup + point.tail_prompts
            prompts = random_prompts(n, ISL, OSL, 1.0, LLAMA_8B.vocab_size, seed=100 + seed)  # new ones: no cache hit
            live = run_load_point_sync(Target(f"http://127.0.0.1:{twin.port}", model="m", clock="virtual"), point,
                                       prompts, read_timeout_s=60.0)
            sim = replay(perf, point, ISL, OSL)
            a, b = summarize(sim), summarize(live)
            assert b["completed"] == point.num_prompts and a["completed"] == b["completed"], name
            assert a["window_kind"] == b["window_kind"], name
            worst = 0.0
            for key, want in b.items():
                got = a[key]
                if key in HOST_KEYS or not isinstance(want, float) or math.isnan(want):
                    continue
                assert got == pytest.approx(want, rel=0.01, abs=1e-9), (name, key, got, want)
                worst = max(worst, abs(got - want) / abs(want) if want else abs(got))
                compared += 1
            print(f"{name}: largest difference {worst:.2e} (relative)")
    finally:
        twin.stop()
    assert compared >= 4 * 20  # TTFT, TPOT, ITL, E2E percentiles, throughputs, concurrency of each point


def test_replay_of_a_closed_loop_started_at_once_is_the_simulation_of_its_requests():
    """Without a warm-up wave or a tail the replay adds nothing to ``simulate``: the same per-request TTFT and E2E
    (modelled ns, exactly), and a window from the first send to the last end."""
    from grid.metrics.request import request_metrics
    from grid.twin.scheduler import TwinRequest
    from grid.twin.simulate import simulate

    perf = _perf()
    sim = replay(perf, LoadPoint("concurrency", 2, 5), ISL, OSL)
    full = simulate(perf, [(0.0, TwinRequest(f"m{i}", ISL, OSL)) for i in range(5)], max_concurrency=2)
    assert sim.window_kind == "all_requests" and sim.clock == "virtual" and sim.window_start_perf_ns == 0
    assert [r.status for r in sim.records] == ["ok"] * 5 and [r.output_tokens for r in sim.records] == [OSL] * 5
    by_rid = {r.rid: r for r in full.requests}
    for rec in sim.records:
        want = by_rid[f"m{rec.request_index}"]
        got = request_metrics(rec, 1.0)
        assert got.ttft_ms == pytest.approx(want.ttft_s * 1e3, abs=1e-6)
        assert got.e2e_ms == pytest.approx(want.e2e_s * 1e3, abs=1e-6)
    assert sim.window_end_perf_ns == max(r.end_perf_ns for r in sim.records)


def _forecast_against_live(twin: TwinProc, model, seed: int) -> tuple[int, int, int]:
    """Each point of one closed-loop and one open-loop level, measured on the live ``twin`` through grid's load
    generator and forecast by the search (grid/search/predict.py ``_simulate_point`` of ``model``): every metric
    within 1%. Returns (metrics compared, requests sent, measured requests)."""
    from grid.config.schema import LoadSpec
    from grid.plan import point_of
    from grid.search import predict

    load = LoadSpec(concurrency=[8], request_rate=[30.0], input_len=ISL, output_len=OSL, min_prompts=24, seed=3)
    compared = sent = measured = 0
    for kind, level in (("concurrency", 8.0), ("rate", 30.0)):
        point = point_of(load, kind, level)
        n = point.num_prompts + point.warmup_requests + point.wave_warmup + point.tail_prompts
        prompts = random_prompts(n, ISL, OSL, 1.0, LLAMA_8B.vocab_size, seed=seed + compared)
        live = summarize(run_load_point_sync(Target(f"http://127.0.0.1:{twin.port}", model="m", clock="virtual"),
                                             point, prompts, read_timeout_s=60.0))
        forecast = predict._simulate_point(model, load, kind, level)
        assert forecast["status"] == "ok" and forecast["completed"] == live["completed"] == point.num_prompts
        for key, want in live.items():
            if key in HOST_KEYS or not isinstance(want, float) or math.isnan(want):
                continue
            assert forecast[key] == pytest.approx(want, rel=0.01, abs=1e-9), (kind, key, forecast[key], want)
            compared += 1
        sent, measured = sent + n, measured + point.num_prompts
    return compared, sent, measured


def test_the_searchs_forecast_of_a_point_is_what_the_live_twin_measures(tmp_path):
    """One simulation: the forecast the search ranks, stops early and estimates cost with (grid/search/predict.py
    ``_simulate_point``: the point the trial runs, replayed and summarized) against the same point measured on a live
    twin through grid's load generator: every metric within 1% (they are the same simulation: 2e-9 here)."""
    twin = TwinProc(tmp_path, ["--served-model-name", "m"], scale=1.0, env={"GRID_TWIN_CLOCK": "virtual"})
    assert twin.wait_ready(60)[-1] == 200, twin.log()
    try:
        compared, _, _ = _forecast_against_live(twin, _perf(), seed=200)
    finally:
        twin.stop()
    assert compared >= 2 * 20


@pytest.mark.parametrize("steady", [True, False])
def test_a_single_stream_replayed_as_one_request_repeated_is_the_full_simulation(steady):
    perf = _perf()
    point = LoadPoint("concurrency", 1, 12, warmup_requests=1, steady=steady)
    fast = summarize(replay(perf, point, ISL, OSL))
    full = summarize(replay(perf, point, ISL, OSL, sequential_shortcut=False))
    compared = 0
    for key, want in full.items():
        if isinstance(want, float) and not math.isnan(want):
            assert fast[key] == pytest.approx(want, rel=1e-9, abs=1e-9), key
            compared += 1
        elif key not in HOST_KEYS:
            assert fast[key] == want or (isinstance(want, float) and math.isnan(fast[key])), key
    assert compared >= 20


@pytest.mark.parametrize("groups", [
    [{"role": "aggregated", "count": 2, "tp": 1, "attn_dp": 1, "ep": 1, "settings": {}}],
    [{"role": "prefill", "count": 2, "tp": 1, "attn_dp": 1, "ep": 1, "settings": {}},
     {"role": "decode", "count": 1, "tp": 2, "attn_dp": 1, "ep": 1, "settings": {}}],
], ids=["2 replicas", "2P1D"])
def test_a_deployments_forecast_is_what_the_live_twin_serving_it_measures(tmp_path, groups):
    """One simulation for deployments too: the twin serving a deployment of several servers as its router's
    endpoint (``GRID_TWIN_DEPLOYMENT``: grid/twin/deployment.py ``DeploymentScheduler`` driven by the live twin's
    loop) against the search's forecast of the same point (``DeploymentModel`` through ``_simulate_point``): every
    metric within 1%."""
    import json

    from grid.server.metrics_scrape import scrape
    from grid.topology.deployment import Deployment
    from grid.twin.deployment import deployment_model

    hw = H100_X1.model_copy(update={"name": "h100_x4", "gpu_count": 4})
    identity = {"groups": groups, "router_policy": "round_robin"}
    model = deployment_model(Deployment.from_identity(identity), LLAMA_8B, hw, "0.5.9", {})
    twin = TwinProc(tmp_path, ["--served-model-name", "m", "--enable-metrics"], scale=1.0, hw=hw,
                    env={"GRID_TWIN_CLOCK": "virtual", "GRID_TWIN_DEPLOYMENT": json.dumps({**identity, "settings": {}})})
    assert twin.wait_ready(60)[-1] == 200, twin.log()
    try:
        compared, sent, measured = _forecast_against_live(twin, model, seed=300)
        # SGLang's PD metric: each measured request's KV moved once (a tail request cut before its prefill ended
        # never moved; the twin's start-up warm-up did), each paying the fixed 20 ms (grid/topology/kv.py
        # DEFAULT_COST) and its few MB over a 370 GB/s NVLink
        scraped = scrape(f"http://127.0.0.1:{twin.port}")
        if groups[0]["role"] == "prefill":
            moved = scraped["kv_transfer_ms_count"]
            assert measured <= moved <= sent + 1
            assert 20.0 < scraped["kv_transfer_ms_sum"] / moved < 20.1
        else:
            assert "kv_transfer_ms_count" not in scraped
    finally:
        twin.stop()
    assert compared >= 2 * 20


def test_a_deployment_on_the_wall_clock_serves_every_request(tmp_path):
    """``engine.clock=real`` with a deployment: the twin's real-clock loop advances the deployment's scheduler by at
    most REAL_CLOCK_SPAN_S modelled seconds at a time, so a request arriving meanwhile reaches an idle server; every
    request of a closed loop completes with all its tokens, each after at least one KV transfer's fixed 20 ms (what
    is asserted is the model's, not the host's timing)."""
    import json

    from grid.loadgen.runner import LoadPoint

    hw = H100_X1.model_copy(update={"name": "h100_x4", "gpu_count": 4})
    groups = [{"role": "prefill", "count": 1, "tp": 1, "attn_dp": 1, "ep": 1, "settings": {}},
              {"role": "decode", "count": 1, "tp": 1, "attn_dp": 1, "ep": 1, "settings": {}}]
    deployment = json.dumps({"groups": groups, "router_policy": "round_robin", "settings": {}})
    twin = TwinProc(tmp_path, ["--served-model-name", "m"], scale=4.0, hw=hw,
                    env={"GRID_TWIN_CLOCK": "real", "GRID_TWIN_DEPLOYMENT": deployment})
    assert twin.wait_ready(120)[-1] == 200, twin.log()
    try:
        point = LoadPoint("concurrency", 2, 6)
        prompts = random_prompts(point.num_prompts, ISL, OSL, 1.0, LLAMA_8B.vocab_size, seed=7)
        res = run_load_point_sync(Target(f"http://127.0.0.1:{twin.port}", model="m", time_scale=4.0), point, prompts,
                                  read_timeout_s=60.0)
    finally:
        twin.stop()
    s = summarize(res)
    assert s["completed"] == 6 and all(r.output_tokens == OSL for r in res.records)
    assert s["ttft_median_ms"] > 20.0
