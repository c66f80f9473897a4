"""Pipeline parallelism, speculative decoding, the twin's refusals of what it cannot represent, and ranking fidelity
(does the twin order the seed session's configurations, and size flag effects, as the sources measured them?)."""

from __future__ import annotations

import math

import pytest

from grid.releases.checks import check_config
from grid.twin import cli
from grid.twin.failures import find_failures
from grid.twin.perf import PerfModel, ServingConfig
from grid.twin.pipeline import PipelinePerf, stage_model, transfer_s
from grid.twin.scheduler import TwinRequest
from grid.twin.simulate import simulate
from grid.twin.speculative import SpeculativePerf, default_accept_length

from ._specs import hardware, model

GLM, QWEN, LLAMA, GPT_OSS = model("glm5_nvfp4"), model("qwen3_30b_a3b"), model("llama3_1_8b"), model("gpt_oss_20b")
NEXT = model("qwen3_next_80b_a3b")
VM, BM = hardware("rtx_pro_6000_x8_vm"), hardware("rtx_pro_6000_x8")
E1 = dict(tp_size=8, cuda_graph_max_bs=32, kv_cache_dtype="bfloat16", moe_runner_backend="cutlass",
          mem_fraction_static=0.92)
MTP = dict(speculative_algorithm="NEXTN", speculative_num_steps=3, speculative_eagle_topk=1,
           speculative_num_draft_tokens=4)


# --- pipeline parallelism --------------------------------------------------------------------------------------------
def test_stage_model_splits_layers_and_weights():
    s = stage_model(GLM, 3)
    assert (s.num_layers, s.dense_layers) == (26, 1)  # ceil(78/3), ceil(3/3)
    assert s.loaded_weight_gb == pytest.approx(GLM.loaded_weight_gb * 26 / 78)
    assert stage_model(GLM, 1) is GLM
    with pytest.raises(ValueError, match="pp_size must be between 1 and the model's 78 layers"):
        stage_model(GLM, 79)


def test_pipeline_is_chosen_by_pp_size_and_holds_more_kv():
    a100 = hardware("a100_x2")
    pp1 = PerfModel(QWEN, a100, ServingConfig())
    pp2 = PerfModel(QWEN, a100, ServingConfig(pp_size=2))
    assert type(pp1) is PerfModel and type(pp2) is PipelinePerf
    assert pp2.model.num_layers == 24 and pp2.full_model.num_layers == 48
    assert pp2.weight_gb_per_gpu == pytest.approx(pp1.weight_gb_per_gpu / 2, rel=0.03)  # embedding + head per stage
    assert pp2.kv_capacity_tokens > 2 * pp1.kv_capacity_tokens  # half the layers per token, far more free memory


def test_pipeline_decode_cycle_and_bubble():
    p = PerfModel(QWEN, hardware("a100_x2"), ServingConfig(pp_size=2))
    stage = PerfModel.decode_step_s(p, 1, 100)  # one stage (the parent's formula on the stage model)
    assert p.decode_step_s(1, 100) == pytest.approx(2 * (stage + transfer_s(p, 1)))
    stage32 = PerfModel.decode_step_s(p, 32, 3200)
    assert p.decode_step_s(64, 6400) == pytest.approx(2 * (stage32 + transfer_s(p, 32)))
    # a single stream gains nothing from PP (the bubble); 64 streams get nearly twice the single-GPU batch rate
    one = PerfModel(QWEN, hardware("a100_x1"), ServingConfig())
    assert p.decode_step_s(1, 100) > one.decode_step_s(1, 100)


def test_pipeline_hand_off_crosses_the_vm_bridge_once_per_stage():
    # In the seed's VM every NCCL call costs ~470 us: TP8 pays it 157 times per step, PP pays it once per stage.
    p = PerfModel(GLM, VM, ServingConfig(tp_size=4, pp_size=2))
    assert transfer_s(p, 1) == pytest.approx(VM.allreduce_latency_us * 1e-6 + GLM.hidden_size * 2 / 4 / 8e9)


