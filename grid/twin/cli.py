"""SGLang's ``launch_server`` command line, as each SGLang version has it.

The flags live in one data table (:data:`FLAGS`): every flag carries the versions in which each of its option names was
introduced, deprecated and removed, and its choices per version. :func:`build_parser` turns the table into a plain
``argparse.ArgumentParser`` for one version, so that argparse's own behaviour is kept: unique prefixes are accepted
(``--tp 8``), an unknown flag exits with code 2 and ``... error: unrecognized arguments: ...``, and a removed alias
that is the prefix of two newer flags (``--cuda-graph-max-bs`` on 0.5.20+) gives argparse's ``ambiguous option`` error.

After parsing, :func:`check_server_args` applies the launch-time checks SGLang enforces (sglang.md §1.3), raising
``ValueError`` / ``AssertionError`` with SGLang's messages, and :func:`to_serving_config` builds the
:class:`~grid.twin.perf.ServingConfig` the performance model consumes.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

DEFAULT_VERSION = "0.5.9"
Version = tuple[int, int, int]
_NEVER: Version = (99, 0, 0)


def parse_version(text: str) -> Version:
    """``"0.5.13.post1"`` -> ``(0, 5, 13)``."""
    nums = [int(x) for x in re.findall(r"\d+", text)[:3]]
    if not nums:
        raise ValueError(f"not a version: {text!r}")
    while len(nums) < 3:
        nums.append(0)
    return (nums[0], nums[1], nums[2])


def _v(text: str) -> Version:
    return parse_version(text)


@dataclass(frozen=True)
class Name:
    """One option string of a flag and its lifecycle."""

    flag: str
    since: Version = (0, 0, 0)
    deprecated: Version | None = None  # from this version on, accepted with a deprecation warning
    removed: Version | None = None  # from this version on, not accepted
    use: str = ""  # what the deprecation warning recommends instead

    def state(self, ver: Version) -> str | None:
        """``"ok"``, ``"deprecated"`` or None (absent at ``ver``)."""
        if ver < self.since or (self.removed is not None and ver >= self.removed):
            return None
        if self.deprecated is not None and ver >= self.deprecated:
            return "deprecated"
        return "ok"


@dataclass(frozen=True)
class Flag:
    dest: str
    names: tuple[Name, ...]
    kind: str = "str"  # str | int | float | bool | ints (nargs='+') | hint (human-readable int)
    default: Any = None
    choices: tuple[tuple[Version, tuple[str, ...]], ...] = ()  # (since, choices); the latest applicable wins
    help: str = ""
    required: bool = False
    hint_since: Version = _NEVER  # kind "hint": versions before this parse plain int

    def choices_at(self, ver: Version) -> tuple[str, ...] | None:
        chosen = None
        for since, ch in self.choices:
            if ver >= since:
                chosen = ch
        return chosen


def _names(*items: str | Name) -> tuple[Name, ...]:
    return tuple(Name(i) if isinstance(i, str) else i for i in items)


def F(dest: str, *names: str | Name, **kw: Any) -> Flag:
    return Flag(dest=dest, names=_names(*names), **kw)


# --- choice lists (sglang.md §1.1) ----------------------------------------------------------------------------------
_SCHED_059 = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key")
_MOE_RUNNER_059 = ("auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass",
                   "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass")
_MOE_RUNNER_0523 = _MOE_RUNNER_059 + ("experimental_sgl_trtllm", "flashinfer_trtllm_routed", "flashinfer_megamoe",
                                      "aiter", "marlin", "humming", "experimental_sgl_marlin", "lora_cutedsl",
                                      "lora_triton", "lora_marlin", "hpc_ops", "megamoe", "intel_xpu")
_A2A_059 = ("none", "deepep", "mooncake", "mori", "ascend_fuseep", "flashinfer")
_A2A_0523 = _A2A_059 + ("nixl", "megamoe", "deepep_v2", "pplx", "ascend_tp", "flashinfer_megamoe")
_ATTN_059 = ("triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
             "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu")
_ATTN_0523 = ("triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
              "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
              "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
              "ascend", "intel_xpu")
_NSA_059 = ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm")
_DSA_PREFILL_0523 = ("flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto", "flashinfer_sparse_mla",
                     "triton_sparse_mla", "fa3", "tilelang", "triton", "aiter", "trtllm", "intel_xpu")
_DSA_DECODE_0523 = tuple(c for c in _DSA_PREFILL_0523 if c != "triton_sparse_mla")
_QUANT_059 = ("awq", "fp8", "mxfp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
              "modelopt_fp8", "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq", "w4afp8",
              "mxfp4", "auto-round", "compressed-tensors", "modelslim", "quark_int4fp8_moe")
_QUANT_0523 = tuple(q for q in _QUANT_059 if q not in ("marlin", "qoq")) + (
    "nvfp4_online", "modelopt_mixed", "auto-round-int8", "mxfp_w4a8", "quark", "quark_mxfp4", "mlx_q4", "mlx_q8",
    "unquant", "humming")
_KV_059 = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
_KV_0523 = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
_SPEC_059 = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
_GRAPH_BACKEND = ("full", "breakable", "disabled")

V0 = (0, 0, 0)
V513, V514, V516, V520, V522, V523 = _v("0.5.13"), _v("0.5.14"), _v("0.5.16"), _v("0.5.20"), _v("0.5.22"), _v("0.5.23")

# --- the flag table: order = ServerArgs field order (used for the server_args=ServerArgs(...) repr) ---------------------
FLAGS: tuple[Flag, ...] = (
    F("model_path", "--model-path", "--model", required=True,
      help="The path of the model weights. This can be a local folder or a Hugging Face repo ID."),
    F("tokenizer_path", "--tokenizer-path"),
    F("tokenizer_mode", "--tokenizer-mode", default="auto"),
    F("skip_tokenizer_init", "--skip-tokenizer-init", kind="bool"),
    F("load_format", "--load-format", default="auto"),
    F("trust_remote_code", "--trust-remote-code", kind="bool"),
    F("context_length", "--context-length", kind="int"),
    F("dtype", "--dtype", default="auto", choices=((V0, ("auto", "half", "float16", "bfloat16", "float", "float32")),)),
    F("quantization", "--quantization", choices=((V0, _QUANT_059), (V523, _QUANT_0523))),
    F("kv_cache_dtype", "--kv-cache-dtype", default="auto", choices=((V0, _KV_059), (V523, _KV_0523))),
    F("served_model_name", "--served-model-name"),
    F("host", "--host", default="127.0.0.1"),
    F("port", "--port", kind="int", default=30000),
    F("skip_server_warmup", "--skip-server-warmup", kind="bool"),
    F("mem_fraction_static", "--mem-fraction-static", kind="float"),
    F("max_running_requests", "--max-running-requests", kind="int"),
    F("max_total_tokens", "--max-total-tokens", kind="hint", hint_since=V523),
    F("chunked_prefill_size", "--chunked-prefill-size", kind="int"),
    F("max_prefill_tokens", "--max-prefill-tokens", kind="int", default=16384),
    F("schedule_policy", "--schedule-policy", default="fcfs",
      choices=((V0, _SCHED_059), (V523, _SCHED_059 + ("hrrn", "shortest-prefill-first")))),
    F("enable_priority_scheduling", "--enable-priority-scheduling", kind="bool"),
    F("schedule_conservativeness", "--schedule-conservativeness", kind="float", default=1.0),
    F("page_size", "--page-size", kind="int"),
    F("device", "--device", default="cuda"),
    F("tp_size", "--tp-size", "--tensor-parallel-size", kind="int", default=1),
    F("pp_size", "--pp-size", "--pipeline-parallel-size", kind="int", default=1),
    F("stream_interval", "--stream-interval", kind="int", default=1),
    F("stream_output", Name("--stream-output", removed=V513), Name("--incremental-streaming-output", since=V513),
      kind="bool"),
    F("stream_response_default_include_usage", Name("--stream-response-default-include-usage", since=V523),
      kind="bool"),
    F("random_seed", "--random-seed", kind="int"),
    F("watchdog_timeout", "--watchdog-timeout", kind="float", default=300.0),
    F("dist_timeout", "--dist-timeout", kind="int"),
    F("log_level", "--log-level", default="info"),
    F("log_level_http", "--log-level-http"),
    F("log_requests", "--log-requests", kind="bool"),
    F("log_requests_level", "--log-requests-level", kind="int", default=2,
      choices=((V0, ("0", "1", "2", "3")),)),
    F("show_time_cost", "--show-time-cost", kind="bool"),
    F("enable_metrics", "--enable-metrics", kind="bool"),
    F("collect_tokens_histogram", Name("--collect-tokens-histogram", removed=V523), kind="bool"),
    F("decode_log_interval", "--decode-log-interval", kind="int", default=40),
    F("enable_cache_report", "--enable-cache-report", kind="bool"),
    F("api_key", "--api-key"),
    F("reasoning_parser", "--reasoning-parser"),
    F("tool_call_parser", "--tool-call-parser"),
    F("dp_size", "--dp-size", "--data-parallel-size", kind="int", default=1),
    F("attn_dp_size", Name("--attn-dp-size", since=V522), Name("--attention-data-parallel-size", since=V522),
      kind="int", default=1),
    F("nnodes", "--nnodes", kind="int", default=1),
    F("node_rank", "--node-rank", kind="int", default=0),
    F("attention_backend", "--attention-backend", choices=((V0, _ATTN_059), (V523, _ATTN_0523))),
    F("prefill_attention_backend", "--prefill-attention-backend", choices=((V0, _ATTN_059), (V523, _ATTN_0523))),
    F("decode_attention_backend", "--decode-attention-backend", choices=((V0, _ATTN_059), (V523, _ATTN_0523))),
    F("dsa_prefill_backend",
      Name("--nsa-prefill-backend", deprecated=V513, removed=V520, use="--dsa-prefill-backend"),
      Name("--dsa-prefill-backend", since=V513),
      choices=((V0, _NSA_059), (V523, _DSA_PREFILL_0523))),
    F("dsa_decode_backend",
      Name("--nsa-decode-backend", deprecated=V513, removed=V520, use="--dsa-decode-backend"),
      Name("--dsa-decode-backend", since=V513),
      choices=((V0, _NSA_059), (V523, _DSA_DECODE_0523))),
    F("speculative_algorithm", "--speculative-algorithm", choices=((V0, _SPEC_059), (V523, ()))),
    F("speculative_draft_model_path", "--speculative-draft-model-path", "--speculative-draft-model"),
    F("speculative_num_steps", "--speculative-num-steps", kind="int"),
    F("speculative_eagle_topk", "--speculative-eagle-topk", kind="int"),
    F("speculative_num_draft_tokens", "--speculative-num-draft-tokens", kind="int"),
    F("ep_size", "--ep-size", "--expert-parallel-size", "--ep", kind="int", default=1),
    F("moe_a2a_backend", "--moe-a2a-backend", default="none", choices=((V0, _A2A_059), (V523, _A2A_0523))),
    F("moe_runner_backend", "--moe-runner-backend", default="auto",
      choices=((V0, _MOE_RUNNER_059), (V523, _MOE_RUNNER_0523))),
    F("deepep_mode", "--deepep-mode", default="auto", choices=((V0, ("normal", "low_latency", "auto")),)),
    F("disable_shared_experts_fusion", "--disable-shared-experts-fusion", kind="bool"),
    F("disable_radix_cache", "--disable-radix-cache", kind="bool"),
    F("cuda_graph_max_bs",
      Name("--cuda-graph-max-bs", deprecated=V514, removed=V520, use="--cuda-graph-max-bs-decode"),
      Name("--cuda-graph-max-bs-decode", since=V514), kind="int"),
    F("cuda_graph_max_bs_prefill", Name("--cuda-graph-max-bs-prefill", since=V514), kind="int"),
    F("cuda_graph_bs",
      Name("--cuda-graph-bs", deprecated=V514, removed=V520, use="--cuda-graph-bs-decode"),
      Name("--cuda-graph-bs-decode", since=V514), kind="ints"),
    F("cuda_graph_bs_prefill", Name("--cuda-graph-bs-prefill", since=V514), kind="ints"),
    F("cuda_graph_backend_decode", Name("--cuda-graph-backend-decode", since=V514), default="full",
      choices=((V0, _GRAPH_BACKEND),)),
    F("cuda_graph_backend_prefill", Name("--cuda-graph-backend-prefill", since=V514), default="full",
      choices=((V0, _GRAPH_BACKEND),)),
    F("disable_decode_cuda_graph", Name("--disable-decode-cuda-graph", since=V514), kind="bool"),
    F("disable_prefill_cuda_graph", Name("--disable-prefill-cuda-graph", since=V514), kind="bool"),
    F("cuda_graph_config", Name("--cuda-graph-config", since=V514)),
    F("disable_cuda_graph",
      Name("--disable-cuda-graph", deprecated=V514,
           use="--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled"), kind="bool"),
    F("disable_cuda_graph_padding", "--disable-cuda-graph-padding", kind="bool"),
    F("enable_piecewise_cuda_graph", Name("--enable-piecewise-cuda-graph", removed=V523), kind="bool"),
    F("enable_nan_detection", Name("--enable-nan-detection", removed=V513), kind="bool"),
    F("enable_dp_attention", Name("--enable-dp-attention", deprecated=V522, use="--attn-dp-size <dp-size>"),
      kind="bool"),
    F("enable_dp_lm_head", "--enable-dp-lm-head", kind="bool"),
    F("enable_two_batch_overlap", "--enable-two-batch-overlap", kind="bool"),
    F("enable_single_batch_overlap", "--enable-single-batch-overlap", kind="bool"),
    F("tbo_token_distribution_threshold", "--tbo-token-distribution-threshold", kind="float", default=0.48),
    F("enable_torch_compile", "--enable-torch-compile", kind="bool"),
    F("torch_compile_max_bs", "--torch-compile-max-bs", kind="int", default=32),
    F("torchao_config", Name("--torchao-config", removed=V523), default=""),
    F("enable_mixed_chunk", "--enable-mixed-chunk", kind="bool"),
    F("disable_overlap_schedule", "--disable-overlap-schedule", kind="bool"),
    F("config", "--config"),
)
FLAG_BY_DEST = {f.dest: f for f in FLAGS}


# --- argparse plumbing -----------------------------------------------------------------------------------------------
def _warn_deprecated(namespace: argparse.Namespace, option: str, use: str) -> None:
    lst = namespace.__dict__.setdefault("_deprecations", [])
    lst.append(f"'{option}' is deprecated and will be removed in a future release. Use '{use}' instead.")


class _DepStore(argparse._StoreAction):
    def __init__(self, *a: Any, dep_aliases: dict[str, str] | None = None, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.dep_aliases = dep_aliases or {}

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        if option_string in self.dep_aliases:
            _warn_deprecated(namespace, option_string, self.dep_aliases[option_string])
        super().__call__(parser, namespace, values, option_string)


class _DepStoreTrue(argparse._StoreTrueAction):
    def __init__(self, *a: Any, dep_aliases: dict[str, str] | None = None, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.dep_aliases = dep_aliases or {}

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        if option_string in self.dep_aliases:
            _warn_deprecated(namespace, option_string, self.dep_aliases[option_string])
        super().__call__(parser, namespace, values, option_string)


_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def human_readable_int(text: str) -> int:
    """0.5.23's ``--max-total-tokens`` parser: ``128k``, ``1Mi``, ``4096``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG][iI]?)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid human-readable int: {text!r}")
    mult = _SUFFIX[m.group(2).lower()] if m.group(2) else 1
    return int(float(m.group(1)) * mult)


