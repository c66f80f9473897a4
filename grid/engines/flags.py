"""The flag catalog: server settings named by meaning, translated to SGLang command-line flags per SGLang version.

A sweep names settings (``dsa_decode_backend``, ``cuda_graph``, ``mem_fraction_static`` ...); this module is the one
place that knows which flag spells each setting in a given SGLang release and which values that release accepts.
Both engines use it: the twin takes exactly SGLang's flags.

Facts and their sources (../shared/reference/sglang.md, read from the released wheels):
- ``--nsa-{prefill,decode}-backend`` renamed ``--dsa-*`` in 0.5.13; old names removed in 0.5.20 (§0).
- ``--cuda-graph-max-bs`` renamed ``--cuda-graph-max-bs-decode`` in 0.5.14, old name an error from 0.5.20 (§0).
- ``--disable-cuda-graph`` deprecated in 0.5.14 for ``--cuda-graph-backend-{decode,prefill} disabled`` (§0).
- ``--dp-size N --enable-dp-attention`` became ``--attn-dp-size N`` in 0.5.22 (§0).
- Choice lists per version: §1.1 (0.5.9 and 0.5.23 parsers). sglang.md compares only those two parsers, so a
  release between them takes the 0.5.9 list (the NSA/DSA backend list included: the rename in 0.5.13 is documented,
  the new backends are documented for 0.5.23 only).
Versions between two listed releases take the older release's entry.

Which rendered flags each release accepts is :data:`FLAG_LIFECYCLE` (``unknown_flags`` checks an argument list
against it); the combinations SGLang enforces at launch live in grid/engines/checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """``"0.5.13.post1"`` -> ``(0, 5, 13)``. Raises ``ValueError`` naming the text when it has no numeric release."""
    parts: list[int] = []
    for piece in str(text).split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    if len(parts) < 2:
        raise ValueError(f"not an SGLang version: {text!r} (expected e.g. 0.5.9 or 0.5.23)")
    return tuple(parts)


#: The releases this catalog's facts cover (../shared/reference/sglang.md §0-§1.1); others are planned as the nearest.
OLDEST_KNOWN, NEWEST_KNOWN = "0.5.0", "0.5.23"


def catalog_note(version: str) -> str | None:
    """A note for the user when ``version`` lies outside the releases the catalog knows (None inside, and for a
    text that is not a version, such as an external server's ``"external"``: no command line is planned there)."""
    try:
        v = parse_version(version)
    except ValueError:
        return None
    if v > parse_version(NEWEST_KNOWN) and v[:3] != parse_version(NEWEST_KNOWN):
        return (f"SGLang {version} is newer than the newest release grid's flag catalog knows ({NEWEST_KNOWN}): "
                f"flags and allowed values are planned as for {NEWEST_KNOWN}; a renamed flag shows up as a "
                "failed launch")
    if v < parse_version(OLDEST_KNOWN):
        return (f"SGLang {version} is older than the oldest release grid's flag catalog knows ({OLDEST_KNOWN}): "
                f"flags are planned as for {OLDEST_KNOWN}")
    return None


def _by_version(table: dict[str, Any], version: Version) -> Any:
    """The entry of the newest release in ``table`` that is not newer than ``version``."""
    best = None
    for key in sorted(table, key=parse_version):
        if parse_version(key) <= version:
            best = table[key]
    if best is None:
        best = table[min(table, key=parse_version)]
    return best


NSA_BACKENDS_059 = ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm")
DSA_BACKENDS_0523 = (
    "flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto", "flashinfer_sparse_mla",
    "triton_sparse_mla", "fa3", "tilelang", "triton", "aiter", "trtllm", "intel_xpu",
)
MOE_RUNNERS_059 = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_mxfp4",
    "flashinfer_cutedsl", "cutlass",
)
MOE_RUNNERS_0523 = MOE_RUNNERS_059 + (
    "experimental_sgl_trtllm", "flashinfer_trtllm_routed", "flashinfer_megamoe", "aiter", "marlin", "humming",
    "experimental_sgl_marlin", "lora_cutedsl", "lora_triton", "lora_marlin", "hpc_ops", "megamoe", "intel_xpu",
)
MOE_A2A_059 = ("none", "deepep", "mooncake", "mori", "ascend_fuseep", "flashinfer")
MOE_A2A_0523 = MOE_A2A_059 + ("nixl", "megamoe", "deepep_v2", "pplx", "ascend_tp", "flashinfer_megamoe")
SCHEDULE_059 = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key")
SCHEDULE_0523 = SCHEDULE_059 + ("hrrn", "shortest-prefill-first")
ATTENTION_059 = (
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
    "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
ATTENTION_0523 = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha",
    "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)
QUANT_059 = (
    "awq", "fp8", "mxfp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
    "modelopt_fp8", "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq", "w4afp8", "mxfp4",
    "auto-round", "compressed-tensors", "modelslim", "quark_int4fp8_moe",
)
QUANT_0523 = tuple(q for q in QUANT_059 if q not in ("marlin", "qoq")) + (
    "nvfp4_online", "modelopt_mixed", "auto-round-int8", "mxfp_w4a8", "quark", "quark_mxfp4", "mlx_q4", "mlx_q8",
    "unquant", "humming",
)
KV_DTYPES_059 = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
KV_DTYPES_0523 = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")


def _value(flag: str) -> Callable[[Any, Version], list[str]]:
    return lambda v, _ver: [flag, str(v)]


def _switch(flag: str) -> Callable[[Any, Version], list[str]]:
    return lambda v, _ver: [flag] if v else []


def _renamed(old: str, new: str, since: str) -> Callable[[Any, Version], list[str]]:
    cut = parse_version(since)
    return lambda v, ver: [new if ver >= cut else old, str(v)]


def _cuda_graph(value: Any, ver: Version) -> list[str]:
    if value:
        return []
    if ver >= (0, 5, 14):
        return ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    return ["--disable-cuda-graph"]


def _dp_attention(value: Any, ver: Version) -> list[str]:
    # Rendered together with dp_size by ``to_argv``; this entry only marks the setting as known.
    return []


@dataclass(frozen=True)
class Setting:
    """One server setting: its Python type, the allowed values per version (None = any), how it renders."""

    name: str
    type: type
    render: Callable[[Any, Version], list[str]]
    help: str
    choices: dict[str, tuple] | None = None
    minimum: float | None = None
    maximum: float | None = None

    def allowed(self, version: Version) -> tuple | None:
        return None if self.choices is None else _by_version(self.choices, version)


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("tp_size", int, _value("--tp-size"), "tensor parallel size", minimum=1),
        Setting("dp_size", int, _value("--dp-size"), "data parallel size", minimum=1),
        Setting("ep_size", int, _value("--ep-size"), "expert parallel size", minimum=1),
        Setting("enable_dp_attention", bool, _dp_attention, "attention data parallelism over dp_size groups"),
        Setting("mem_fraction_static", float, _value("--mem-fraction-static"),
                "fraction of GPU memory for weights + KV cache", minimum=0.05, maximum=0.99),
        Setting("max_running_requests", int, _value("--max-running-requests"), "cap on running requests", minimum=1),
        Setting("max_total_tokens", int, _value("--max-total-tokens"), "KV pool size override", minimum=1),
        Setting("chunked_prefill_size", int, _value("--chunked-prefill-size"), "prefill chunk tokens (-1 = off)",
                minimum=-1),
        Setting("max_prefill_tokens", int, _value("--max-prefill-tokens"), "tokens per prefill batch", minimum=1),
        Setting("context_length", int, _value("--context-length"), "maximum context length", minimum=1),
        Setting("page_size", int, _value("--page-size"), "KV cache page size in tokens", minimum=1),
        Setting("schedule_policy", str, _value("--schedule-policy"), "request queue order",
                choices={"0.5.0": SCHEDULE_059, "0.5.23": SCHEDULE_0523}),
        Setting("enable_priority_scheduling", bool, _switch("--enable-priority-scheduling"),
                "schedule by request priority (needs schedule_policy fcfs or lof)"),
        Setting("schedule_conservativeness", float, _value("--schedule-conservativeness"),
                "admission conservativeness", minimum=0.0),
        Setting("cuda_graph", bool, _cuda_graph, "capture CUDA graphs for decode"),
        Setting("cuda_graph_max_bs", int,
                _renamed("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "0.5.14"),
                "largest decode batch captured in a CUDA graph", minimum=1),
        Setting("torch_compile", bool, _switch("--enable-torch-compile"), "torch.compile the model"),
        Setting("torch_compile_max_bs", int, _value("--torch-compile-max-bs"), "largest compiled batch", minimum=1),
        Setting("two_batch_overlap", bool, _switch("--enable-two-batch-overlap"), "two micro-batch overlap"),
        Setting("single_batch_overlap", bool, _switch("--enable-single-batch-overlap"), "single-batch overlap"),
        Setting("quantization", str, _value("--quantization"), "weight quantization method (None: from the checkpoint)",
                choices={"0.5.0": QUANT_059, "0.5.23": QUANT_0523}),
        Setting("moe_runner_backend", str, _value("--moe-runner-backend"), "MoE kernel backend",
                choices={"0.5.0": MOE_RUNNERS_059, "0.5.23": MOE_RUNNERS_0523}),
        Setting("moe_a2a_backend", str, _value("--moe-a2a-backend"), "MoE all-to-all backend",
                choices={"0.5.0": MOE_A2A_059, "0.5.23": MOE_A2A_0523}),
        Setting("attention_backend", str, _value("--attention-backend"), "attention kernels",
                choices={"0.5.0": ATTENTION_059, "0.5.23": ATTENTION_0523}),
        Setting("dsa_prefill_backend", str,
                _renamed("--nsa-prefill-backend", "--dsa-prefill-backend", "0.5.13"),
                "sparse-attention (NSA/DSA) prefill backend",
                choices={"0.5.0": NSA_BACKENDS_059, "0.5.23": DSA_BACKENDS_0523}),
        Setting("dsa_decode_backend", str,
                _renamed("--nsa-decode-backend", "--dsa-decode-backend", "0.5.13"),
                "sparse-attention (NSA/DSA) decode backend",
                choices={"0.5.0": NSA_BACKENDS_059,
                         "0.5.23": tuple(b for b in DSA_BACKENDS_0523 if b != "triton_sparse_mla")}),
        Setting("kv_cache_dtype", str, _value("--kv-cache-dtype"), "KV cache storage dtype",
                choices={"0.5.0": KV_DTYPES_059, "0.5.23": KV_DTYPES_0523}),
        Setting("deepep_mode", str, _value("--deepep-mode"), "DeepEP dispatch mode",
                choices={"0.5.0": ("normal", "low_latency", "auto")}),
        Setting("disable_radix_cache", bool, _switch("--disable-radix-cache"), "turn off prefix caching"),
        Setting("enable_metrics", bool, _switch("--enable-metrics"), "serve Prometheus /metrics"),
        Setting("reasoning_parser", str, _value("--reasoning-parser"), "split reasoning from content"),
        Setting("trust_remote_code", bool, _switch("--trust-remote-code"), "allow custom model code"),
        Setting("stream_interval", int, _value("--stream-interval"), "decode steps per streamed chunk", minimum=1),
        Setting("decode_log_interval", int, _value("--decode-log-interval"), "decode steps per log line", minimum=1),
        Setting("random_seed", int, _value("--random-seed"), "sampling seed"),
    ]
}


