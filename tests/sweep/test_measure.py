"""One trial end to end without Ray: the twin launched by a ServerSession, load points, Parquet files."""

import socket

import pyarrow.parquet as pq

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.server.session import ServerSession
from grid.storage.parquet import read_table, recorded_hashes
from grid.sweep.measure import clip_message, measure_trial
from grid.sweep.space import expand



def spec_for(tmp_path, *overrides):
    return compose_spec(["model=llama3_1_8b", "hardware=h100_x1", "load.concurrency=[1,4]", "load.input_len=32",
                         "load.output_len=16", *overrides], tmp_path)


def run_one(spec):
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    plan = expand(spec)[0]
    reported = []
    rows = measure_trial(spec, engine, plan, ServerSession(), trial_id="t0", on_point=reported.append)
    return plan, rows, reported


def test_working_trial_records_every_table(tmp_path):
    spec = spec_for(tmp_path)
    plan, rows, reported = run_one(spec)
    assert [r["status"] for r in rows] == ["ok", "ok"] and len(reported) == 2
    assert rows[0]["trial_status"] == "ok" and rows[0]["kv_capacity_tokens"] > 100_000
    assert rows[1]["output_tok_per_s"] > rows[0]["output_tok_per_s"] > 0
    assert rows[0]["startup_s"] > 0 and "--model-path" in rows[0]["command"]
    assert recorded_hashes(tmp_path) == {plan.config_hash: "ok"}
    requests = read_table(tmp_path, "requests")
    assert requests.num_rows == rows[0]["num_prompts"] + rows[1]["num_prompts"]
    assert set(requests.column("output_tokens").to_pylist()) == {16}
    log = read_table(tmp_path, "server_log").to_pylist()
    assert {r["kind"] for r in log} >= {"prefill"}
    assert not list((tmp_path / "parquet" / "load_points").glob(".*tmp"))
    # every row of every table names its node: outside Ray no node id, this host; the twin has no NVML GPUs
    host = socket.gethostname()
    assert {(r["node_id"], r["node_hostname"], r["gpu_uuids"]) for r in rows} == {(None, host, None)}
    for table in ("requests", "server_log", "server_metrics", "gpu_telemetry"):
        t = read_table(tmp_path, table)
        assert t.num_rows > 0, table
        assert set(t.column("node_hostname").to_pylist()) == {host}, table


def test_node_columns_come_from_the_given_node(tmp_path):
    spec = spec_for(tmp_path, "load.concurrency=[1]")
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    node = {"node_id": "ab" * 28, "node_hostname": "gpu-node-7", "gpu_uuids": ["GPU-1111", "GPU-2222"]}
    rows = measure_trial(spec, engine, expand(spec)[0], ServerSession(), trial_id="t1", node=node)
    assert rows[0]["node_id"] == "ab" * 28 and rows[0]["gpu_uuids"] == ["GPU-1111", "GPU-2222"]
    stored = read_table(tmp_path, "load_points").to_pylist()
    assert stored[0]["gpu_uuids"] == ["GPU-1111", "GPU-2222"] and stored[0]["node_hostname"] == "gpu-node-7"
    assert set(read_table(tmp_path, "requests").column("node_id").to_pylist()) == {"ab" * 28}


def test_failed_start_records_not_run_points(tmp_path):
    spec = spec_for(tmp_path, "server.mem_fraction_static=0.1")
    plan, rows, reported = run_one(spec)
    assert reported == []
    assert [r["status"] for r in rows] == ["not_run", "not_run"]
    # 0.1 of the GPU leaves no room for a KV pool: SGLang's "Not enough memory. Please try to increase
    # --mem-fraction-static." (the twin's kv_pool_not_enough_memory row), its own class, not a crash or an OOM
    assert rows[0]["trial_status"] == "failed" and rows[0]["trial_error_class"] == "startup_kv_pool"
    assert "Not enough memory. Please try to increase --mem-fraction-static" in rows[0]["log_tail"]
    assert rows[0]["log_tail"] and rows[0]["output_tok_per_s"] is None
    t = pq.read_table(tmp_path / "parquet" / "load_points" / f"{plan.config_hash}.parquet")
    assert t.num_rows == 2