def prog_for(ver: Version) -> str:
    """argparse's prog: argv[0] of ``python -m sglang.launch_server`` until 0.5.22; ``sglang serve`` from 0.5.23."""
    return "sglang serve" if ver >= V523 else "launch_server.py"


def build_parser(version: str = DEFAULT_VERSION) -> argparse.ArgumentParser:
    ver = parse_version(version)
    parser = argparse.ArgumentParser(prog=prog_for(ver))
    for flag in FLAGS:
        live = [(n, n.state(ver)) for n in flag.names]
        live = [(n, s) for n, s in live if s is not None]
        if not live:
            continue
        opts = [n.flag for n, _ in live]
        dep = {n.flag: n.use for n, s in live if s == "deprecated"}
        kw: dict[str, Any] = {"dest": flag.dest, "help": flag.help or None}
        if flag.kind == "bool":
            kw.update(action=_DepStoreTrue, default=bool(flag.default))
        else:
            kw.update(action=_DepStore, default=flag.default)
            if flag.kind == "int":
                kw["type"] = int
            elif flag.kind == "float":
                kw["type"] = float
            elif flag.kind == "ints":
                kw.update(type=int, nargs="+")
            elif flag.kind == "hint":
                kw["type"] = human_readable_int if ver >= flag.hint_since else int
            ch = flag.choices_at(ver)
            if ch:
                kw["choices"] = [int(c) for c in ch] if flag.kind == "int" else list(ch)
            if flag.required:
                kw["required"] = True
        kw["dep_aliases"] = dep
        parser.add_argument(*opts, **kw)
    return parser