class SettingError(ValueError):
    """A server setting is unknown, of the wrong type, or outside the values the SGLang version accepts."""


def check_setting(name: str, value: Any, version: Version) -> Any:
    """Validate one setting for ``version``; return the value coerced to the setting's type.

    Raises ``SettingError`` naming the key and, for choice settings, the allowed values.
    """
    setting = SETTINGS.get(name)
    if setting is None:
        raise SettingError(f"server.{name}: unknown setting; allowed settings: {', '.join(sorted(SETTINGS))}")
    if value is None:
        return None
    if setting.type is bool:
        if not isinstance(value, bool):
            raise SettingError(f"server.{name}: expected true or false, got {value!r}")
    elif setting.type is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingError(f"server.{name}: expected an integer, got {value!r}")
    elif setting.type is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingError(f"server.{name}: expected a number, got {value!r}")
        value = float(value)
    elif not isinstance(value, str):
        raise SettingError(f"server.{name}: expected a string, got {value!r}")
    allowed = setting.allowed(version)
    if allowed is not None and value not in allowed:
        ver = ".".join(map(str, version))
        raise SettingError(f"server.{name}={value!r} is not accepted by SGLang {ver}; allowed values: "
                           f"{', '.join(allowed)}")
    if setting.minimum is not None and value < setting.minimum:
        raise SettingError(f"server.{name}={value!r} is below the minimum {setting.minimum}")
    if setting.maximum is not None and value > setting.maximum:
        raise SettingError(f"server.{name}={value!r} is above the maximum {setting.maximum}")
    return value


