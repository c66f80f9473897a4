"""SGLang's ``launch_server`` command line, as each SGLang release has it: built from the catalog.

:func:`build_parser` turns the options the catalog extracted from a release's wheel (grid/releases/catalog,
``data/sglang-<release>.json``) into a plain ``argparse.ArgumentParser`` with the same option strings, dests,
actions, types, nargs, choices and defaults, so that the twin accepts exactly that release's options and argparse's
own behaviour is kept: unique prefixes are accepted (``--tp 8``), an unknown flag exits with code 2 and ``... error:
unrecognized arguments: ...``, and a removed alias that is the prefix of two newer flags (``--cuda-graph-max-bs`` on
0.5.20+) gives argparse's ``ambiguous option`` error. Options the catalog marks deprecated are accepted and leave a
warning line in ``args._deprecations``.

The twin's code reads the settings under one name each (:data:`CANONICAL`: ``dsa_prefill_backend`` whether the
release calls it ``nsa_prefill_backend`` or not); :func:`parse_args` fills those names in. Which options the twin's
performance model reads is :data:`MODELLED`; every other option is accepted with no effect in the twin
(:func:`effect`).

After parsing, :func:`check_server_args` applies the launch-time rules SGLang enforces (grid/releases/checks.py
``RULES``, the table grid checks before launch, plus the checks on options grid does not sweep), raising
``ValueError`` / ``AssertionError`` with SGLang's messages, and :func:`to_serving_config` builds the
:class:`~grid.twin.perf.ServingConfig` the performance model consumes.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Mapping
from typing import Any, Callable, Sequence

from grid.releases import catalog
from grid.twin import speculative
from grid.releases.checks import A2A_FORCES_EP
from grid.releases.flags import SETTINGS, parse_version, settings_from_args
from grid.versions import DEFAULT_RELEASE
from grid.releases.features import holds

DEFAULT_VERSION = DEFAULT_RELEASE
Version = tuple[int, int, int]



def _renamed_settings() -> dict[str, tuple[tuple[str, ...], Any]]:
    """grid's settings whose dest changed over the releases (grid/releases/flags.py ``Setting.dests``, read from the
    catalog) -> (their dests, newest first; the newest release's default)."""
    newest = catalog.release(parse_version(catalog.newest())).by_flag
    out: dict[str, tuple[tuple[str, ...], Any]] = {}
    for s in SETTINGS.values():
        if s.renamed:
            opt = newest.get(s.flag(parse_version(catalog.newest())))
            out[s.parsed_name] = (s.dests, None if opt is None else opt.default)
    return out


#: The twin's name for a field -> the dests SGLang releases used for it (first present wins), and the value when the
#: release has none of them. grid's renamed settings come from their one entry (``_renamed_settings``); the rows
#: written here are the fields grid does not sweep that the twin reads: ``cuda_graph_bs_decode`` (0.5.14+),
#: ``incremental_streaming_output`` (0.5.10+, ``stream_output`` until 0.5.19), and fields some releases lack.
CANONICAL: dict[str, tuple[tuple[str, ...], Any]] = {
    **_renamed_settings(),
    "attn_dp_size": (("attn_dp_size",), 1),
    "cuda_graph_bs": (("cuda_graph_bs", "cuda_graph_bs_decode"), None),
    "cuda_graph_backend_decode": (("cuda_graph_backend_decode",), "full"),
    "disable_decode_cuda_graph": (("disable_decode_cuda_graph",), False),
    "disable_cuda_graph": (("disable_cuda_graph",), False),
    "stream_output": (("stream_output", "incremental_streaming_output"), False),
    "stream_response_default_include_usage": (("stream_response_default_include_usage",), False),
    "enable_piecewise_cuda_graph": (("enable_piecewise_cuda_graph",), False),
    "enable_nan_detection": (("enable_nan_detection",), False),
    "enable_dp_attention": (("enable_dp_attention",), False),
    "enable_dp_lm_head": (("enable_dp_lm_head",), False),
    "deepep_mode": (("deepep_mode",), "auto"),
}

#: Options grid does not sweep that the twin's server, API or logs read (its address, model names, logging, parsers,
#: the checks on options SGLang enforces at launch).
READ_BY_THE_TWIN: frozenset[str] = frozenset({
    "model_path", "tokenizer_path", "served_model_name", "host", "port", "api_key", "skip_server_warmup",
    "log_level", "enable_cache_report", "tool_call_parser", "enable_mixed_chunk", "load_format",
})

#: The catalog dests the twin's performance model, scheduler, API or logs read: every dest of a setting whose entry
#: says the twin reads it (grid/releases/flags.py ``Setting.twin``), the fields above and :data:`CANONICAL`'s. Every
#: other option is accepted and has no effect in the twin.
MODELLED: frozenset[str] = frozenset({
    *READ_BY_THE_TWIN,
    *(d for s in SETTINGS.values() if s.twin is not None for d in s.dests),
    *(d for dests, _ in CANONICAL.values() for d in dests),
})


def effect(dest: str) -> str:
    """``"modelled"`` when the twin reads option ``dest``, else ``"accepted, no effect in the twin"``."""
    return "modelled" if dest in MODELLED else "accepted, no effect in the twin"


# --- argparse plumbing -----------------------------------------------------------------------------------------------
def _warn_deprecated(namespace: argparse.Namespace, option: str, use: str | None) -> None:
    lst = namespace.__dict__.setdefault("_deprecations", [])
    tail = f" Use '{use}' instead." if use else ""
    lst.append(f"'{option}' is deprecated and will be removed in a future release.{tail}")


class _DepStore(argparse._StoreAction):
    def __init__(self, *a: Any, use: str | None = None, deprecated: bool = False, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use, self.deprecated = use, deprecated

    def __call__(self, parser, namespace, values, option_string=None):
        if self.deprecated:
            _warn_deprecated(namespace, option_string, self.use)
        super().__call__(parser, namespace, values, option_string)


class _DepStoreTrue(argparse._StoreTrueAction):
    def __init__(self, *a: Any, use: str | None = None, deprecated: bool = False, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use, self.deprecated = use, deprecated

    def __call__(self, parser, namespace, values, option_string=None):
        if self.deprecated:
            _warn_deprecated(namespace, option_string, self.use)
        super().__call__(parser, namespace, values, option_string)


class _WarnOnly(argparse.Action):
    """SGLang's ``DeprecatedAction`` (nargs=0): accepted, prints a deprecation warning, sets nothing."""

    def __init__(self, *a: Any, use: str | None = None, deprecated: bool = True, **kw: Any) -> None:
        kw["nargs"] = 0
        super().__init__(*a, **kw)
        self.use = use

    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(namespace, option_string, self.use)


_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def human_readable_int(text: str) -> int:
    """The parser SGLang uses for token counts from 0.5.10 (catalog type ``human_readable_int``): ``128k``, ``1Mi``,
    ``4096``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT][iI]?)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid human-readable int: {text!r}")
    mult = _SUFFIX[m.group(2).lower()] if m.group(2) else 1
    return int(float(m.group(1)) * mult)


def _json_list(text: str) -> list:
    value = json.loads(text)
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"expected a JSON list: {text!r}")
    return value


def _nullable_str(text: str) -> str | None:
    return None if text.lower() in ("none", "null", "") else text


#: The catalog's type names -> callables. Any other name (a parser the twin does not reproduce) parses as ``str``.
TYPES: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str, "human_readable_int": human_readable_int, "loads": json.loads,
    "json_list_type": _json_list, "nullable_str": _nullable_str,
}


def prog_for(ver: Version) -> str:
    """argparse's prog: argv[0] of ``python -m sglang.launch_server`` in 0.5.9; ``sglang serve`` from 0.5.10
    (``prepare_server_args``, srt/server_args.py; grid/releases/features.py ``sglang_serve``)."""
    return "sglang serve" if holds("sglang_serve", ver) else "launch_server.py"


def _replacement(rel: catalog.Release, opt: catalog.Option) -> str | None:
    """For a deprecated alias, the non-deprecated option string with the same dest."""
    for other in rel.options:
        if other.dest == opt.dest and not other.deprecated and other is not opt:
            return other.flags[0]
    return None


def _add(parser: argparse.ArgumentParser, rel: catalog.Release, opt: catalog.Option) -> None:
    flags = list(opt.flags)
    kw: dict[str, Any] = {"dest": opt.dest}
    dep = {"deprecated": opt.deprecated, "use": _replacement(rel, opt) if opt.deprecated else None}
    if opt.action == "DeprecatedAction" or (opt.action.startswith("Deprecated") and opt.nargs == 0
                                            and not opt.action.endswith("StoreTrueAction")):
        parser.add_argument(*flags, action=_WarnOnly, default=opt.default, dest=opt.dest, use=dep["use"])
        return
    if opt.action in ("store_true", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction"):
        kw.update(action=_DepStoreTrue, default=opt.default, **dep)
    elif opt.action == "store_false":
        kw.update(action="store_false", default=opt.default)
    elif opt.action == "count":
        kw.update(action="count", default=opt.default)
    elif opt.action == "boolean_optional":
        flags = [f for f in flags if not f.startswith("--no-")]
        kw.update(action=argparse.BooleanOptionalAction, default=opt.default)
    else:  # store, append, DeprecatedAliasStoreAction and SGLang's custom store actions (LoRAPathAction ...)
        tp = TYPES.get(opt.type or "str", str)
        kw.update(type=tp, default=opt.default)
        if opt.action == "append":
            kw["action"] = "append"
        else:
            kw.update(action=_DepStore, **dep)
        if opt.nargs is not None:
            kw["nargs"] = opt.nargs
        if opt.choices is not None:
            kw["choices"] = list(opt.choices)
        if opt.required:
            kw["required"] = True
    parser.add_argument(*flags, **kw)


def build_parser(version: str = DEFAULT_VERSION) -> argparse.ArgumentParser:
    """The argparse parser of SGLang ``version`` (the catalog's nearest release not newer than it)."""
    ver = parse_version(version)
    rel = catalog.release(ver)
    parser = argparse.ArgumentParser(prog=prog_for(ver))
    for opt in rel.options:
        _add(parser, rel, opt)
    return parser


@functools.lru_cache(maxsize=64)
def _parser(version: str) -> argparse.ArgumentParser:
    """:func:`build_parser`, built once per version string (parsing does not change a parser; building one takes
    ~25 ms, which dominated ranking a large configuration space)."""
    return build_parser(version)


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

    The returned namespace has the release's dests, the twin's :data:`CANONICAL` names, ``_deprecations`` (warning
    lines) and ``_version``.
    """
    args = _parser(version).parse_args(_expand_config(list(argv)))
    args.__dict__.setdefault("_deprecations", [])
    args._version = version
    for name, (dests, default) in CANONICAL.items():
        present = [d for d in dests if d in args.__dict__]
        value = getattr(args, present[0]) if present else default
        setattr(args, name, default if value is None and default is not None else value)
    return args


def public_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerArgs fields: the release's dests in its order, then the twin's canonical names (``tp_size`` where
    0.5.9's argparse dest is ``tensor_parallel_size``: ServerArgs' field is ``tp_size``); no private keys."""
    rel = catalog.release(parse_version(args._version))
    out: dict[str, Any] = {}
    for opt in rel.options:
        if opt.dest != "config" and opt.dest not in out:
            out[opt.dest] = getattr(args, opt.dest, None)
    for name in CANONICAL:
        out.setdefault(name, getattr(args, name, None))
    return out


# --- launch-time resolution and checks (docs/sources.md#sglang-server-arguments-and-defaults) ---------------


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
    if holds("attn_dp_size_flag", ver) and args.enable_dp_attention and args.dp_size > 1:
        args.attn_dp_size, args.dp_size = args.dp_size, 1
    if holds("attn_dp_size_flag", ver):
        args.enable_dp_attention = args.attn_dp_size > 1
    elif args.dp_size == 1:
        args.enable_dp_attention = False
        args.enable_dp_lm_head = False
    if args.moe_a2a_backend in A2A_FORCES_EP and args.ep_size != args.tp_size:
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
    spec = {k: getattr(args, k) for k in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                                          "speculative_num_draft_tokens", "max_running_requests")}
    notes += speculative.resolve_launch(spec, getattr(model, "architecture", None))
    for k, v in spec.items():
        setattr(args, k, v)
    dsa = model is not None and getattr(model, "dsa", None) is not None
    if dsa and args.attention_backend is None:
        args.attention_backend = "dsa" if holds("dsa_attention_backend", ver) else "nsa"
    if dsa and (args.dsa_prefill_backend or args.dsa_decode_backend) and args.kv_cache_dtype == "auto":
        notes.append("When specifying --dsa-prefill-backend or --dsa-decode-backend, you should also explicitly set "
                     "--kv-cache-dtype (e.g. 'fp8_e4m3' or 'bfloat16').")
    return notes


def dp_attention_on(args: argparse.Namespace) -> bool:
    """Whether attention DP is on in a parsed, resolved command line (grid/releases/flags.py ``enable_dp_attention``,
    read on either side of 0.5.22's ``--attn-dp-size``)."""
    return bool(SETTINGS["enable_dp_attention"].value_in(args, parse_version(args._version)))


def check_server_args(args: argparse.Namespace, model: Any = None, hardware: Any = None) -> None:
    """SGLang's launch-time checks of ``args``: grid/releases/checks.py ``RULES`` of stage ``launch`` (and ``twin``,
    what the twin cannot represent), the table grid checks before launch, read over the parsed command line as grid's
    settings (grid/releases/flags.py ``settings_from_args``); the twin holds no launch fact of its own. Raises
    ``AssertionError`` where the catalog says SGLang's check is an assert, else ``ValueError``, with SGLang's message.
    ``hardware`` (a ``HardwareSpec``: the GPUs the twin plays) decides the rules with a hardware predicate (e.g.
    tilelang with an fp8 KV cache needs SM >= 89 from 0.5.22); None leaves only the rules that hold everywhere."""
    from grid.releases.checks import RULES

    ver = parse_version(args._version)
    settings = settings_from_args(args, ver)
    for rule in RULES:
        if rule.stage not in ("launch", "twin"):  # a kernel requirement: SGLang starts and dies later (failure row)
            continue
        why = rule.refuses(settings, ver, model, hardware)
        if why is not None:
            src = rule.source(ver)
            raise (AssertionError if src is not None and src["kind"] == "assert" else ValueError)(why)


def cuda_graph_enabled(args: argparse.Namespace) -> bool:
    return bool(SETTINGS["cuda_graph"].value_in(args, parse_version(args._version)))


#: The acceptance length of speculative decoding (tokens per verify iteration) is not a server flag but a property of
#: the draft head and the text: the twin takes it from this environment variable (grid/twin/speculative.py).
ENV_SPEC_ACCEPT_LENGTH = "GRID_TWIN_SPEC_ACCEPT_LENGTH"


def accept_length_from(env: Mapping[str, str]) -> float | None:
    """``GRID_TWIN_SPEC_ACCEPT_LENGTH`` from ``env`` as a float (None when unset). Raises ``ValueError`` naming the
    variable for a value that is not a number."""
    raw = env.get(ENV_SPEC_ACCEPT_LENGTH)
    if raw in (None, ""):
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{ENV_SPEC_ACCEPT_LENGTH} must be a number (tokens per verify iteration), not {raw!r}"
                         ) from None


def to_serving_config(args: argparse.Namespace, accept_length: float | None = None):
    """The :class:`grid.twin.perf.ServingConfig` for resolved ``args``: every setting whose entry says the
    performance model reads it (grid/releases/flags.py ``Setting.twin == "performance"``, the field of the same
    name), plus piecewise CUDA graphs, the release and ``accept_length``: speculative decoding's tokens per verify
    iteration (:func:`accept_length_from`)."""
    from grid.twin.perf import ServingConfig

    ver = parse_version(args._version)
    values = settings_from_args(args, ver)
    modelled = {name: values[name] for name, s in SETTINGS.items() if s.twin == "performance"}
    return ServingConfig(**modelled, piecewise_cuda_graph=bool(args.enable_piecewise_cuda_graph),
                         version=args._version, speculative_accept_length=accept_length)
