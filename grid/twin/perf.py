"""Performance model of an SGLang server: resolved memory settings, decode/prefill step times, startup phases.

Pure: no clocks, no I/O. Everything is derived from the model's architecture (``ModelSpec``), the hardware's spec sheet
(``HardwareSpec``) and the server flags (``ServingConfig``), plus the handful of efficiency constants below, which are
fitted to the calibration anchors and the ``fitted`` rows of ``grid/twin/calibration_rows.yaml`` (docs/twin.md lists
both with their public sources) and nothing else; the ``held_out`` rows of that file are never fitted.

Decode step (one iteration over the running batch)::

    gpu   = max(bytes_dense/(ETA_BW_DENSE*BW) + bytes_experts*coverage(B)/(eta_moe*BW) + bytes_kv/(ETA_KV*BW),
                flops/(ETA_FLOPS*peak))
          + n_allreduce * (latency + 2(n-1)/n * B*hidden*2 / bus_bw)        # NCCL, not overlapped (TBO hides part)
          + kernels_per_step * T_KERNEL_GPU                                  # per-kernel tail/gap, also inside graphs
    cpu   = kernels_per_step * T_OP_CPU_EAGER      if the batch runs eagerly (no graph for this batch size) else 0
            (prefill always runs eagerly unless ``piecewise_cuda_graph``, SGLang's --enable-piecewise-cuda-graph)
    step  = max(gpu, cpu) + T_STEP_CPU + B * T_REQ_CPU

Eager launching is asynchronous, so the CPU cost only shows when it exceeds the GPU time. That is why CUDA graphs bought
almost nothing in the seed session's VM (every all-reduce there costs ~0.5 ms, the GPU side is ~90 ms per step) but
matter on bare metal (E1: c64 is above ``--cuda-graph-max-bs 32`` and runs eager at about the same speed as its GPU
time) and on a single H100 (A5: 7.06 ms with graphs vs 9.28 ms without).

MoE bytes grow with the batch through expert coverage ``1-(1-k/E)^B`` (§5 rule 2). KV bytes grow with context; GLM-5
on SM120 runs dense MLA (DSA bypassed), elsewhere DSA caps the keys read per query at ``index_topk`` (§2, §5 rule 4).

Calibration (measured → this model; ``pytest tests/twin/test_calibration.py -s`` prints the full table):
seed single stream 11.1 → 11.1 tok/s; seed 32 burst no graphs 144/304 → 141/294 tok/s, concurrency 18.4 → 18.9,
log gen throughput at ~21 running 208 → 196; 64 at 16 req/s 196/451 → 230/407; 64 burst 225/516 → 216/478;
KV 370K/498K → 406K/536K (fp8), glm5.md 314,304 → 295,488 (bf16); graphs 128/512 236 → 259, log ~200 → 228 at ~22
running; E1 CUTLASS c1..c64 within 2%; b12x within 7% except c16 (+20%); context sweep within 8%; A5 within 1%.

Fitted constants and their derivation (all other numbers are spec-sheet or architecture facts):

* ``T_KERNEL_GPU`` 3.75 µs and ``ETA_MOE['cutlass']`` 0.80: least squares over E1 CUTLASS c1..c64 (19.8 ms at c1 =
  weights 6.2 GB/GPU + 157 NCCL all-reduces x 25 µs (§1c, dual-socket with the LL graph XML fix, as E1 ran)
  + 78 layers x 38 kernels x 3.75 µs + 0.3 ms CPU; the slope to 63.3 ms at c64 is expert coverage 3% → 87% of
  the 56.6 GB of experts per GPU read at 0.80 x 1,597 GB/s).
* ``ETA_BW_DENSE`` 0.90 and ``T_OP_CPU_EAGER`` 20 µs: A5 (Llama-3-8B, one H100): 7.06 ms with graphs (16.06 GB at
  0.90 x 3.35 TB/s + 454 kernels x 3.75 µs + 0.3 ms) and 9.28 ms eager (454 ops x 20 µs + 0.3 ms).
* b12x: E1 shows b12x ahead at c≤8 and far behind from c16 (c64 108 ms vs 63 ms): modelled as a higher bandwidth
  efficiency (0.95) up to 8 tokens and a compute ceiling ``B12X_EFF_TFLOPS`` 4.0 fitted to c64 above.
* ``ETA_KV`` 0.60: E1 c1 vs context, 19.4 ms at 0K → 32.2 ms at 128K = 131072 x 89,856 B per GPU read per step.
* ``ETA_FLOPS`` 0.50 (decode compute term only; prefill GEMMs use ``gemm_efficiency`` below): first 0.35 from E1
  "single-batch prefill ≈ 4,000 tok/s", a prefill figure; once prefill had its own shape law, nothing fitted it for
  decode, and large ShareGPT bursts (hundreds of running requests, compute-bound decode) came out 8-22% slow. Refit
  by grid search (0.45 / 0.50 / 0.55 / 0.60) on the ``fitted`` rows of calibration_rows.yaml: only
  a3-a100-8b-burst (-19.4% -> -7.4%) and a4-h100-70b-burst (-8.4% -> +1.4%) move; fitted geometric mean 19.1% ->
  16.1%. The seed anchors (small batches, memory-bound) do not move.
* VM all-reduce (``conf/hardware/rtx_pro_6000_x8_vm.yaml``): latency fitted to the seed single stream
  (183.8 s / 2048 = 89.7 ms per step vs 19.8 ms bare metal; (89.7-19.8) ms / 157 + 25 µs ≈ 470 µs), bus bandwidth to
  the seed's 64-concurrent run. Nothing else differs between the two RTX PRO 6000 hardware files.
* Prefill GEMMs run at ``gemm_efficiency(rows, cols) = ETA_GEMM_MAX x rows/(rows+GEMM_ROWS_HALF)
  x cols/(cols+GEMM_COLS_HALF)`` of the dtype's peak, per GEMM kind: attention projections (rows = tokens per
  attention rank), dense MLP, shared experts, routed experts (rows = tokens x top_k / experts, cols = moe_intermediate
  / tp, or whole experts under EP) and the LM head; the attention core runs at ``ETA_ATTN_PREFILL`` 0.35 (E1 64K
  prefill, unchanged). A single ``ETA_FLOPS`` made dense Hopper prefill too slow and TP-sliced MoE prefill too fast.
  Fitted by grid search on the ``fitted`` rows of calibration_rows.yaml: ``ETA_GEMM_MAX`` 0.50 on
  pr1060-h100-8b-prefill (Llama-3.1-8B, H100, 27,670 input tok/s → 29,378), a4-h100-70b-rps4 and
  pr5571-h200-dsv3-10k; ``GEMM_ROWS_HALF`` 32 and ``GEMM_COLS_HALF`` 512 on tt340-qwen3moe-a100-isl1024,
  pr5571-h200-dsv3-10k, a1-a100-8b-rps4 and pr1060. Prefill expert weights stream at ``ETA_BW_DENSE`` (many rows per
  weight tile), not the decode ``ETA_MOE``. ``ETA_FLOPS`` applies to the decode compute term only.
* ``T_FRONTEND_S`` 12 ms: HTTP, tokenization and the first token's detokenization/delivery, spent before the request
  reaches the scheduler (``PerfModel.frontend_latency_s``; ``simulate`` applies it; it adds to TTFT and end-to-end
  latency, never to TPOT). Fitted on the low-load median TTFTs a1-a100-8b-rps4 (31.98 ms), a4-h100-70b-rps4 (53.94 ms)
  and tt340-qwen3moe-a100-isl128 (35.7 ms); ``T_TOKENIZE_PER_TOKEN_S`` stays 0 (no row separates it).
* ``RUNTIME_OVERHEAD_GIB``: non-weight memory held before the KV pool is sized, balanced between glm5.md (bf16 KV,
  0.92 → 314,304 tokens) and the seed (fp8 KV, 0.85 → 370K, 0.92 → 498K).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grid.config.specs import HardwareSpec, ModelSpec
from grid.topology.kv import kv_bytes_per_token
from grid.versions import DEFAULT_RELEASE, release_tuple
from grid.releases.features import holds

GIB = 2**30
MIB = 2**20

# --- memory ---------------------------------------------------------------------------------------------------------
# CUDA-visible memory per GPU vs the spec-sheet figure: H200 "141 GB" shows 143,771 MiB
# (docs/sources.md#sglang-server-arguments-and-defaults) = 140.4 GiB,
# i.e. 0.9957 x 141; the same factor turns RTX PRO 6000 "96 GB" into 95.6 GiB and H100 "80 GB" into 79.7 GiB.
VISIBLE_MEM_FACTOR = 0.9957
# Non-weight memory (CUDA context, NCCL buffers, cuBLAS/FlashInfer workspaces) resident before the KV pool is sized.
# Fitted (see module docstring): 1 GiB single GPU plus 0.33 GiB per extra TP peer (3.3 GiB at TP8).
RUNTIME_OVERHEAD_GIB_BASE = 1.0
RUNTIME_OVERHEAD_GIB_PER_PEER = 0.33

# --- efficiencies (fitted, see module docstring) -------------------------------------------------------------------
ETA_BW_DENSE = 0.90  # dense / attention weight reads (GEMV-like), A5 + E1 c1
ETA_KV = 0.60  # KV-cache reads in decode attention, E1 c1 context sweep
ETA_FLOPS = 0.50  # achieved fraction of dense tensor peak in decode GEMMs/attention (fitted, module docstring)
T_KERNEL_GPU = 3.75e-6  # s per kernel: launch gap + tail, paid inside CUDA graphs too (E1 c1, A5)
T_OP_CPU_EAGER = 20e-6  # s per op when launched eagerly from Python (A5 9.28 ms eager)
T_STEP_CPU = 0.3e-3  # s per scheduler iteration (batch build, sampling); assumption, SGLang's overlap scheduler
T_REQ_CPU = 2e-6  # s per running request per iteration (assumption)
T_FRONTEND_S = 0.012  # s: HTTP + tokenization + first-token detokenization (fitted, module docstring)
T_TOKENIZE_PER_TOKEN_S = 0.0
# Prefill GEMM efficiency by shape (gemm_efficiency) and the attention-core efficiency of prefill.
ETA_GEMM_MAX = 0.50  # large prefill GEMMs (fitted, module docstring)
GEMM_ROWS_HALF = 32.0  # rows (tokens per GEMM) at which a GEMM reaches half of ETA_GEMM_MAX
GEMM_COLS_HALF = 512.0  # per-GPU output columns at which a GEMM reaches half of ETA_GEMM_MAX
ETA_ATTN_PREFILL = 0.35  # E1 64K-context prefill on SM120 (dense MLA attention dominates there)
# MoE expert-GEMM bandwidth efficiency by runner class. Only SM120 CUTLASS and b12x are calibrated (E1); the other
# classes have no anchor in the calibration set and reuse the CUTLASS value (triton a little lower: assumption).
ETA_MOE = {"cutlass": 0.80, "b12x": 0.95, "triton": 0.65, "deep_gemm": 0.80, "trtllm": 0.80, "cutedsl": 0.80}
B12X_SMALL_M = 8  # E1: b12x ahead of CUTLASS at c1-c8, behind from c16
B12X_EFF_TFLOPS = 4.0  # effective expert-GEMM rate of b12x above SMALL_M, fitted to E1 c64 (590.7 tok/s)
# torch.compile fuses elementwise ops: fewer kernels for captured batch sizes <= torch_compile_max_bs.
# Assumption (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes: maintainers call the gain small now,
# #6830).
TORCH_COMPILE_KERNEL_FACTOR = 0.85
# Two-batch overlap hides this fraction of the communication time (assumption; PR #4068 overlaps one micro-batch's
# compute with the other's communication, so at most ~all of it, in practice about half).
TBO_HIDDEN_FRACTION = 0.5

# --- kernels per layer (assumption; count of launches in SGLang's decode forward) ----------------------------------
K_LAYER_BASE = 14  # 2 norms, qkv, rope, attention, o_proj, all-reduce, residual adds, gate_up, act, down, all-reduce
K_MLA_EXTRA = 10  # q_a/q_b/kv_a, 2 latent norms, rope, absorbed bmm in/out, cache write, MLA plan
K_DSA_EXTRA = 8  # indexer q/k projections, scores, top-k, metadata (only when the indexer runs)
K_MOE_EXTRA = 14  # router, top-k, align/permute, activation quant, 2 grouped GEMMs, act, unpermute, shared expert

# --- startup (seconds) ----------------------------------------------------------------------------------------------
WEIGHT_LOAD_GBPS = 13.6  # node aggregate: GLM-5 NVFP4 490 GB (57.06 GiB x 8) in ~36 s (§1d, glm5.md, 16 threads)
T_CAPTURE_PER_KERNEL = 0.15e-3  # graph capture per kernel node per captured size (assumption)
# SM120 NVFP4 MoE: per captured size and MoE layer, kernel tactic selection/JIT. Fitted: GLM-5 capture ~208 s for
# --cuda-graph-max-bs 32 (8 sizes x 75 MoE layers) in glm5.md (§1d).
T_CAPTURE_FP4_MOE_LAYER = 0.34
T_CAPTURE_MOE_LAYER = 0.02
# Quantized-checkpoint post-processing (scale swizzling, repacking) per GB loaded per GPU: fills the §1d total
# (7-8 min) after init, load, capture and warm-up. Fitted to glm5.md.
T_QUANT_POSTPROCESS_PER_GB = 2.7
T_TORCH_COMPILE_PER_BS = 25.0  # s per compiled batch size (#6830: minutes on large models), per 32 layers
T_INIT_DIST_BASE = 4.0
T_INIT_DIST_PER_GPU = 1.5



#: Modelled board power as a fraction of TDP (an assumption, not a fitted calibration row): idle boards draw
#: ``POWER_IDLE_FRAC``; a board running kernels draws ``POWER_ACTIVE_BASE`` plus terms proportional to the memory
#: bandwidth and tensor throughput in use. Anchor: the seed session (hardware_models_calibration.md §0) saw 328 W of
#: 600 W (0.55) with every GPU 100% busy at 52-53% memory bandwidth: 0.30 + 0.45 x 0.52 = 0.53.
POWER_IDLE_FRAC = 0.10
POWER_ACTIVE_BASE = 0.30
POWER_PER_MEM_BW = 0.45
POWER_PER_TENSOR = 0.55


def modelled_power_fraction(busy: float, mem_bw: float, tensor: float) -> float:
    """Board power / TDP for a GPU busy a fraction ``busy`` of the time at the given memory-bandwidth and tensor
    fractions (all 0..1, time-averaged): ``idle + busy x (base + 0.45 mem_bw/busy + 0.55 tensor/busy - idle)``,
    capped at 1. Constants: ``POWER_*`` above."""
    busy = max(0.0, min(1.0, busy))
    if busy <= 0:
        return POWER_IDLE_FRAC
    active = POWER_ACTIVE_BASE + POWER_PER_MEM_BW * min(1.0, mem_bw / busy) + POWER_PER_TENSOR * min(1.0, tensor / busy)
    return min(1.0, POWER_IDLE_FRAC + busy * (active - POWER_IDLE_FRAC))


@dataclass(frozen=True)
class ServingConfig:
    """The subset of SGLang ServerArgs the model uses; built by the twin's CLI from parsed flags."""

    tp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    # None -> SGLang's auto rule (docs/sources.md#sglang-server-arguments-and-defaults)
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None  # None -> by GPU memory; -1 disables chunking
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0  # scales SGLang's new_token_ratio (grid.twin.scheduler.NewTokenRatio)
    cuda_graph: bool = True  # False == --disable-cuda-graph
    cuda_graph_max_bs: int | None = None
    # --enable-piecewise-cuda-graph: prefill (extend) forwards replay captured graphs around attention, so no Python
    # launch cost (vLLM V1's default compilation mode does the same; the vLLM rows of calibration_rows.yaml set it)
    piecewise_cuda_graph: bool = False
    torch_compile: bool = False
    torch_compile_max_bs: int = 32
    two_batch_overlap: bool = False
    enable_dp_attention: bool = False
    moe_runner_backend: str = "auto"
    moe_a2a_backend: str = "none"
    attention_backend: str | None = None
    dsa_prefill_backend: str | None = None  # --nsa-prefill-backend (<0.5.13) / --dsa-prefill-backend
    dsa_decode_backend: str | None = None
    kv_cache_dtype: str = "auto"
    disable_radix_cache: bool = False
    context_length: int | None = None
    stream_interval: int = 1
    decode_log_interval: int = 40
    page_size: int | None = None
    version: str = DEFAULT_RELEASE
    # --- pipeline parallelism (grid/twin/pipeline.py) and speculative decoding (grid/twin/speculative.py)
    pp_size: int = 1
    nnodes: int = 1  # --nnodes: one server over this many nodes (tensor parallelism across nodes)
    speculative_algorithm: str | None = None  # EAGLE | EAGLE3 | NEXTN
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_accept_length: float | None = None  # tokens per verify iteration (an input; see speculative.py)