def test_pipeline_prefill_fills_and_drains():
    p = PerfModel(LLAMA, hardware("h100_x8"), ServingConfig(pp_size=4))
    one = PerfModel.prefill_step_s(p, 2048, 0, 1)
    assert p.prefill_step_s(2048, 0, 1) == pytest.approx(4 * one + 4 * transfer_s(p, 2048))
    four = PerfModel.prefill_step_s(p, 2048, 0, 4)
    assert p.prefill_step_s(8192, 0, 16) == pytest.approx(7 * four + 4 * transfer_s(p, 2048))


# --- speculative decoding --------------------------------------------------------------------------------------------
def test_speculative_step_is_iteration_over_acceptance_length():
    p = PerfModel(GLM, BM, ServingConfig(**E1, **MTP, speculative_accept_length=2.5))
    assert type(p) is SpeculativePerf
    t = p.iteration_terms(8, 8)
    assert p.decode_step_s(8, 8) == pytest.approx(t["total"] / 2.5)
    assert t["total"] == pytest.approx(t["verify"] + t["draft"])
    assert default_accept_length(3, 4) == pytest.approx(1 + 0.85 + 0.67 + 0.51)
    assert PerfModel(GLM, BM, ServingConfig(**E1, **MTP)).accept_length == pytest.approx(3.03)


def test_speculative_errors_name_the_setting():
    with pytest.raises(ValueError, match="the twin models EAGLE, EAGLE3, NEXTN only"):
        PerfModel(GLM, BM, ServingConfig(**E1, speculative_algorithm="NGRAM"))
    with pytest.raises(ValueError, match="speculative_accept_length must be between 1 and"):
        PerfModel(GLM, BM, ServingConfig(**E1, **MTP, speculative_accept_length=9.0))
    with pytest.raises(ValueError, match="the twin cannot model --pp-size 2 with --speculative-algorithm"):
        PerfModel(GLM, BM, ServingConfig(**{**E1, "tp_size": 4}, pp_size=2, **MTP))
    assert cli.accept_length_from({"GRID_TWIN_SPEC_ACCEPT_LENGTH": "2.5"}) == 2.5
    with pytest.raises(ValueError, match="GRID_TWIN_SPEC_ACCEPT_LENGTH must be a number"):
        cli.accept_length_from({"GRID_TWIN_SPEC_ACCEPT_LENGTH": "x"})


def test_twin_cli_passes_speculative_and_pp_flags():
    args = cli.parse_args(["--model-path", "m", "--tp-size", "8", "--speculative-algorithm", "NEXTN",
                           "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                           "--speculative-num-draft-tokens", "4"], "0.5.9")
    cfg = cli.to_serving_config(args, 2.5)
    assert (cfg.speculative_algorithm, cfg.speculative_num_steps, cfg.speculative_eagle_topk,
            cfg.speculative_num_draft_tokens, cfg.speculative_accept_length) == ("NEXTN", 3, 1, 4, 2.5)
    args = cli.parse_args(["--model-path", "m", "--pp-size", "2", "--disable-overlap-schedule"], "0.5.9")
    assert cli.to_serving_config(args).pp_size == 2


# --- what the twin refuses -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings, words", [
    ({"tp_size": 8, "nnodes": 2}, "the twin cannot model --nnodes 2 here: the hardware description (unknown) is one"),
    ({"tp_size": 8, "disaggregation_mode": "prefill"}, "the twin cannot model --disaggregation-mode prefill"),
])
def test_twin_refuses_what_it_cannot_represent(settings, words):
    reasons = check_config(settings, "0.5.9", GLM, twin=True)
    assert reasons and reasons[0].startswith(words) and "docs/twin.md#what-the-twin-refuses" in reasons[0]
    assert check_config(settings, "0.5.9", GLM) == []  # SGLang itself accepts these


@pytest.mark.parametrize("arch, feature", [("GptOssForCausalLM", "without its window (sliding-window attention"),
                                           ("Qwen3NextForCausalLM", "without its linear-attention layers")])
