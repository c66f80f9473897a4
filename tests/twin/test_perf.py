"""Exact-number tests of the pure functions in grid.twin.perf (the arithmetic of
docs/sources.md#sglang-server-arguments-and-defaults) and model sanity."""

from __future__ import annotations

import pytest

from grid.twin.perf import (
    PerfModel,
    ServingConfig,
    auto_mem_fraction_static,
    decode_cuda_graph_batch_sizes,
    expert_coverage,
    gpu_memory_defaults,
    param_counts,
)
from ._specs import hardware, model


def test_graph_batch_sizes_default_list():
    assert decode_cuda_graph_batch_sizes(64) == (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64)
    assert decode_cuda_graph_batch_sizes(32) == (1, 2, 4, 8, 12, 16, 24, 32)
    big = decode_cuda_graph_batch_sizes(512)
    assert big[:6] == (1, 2, 4, 8, 12, 16) and big[-3:] == (480, 496, 512)
    assert len(big) == 5 + 31 + 15 + 1
    # 0.5.23 appends max_bs itself; TBO keeps even sizes
    assert decode_cuda_graph_batch_sizes(20) == (1, 2, 4, 8, 12, 16)
    assert decode_cuda_graph_batch_sizes(20, version="0.5.23") == (1, 2, 4, 8, 12, 16, 20)
    assert decode_cuda_graph_batch_sizes(12, two_batch_overlap=True) == (2, 4, 8, 12)


def test_expert_coverage():
    assert expert_coverage(1, 256, 8) == pytest.approx(8 / 256)
    assert expert_coverage(64, 256, 8) == pytest.approx(1 - (1 - 8 / 256) ** 64)
    assert expert_coverage(64, 256, 8) == pytest.approx(0.8689, abs=1e-4)  # calibration §5: ~222 of 256 experts
    assert expert_coverage(0, 256, 8) == 0.0
    assert expert_coverage(10, 0, 0) == 0.0


def test_gpu_memory_table():
    assert gpu_memory_defaults(143_771, 1) == (8192, 256)  # H200
    assert gpu_memory_defaults(97_887, 8) == (8192, 512)  # RTX PRO 6000
    assert gpu_memory_defaults(30 * 1024, 1) == (2048, 24)
    assert gpu_memory_defaults(30 * 1024, 1, "0.5.23") == (4096, 48)
    assert gpu_memory_defaults(180 * 1024, 8) == (16384, 512)


def test_auto_mem_fraction_h200_example():
    # docs/sources.md#sglang-server-arguments-and-defaults: H200 tp=1 -> reserve 512+12288+512+128 = 13,440 MiB -> 0.907
    assert auto_mem_fraction_static(143_771, 8192, 256, 1) == 0.907
    # RTX PRO 6000 (96 GB x 0.9957 = 97,879 MiB), tp 8: 512+12288+1024+1024 = 14,848 MiB -> 0.848
    assert auto_mem_fraction_static(96 * 0.9957 * 1024, 8192, 512, 8) == 0.848
    # small GPU, no 10 GiB floor: 40 GiB, tp1, chunk 4096, bs 32 -> 512+6144+64+128 = 6848
    assert auto_mem_fraction_static(40960, 4096, 32, 1) == round((40960 - 6848) / 40960, 3)


def test_kv_cell_and_capacity_glm5():
    m, hw = model("glm5_nvfp4"), hardware("rtx_pro_6000_x8")
    bf16 = PerfModel(m, hw, ServingConfig(tp_size=8, mem_fraction_static=0.92, kv_cache_dtype="bfloat16"))
    # MLA latent 576 x 2 B x 78 + DSA indexer (128 + 128//128*4) x 78
    assert bf16.kv_cell_bytes == 576 * 2 * 78 + 132 * 78 == 100_152
    fp8 = PerfModel(m, hw, ServingConfig(tp_size=8, mem_fraction_static=0.92))
    assert fp8.kv_cache_dtype == "fp8_e4m3"  # 0.5.9 DSA auto dtype on SM>=100
    assert fp8.kv_cell_bytes == 576 * 78 + 132 * 78 == 55_224
    # capacity follows the formula exactly
    gib = 2**30
    avail = bf16.gpu_mem_gib - bf16.weight_gb_per_gpu * 1e9 / gib - bf16.runtime_overhead_gib
    expect = int((avail - bf16.gpu_mem_gib * (1 - 0.92)) * gib) // 100_152 // 64 * 64
    assert bf16.kv_capacity_tokens == expect
    assert bf16.max_running_requests == min(max(int(expect / 202_752 * 512), 2048), 4096) == 2048