def _expand_config(argv: list[str]) -> list[str]:
    """``--config file.yaml``: the YAML's options are merged into argv (CLI values win, as SGLang's ConfigArgumentMerger)."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    if i + 1 >= len(argv):
        return argv
    import yaml

    with open(argv[i + 1]) as fh:
        data = yaml.safe_load(fh) or {}
    extra: list[str] = []
    for key, val in data.items():
        opt = "--" + str(key).replace("_", "-")
        if isinstance(val, bool):
            if val:
                extra.append(opt)
        elif isinstance(val, list):
            extra += [opt, *map(str, val)]
        else:
            extra += [opt, str(val)]
    return extra + argv[:i] + argv[i + 2:]


def parse_args(argv: Sequence[str], version: str = DEFAULT_VERSION) -> argparse.Namespace:
    """Parse like SGLang's ``prepare_server_args``; argparse exits with code 2 on an error.

    The returned namespace has ``_deprecations`` (warning lines) and ``_version``.
    """
    args = build_parser(version).parse_args(_expand_config(list(argv)))
    args.__dict__.setdefault("_deprecations", [])
    args._version = version
    for flag in FLAGS:  # flags the version lacks still get their default so downstream code is uniform
        if not hasattr(args, flag.dest):
            setattr(args, flag.dest, bool(flag.default) if flag.kind == "bool" else flag.default)
    return args


# --- launch-time resolution and checks (sglang.md §1.2/§1.3) ----------------------------------------------------------
_A2A_FORCES_EP = ("deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori")


def resolve_args(args: argparse.Namespace, model: Any = None) -> list[str]:
    """Rewrite ``args`` in place the way SGLang's ``__post_init__`` handlers do; returns warning/info lines."""
    ver = parse_version(args._version)
    notes: list[str] = []
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.random_seed is None:
        import random

        args.random_seed = random.randint(0, 1 << 30)
    # 0.5.22+: --dp-size N --enable-dp-attention is rewritten to --attn-dp-size N with dp_size=1
    if ver >= V522 and args.enable_dp_attention and args.dp_size > 1:
        args.attn_dp_size, args.dp_size = args.dp_size, 1
    if ver >= V522:
        args.enable_dp_attention = args.attn_dp_size > 1
    elif args.dp_size == 1:
        args.enable_dp_attention = False
        args.enable_dp_lm_head = False
    if args.moe_a2a_backend in _A2A_FORCES_EP and args.ep_size != args.tp_size:
        args.ep_size = args.tp_size
        notes.append(f"EP size is adjusted to be the same as TP size ({args.tp_size}) for {args.moe_a2a_backend}.")
    if args.moe_a2a_backend == "deepep" and args.deepep_mode == "normal":
        args.disable_cuda_graph = True
        notes.append("Cuda graph is disabled because deepep_mode=`normal`")
    if args.cuda_graph_bs and args.cuda_graph_max_bs is None:
        args.cuda_graph_max_bs = max(args.cuda_graph_bs)
    if args.enable_torch_compile and args.enable_piecewise_cuda_graph:
        args.enable_piecewise_cuda_graph = False
        notes.append("Disable piecewise CUDA graph because piecewise_cuda_graph has conflict with torch compile")
    dsa = model is not None and getattr(model, "dsa", None) is not None
    if dsa and args.attention_backend is None:
        args.attention_backend = "dsa" if ver >= V523 else "nsa"
    if dsa and (args.dsa_prefill_backend or args.dsa_decode_backend) and args.kv_cache_dtype == "auto":
        notes.append("When specifying --dsa-prefill-backend or --dsa-decode-backend, you should also explicitly set "
                     "--kv-cache-dtype (e.g. 'fp8_e4m3' or 'bfloat16').")
    return notes


