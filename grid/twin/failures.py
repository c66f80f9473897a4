"""Known SGLang failure modes the twin reproduces, as a data table.

Each row is a predicate over (model, hardware, flags, resolved settings, version) plus what the failure looks like: its
effect, the startup phase (or runtime offset) at which it strikes, the exit code, verbatim-style log lines and the
source (seed write-up, reference section, SGLang issue/PR). ``find_failures`` evaluates every row; the twin's server
acts on the first startup effect and on runtime effects after the first decode.

Effects: ``startup_crash`` (exception during startup, process exits), ``startup_oom`` (CUDA OOM during startup),
``startup_hang`` (startup never finishes; the process stays alive), ``nan_output`` (server runs, decode produces NaN
logits / garbage text; the process keeps running, ``exit_code`` 0), ``runtime_crash`` (scheduler dies during serving).

Sources: docs/sources.md#sglang-log-formats-readiness-phases-failure-modes (failure table),
docs/sources.md#the-seed-session, docs/sources.md#hardware-spec-sheets and docs/sources.md#model-architectures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from grid.releases.checks import Effect
from grid.config.specs import HardwareSpec, ModelSpec
from grid.twin.perf import PerfModel, ServingConfig
from grid.versions import release_tuple
from grid.releases.features import holds
from grid.twin.logs import NAN_LINE


@dataclass(frozen=True)
class FailureMode:
    id: str
    effect: Effect
    at_s: float  # modelled seconds after launch (startup effects) or after first decode (runtime)
    exit_code: int
    log_lines: tuple[str, ...]  # verbatim-style SGLang log lines to print (e.g. the RuntimeError / NaN lines)
    description: str
    source: str  # seed file / sglang issue or PR number


@dataclass(frozen=True)
class _Ctx:
    model: ModelSpec
    hw: HardwareSpec
    cfg: ServingConfig
    perf: PerfModel

    @property
    def v(self) -> tuple[int, ...]:
        return release_tuple(self.cfg.version)

    @property
    def glm_dsa_sm120(self) -> bool:
        return self.model.model_type == "glm_moe_dsa" and self.hw.sm_version >= 120

    @property
    def dsa_sm120(self) -> bool:
        return self.model.dsa is not None and self.hw.sm_version >= 120

    def dsa_backends(self) -> set[str]:
        return {b for b in (self.perf.dsa_prefill_backend, self.perf.dsa_decode_backend) if b}

    @property
    def dsa_flag(self) -> str:
        return "--dsa" if holds("dsa_named", self.v) else "--nsa"


@dataclass(frozen=True)
class _Row:
    id: str
    effect: Effect
    phase: str  # startup phase it strikes in (key of PerfModel.startup_phases_s) or "decode"
    exit_code: int
    log_lines: tuple[str, ...]  # may use {graph_gb}, {avail_gb}, {backend}, {flag}, {kv_dtype}, {weight_gb}, {mem_gb},
    # {sm}
    description: str
    source: str
    when: Callable[[_Ctx], bool]
    phase_fraction: float = 0.1  # where inside the phase it strikes
    runtime_after_s: float = 0.0  # for decode-phase rows: seconds after the first decode


def _requirement(rule: str) -> Callable[[_Ctx], bool]:
    """A row that fires where the kernel requirement ``rule`` of grid/releases/checks.py ``RULES`` (stage
    ``requirement``: release range, hardware predicate, settings) does, for the backends the server resolved: the
    requirement is declared once there, and grid's pre-launch refusal and the twin's crash cannot disagree
    (tests/twin/test_failure_rules_agree.py)."""
    from grid.releases.checks import RULES

    rules = [r for r in RULES if r.name == rule and r.stage == "requirement"]
    if not rules:
        raise KeyError(f"no requirement rule named {rule!r} in grid/releases/checks.py RULES")

    reads = sorted({k for r in rules for k in r.reads})

    def when(c: _Ctx) -> bool:
        # every setting the rule reads, as the server resolved it (the DSA backends: the performance model's pick)
        settings = {k: getattr(c.perf, k) if k in RESOLVED_BY_PERF else getattr(c.cfg, k, None) for k in reads}
        return any(r.refuses(settings, c.v, c.model, c.hw) is not None for r in rules)
    return when


#: Settings whose value the server resolves at start-up (the performance model holds the resolved value, the
#: ServingConfig the flag as given, possibly None)
RESOLVED_BY_PERF = ("dsa_prefill_backend", "dsa_decode_backend")


_CAPTURE_HINT = (
    "Possible solutions: 1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7) "
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16) "
    "3. disable torch compile by not using --enable-torch-compile "
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss) "
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "
)

_NAN_LINE = NAN_LINE

#: The failures only the twin's model can foresee (memory, NaN, hangs, one release's crash), written here.
_WRITTEN_HERE: tuple[_Row, ...] = (
    _Row(
        id="weights_oom",
        effect="startup_oom",
        phase="load_weights",
        exit_code=1,
        log_lines=(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
            "{mem_gb:.2f} GiB of which 0 bytes is free.",
        ),
        description="Weights per GPU exceed GPU memory: more GPUs (tp) or a smaller checkpoint is needed.",
        source="docs/sources.md#model-architectures ('4 GPUs is too small' for GLM-5 NVFP4); "
               "docs/sources.md#sglang-log-formats-readiness-phases-failure-modes",
        when=lambda c: c.perf.weight_gb_per_gpu / 1.073741824 + c.perf.runtime_overhead_gib >= c.perf.gpu_mem_gib,
        phase_fraction=0.9,
    ),
    _Row(
        id="kv_pool_not_enough_memory",
        effect="startup_crash",
        phase="kv_cache_alloc",
        exit_code=1,
        log_lines=("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",),
        description="After weights, the static fraction leaves no room for a KV pool.",
        source="SGLang model_runner profile_max_num_token (its KV capacity formula gives <= 0; "
               "docs/sources.md#sglang-server-arguments-and-defaults)",
        when=lambda c: c.perf.weight_gb_per_gpu / 1.073741824 + c.perf.runtime_overhead_gib < c.perf.gpu_mem_gib
        and c.perf.kv_capacity_tokens <= 0,
    ),
    _Row(
        id="dsa_flashmla_nan_sm120",
        effect="nan_output",
        phase="decode",
        exit_code=0,
        log_lines=(_NAN_LINE, _NAN_LINE),
        description="GLM-5 on SM120 with the flashmla_kv / flashmla_sparse DSA backends (also flashmla_auto, the "
        "0.5.9 fp8 default, which resolves to them): NaN during decode, garbage output. Fix: trtllm backends (seed "
        "build) or tilelang with bf16 KV.",
        source="the seed session (docs/sources.md#the-seed-session: flashmla_kv, flashmla_sparse -> NaN; trtllm "
               "coherent); DSA defaults flashmla_auto/flashmla_kv "
               "(docs/sources.md#sglang-server-arguments-and-defaults)",
        when=lambda c: c.glm_dsa_sm120
        and c.v < (0, 5, 12)
        and bool(c.dsa_backends() & {"flashmla_kv", "flashmla_sparse", "flashmla_auto"}),
    ),
    _Row(
        id="dsa_fp8_kv_garbled_sm120",
        effect="nan_output",
        phase="decode",
        exit_code=0,
        log_lines=(),
        description="FP8 KV cache on SM120 gives garbled output for GLM-5 on the dense-MLA path (tilelang etc.); "
        "BF16 KV is required. The seed's trtllm backends are the exception (coherent output with the 0.5.9 auto "
        "fp8 KV).",
        source="GLM-5 facts (voipmonitor/rtx6kpro glm5.md, 2026-03; docs/sources.md#model-architectures); the seed "
               "session (trtllm coherent)",
        when=lambda c: c.glm_dsa_sm120
        and c.perf.kv_cache_dtype.startswith("fp8")
        and c.v < (0, 5, 23)
        and not (c.dsa_backends() & {"flashmla_kv", "flashmla_sparse", "flashmla_auto"})
        and c.dsa_backends() != {"trtllm"}
        and not ("tilelang" in c.dsa_backends() and (0, 5, 20) <= c.v),
    ),
    _Row(
        id="dsa_deep_gemm_unsupported_arch_sm120",
        effect="startup_crash",
        phase="cuda_graph_capture",
        exit_code=1,
        log_lines=(
            "RuntimeError: Assertion error (/deepgemm/csrc/apis/attention.hpp:219): Unsupported architecture",
        ),
        description="0.5.12: DSA metadata init calls deep_gemm.get_paged_mqa_logits_metadata, which has no SM120 "
        "kernel, with every --nsa-* backend. Keyed to 0.5.12 (the report); later builds have the tilelang+bf16 recipe.",
        source="sgl-project/sglang#26087 (GLM-5.1-NVFP4, v0.5.12; "
               "docs/sources.md#sglang-log-formats-readiness-phases-failure-modes)",
        when=lambda c: c.dsa_sm120 and (0, 5, 12) <= c.v < (0, 5, 13) and "trtllm" not in c.dsa_backends(),
    ),
    _Row(
        id="dsa_flashinfer_sparse_mla_graph_hang_sm120",
        effect="startup_hang",
        phase="cuda_graph_capture",
        exit_code=0,
        log_lines=("Capturing batches (bs=1 avail_mem={avail_gb:.2f} GB):   0%|          | 0/{n_graphs} [00:00<?, ?it/s]",),
        description="Full decode CUDA-graph capture never returns with the flashinfer_sparse_mla DSA backend on "
        "SM120 (observed 36 min). Fix: breakable graph, cap max bs, or disable graphs.",
        source="PR sgl-project/sglang#29580 (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes)",
        when=lambda c: c.dsa_sm120 and "flashinfer_sparse_mla" in c.dsa_backends() and c.perf.cuda_graph_max_bs > 0,
        phase_fraction=0.0,
    ),
    _Row(
        id="cuda_graph_capture_oom",
        effect="startup_oom",
        phase="cuda_graph_capture",
        exit_code=1,
        log_lines=(
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate {graph_gb:.2f} GiB. "
            "GPU 0 has a total capacity of {mem_gb:.2f} GiB of which {avail_gb:.2f} GiB is free.",
            _CAPTURE_HINT,
        ),
        description="CUDA-graph memory for cuda_graph_max_bs does not fit in what the static fraction leaves; on "
        "96 GB RTX PRO 6000 the default decode max_bs 512 OOMed.",
        source="cuda_graph_runner CUDA_GRAPH_CAPTURE_FAILED_MSG "
               "(docs/sources.md#sglang-log-formats-readiness-phases-failure-modes); #4489, #5285, PR #29580",
        when=lambda c: c.perf.cuda_graph_max_bs > 0
        and c.perf.kv_capacity_tokens > 0
        and c.perf.graph_gb_per_gpu > c.perf.avail_gb_after_kv,
        phase_fraction=0.8,
    ),
)


def _requirement_rows() -> tuple[_Row, ...]:
    """The rows of the kernel requirements (grid/releases/checks.py ``RULES`` with a ``twin_failure``): declared once
    there, with the release range, hardware, message and source; the row fires where the rule refuses."""
    from grid.releases.checks import RULES

    rows: dict[str, _Row] = {}
    for rule in RULES:
        tf = rule.twin_failure
        if tf is None or tf.id in rows:
            continue
        rows[tf.id] = _Row(id=tf.id, effect=tf.effect, phase=tf.phase, exit_code=tf.exit_code,
                           log_lines=(tf.line(rule.message).replace("{", "{{").replace("}", "}}"),),
                           description=tf.description, source=rule.where, when=_requirement(rule.name),
                           phase_fraction=tf.phase_fraction)
    return tuple(rows.values())


#: Every row: the kernel requirements' rows built from their rules, then the failures written here.
FAILURE_TABLE: tuple[_Row, ...] = _requirement_rows() + _WRITTEN_HERE


def _phase_start(phases: dict[str, float], phase: str, fraction: float) -> float:
    t = 0.0
    for name, dur in phases.items():
        if name == phase:
            return t + fraction * dur
        t += dur
    return t  # phase not present (e.g. no graph capture): strikes at the end of startup


def find_failures(model: ModelSpec, hardware: HardwareSpec, cfg: ServingConfig, perf: PerfModel) -> list[FailureMode]:
    """Every table row that applies, with ``at_s`` resolved from the modelled startup timeline, earliest first."""
    ctx = _Ctx(model, hardware, cfg, perf)
    phases = perf.startup_phases_s()
    fmt = {
        "graph_gb": perf.graph_gb_per_gpu / 1.073741824,
        "avail_gb": perf.avail_gb_after_kv / 1.073741824,
        "mem_gb": perf.gpu_mem_gib,
        "weight_gb": perf.weight_gb_per_gpu,
        "kv_dtype": perf.kv_cache_dtype,
        "flag": ctx.dsa_flag,
        "n_graphs": len(perf.cuda_graph_batch_sizes),
        "sm": hardware.sm_version,
    }
    out: list[FailureMode] = []
    for row in FAILURE_TABLE:
        if not row.when(ctx):
            continue
        if row.phase == "decode":
            at = row.runtime_after_s
        else:
            at = _phase_start(phases, row.phase, row.phase_fraction)
        out.append(
            FailureMode(
                id=row.id,
                effect=row.effect,
                at_s=at,
                exit_code=row.exit_code,
                log_lines=tuple(line.format(**fmt) for line in row.log_lines),
                description=row.description,
                source=row.source,
            )
        )
    startup = [f for f in out if f.effect.startswith("startup")]
    runtime = [f for f in out if not f.effect.startswith("startup")]
    return sorted(startup, key=lambda f: f.at_s) + runtime
