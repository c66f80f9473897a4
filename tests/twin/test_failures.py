"""The failure table: which (model, hardware, flags, version) combinations fail, and how."""

from __future__ import annotations

import pytest

from grid.twin.failures import FAILURE_TABLE, find_failures
from grid.twin.perf import PerfModel, ServingConfig

from ._specs import hardware, model


def _ids(model_name="glm5_nvfp4", hw="rtx_pro_6000_x8_vm", **kw):
    m, h = model(model_name), hardware(hw)
    cfg = ServingConfig(tp_size=kw.pop("tp_size", 8), **kw)
    perf = PerfModel(m, h, cfg)
    return {f.id: f for f in find_failures(m, h, cfg, perf)}


SEED = dict(dsa_prefill_backend="trtllm", dsa_decode_backend="trtllm", mem_fraction_static=0.92, cuda_graph_max_bs=64)


def test_every_row_cites_a_source():
    assert len({r.id for r in FAILURE_TABLE}) == len(FAILURE_TABLE)
    for r in FAILURE_TABLE:
        assert r.source and r.description
        assert r.effect in {"startup_crash", "startup_oom", "startup_hang", "nan_output", "runtime_crash"}
    # and each effect is declared on the failure classes it can be recorded as (grid/server/statuses.py), so the
    # report can name the row as a known cause
    from grid.report.context import EFFECT_CLASSES

    assert {r.effect for r in FAILURE_TABLE} <= set(EFFECT_CLASSES)
    assert EFFECT_CLASSES["startup_crash"] == {"startup_exit", "startup_kv_pool"}


def test_seed_working_config_has_no_failure():
    assert _ids(**SEED) == {}
    assert _ids(**{**SEED, "cuda_graph": False, "mem_fraction_static": 0.85}) == {}


def test_flashmla_backends_nan_on_sm120():
    for b in ("flashmla_kv", "flashmla_sparse"):
        f = _ids(dsa_prefill_backend=b, dsa_decode_backend=b)
        assert f["dsa_flashmla_nan_sm120"].effect == "nan_output"
    # the 0.5.9 default (fp8 KV -> flashmla_auto / flashmla_kv) is the seed's first NaN crash
    assert "dsa_flashmla_nan_sm120" in _ids()
    # not on Hopper
    assert "dsa_flashmla_nan_sm120" not in _ids(hw="h200_x8", dsa_prefill_backend="flashmla_kv",
                                                 dsa_decode_backend="flashmla_kv")


def test_fa3_and_aiter_crash_at_startup():
    f = _ids(dsa_prefill_backend="fa3", dsa_decode_backend="fa3", kv_cache_dtype="bfloat16")
    assert f["dsa_fa3_sm120"].effect == "startup_crash" and f["dsa_fa3_sm120"].exit_code == 1
    assert f["dsa_fa3_sm120"].at_s > 60  # after weights are loaded
    g = _ids(dsa_prefill_backend="aiter", dsa_decode_backend="aiter")
    assert g["dsa_aiter_cuda"].effect == "startup_crash"


def test_tilelang_bf16_works_fp8_garbled():
    assert _ids(dsa_prefill_backend="tilelang", dsa_decode_backend="tilelang", kv_cache_dtype="bfloat16") == {}
    f = _ids(dsa_prefill_backend="tilelang", dsa_decode_backend="tilelang", kv_cache_dtype="fp8_e4m3")
    assert f["dsa_fp8_kv_garbled_sm120"].effect == "nan_output"
    # SGLang 0.5.17-0.5.21 refuses tilelang with an fp8 KV cache on CUDA at argument checking: a launch rule
    # (grid/releases/checks.py tilelang_fp8_cuda), not a failure row; 0.5.22 accepts both backends tilelang on SM >= 89
    from grid.releases.checks import check_config

    fp8 = {"dsa_prefill_backend": "tilelang", "dsa_decode_backend": "tilelang", "kv_cache_dtype": "fp8_e4m3"}
    hw, glm = hardware("rtx_pro_6000_x8_vm"), model("glm5_nvfp4")
    assert check_config(fp8, "0.5.20", glm, hw)[0].startswith("The tilelang DSA prefill/decode kernels only support")
    assert check_config(fp8, "0.5.22", glm, hw) == []
    assert "dsa_tilelang_fp8_cuda_rejected" not in _ids(**fp8, version="0.5.22")


def test_trtllm_by_version():
    assert _ids(**SEED) == {}
    f = _ids(**{**SEED, "version": "0.5.12"})
    assert f["dsa_trtllm_unsupported_arch_sm120"].effect == "startup_crash"
    assert "Unsupported architecture" in f["dsa_trtllm_unsupported_arch_sm120"].log_lines[0]
    g = _ids(dsa_prefill_backend="tilelang", dsa_decode_backend="tilelang", kv_cache_dtype="bfloat16",
             version="0.5.12")
    assert "Unsupported architecture" in g["dsa_deep_gemm_unsupported_arch_sm120"].log_lines[0]
    assert _ids(dsa_prefill_backend="tilelang", dsa_decode_backend="tilelang", kv_cache_dtype="bfloat16",
                version="0.5.23") == {}


def test_flashinfer_sparse_mla_graph_hang_0523():
    f = _ids(version="0.5.23")  # auto: GLM + fp8 on SM12x -> flashinfer_sparse_mla
    assert f["dsa_flashinfer_sparse_mla_graph_hang_sm120"].effect == "startup_hang"
    assert "dsa_flashinfer_sparse_mla_graph_hang_sm120" not in _ids(version="0.5.23", cuda_graph=False)


def test_cuda_graph_capture_oom():
    f = _ids(**{**SEED, "mem_fraction_static": 0.97, "cuda_graph_max_bs": 512})
    oom = f["cuda_graph_capture_oom"]
    assert oom.effect == "startup_oom" and oom.exit_code == 1
    assert oom.log_lines[0].startswith("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert "set --cuda-graph-max-bs to a smaller value (e.g., 16)" in oom.log_lines[1]
    assert "cuda_graph_capture_oom" not in _ids(**{**SEED, "mem_fraction_static": 0.97, "cuda_graph": False})


def test_weights_do_not_fit():
    f = _ids(tp_size=4)
    assert f["weights_oom"].effect == "startup_oom"
    assert _ids(model_name="llama3_1_8b", hw="h100_x1", tp_size=1) == {}


def test_every_failure_effect_has_a_fault_that_plays_it():
    from typing import get_args

    from grid.releases.checks import Effect
    from grid.twin.faults import FAULT_KINDS, faults_from_failures
    from grid.twin.failures import FailureMode

    assert set(get_args(Effect)) <= set(FAULT_KINDS)
    row = FailureMode("x", "startup_crash", 1.0, 1, ("boom",), "d", "s")
    assert [f.kind for f in faults_from_failures([row])] == ["startup_crash"]
    with pytest.raises(KeyError, match="failure x: effect 'melts' has no fault; known: "):
        faults_from_failures([FailureMode("x", "melts", 1.0, 1, (), "d", "s")])  # type: ignore[arg-type]