def to_argv(settings: dict[str, Any], version: Version) -> list[str]:
    """Render settings (None values are left to SGLang's defaults) as an argument list, in catalog order.

    Settings must already have passed ``check_setting``. ``enable_dp_attention`` renders with ``dp_size``:
    ``--dp-size N --enable-dp-attention`` before 0.5.22, ``--attn-dp-size N`` from it (sglang.md §0).
    """
    argv: list[str] = []
    dp_attention = bool(settings.get("enable_dp_attention"))
    for name, setting in SETTINGS.items():
        value = settings.get(name)
        if value is None:
            continue
        if name == "dp_size" and dp_attention:
            if version >= (0, 5, 22):
                argv += ["--attn-dp-size", str(value)]
            else:
                argv += ["--dp-size", str(value), "--enable-dp-attention"]
            continue
        if isinstance(value, float):
            value = repr(value)
        argv += setting.render(value, version)
    return argv


#: The version-gated flags the catalog renders: flag -> (first release that accepts it, first release that rejects
#: it; None = still accepted). sglang.md §0 (renames/removals) and §1.1; every other rendered flag exists in every
#: 0.5.x release the catalog covers.
FLAG_LIFECYCLE: dict[str, tuple[str, str | None]] = {
    "--nsa-prefill-backend": ("0.5.0", "0.5.20"),
    "--nsa-decode-backend": ("0.5.0", "0.5.20"),
    "--dsa-prefill-backend": ("0.5.13", None),
    "--dsa-decode-backend": ("0.5.13", None),
    "--cuda-graph-max-bs": ("0.5.0", "0.5.20"),
    "--cuda-graph-max-bs-decode": ("0.5.14", None),
    "--cuda-graph-backend-decode": ("0.5.14", None),
    "--cuda-graph-backend-prefill": ("0.5.14", None),
    "--attn-dp-size": ("0.5.22", None),
}

