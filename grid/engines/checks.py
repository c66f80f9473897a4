"""Pre-launch checks: would SGLang of a given version accept this configuration? Answered without launching it.

Three layers, each with its source in the SGLang facts file (sglang.md, read from the released wheels):

1. every setting is known and its value is among the version's choices (``flags.check_setting``, §1.1);
2. every flag the catalog renders exists in that version (``flags.unknown_flags``, §0 renames and removals);
3. the combinations SGLang's ``check_server_args`` / validation hooks enforce at launch (§1.3), listed in
   :data:`RULES`. Each rule reproduces SGLang's own error message.

An impossible configuration is recorded ``invalid`` (error class ``refused``) with the reason and no launch is spent
on it (``Engine.refuse``). The twin's CLI (grid/twin/cli.py) enforces the same rules at launch, as SGLang does;
tests/unit/test_checks.py compares the two on the same configurations.
"""

from __future__ import annotations

from typing import Any, Callable

from grid.engines.flags import SETTINGS, SettingError, Version, check_setting, parse_version, to_argv, unknown_flags

#: a2a backends that force ``ep_size := tp_size`` (0.5.9 ``_handle_a2a_moe``, sglang.md §1.1 --ep-size).
A2A_FORCES_EP = ("deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori")
#: SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK default (sglang.md §1.3).
MORI_MAX_DISPATCH_TOKENS = 4096
#: KV dtypes a DSA model accepts (assert in 0.5.9 ``_handle_model_specific_adjustments``, sglang.md §1.3).
DSA_KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3")


def _dp_attention(s: dict[str, Any]) -> bool:
    """Attention DP is on: ``enable_dp_attention`` with ``dp_size > 1`` (SGLang turns it off at dp_size 1)."""
    return bool(s.get("enable_dp_attention")) and int(s.get("dp_size") or 1) > 1


def _ep_size(s: dict[str, Any]) -> int:
    tp = int(s.get("tp_size") or 1)
    if s.get("moe_a2a_backend") in A2A_FORCES_EP:
        return tp
    return int(s.get("ep_size") or 1)


def _tbo(s: dict[str, Any], ver: Version, model: Any) -> str | None:
    """Two-batch overlap preconditions (≤0.5.14 ``check_server_args``; ≥0.5.16 ``check_two_batch_overlap``)."""
    if not s.get("two_batch_overlap"):
        return None
    a2a = s.get("moe_a2a_backend") or "none"
    if ver < (0, 5, 16):
        if a2a == "none":
            return "When enabling two batch overlap, moe_a2a_backend cannot be 'none'."
    elif a2a == "none" and not _dp_attention(s):
        need = "attention DP (--attn-dp-size)" if ver >= (0, 5, 22) else "--enable-dp-attention"
        return ("When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'), "
                f"{need} is required (DeepSeek-V4 non-EP DP TBO path).")
    if ver >= (0, 5, 23) and a2a == "deepep_v2":
        return "moe_a2a_backend='deepep_v2' has not implemented the TBO/SBO overlap hooks yet."
    if ver >= (0, 5, 23) and a2a == "megamoe":
        return "moe_a2a_backend='megamoe' has no two-batch / single-batch overlap decomposition."
    return None


def _priority(s: dict[str, Any], ver: Version, model: Any) -> str | None:
    """Priority scheduling needs fcfs or lof (0.5.9 ``check_server_args``)."""
    policy = s.get("schedule_policy") or "fcfs"
    if s.get("enable_priority_scheduling") and policy not in ("fcfs", "lof"):
        return (f"The schedule policy {policy} is not supported with priority scheduling. "
                "Please use 'fcfs' or 'lof'.")
    return None


def _dp(s: dict[str, Any], ver: Version, model: Any) -> str | None:
    """``tp_size % dp_size == 0`` under attention DP (0.5.9 ``_handle_data_parallelism``)."""
    if _dp_attention(s) and int(s.get("tp_size") or 1) % int(s["dp_size"]) != 0:
        return "tp_size must be divisible by dp_size"
    return None


def _chunk_page(s: dict[str, Any], ver: Version, model: Any) -> str | None:
    """``chunked_prefill_size % page_size == 0`` (0.5.9 ``check_server_args``)."""
    c, p = s.get("chunked_prefill_size"), s.get("page_size")
    if c is not None and c > 0 and p and c % p:
        return "chunked_prefill_size must be divisible by page_size"
    return None


