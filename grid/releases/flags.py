"""Server settings named by meaning, translated to SGLang command-line flags per SGLang release.

A sweep names settings (``dsa_decode_backend``, ``cuda_graph``, ``mem_fraction_static`` ...); this module is the one
place that knows which flag spells each setting in a given SGLang release. Which flags a release has, and which values
each accepts, is not written here: it is read from the catalog extracted from that release's wheel
(grid/releases/catalog, ``python -m grid.releases.catalog.generate``). What stays hand-written is the table
:data:`SETTINGS`, one entry per option: the flags that have spelled it over the releases, newest spelling first
(``--dsa-decode-backend`` / ``--nsa-decode-backend``), whether the twin reads it and whether it changes the
numerics. The twin's reading of a command line (grid/twin/cli.py), its list of modelled options and the accuracy
guard's :data:`NUMERIC_SETTINGS` are derived from the entries (docs/architecture.md "How to add"). A setting renders as the first of its flags the release
declares without deprecation, else the first it declares at all; a release that declares none of them gets the newest
spelling, which :func:`unknown_flags` then reports.

Two settings render specially, from what the catalog says the release has: ``cuda_graph=false`` is
``--cuda-graph-backend-{decode,prefill} disabled`` where those flags exist (0.5.14+) and ``--disable-cuda-graph``
before; ``enable_dp_attention`` with ``dp_size=N`` is ``--attn-dp-size N`` where that flag exists (0.5.22+) and
``--dp-size N --enable-dp-attention`` before. Versions between two catalogued releases take the older release's
entry; the combinations SGLang refuses at launch live in grid/releases/checks.py.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
import functools
from typing import Any, Callable, Literal

from grid.releases import catalog
from grid.releases.features import holds
from grid.versions import release_tuple

Version = tuple[int, ...]


#: ``"0.5.13.post1"`` -> ``(0, 5, 13)``: grid.versions.release_tuple, the one release parser, under the name the
#: release tables use. Raises ``ValueError`` naming the text when it is not a version with a major and a minor number.
parse_version = release_tuple


#: The releases the catalog covers (grid/releases/catalog/data); others are planned as the nearest.
OLDEST_KNOWN, NEWEST_KNOWN = catalog.oldest(), catalog.newest()


def catalog_note(version: str) -> str | None:
    """A note for the user when SGLang ``version`` lies outside the releases the catalog knows (None inside, and for
    a text that is not a version). Callers pass an SGLang release (grid.versions.ServerIdentity.sglang_version)."""
    try:
        v = parse_version(version)
    except ValueError:
        return None
    if v > parse_version(NEWEST_KNOWN) and v[:3] != parse_version(NEWEST_KNOWN):
        return (f"SGLang {version} is newer than the newest release grid's flag catalog knows ({NEWEST_KNOWN}): "
                f"flags and allowed values are planned as for {NEWEST_KNOWN}; a renamed flag shows up as a "
                "failed launch (python -m grid.releases.catalog.generate refreshes the catalog)")
    if v < parse_version(OLDEST_KNOWN):
        return (f"SGLang {version} is older than the oldest release grid's flag catalog knows ({OLDEST_KNOWN}): "
                f"flags are planned as for {OLDEST_KNOWN}")
    return None


def pick_flag(candidates: tuple[str, ...], version: Version) -> str:
    """The spelling of a setting in ``version``: the first candidate the release declares without deprecation, else
    the first it declares, else the newest spelling (``candidates[0]``)."""
    rel = catalog.release(version)
    declared = [f for f in candidates if f in rel.by_flag]
    fresh = [f for f in declared if not rel.by_flag[f].deprecated]
    return (fresh or declared or list(candidates))[0]


def _cuda_graph(value: Any, ver: Version) -> list[str]:
    if value:
        return []
    rel = catalog.release(ver)
    if "--cuda-graph-backend-decode" in rel.by_flag and "--cuda-graph-backend-prefill" in rel.by_flag:
        return ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    return ["--disable-cuda-graph"]


def _dp_attention(value: Any, ver: Version) -> list[str]:
    # Rendered together with dp_size by ``to_argv``; this entry only marks the setting as known.
    return []


def _read_cuda_graph(args: Any, ver: Version) -> bool:
    """Decode CUDA graphs are on unless a flag turned them off (``--disable-cuda-graph``, 0.5.14+'s
    ``--cuda-graph-backend-decode disabled`` or ``--disable-decode-cuda-graph``)."""
    return not (getattr(args, "disable_cuda_graph", False) or getattr(args, "disable_decode_cuda_graph", False)
                or getattr(args, "cuda_graph_backend_decode", None) == "disabled")


def _read_dp_attention(args: Any, ver: Version) -> bool:
    """Attention DP is on: ``enable_dp_attention`` (SGLang turns it off at dp_size 1), or an ``attn_dp_size`` > 1
    (0.5.22+)."""
    return bool(getattr(args, "enable_dp_attention", False)) or (getattr(args, "attn_dp_size", 1) or 1) > 1


def _read_dp_size(args: Any, ver: Version) -> int:
    """The data-parallel size grid's ``dp_size`` means: with attention DP on, 0.5.22+ keeps it in ``attn_dp_size``
    (and sets ``dp_size`` to 1)."""
    if _read_dp_attention(args, ver) and holds("attn_dp_size_flag", ver):
        return args.attn_dp_size
    return args.dp_size


#: Where the twin reads a setting (``Setting.twin``): ``"performance"``, the field of the same name of
#: grid/twin/perf.py ``ServingConfig`` (the performance model); ``"server"``, the twin's HTTP server, logs or launch
#: checks (``enable_metrics``, ``reasoning_parser``, ``quantization`` ...); None: accepted, no effect in the twin.
TwinUse = Literal["performance", "server"]


@dataclass(frozen=True)
class Setting:
    """One SGLang server option as grid knows it: the one entry from which the flags, the validation, the twin's
    reading of a parsed command line and the accuracy guard are derived (docs/architecture.md "How to add").

    ``name``: grid's name (``server.<name>`` in a sweep). ``type``, ``minimum``, ``maximum``: what a value may be.
    ``flags``: the flags that spelled it over the releases, newest first; its dests per release (:attr:`dests`) and
    its allowed values come from the catalog. ``switch``: a boolean rendered as the bare flag when true. ``render`` /
    ``read``: a special renderer to argv and its inverse over a parsed command line (``cuda_graph``,
    ``enable_dp_attention``, ``dp_size``); otherwise the value is the parsed field :attr:`parsed_name`. ``twin``: where the
    twin reads it (:data:`TwinUse`; None: accepted, no effect in the twin). ``numeric``: a different value may change
    the answers, not only the speed (the accuracy guard, grid/accuracy).
    """

    name: str
    type: type
    flags: tuple[str, ...]
    help: str
    switch: bool = False
    render: Callable[[Any, Version], list[str]] | None = None
    minimum: float | None = None
    maximum: float | None = None
    twin: TwinUse | None = None
    numeric: bool = False
    read: Callable[[Any, Version], Any] | None = None

    def flag(self, version: Version) -> str:
        return pick_flag(self.flags, version)

    @functools.cached_property
    def dests(self) -> tuple[str, ...]:
        """The argparse dests this setting's flags had over the catalogued releases, newest release first
        (``tp_size``, ``tensor_parallel_size`` for ``tp_size``: 0.5.9-0.5.13 called it the latter)."""
        out: list[str] = []
        for rel in sorted(catalog.releases(), key=parse_version, reverse=True):
            options = catalog.release(parse_version(rel)).by_flag
            for flag in self.flags:
                if flag in options and options[flag].dest not in out:
                    out.append(options[flag].dest)
        return tuple(out)

    @property
    def renamed(self) -> bool:
        """The releases spelled this one option with different dests (``tensor_parallel_size`` -> ``tp_size``).
        A specially rendered setting's flags are different options (``cuda_graph``), not renames."""
        return self.render is None and len(self.dests) > 1

    @property
    def parsed_name(self) -> str:
        """The field of a parsed command line that holds this setting: grid's name for a renamed one (the twin's CLI
        fills that name in from whichever dest the release has), else its one dest."""
        return self.name if self.renamed or not self.dests else self.dests[0]

    def value_in(self, args: Any, version: Version) -> Any:
        """This setting's value in a parsed (and resolved) command line ``args``: an object with SGLang's
        ServerArgs fields, the renamed ones under :attr:`parsed_name`."""
        if self.read is not None:
            return self.read(args, version)
        return getattr(args, self.parsed_name, None)

    def option(self, version: Version) -> catalog.Option | None:
        """The catalog option this setting sets in ``version`` (None: the release has no such flag)."""
        return catalog.release(version).by_flag.get(self.flag(version))

    def allowed(self, version: Version) -> tuple | None:
        """The values ``version``'s parser accepts (None: any value of the type)."""
        if self.type is bool:
            return None
        opt = self.option(version)
        return None if opt is None or opt.choices is None else tuple(opt.choices)

    def to_argv(self, value: Any, version: Version) -> list[str]:
        if self.render is not None:
            return self.render(value, version)
        if self.switch:
            return [self.flag(version)] if value else []
        return [self.flag(version), str(value)]