def test_a_workload_longer_than_the_context_is_refused_before_launch(tmp_path):
    # prompts longer than Llama 3.1's 131072-token context: SGLang (and the twin) would answer HTTP 400 to every
    # request, so nothing is launched; the reason names the load keys and the model's limit
    spec = spec_for(tmp_path, "load.input_len=140000", "load.concurrency=[1]", "load.min_prompts=2",
                    "load.warmup_requests=0")
    plan, rows, reported = run_one(spec)
    assert {(r["trial_status"], r["trial_error_class"]) for r in rows} == {("invalid", "refused")}
    msg = rows[0]["trial_error_message"]
    assert "load.input_len (140000) + load.output_len (16) = 140016 tokens" in msg
    assert "the model's context length (131072 tokens" in msg


def test_every_point_failing_fails_the_trial_with_the_requests_error(tmp_path):
    # ShareGPT prompts (lengths known only from the data) longer than Llama 3.1's 131072-token context: the twin
    # answers HTTP 400 with SGLang's words to every request. The trial takes the requests' class, context_exceeded: a
    # workload failure (invalid), not a broken server, and no check request blames the server
    import json

    data = tmp_path / "long.json"
    data.write_text(json.dumps([{"conversations": [{"from": "human", "value": "word " * 140000},
                                                   {"from": "gpt", "value": "ok then"}]}]))
    spec = spec_for(tmp_path, "load.dataset=sharegpt", f"load.dataset_path={data}", "load.concurrency=[1]",
                    "load.min_prompts=2", "load.warmup_requests=0", "engine.api=completions")
    plan, rows, reported = run_one(spec)
    assert [r["status"] for r in rows] == ["failed"] and rows[0]["error_class"] == "context_exceeded"
    assert rows[0]["trial_status"] == "invalid" and rows[0]["trial_error_class"] == "context_exceeded"
    msg = rows[0]["trial_error_message"]
    assert msg.startswith("every load point failed; point 0: 2 of 2 requests failed, first context_exceeded: HTTP 400")
    assert "is longer than the model's context length (131072 tokens)" in msg


def test_repeats_measure_every_level_again_with_its_own_repeat_index(tmp_path):
    from grid.plan import load_points

    spec = spec_for(tmp_path, "load.repeats=2", "load.concurrency=[1,2]", "load.min_prompts=2")
    plan = expand(spec)[0]
    assert [(p.value, p.seed) for p in load_points(plan)] == [(1.0, 1000), (2.0, 1001), (1.0, 1002), (2.0, 1003)]
    assert plan.config_hash != expand(spec_for(tmp_path, "load.concurrency=[1,2]", "load.min_prompts=2"))[0].config_hash
    assert expand(spec_for(tmp_path, "load.repeats=1"))[0].config_hash == expand(spec_for(tmp_path))[0].config_hash
    plan, rows, _ = run_one(spec)
    assert [(r["point_index"], r["repeat_index"], r["point_value"], r["status"]) for r in rows] == [
        (0, 0, 1.0, "ok"), (1, 0, 2.0, "ok"), (2, 1, 1.0, "ok"), (3, 1, 2.0, "ok")]
    requests = read_table(tmp_path, "requests").to_pylist()
    assert sorted({(r["point_index"], r["repeat_index"]) for r in requests}) == [(0, 0), (1, 0), (2, 1), (3, 1)]


def test_a_sweep_varying_the_numerics_runs_the_accuracy_prompts(tmp_path):
    from grid.sweep.measure import accuracy_role

    spec = spec_for(tmp_path, "+sweep=mem_fraction", "~sweep.load", "~sweep.grid.mem_fraction_static",
                    "+sweep.grid.kv_cache_dtype=[bfloat16,fp8_e4m3]", "load.concurrency=[1]")
    plans = expand(spec)
    assert [accuracy_role(spec, p) for p in plans] == ["baseline", "differs: kv_cache_dtype"]
    assert accuracy_role(spec_for(tmp_path, "+sweep=mem_fraction"), expand(spec_for(
        tmp_path, "+sweep=mem_fraction"))[0]) is None                    # mem_fraction changes no numerics
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    rows = measure_trial(spec, engine, plans[1], ServerSession(), trial_id="t1")
    assert (rows[0]["accuracy_exact_match"], rows[0]["accuracy_role"]) == (1.0, "differs: kv_cache_dtype")
    acc = read_table(tmp_path, "accuracy").to_pylist()
    assert len(acc) == 20 and all(r["correct"] for r in acc) and acc[0]["prompt_id"] == "add_1"