def _moe(s: dict[str, Any], ver: Version, model: Any) -> str | None:
    """MoE runner / a2a backend requirements (0.5.9 ``_handle_moe_kernel_config`` / ``_handle_a2a_moe``)."""
    q = s.get("quantization") or (getattr(model, "quantization", None) if model is not None else None)
    runner, a2a = s.get("moe_runner_backend") or "auto", s.get("moe_a2a_backend") or "none"
    tp, ep = int(s.get("tp_size") or 1), _ep_size(s)
    if runner == "flashinfer_cutlass":
        if q not in ("modelopt_fp4", "modelopt_fp8", None):
            return (f"Invalid quantization '{q}'. FlashInfer Cutlass MOE supports only: 'modelopt_fp4', "
                    "'modelopt_fp8', or bfloat16 (None).")
        if ep not in (1, tp):
            return "The expert parallel size must be 1 or the same as the tensor parallel size"
    if runner == "flashinfer_trtllm" and q not in ("modelopt_fp4", "fp8", "modelopt_fp8", "compressed-tensors", None):
        return (f"Invalid quantization '{q}'. FlashInfer TRTLLM MOE supports only: 'modelopt_fp4', 'fp8', "
                "'modelopt_fp8', 'compressed-tensors', or bfloat16 (None).")
    if runner == "cutlass" and q in ("fp8", "mxfp8") and ep != 1:
        return "FP8 Cutlass MoE is only supported with ep_size == 1"
    if a2a == "flashinfer" and runner != "flashinfer_cutlass":
        return "Flashinfer MoE A2A is only supported with flashinfer_cutlass moe runner backend"
    chunk = s.get("chunked_prefill_size")
    if a2a == "mori" and chunk is not None and chunk > MORI_MAX_DISPATCH_TOKENS:
        return (f"SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK ({MORI_MAX_DISPATCH_TOKENS}) should be larger or "
                "equal to chunked_prefill_size")
    return None


def _dsa(s: dict[str, Any], ver: Version, model: Any) -> str | None:
    """DSA (GLM-5 / DeepSeek-V3.2) KV dtype and sub-backend constraints (sglang.md §1.3 "DSA")."""
    if model is None or getattr(model, "dsa", None) is None:
        return None
    kv = s.get("kv_cache_dtype") or "auto"
    if kv not in DSA_KV_DTYPES:
        return "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype"
    backends = {s.get("dsa_prefill_backend"), s.get("dsa_decode_backend")} - {None}
    if ver >= (0, 5, 23) and "triton" in backends:
        return "The triton DSA backend is only supported on ROCm/HIP."
    if "tilelang" in backends and kv == "fp8_e4m3":
        if (0, 5, 20) <= ver < (0, 5, 23):
            return ("The tilelang DSA prefill/decode kernels only support an fp8_e4m3 KV cache on ROCm/HIP; "
                    "on CUDA they require a bfloat16 KV cache.")
        if ver >= (0, 5, 23) and backends != {"tilelang"}:
            return ("With an fp8_e4m3 KV cache on CUDA, the tilelang DSA backend must be used for both "
                    "--dsa-prefill-backend and --dsa-decode-backend.")
    return None


#: The launch-time combination rules, in the order SGLang checks them.
RULES: list[Callable[[dict[str, Any], Version, Any], str | None]] = [_tbo, _priority, _dp, _chunk_page, _moe, _dsa]


def check_config(settings: dict[str, Any], version: str | Version, model: Any = None) -> list[str]:
    """Every reason SGLang ``version`` would refuse ``settings`` at launch (empty: it would start).

    ``model`` is a ``ModelSpec`` (or anything with ``quantization`` and ``dsa``) for the model-dependent rules.
    Raises ``ValueError`` for a version string that is not an SGLang version.
    """
    ver = parse_version(version) if isinstance(version, str) else tuple(version)
    reasons: list[str] = []
    known: dict[str, Any] = {}
    for name, value in settings.items():
        try:
            known[name] = check_setting(name, value, ver)
        except SettingError as err:
            reasons.append(str(err))
    if reasons:
        return reasons
    bad = unknown_flags(to_argv({k: v for k, v in known.items() if k in SETTINGS}, ver), ver)
    if bad:
        reasons.append(f"unrecognized arguments: {' '.join(bad)} (SGLang {'.'.join(map(str, ver))})")
    for rule in RULES:
        why = rule(known, ver, model)
        if why is not None:
            reasons.append(why)
    return reasons


def refuse(engine: Any, trial: Any) -> str | None:
    """``Engine.refuse`` for engines that launch SGLang (or its twin): the first reason, prefixed with the version.

    Engines assign it as a method (``refuse = checks.refuse``).
    """
    version = engine.version()
    reasons = check_config(trial.settings, version, getattr(engine.spec, "model", None))
    return f"SGLang {version} would refuse this configuration: {reasons[0]}" if reasons else None