def _s(name: str, type_: type, flags: str | tuple[str, ...], help: str, **kw: Any) -> Setting:
    return Setting(name, type_, (flags,) if isinstance(flags, str) else flags, help,
                   switch=type_ is bool and "render" not in kw, **kw)


_PERF: dict[str, Any] = {"twin": "performance"}
_SERVER: dict[str, Any] = {"twin": "server"}


#: Settings by meaning -> the flags that spelled them over the releases, newest first (hand-written: the one thing
#: the wheels cannot say). Renames: --nsa-* -> --dsa-* in 0.5.13, --cuda-graph-max-bs -> --cuda-graph-max-bs-decode
#: in 0.5.14 (both visible in the catalog as deprecated aliases, then gone from 0.5.20).
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        _s("tp_size", int, "--tp-size", "tensor parallel size", minimum=1, **_PERF),
        _s("dp_size", int, "--dp-size", "data parallel size", minimum=1, read=_read_dp_size, **_PERF),
        _s("ep_size", int, "--ep-size", "expert parallel size", minimum=1, **_PERF),
        _s("enable_dp_attention", bool, "--enable-dp-attention", "attention data parallelism over dp_size groups",
           render=_dp_attention, read=_read_dp_attention, **_PERF),
        _s("mem_fraction_static", float, "--mem-fraction-static", "fraction of GPU memory for weights + KV cache",
           minimum=0.05, maximum=0.99, **_PERF),
        _s("max_running_requests", int, "--max-running-requests", "cap on running requests", minimum=1, **_PERF),
        _s("max_total_tokens", int, "--max-total-tokens", "KV pool size override", minimum=1, **_PERF),
        _s("chunked_prefill_size", int, "--chunked-prefill-size", "prefill chunk tokens (-1 = off)", minimum=-1,
           **_PERF),
        _s("max_prefill_tokens", int, "--max-prefill-tokens", "tokens per prefill batch", minimum=1, **_PERF),
        _s("context_length", int, "--context-length", "maximum context length", minimum=1, **_PERF),
        _s("page_size", int, "--page-size", "KV cache page size in tokens", minimum=1, **_PERF),
        _s("schedule_policy", str, "--schedule-policy", "request queue order", **_PERF),
        _s("enable_priority_scheduling", bool, "--enable-priority-scheduling",
           "schedule by request priority (needs schedule_policy fcfs or lof)", **_SERVER),
        _s("schedule_conservativeness", float, "--schedule-conservativeness", "admission conservativeness",
           minimum=0.0, **_PERF),
        _s("cuda_graph", bool, ("--cuda-graph-backend-decode", "--disable-cuda-graph"),
           "capture CUDA graphs for decode", render=_cuda_graph, read=_read_cuda_graph, **_PERF),
        _s("cuda_graph_max_bs", int, ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
           "largest decode batch captured in a CUDA graph", minimum=1, **_PERF),
        _s("torch_compile", bool, "--enable-torch-compile", "torch.compile the model", **_PERF),
        _s("torch_compile_max_bs", int, "--torch-compile-max-bs", "largest compiled batch", minimum=1, **_PERF),
        _s("two_batch_overlap", bool, "--enable-two-batch-overlap", "two micro-batch overlap", **_PERF),
        _s("single_batch_overlap", bool, "--enable-single-batch-overlap", "single-batch overlap"),
        _s("quantization", str, "--quantization", "weight quantization method (None: from the checkpoint)",
           numeric=True, **_SERVER),
        _s("moe_runner_backend", str, "--moe-runner-backend", "MoE kernel backend", numeric=True, **_PERF),
        _s("moe_a2a_backend", str, "--moe-a2a-backend", "MoE all-to-all backend", **_PERF),
        _s("attention_backend", str, "--attention-backend", "attention kernels", numeric=True, **_PERF),
        _s("prefill_attention_backend", str, "--prefill-attention-backend",
           "attention kernels for prefill (overrides attention_backend there)", numeric=True),
        _s("decode_attention_backend", str, "--decode-attention-backend",
           "attention kernels for decode (overrides attention_backend there)", numeric=True),
        _s("dsa_prefill_backend", str, ("--dsa-prefill-backend", "--nsa-prefill-backend"),
           "sparse-attention (NSA/DSA) prefill backend", numeric=True, **_PERF),
        _s("dsa_decode_backend", str, ("--dsa-decode-backend", "--nsa-decode-backend"),
           "sparse-attention (NSA/DSA) decode backend", numeric=True, **_PERF),
        _s("kv_cache_dtype", str, "--kv-cache-dtype", "KV cache storage dtype", numeric=True, **_PERF),
        _s("deepep_mode", str, "--deepep-mode", "DeepEP dispatch mode", **_SERVER),
        _s("disable_radix_cache", bool, "--disable-radix-cache", "turn off prefix caching", **_PERF),
        _s("enable_hierarchical_cache", bool, "--enable-hierarchical-cache",
           "keep evicted prefixes in host memory (HiCache)", **_SERVER),
        _s("hicache_ratio", float, "--hicache-ratio", "host cache size as a multiple of the device KV pool",
           minimum=1.0, **_SERVER),
        _s("enable_cache_report", bool, "--enable-cache-report",
           "report cached prompt tokens in the OpenAI API's usage", **_SERVER),
        _s("enable_metrics", bool, "--enable-metrics", "serve Prometheus /metrics", **_SERVER),
        _s("reasoning_parser", str, "--reasoning-parser", "split reasoning from content", **_SERVER),
        _s("trust_remote_code", bool, "--trust-remote-code", "allow custom model code"),
        _s("stream_interval", int, "--stream-interval", "decode steps per streamed chunk", minimum=1, **_PERF),
        _s("decode_log_interval", int, "--decode-log-interval", "decode steps per log line", minimum=1, **_PERF),
        _s("random_seed", int, "--random-seed", "sampling seed", **_SERVER),
        # pipeline parallelism and speculative decoding (the twin models them: grid/twin/pipeline.py, speculative.py)
        _s("pp_size", int, "--pp-size", "pipeline parallel size (stages of consecutive layers)", minimum=1, **_PERF),
        _s("disable_overlap_schedule", bool, "--disable-overlap-schedule",
           "turn off the overlap scheduler (required with pp_size > 1)", **_SERVER),
        _s("speculative_algorithm", str, "--speculative-algorithm", "speculative decoding: EAGLE, EAGLE3, NEXTN, ...",
           numeric=True, **_PERF),
        _s("speculative_num_steps", int, "--speculative-num-steps", "draft steps per verify", minimum=1,
           numeric=True, **_PERF),
        _s("speculative_eagle_topk", int, "--speculative-eagle-topk", "draft branching per step", minimum=1,
           numeric=True, **_PERF),
        _s("speculative_num_draft_tokens", int, "--speculative-num-draft-tokens", "tokens verified per iteration",
           minimum=1, numeric=True, **_PERF),
        _s("disaggregation_mode", str, "--disaggregation-mode", "prefill/decode disaggregation role (null = off)",
           **_SERVER),
        _s("disaggregation_transfer_backend", str, "--disaggregation-transfer-backend",
           "how KV moves from a prefill to a decode server (mooncake, nixl, fake: decode alone, no KV)", **_SERVER),
        _s("nnodes", int, "--nnodes", "nodes one server spans", minimum=1, **_PERF),
        _s("enable_dp_lm_head", bool, "--enable-dp-lm-head",
           "vocabulary-parallel LM head over the attention-DP group (needs DP attention)", **_SERVER),
        _s("enable_pd_role_switch", bool, "--enable-pd-role-switch",
           "a prefill or decode server may switch roles at run time (SGLang 0.5.21+)", **_SERVER),
        _s("enable_mixed_chunk", bool, "--enable-mixed-chunk",
           "mixed chunked prefill: a prefill chunk shares the batch with the running decodes", **_SERVER),
        _s("served_model_name", str, "--served-model-name",
           "the model name the server answers to (None: the model path)", **_SERVER),
    ]
}