def test_early_stop_skips_the_levels_above_a_missed_slo(tmp_path):
    from grid.search.predict import level_forecasts

    # p99 TPOT <= 0.5 ms: no level of Llama 3.1 8B on one H100 meets it (the twin's TPOT there is ~6 ms)
    spec = spec_for(tmp_path, "load.concurrency=[1,2,4]", "load.min_prompts=2", "objective.slo.tpot_ms=0.5")
    plan, rows, reported = run_one(spec)
    assert [(r["status"], r["error_class"], r["slo_met"]) for r in rows] == [
        ("ok", None, False), ("not_run", "early_stop_slo", None), ("not_run", "early_stop_slo", None)]
    assert len(reported) == 1 and rows[0]["trial_status"] == "ok"
    assert rows[1]["skip_reason"] == "the SLOs were already missed at concurrency 1; a higher level only adds load"
    forecasts = level_forecasts(spec, plan, get_engine(spec).version())
    assert [r["forecast_duration_s"] for r in rows] == [None, forecasts[("concurrency", 2.0)].duration_s,
                                                        forecasts[("concurrency", 4.0)].duration_s]
    assert read_table(tmp_path, "requests").num_rows == rows[0]["num_prompts"]  # nothing sent for the skipped ones
    # search.early_stop=false measures every level
    spec = spec_for(tmp_path / "off", "load.concurrency=[1,2,4]", "load.min_prompts=2", "objective.slo.tpot_ms=0.5",
                    "search.early_stop=false")
    _, rows, _ = run_one(spec)
    assert [(r["status"], r["slo_met"]) for r in rows] == [("ok", False)] * 3


def test_early_stop_skips_a_level_whose_twin_bound_is_below_the_best_recorded(tmp_path):
    from grid.search.predict import level_forecasts
    from grid.sweep.measure import recorded_best

    first = spec_for(tmp_path, "load.concurrency=[1,2,8]")
    _, rows_a, _ = run_one(first)
    best = recorded_best(first)
    assert best == max(r["output_tok_per_s"] for r in rows_a)     # its concurrency-8 point, as the report scores it
    # a second configuration in the same run: its first level always runs; concurrency 2 cannot reach the first
    # one's best, concurrency 8 can
    second = spec_for(tmp_path, "load.concurrency=[1,2,8]", "server.mem_fraction_static=0.8")
    plan, rows_b, _ = run_one(second)
    f1 = level_forecasts(second, plan, get_engine(second).version())[("concurrency", 2.0)]
    assert f1.value / 0.75 < best
    assert [(r["status"], r["error_class"]) for r in rows_b] == [
        ("ok", None), ("not_run", "early_stop_twin_bound"), ("ok", None)]
    assert rows_b[1]["skip_reason"] == (
        f"the twin's upper bound here, {f1.value / 0.75:.4g} tok/s (forecast {f1.value:.4g} / (1 - 0.25)), is below "
        f"the best measured {best:.4g} tok/s")
    assert rows_b[1]["forecast_duration_s"] == f1.duration_s