def test_twin_refuses_unmodelled_attention(arch, feature):
    m = QWEN.model_copy(update={"architecture": arch})
    reasons = check_config({"tp_size": 1}, "0.5.9", m, twin=True)
    assert reasons == [check_config({"tp_size": 1}, "0.5.23", m, twin=True)[0]]
    assert reasons[0].startswith(f"the twin cannot model {arch} {feature}")
    args = cli.parse_args(["--model-path", "m"], "0.5.9")
    cli.resolve_args(args, m)
    with pytest.raises(ValueError, match=f"the twin cannot model {arch}"):
        cli.check_server_args(args, m)


# --- sliding-window attention ---------------------------------------------------------------------------------------
def test_sliding_window_caps_kv_reads_and_grows_the_pool():
    h100 = hardware("h100_x1")
    swa = PerfModel(GPT_OSS, h100, ServingConfig())
    plain = PerfModel(GPT_OSS.model_copy(update={"sliding_window": 0, "sliding_window_layers": 0}), h100,
                      ServingConfig())
    assert type(plain) is PerfModel
    assert type(swa).__name__ == "SlidingWindowPerfModel"
    assert check_config({"tp_size": 1}, "0.5.9", GPT_OSS, twin=True) == []  # the window is described: modelled
    # 12 of 24 layers slide: 32 requests x 1,000 tokens read 0.5 x 32,000 + 0.5 x 32 x 128 context tokens' KV
    assert swa._effective_context(32, 32000) == pytest.approx(0.5 * 32000 + 0.5 * 32 * 128)
    assert swa.decode_step_s(32, 32000) == pytest.approx(PerfModel.decode_step_s(swa, 32, 18048))
    assert swa._effective_context(32, 2000) == 2000  # contexts shorter than the window: no change
    # the sliding layers hold 0.8 x the full layers' slots (--swa-full-tokens-ratio): pool x 1 / (0.5 + 0.4)
    assert swa.kv_capacity_tokens == int(plain.kv_capacity_tokens / 0.9)
    pp = PerfModel(GPT_OSS, hardware("h100_x8"), ServingConfig(pp_size=2))
    assert type(pp).__name__ == "SlidingWindowPipelinePerf" and pp.model.sliding_window_layers == 6


def test_hybrid_linear_attention_state_pool_and_reads():
    h200 = hardware("h200_x8")
    hyb = PerfModel(NEXT, h200, ServingConfig(tp_size=2))
    plain = PerfModel(NEXT.model_copy(update={"linear_attention_layers": 0, "linear_state_bytes": 0}), h200,
                      ServingConfig(tp_size=2))
    assert type(hyb).__name__ == "HybridLinearPerfModel" and type(plain) is PerfModel
    assert check_config({"tp_size": 2}, "0.5.9", NEXT, twin=True) == []
    # memory split 1 : 0.9 between the full layers' KV (12 of 48 layers) and 38.6 MB of state per request per GPU
    kv_mem = plain.kv_capacity_tokens * plain.kv_cell_bytes
    assert hyb.kv_capacity_tokens == int(kv_mem / 1.9 / (plain.kv_cell_bytes * 0.25))
    assert hyb.linear_state_slots == int(kv_mem * 0.9 / 1.9 / (77266944 / 2))
    assert hyb.max_running_requests == min(4096, hyb.linear_state_slots)
    per_token = hyb._kv_read_bytes_per_token()
    assert hyb._effective_context(8, 16000) == pytest.approx(0.25 * 16000 + 8 * 2 * 77266944 / 2 / per_token)


# --- ranking fidelity: the seed session's configurations and published flag effects --------------------------------
def _seed(**kw) -> PerfModel:
    return PerfModel(GLM, VM, ServingConfig(tp_size=8, dsa_prefill_backend="trtllm", dsa_decode_backend="trtllm",
                                            kv_cache_dtype="bfloat16", **kw))


def _out_tok_s(p: PerfModel, n: int, isl: int, osl: int) -> float:
    return simulate(p, [(0.0, TwinRequest(f"r{i}", isl, osl)) for i in range(n)]).output_throughput


