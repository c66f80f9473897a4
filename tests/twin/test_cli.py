"""SGLang launch_server flags per version and the launch-time checks
(docs/sources.md#sglang-server-arguments-and-defaults)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grid.config.specs import DsaSpec, ModelSpec
from grid.twin import cli
from tests.timing import slack

VERSIONS = ["0.5.9", "0.5.13", "0.5.14", "0.5.20", "0.5.22", "0.5.23"]


def parse(argv, version):
    return cli.parse_args(["--model-path", "/m", *argv], version)


def parse_error(argv, version, capsys) -> str:
    with pytest.raises(SystemExit) as ei:
        parse(argv, version)
    assert ei.value.code == 2
    return capsys.readouterr().err


def test_parse_version():
    assert cli.parse_version("0.5.13.post1") == (0, 5, 13)
    assert cli.parse_version("0.5.9") == (0, 5, 9)


@pytest.mark.parametrize("version", VERSIONS)
def test_prefix_tp_and_declared_ep_alias(version):
    a = parse(["--tp", "8", "--ep", "8", "--dp", "2"], version)
    assert (a.tp_size, a.ep_size, a.dp_size) == (8, 8, 2)
    a = parse(["--tensor-parallel-size", "4"], version)
    assert a.tp_size == 4


def test_nsa_backend_lifecycle(capsys):
    a = parse(["--nsa-prefill-backend", "fa3"], "0.5.9")
    assert a.dsa_prefill_backend == "fa3" and a._deprecations == []
    a = parse(["--nsa-prefill-backend", "fa3", "--nsa-decode-backend", "flashmla_kv"], "0.5.13")
    assert (a.dsa_prefill_backend, a.dsa_decode_backend) == ("fa3", "flashmla_kv")
    assert a._deprecations[0] == ("'--nsa-prefill-backend' is deprecated and will be removed in a future release. "
                                  "Use '--dsa-prefill-backend' instead.")
    assert parse(["--dsa-prefill-backend", "tilelang"], "0.5.13").dsa_prefill_backend == "tilelang"
    err = parse_error(["--dsa-prefill-backend", "fa3"], "0.5.9", capsys)
    assert "launch_server.py: error: unrecognized arguments: --dsa-prefill-backend fa3" in err
    err = parse_error(["--nsa-prefill-backend", "fa3"], "0.5.20", capsys)  # the parser is `sglang serve` from 0.5.10
    assert "sglang serve: error: unrecognized arguments: --nsa-prefill-backend fa3" in err
    err = parse_error(["--nsa-prefill-backend", "fa3"], "0.5.23", capsys)
    assert "sglang serve: error: unrecognized arguments: --nsa-prefill-backend fa3" in err


def test_dsa_choices_per_version(capsys):
    assert parse(["--dsa-prefill-backend", "flashinfer_sparse_mla"], "0.5.23").dsa_prefill_backend
    err = parse_error(["--dsa-prefill-backend", "flashinfer_sparse_mla"], "0.5.14", capsys)
    assert "invalid choice: 'flashinfer_sparse_mla'" in err
    err = parse_error(["--dsa-decode-backend", "triton_sparse_mla"], "0.5.23", capsys)
    assert "invalid choice" in err


def test_cuda_graph_max_bs_lifecycle(capsys):
    assert parse(["--cuda-graph-max-bs", "64"], "0.5.9").cuda_graph_max_bs == 64
    assert parse(["--cuda-graph-max-bs", "64"], "0.5.13")._deprecations == []
    a = parse(["--cuda-graph-max-bs", "64"], "0.5.14")
    assert a.cuda_graph_max_bs == 64
    assert "'--cuda-graph-max-bs' is deprecated" in a._deprecations[0]
    assert parse(["--cuda-graph-max-bs-decode", "32"], "0.5.20").cuda_graph_max_bs == 32
    err = parse_error(["--cuda-graph-max-bs", "64"], "0.5.20", capsys)
    assert ("error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in err
    err = parse_error(["--cuda-graph-bs", "1", "2"], "0.5.23", capsys)
    assert "ambiguous option: --cuda-graph-bs could match" in err
    err = parse_error(["--cuda-graph-max-bs-decode", "64"], "0.5.13", capsys)
    assert "unrecognized arguments" in err


def test_disable_cuda_graph_deprecated_from_0514():
    a = parse(["--disable-cuda-graph"], "0.5.9")
    assert a.disable_cuda_graph and a._deprecations == [] and not cli.cuda_graph_enabled(a)
    a = parse(["--disable-cuda-graph"], "0.5.14")
    assert a.disable_cuda_graph and "'--disable-cuda-graph' is deprecated" in a._deprecations[0]
    a = parse(["--cuda-graph-backend-decode", "disabled"], "0.5.23")
    assert not cli.cuda_graph_enabled(a)


def test_enable_nan_detection_removed(capsys):
    assert parse(["--enable-nan-detection"], "0.5.9").enable_nan_detection
    assert "unrecognized arguments: --enable-nan-detection" in parse_error(["--enable-nan-detection"], "0.5.13", capsys)


def test_dp_attention_rewritten_on_0522():
    a = parse(["--tp", "8", "--dp-size", "8", "--enable-dp-attention"], "0.5.22")
    assert "'--enable-dp-attention' is deprecated" in a._deprecations[0]
    cli.resolve_args(a)
    assert (a.attn_dp_size, a.dp_size, a.enable_dp_attention) == (8, 1, True)
    a = parse(["--tp", "8", "--dp-size", "8", "--enable-dp-attention"], "0.5.9")
    cli.resolve_args(a)
    assert (a.dp_size, a.enable_dp_attention) == (8, True)
    a = parse(["--enable-dp-attention"], "0.5.9")
    cli.resolve_args(a)
    assert a.enable_dp_attention is False  # dp_size 1 turns it off
    assert "unrecognized" not in str(parse(["--attn-dp-size", "4", "--tp", "4"], "0.5.23").attn_dp_size)


def test_unknown_flag_exits_2_in_subprocess():
    proc = subprocess.run([sys.executable, "-m", "grid.twin", "--model-path", "/m", "--no-such-flag"],
                          capture_output=True, text=True, timeout=30 * slack())
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "launch_server.py: error: unrecognized arguments: --no-such-flag"


def test_max_total_tokens_human_readable_only_0523(capsys):
    assert parse(["--max-total-tokens", "128k"], "0.5.23").max_total_tokens == 128_000
    assert parse(["--max-total-tokens", "1Mi"], "0.5.23").max_total_tokens == 1 << 20
    assert "invalid int value" in parse_error(["--max-total-tokens", "128k"], "0.5.9", capsys)


def test_schedule_policy_choices(capsys):
    assert parse(["--schedule-policy", "hrrn"], "0.5.23").schedule_policy == "hrrn"
    assert "invalid choice" in parse_error(["--schedule-policy", "hrrn"], "0.5.9", capsys)


# --- checks ----------------------------------------------------------------------------------------------------------
DSA_MODEL = ModelSpec(name="glm5", architecture="GlmMoeDsaForCausalLM", model_type="glm_moe_dsa", num_layers=78,
                      hidden_size=6144, num_attention_heads=64, num_kv_heads=64, head_dim=256, attention="mla",
                      kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256, q_lora_rank=2048,
                      intermediate_size=12288, dense_layers=3, moe_intermediate_size=2048, num_experts=256,
                      num_shared_experts=1, experts_per_token=8, vocab_size=154880, context_length=202752,
                      total_params_b=744, active_params_b=40, dsa=DsaSpec())


def checked(argv, version, model=None):
    a = parse(argv, version)
    cli.resolve_args(a, model)
    cli.check_server_args(a, model)
    return a


def test_tbo_check_per_version():
    with pytest.raises(ValueError, match="moe_a2a_backend cannot be 'none'"):
        checked(["--enable-two-batch-overlap"], "0.5.9")
    with pytest.raises(ValueError, match="moe_a2a_backend cannot be 'none'"):
        checked(["--enable-two-batch-overlap", "--tp", "8", "--dp", "8", "--enable-dp-attention"], "0.5.14")
    checked(["--enable-two-batch-overlap", "--tp", "8", "--moe-a2a-backend", "deepep"], "0.5.9")
    with pytest.raises(ValueError, match="--enable-dp-attention is required"):
        checked(["--enable-two-batch-overlap"], "0.5.20")
    checked(["--enable-two-batch-overlap", "--tp", "8", "--dp", "8", "--enable-dp-attention"], "0.5.20")
    with pytest.raises(ValueError, match=r"attention DP \(--attn-dp-size\) is required"):
        checked(["--enable-two-batch-overlap"], "0.5.23")
    checked(["--enable-two-batch-overlap", "--tp", "8", "--attn-dp-size", "8"], "0.5.23")
    with pytest.raises(ValueError, match="deepep_v2"):
        checked(["--enable-two-batch-overlap", "--moe-a2a-backend", "deepep_v2"], "0.5.23")


def test_other_checks():
    # an assert in SGLang (the catalog's refusals of 0.5.9: check_server_args)
    with pytest.raises(AssertionError, match="To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'"):
        checked(["--enable-priority-scheduling", "--schedule-policy", "lpm"], "0.5.9")
    checked(["--enable-priority-scheduling", "--schedule-policy", "lof"], "0.5.9")
    with pytest.raises(AssertionError, match="served_model_name cannot contain a colon"):
        checked(["--served-model-name", "a:b"], "0.5.9")
    with pytest.raises(AssertionError, match="tp_size must be divisible by dp_size"):
        checked(["--tp", "8", "--dp", "3", "--enable-dp-attention"], "0.5.9")
    with pytest.raises(AssertionError, match="DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3"):
        checked(["--kv-cache-dtype", "fp8_e5m2"], "0.5.9", DSA_MODEL)
    checked(["--kv-cache-dtype", "fp8_e5m2"], "0.5.9")  # not a DSA model
    with pytest.raises(ValueError, match="tilelang DSA prefill/decode kernels"):
        checked(["--dsa-prefill-backend", "tilelang", "--kv-cache-dtype", "fp8_e4m3"], "0.5.20", DSA_MODEL)
    # the shared rule pp_needs_no_overlap: an assert in SGLang (check_server_args; 0.5.23 check_pipeline_parallel_compat)
    with pytest.raises(AssertionError, match="Pipeline parallelism is not compatible with overlap schedule"):
        checked(["--pp-size", "2"], "0.5.9")
    checked(["--pp-size", "2", "--disable-overlap-schedule"], "0.5.9")
    with pytest.raises(AssertionError, match="divisible by page_size"):
        checked(["--chunked-prefill-size", "100", "--page-size", "64"], "0.5.9")


def test_resolution_and_serving_config():
    a = checked(["--tp", "8", "--moe-a2a-backend", "deepep", "--cuda-graph-bs", "1", "2", "48"], "0.5.9", DSA_MODEL)
    assert a.ep_size == 8 and a.cuda_graph_max_bs == 48 and a.attention_backend == "nsa"
    assert a.served_model_name == "/m" and isinstance(a.random_seed, int)
    perf = pytest.importorskip("grid.twin.perf")
    cfg = cli.to_serving_config(a)
    assert isinstance(cfg, perf.ServingConfig)
    assert (cfg.tp_size, cfg.ep_size, cfg.cuda_graph_max_bs, cfg.version) == (8, 8, 48, "0.5.9")
    a = checked(["--tp", "8", "--attn-dp-size", "4", "--cuda-graph-backend-decode", "disabled",
                 "--max-total-tokens", "64k"], "0.5.23")
    cfg = cli.to_serving_config(a)
    assert (cfg.dp_size, cfg.enable_dp_attention, cfg.cuda_graph, cfg.max_total_tokens) == (4, True, False, 64000)


def test_hardware_rules_fire_inside_the_twin():
    """The twin applies the launch rules with a hardware predicate to the GPUs it plays: 0.5.22 refuses a TileLang
    fp8 KV cache below SM89 (A100, SM80) and accepts it on Hopper (SM90); without hardware the SM rule cannot fire."""
    from tests.twin._specs import hardware

    argv = ["--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang", "--kv-cache-dtype", "fp8_e4m3"]
    a = parse(argv, "0.5.22")
    cli.resolve_args(a, DSA_MODEL)
    with pytest.raises(ValueError, match="^CUDA TileLang FP8 KV requires SM89 or newer.$"):
        cli.check_server_args(a, DSA_MODEL, hardware("a100_x1"))
    cli.check_server_args(a, DSA_MODEL, hardware("h100_x8"))
    cli.check_server_args(a, DSA_MODEL)