def _dp_attention_on(args: argparse.Namespace) -> bool:
    return bool(args.enable_dp_attention) or getattr(args, "attn_dp_size", 1) > 1


_CHECKS: list[Callable[[argparse.Namespace, Version, Any], None]] = []


def _check(fn: Callable[[argparse.Namespace, Version, Any], None]) -> Callable:
    _CHECKS.append(fn)
    return fn


@_check
def _tbo(args, ver, model):
    if not args.enable_two_batch_overlap:
        return
    if ver < V516:
        if args.moe_a2a_backend == "none":
            raise ValueError("When enabling two batch overlap, moe_a2a_backend cannot be 'none'.")
    elif args.moe_a2a_backend == "none" and not _dp_attention_on(args):
        need = "attention DP (--attn-dp-size)" if ver >= V522 else "--enable-dp-attention"
        raise ValueError("When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'), "
                         f"{need} is required (DeepSeek-V4 non-EP DP TBO path).")
    if ver >= V523 and args.moe_a2a_backend == "deepep_v2":
        raise ValueError("moe_a2a_backend='deepep_v2' has not implemented the TBO/SBO overlap hooks yet.")
    if ver >= V523 and args.moe_a2a_backend == "megamoe":
        raise ValueError("moe_a2a_backend='megamoe' has no two-batch / single-batch overlap decomposition.")