#: Settings that change what the server computes, not only how fast (``Setting.numeric``): KV cache dtype, weight
#: quantization, attention / sparse-attention / MoE kernels, speculative decoding (SGLang server arguments,
#: docs/sources.md#sglang-server-arguments-and-defaults). The accuracy guard (grid/accuracy) reads it.
NUMERIC_SETTINGS: frozenset[str] = frozenset(s.name for s in SETTINGS.values() if s.numeric)

#: The settings that make up a speculative setting: the algorithm, then its counts (SGLang ``--speculative-*``).
SPECULATIVE_SETTINGS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                        "speculative_num_draft_tokens")
#: The running-request cap SGLang sets when speculative decoding is on and ``--max-running-requests`` is not given
#: (0.5.9 ``server_args.py`` ``_handle_speculative_decoding``; 0.5.23 ``arg_groups/speculative_hook.py``
#: ``_handle_eagle_family``; docs/sources.md#speculative-decoding).
SPECULATIVE_MAX_RUNNING_REQUESTS = 48


def is_speculative(settings: Any) -> bool:
    """Whether ``settings`` (grid's names -> values) turn speculative decoding on: ``speculative_algorithm`` set."""
    return settings.get("speculative_algorithm") not in (None, "", "none", "NONE")


def settings_from_args(args: Any, version: Version) -> dict[str, Any]:
    """Every setting's value in a parsed, resolved command line (grid's names -> values; :meth:`Setting.value_in`).
    The twin's launch checks and performance model read the command line through this one reading."""
    return {name: s.value_in(args, version) for name, s in SETTINGS.items()}