def test_kv_cell_mha_llama():
    p = PerfModel(model("llama3_1_8b"), hardware("h100_x1"), ServingConfig())
    assert p.kv_cell_bytes == 8 * 128 * 2 * 32 * 2 == 131_072  # calibration §2: 128 KiB/token
    p70 = PerfModel(model("llama3_1_70b"), hardware("h100_x8"), ServingConfig(tp_size=8))
    assert p70.kv_cell_bytes == 1 * 128 * 2 * 80 * 2  # 8 KV heads over TP8: one per rank


def test_param_counts_match_published_totals():
    for name, total in [("glm5_nvfp4", 744), ("deepseek_v3_fp8", 671), ("llama3_1_8b", 8.03),
                        ("llama3_1_70b", 70.6), ("qwen3_30b_a3b", 30.5)]:
        assert param_counts(model(name)).total / 1e9 == pytest.approx(total, rel=0.02), name


def test_resolved_defaults_and_graph_flags():
    m, hw = model("glm5_nvfp4"), hardware("rtx_pro_6000_x8_vm")
    p = PerfModel(m, hw, ServingConfig(tp_size=8))
    assert p.chunked_prefill_size == 8192 and p.cuda_graph_max_bs == 512 and p.mem_fraction_static == 0.848
    assert p.dsa_prefill_backend == "flashmla_auto" and p.dsa_decode_backend == "flashmla_kv"
    q = PerfModel(m, hw, ServingConfig(tp_size=8, cuda_graph=False))
    assert q.cuda_graph_max_bs == 0 and q.cuda_graph_batch_sizes == () and not q.uses_cuda_graph(1)
    r = PerfModel(m, hw, ServingConfig(tp_size=8, cuda_graph_max_bs=32))
    assert r.uses_cuda_graph(32) and not r.uses_cuda_graph(33)


def test_step_time_shape():
    m, hw = model("glm5_nvfp4"), hardware("rtx_pro_6000_x8")
    p = PerfModel(m, hw, ServingConfig(tp_size=8, cuda_graph_max_bs=32, kv_cache_dtype="bfloat16"))
    # grows with batch and with context; eager above max bs never faster than the GPU time
    assert p.decode_step_s(1, 0) < p.decode_step_s(8, 0) < p.decode_step_s(64, 0)
    assert p.decode_step_s(1, 0) < p.decode_step_s(1, 128 * 1024)
    b = p.breakdown(1, 0)
    assert {"memory", "compute", "allreduce", "launch", "cpu"} <= set(b)
    assert b["total"] == pytest.approx(p.decode_step_s(1, 0))
    # DSA caps KV reads on Hopper but not on SM120 (dense MLA)
    h = PerfModel(m, hardware("h200_x8"), ServingConfig(tp_size=8))
    assert h.decode_step_s(1, 128 * 1024) - h.decode_step_s(1, 0) < 0.2 * (
        p.decode_step_s(1, 128 * 1024) - p.decode_step_s(1, 0)
    )
    assert p.prefill_step_s(8192) > p.prefill_step_s(1024) > 0