@_check
def _priority(args, ver, model):
    if args.enable_priority_scheduling and args.schedule_policy not in ("fcfs", "lof"):
        raise ValueError(f"The schedule policy {args.schedule_policy} is not supported with priority scheduling. "
                         "Please use 'fcfs' or 'lof'.")


@_check
def _conservativeness(args, ver, model):
    assert args.schedule_conservativeness >= 0, "schedule_conservativeness must be non-negative"


@_check
def _dp(args, ver, model):
    if _dp_attention_on(args):
        dp = args.attn_dp_size if ver >= V522 else args.dp_size
        assert args.tp_size % dp == 0, "tp_size must be divisible by dp_size"
    if args.enable_dp_lm_head and not _dp_attention_on(args):
        raise ValueError("--enable-dp-lm-head requires --enable-dp-attention")
    if args.dp_size > 1 and args.nnodes > 1 and not _dp_attention_on(args):
        raise ValueError("multi-node data parallel is not supported unless dp attention!")
    assert (args.tp_size * args.pp_size) % args.nnodes == 0, "tp_size must be divisible by number of nodes"


@_check
def _served_name(args, ver, model):
    assert ":" not in args.served_model_name, (
        "served_model_name cannot contain a colon (':') character. The colon is reserved for the 'model:adapter' "
        "syntax used in LoRA adapter selection.")


