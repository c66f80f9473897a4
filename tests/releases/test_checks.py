"""grid's pre-launch checks agree with the twin's CLI (which enforces SGLang's launch-time rules as SGLang does)."""

from pathlib import Path

import pytest
import yaml

from grid.config.specs import ModelSpec
from grid.releases.checks import check_config
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
]
VERSIONS = ["0.5.9", "0.5.13", "0.5.14", "0.5.16", "0.5.20", "0.5.22", "0.5.23"]


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
        ours = check_config(settings, version, m)
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