def test_capacity_is_found_by_bisection_on_one_launch(tmp_path):
    from grid.report.select import meets_slos, rank, rejudge
    from grid.search.predict import capacity_bracket, forecast
    from grid.search.levels import bracket, next_rate

    spec = spec_for(tmp_path, "load.input_len=512", "load.output_len=64", "objective=max_capacity",
                    "objective.slo.tpot_ms=9", "objective.slo.ttft_ms=null")
    plan = expand(spec)[0]
    f = forecast(spec, plan, get_engine(spec).version())
    # the twin's own bisection in virtual time, from 1 req/s, 101 requests per probe (load.min_prompts' default: a
    # p99 that is not the slowest request); with 8 per probe the same SLO held to 8 req/s
    assert f.value == 6.0
    lo, hi = capacity_bracket(spec, f.value)
    assert (lo, hi) == (4.8, 8.0)                 # 6.0 / 1.25, 6.0 / 0.75
    plan, rows, _ = run_one(spec)
    # every recorded point is one probe, each the bisection's next step after the ones before it, judged as the
    # report judges the recorded requests
    requests = read_table(tmp_path, "requests").to_pylist()
    judged = rejudge(rows, requests, spec.objective.slo)
    probes = [(r["point_value"], meets_slos(r, spec.objective.slo)) for r in judged]
    assert [r["point_kind"] for r in rows] == ["rate"] * len(rows) and rows[0]["point_value"] == 4.8
    for i, (rate, _) in enumerate(probes):
        assert rate == next_rate(probes[:i], lo, hi, 0.05, 10)
    assert next_rate(probes, lo, hi, 0.05, 10) is None
    cap, above = bracket(probes)
    assert len(probes) == 10 or cap is None or above is None or above - cap <= 0.05 * cap
    # the report's score is the highest rate that held
    assert {r["repeat_index"] for r in requests} == {0} and {r["repeat_index"] for r in rows} == {0}
    assert sorted({r["point_index"] for r in requests}) == list(range(len(rows)))
    verdict = rank(judged, spec.objective)[0]
    assert verdict.score == cap


def test_the_twins_startup_is_its_own_modelled_startup_not_the_scaled_host_latency(tmp_path):
    """The launcher's clock (real seconds to the first 200 of /health_generate x startup_time_scale) also scales the
    host's process start and polling; the twin reports its own modelled startup, and that is what is recorded: the
    startup phases of its model (weight load, KV pool, CUDA graphs, warm-up) plus its warm-up request."""
    import json

    from grid.search.predict import forecast

    spec = spec_for(tmp_path, "load.concurrency=[1]", "engine.startup_time_scale=200")
    plan, rows, _ = run_one(spec)
    info = json.loads(rows[0]["server_info_json"])
    assert rows[0]["startup_s"] == info["twin_startup_s"]
    modelled = forecast(spec, plan, get_engine(spec).version()).startup_s
    # the modelled phases (12.98 s for Llama-3.1-8B on one H100) plus the warm-up request (8 tokens, ~0.03 s); the
    # launcher's clock said ~260-315 s here (~1.3-1.6 real s of process start and polling x 200)
    assert round(modelled, 2) == 12.98
    assert modelled < rows[0]["startup_s"] < modelled + 1.0


def test_startup_seconds_prefers_the_twins_own_report():
    from grid.sweep.measure import startup_seconds

    class NotTwin:
        twin = False

    class Twin:
        twin = True

    assert startup_seconds(Twin(), 301.4, {"twin_startup_s": 226.512}) == 226.512
    assert startup_seconds(Twin(), 301.4, None) == 301.4          # not up: no /server_info
    assert startup_seconds(Twin(), 301.4, {"twin_startup_s": None}) == 301.4
    assert startup_seconds(NotTwin(), 301.4, {"twin_startup_s": 226.512}) == 301.4


def test_progress_messages_are_cut_at_a_word_boundary():
    # the refusal of fa3 on SM120 as the nsa_backends sweep printed it, once cut mid-word at 200 characters
    text = ("refused: rtx_pro_6000_x8_vm (SM120) cannot run this configuration: FlashAttention-3 (fa3) requires "
            "compute capability 9.0 (Hopper wgmma/TMA) (source: failure table dsa_fa3_sm120: FlashAttention-3 is "
            "Hopper-only (Dao-AILab/flash-attention README))")
    assert clip_message(text) == (
        "refused: rtx_pro_6000_x8_vm (SM120) cannot run this configuration: FlashAttention-3 (fa3) requires "
        "compute capability 9.0 (Hopper wgmma/TMA) (source: failure table dsa_fa3_sm120: FlashAttention-3 is …")
    assert clip_message("short\n  message") == "short message"
    assert clip_message(None) == ""
    assert clip_message("x" * 30, width=10) == "xxxxxxxx …"