@_check
def _pp(args, ver, model):
    if args.pp_size > 1:
        if not args.disable_overlap_schedule:
            raise ValueError("Pipeline parallelism is not compatible with overlap schedule, "
                             "please add --disable-overlap-schedule.")
        if args.speculative_algorithm is not None:
            raise ValueError("Pipeline parallelism is not compatible with speculative decoding.")
        if args.enable_mixed_chunk:
            raise ValueError("Pipeline parallelism is not compatible with mixed chunked prefill.")
    if args.speculative_algorithm is not None and args.enable_mixed_chunk:
        raise ValueError("Speculative decoding is not compatible with mixed chunked prefill.")


@_check
def _chunk_page(args, ver, model):
    c, p = args.chunked_prefill_size, args.page_size
    if c is not None and c > 0 and p:
        assert c % p == 0, "chunked_prefill_size must be divisible by page_size"


@_check
def _moe(args, ver, model):
    q = args.quantization or (getattr(model, "quantization", None) if model is not None else None)
    if args.moe_runner_backend == "flashinfer_cutlass":
        assert q in ("modelopt_fp4", "modelopt_fp8", None), (
            f"Invalid quantization '{q}'. FlashInfer Cutlass MOE supports only: 'modelopt_fp4', 'modelopt_fp8', or "
            "bfloat16 (None).")
        assert args.ep_size in (1, args.tp_size), "The expert parallel size must be 1 or the same as the tensor parallel size"
    if args.moe_runner_backend == "flashinfer_trtllm":
        assert q in ("modelopt_fp4", "fp8", "modelopt_fp8", "compressed-tensors", None), (
            f"Invalid quantization '{q}'. FlashInfer TRTLLM MOE supports only: 'modelopt_fp4', 'fp8', "
            "'modelopt_fp8', 'compressed-tensors', or bfloat16 (None).")
    if args.moe_runner_backend == "cutlass" and q in ("fp8", "mxfp8"):
        assert args.ep_size == 1, "FP8 Cutlass MoE is only supported with ep_size == 1"
    if args.moe_a2a_backend == "flashinfer" and args.moe_runner_backend != "flashinfer_cutlass":
        raise AssertionError("Flashinfer MoE A2A is only supported with flashinfer_cutlass moe runner backend")
    if args.moe_a2a_backend == "mori" and args.chunked_prefill_size is not None and args.chunked_prefill_size > 4096:
        raise AssertionError("SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (4096) should be larger or equal to "
                             "chunked_prefill_size")