def expert_coverage(tokens: int, experts: int, top_k: int) -> float:
    """Expected fraction of distinct experts touched by ``tokens`` tokens routing to ``top_k`` of ``experts`` each."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return 1.0 - (1.0 - top_k / experts) ** tokens


def decode_cuda_graph_batch_sizes(max_bs: int, two_batch_overlap: bool = False, version: str = DEFAULT_RELEASE) -> tuple:
    """[1,2,4,8,12] + range(16,257,8) + range(272,512,16) + range(512,max_bs+1,32), <= max_bs
    (docs/sources.md#sglang-server-arguments-and-defaults).

    From 0.5.10 max_bs itself is appended when the steps skip it (features.py ``cuda_graph_bs_includes_max``);
    two-batch overlap keeps even sizes only.
    """
    if max_bs <= 0:
        return ()
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [bs for bs in sizes if bs <= max_bs]
    if holds("cuda_graph_bs_includes_max", release_tuple(version)) and max_bs not in sizes:
        sizes.append(max_bs)
    if two_batch_overlap:
        sizes = [bs for bs in sizes if bs % 2 == 0]
    return tuple(sorted(set(sizes)))


def gpu_memory_defaults(gpu_mem_mib: float, tp_size: int, version: str = DEFAULT_RELEASE) -> tuple[int, int]:
    """(chunked_prefill_size, decode cuda_graph_max_bs) by GPU memory (the table in
    docs/sources.md#sglang-server-arguments-and-defaults)."""
    new = holds("small_gpu_defaults_raised", release_tuple(version))
    gib = gpu_mem_mib / 1024
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return (4096, 48 if tp_size < 4 else 160) if new else (2048, 24 if tp_size < 4 else 80)
    if gib < 60:
        return 4096, 32 if tp_size < 4 else 160
    if gib < 160:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def auto_mem_fraction_static(
    gpu_mem_mib: float,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    tp_size: int,
    pp_size: int = 1,
    dp_size: int = 1,
    enable_dp_attention: bool = False,
    speculative: bool = False,
) -> float:
    """SGLang 0.5.9 ``_handle_gpu_memory_settings`` (docs/sources.md#sglang-server-arguments-and-defaults)."""
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp_size * pp_size / 8 * 1024
    if enable_dp_attention:
        reserved += cuda_graph_max_bs * dp_size * 3
        if cuda_graph_max_bs > 300:
            reserved += cuda_graph_max_bs * dp_size * 1.5
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative:
        reserved += 2 * 1024
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by kind (whole model), from the architecture fields."""

    attention: float
    dense_mlp: float
    experts: float
    shared_experts: float
    embedding: float
    head: float

    @property
    def total(self) -> float:
        return self.attention + self.dense_mlp + self.experts + self.shared_experts + self.embedding + self.head


def param_counts(m: ModelSpec) -> ParamCounts:
    h = m.hidden_size
    if m.attention == "mla":
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank * m.num_attention_heads * qk) if m.q_lora_rank else h * m.num_attention_heads * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * m.num_attention_heads * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        o = m.num_attention_heads * m.v_head_dim * h
        per_layer = q + kv + o
    else:
        per_layer = h * m.num_attention_heads * m.head_dim * 2 + 2 * h * m.num_kv_heads * m.head_dim
    if m.dsa is not None:
        per_layer += (m.q_lora_rank or h) * m.dsa.index_n_heads * m.dsa.index_head_dim + h * m.dsa.index_head_dim
        per_layer += h * m.dsa.index_n_heads
    dense_layers = m.dense_layers if m.is_moe else m.num_layers
    return ParamCounts(
        attention=per_layer * m.num_layers,
        dense_mlp=3 * h * m.intermediate_size * dense_layers,
        experts=3 * h * m.moe_intermediate_size * m.num_experts * m.moe_layers,
        shared_experts=3 * h * m.moe_intermediate_size * m.num_shared_experts * m.moe_layers,
        embedding=m.vocab_size * h,
        head=m.vocab_size * h,
    )


def gemm_efficiency(rows: float, cols: float) -> float:
    """Achieved fraction of tensor peak of one prefill GEMM with ``rows`` tokens and ``cols`` output columns per GPU:
    ``ETA_GEMM_MAX x rows/(rows + GEMM_ROWS_HALF) x cols/(cols + GEMM_COLS_HALF)`` (tiles left empty by few tokens,
    too few output tiles to fill the SMs when TP slices a narrow matrix). Constants: see the module docstring."""
    rows, cols = max(rows, 1e-9), max(cols, 1e-9)
    return ETA_GEMM_MAX * rows / (rows + GEMM_ROWS_HALF) * cols / (cols + GEMM_COLS_HALF)


def forecasts_need_calibration(hardware: HardwareSpec) -> str | None:
    """Why the twin's spec-sheet forecasts of ``hardware`` must not decide anything before a calibration on measured
    points (None when they may): its constants were fitted on NVIDIA GPUs only (docs/twin.md section 1). On a CPU host
    (``HardwareSpec.is_cpu``) the model keeps its structure (bytes and FLOPs per step from the architecture, the CPU's
    spec-sheet bandwidth and peak, one dispatch cost per op) but runs ops one after the other (``PerfModel.on_host``),
    so its spec-sheet forecasts are the starting point of the sweep's calibration (grid/twin/coefficients.py)."""
    if hardware.is_cpu:
        return (f"the twin's constants were fitted on GPUs; on {getattr(hardware, 'name', 'a CPU host')} (a CPU) "
                "its forecasts count once the sweep has calibrated it on measured points")
    return None


def _peak_tflops(hw: HardwareSpec, dtype: str) -> float:
    t = hw.tflops
    for key in (dtype, "fp8", "bf16"):
        if key in t:
            return t[key]
    return max(t.values())


@dataclass
class _Bytes:
    """Weight bytes per GPU by kind (already divided by the parallel degree)."""

    dense: float  # attention, dense MLP, shared experts, head: read every step
    experts: float  # all routed experts held by this GPU; read x coverage
    embedding: float
    total: float


@dataclass(frozen=True, slots=True)
class _DecodeFixed:
    """The batch-size terms of a decode step (:meth:`PerfModel._decode_fixed`): seconds, FLOPs and bytes per GPU."""

    bs: int  # requests per replica
    cov: float  # fraction of experts the batch touches
    t_dense: float
    t_experts: float
    flops: float  # the weights' FLOPs
    attn_flops_per_key: float
    peak_flops: float  # achievable FLOP/s
    comm: float
    t_launch_gpu: float
    t_cpu_eager: float
    t_cpu: float
    allreduce_bytes: float


class PerfModel:
    """Resolved server settings and modelled step times for one (model, hardware, flags) triple."""

    def __new__(cls, model: ModelSpec, hardware: HardwareSpec, cfg: ServingConfig):
        # grid/twin/perf_class.py picks pipeline.py / speculative.py / crossnode.py / attention.py
        if cls is PerfModel:
            from grid.twin.perf_class import perf_class

            cls = perf_class(cfg, model, hardware)
        return super().__new__(cls)

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, cfg: ServingConfig) -> None:
        self.model = model
        self.hardware = hardware
        self.cfg = cfg
        m, hw = model, hardware
        tp = max(1, cfg.tp_size)
        self.tp = tp
        self.dp = max(1, cfg.dp_size)
        self.dp_attention = cfg.enable_dp_attention and self.dp > 1
        # dp without attention-DP: independent replicas, each of tp GPUs (requests split evenly)
        self.replicas = 1 if self.dp_attention else self.dp
        # attention-TP width: tp // dp with attention DP (SGLang's derive_attn_tp_size); 0 when dp > tp, which SGLang
        # refuses (rules dp_divides_tp, dp_divides_tp_assert): the model of such a server only carries the failure,
        # so it keeps one rank rather than divide by zero
        self.attn_tp = max(1, tp // self.dp) if self.dp_attention else tp
        self.ep = max(1, cfg.ep_size)

        self.gpu_mem_gib = hw.memory_gb * VISIBLE_MEM_FACTOR
        gpu_mem_mib = self.gpu_mem_gib * 1024
        chunk_default, graph_bs_default = gpu_memory_defaults(gpu_mem_mib, tp, cfg.version)
        if holds("graph_bs_capped_by_running", release_tuple(cfg.version)) and cfg.max_running_requests:
            graph_bs_default = min(graph_bs_default, cfg.max_running_requests)

        # --- chunked prefill ----------------------------------------------------------------------------------------
        chunk = cfg.chunked_prefill_size if cfg.chunked_prefill_size is not None else chunk_default
        if self.dp_attention and chunk > 0:
            chunk //= self.dp  # docs/sources.md#sglang-server-arguments-and-defaults DP attention
        self.chunked_prefill_size: int = int(chunk)
        self.max_prefill_tokens: int = int(cfg.max_prefill_tokens)

        # --- cuda graphs ----------------------------------------------------------------------------------------------
        max_bs = cfg.cuda_graph_max_bs if cfg.cuda_graph_max_bs is not None else graph_bs_default
        self._graph_max_bs_for_reserve = max_bs
        if cfg.cuda_graph:
            self.cuda_graph_batch_sizes: tuple[int, ...] = decode_cuda_graph_batch_sizes(
                max_bs, cfg.two_batch_overlap, cfg.version
            )
            self.cuda_graph_max_bs: int = max(self.cuda_graph_batch_sizes) if self.cuda_graph_batch_sizes else 0
        else:
            self.cuda_graph_batch_sizes = ()
            self.cuda_graph_max_bs = 0
        #: The host CPU is the device (``hardware.vendor: cpu``, SGLang's ``--device cpu``): no CUDA graphs, and each
        #: op's own time and its dispatch from Python run one after the other instead of overlapping (see
        #: :func:`forecasts_need_calibration`).
        self.on_host = hw.is_cpu
        if self.on_host:
            self.cuda_graph_batch_sizes, self.cuda_graph_max_bs = (), 0

        # --- memory fraction --------------------------------------------------------------------------------------------
        if cfg.mem_fraction_static is not None:
            self.mem_fraction_static: float = float(cfg.mem_fraction_static)
        else:
            self.mem_fraction_static = auto_mem_fraction_static(
                gpu_mem_mib,
                chunk if chunk > 0 else chunk_default,
                max_bs,
                tp,
                dp_size=self.dp,
                enable_dp_attention=self.dp_attention,
            )

        # --- KV dtype and DSA backends (DSA auto-configuration, docs/sources.md#sglang-server-arguments-and-defaults)
        is_dsa = m.dsa is not None
        kv = cfg.kv_cache_dtype
        if kv == "auto":
            kv = "fp8_e4m3" if (is_dsa and hw.sm_version >= 100) else "bfloat16"
        elif kv == "bf16":
            kv = "bfloat16"
        self.kv_cache_dtype: str = kv
        self.dsa_prefill_backend: str | None = cfg.dsa_prefill_backend
        self.dsa_decode_backend: str | None = cfg.dsa_decode_backend
        if is_dsa:
            rel = release_tuple(cfg.version)
            if kv.startswith("fp8"):
                if holds("dsa_fp8_sm120_flashinfer", rel) and m.architecture == "GlmMoeDsaForCausalLM" \
                        and hw.sm_version >= 120:
                    pre, dec = "flashinfer_sparse_mla", "flashinfer_sparse_mla"
                elif hw.sm_version >= 100 and holds("dsa_fp8_blackwell_trtllm", rel):
                    pre, dec = "trtllm", "trtllm"
                elif hw.sm_version < 100 and holds("dsa_fp8_hopper_flashmla_kv", rel):
                    pre, dec = "flashmla_kv", "flashmla_kv"
                else:
                    pre, dec = "flashmla_auto", "flashmla_kv"
            else:
                pre, dec = "flashmla_sparse", ("trtllm" if hw.sm_version >= 100 else "fa3")
            self.dsa_prefill_backend = cfg.dsa_prefill_backend or pre
            self.dsa_decode_backend = cfg.dsa_decode_backend or dec
        # SM120 bypasses the DSA indexer for GLM-5 and runs dense MLA (calibration §2, glm5.md)
        self.dsa_active = is_dsa and hw.sm_version < 120
        self.page_size = cfg.page_size or (64 if is_dsa else 1)

        # --- context length -----------------------------------------------------------------------------------------
        self.context_length: int = int(cfg.context_length or m.context_length)

        # --- weights ---------------------------------------------------------------------------------------------------
        self.params = param_counts(m)
        self._bytes = self._weight_bytes()
        self._kv_tok = self._kv_read_bytes_per_token()
        self._decode_by_bs: dict[int, _DecodeFixed] = {}
        self.weight_gb_per_gpu: float = self._bytes.total / 1e9
        weight_gib = self._bytes.total / GIB

        # --- KV capacity (profile_max_num_token, docs/sources.md#sglang-server-arguments-and-defaults) -------
        self.kv_cell_bytes: int = self._kv_cell_bytes()
        self.runtime_overhead_gib = RUNTIME_OVERHEAD_GIB_BASE + RUNTIME_OVERHEAD_GIB_PER_PEER * (tp - 1)
        avail_gib = self.gpu_mem_gib - weight_gib - self.runtime_overhead_gib
        kv_gib = avail_gib - self.gpu_mem_gib * (1 - self.mem_fraction_static)
        profiled = max(0, int(kv_gib * GIB) // self.kv_cell_bytes)
        if cfg.max_total_tokens is not None and 0 < cfg.max_total_tokens < profiled:
            profiled = cfg.max_total_tokens
        if self.page_size > 1:
            profiled = profiled // self.page_size * self.page_size
        self.kv_capacity_tokens: int = profiled
        self.kv_gb_per_gpu: float = profiled * self.kv_cell_bytes / 1e9
        # what "available_gpu_mem" / "avail mem" print after the KV pool: the non-static remainder
        self.avail_gb_after_kv: float = max(0.0, self.gpu_mem_gib * (1 - self.mem_fraction_static)) * GIB / 1e9

        # --- CUDA graph memory (assumption: SGLang's own 2 MiB per captured bs, scaled by layers x hidden relative
        # to a Llama-8B-class model (32 x 4096), plus a pool base) ----------------------------------------------
        if self.cuda_graph_max_bs:
            scale = max(1.0, m.num_layers * m.hidden_size / (32 * 4096))
            self.graph_gb_per_gpu: float = (
                0.3 * GIB + self.cuda_graph_max_bs * 2 * MIB * scale + len(self.cuda_graph_batch_sizes) * 8 * MIB
            ) / 1e9
        else:
            self.graph_gb_per_gpu = 0.0
        self.avail_gb_after_init: float = self.avail_gb_after_kv - self.graph_gb_per_gpu

        # --- max running requests (0.5.9 init_memory_pool) -------------------------------------------------------
        if cfg.max_running_requests is not None:
            self.max_running_requests: int = int(cfg.max_running_requests)
        else:
            self.max_running_requests = min(max(int(self.kv_capacity_tokens / self.context_length * 512), 2048), 4096)

        # --- MoE runner ------------------------------------------------------------------------------------------------
        self.moe_runner_class = self._moe_runner_class()

    # ----------------------------------------------------------------------------------------------------------------
    def _weight_bytes(self) -> _Bytes:
        m, p = self.model, self.params
        qb, db = m.weight_bytes_per_param, m.dense_weight_bytes_per_param
        attn_b = qb if m.quantized_attention else db
        attn = p.attention * attn_b / self.attn_tp
        dense = p.dense_mlp * qb / self.tp
        shared = p.shared_experts * qb / self.tp
        head = p.head * db / self.tp
        experts = p.experts * qb / self.tp  # EP or TP: each GPU holds 1/tp of the expert weights either way
        embedding = p.embedding * db / self.tp
        total = attn + dense + shared + head + experts + embedding
        if m.loaded_weight_gb:
            scale = (m.loaded_weight_gb * 1e9 / self.tp) / total
            attn, dense, shared, head, experts, embedding = (
                x * scale for x in (attn, dense, shared, head, experts, embedding)
            )
            total *= scale
        return _Bytes(dense=attn + dense + shared + head, experts=experts, embedding=embedding, total=total)

    def _kv_cell_bytes(self) -> int:
        """Bytes of KV one token takes per GPU, all layers (grid/topology/kv.py, SGLang's pool sizing)."""
        return kv_bytes_per_token(self.model, self.attn_tp, self.kv_cache_dtype)

    def _kv_read_bytes_per_token(self) -> float:
        """Bytes of KV read per context token per decode step, per GPU (all layers; a DSA indexer's keys aside)."""
        return float(kv_bytes_per_token(self.model, self.attn_tp, self.kv_cache_dtype, indexer=False))

    def _moe_runner_class(self) -> str:
        r = self.cfg.moe_runner_backend
        if r == "auto":
            q = (self.model.quantization or "").lower()
            if "fp4" in q and self.hardware.sm_version >= 100:
                return "cutlass"  # flashinfer_cutlass for NVFP4 on Blackwell; trtllm-gen kernels skip SM120
            if q.startswith("fp8") and self.hardware.sm_version == 90:
                return "deep_gemm"
            return "triton"
        if r in ("cutlass", "flashinfer_cutlass"):
            return "cutlass"
        if r == "b12x":
            return "b12x"
        if r.startswith("triton"):
            return "triton"
        if r == "deep_gemm":
            return "deep_gemm"
        if "trtllm" in r:
            return "trtllm"
        if "cutedsl" in r:
            return "cutedsl"
        return "cutlass"

    @property
    def _quant_dtype(self) -> str:
        q = (self.model.quantization or "").lower()
        if "fp4" in q or "mxfp4" in q:
            return "fp4" if self.hardware.sm_version >= 100 else "bf16"
        if "fp8" in q:
            return "fp8" if self.hardware.sm_version >= 89 else "bf16"
        return "bf16"

    def _kernels_per_layer(self) -> tuple[float, float]:
        """(kernels of a dense-MLP layer, kernels of an MoE layer) for this model."""
        m = self.model
        base = K_LAYER_BASE + (K_MLA_EXTRA if m.attention == "mla" else 0) + (K_DSA_EXTRA if self.dsa_active else 0)
        return float(base), float(base + K_MOE_EXTRA)

    def _kernels_per_step(self, batch_size: int) -> float:
        dense_k, moe_k = self._kernels_per_layer()
        m = self.model
        n = dense_k * (m.num_layers - m.moe_layers) + moe_k * m.moe_layers + 6  # + embed, final norm, head, sample
        if self.cfg.torch_compile and self.uses_cuda_graph(batch_size) and batch_size <= self.cfg.torch_compile_max_bs:
            n *= TORCH_COMPILE_KERNEL_FACTOR
        return n

    def _allreduce_s(self, tokens: int) -> float:
        """One NCCL all-reduce of tokens x hidden bf16 across the TP group."""
        if self.tp <= 1:
            return 0.0
        hw, n = self.hardware, self.tp
        size = tokens * self.model.hidden_size * 2
        return hw.allreduce_latency_us * 1e-6 + 2 * (n - 1) / n * size / (hw.allreduce_bus_gbps * 1e9)

    def _n_allreduce(self) -> int:
        return 2 * self.model.num_layers + 1 if self.tp > 1 else 0  # attention out + MLP out per layer, + logits

    # ----------------------------------------------------------------------------------------------------------------
    def uses_cuda_graph(self, batch_size: int) -> bool:
        return self.cuda_graph_max_bs > 0 and 0 < batch_size <= self.cuda_graph_max_bs

    def _decode_fixed(self, batch_size: int) -> _DecodeFixed:
        """The terms of a decode step that depend on the batch size alone (weights, collectives, kernel launches, CPU),
        computed once per size: a simulation asks for the same sizes at every step."""
        fixed = self._decode_by_bs.get(batch_size)
        if fixed is not None:
            return fixed
        m, hw = self.model, self.hardware
        bs = max(1, math.ceil(batch_size / self.replicas))
        bw = hw.memory_bandwidth_gbps * 1e9
        cov = expert_coverage(bs, m.num_experts, m.experts_per_token) if m.is_moe else 0.0
        t_dense = self._bytes.dense / (ETA_BW_DENSE * bw)
        runner = self.moe_runner_class
        eta_moe = ETA_MOE.get(runner, ETA_MOE["cutlass"])
        t_experts = self._bytes.experts * cov / (eta_moe * bw)
        # compute (decode): 2 FLOPs per active weight per token, plus attention over the context
        active_per_gpu = (
            self.params.attention / self.attn_tp
            + (self.params.dense_mlp + self.params.shared_experts + self.params.head) / self.tp
            + (self.params.experts * m.experts_per_token / max(1, m.num_experts)) / self.tp
        )
        heads = m.num_attention_heads / self.attn_tp
        per_key = 4 * (m.kv_lora_rank + m.qk_rope_head_dim) if m.attention == "mla" else 4 * m.head_dim
        if runner == "b12x" and bs > B12X_SMALL_M and m.is_moe:
            moe_flops = 2 * bs * self.params.experts * m.experts_per_token / max(1, m.num_experts) / self.tp
            t_experts = max(t_experts, moe_flops / (B12X_EFF_TFLOPS * 1e12))
        comm = self._n_allreduce() * self._allreduce_s(bs)
        if self.cfg.two_batch_overlap and bs >= 2:
            comm *= 1 - TBO_HIDDEN_FRACTION
        kernels = self._kernels_per_step(bs)
        graph = self.uses_cuda_graph(bs)
        n = self.tp
        fixed = _DecodeFixed(
            bs=bs, cov=cov, t_dense=t_dense, t_experts=t_experts, flops=2 * bs * active_per_gpu,
            attn_flops_per_key=heads * per_key, peak_flops=ETA_FLOPS * _peak_tflops(hw, self._quant_dtype) * 1e12,
            comm=comm, t_launch_gpu=kernels * T_KERNEL_GPU, t_cpu_eager=0.0 if graph else kernels * T_OP_CPU_EAGER,
            t_cpu=T_STEP_CPU + bs * T_REQ_CPU,
            allreduce_bytes=(self._n_allreduce() * 2 * (n - 1) / n * bs * m.hidden_size * 2) if n > 1 else 0.0)
        self._decode_by_bs[batch_size] = fixed
        return fixed

    def _decode_terms(self, batch_size: int, context_tokens: float, total_only: bool = False):
        """A decode step's terms in seconds (and bytes, FLOPs) for ``batch_size`` requests holding ``context_tokens``
        KV tokens; with ``total_only`` just the step's seconds."""
        m, f = self.model, self._decode_fixed(batch_size)
        bw = self.hardware.memory_bandwidth_gbps * 1e9
        ctx = context_tokens / self.replicas
        # attention runs per DP rank on 1/dp of the requests; MoE sees the whole (gathered) batch
        attn_ctx = ctx / self.dp if self.dp_attention else ctx
        # KV reads: dense MLA on SM120 reads all context; DSA reads <= index_topk keys per request plus indexer keys
        kv_tok = self._kv_tok
        if self.dsa_active and m.dsa is not None:
            n_req = max(1, f.bs)
            capped = min(attn_ctx, n_req * m.dsa.index_topk)
            kv_bytes = capped * kv_tok + attn_ctx * (m.dsa.index_head_dim + 4) * m.num_layers
        else:
            kv_bytes = attn_ctx * kv_tok
        t_kv = kv_bytes / (ETA_KV * bw)
        flops = f.flops + f.attn_flops_per_key * (kv_bytes / max(kv_tok, 1))
        t_compute = flops / f.peak_flops
        t_memory = f.t_dense + f.t_experts + t_kv
        t_launch_gpu = f.t_launch_gpu
        gpu = max(t_memory, t_compute) + f.comm + t_launch_gpu
        if self.on_host:  # one device: the ops' time and their dispatch add up
            gpu, t_launch_gpu = max(t_memory, t_compute), 0.0
        total = (gpu + f.t_cpu_eager if self.on_host else max(gpu, f.t_cpu_eager)) + f.t_cpu
        if total_only:
            return total
        return {
            "hbm_bytes": self._bytes.dense + self._bytes.experts * f.cov + kv_bytes,
            "flops": flops,
            "allreduce_bytes": f.allreduce_bytes,
            "memory": t_memory,
            "memory_weights": f.t_dense + (f.t_experts if f.t_experts else 0.0),
            "memory_kv": t_kv,
            "compute": t_compute,
            "allreduce": f.comm,
            "launch": t_launch_gpu,
            "eager_cpu": f.t_cpu_eager,
            "eager_exposed": max(0.0, f.t_cpu_eager - gpu),
            "cpu": f.t_cpu,
            "gpu": gpu,
            "total": total,
        }

    def decode_step_s(self, batch_size: int, context_tokens: float) -> float:
        """One decode iteration; ``context_tokens`` = sum of KV tokens of the running batch."""
        if batch_size <= 0:
            return 0.0
        return self._decode_terms(batch_size, context_tokens, total_only=True)

    def breakdown(self, batch_size: int, context_tokens: float) -> dict[str, float]:
        """Decode step terms in seconds (memory, compute, allreduce, launch, cpu, ...) for explanations."""
        return self._decode_terms(max(1, batch_size), context_tokens)

    def decode_telemetry(self, batch_size: int, context_tokens: int) -> dict[str, float | str]:
        """What NVML would show on one GPU while this server decodes ``batch_size`` requests holding
        ``context_tokens`` KV tokens back to back (modelled, per GPU; the twin's /grid/telemetry scales it by the
        fraction of time it was busy). Keys and units:

        * ``step_s`` (s): one decode iteration (:meth:`decode_step_s`).
        * ``sm_busy`` (fraction): time a kernel runs = GPU time (memory/compute, all-reduce, per-kernel gaps) / step;
          NVML's ``utilization.gpu`` counts a kernel that waits on a collective as busy.
        * ``mem_bw`` (fraction): HBM/GDDR bytes read per step / step / spec-sheet bandwidth.
        * ``tensor`` (fraction): FLOPs per step / step / spec-sheet peak of the weights' dtype.
        * ``link_bytes_per_s`` (B/s, each direction): NCCL ring all-reduce traffic per GPU,
          ``n_allreduce x 2(n-1)/n x batch x hidden x 2 B`` per step (the same term as the step time);
          ``link`` says whether it crosses PCIe or NVLink (``HardwareSpec.interconnect``).
        * ``power_frac`` (of ``tdp_w``): :func:`modelled_power_fraction`.
        * ``memory_used_gb`` (GB): weights + KV pool + CUDA graphs (the resolved memory plan).
        """
        t = self._decode_terms(max(1, batch_size), context_tokens)
        step = max(t["total"], 1e-12)
        hw = self.hardware
        mem_bw = min(1.0, t["hbm_bytes"] / step / (hw.memory_bandwidth_gbps * 1e9))
        tensor = min(1.0, t["flops"] / step / (_peak_tflops(hw, self._quant_dtype) * 1e12))
        sm = min(1.0, t["gpu"] / step)
        return {
            "step_s": step, "sm_busy": sm, "mem_bw": mem_bw, "tensor": tensor,
            "link": hw.interconnect, "link_bytes_per_s": t["allreduce_bytes"] / step,
            "power_frac": modelled_power_fraction(sm, mem_bw, tensor),
            "memory_used_gb": self.weight_gb_per_gpu + self.kv_gb_per_gpu + self.graph_gb_per_gpu,
        }

    def prefill_step_s(self, new_tokens: int, cached_tokens: float = 0, num_seqs: int = 1) -> float:
        """One prefill (extend) batch of ``new_tokens`` over ``num_seqs`` sequences with ``cached_tokens`` prefix."""
        if new_tokens <= 0:
            return 0.0
        m, hw = self.model, self.hardware
        seqs = max(1, num_seqs)
        n = max(1, math.ceil(new_tokens / self.replicas))
        bw = hw.memory_bandwidth_gbps * 1e9
        p = self.params
        # Attention runs per DP rank on 1/dp of the tokens with DP attention; the MLP/MoE sees every token.
        n_attn = n / self.dp if self.dp_attention else n
        attn_proj = 2 * n_attn * p.attention / self.attn_tp
        head = 2 * seqs * p.head / self.tp
        avg_keys = cached_tokens / seqs + n / seqs / 2
        if self.dsa_active and m.dsa is not None:
            avg_keys = min(avg_keys, m.dsa.index_topk)
        heads = m.num_attention_heads / self.attn_tp
        if m.attention == "mla":
            per_key = 2 * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            attn_width = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        else:
            per_key = 4 * m.head_dim
            attn_width = heads * m.head_dim
        attn_core = n_attn * heads * per_key * avg_keys * m.num_layers
        bf16 = _peak_tflops(hw, "bf16") * 1e12
        qpeak = _peak_tflops(hw, self._quant_dtype) * 1e12
        proj_peak = qpeak if m.quantized_attention else bf16
        # GEMMs at the efficiency of their per-GPU shape (gemm_efficiency): rows = tokens through the GEMM, columns
        # = its output width on this GPU. Routed experts see tokens x top_k / experts rows each and, TP-sliced,
        # moe_intermediate / tp columns (whole experts under EP).
        t_compute = attn_proj / (gemm_efficiency(n_attn, attn_width) * proj_peak)
        t_compute += attn_core / (ETA_ATTN_PREFILL * bf16) + head / (gemm_efficiency(seqs, m.vocab_size / self.tp) * bf16)
        if p.dense_mlp:
            t_compute += 2 * n * p.dense_mlp / self.tp / (
                gemm_efficiency(n, m.intermediate_size / self.tp) * qpeak
            )
        if m.is_moe:
            if p.shared_experts:
                t_compute += 2 * n * p.shared_experts / self.tp / (
                    gemm_efficiency(n, m.moe_intermediate_size * m.num_shared_experts / self.tp) * qpeak
                )
            rows = n * m.experts_per_token / max(1, m.num_experts)
            cols = m.moe_intermediate_size if self.ep > 1 else m.moe_intermediate_size / self.tp
            expert_flops = 2 * n * p.experts * m.experts_per_token / max(1, m.num_experts) / self.tp
            t_compute += expert_flops / (gemm_efficiency(rows, cols) * qpeak)
        cov = expert_coverage(n, m.num_experts, m.experts_per_token) if m.is_moe else 0.0
        kv_write = n_attn * self.kv_cell_bytes
        kv_read = cached_tokens / self.replicas * self._kv_read_bytes_per_token() / (self.dp if self.dp_attention else 1)
        # prefill GEMMs stream their weights once per batch at the dense GEMM rate (many rows per weight tile)
        t_memory = (
            self._bytes.dense / (ETA_BW_DENSE * bw)
            + self._bytes.experts * cov / (ETA_BW_DENSE * bw)
            + (kv_write + kv_read) / (ETA_KV * bw)
        )
        comm = self._n_allreduce() * self._allreduce_s(n)
        if self.cfg.two_batch_overlap:
            comm *= 1 - TBO_HIDDEN_FRACTION
        kernels = self._kernels_per_step(seqs)
        gpu = max(t_memory, t_compute) + comm + kernels * T_KERNEL_GPU
        # prefill is not graph-captured unless --enable-piecewise-cuda-graph: Python launches every op, overlapped
        # with the GPU, so only the excess over the GPU time shows
        cpu_eager = 0.0 if self.cfg.piecewise_cuda_graph else kernels * T_OP_CPU_EAGER
        if self.on_host:  # one device: the ops' time and their dispatch add up
            return max(t_memory, t_compute) + kernels * T_OP_CPU_EAGER + T_STEP_CPU + seqs * T_REQ_CPU
        return max(gpu, cpu_eager) + T_STEP_CPU + seqs * T_REQ_CPU

    def frontend_latency_s(self, input_tokens: int) -> float:
        """Seconds a request spends outside the scheduler before its first token reaches the client: HTTP,
        tokenization, and the first token's detokenization and delivery (``T_FRONTEND_S`` + per-token
        ``T_TOKENIZE_PER_TOKEN_S``). Runs in SGLang's tokenizer/detokenizer processes, overlapped with the GPU,
        so it adds to TTFT and end-to-end latency but not to TPOT or throughput."""
        return T_FRONTEND_S + max(0, input_tokens) * T_TOKENIZE_PER_TOKEN_S

    # ----------------------------------------------------------------------------------------------------------------
    def startup_phases_s(self) -> dict[str, float]:
        """Ordered modelled seconds of each startup phase (the twin's log timeline follows these)."""
        m, hw = self.model, self.hardware
        gpus = self.tp * self.replicas
        phases: dict[str, float] = {}
        phases["init_distributed"] = T_INIT_DIST_BASE + (T_INIT_DIST_PER_GPU * gpus if gpus > 1 else 0.0)
        node_bytes = self._bytes.total * gpus
        phases["load_weights"] = node_bytes / (WEIGHT_LOAD_GBPS * 1e9)
        if m.quantization:
            phases["process_weights"] = T_QUANT_POSTPROCESS_PER_GB * self._bytes.total / 1e9
        phases["kv_cache_alloc"] = 0.5 + self.kv_gb_per_gpu * 0.05
        if self.cuda_graph_max_bs:
            n_sizes = len(self.cuda_graph_batch_sizes)
            kernels = self._kernels_per_step(1)
            fp4_sm120 = "fp4" in (m.quantization or "").lower() and hw.sm_version >= 120
            per_moe = T_CAPTURE_FP4_MOE_LAYER if fp4_sm120 else T_CAPTURE_MOE_LAYER
            phases["cuda_graph_capture"] = n_sizes * (kernels * T_CAPTURE_PER_KERNEL + per_moe * m.moe_layers)
            if self.cfg.torch_compile:
                compiled = [bs for bs in self.cuda_graph_batch_sizes if bs <= self.cfg.torch_compile_max_bs]
                phases["torch_compile"] = len(compiled) * T_TORCH_COMPILE_PER_BS * m.num_layers / 32
        phases["warmup"] = 2.0 + self.prefill_step_s(8) + 8 * self.decode_step_s(1, 16)
        return phases