#: Flags still accepted but deprecated (a warning at launch): flag -> (deprecated since, replacement). sglang.md §0.
FLAG_DEPRECATED: dict[str, tuple[str, str]] = {
    "--nsa-prefill-backend": ("0.5.13", "--dsa-prefill-backend"),
    "--nsa-decode-backend": ("0.5.13", "--dsa-decode-backend"),
    "--cuda-graph-max-bs": ("0.5.14", "--cuda-graph-max-bs-decode"),
    "--disable-cuda-graph": ("0.5.14", "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled"),
    "--enable-dp-attention": ("0.5.22", "--attn-dp-size N"),
}


def unknown_flags(argv: list[str], version: Version) -> list[str]:
    """The flags of ``argv`` that SGLang ``version`` does not accept (argparse would exit with code 2)."""
    out = []
    for arg in argv:
        life = FLAG_LIFECYCLE.get(arg.split("=", 1)[0])
        if life is None:
            continue
        since, removed = life
        if version < parse_version(since) or (removed is not None and version >= parse_version(removed)):
            out.append(arg)
    return out


def deprecated_flags(argv: list[str], version: Version) -> list[str]:
    """The flags of ``argv`` that ``version`` accepts only with a deprecation warning."""
    return [a for a in argv if a in FLAG_DEPRECATED and version >= parse_version(FLAG_DEPRECATED[a][0])
            and not unknown_flags([a], version)]


@dataclass(frozen=True)
class FlagDoc:
    name: str
    help: str
    choices: tuple | None = field(default=None)


def describe(version: Version) -> list[FlagDoc]:
    """What each setting means and accepts for ``version`` (for error messages and docs)."""
    return [FlagDoc(s.name, s.help, s.allowed(version)) for s in SETTINGS.values()]