@_check
def _dsa(args, ver, model):
    if model is None or getattr(model, "dsa", None) is None:
        return
    assert args.kv_cache_dtype in ("auto", "bf16", "bfloat16", "fp8_e4m3"), (
        "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype")
    backends = {args.dsa_prefill_backend, args.dsa_decode_backend} - {None}
    if ver >= V523 and "triton" in backends:
        raise ValueError("The triton DSA backend is only supported on ROCm/HIP.")
    if "tilelang" in backends and args.kv_cache_dtype == "fp8_e4m3":
        if V520 <= ver < V523:
            raise ValueError("The tilelang DSA prefill/decode kernels only support an fp8_e4m3 KV cache on ROCm/HIP; "
                             "on CUDA they require a bfloat16 KV cache.")
        if ver >= V523 and backends != {"tilelang"}:
            raise ValueError("With an fp8_e4m3 KV cache on CUDA, the tilelang DSA backend must be used for both "
                             "--dsa-prefill-backend and --dsa-decode-backend.")


def check_server_args(args: argparse.Namespace, model: Any = None) -> None:
    """Run every registered launch-time check; raises ``ValueError``/``AssertionError`` with SGLang's message."""
    ver = parse_version(args._version)
    for fn in _CHECKS:
        fn(args, ver, model)


def cuda_graph_enabled(args: argparse.Namespace) -> bool:
    return not (args.disable_cuda_graph or args.disable_decode_cuda_graph
                or args.cuda_graph_backend_decode == "disabled")


def to_serving_config(args: argparse.Namespace):
    """The :class:`grid.twin.perf.ServingConfig` for resolved ``args``."""
    from grid.twin.perf import ServingConfig

    ver = parse_version(args._version)
    dp_attn = _dp_attention_on(args)
    dp = (args.attn_dp_size if dp_attn else args.dp_size) if ver >= V522 else args.dp_size
    chunk = args.chunked_prefill_size
    return ServingConfig(
        tp_size=args.tp_size, dp_size=dp, ep_size=args.ep_size,
        mem_fraction_static=args.mem_fraction_static, max_running_requests=args.max_running_requests,
        max_total_tokens=args.max_total_tokens, chunked_prefill_size=chunk, max_prefill_tokens=args.max_prefill_tokens,
        schedule_policy=args.schedule_policy, cuda_graph=cuda_graph_enabled(args),
        cuda_graph_max_bs=args.cuda_graph_max_bs, torch_compile=args.enable_torch_compile,
        torch_compile_max_bs=args.torch_compile_max_bs, two_batch_overlap=args.enable_two_batch_overlap,
        enable_dp_attention=dp_attn, moe_runner_backend=args.moe_runner_backend,
        moe_a2a_backend=args.moe_a2a_backend, attention_backend=args.attention_backend,
        dsa_prefill_backend=args.dsa_prefill_backend, dsa_decode_backend=args.dsa_decode_backend,
        kv_cache_dtype=args.kv_cache_dtype, disable_radix_cache=args.disable_radix_cache,
        context_length=args.context_length, stream_interval=args.stream_interval,
        decode_log_interval=args.decode_log_interval, page_size=args.page_size, version=args._version,
    )


def public_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerArgs fields in table order (no private keys)."""
    return {f.dest: getattr(args, f.dest, None) for f in FLAGS if f.dest != "config"}