def test_seed_memory_fraction_orders_kv_capacity_as_measured():
    # seed: 0.85 -> 370K KV tokens, 0.92 -> 498K (ratio 1.35); the twin (bf16 KV here) must order them the same way
    # and size the step within 15%.
    lo, hi = _seed(mem_fraction_static=0.85), _seed(mem_fraction_static=0.92)
    ratio = hi.kv_capacity_tokens / lo.kv_capacity_tokens
    assert ratio > 1 and math.isclose(ratio, 498 / 370, rel_tol=0.15)


def test_seed_cuda_graphs_buy_little_in_the_vm_but_much_on_bare_metal():
    # seed (VM): graphs on 236 tok/s vs 225 off, 64 streams (+5%): on >= off and under 10% apart.
    off = _out_tok_s(_seed(mem_fraction_static=0.92, cuda_graph=False), 64, 128, 512)
    on = _out_tok_s(_seed(mem_fraction_static=0.92, cuda_graph_max_bs=64), 64, 128, 512)
    assert 1.0 <= on / off < 1.10
    # A5 (one H100, Llama-3-8B bs1): 9.28 ms eager vs 7.06 ms with graphs (1.31x); the twin within 10%.
    h100 = hardware("h100_x1")
    eager = PerfModel(LLAMA, h100, ServingConfig(cuda_graph=False)).decode_step_s(1, 136)
    graph = PerfModel(LLAMA, h100, ServingConfig()).decode_step_s(1, 136)
    assert math.isclose(eager / graph, 9.28 / 7.06, rel_tol=0.10)


def test_seed_nsa_backends_ranked_by_failure_table():
    # seed: flashmla_kv / flashmla_sparse gave NaN on SM120, trtllm coherent answers.
    def ids(**kw):
        cfg = ServingConfig(tp_size=8, **kw)
        return {f.id for f in find_failures(GLM, VM, cfg, PerfModel(GLM, VM, cfg))}

    assert "dsa_flashmla_nan_sm120" in ids(dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="flashmla_kv")
    assert "dsa_flashmla_nan_sm120" not in ids(dsa_prefill_backend="trtllm", dsa_decode_backend="trtllm")


def test_mtp_effect_has_the_published_sign_and_size():
    # E1 (voipmonitor/rtx6kpro models/glm5.md): MTP on/off at c1 93.6 / 50.4 (1.86x), at c64 1424.6 / 1010.6 (1.41x).
    base = PerfModel(GLM, BM, ServingConfig(**E1))
    mtp = PerfModel(GLM, BM, ServingConfig(**E1, **MTP, speculative_accept_length=2.5))
    c1 = base.decode_step_s(1, 1) / mtp.decode_step_s(1, 1)
    c64 = base.decode_step_s(64, 64) / mtp.decode_step_s(64, 64)
    assert math.isclose(c1, 93.6 / 50.4, rel_tol=0.15)
    assert 1.0 < c64 < c1  # the gain shrinks as the batch grows, as published


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_pp_needs_disable_overlap_schedule_before_launch(version):
    assert check_config({"tp_size": 4, "pp_size": 2}, version, GLM) == [
        "Pipeline parallelism is not compatible with overlap schedule"]
    assert check_config({"tp_size": 4, "pp_size": 2, "disable_overlap_schedule": True}, version, GLM) == []


# --- SGLang's launch-time rewrites of the speculative flags ----------------------------------------------------------
def test_speculative_launch_is_resolved_as_sglang_does():
    from grid.twin.speculative import MAX_RUNNING_RESET_LINE, DRAFT_TOKENS_ADJUSTED_LINE, resolve_launch

    s = {"speculative_algorithm": "nextn"}
    assert resolve_launch(s, "GlmMoeDsaForCausalLM") == [MAX_RUNNING_RESET_LINE]
    assert s == {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                 "speculative_num_draft_tokens": 4, "max_running_requests": 48}
    s = {"speculative_algorithm": "EAGLE"}
    resolve_launch(s, "LlamaForCausalLM")
    assert (s["speculative_num_steps"], s["speculative_eagle_topk"], s["speculative_num_draft_tokens"]) == (5, 4, 8)
    s = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 8, "max_running_requests": 128}
    assert resolve_launch(s, "GlmMoeDsaForCausalLM") == [DRAFT_TOKENS_ADJUSTED_LINE]
    assert (s["speculative_num_draft_tokens"], s["max_running_requests"]) == (3, 128)
    s = {"speculative_algorithm": None, "max_running_requests": None}
    assert resolve_launch(s, "GlmMoeDsaForCausalLM") == [] and s["max_running_requests"] is None


