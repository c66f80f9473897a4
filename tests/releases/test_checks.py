"""grid's pre-launch checks agree with the twin's CLI (which enforces SGLang's launch-time rules as SGLang does)."""

from pathlib import Path

import pytest
import yaml

from grid.config.specs import ModelSpec
from grid.releases.checks import ANY_HARDWARE, RULES, check_config
from grid.releases.flags import parse_version, to_argv
from grid.twin import cli

CONF = Path(__file__).resolve().parents[2] / "conf"


def model(name: str) -> ModelSpec:
    return ModelSpec(**yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text()))


GLM5 = model("glm5_nvfp4")   # DSA model, modelopt_fp4
LLAMA = model("llama3_1_8b")  # dense, no quantization

CONFIGS = [
    {"tp_size": 8},
    {"tp_size": 8, "two_batch_overlap": True},
    {"tp_size": 8, "two_batch_overlap": True, "moe_a2a_backend": "deepep"},
    {"tp_size": 8, "two_batch_overlap": True, "dp_size": 8, "enable_dp_attention": True},
    {"tp_size": 8, "two_batch_overlap": True, "moe_a2a_backend": "deepep_v2"},
    {"tp_size": 8, "two_batch_overlap": True, "moe_a2a_backend": "megamoe"},
    {"tp_size": 8, "enable_priority_scheduling": True, "schedule_policy": "lpm"},
    {"tp_size": 8, "enable_priority_scheduling": True, "schedule_policy": "lof"},
    {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True},
    {"tp_size": 8, "dp_size": 4, "enable_dp_attention": True},
    {"tp_size": 8, "chunked_prefill_size": 1000, "page_size": 64},
    {"tp_size": 8, "chunked_prefill_size": 1024, "page_size": 64},
    {"tp_size": 8, "moe_a2a_backend": "flashinfer"},
    {"tp_size": 8, "moe_a2a_backend": "flashinfer", "moe_runner_backend": "flashinfer_cutlass"},
    {"tp_size": 8, "moe_runner_backend": "flashinfer_cutlass", "ep_size": 2},
    {"tp_size": 8, "moe_runner_backend": "flashinfer_trtllm", "quantization": "awq"},
    {"tp_size": 8, "moe_runner_backend": "cutlass", "quantization": "fp8", "ep_size": 8},
    {"tp_size": 8, "moe_a2a_backend": "mori", "chunked_prefill_size": 8192},
    {"tp_size": 8, "kv_cache_dtype": "fp8_e5m2"},
    {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "trtllm"},
    {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3", "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang"},
    {"tp_size": 8, "kv_cache_dtype": "bfloat16", "dsa_prefill_backend": "tilelang", "dsa_decode_backend": "fa3"},
    {"tp_size": 8, "kv_cache_dtype": "bfloat16", "dsa_decode_backend": "triton"},
    {"tp_size": 4, "pp_size": 2, "disable_overlap_schedule": True, "speculative_algorithm": "EAGLE"},
    {"tp_size": 4, "pp_size": 2, "disable_overlap_schedule": True, "speculative_algorithm": "NEXTN"},
]
VERSIONS = ["0.5.9", "0.5.13", "0.5.14", "0.5.16", "0.5.20", "0.5.22", "0.5.23"]


#: Requirement rules that hold on any hardware: the twin does not refuse what they refuse but dies at start with their
#: failure-table row (tests/twin/test_failure_rules_agree.py holds the row to the rule)
ANYWHERE = tuple(r.message for r in RULES if r.stage == "requirement" and r.hardware == ANY_HARDWARE)


def twin_refuses(settings, version, m) -> bool:
    argv = ["--model-path", "m", *to_argv(settings, parse_version(version))]
    try:
        args = cli.parse_args(argv, version)
    except SystemExit:
        return True
    try:
        cli.resolve_args(args, m)
        cli.check_server_args(args, m)
    except (ValueError, AssertionError):
        return True
    return False


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("m", [GLM5, LLAMA], ids=["glm5", "llama"])
def test_pre_launch_check_agrees_with_the_twin(version, m):
    disagree = []
    for settings in CONFIGS:
        ours = [r for r in check_config(settings, version, m) if not r.startswith(ANYWHERE)]
        if bool(ours) != twin_refuses(settings, version, m):
            disagree.append((settings, ours))
    assert disagree == []


def test_reasons_are_sglangs_messages():
    assert check_config({"two_batch_overlap": True}, "0.5.9") == [
        "When enabling two batch overlap, moe_a2a_backend cannot be 'none'."]
    msg = check_config({"two_batch_overlap": True}, "0.5.23")[0]
    assert "attention DP (--attn-dp-size) is required" in msg
    assert "--enable-dp-attention is required" in check_config({"two_batch_overlap": True}, "0.5.16")[0]
    # refused without DP attention from 0.5.15 (the catalog's refusals), not 0.5.16
    assert "--enable-dp-attention is required" in check_config({"two_batch_overlap": True}, "0.5.15")[0]
    assert "cannot be 'none'" in check_config({"two_batch_overlap": True}, "0.5.14")[0]
    assert check_config({"two_batch_overlap": True, "tp_size": 8, "dp_size": 8, "enable_dp_attention": True},
                        "0.5.16") == []
    assert "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. 'lpm' is not supported." in check_config(
        {"enable_priority_scheduling": True, "schedule_policy": "lpm"}, "0.5.9")[0]
    assert check_config({"enable_priority_scheduling": True, "schedule_policy": "fcfs"}, "0.5.9") == []


def test_pipeline_parallelism_with_speculative_decoding_is_refused_with_each_releases_words():
    eagle = {"tp_size": 4, "pp_size": 2, "disable_overlap_schedule": True, "speculative_algorithm": "EAGLE"}
    assert check_config(eagle, "0.5.9") == [
        "Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed chunked prefill."]
    assert check_config(eagle, "0.5.20") == [
        "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"]
    assert check_config(eagle, "0.5.23") == [
        "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)"]
    assert check_config({**eagle, "speculative_algorithm": "NEXTN"}, "0.5.23") == [
        "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding"]
    assert check_config({**eagle, "disaggregation_mode": "prefill"}, "0.5.23") == []
    assert check_config({**eagle, "pp_size": 1}, "0.5.9") == []


def test_role_switching_refuses_what_it_cannot_rebuild_in_each_releases_words():
    """--enable-pd-role-switch (0.5.21+) on a prefill or decode server: grid's check and the twin's launch give
    handle_pd_disaggregation's ValueError, whose list changed in 0.5.22 (attention DP by --attn-dp-size) and 0.5.23
    (DP attention and DP replicas allowed)."""
    s = {"enable_pd_role_switch": True, "disaggregation_mode": "decode", "tp_size": 8, "dp_size": 2,
         "enable_dp_attention": True, "moe_a2a_backend": "deepep", "speculative_algorithm": "NEXTN"}
    head, tail = ("--enable-pd-role-switch does not rebuild role-specific state for the following features: ",
                  ". Remove these options or drop --enable-pd-role-switch.")
    expected = {
        "0.5.21": "DP attention (--enable-dp-attention), expert parallelism (--ep-size 8), MoE all-to-all "
                  "(--moe-a2a-backend deepep), data parallelism (--dp-size 2), speculative decoding "
                  "(--speculative-algorithm EAGLE)",
        "0.5.22": "attention DP (--attn-dp-size 2), expert parallelism (--ep-size 8), MoE all-to-all (--moe-a2a-backend "
                  "deepep), speculative decoding (--speculative-algorithm EAGLE)",
        "0.5.23": "expert parallelism (--ep-size 8), MoE all-to-all (--moe-a2a-backend deepep), speculative decoding "
                  "(--speculative-algorithm EAGLE)"}
    for version, features in expected.items():
        message = head + features + tail
        assert check_config(s, version) == [message]
        args = cli.parse_args(["--model-path", "m", *to_argv(s, parse_version(version))], version=version)
        cli.resolve_args(args)
        with pytest.raises(ValueError) as err:
            cli.check_server_args(args)
        assert str(err.value) == message
    plain = {"enable_pd_role_switch": True, "disaggregation_mode": "prefill", "tp_size": 8}
    assert check_config(plain, "0.5.23") == []
    assert check_config({**s, "disaggregation_mode": None}, "0.5.23") == []   # no PD role: nothing to switch
    assert check_config({"enable_pd_role_switch": True, "disaggregation_mode": "decode", "tp_size": 4, "dp_size": 2},
                        "0.5.22") == [head + "data parallelism (--dp-size 2)" + tail]


def test_the_twin_refuses_pipeline_parallelism_with_speculative_decoding_where_sglang_starts_it():
    eagle_prefill = {"tp_size": 4, "pp_size": 2, "disable_overlap_schedule": True, "speculative_algorithm": "EAGLE",
                     "disaggregation_mode": "prefill"}
    assert check_config(eagle_prefill, "0.5.23") == []  # SGLang 0.5.21+ starts it on a prefill server
    (why,) = [r for r in check_config(eagle_prefill, "0.5.23", twin=True) if "pp-size" in r]
    assert why.startswith("the twin cannot model --pp-size 2 with --speculative-algorithm EAGLE")


@pytest.mark.parametrize("settings,version,message", [
    ({"schedule_conservativeness": -0.5}, "0.5.23", None),  # grid's own bound (minimum 0) refuses it first
    ({"tp_size": 3, "nnodes": 2}, "0.5.9", "tp_size must be divisible by number of nodes"),
    ({"tp_size": 4, "pp_size": 2, "nnodes": 2, "disable_overlap_schedule": True}, "0.5.23", None),
    ({"tp_size": 8, "dp_size": 2, "nnodes": 2}, "0.5.21", "multi-node data parallel is not supported unless dp "
                                                          "attention!"),
    ({"tp_size": 8, "dp_size": 2, "nnodes": 2}, "0.5.22", None),  # the catalog's 0.5.22 has no such check
    ({"tp_size": 8, "dp_size": 2, "nnodes": 2, "enable_dp_attention": True}, "0.5.21", None),
    ({"enable_dp_lm_head": True, "tp_size": 8, "dp_size": 2}, "0.5.9",
     "Please enable dp attention when setting enable_dp_lm_head."),
    ({"enable_dp_lm_head": True, "tp_size": 8}, "0.5.9", None),  # dp_size 1: SGLang turns the DP LM head off
    ({"enable_dp_lm_head": True, "tp_size": 8}, "0.5.23", None),  # one DP rank: SGLang turns the DP LM head off
    ({"enable_dp_lm_head": True, "tp_size": 8, "dp_size": 2}, "0.5.23",
     "--enable-dp-lm-head requires attention DP (--attn-dp-size)."),
    ({"enable_dp_lm_head": True, "tp_size": 8, "dp_size": 2, "enable_dp_attention": True}, "0.5.23", None),
    ({"served_model_name": "glm:5"}, "0.5.23", "served_model_name cannot contain a colon (':') character. The colon "
     "is reserved for the 'model:adapter' syntax used in LoRA adapter specification. Invalid value: 'glm:5'"),
    # mixed chunked prefill with speculative decoding: every algorithm's handler turns it off (or, from 0.5.19, keeps
    # it where supports_mixed_chunk) before SGLang's assertion reads it, so no release refuses it (real 0.5.9 and
    # 0.5.23 servers start; tests/twin/test_conformance_sglang.py)
    ({"enable_mixed_chunk": True, "speculative_algorithm": "EAGLE"}, "0.5.18", None),
    ({"enable_mixed_chunk": True, "speculative_algorithm": "NGRAM"}, "0.5.23", None),
    ({"enable_mixed_chunk": True, "speculative_algorithm": "NGRAM"}, "0.5.9", None),
])
def test_sglangs_asserts_on_shape_and_names_are_rules_both_sides_read(settings, version, message):
    """Each is a rule in RULES (not a check of the twin's own): grid's pre-launch check and the twin's launch give
    the catalog's message, the twin as SGLang's AssertionError."""
    reasons = check_config(settings, version)
    if message is None:
        assert not any(m in r for r in reasons for m in ("nodes", "multi-node", "lm_head", "lm-head", "colon", "mixed")), \
            reasons
        return
    assert reasons == [message]
    args = cli.parse_args(["--model-path", "m", *to_argv(settings, parse_version(version))], version=version)
    cli.resolve_args(args)
    with pytest.raises(AssertionError) as err:
        cli.check_server_args(args)
    assert str(err.value) == message


def test_a_prefill_server_cannot_use_the_fake_transfer_backend():
    # (not among CONFIGS: the twin refuses every --disaggregation-mode, rule twin_pd_disaggregation)
    fake = {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "fake"}
    assert check_config(fake, "0.5.23") == check_config(fake, "0.5.10") == [
        "Prefill server does not support 'fake' as the transfer backend"]
    assert check_config(fake, "0.5.9") == []  # the catalog's 0.5.9 has no such check
    assert check_config({**fake, "disaggregation_mode": "decode"}, "0.5.23") == []  # a decode pool alone
    assert check_config({**fake, "disaggregation_transfer_backend": "mooncake"}, "0.5.23") == []


def test_choices_and_versions():
    assert "not accepted by SGLang 0.5.9" in check_config({"dsa_decode_backend": "flashinfer_sparse_mla"}, "0.5.9")[0]
    assert check_config({"dsa_decode_backend": "flashinfer_sparse_mla"}, "0.5.23") == []
    assert check_config({"schedule_policy": "hrrn"}, "0.5.23") == []
    assert check_config({"schedule_policy": "hrrn"}, "0.5.9") != []


def test_sim_engine_refuses_before_launch(tmp_path):
    from tests.sweep.test_measure import run_one, spec_for

    spec = spec_for(tmp_path, "model=glm5_nvfp4", "hardware=rtx_pro_6000_x8", "+server.two_batch_overlap=true")
    plan, rows, reported = run_one(spec)
    assert {r["trial_status"] for r in rows} == {"invalid"} and rows[0]["trial_error_class"] == "refused"
    assert "moe_a2a_backend cannot be 'none'" in rows[0]["trial_error_message"]
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").iterdir())


class _Recording(dict):
    """Settings that remember which keys a rule looked at."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: set[str] = set()

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.seen.add(key)
        return super().__contains__(key)


def _corpus() -> list[dict]:
    """Settings that walk every rule's branches: each setting alone at a value that is not its default, then the
    combinations the rules are about (two-batch overlap with a2a backends and attention DP, MoE runners with
    quantizations, sparse-attention backends with KV dtypes, pipeline and cross-node sizes)."""
    import itertools

    out: list[dict] = [{}]
    for a2a, dp_attn, tbo in itertools.product(("none", "deepep", "deepep_v2", "megamoe", "flashinfer", "mori"),
                                               (False, True), (False, True)):
        out.append({"moe_a2a_backend": a2a, "enable_dp_attention": dp_attn, "dp_size": 2, "tp_size": 8,
                    "two_batch_overlap": tbo, "chunked_prefill_size": 8192, "page_size": 64, "ep_size": 2})
    for runner, quant in itertools.product(("auto", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm"),
                                           (None, "fp8", "modelopt_fp4", "awq")):
        out.append({"moe_runner_backend": runner, "quantization": quant, "ep_size": 2, "tp_size": 2,
                    "moe_a2a_backend": "flashinfer"})
    for b, kv in itertools.product(("tilelang", "fa3", "aiter", "trtllm", "flashmla_kv"), ("fp8_e4m3", "fp8_e5m2",
                                                                                           "bfloat16")):
        out.append({"dsa_prefill_backend": b, "dsa_decode_backend": "tilelang", "kv_cache_dtype": kv,
                    "attention_backend": b})
    out += [{"enable_priority_scheduling": True, "schedule_policy": "lpm"},
            {"pp_size": 2, "disable_overlap_schedule": False}, {"torch_compile": True},
            {"nnodes": 2, "tp_size": 16, "pp_size": 1, "dp_size": 1, "moe_a2a_backend": "none"},
            {"disaggregation_mode": "prefill"}, {"max_total_tokens": None, "mem_fraction_static": 0.5}]
    return out


def test_every_rule_declares_the_settings_it_reads():
    """Rule.reads (what rules_reading answers from) covers every key the rule's function reads, over settings that
    walk its branches on every model kind and hardware kind the rules tell apart."""
    from types import SimpleNamespace

    from grid.releases.checks import RULES, rules_reading
    from grid.releases.flags import SETTINGS

    models = [None, SimpleNamespace(dsa=object(), quantization="modelopt_fp4", attention="mla", architecture="X"),
              SimpleNamespace(dsa=None, quantization=None, attention="mha", architecture="GptOssForCausalLM",
                              sliding_window=0, linear_attention_layers=0)]
    hardware = [None, SimpleNamespace(vendor="nvidia", sm_version=120, name="h", nodes=2, gpu_count=8,
                                      internode_link="infiniband", memory_gb=24),
                SimpleNamespace(vendor="cpu", sm_version=None, name="c", nodes=1, gpu_count=0, memory_gb=24)]
    for rule in RULES:
        assert set(rule.reads) <= set(SETTINGS), (rule.name, set(rule.reads) - set(SETTINGS))
        for settings in _corpus():
            for model in models:
                for hw in hardware:
                    s = _Recording(settings)
                    (rule.when(s, model, hw) if rule.with_hardware else rule.when(s, model))
                    assert s.seen <= set(rule.reads), (rule.name, sorted(s.seen - set(rule.reads)))
    assert rules_reading("two_batch_overlap") == ["tbo_needs_a2a", "tbo_needs_dp_attention", "tbo_needs_attn_dp",
                                                  "tbo_deepep_v2", "tbo_megamoe"]
    assert "fa3_needs_sm90" in rules_reading("attention_backend")


def test_a_refusal_names_the_rule_that_refused():
    from grid.releases.checks import refusals

    (r,) = refusals({"two_batch_overlap": True}, "0.5.9")
    assert r.rule is not None and r.rule.name == "tbo_needs_a2a" and r.rule.stage == "launch"
    assert r.message == "When enabling two batch overlap, moe_a2a_backend cannot be 'none'."
    (bad,) = refusals({"schedule_policy": "hrrn"}, "0.5.9")  # the argument parser's, not a rule's
    assert bad.rule is None and "hrrn" in bad.message


@pytest.mark.parametrize("version,backend,prefill,decode,rule", [
    ("0.5.21", "mooncake", {"tp_size": 1}, {"tp_size": 4}, "pd_swa_hetero_attn_tp"),
    ("0.5.9", "nixl", {"tp_size": 2}, {"tp_size": 4}, "pd_swa_hetero_attn_tp"),
    ("0.5.22", "mooncake", {"tp_size": 1}, {"tp_size": 4}, None),            # Mooncake slices the KV heads
    ("0.5.23", "nixl", {"tp_size": 1}, {"tp_size": 4}, "pd_swa_hetero_attn_tp_nixl"),
    ("0.5.23", "mooncake", {"tp_size": 2, "pp_size": 2}, {"tp_size": 4}, "pd_swa_hetero_attn_tp_pp"),
    ("0.5.16", "mooncake", {"tp_size": 2}, {"tp_size": 2}, None),            # equal attention-TP: llm-d's fix
    # attention-TP, not TP: TP4 with 4 attention-DP groups is attention-TP 1, as a TP1 prefill server
    ("0.5.16", "mooncake", {"tp_size": 1}, {"tp_size": 4, "dp_size": 4, "enable_dp_attention": True}, None),
])
def test_a_prefill_decode_pair_that_fails_its_first_transfer_is_named_with_sglangs_message(version, backend, prefill,
                                                                                         decode, rule):
    """gpt-oss-120b keeps an SWA state (sliding-window layers, MHA): SGLang sends it only between equal attention-TP
    ranks, up to 0.5.21 on both backends (llm-d/llm-d#2433: prefill TP1, decode TP4 on 0.5.16), from 0.5.22 on
    NIXL (and on Mooncake under pipeline parallelism). An MLA model's latent pairs any sizes."""
    from grid.releases.checks import pair_refusals

    gpt_oss = model("gpt_oss_120b")
    found = pair_refusals({**prefill, "disaggregation_transfer_backend": backend},
                          {**decode, "disaggregation_transfer_backend": backend}, version, gpt_oss)
    assert [r.name for r, _ in found] == ([rule] if rule else [])
    if rule == "pd_swa_hetero_attn_tp":
        assert found[0][1] == "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."
    deepseek = model("deepseek_v3_fp8")
    assert pair_refusals({**prefill, "disaggregation_transfer_backend": backend},
                         {**decode, "disaggregation_transfer_backend": backend}, version, deepseek) == []