def test_swept_flags_have_effects():
    m, hw = model("llama3_1_8b"), hardware("h100_x1")
    graphs = PerfModel(m, hw, ServingConfig())
    eager = PerfModel(m, hw, ServingConfig(cuda_graph=False))
    compiled = PerfModel(m, hw, ServingConfig(torch_compile=True))
    assert eager.decode_step_s(1, 128) > graphs.decode_step_s(1, 128) > compiled.decode_step_s(1, 128)
    assert compiled.decode_step_s(64, 64 * 128) == pytest.approx(graphs.decode_step_s(64, 64 * 128))  # > compile bs
    assert compiled.startup_phases_s()["torch_compile"] > 60
    lo = PerfModel(m, hw, ServingConfig(mem_fraction_static=0.7))
    hi = PerfModel(m, hw, ServingConfig(mem_fraction_static=0.9))
    assert hi.kv_capacity_tokens > lo.kv_capacity_tokens
    g = model("glm5_nvfp4")
    base = PerfModel(g, hardware("rtx_pro_6000_x8"), ServingConfig(tp_size=8))
    tbo = PerfModel(g, hardware("rtx_pro_6000_x8"), ServingConfig(tp_size=8, two_batch_overlap=True))
    assert tbo.decode_step_s(32, 32) < base.decode_step_s(32, 32)


def test_startup_phases_glm5_bare_metal():
    """calibration §1d: weight load ~36 s, CUDA graph capture ~208 s, total 7-8 min (E1 flags: max bs 32)."""
    p = PerfModel(model("glm5_nvfp4"), hardware("rtx_pro_6000_x8"), ServingConfig(tp_size=8, cuda_graph_max_bs=32))
    ph = p.startup_phases_s()
    assert list(ph)[:2] == ["init_distributed", "load_weights"]
    assert ph["load_weights"] == pytest.approx(36, rel=0.1)
    assert ph["cuda_graph_capture"] == pytest.approx(208, rel=0.1)
    assert 7 * 60 <= sum(ph.values()) <= 8 * 60


def test_gemm_efficiency_falls_with_small_per_gpu_shapes():
    from grid.twin.perf import ETA_GEMM_MAX, gemm_efficiency

    big = gemm_efficiency(8192, 14336)  # Llama-8B MLP, one GPU
    assert big == pytest.approx(ETA_GEMM_MAX * 8192 / (8192 + 32) * 14336 / (14336 + 512))
    # DeepSeek-V3 routed expert at TP8: 8,192 tokens x 8/256 = 256 rows, 2048/8 = 256 columns
    sliced = gemm_efficiency(8192 * 8 / 256, 2048 / 8)
    assert sliced < 0.4 * big
    assert gemm_efficiency(256, 2048) > sliced  # the same expert whole (EP) fills more tiles


def test_prefill_dense_hopper_faster_moe_tp_sliced_slower():
    """Dense prefill on Hopper runs at ~0.5 of peak, TP-sliced MoE experts far below it."""
    llama = PerfModel(model("llama3_1_8b"), hardware("h100_x1"), ServingConfig())
    t = llama.prefill_step_s(8192)
    flops = 2 * 8192 * (7.0e9)  # non-embedding weights of Llama-3.1-8B, x 8,192 tokens
    assert 0.3 < flops / t / 989e12 < 0.55
    ds = PerfModel(model("deepseek_v3_fp8"), hardware("h200_x8"), ServingConfig(tp_size=8))
    ds_ep = PerfModel(model("deepseek_v3_fp8"), hardware("h200_x8"), ServingConfig(tp_size=8, ep_size=8))
    assert ds.prefill_step_s(8192) > 1.3 * ds_ep.prefill_step_s(8192)


def test_dp_attention_splits_prefill_attention():
    kw = dict(tp_size=8, dp_size=8)
    m, hw = model("deepseek_v3_fp8"), hardware("h200_x8")
    tp_only = PerfModel(m, hw, ServingConfig(tp_size=8))
    dpa = PerfModel(m, hw, ServingConfig(enable_dp_attention=True, **kw))
    # 8,192 new tokens behind a 10K-token prefix: attention dominates; DP attention shares it over 8 ranks
    assert dpa.prefill_step_s(8192, cached_tokens=10_000) < tp_only.prefill_step_s(8192, cached_tokens=10_000)


def test_frontend_latency():
    p = PerfModel(model("llama3_1_8b"), hardware("h100_x1"), ServingConfig())
    assert p.frontend_latency_s(1000) == pytest.approx(0.012)