def test_progress_line_names_the_repeat():
    from rich.console import Console

    from grid.sweep.progress import ProgressCallback
    from grid.sweep.trial import REPORTED

    assert "repeat_index" in REPORTED     # the trial reports it with every load point
    console = Console(record=True, width=200)
    cb = ProgressCallback({}, 1, console)
    point = {"point_index": 5, "point_kind": "concurrency", "point_value": 64.0, "status": "ok",
             "output_tok_per_s": 298.545, "ttft_median_ms": 356.54, "tpot_median_ms": 214.061}
    cb.on_trial_result(0, [], None, {**point, "repeat_index": 1})
    cb.on_trial_result(0, [], None, {**point, "point_index": 2, "repeat_index": 0})
    assert console.export_text().splitlines() == [
        "   point 5 (concurrency 64, repeat 1): ok  out 298.5 tok/s  TTFT p50 357 ms  TPOT p50 214.1 ms",
        "   point 2 (concurrency 64): ok  out 298.5 tok/s  TTFT p50 357 ms  TPOT p50 214.1 ms"]


def test_the_gate_catches_a_speculative_configuration_planted_to_answer_differently(tmp_path):
    """With greedy sampling a speculative configuration must answer token for token as the same
    configuration without it. The twin plays a speculative server whose answer to one accuracy prompt of twenty
    diverges from its first token (GRID_TWIN_FAULTS speculative_divergence); the plain one is healthy under the same
    fault list. The exact-match share drops 5 points, under the default accuracy.max_drop of 10: the token
    comparison alone catches it."""
    import io
    import json

    from rich.console import Console

    from grid.app import report
    from grid.sweep.measure import accuracy_role

    fault = json.dumps([{"kind": "speculative_divergence", "after_tokens": 0, "prompt_contains": "17 + 26"}])
    spec = spec_for(tmp_path, "+sweep.name=spec", "load.concurrency=[1]", f"+engine.env.GRID_TWIN_FAULTS='{fault}'",
                    "load.output_len=96",  # a Decode line every 40 steps
                    "+sweep.configs=[{},{speculative_algorithm:EAGLE,speculative_num_steps:2,"
                    "speculative_eagle_topk:1,speculative_num_draft_tokens:3}]")
    plans = expand(spec)
    assert [accuracy_role(spec, p) for p in plans] == [
        "baseline", "differs: speculative_algorithm, speculative_eagle_topk, speculative_num_draft_tokens, "
                    "speculative_num_steps"]
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    for i, plan in enumerate(plans):
        rows = measure_trial(spec, engine, plan, ServerSession(), trial_id=f"t{i}")
    # the speculative server logs and serves its acceptance length; every load point records it
    # (the twin's default for 2 steps and 3 draft tokens: 1 + 0.85 + 0.67, grid/twin/speculative.py; the log prints
    # two decimals)
    assert abs(rows[0]["server_accept_len_mean"] - 2.52) < 1e-9
    assert abs(rows[0]["srv_spec_accept_length_mean"] - 2.52) < 1e-9
    acc = {(r["config_hash"], r["prompt_id"]): r["reply"] for r in read_table(tmp_path, "accuracy").to_pylist()}
    plain, spec_hash = plans[0].config_hash, plans[1].config_hash
    assert acc[(spec_hash, "add_1")] != acc[(plain, "add_1")]
    verdicts = {v.config_hash: v for v in report(spec, Console(file=io.StringIO()))}
    assert verdicts[plain].outcome == "best"
    bad = verdicts[spec_hash]
    assert bad.outcome == "less_accurate" and bad.score is None
    assert f"answers differ from the same configuration without speculative decoding ({plain})" in bad.reason
    assert "prompt add_1, first difference at character 1 (" in bad.reason  # after the leading space
    assert "less accurate: 95% of" not in bad.reason  # not the exact-match gate
    # a configuration that answers differently is not recommended for any load either
    assert "Speculative decoding per load" not in (tmp_path / "report.md").read_text()
