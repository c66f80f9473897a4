"""Pre-launch checks: would SGLang of a given version accept this configuration? Answered without launching it.

Three layers, each with its source in SGLang's released wheels (docs/sources.md#sglang-server-arguments-and-defaults):

1. every setting is known and its value is among the version's choices (``flags.check_setting``, §1.1);
2. every flag the catalog renders exists in that version (``flags.unknown_flags``, §0 renames and removals);
3. the combinations SGLang's ``check_server_args`` / validation hooks enforce at launch (§1.3), listed in
   :data:`RULES`. Each rule reproduces SGLang's own error message.

4. the kernels' hardware requirements (stage ``requirement`` in :data:`RULES`: fa3 needs SM90, aiter needs ROCm,
   the trtllm DSA backend from 0.5.12 has no SM120 kernel): SGLang accepts these flags and the server dies later
   (import error, first forward), so without this layer each would cost a launch to learn.

An impossible configuration is recorded ``invalid`` (error class ``refused``) with the reason and no launch is spent
on it (``Engine.refuse``). The twin's CLI (grid/twin/cli.py) enforces the same rules at launch, as SGLang does;
tests/releases/test_checks.py compares the two on the same configurations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from grid.releases.flags import (
    SETTINGS,
    SettingError,
    Version,
    check_setting,
    is_speculative,
    parse_version,
    to_argv,
    unknown_flags,
)

#: a2a backends that force ``ep_size := tp_size`` (0.5.9 ``_handle_a2a_moe``, --ep-size;
#: docs/sources.md#sglang-server-arguments-and-defaults).
A2A_FORCES_EP = ("deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori")
#: SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK default (docs/sources.md#sglang-server-arguments-and-defaults).
MORI_MAX_DISPATCH_TOKENS = 4096
#: KV dtypes a DSA model accepts (assert in 0.5.9 ``_handle_model_specific_adjustments``;
#: docs/sources.md#sglang-server-arguments-and-defaults).
DSA_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3")


def _dp_attention(s: dict[str, Any]) -> bool:
    """Attention DP is on: ``enable_dp_attention`` with ``dp_size > 1`` (SGLang turns it off at dp_size 1)."""
    return bool(s.get("enable_dp_attention")) and int(s.get("dp_size") or 1) > 1


def _ep_size(s: dict[str, Any]) -> int:
    tp = int(s.get("tp_size") or 1)
    if s.get("moe_a2a_backend") in A2A_FORCES_EP:
        return tp
    return int(s.get("ep_size") or 1)


@dataclass(frozen=True)
class Hardware:
    """A hardware predicate: a vendor (``"nvidia"``, ``"amd"``; None = any) and an SM range (compute capability x10,
    inclusive; None = unbounded). The same table answers "does SGLang refuse this here" and, for later work,
    "which hardware does this setting need"."""

    vendor: str | None = None
    sm_min: int | None = None
    sm_max: int | None = None

    def matches(self, vendor: str | None, sm: int | None) -> bool:
        """True when hardware ``(vendor, sm)`` is inside the predicate; an unknown vendor counts as NVIDIA (CUDA is
        SGLang's default device) and an unknown SM matches only predicates without an SM range."""
        vendor = vendor or "nvidia"
        if self.vendor is not None and vendor != self.vendor:
            return False
        if self.sm_min is None and self.sm_max is None:
            return True
        if sm is None:
            return False
        return (self.sm_min is None or sm >= self.sm_min) and (self.sm_max is None or sm <= self.sm_max)


ANY_HARDWARE = (Hardware(),)
CUDA = (Hardware(vendor="nvidia"),)


#: How a known failure shows on the twin: it dies during start (a crash, a CUDA out-of-memory, or a hang until the
#: startup timeout), answers with NaN logits, or crashes once serving. Each is a fault kind the twin plays
#: (grid/twin/faults.py ``FAULT_KINDS``; tests/twin/test_failures.py checks every one has its fault).
Effect = Literal["startup_crash", "startup_oom", "startup_hang", "nan_output", "runtime_crash"]


@dataclass(frozen=True)
class TwinFailure:
    """How the twin shows a kernel requirement's failure when a configuration breaking it is launched anyway (on the
    twin, with ``grid.search`` told to launch it, or a changed hardware file): the failure-table row
    (grid/twin/failures.py) is built from this and its rule, so the pre-launch refusal and the twin's crash cannot
    disagree. ``id``: the row's name (known causes in the report); ``effect``: a failure-table effect; ``phase``: the
    startup phase it strikes in (``PerfModel.startup_phases_s``), ``phase_fraction`` of the way in; ``log_line``: the
    line SGLang's log ends with (default: ``exception: <the rule's message>``); ``description``: what happens and the
    fix."""

    id: str
    description: str
    effect: Effect = "startup_crash"
    phase: str = "cuda_graph_capture"
    phase_fraction: float = 0.1
    exception: str = "RuntimeError"
    log_line: str | None = None
    exit_code: int = 1

    def line(self, message: str) -> str:
        return self.log_line if self.log_line is not None else f"{self.exception}: {message}"


#: Where a rule bites (:attr:`Rule.stage`): SGLang's argument checks refuse it at launch; a kernel's hardware
#: requirement kills the server later; SGLang starts and dies before it is ready; only the twin cannot represent it.
Stage = Literal["launch", "requirement", "start", "twin"]


@dataclass(frozen=True)
class Rule:
    """One launch-time refusal of SGLang: releases ``since`` .. ``until`` (inclusive; None = still), the hardware it
    applies on (any of ``hardware``), SGLang's own message (``{}`` filled from ``when``'s tuple), and ``when``:
    settings, model -> None (accepted) or the tuple of message arguments (refused). ``where``: the SGLang function
    that raises it (the catalog's ``refusals`` list, from which each message was copied; tests/releases/test_catalog.py
    checks every message against it)."""

    name: str
    since: str
    until: str | None
    message: str
    when: Callable[..., tuple | None]  # (settings, model) -> args, or (settings, model, hardware) -> args
    where: str
    hardware: tuple[Hardware, ...] = ANY_HARDWARE
    #: ``"launch"``: SGLang's own argument checks refuse it (the twin enforces it at launch too); ``"requirement"``:
    #: a kernel's hardware requirement SGLang does not check at argument time; the server would die later (import,
    #: first forward). grid refuses both before launch; ``where`` then gives the public source and ``twin_failure``
    #: how the twin shows the failure.
    #: ``"start"``: SGLang starts and dies before it is ready with ``message`` (read off the running server); grid
    #: does not refuse it but knows it fails (grid/search/knowledge.py: launched last, as a known failure).
    #: ``"twin"``: what the twin cannot represent (only the twin refuses it).
    stage: Stage = "launch"
    #: ``when`` takes the hardware too: ``when(settings, model, hardware)`` (the twin's cross-node rule reads the
    #: hardware file's nodes and network).
    with_hardware: bool = False
    #: For a ``requirement``: how the server dies when launched anyway (the twin's failure-table row).
    twin_failure: TwinFailure | None = None
    #: The settings (grid's names, grid/releases/flags.py) ``when`` reads; :func:`rules_reading` answers the other
    #: way round, and tests/releases/test_checks.py checks the declaration against what ``when`` reads.
    reads: tuple[str, ...] = ()

    def releases(self, version: Version) -> bool:
        return parse_version(self.since) <= version[:3] and (self.until is None
                                                            or version[:3] <= parse_version(self.until))

    def source(self, version: Version) -> dict | None:
        """The catalog's refusal entry (``function``, ``kind``, ``message``) of ``version`` this rule reproduces
        (None for a ``requirement``: SGLang has no such argument check)."""
        from grid.releases import catalog

        if self.stage != "launch":
            return None

        fixed = self.message.split("{}")[0].rstrip(".")
        for entry in catalog.release(version).refusals:
            if entry["message"].startswith(fixed):
                return entry
        return None

    def refuses(self, settings: dict[str, Any], version: Version, model: Any = None, hardware: Any = None) -> str | None:
        """SGLang's message when this rule refuses ``settings`` on ``version`` and ``hardware`` (a ``HardwareSpec``
        or anything with ``vendor``/``sm_version``; None = unknown), else None."""
        if not self.releases(version):
            return None
        vendor, sm = getattr(hardware, "vendor", None), getattr(hardware, "sm_version", None)
        if not any(h.matches(vendor, sm) for h in self.hardware):
            return None
        args = self.when(settings, model, hardware) if self.with_hardware else self.when(settings, model)
        return None if args is None else self.message.format(*args)


def _tbo_a2a_none(s: dict[str, Any], model: Any) -> tuple | None:
    return () if s.get("two_batch_overlap") and (s.get("moe_a2a_backend") or "none") == "none" else None


def _tbo_no_dp(s: dict[str, Any], model: Any) -> tuple | None:
    return () if _tbo_a2a_none(s, model) is not None and not _dp_attention(s) else None


def _tbo_with(a2a: str) -> Callable[[dict[str, Any], Any], tuple | None]:
    return lambda s, m: () if s.get("two_batch_overlap") and s.get("moe_a2a_backend") == a2a else None


def _priority(s: dict[str, Any], model: Any) -> tuple | None:
    policy = s.get("schedule_policy") or "fcfs"
    return (policy,) if s.get("enable_priority_scheduling") and policy not in ("fcfs", "lof") else None


def _dp_divides(s: dict[str, Any], model: Any) -> tuple | None:
    return () if _dp_attention(s) and int(s.get("tp_size") or 1) % int(s["dp_size"]) else None


def _chunk_page(s: dict[str, Any], model: Any) -> tuple | None:
    c, p = s.get("chunked_prefill_size"), s.get("page_size")
    return () if c is not None and c > 0 and p and c % p else None


def _quant(s: dict[str, Any], model: Any) -> str | None:
    return s.get("quantization") or (getattr(model, "quantization", None) if model is not None else None)


def _runner_quant(runner: str, allowed: tuple) -> Callable[[dict[str, Any], Any], tuple | None]:
    def when(s: dict[str, Any], model: Any) -> tuple | None:
        q = _quant(s, model)
        return (q,) if (s.get("moe_runner_backend") or "auto") == runner and q not in allowed else None
    return when


def _cutlass_ep(s: dict[str, Any], model: Any) -> tuple | None:
    return () if s.get("moe_runner_backend") == "cutlass" and _quant(s, model) in ("fp8", "mxfp8") \
        and _ep_size(s) != 1 else None


def _fi_a2a_runner(runners: tuple) -> Callable[[dict[str, Any], Any], tuple | None]:
    return lambda s, m: () if s.get("moe_a2a_backend") == "flashinfer" \
        and (s.get("moe_runner_backend") or "auto") not in runners else None


def _mori(s: dict[str, Any], model: Any) -> tuple | None:
    chunk = s.get("chunked_prefill_size")
    return () if s.get("moe_a2a_backend") == "mori" and chunk is not None and chunk > MORI_MAX_DISPATCH_TOKENS \
        else None


def _is_dsa(model: Any) -> bool:
    return model is not None and getattr(model, "dsa", None) is not None


def _dsa_kv(s: dict[str, Any], model: Any) -> tuple | None:
    return () if _is_dsa(model) and (s.get("kv_cache_dtype") or "auto") not in DSA_KV_DTYPES else None


def _dsa_backends(s: dict[str, Any]) -> set:
    return {s.get("dsa_prefill_backend"), s.get("dsa_decode_backend")} - {None}


def _tilelang_fp8(s: dict[str, Any], model: Any) -> tuple | None:
    return () if _is_dsa(model) and s.get("kv_cache_dtype") == "fp8_e4m3" and "tilelang" in _dsa_backends(s) \
        else None


def _tilelang_fp8_mixed(s: dict[str, Any], model: Any) -> tuple | None:
    return () if _tilelang_fp8(s, model) is not None and _dsa_backends(s) != {"tilelang"} else None


def _backends(s: dict[str, Any]) -> set:
    """Every attention kernel family the settings select: the attention backend and both DSA/NSA backends."""
    return _dsa_backends(s) | ({s["attention_backend"]} if s.get("attention_backend") else set())


def _uses(kernel: str) -> Callable[[dict[str, Any], Any], tuple | None]:
    return lambda s, m: () if kernel in _backends(s) else None


def _is_mla(model: Any) -> bool:
    """SGLang's ``use_mla_backend``: the model keeps a latent (MLA) KV cache (DeepSeek V2/V3, GLM-5; its DSA models
    are MLA)."""
    return getattr(model, "attention", None) == "mla" or _is_dsa(model)


def _fa3_unsupported(s: dict[str, Any], model: Any, hardware: Any = None) -> tuple | None:
    """fa3 selected where SGLang's fa3 backend refuses the device: SM80-89 serves it to non-MLA models only, SM90 to
    every model, anything else to none (the rule's hardware ranges leave SM90 out)."""
    if "fa3" not in _backends(s):
        return None
    sm = getattr(hardware, "sm_version", None)
    if sm is not None and 80 <= sm <= 89 and not _is_mla(model):
        return None
    return ()


def _trtllm_dsa(s: dict[str, Any], model: Any) -> tuple | None:
    return () if _is_dsa(model) and "trtllm" in _dsa_backends(s) else None


def _megamoe(s: dict[str, Any], model: Any) -> tuple | None:
    return () if s.get("moe_a2a_backend") == "megamoe" else None


# --- what the twin cannot represent (stage "twin") -----------------------------------------------------
#: Architectures with sliding-window attention with sinks (gpt-oss) or hybrid linear attention (Qwen3-Next / Qwen3.5
#: Gated DeltaNet layers): grid/twin/attention.py models them when the model description sets ``sliding_window`` /
#: ``linear_attention_layers``; without those the twin's KV and attention costs would be wrong, so it refuses.
SLIDING_WINDOW_ARCHS = ("GptOssForCausalLM",)
HYBRID_LINEAR_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                       "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
#: The public-number searches behind each twin refusal (docs/twin.md "What the twin refuses").
TWIN_SEARCHES = "docs/twin.md#what-the-twin-refuses"


#: The twin's refusal of pipeline parallelism with speculative decoding (``{}``: pp_size, the algorithm).
TWIN_PP_SPECULATIVE = ("the twin cannot model --pp-size {} with --speculative-algorithm {} (pipeline parallelism and "
                       "speculative decoding are modelled apart); searches: " + TWIN_SEARCHES)


#: Networks with a public calibration row for a TP group spanning nodes (docs/twin.md, grid/twin/crossnode.py); the
#: twin refuses the others.
CROSS_NODE_LINKS = ("infiniband",)


def cross_node_refusal(settings: dict[str, Any], hardware: Any) -> str | None:
    """Why the twin cannot model ``settings`` (grid's setting names: ``nnodes``, ``tp_size``, ``pp_size``,
    ``dp_size``, ``moe_a2a_backend``) over several nodes of ``hardware`` (a ``HardwareSpec``; None: unknown), or
    None when it can (or ``nnodes`` is 1). Each reason names the key and what is allowed."""
    n = int(settings.get("nnodes") or 1)
    if n <= 1:
        return None
    nodes = int(getattr(hardware, "nodes", 1) or 1)
    if hardware is None or nodes <= 1:
        name = getattr(hardware, "name", "unknown")
        return (f"the hardware description ({name}) is one node; describe the nodes (hardware.nodes, "
                "internode_link, internode_gbps_per_gpu, internode_hop_latency_us, as conf/hardware/h100_x16_ib.yaml "
                "does) or set nnodes to 1")
    if n != nodes:
        return f"nnodes must equal hardware.nodes ({nodes}) of {hardware.name}, not {n}"
    link = getattr(hardware, "internode_link", None)
    if link not in CROSS_NODE_LINKS:
        return (f"hardware.internode_link {link!r} has no calibration row (allowed: {', '.join(CROSS_NODE_LINKS)}; "
                "a search found no public SGLang/vLLM measurement of TP across nodes over Ethernet or RoCE stating "
                "model, workload and network)")
    want = nodes * hardware.gpu_count
    tp = int(settings.get("tp_size") or 1)
    if tp != want:
        return f"tp_size must be nnodes x hardware.gpu_count = {want} across nodes, not {tp}"
    for key, allowed in (("pp_size", 1), ("dp_size", 1)):
        if int(settings.get(key) or 1) != allowed:
            return (f"{key} must be {allowed} across nodes (only tensor parallelism over every GPU is modelled), "
                    f"not {settings.get(key)}")
    a2a = settings.get("moe_a2a_backend") or "none"
    if a2a != "none":
        return f"moe_a2a_backend must be 'none' across nodes (expert all-to-all over the network is not modelled), not {a2a!r}"
    return None


def _cross_node(s: dict[str, Any], model: Any, hardware: Any = None) -> tuple | None:
    """(nnodes, why) when the twin cannot model ``nnodes`` > 1 on ``hardware`` (:func:`cross_node_refusal`:
    a hardware file describing the nodes and an InfiniBand network, ``tp_size`` = nodes x GPUs per node, no PP, DP or
    expert all-to-all across nodes), else None."""
    why = cross_node_refusal(s, hardware)
    return None if why is None else (int(s.get("nnodes") or 1), why)


def _gpus_short(s: dict[str, Any], model: Any, hardware: Any = None) -> tuple | None:
    """(GPUs needed, tp, pp, data-parallel replicas, nodes, GPUs per node) when the server needs more GPUs on a node
    than ``hardware`` has, else None. SGLang gives each scheduler the GPU id ``pp_rank x tp_per_node + tp_rank``
    within its node (srt/entrypoints/engine.py), and each data-parallel replica without DP attention the next
    ``tp x pp`` (srt/managers/data_parallel_controller.py ``base_gpu_id``); DP attention runs its ranks on the TP
    GPUs."""
    have = int(getattr(hardware, "gpu_count", 0) or 0)
    if not have:
        return None
    tp, pp, dp = (int(s.get(k) or 1) for k in ("tp_size", "pp_size", "dp_size"))
    nnodes = int(s.get("nnodes") or 1)
    replicas = 1 if s.get("enable_dp_attention") else dp
    need = tp * pp * replicas
    return (need, tp, pp, replicas, nnodes, have) if -(-need // nnodes) > have else None


def _pp_speculative(algorithms: tuple[str, ...] | None = None, prefill_ok: bool = False
                    ) -> Callable[[dict[str, Any], Any], tuple | None]:
    """A rule's ``when`` for pipeline parallelism with speculative decoding: refused for every algorithm (None), or
    for those in ``algorithms`` (upper case); ``prefill_ok``: accepted on a prefill server of a PD pair."""
    def when(s: dict[str, Any], model: Any) -> tuple | None:
        if int(s.get("pp_size") or 1) <= 1 or not is_speculative(s):
            return None
        if algorithms is not None and str(s["speculative_algorithm"]).upper() not in algorithms:
            return None
        return None if prefill_ok and s.get("disaggregation_mode") == "prefill" else ()
    return when


#: The host CPU as the device (``hardware.vendor: cpu``, SGLang's ``--device cpu``).
CPU = (Hardware(vendor="cpu"),)


def _cpu_pool_unbounded(s: dict[str, Any], model: Any, hardware: Any = None) -> tuple | None:
    """(fraction, host GB) when the KV pool of a CPU host is sized from its memory, i.e. ``max_total_tokens`` unset:
    SGLang's CPU engine sizes the pool as ``mem_fraction_static`` x host memory (measured with SGLang 0.5.23 on a
    24 GB, 2-core host: SGLang picked a fraction of 0.716 and a 7.8M-token pool of 14.9 GB, and the scheduler held
    17.5 GB, leaving 5.5 GB; docs/sources.md#cpu-host)."""
    if s.get("max_total_tokens") is not None:
        return None
    fraction = s.get("mem_fraction_static")
    return (f"{fraction:g}" if fraction is not None else "SGLang's default", f"{getattr(hardware, 'memory_gb', 0):g}")


def _pd(s: dict[str, Any], model: Any) -> tuple | None:
    mode = s.get("disaggregation_mode")
    return (mode,) if mode not in (None, "null") else None


def _role_switch_blockers(release: str) -> Callable[[dict[str, Any], Any], tuple | None]:
    """What a prefill or decode server with ``--enable-pd-role-switch`` cannot rebuild on a flip, in the words and
    order of SGLang ``release``'s ``handle_pd_disaggregation`` (srt/arg_groups/pd_disaggregation_hook.py, read in the
    0.5.21, 0.5.22 and 0.5.23 wheels): 0.5.21 names DP attention and DP replicas, 0.5.22 attention DP (--attn-dp-size)
    and DP replicas, 0.5.23 neither (its DP-attention local control broadcast and decode context parallelism are not
    settings grid sweeps). Returns the joined list, or None when nothing blocks or the server has no PD role."""
    def when(s: dict[str, Any], model: Any) -> tuple | None:
        if not s.get("enable_pd_role_switch") or s.get("disaggregation_mode") not in ("prefill", "decode"):
            return None
        dp, ep, a2a = int(s.get("dp_size") or 1), _ep_size(s), s.get("moe_a2a_backend") or "none"
        found = []
        if release == "0.5.21" and _dp_attention(s):
            found.append("DP attention (--enable-dp-attention)")
        if release == "0.5.22" and _dp_attention(s):
            found.append(f"attention DP (--attn-dp-size {dp})")
        if ep > 1:
            found.append(f"expert parallelism (--ep-size {ep})")
        if a2a != "none":
            found.append(f"MoE all-to-all (--moe-a2a-backend {a2a})")
        if int(s.get("pp_size") or 1) > 1:
            found.append(f"pipeline parallelism (--pp-size {s['pp_size']})")
        if release != "0.5.23" and dp > 1 and (release == "0.5.21" or not _dp_attention(s)):
            found.append(f"data parallelism (--dp-size {dp})")  # 0.5.22+ rewrites attention DP to --attn-dp-size
        if is_speculative(s):
            algorithm = str(s["speculative_algorithm"]).upper()
            found.append(f"speculative decoding (--speculative-algorithm {'EAGLE' if algorithm == 'NEXTN' else algorithm})")
        return (", ".join(found),) if found else None
    return when


_ROLE_SWITCH = ("--enable-pd-role-switch does not rebuild role-specific state for the following features: {}. Remove "
                "these options or drop --enable-pd-role-switch.")
_ROLE_SWITCH_READS = ("enable_pd_role_switch", "disaggregation_mode", "dp_size", "enable_dp_attention", "tp_size",
                      "ep_size", "moe_a2a_backend", "pp_size", "speculative_algorithm")


def _fake_transfer_on_prefill(s: dict[str, Any], model: Any) -> tuple | None:
    return () if s.get("disaggregation_mode") == "prefill" and s.get("disaggregation_transfer_backend") == "fake" \
        else None


def _arch_without_window(s: dict[str, Any], model: Any) -> tuple | None:
    arch = getattr(model, "architecture", None)
    return (arch,) if arch in SLIDING_WINDOW_ARCHS and not getattr(model, "sliding_window", 0) else None


def _arch_without_linear_layers(s: dict[str, Any], model: Any) -> tuple | None:
    arch = getattr(model, "architecture", None)
    return (arch,) if arch in HYBRID_LINEAR_ARCHS and not getattr(model, "linear_attention_layers", 0) else None


_FI_CUTLASS_Q = ("modelopt_fp4", "modelopt_fp8", None)
_FI_TRTLLM_Q = ("modelopt_fp4", "fp8", "modelopt_fp8", "compressed-tensors", None)
_NSA = "_handle_model_specific_adjustments / _set_default_nsa_kv_cache_dtype"

#: The launch-time combination rules, in the order SGLang checks them. Messages are SGLang's own, copied from the
#: catalog's ``refusals`` of each release in range (tests/releases/test_catalog.py checks them). Release ranges from the
#: catalog: TBO without an a2a backend is refused as such until 0.5.14 and needs DP attention from 0.5.15 (not 0.5.16);
#: tilelang with an fp8_e4m3 KV cache is refused on CUDA in 0.5.17-0.5.21 and from 0.5.22 needs both backends tilelang
#: and SM >= 89.
RULES: list[Rule] = [
    Rule("tbo_needs_a2a", "0.5.9", "0.5.14", "When enabling two batch overlap, moe_a2a_backend cannot be 'none'.",
         _tbo_a2a_none, "check_server_args",
         reads=("two_batch_overlap", "moe_a2a_backend")),
    Rule("tbo_needs_dp_attention", "0.5.15", "0.5.21",
         "When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'), --enable-dp-attention "
         "is required (DeepSeek-V4 non-EP DP TBO path).", _tbo_no_dp, "_check_two_batch_overlap",
         reads=("two_batch_overlap", "moe_a2a_backend", "enable_dp_attention", "dp_size")),
    Rule("tbo_needs_attn_dp", "0.5.22", None,
         "When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'), attention DP "
         "(--attn-dp-size) is required (DeepSeek-V4 non-EP DP TBO path).", _tbo_no_dp, "check_two_batch_overlap",
         reads=("two_batch_overlap", "moe_a2a_backend", "enable_dp_attention", "dp_size")),
    Rule("tbo_deepep_v2", "0.5.19", None,
         "DeepEP v2 MoE has not implemented the TBO/SBO overlap hooks yet. Disable --enable-two-batch-overlap and "
         "--enable-single-batch-overlap when using --moe-a2a-backend deepep_v2.", _tbo_with("deepep_v2"),
         "handle_a2a_moe",
         reads=("two_batch_overlap", "moe_a2a_backend")),
    Rule("tbo_megamoe", "0.5.21", None,
         "--moe-a2a-backend megamoe has no two-batch / single-batch overlap decomposition; disable "
         "--enable-two-batch-overlap and --enable-single-batch-overlap.", _tbo_with("megamoe"), "a2a checks",
         reads=("two_batch_overlap", "moe_a2a_backend")),
    Rule("megamoe_hardware", "0.5.21", None,
         "--moe-a2a-backend megamoe needs a CUDA SM90 GPU (block-FP8 experts) or an SM100-class GPU (MXFP4 / NVFP4 "
         "experts); it runs DeepGEMM kernels over CUDA symmetric memory. On ROCm, set "
         "SGLANG_AMD_USE_FLYDSL_MEGA_MOE=1 to select aiter MegaMoEv2 instead.", _megamoe, "check_mega_moe_compat",
         hardware=(Hardware("amd"), Hardware("nvidia", sm_max=89), Hardware("nvidia", 91, 99),
                   Hardware("nvidia", sm_min=110)),
         reads=("moe_a2a_backend",)),
    Rule("priority_policy", "0.5.9", None,
         "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. '{}' is not supported.", _priority,
         "check_server_args",
         reads=("enable_priority_scheduling", "schedule_policy")),
    Rule("dp_divides_tp", "0.5.9", "0.5.21", "tp_size must be divisible by dp_size * attn_cp_size", _dp_divides,
         "_handle_data_parallelism",
         reads=("enable_dp_attention", "dp_size", "tp_size")),
    Rule("chunk_page", "0.5.9", None, "chunked_prefill_size must be divisible by page_size", _chunk_page,
         "check_server_args",
         reads=("chunked_prefill_size", "page_size")),
    Rule("fi_cutlass_quant", "0.5.9", "0.5.9",
         "Invalid quantization '{}'. FlashInfer Cutlass MOE supports only: 'modelopt_fp4', 'modelopt_fp8', or "
         "bfloat16 (None).", _runner_quant("flashinfer_cutlass", _FI_CUTLASS_Q), "_handle_moe_kernel_config",
         reads=("moe_runner_backend", "quantization")),
    Rule("fi_cutlass_quant", "0.5.10", None,
         "Invalid quantization '{}'. FlashInfer Cutlass MOE supports only: 'modelopt_fp4', 'modelopt_fp8', "
         "'modelopt_mixed', or bfloat16 (None).",
         _runner_quant("flashinfer_cutlass", _FI_CUTLASS_Q + ("modelopt_mixed",)), "_handle_moe_kernel_config",
         reads=("moe_runner_backend", "quantization")),
    Rule("fi_trtllm_quant", "0.5.9", "0.5.9",
         "Invalid quantization '{}'. FlashInfer TRTLLM MOE supports only: 'modelopt_fp4', 'fp8', 'modelopt_fp8', "
         "'compressed-tensors', or bfloat16 (None).", _runner_quant("flashinfer_trtllm", _FI_TRTLLM_Q),
         "_handle_moe_kernel_config",
         reads=("moe_runner_backend", "quantization")),
    Rule("fi_trtllm_quant", "0.5.10", "0.5.13",
         "Invalid quantization '{}'. FlashInfer TRTLLM MOE supports only: 'modelopt_fp4', 'fp8', 'modelopt_fp8', "
         "'modelopt_mixed', 'compressed-tensors', or bfloat16 (None).",
         _runner_quant("flashinfer_trtllm", _FI_TRTLLM_Q + ("modelopt_mixed",)), "_handle_moe_kernel_config",
         reads=("moe_runner_backend", "quantization")),
    Rule("fi_trtllm_quant", "0.5.14", None,
         "Invalid quantization '{}'. FlashInfer TRTLLM MOE supports only: 'modelopt_fp4', 'nvfp4_online', 'fp8', "
         "'modelopt_fp8', 'modelopt_mixed', 'compressed-tensors', or bfloat16 (None).",
         _runner_quant("flashinfer_trtllm", _FI_TRTLLM_Q + ("modelopt_mixed", "nvfp4_online")),
         "_handle_moe_kernel_config",
         reads=("moe_runner_backend", "quantization")),
    Rule("cutlass_fp8_ep", "0.5.9", None, "FP8/MXFP8 Cutlass MoE is only supported with ep_size == 1", _cutlass_ep,
         "_handle_moe_kernel_config",
         reads=("moe_runner_backend", "quantization", "ep_size", "tp_size", "moe_a2a_backend")),
    Rule("fi_a2a_runner", "0.5.9", "0.5.12",
         "Flashinfer MoE A2A is only supported with flashinfer_cutlass moe runner backend",
         _fi_a2a_runner(("flashinfer_cutlass",)), "_handle_a2a_moe",
         reads=("moe_a2a_backend", "moe_runner_backend")),
    Rule("fi_a2a_runner", "0.5.13", "0.5.14",
         "Flashinfer MoE A2A is only supported with flashinfer_cutlass or flashinfer_cutedsl moe runner backend",
         _fi_a2a_runner(("flashinfer_cutlass", "flashinfer_cutedsl")), "_handle_a2a_moe",
         reads=("moe_a2a_backend", "moe_runner_backend")),
    Rule("fi_a2a_runner", "0.5.15", "0.5.18",
         "Flashinfer MoE A2A is only supported with flashinfer_cutlass, flashinfer_cutedsl or "
         "flashinfer_trtllm_routed moe runner backend",
         _fi_a2a_runner(("flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm_routed")), "_handle_a2a_moe",
         reads=("moe_a2a_backend", "moe_runner_backend")),
    Rule("fi_a2a_runner", "0.5.19", None,
         "FlashInfer MoE A2A is supported with flashinfer_cutlass, flashinfer_cutedsl, flashinfer_trtllm, "
         "flashinfer_trtllm_routed, or deep_gemm.",
         _fi_a2a_runner(("flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm", "flashinfer_trtllm_routed",
                         "deep_gemm")), "_handle_a2a_moe",
         reads=("moe_a2a_backend", "moe_runner_backend")),
    Rule("mori_dispatch_tokens", "0.5.9", "0.5.14",
         "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096) must be larger or equal to "
         "chunked_prefill_size", _mori, "_handle_a2a_moe",
         reads=("moe_a2a_backend", "chunked_prefill_size")),
    Rule("mori_dispatch_tokens", "0.5.15", None,
         "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096) must be >= the per-rank MoRI dispatch tokens "
         "(chunked_prefill_size by default)", _mori, "_handle_a2a_moe",
         reads=("moe_a2a_backend", "chunked_prefill_size")),
    Rule("dsa_kv_dtype", "0.5.9", None, "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype",
         _dsa_kv, _NSA,
         reads=("kv_cache_dtype",)),
    Rule("tilelang_fp8_cuda", "0.5.17", "0.5.21",
         "The tilelang DSA prefill/decode kernels only support an fp8_e4m3 KV cache on ROCm/HIP; on CUDA they "
         "require a bfloat16 KV cache. Use --kv-cache-dtype bfloat16 with the tilelang backend, or keep "
         "--kv-cache-dtype fp8_e4m3 and pick an fp8-capable DSA backend (flashmla_kv on Hopper, trtllm on "
         "Blackwell).", _tilelang_fp8, "_check_tilelang_dsa_fp8_kv", hardware=CUDA,
         reads=("kv_cache_dtype", "dsa_prefill_backend", "dsa_decode_backend")),
    Rule("tilelang_fp8_both", "0.5.22", None,
         "CUDA TileLang FP8 KV requires both DSA backends to be tilelang; raw and scaled FP8 KV layouts cannot be "
         "mixed.", _tilelang_fp8_mixed, "_check_dsa_backend_constraints", hardware=CUDA,
         reads=("kv_cache_dtype", "dsa_prefill_backend", "dsa_decode_backend")),
    Rule("tilelang_fp8_sm89", "0.5.22", None, "CUDA TileLang FP8 KV requires SM89 or newer.", _tilelang_fp8,
         "_check_dsa_backend_constraints", hardware=(Hardware("nvidia", sm_max=88),),
         reads=("kv_cache_dtype", "dsa_prefill_backend", "dsa_decode_backend")),
    # -- kernel hardware requirements (stage "requirement"): SGLang accepts the flags and the server dies later; the
    # message is the error the server ends with, the source the failure-table row (grid/twin/failures.py) and its
    # public reference (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes).
    Rule("fa3_needs_sm90", "0.5.9", None,
         "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.",
         _fa3_unsupported,
         "SGLang's fa3 backend asserts SM80-89 without MLA, or SM90 (create_flashattention_v3_backend, "
         "srt/layers/attention/attention_registry.py, 0.5.9-0.5.23; docs/sources.md#hardware-spec-sheets)",
         hardware=(Hardware("amd"), Hardware("nvidia", sm_max=89), Hardware("nvidia", sm_min=91)),
         stage="requirement", with_hardware=True,
         twin_failure=TwinFailure(
             "dsa_fa3_sm120", "fa3 runs on SM90 (and SM80-89 for models without MLA); elsewhere (SM120, SM100, any "
             "MLA/DSA model below SM90) SGLang's fa3 backend asserts when it is created, at the first forward "
             "(graph capture or warm-up).", exception="AssertionError"),
         reads=("attention_backend", "dsa_prefill_backend", "dsa_decode_backend")),
    Rule("aiter_needs_rocm", "0.5.9", None,
         "aiter kernels are AMD ROCm only: ModuleNotFoundError: No module named 'aiter'", _uses("aiter"),
         "aiter is ROCm's kernel library (ROCm/aiter); "
         "docs/sources.md#sglang-log-formats-readiness-phases-failure-modes",
         hardware=CUDA, stage="requirement",
         twin_failure=TwinFailure(
             "dsa_aiter_cuda", "aiter is AMD ROCm only; on an NVIDIA GPU the backend import fails during model "
             "init.", phase="load_weights", phase_fraction=0.0,
             log_line="ModuleNotFoundError: No module named 'aiter'"),
         reads=("attention_backend", "dsa_prefill_backend", "dsa_decode_backend")),
    # -- a parallel shape larger than the node: SGLang has no argument check for it; the scheduler of the first GPU id
    # beyond the node's count dies in set_device (srt/model_executor/model_runner.py, 0.5.9-0.5.23) with CUDA's
    # cudaErrorInvalidDevice, "invalid device ordinal" (CUDA Runtime API, error types)
    Rule("shape_needs_gpus", "0.5.9", None,
         "the configuration needs {} GPUs (tp_size {} x pp_size {} x {} data-parallel replicas) over {} node(s) of {} "
         "GPUs: a scheduler started on a GPU id beyond them fails with RuntimeError: CUDA error: invalid device "
         "ordinal", _gpus_short,
         "SGLang assigns GPU ids base_gpu_id + pp_rank x tp_per_node + tp_rank (srt/entrypoints/engine.py) and each "
         "DP replica the next tp x pp (srt/managers/data_parallel_controller.py), then calls set_device "
         "(srt/model_executor/model_runner.py); CUDA Runtime API cudaErrorInvalidDevice",
         hardware=(Hardware("nvidia"), Hardware("amd")), stage="requirement", with_hardware=True,
         twin_failure=TwinFailure(
             "shape_needs_gpus", "tp_size x pp_size (x dp_size without DP attention) exceeds the GPUs of a node: the "
             "scheduler of the first missing GPU dies when it selects its device, before loading weights; use fewer "
             "ranks or more nodes (--nnodes).", phase="init_distributed", phase_fraction=0.0,
             log_line="RuntimeError: CUDA error: invalid device ordinal"),
         reads=("tp_size", "pp_size", "dp_size", "enable_dp_attention", "nnodes")),
    # from 0.5.22 the check that dp_divides_tp copies is a bare assert (no message, so not in the catalog's refusals):
    # `assert cfg.tp_size % cfg.attn_dp_size == 0` in _handle_data_parallelism (srt/arg_groups/parallel_hook.py,
    # 0.5.22 and 0.5.23), raised while the server arguments are resolved, before anything starts
    Rule("dp_divides_tp_assert", "0.5.22", None,
         "tp_size must be divisible by dp_size with DP attention: SGLang stops at a bare AssertionError", _dp_divides,
         "SGLang's _handle_data_parallelism asserts tp_size % attn_dp_size == 0 without a message "
         "(srt/arg_groups/parallel_hook.py, 0.5.22-0.5.23)",
         stage="requirement",
         twin_failure=TwinFailure(
             "dp_divides_tp_assert", "DP attention with a dp_size that does not divide tp_size: SGLang's argument "
             "handling stops at a bare assert before any process starts; use a dp_size that divides tp_size.",
             phase="init_distributed", phase_fraction=0.0, log_line="AssertionError"),
         reads=("enable_dp_attention", "dp_size", "tp_size")),
    # -- the host CPU as the device (--device cpu), read off the released server on a CPU-only host (SGLang 0.5.9 and
    # 0.5.23; docs/sources.md#cpu-host). The first is grid's own refusal (SGLang starts, then takes the host's
    # memory); the others are SGLang's errors at start (stage "start": launched last, as a known failure).
    Rule("cpu_kv_pool_host_memory", "0.5.9", None,
         "on a CPU host SGLang sizes the KV pool as --mem-fraction-static x host memory ({} x {} GB), which leaves "
         "the host too little: set server.max_total_tokens (e.g. 65536) to size the pool in tokens",
         _cpu_pool_unbounded, "measured: SGLang 0.5.23 --device cpu without --max-total-tokens on a 24 GB host "
         "(docs/sources.md#cpu-host)", hardware=CPU, stage="requirement", with_hardware=True,
         reads=("max_total_tokens", "mem_fraction_static")),
    # fa3 on a CPU: create_flashattention_v3_backend (srt/layers/attention/attention_registry.py) asks torch.cuda for
    # the compute capability until 0.5.10, which raises without a GPU; from 0.5.11 it asks SGLang's own
    # get_device_capability() and asserts on the answer (read in every wheel 0.5.9-0.5.23; measured on 0.5.9, 0.5.23).
    Rule("cpu_fa3", "0.5.9", "0.5.10", "RuntimeError: No CUDA GPUs are available", _uses("fa3"),
         "SGLang srt/layers/attention/attention_registry.py create_flashattention_v3_backend calls "
         "torch.cuda.get_device_capability(); measured at start on a CPU host, SGLang 0.5.9 "
         "(docs/sources.md#cpu-host)", hardware=CPU, stage="start",
         reads=("attention_backend", "dsa_prefill_backend", "dsa_decode_backend")),
    Rule("cpu_fa3", "0.5.11", None,
         "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.",
         _uses("fa3"), "SGLang srt/layers/attention/attention_registry.py create_flashattention_v3_backend (an "
         "assert on the device's compute capability, which a CPU does not have); measured at start on a CPU host, "
         "SGLang 0.5.23 (docs/sources.md#cpu-host)", hardware=CPU, stage="start",
         reads=("attention_backend", "dsa_prefill_backend", "dsa_decode_backend")),
    # torch.compile on a CPU: SGLang's CPU graph runner (srt/model_executor/cpu_graph_runner.py) asks the attention
    # backend for a method only the intel_amx backend has; a CPU without AMX runs torch_native. 0.5.9 asks for
    # get_graph_seq_len_fill_value, 0.5.10+ for init_cpu_graph_state (read in the wheels; measured on 0.5.9, 0.5.23).
    Rule("cpu_torch_compile", "0.5.9", "0.5.9",
         "AttributeError: 'TorchNativeAttnBackend' object has no attribute 'get_graph_seq_len_fill_value'",
         lambda s, m: () if s.get("torch_compile") else None,
         "SGLang srt/model_executor/cpu_graph_runner.py (torch_native attention without AMX); measured at start on "
         "a CPU host, SGLang 0.5.9 (docs/sources.md#cpu-host)", hardware=CPU, stage="start",
         reads=("torch_compile",)),
    Rule("cpu_torch_compile", "0.5.10", None,
         "AttributeError: 'TorchNativeAttnBackend' object has no attribute 'init_cpu_graph_state'",
         lambda s, m: () if s.get("torch_compile") else None,
         "SGLang srt/model_executor/cpu_graph_runner.py (torch_native attention without AMX); measured at start on "
         "a CPU host, SGLang 0.5.23 (docs/sources.md#cpu-host)", hardware=CPU, stage="start",
         reads=("torch_compile",)),
    # speculative decoding on a CPU: every algorithm turns on the KV-cache copy, whose warm-up calls a CPU op the
    # sgl-kernel CPU path does not register (srt/mem_cache/memory_pool.py _init_kv_copy_and_warmup ->
    # kernels/ops/kvcache/cache_move.py; measured at start with NGRAM on SGLang 0.5.23, the CPU-capable algorithm).
    # NGRAM, the algorithm SGLang first allowed on a CPU, is refused by the argument checks of 0.5.9-0.5.15 on any
    # device but CUDA (0.5.16 allows the CPU); measured at launch on 0.5.9, the launcher exits 1.
    Rule("cpu_ngram", "0.5.9", "0.5.15", "Ngram speculative decoding only supports CUDA device.",
         lambda s, m: () if s.get("speculative_algorithm") == "NGRAM" else None,
         "_handle_speculative_decoding", hardware=CPU, reads=("speculative_algorithm",)),
    Rule("cpu_speculative", "0.5.23", None,
         "AttributeError: '_OpNamespace' 'sgl_kernel' object has no attribute 'copy_all_layer_kv_cache_cpu'",
         lambda s, m: () if s.get("speculative_algorithm") else None,
         "SGLang srt/mem_cache/memory_pool.py (the KV-cache copy speculative decoding needs); measured at start on "
         "a CPU host, SGLang 0.5.23 (docs/sources.md#cpu-host)", hardware=CPU, stage="start",
         reads=("speculative_algorithm",)),
    # the hierarchical cache on a CPU: its host pool is pinned with cudaHostRegister (srt/mem_cache/pool_host/
    # common.py _cuda_host_register, from base.py _allocate_host_buffer), which initialises CUDA; on a CPU host torch
    # then raises its driver error (measured at start on SGLang 0.5.23 with the CPU setup of experiments/real_server).
    # 0.5.9 pins it too (srt/mem_cache/memory_pool_host.py alloc_with_host_register -> torch.cuda.cudart), where
    # torch's lazy CUDA init finds no GPU (measured at start on 0.5.9); releases 0.5.10-0.5.22 were not measured
    Rule("cpu_hierarchical_cache", "0.5.9", "0.5.9", "RuntimeError: No CUDA GPUs are available",
         lambda s, m: () if s.get("enable_hierarchical_cache") else None,
         "SGLang srt/mem_cache/memory_pool_host.py alloc_with_host_register (the host KV pool HiCache pins); "
         "measured at start on a CPU host, SGLang 0.5.9 (docs/sources.md#cpu-host)", hardware=CPU,
         stage="start", reads=("enable_hierarchical_cache",)),
    Rule("cpu_hierarchical_cache", "0.5.23", None,
         "RuntimeError: The NVIDIA driver on your system is too old",
         lambda s, m: () if s.get("enable_hierarchical_cache") else None,
         "SGLang srt/mem_cache/pool_host/common.py _cuda_host_register (the host KV pool HiCache pins); measured at "
         "start on a CPU host, SGLang 0.5.23 (docs/sources.md#cpu-host)", hardware=CPU, stage="start",
         reads=("enable_hierarchical_cache",)),
    # check_server_args's asserts on the parallel shape and names (0.5.9 server_args.py; 0.5.23
    # arg_groups/validation_hook.py), and the DP LM head's need for DP attention (0.5.9-0.5.14
    # _handle_data_parallelism, which first turns both off at dp_size 1; 0.5.15-0.5.21 _dp_lm_head_validation;
    # 0.5.22+ arg_groups/overrides.py _dp_lm_head_validation, on --attn-dp-size)
    Rule("conservativeness_non_negative", "0.5.9", None, "schedule_conservativeness must be non-negative",
         lambda s, m: () if float(s.get("schedule_conservativeness") or 0) < 0 else None, "check_server_args",
         reads=("schedule_conservativeness",)),
    Rule("nodes_divide_tp_pp", "0.5.9", None, "tp_size must be divisible by number of nodes",
         lambda s, m: () if (int(s.get("tp_size") or 1) * int(s.get("pp_size") or 1)) % int(s.get("nnodes") or 1)
         else None, "check_server_args", reads=("tp_size", "pp_size", "nnodes")),
    Rule("multinode_dp_needs_dp_attention", "0.5.9", "0.5.21",
         "multi-node data parallel is not supported unless dp attention!",
         lambda s, m: () if int(s.get("dp_size") or 1) > 1 and int(s.get("nnodes") or 1) > 1 and not _dp_attention(s)
         else None, "check_server_args", reads=("dp_size", "nnodes", "enable_dp_attention")),
    Rule("dp_lm_head_needs_dp_attention", "0.5.9", "0.5.21",
         "Please enable dp attention when setting enable_dp_lm_head.",
         lambda s, m: () if s.get("enable_dp_lm_head") and int(s.get("dp_size") or 1) > 1
         and not s.get("enable_dp_attention") else None,
         "_handle_data_parallelism / _dp_lm_head_validation", reads=("enable_dp_lm_head", "dp_size", "enable_dp_attention")),
    # 0.5.22+: arg_groups/overrides.py _data_parallelism_defaults first turns the DP LM head off where
    # dp_size x attn_dp_size is 1, so only plain DP replicas (dp_size > 1 without DP attention) reach the assert;
    # the released 0.5.23 server on a CPU host starts `--enable-dp-lm-head` alone with enable_dp_lm_head=False
    Rule("dp_lm_head_needs_attn_dp", "0.5.22", None, "--enable-dp-lm-head requires attention DP (--attn-dp-size).",
         lambda s, m: () if s.get("enable_dp_lm_head") and int(s.get("dp_size") or 1) > 1 and not _dp_attention(s)
         else None, "_dp_lm_head_validation",
         reads=("enable_dp_lm_head", "dp_size", "enable_dp_attention")),
    Rule("served_model_name_colon", "0.5.9", None,
         "served_model_name cannot contain a colon (':') character. The colon is reserved for the 'model:adapter' "
         "syntax used in LoRA adapter specification. Invalid value: '{}'",
         lambda s, m: (s["served_model_name"],) if ":" in str(s.get("served_model_name") or "") else None,
         "check_server_args", reads=("served_model_name",)),
    # --pp-size > 1 needs --disable-overlap-schedule in every catalogued release (0.5.9-0.5.1x check_server_args:
    # "... overlap schedule, speculative decoding, mixed chunked prefill."; later check_pipeline_parallel_compat).
    Rule("pp_needs_no_overlap", "0.5.9", None, "Pipeline parallelism is not compatible with overlap schedule",
         lambda s, m: () if int(s.get("pp_size") or 1) > 1 and not s.get("disable_overlap_schedule") else None,
         "check_server_args / check_pipeline_parallel_compat",
         reads=("pp_size", "disable_overlap_schedule")),
    # --pp-size > 1 with speculative decoding: 0.5.9-0.5.10 check_server_args asserts disable_overlap_schedule, no
    # speculative algorithm and no mixed chunked prefill in one message; 0.5.11-0.5.20 the first two (0.5.20:
    # arg_groups/validation_hook.py, the non-NPU branch); 0.5.21+ check_pipeline_parallel_compat accepts EAGLE
    # (not multi-layer) on a prefill server only, or with SGLANG_ENABLE_PP_SPEC=1, which grid does not read here
    Rule("pp_no_speculative_mixed", "0.5.9", "0.5.10",
         "Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed chunked prefill.",
         _pp_speculative(), "check_server_args", reads=("pp_size", "speculative_algorithm")),
    Rule("pp_no_speculative", "0.5.11", "0.5.20",
         "Pipeline parallelism is not compatible with overlap schedule, speculative decoding",
         _pp_speculative(), "check_server_args", reads=("pp_size", "speculative_algorithm")),
    Rule("pp_speculative_eagle_only", "0.5.21", None,
         "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding",
         lambda s, m: (None if is_speculative(s) and str(s["speculative_algorithm"]).upper() in ("EAGLE", "DSPARK")
                       else _pp_speculative()(s, m)),
         "check_pipeline_parallel_compat", reads=("pp_size", "speculative_algorithm")),
    Rule("pp_speculative_prefill_only", "0.5.21", None,
         "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)",
         _pp_speculative(("EAGLE",), prefill_ok=True), "check_pipeline_parallel_compat",
         reads=("pp_size", "speculative_algorithm", "disaggregation_mode")),
    # the fake transfer backend moves no KV: a decode server alone, for synthetic decode benchmarks (0.5.10+ asserts
    # it in _handle_pd_disaggregation, 0.5.14+ handle_pd_disaggregation; the catalog's refusals)
    Rule("pd_fake_transfer_on_prefill", "0.5.10", None, "Prefill server does not support 'fake' as the transfer backend",
         _fake_transfer_on_prefill, "handle_pd_disaggregation",
         reads=("disaggregation_mode", "disaggregation_transfer_backend")),
    # runtime role switching (--enable-pd-role-switch, 0.5.21+) refuses what it cannot rebuild on a flip; the
    # message is built by concatenation, which the catalog's extraction does not read (tests/releases/test_catalog.py)
    *(Rule("pd_role_switch_blockers", since, until, _ROLE_SWITCH, _role_switch_blockers(since),
           "handle_pd_disaggregation", reads=_ROLE_SWITCH_READS)
      for since, until in (("0.5.21", "0.5.21"), ("0.5.22", "0.5.22"), ("0.5.23", None))),
    # stage "twin": SGLang runs these; the twin has no calibrated model of them and refuses before launch (only the
    # twin: check_config(twin=True), the twin's CLI). The searches that looked for numbers: docs/twin.md.
    Rule("twin_cross_node_tp", "0.5.9", None,
         "the twin cannot model --nnodes {} here: {} (tensor parallelism across nodes is modelled over InfiniBand, "
         "calibrated on tenstorrent/tt-inference-server#356; searches: " + TWIN_SEARCHES + ")",
         _cross_node, TWIN_SEARCHES, stage="twin", with_hardware=True,
         reads=("nnodes", "tp_size", "pp_size", "dp_size", "moe_a2a_backend")),
    Rule("twin_pd_disaggregation", "0.5.9", None,
         "the twin cannot model --disaggregation-mode {} (prefill/decode disaggregation: KV transfer between "
         "servers and the router are not modelled, and the published 1P1D runs found (sglang PR #4880 on A10, "
         "#24488 on H200) use hardware or models the twin has no description of); searches: " + TWIN_SEARCHES,
         _pd, TWIN_SEARCHES, stage="twin",
         reads=("disaggregation_mode",)),
    Rule("twin_sliding_window", "0.5.9", None,
         "the twin cannot model {} without its window (sliding-window attention with sinks: set sliding_window and "
         "sliding_window_layers in the model description, as conf/model/gpt_oss_20b.yaml does, or KV capacity and "
         "attention cost would be wrong); searches: " + TWIN_SEARCHES,
         _arch_without_window, TWIN_SEARCHES, stage="twin",
         reads=()),
    # SGLang 0.5.21+ starts EAGLE with PP on a prefill server (check_pipeline_parallel_compat); the twin's pipeline
    # and speculative models are separate classes (grid/twin/perf_class.py) with no published PP + speculative row
    Rule("twin_pp_speculative", "0.5.9", None, TWIN_PP_SPECULATIVE,
         lambda s, m: (s["pp_size"], s["speculative_algorithm"]) if int(s.get("pp_size") or 1) > 1 and is_speculative(s)
         else None, TWIN_SEARCHES, stage="twin", reads=("pp_size", "speculative_algorithm")),
    Rule("twin_hybrid_linear_attention", "0.5.9", None,
         "the twin cannot model {} without its linear-attention layers (hybrid linear attention: Gated DeltaNet layers "
         "keep a fixed-size state instead of a KV cache; set linear_attention_layers and linear_state_bytes in the "
         "model description, as conf/model/qwen3_next_80b_a3b.yaml does); searches: " + TWIN_SEARCHES,
         _arch_without_linear_layers, TWIN_SEARCHES, stage="twin",
         reads=()),
    Rule("twin_cpu_host", "0.5.9", None,
         "the twin cannot play a server on a CPU host ({}): its server, logs and failure table are of SGLang on "
         "GPUs, and its performance model was fitted on GPUs only (on a CPU it is the starting point of a real "
         "sweep's calibration); run real SGLang there with engine=sglang", lambda s, m, h: (getattr(h, "name", "cpu"),),
         "docs/sources.md#cpu-host", hardware=CPU, stage="twin", with_hardware=True,
         reads=()),
    Rule("trtllm_dsa_needs_sm100", "0.5.12", None,
         "TllmGenFmhaRunner: Unsupported architecture (the trtllm DSA backend runs FlashInfer's TRT-LLM-gen FMHA, "
         "SM100/103/107 only)", _trtllm_dsa,
         "sgl-project/sglang#37105, #40558, flashinfer#5445 "
         "(docs/sources.md#sglang-log-formats-readiness-phases-failure-modes); the seed session ran trtllm "
         "coherently before 0.5.12",
         hardware=(Hardware("nvidia", sm_min=120),), stage="requirement",
         twin_failure=TwinFailure(
             "dsa_trtllm_unsupported_arch_sm120", "From 0.5.12 the trtllm DSA backend goes through FlashInfer's "
             "TRT-LLM-gen FMHA runner, which allows only SM100/103/107; on SM120 it crashes at the first forward. "
             "(The seed's 0.5.9-era nightly ran trtllm coherently.)",
             log_line="tvm.error.InternalError: Error in function 'TllmGenFmhaRunner' at "
                      "/workspace/flashinfer/csrc/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture"),
         reads=("dsa_prefill_backend", "dsa_decode_backend")),
]


def rules_reading(setting: str) -> list[str]:
    """The names of the rules (:data:`RULES`) that read ``setting``, in their order, once each: what a change to how
    a setting is spelled or valued can touch."""
    return list(dict.fromkeys(r.name for r in RULES if setting in r.reads))


@dataclass(frozen=True)
class Refusal:
    """One reason SGLang would not serve a configuration: SGLang's ``message``, and the ``rule`` that refused it
    (None for a setting SGLang's argument parser rejects: an unknown flag, a value outside its choices)."""

    message: str
    rule: Rule | None = None


def refusals(settings: dict[str, Any], version: str | Version, model: Any = None, hardware: Any = None,
             twin: bool = False) -> list[Refusal]:
    """Every reason SGLang ``version`` would refuse ``settings`` at launch (empty: it would start), each with the rule
    that refused it.

    ``model`` is a ``ModelSpec`` (or anything with ``quantization`` and ``dsa``) for the model-dependent rules;
    ``hardware`` a ``HardwareSpec`` (``sm_version``; ``vendor`` when it has one, else NVIDIA) for the
    hardware-dependent ones (None: unknown, so SM-range rules do not refuse). ``twin``: the server is the twin, so
    the rules of stage ``"twin"`` (what the twin cannot represent) apply too. A setting the parser rejects stops the
    check there: the rules read only settings SGLang accepts.
    Raises ``ValueError`` for a version string that is not an SGLang version.
    """
    ver = parse_version(version) if isinstance(version, str) else tuple(version)
    out: list[Refusal] = []
    known: dict[str, Any] = {}
    for name, value in settings.items():
        try:
            known[name] = check_setting(name, value, ver)
        except SettingError as err:
            out.append(Refusal(str(err)))
    if out:
        return out
    bad = unknown_flags(to_argv({k: v for k, v in known.items() if k in SETTINGS}, ver), ver)
    if bad:
        out.append(Refusal(f"unrecognized arguments: {' '.join(bad)} (SGLang {'.'.join(map(str, ver))})"))
    for rule in RULES:
        if (rule.stage == "twin" and not twin) or rule.stage == "start":
            continue
        why = rule.refuses(known, ver, model, hardware)
        if why is not None:
            out.append(Refusal(why, rule))
    return out


def check_config(settings: dict[str, Any], version: str | Version, model: Any = None,
                 hardware: Any = None, twin: bool = False) -> list[str]:
    """The messages of :func:`refusals` (same arguments, same errors)."""
    return [r.message for r in refusals(settings, version, model, hardware, twin)]


def start_failures(settings: dict[str, Any], version: str | Version, model: Any = None,
                   hardware: Any = None) -> list[Rule]:
    """The rules of stage ``"start"`` under which SGLang ``version`` starts ``settings`` on ``hardware`` and dies
    before it is ready (known failures, not refusals). Settings that fail :func:`check_config`'s setting checks
    match none. Raises ``ValueError`` for a version string that is not an SGLang version."""
    ver = parse_version(version) if isinstance(version, str) else tuple(version)
    try:
        known = {k: check_setting(k, v, ver) for k, v in settings.items()}
    except SettingError:
        return []
    return [rule for rule in RULES if rule.stage == "start" and rule.refuses(known, ver, model, hardware) is not None]


def attn_tp(settings: dict[str, Any]) -> int:
    """A server's attention tensor-parallel size from grid's settings: ``tp_size / dp_size`` with DP attention
    (``--attn-dp-size`` from 0.5.22), else ``tp_size``."""
    tp = int(settings.get("tp_size") or 1)
    dp = int(settings.get("dp_size") or 1) if settings.get("enable_dp_attention") else 1
    return max(1, tp // max(1, dp))


@dataclass(frozen=True)
class PairRule:
    """A prefill-decode pair SGLang starts but whose first KV transfer fails: the prefill server's transfer worker
    raises ``message`` (``RuntimeError``), the request ends with HTTP 500 on the prefill side and the decode side
    waits until it aborts (a client through the router sees an error or a hang: llm-d/llm-d#2433, gpt-oss-120b with
    prefill TP1 and decode TP4 on SGLang 0.5.16). grid refuses such a deployment before launch. Releases ``since`` ..
    ``until`` (inclusive; None = still) with the prefill server's ``--disaggregation-transfer-backend`` in
    ``backends``; ``when(prefill settings, decode settings, model)`` gives the message's arguments, or None when the
    pair transfers. ``where``: the SGLang code that raises it."""

    name: str
    since: str
    until: str | None
    message: str
    backends: tuple[str, ...]
    when: Callable[[dict[str, Any], dict[str, Any], Any], tuple | None]
    where: str
    reads: tuple[str, ...] = ("tp_size", "dp_size", "enable_dp_attention", "disaggregation_transfer_backend")

    def refuses(self, prefill: dict[str, Any], decode: dict[str, Any], version: Version, model: Any) -> str | None:
        """SGLang's message when this rule fails the pair on ``version``, else None."""
        if not (parse_version(self.since) <= version[:3]
                and (self.until is None or version[:3] <= parse_version(self.until))):
            return None
        if (prefill.get("disaggregation_transfer_backend") or "mooncake") not in self.backends:
            return None
        args = self.when(prefill, decode, model)
        return None if args is None else self.message.format(*args)


def _swa_hetero_attn_tp(prefill: dict[str, Any], decode: dict[str, Any], model: Any) -> tuple | None:
    # a non-MLA model with sliding-window layers keeps an SWA state pool, sent page by page only between equal
    # attention-TP ranks (SGLang's transfer ``state_type`` "swa")
    swa = getattr(model, "sliding_window_layers", 0) and getattr(model, "attention", "mha") != "mla"
    return ("SWA",) if swa and attn_tp(prefill) != attn_tp(decode) else None


def _swa_hetero_attn_tp_pp(prefill: dict[str, Any], decode: dict[str, Any], model: Any) -> tuple | None:
    pp = int(prefill.get("pp_size") or 1)
    return () if pp > 1 and _swa_hetero_attn_tp(prefill, decode, model) else None


_SWA_MESSAGE = "PD Disaggregation does NOT support PD different TP sizes for non-MLA {} hybrid models yet."
#: Prefill-decode pairs that fail their first transfer; messages copied from the released wheels (``sglang`` 0.5.9,
#: 0.5.16, 0.5.18, 0.5.20, 0.5.21, 0.5.22, 0.5.23: ``python/sglang/srt/disaggregation/{mooncake,nixl,common}/conn.py``).
#: Up to 0.5.21 both backends refuse an SWA state across different attention-TP; from 0.5.22 Mooncake slices the
#: KV heads instead (``_get_mha_head_slice_blocks``), except under pipeline parallelism, and NIXL still refuses.
PAIR_RULES: tuple[PairRule, ...] = (
    PairRule("pd_swa_hetero_attn_tp", "0.5.9", "0.5.21", _SWA_MESSAGE, ("mooncake", "nixl"), _swa_hetero_attn_tp,
             "disaggregation/mooncake/conn.py and nixl/conn.py maybe_send_extra"),
    PairRule("pd_swa_hetero_attn_tp_nixl", "0.5.22", None, _SWA_MESSAGE, ("nixl",), _swa_hetero_attn_tp,
             "disaggregation/nixl/conn.py (the SWA state sent per attention-TP rank)"),
    PairRule("pd_swa_hetero_attn_tp_pp", "0.5.22", None, "PD Disaggregation does NOT support PD different TP sizes "
             "for non-MLA SWA hybrid models with pipeline parallelism yet.", ("mooncake",), _swa_hetero_attn_tp_pp,
             "disaggregation/common/conn.py _get_mha_head_slice_blocks",
             reads=("tp_size", "dp_size", "enable_dp_attention", "pp_size", "disaggregation_transfer_backend")),
)


def pair_refusals(prefill: dict[str, Any], decode: dict[str, Any], version: str | Version,
                  model: Any) -> list[tuple[PairRule, str]]:
    """Every :class:`PairRule` under which SGLang ``version`` fails the first KV transfer from a prefill server of
    ``prefill`` settings to a decode server of ``decode`` settings (grid's names) serving ``model``, with its
    message. Raises ``ValueError`` for a version string that is not an SGLang version."""
    ver = parse_version(version) if isinstance(version, str) else tuple(version)
    return [(rule, why) for rule in PAIR_RULES if (why := rule.refuses(prefill, decode, ver, model)) is not None]


def device_name(hardware: Any) -> str:
    """``rtx_pro_6000_x8 (SM120)`` for a GPU, ``cpu_host (CPU)`` for a CPU host: where a requirement failed."""
    name = getattr(hardware, "name", "this hardware")
    if getattr(hardware, "vendor", None) == "cpu":
        return f"{name} (CPU)"
    return f"{name} (SM{getattr(hardware, 'sm_version', '?')})"


def twin_hardware_refusal(hardware: Any) -> str | None:
    """Why the twin cannot play ``hardware`` at all, whatever the settings (rule ``twin_cpu_host``: a CPU host), or
    None. The one place the fact lives: the sim engine's config check and the twin's performance model ask it."""
    rule = next(r for r in RULES if r.name == "twin_cpu_host")
    return rule.refuses({}, parse_version(rule.since), None, hardware)


def refuse(engine: Any, trial: Any) -> str | None:
    """``Engine.release_refusal`` for engines that launch SGLang (or its twin): the first reason, prefixed with the
    version.

    Engines assign it as a method (``release_refusal = checks.refuse``).
    """
    version = engine.version()
    spec = engine.spec
    hardware = getattr(spec, "hardware", None)
    found = refusals(trial.settings, version, getattr(spec, "model", None), hardware,
                     twin=bool(getattr(engine, "twin", False)))
    if not found:
        return None
    first, rule = found[0].message, found[0].rule
    if rule is not None and rule.stage == "twin":
        return first
    if rule is not None and rule.stage == "requirement":  # a kernel's hardware requirement: which hardware, and why
        row = f"failure table {rule.twin_failure.id}: " if rule.twin_failure is not None else ""
        return f"{device_name(hardware)} cannot run this configuration: {first} (source: {row}{rule.where})"
    return f"SGLang {version} would refuse this configuration: {first}"