def test_the_twin_caps_a_speculative_server_at_48_running_requests_unless_told():
    """The cap, not speculation, costs throughput above 48 streams: SGLang's default with speculative decoding."""
    from grid.twin.perf_of_flags import perf_model

    flags = ["--tp-size", "8", "--speculative-algorithm", "NEXTN"]
    capped = perf_model(GLM, BM, flags, "0.5.9")
    lifted = perf_model(GLM, BM, [*flags, "--max-running-requests", "256"], "0.5.9")
    assert (capped.max_running_requests, lifted.max_running_requests) == (48, 256)
    assert (capped.spec_steps, capped.spec_topk, capped.spec_draft_tokens) == (3, 1, 4)
    assert perf_model(GLM, BM, ["--tp-size", "8"], "0.5.9").max_running_requests > 48


def test_a_speculative_twin_reports_its_acceptance_as_sglang_does():
    """accept len / accept rate in the Decode lines and sglang:spec_accept_* on /metrics, read back by grid's parsers."""
    from grid.server.logparse import parse_batch_line
    from grid.server.metrics_scrape import parse_metrics, summarize_series
    from grid.twin import logs
    from grid.twin.metrics import TwinMetrics
    from grid.twin.speculative import acceptance

    mtp = PerfModel(GLM, BM, ServingConfig(**E1, **MTP, speculative_accept_length=2.5))
    assert acceptance(mtp) == (2.5, pytest.approx(0.5))  # (2.5 - 1) / (4 draft tokens - 1)
    assert acceptance(PerfModel(GLM, BM, ServingConfig(**E1))) == (None, None)
    line = logs.decode_line("0.5.23", running_req=4, num_token=900, token_usage=0.01, cuda_graph=True,
                            gen_throughput=120.0, queue_req=0, accept_len=2.5, accept_rate=0.5)
    assert "token usage: 0.01, accept len: 2.50, accept rate: 0.50, cuda graph: True" in line
    parsed = parse_batch_line(f"[2026-12-03 10:00:00 TP0] {line}")
    assert (parsed["accept_len"], parsed["accept_rate"], parsed["gen_throughput_tok_per_s"]) == (2.5, 0.5, 120.0)
    m = TwinMetrics("glm")
    m.spec_accept_length.set(2.5)
    m.spec_accept_rate.set(0.5)
    got = parse_metrics(m.render().decode())
    assert (got["spec_accept_length"], got["spec_accept_rate"]) == (2.5, 0.5)
    assert summarize_series([got, {**got, "spec_accept_length": 3.5}])["srv_spec_accept_length_mean"] == 3.0
    assert summarize_series([{"spec_accept_length": 0.0}])["srv_spec_accept_length_mean"] is None


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_twins_speculative_decode_line_is_the_releases_own(version):
    """The Decode line with acceptance, assembled from the release's own templates (the catalog, read from the
    released wheel: speculative decoding does not run on this machine's CPU SGLang, rule cpu_speculative), equals
    the twin's and reads back the same."""
    from grid.releases import catalog
    from grid.server.logparse import parse_batch_line
    from grid.twin import logs

    parts = catalog.release(version).log_formats["decode"]
    released = (parts[0].format("", 4, "#token: 900, token usage: 0.01, ") + parts[1].format(2.5, 0.5)
                + next(p for p in parts if "gen throughput" in p).format("cuda graph", True, 120.0, 0))
    twin = logs.decode_line(version, running_req=4, num_token=900, token_usage=0.01, cuda_graph=True,
                            gen_throughput=120.0, queue_req=0, accept_len=2.5, accept_rate=0.5)
    assert twin == released
    parsed = parse_batch_line(f"[2026-12-03 10:00:00] {released}")
    assert (parsed["accept_len"], parsed["accept_rate"], parsed["running_req"]) == (2.5, 0.5, 4)