#: Settings whose release default is not their option's ``default``: ``cuda_graph`` is on unless a flag disables it
#: (SGLang's ``--disable-cuda-graph`` defaults to False; 0.5.20+'s ``--cuda-graph-backend-decode`` defaults to None,
#: a backend SGLang picks; sglang python/sglang/srt/server_args.py).
_DEFAULTS: dict[str, Any] = {"cuda_graph": True}


def release_default(name: str, version: Version) -> Any:
    """The value SGLang ``version`` uses for setting ``name`` when it is not given: its option's default in the
    release's catalog (None: SGLang picks at start-up, for the model and hardware, or the release has no such flag).
    Raises ``KeyError`` for a setting grid does not know."""
    setting = SETTINGS[name]
    if name in _DEFAULTS:
        return _DEFAULTS[name]
    opt = setting.option(version)
    if opt is None:
        return None
    return bool(opt.default) if setting.switch else opt.default


class SettingError(ValueError):
    """A server setting is unknown, of the wrong type, or outside the values the SGLang version accepts."""


def check_setting(name: str, value: Any, version: Version) -> Any:
    """Validate one setting for ``version``; return the value coerced to the setting's type.

    Raises ``SettingError`` naming the key and, for choice settings, the allowed values.
    """
    setting = SETTINGS.get(name)
    if setting is None:
        close = difflib.get_close_matches(name, list(SETTINGS), n=1)
        hint = f"; did you mean server.{close[0]}?" if close else ""
        raise SettingError(f"server.{name}: unknown setting{hint}; allowed settings: {', '.join(sorted(SETTINGS))}")
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
    """Render settings (None values are left to SGLang's defaults) as an argument list, in :data:`SETTINGS` order.

    Settings must already have passed ``check_setting``. ``enable_dp_attention`` renders with ``dp_size``:
    ``--attn-dp-size N`` where the release declares that flag (0.5.22+), ``--dp-size N --enable-dp-attention`` before.
    """
    argv: list[str] = []
    dp_attention = bool(settings.get("enable_dp_attention"))
    attn_dp = "--attn-dp-size" in catalog.release(version).by_flag
    for name, setting in SETTINGS.items():
        value = settings.get(name)
        if value is None:
            continue
        if name == "dp_size" and dp_attention:
            argv += ["--attn-dp-size", str(value)] if attn_dp else ["--dp-size", str(value), "--enable-dp-attention"]
            continue
        if isinstance(value, float):
            value = repr(value)
        argv += setting.to_argv(value, version)
    return argv


def unknown_flags(argv: list[str], version: Version) -> list[str]:
    """The flags of ``argv`` that SGLang ``version``'s parser does not declare (argparse would exit with code 2)."""
    declared = catalog.release(version).by_flag
    return [a for a in argv if a.startswith("--") and a.split("=", 1)[0] not in declared]


def deprecated_flags(argv: list[str], version: Version) -> list[str]:
    """The flags of ``argv`` that ``version`` accepts only with a deprecation warning (the catalog's marker)."""
    declared = catalog.release(version).by_flag
    return [a for a in argv if a.startswith("--") and a.split("=", 1)[0] in declared
            and declared[a.split("=", 1)[0]].deprecated]


@dataclass(frozen=True)
class FlagDoc:
    name: str
    help: str
    choices: tuple | None = field(default=None)


def describe(version: Version) -> list[FlagDoc]:
    """What each setting means and accepts for ``version`` (for error messages and docs)."""
    return [FlagDoc(s.name, s.help, s.allowed(version)) for s in SETTINGS.values()]
