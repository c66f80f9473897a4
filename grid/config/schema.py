"""The run's typed, validated configuration, built once at the entry point from the composed Hydra config.

``parse_run_spec(plain_dict)`` turns the resolved config (``OmegaConf.to_container(cfg, resolve=True)``) into a
frozen ``RunSpec``; ``check_settings``, ``check_dataset_api`` and ``check_writable`` check it against SGLang's
releases, the load generator and the file system. grid.compose ``load_run_spec`` runs them all, with the checks
against the objectives, searches and engines that register above this package. Every error names the key and,
where there is a closed set, the allowed values; it is raised before any server launches. Nothing here imports
omegaconf or Ray, nor any grid package but grid.releases and grid.loadgen.
"""

from __future__ import annotations

import difflib
import math
import os
import typing
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from grid.config.specs import HardwareSpec, ModelSpec
from grid.releases.flags import SettingError, check_setting, parse_version
from grid.versions import DEFAULT_RELEASE


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and the allowed values."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: Paths users paste after a server's address: the OpenAI SDK's base URL (``/v1``) and the endpoints themselves. The
#: address grid keeps is the server's root; grid adds the endpoint of ``engine.api`` itself.
_API_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/generate", "/health_generate", "/health",
              "/v1")


def server_address(text: str) -> str:
    """``engine.base_url`` as users type it, read as the server's root ``http(s)://HOST[:PORT][/PREFIX]``:
    ``localhost:8000`` gains ``http://``; a trailing ``/``, the OpenAI SDK's ``/v1`` and an endpoint path
    (``/v1/chat/completions``, ``/generate``, ...) are dropped; a gateway's other path prefix is kept. Raises
    ``ValueError`` naming the key for another scheme, no host, a query or a fragment. Pure."""
    from urllib.parse import urlsplit

    raw = text.strip()
    if "://" not in raw:
        raw = "http://" + raw
    url = urlsplit(raw)
    if url.scheme not in ("http", "https"):
        raise ValueError(f"engine.base_url={text!r}: the scheme must be http or https (http://HOST:PORT)")
    if not url.hostname:
        raise ValueError(f"engine.base_url={text!r}: no host; expected http://HOST:PORT")
    if url.query or url.fragment:
        raise ValueError(f"engine.base_url={text!r}: a server address has no query or fragment; expected "
                         "http://HOST:PORT")
    try:
        _ = url.port  # urlsplit checks the port only when asked
    except ValueError:
        raise ValueError(f"engine.base_url={text!r}: the port is not a number; expected http://HOST:PORT") from None
    path = url.path.rstrip("/")
    for suffix in _API_PATHS:
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
            break
    return f"{url.scheme}://{url.netloc}{path}"


class EngineSpec(_Spec):
    """Which server to launch. ``sim`` is the embedded SGLang twin; ``sglang`` the real server on GPU nodes;
    ``openai`` a server already running. ``kind`` names a registered engine (grid/engines: each module registers its
    kind); the entry point checks it against the registry and names the allowed kinds."""

    kind: str = "sim"
    base_url: str | None = Field(None, description="openai only: http://HOST:PORT of a server that is already up")
    version: str | None = Field(None, description="SGLang version to plan for; None: installed (sglang) or 0.5.9")
    time_scale: float = Field(
        1.0, gt=0, description="twin with clock=real only: modelled seconds per real second while serving (1: the "
                               "wall clock itself); the host's load moves the wall-clock twin's numbers, so it is "
                               "for what needs real time (pacing, socket timeouts), not for measurements")
    startup_time_scale: float | None = Field(
        None, gt=0, description="twin only: the same until the server is ready (None: time_scale)")
    clock: Literal["real", "virtual"] = Field(
        "virtual", description="twin only: 'real': the modelled clock is the wall clock x time_scale; 'virtual': once "
                            "ready, the twin's clock moves only with its scheduler and every request and event carries "
                            "its modelled time, so a load point's metrics depend on the configuration, load and seed, "
                            "not on the host (grid/loadgen/vclock.py: closed and open loops, capped or not, "
                            "traces and sessions; the client's timeouts are played in modelled seconds)")
    python: str = Field("python", description="sglang only: interpreter that has sglang installed")
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="0: pick a free port per launch")
    api: Literal["generate", "completions", "chat"] = "generate"
    api_key: str | None = None
    startup_timeout_s: float = Field(1200.0, gt=0, description="modelled seconds from launch to ready")
    stop_grace_s: float = Field(15.0, gt=0, description="SIGTERM to SIGKILL, real seconds")
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        return None if v is None else server_address(v)

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None:
            parse_version(v)
        return v


#: The percentile the load defaults are sized for when no SLO names another: SLOSpec's default, and the p99 columns
#: the report judges tails by.
DEFAULT_TAIL_PERCENTILE = 99.0


def requests_for_tail(percentile: float) -> int:
    """The fewest completed requests ``n`` whose ``percentile`` (in (0, 100]) does not rest on the largest value.

    grid's percentiles are ``numpy.percentile``'s linear interpolation (grid/metrics/loadpoint.py): over ``n`` sorted
    values the p-th sits at rank ``(n - 1) * p / 100`` and is interpolated between the values at the ranks either side.
    It leaves the maximum (rank ``n - 1``) out once that rank is at most ``n - 2``, i.e. ``(n - 1) * (100 - p) >= 100``:
    ``n = 1 + ceil(100 / (100 - p))``: 101 for p99, 21 for p95, 11 for p90, 3 for the median. With fewer, one slow
    request sets the tail ("p99 is about the maximum"), and an SLO at p99 (at least 99 % of requests meet it) tolerates
    no miss at all. p100 is the maximum by definition: 1. Pure; raises ``ValueError`` outside (0, 100]."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    if percentile == 100:
        return 1
    return 1 + math.ceil(100 / (100 - percentile) - 1e-9)  # 1e-9: 100 - 99.9 is 0.0999...94 in binary


class SessionsSpec(_Spec):
    """Generated multi-turn conversations (``load.dataset=sessions`` without a file): ``turns`` per conversation,
    ``think_time_s`` (modelled seconds) between an answer and the next message; each new message is
    ``load.input_len`` tokens and each answer ``load.output_len``. ``num_sessions``: conversations per load point
    (None: enough that every user plays at least one whole conversation, and the point has its usual request count)."""

    turns: int = Field(4, ge=1, le=1000)
    think_time_s: float = Field(0.0, ge=0, description="modelled seconds between an answer and the next message")
    num_sessions: int | None = Field(None, ge=1, description="conversations per load point (null: as many as the "
                                     "point's requests need, at least one per user)")


class LoadSpec(_Spec):
    """Load points run against every working configuration (one server launch serves them all)."""

    # a level may be listed twice (each load point is its own row, by index): e.g. to see run-to-run spread
    concurrency: list[int] = Field(default_factory=lambda: [1, 8, 32, 64])
    request_rate: list[float] = Field(default_factory=list, description="open-loop req/s (modelled time)")
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = Field(1.0, gt=0)
    num_prompts: int | None = Field(None, ge=1, description="per load point; None: prompts_per_stream x level")
    prompts_per_stream: int = Field(2, ge=1)
    min_prompts: int = Field(
        default_factory=lambda: requests_for_tail(DEFAULT_TAIL_PERCENTILE), ge=1,
        description="per load point at least this many requests; null: enough that a point's p99 is not its slowest "
                    "request (requests_for_tail(99) = 101). Not taken from objective.slo.percentile: the load is part "
                    "of a configuration's hash, and a run re-judged under another objective keeps its measurements")
    input_len: int = Field(256, ge=1)
    output_len: int = Field(256, ge=1)
    range_ratio: float = Field(1.0, ge=0, le=1, description="lengths uniform in [L*ratio, L]; 1.0 fixed")
    dataset: str = Field("random", description="prompt source, by kind: grid/loadgen/dataset.py DATASETS")
    dataset_path: str | None = Field(None, description="sharegpt: a ShareGPT JSON file; trace: a JSONL arrival trace")
    trace_speed: list[float] = Field(default_factory=lambda: [1.0],
                                     description="dataset=trace: one open-loop point per speed (1.0: as recorded)")
    max_concurrency: int | None = Field(None, ge=1, description="open-loop points: cap on requests in flight")
    sessions: SessionsSpec = Field(default_factory=SessionsSpec, description="dataset=sessions: generated "
                                   "conversations (turns, think_time_s, num_sessions)")
    tokenizer: str | None = Field(
        None, description="tokenizer (local directory or HF id, loaded with transformers.AutoTokenizer) the prompts "
                          "are built with; None: an external server's own (the path /v1/models reports), else none; "
                          "'none': never load one")
    seed: int = 1
    warmup_requests: int = Field(1, ge=0)
    closed_loop_start: Literal["staggered", "together"] = Field(
        "staggered", description="staggered: steady state: a warm-up wave whose output lengths spread the streams' "
        "phases over one request time, tail requests keep the load on until the measured ones end, tokens counted by "
        "arrival inside that window (grid/loadgen/runner.py, grid/metrics/loadpoint.py); together: all workers at once, "
        "requests counted whole from the first send to the last end (SGLang's bench_serving)")
    repeats: int = Field(1, ge=1, le=50, description="measure every load point this many times (rows by "
                         "repeat_index); >= 2 measures the spread the report decides ties by")
    read_timeout_s: float = Field(600.0, gt=0, description="per request, modelled seconds")
    stall_timeout_s: float | None = Field(120.0, gt=0, description="no token for this long: request fails")

    @field_validator("min_prompts", mode="before")
    @classmethod
    def _tail_default(cls, v: Any) -> Any:
        return requests_for_tail(DEFAULT_TAIL_PERCENTILE) if v is None else v

    @field_validator("concurrency", "request_rate", "trace_speed")
    @classmethod
    def _distinct(cls, v: list) -> list:
        """A level listed twice would be two points at one level, each repeat_index 0, read as one level measured
        twice; measuring a level again is what ``load.repeats`` is for."""
        twice = sorted({x for x in v if v.count(x) > 1})
        if twice:
            raise ValueError(f"{', '.join(map(str, twice))} listed more than once in {v}; to measure a level again "
                             "set load.repeats")
        return v

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError(f"every concurrency level must be an integer >= 1, got {v}")
        return v

    @field_validator("request_rate")
    @classmethod
    def _positive_rate(cls, v: list[float]) -> list[float]:
        if any(not r > 0 for r in v):  # also refuses NaN
            raise ValueError(f"every request rate must be > 0 req/s (inf: all at once), got {v}")
        return v

    @field_validator("trace_speed")
    @classmethod
    def _positive_speed(cls, v: list[float]) -> list[float]:
        if any(not (s > 0 and s != float("inf")) for s in v):
            raise ValueError(f"every trace speed must be a finite number > 0 (1.0: as recorded), got {v}")
        return v

    @model_validator(mode="after")
    def _some_points(self) -> LoadSpec:
        from grid.loadgen.dataset import DATASETS, check_dataset

        check_dataset(self.dataset, self.dataset_path)  # names load.dataset / load.dataset_path
        if not self.concurrency and not self.request_rate and not self.trace_points:
            raise ValueError("no load points: set load.concurrency and/or load.request_rate"
                             + (" and/or load.trace_speed" if DATASETS[self.dataset].arrivals else ""))
        if DATASETS[self.dataset].sessions and self.request_rate:
            raise ValueError(f"load.request_rate: load.dataset={self.dataset} replays conversations turn by turn, "
                             "each user sending its next turn after the answer (a closed loop): set load.concurrency "
                             "(users) and drop load.request_rate")
        if self.max_concurrency is not None and not self.request_rate and not self.trace_points:
            raise ValueError("load.max_concurrency: caps open-loop points (load.request_rate, or trace points of "
                             "load.dataset=trace); there are none (closed-loop points have load.concurrency)")
        return self

    @property
    def trace_points(self) -> list[float]:
        """Replay speeds of the trace load points (none unless the dataset records arrivals)."""
        from grid.loadgen.dataset import DATASETS

        return list(self.trace_speed) if DATASETS[self.dataset].arrivals else []

    @property
    def steady(self) -> bool:
        """Closed-loop points run in steady state (``closed_loop_start=staggered``); never for sessions, whose users
        follow their conversations."""
        from grid.loadgen.dataset import DATASETS

        return self.closed_loop_start == "staggered" and not DATASETS[self.dataset].sessions

    def prompts_for(self, level: float) -> int:
        """Requests of the load point at ``level`` (streams, or req/s): ``num_prompts`` when set, else
        ``prompts_per_stream`` x the level, at least ``min_prompts``; an infinite rate (all at once) is a burst of
        ``min_prompts``. Sessions: ``sessions.num_sessions`` whole conversations when set, else whole conversations
        enough for that count and one per user (``level`` of them)."""
        from grid.loadgen.dataset import DATASETS

        if DATASETS[self.dataset].sessions and self.dataset_path is None:
            turns = self.sessions.turns
            if self.sessions.num_sessions is not None:
                return self.sessions.num_sessions * turns
            n = self.num_prompts or max(self.min_prompts, int(round(self.prompts_per_stream * level)))
            return max(-(-n // turns), int(level)) * turns
        if self.num_prompts is not None:
            return self.num_prompts
        if not math.isfinite(level):
            return self.min_prompts
        return max(self.min_prompts, int(round(self.prompts_per_stream * level)))



class SLOSpec(_Spec):
    """Latency targets at ``percentile`` (modelled ms); None means no target."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)
    percentile: float = Field(99.0, gt=0, le=100)


class ObjectiveSpec(_Spec):
    """What "best" means: a registered objective kind (see grid.report.select.OBJECTIVES) under SLOs."""

    kind: str = "max_output_throughput"
    slo: SLOSpec = Field(default_factory=SLOSpec)
    capacity_rel_tol: float = Field(0.05, gt=0, le=1, description="max_capacity: the bisection over the request rate "
                                    "stops when its bracket is within this fraction of its lower end")
    capacity_max_probes: int = Field(10, ge=2, description="max_capacity: probes (load points) per configuration at "
                                     "most")
    host_noise_max_pct: float = Field(20.0, gt=0, description="a load point on which the load generator's event loop "
                                      "ran late (against a server that keeps real time; never on the twin's virtual "
                                      "clock) by more than this share of its real time (%) is host noise: not counted, measured again on resume "
                                      "(default: grid.metrics.hostnoise.HOST_NOISE_MAX_PCT); each point records the "
                                      "bound it was judged by. Raise it only where the numbers do not matter (a "
                                      "pipeline check on a busy machine): the report names the points it let count")


class AccuracySpec(_Spec):
    """The accuracy guard (grid/accuracy): greedy exact-match prompts, run on every configuration of a sweep that
    varies a setting changing the numerics (grid.accuracy.NUMERIC_SETTINGS)."""

    enabled: bool = True
    max_drop: float = Field(0.1, ge=0, le=1, description="a configuration whose exact-match share is below the "
                            "baseline's by more than this (fraction, 0.1 = 2 of 20 prompts) cannot win")
    max_new_tokens: int = Field(16, ge=1, description="tokens per answer")


class RoleGroupSpec(_Spec):
    """``count`` servers of one ``role`` in a deployment, each ``tp`` GPUs with ``attn_dp`` attention data-parallel
    groups and expert parallelism ``ep`` (grid/topology/deployment.py ``ServerShape``), and this role's own
    ``settings`` over the configuration's."""

    role: Literal["aggregated", "prefill", "decode"]
    count: int = Field(1, ge=1)
    tp: int = Field(1, ge=1, description="--tp-size")
    attn_dp: int = Field(1, ge=1, description="attention data-parallel groups (--attn-dp-size; --dp-size with "
                                              "--enable-dp-attention before 0.5.22)")
    ep: int = Field(1, ge=1, description="--ep-size")
    settings: dict[str, Any] = Field(default_factory=dict, description="this role's settings over the "
                                                                       "configuration's (grid's names)")


class DeploymentSpec(_Spec):
    """One deployment a sweep tries: aggregated replicas, or prefill and decode servers (xPyD), behind SGLang's
    router (docs/topology.md)."""

    label: str | None = Field(None, description="its name in labels; None: 2x TP8, 1P2D P:TP8 D:TP8 DP8 EP8, ...")
    groups: list[RoleGroupSpec]
    router_policy: Literal["round_robin", "random", "power_of_two", "cache_aware"] | None = Field(
        None, description="sglang_router --policy; needed with more than one server")


class SweepSpec(_Spec):
    """The search space: the cartesian product of ``grid`` plus any explicit ``configs`` (overrides of the base)."""

    name: str
    description: str = ""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    configs: list[dict[str, Any]] = Field(default_factory=list)
    base: dict[str, Any] = Field(default_factory=dict, description="settings fixed for this sweep")
    load: dict[str, Any] = Field(default_factory=dict,
                                 description="load settings for this sweep, over the run's load (configs[].load over it)")
    deployments: list[DeploymentSpec] = Field(
        default_factory=list, description="deployments each configuration is tried in (several servers behind a "
                                          "router; empty: one server per configuration)")

    @field_validator("grid")
    @classmethod
    def _lists(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"sweep.grid.{key}: expected a non-empty list of values, got {values!r}")
        return v


class ProbeSpec(_Spec):
    """The correctness probe (grid/server/probe.py) run once per launch before any load."""

    enabled: bool = Field(True, description="false: skip it (e.g. a random-weight model, whose answers are "
                                            "garbage by construction); recorded as probe_status 'skipped'")


class RerunSpec(_Spec):
    """Recorded configurations to run again (any selector matches); their earlier files are kept, set aside in the
    run directory (grid/sweep/rerun.py). Each list is checked against the allowed values before anything launches."""

    status: list[str] = Field(default_factory=list, description="trial statuses: ok | failed | invalid | skipped")
    error_class: list[str] = Field(default_factory=list,
                                   description="trial error classes, e.g. nan_output, startup_timeout (docs/schema.md)")
    label: list[str] = Field(default_factory=list, description="glob patterns over labels, e.g. 'prefill=trtllm *'")
    config_hash: list[str] = Field(default_factory=list, description="config hashes or prefixes (4+ hex digits)")

    @property
    def any(self) -> bool:
        return bool(self.status or self.error_class or self.label or self.config_hash)


class RaySpec(_Spec):
    address: str | None = Field(None, description="None: start a local cluster; 'auto': join a running one")
    dashboard: bool = True
    dashboard_port: int = 8265
    num_cpus: int | None = None
    any_hardware: bool = Field(False, description="run on every grid_node node, whatever hardware it declares "
                                                  "(grid_hw:<name> resource); false: only on nodes of `hardware`")


class SearchSpec(_Spec):
    """How the configurations of the sweep are chosen (grid/search/, registered by ``kind``; docs/search.md):
    ``exhaustive`` runs every one, ``twin_guided`` ranks them on the twin, learns the twin's error per flag value from
    what it measures and stops when nothing left is likely to win, ``twin_ranked`` measures in forecast order,
    ``optuna`` runs Optuna's TPE. Refused configurations are never launched and never count against a budget."""

    kind: str = "exhaustive"
    max_launches: int | None = Field(None, ge=1, description="launches at most (refusals are not launches)")
    max_gpu_hours: float | None = Field(None, gt=0, description="modelled GPU-hours at most (startup + load, all GPUs)")
    max_gpu_fraction: float | None = Field(None, gt=0, le=1, description="modelled GPU-seconds at most, as a share of "
                                           "what launching every configuration not refused would take (exhaustive)")
    try_known_failures: bool = Field(False, description="run configurations the failure table says fail here first, "
                                                        "not last (and not skip them when a budget runs out)")
    twin_error: float = Field(0.077, ge=0, description="relative error of the twin's score (twin_guided, twin_ranked); default: "
                              "held-out output tok/s geometric-mean error, docs/twin.md")
    spread: float = Field(0.01, ge=0, description="relative run-to-run spread of a measured score (twin_guided, twin_ranked); "
                          "default: grid.report.select.TIE_PERCENT")
    tolerance: float = Field(0.03, ge=0, description="twin_guided stops when no configuration left is likely to beat "
                             "the best measured score by more than this (relative)")
    risk: float = Field(0.1, gt=0, lt=1, description="twin_guided stops when the probability that one does is below "
                        "this (grid/search/residuals.py p_any_beats)")
    seed: int = Field(0, description="seed of a model-based search's sampler (optuna) and of twin_guided's draws")
    early_stop: bool = Field(True, description="skip a configuration's higher load levels once a lower level missed "
                             "the SLOs, or where the twin's upper bound is below the best measured score "
                             "(grid/search/levels.py); false: measure every level")
    twin_bound_error: float = Field(0.25, ge=0, lt=1, description="the twin's largest relative error below a "
                                    "measurement, (twin - measured) / measured >= -this: its upper bound is forecast / "
                                    "(1 - this); default: beyond every output tok/s row of docs/twin.md, the lowest "
                                    "being -19.6% (held out, sglang PR #10404, Qwen3-Next TP2)")


class TwinSpec(_Spec):
    """The twin calibrated on the sweep's own measurements (grid/twin/coefficients.py, docs/twin.md "Calibration from
    measured trials"): after each measured configuration grid refits a few coefficients of the twin's model to the
    load points measured so far, writes them to ``calibration.json`` and re-forecasts the configurations not yet
    run. Only engines the twin forecasts (``sim``, ``sglang``)."""

    calibrate: bool = Field(True, description="refit the twin on the measured load points after each measured "
                            "configuration; false: the spec-sheet twin throughout")
    calibration: str | None = Field(None, description="a calibration.json (or the run directory holding one) of an "
                                    "earlier sweep on the same hardware, model, engine and release: the starting "
                                    "point of this sweep's forecasts and calibration")


class RunSpec(_Spec):
    name: str
    run_dir: str
    engine: EngineSpec
    model: ModelSpec
    hardware: HardwareSpec
    server: dict[str, Any] = Field(default_factory=dict, description="base server settings, by meaning")
    load: LoadSpec = Field(default_factory=LoadSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    accuracy: AccuracySpec = Field(default_factory=AccuracySpec)
    sweep: SweepSpec | None = None
    search: SearchSpec = Field(default_factory=SearchSpec)
    twin: TwinSpec = Field(default_factory=TwinSpec)
    experiment: dict[str, Any] | None = None
    ray: RaySpec = Field(default_factory=RaySpec)
    dry_run: bool = False
    fresh: bool = False
    retry_failed: bool = False
    rerun: RerunSpec = Field(default_factory=RerunSpec)

    @property
    def version(self) -> str:
        return self.engine.version or DEFAULT_RELEASE


def _sibling_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a config section at ``loc`` (a pydantic error location below ``model``) accepts; [] when ``loc`` does
    not lead to a typed section (a free-form dict such as ``server``)."""
    for part in loc:
        if isinstance(part, int):  # an item of a list: its type was unwrapped below
            continue
        field = model.model_fields.get(str(part)) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return []
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        candidates += [a for c in candidates for a in typing.get_args(c)]
        inner = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if inner is None:
            return []
        model = inner
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _format_validation(err: ValidationError, model: type[BaseModel] | None = None, prefix: str = "") -> str:
    """One line per error of ``err``, each key written from ``prefix`` (``sweep.load`` for a sweep's load block); an
    unknown key gets the closest key valid at its place in ``model`` (the model that was validated: RunSpec unless
    given, LoadSpec for a load block)."""
    model = model or RunSpec
    lines = []
    for e in err.errors():
        key = ".".join([prefix, *map(str, e["loc"])] if prefix else map(str, e["loc"]))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
            siblings = _sibling_keys(model, e["loc"][:-1])
            close = difflib.get_close_matches(str(e["loc"][-1]), siblings, n=1)
            parent = ".".join([*([prefix] if prefix else []), *map(str, e["loc"][:-1])])
            if close:
                msg += f"; did you mean {parent + '.' if parent else ''}{close[0]}?"
            if siblings:
                msg += f" (keys of {parent or 'the config'}: {', '.join(sorted(siblings))})"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif e["type"] == "list_type" and isinstance(e.get("input"), (int, float, str)):
            msg = f"expected a list, got {e['input']!r}: write {key}=[{e['input']}]"
        elif e["type"] == "literal_error":
            msg = f"{msg} (got {e.get('input')!r})"
        lines.append(msg if msg.startswith(f"{key}.") else f"{key}: {msg}")  # a message that names its own key
    return "; ".join(lines)


def parse_run_spec(cfg: dict[str, Any]) -> RunSpec:
    """The RunSpec of the resolved config dict, checked field by field (types, ranges, unknown keys with the closest
    known one). Raises ``ConfigError``. The checks against what other packages register (objectives, searches,
    engines) are grid.compose ``load_run_spec``, which calls this first."""
    cfg = dict(cfg)
    cfg.pop("hydra", None)
    try:
        return RunSpec.model_validate(cfg)
    except ValidationError as err:
        raise ConfigError(_format_validation(err)) from None


def check_settings(spec: RunSpec, check: Callable[[str, Any, Any], Any] = check_setting) -> None:
    """Check every server setting of the run (``server``, ``sweep.base``, ``sweep.grid``, ``sweep.configs``) and
    every sweep load override against ``spec.version`` with ``check`` (the engine's dialect,
    grid/releases/dialect.py; SGLang's ``grid.releases.flags.check_setting`` by default). Raises ``ConfigError``
    naming the key and the allowed values."""
    version = parse_version(spec.version)
    try:
        for key, value in spec.server.items():
            check(key, value, version)
        if spec.sweep is not None:
            if spec.sweep.load:
                _load_override(spec.load, spec.sweep.load, "sweep.load")
            for key, value in spec.sweep.base.items():
                check(key, value, version)
            for key, values in spec.sweep.grid.items():
                for value in values:
                    check(key, value, version)
            for override in spec.sweep.configs:
                for key, value in override.items():
                    if key == "load":
                        _load_override(spec.load, value)
                    elif key != "label":
                        check(key, value, version)
    except (SettingError, ValueError) as err:
        raise ConfigError(str(err)) from None


def check_dataset_api(spec: RunSpec) -> None:
    """Refuse a dataset that cannot produce the prompts ``engine.api`` takes (e.g. token ids for chat messages), for
    the run's load and every sweep entry's. Raises ``ConfigError`` naming both keys and the datasets that fit."""
    from grid.loadgen.client import ENDPOINTS
    from grid.loadgen.dataset import DATASET_FORMS

    takes = ENDPOINTS[spec.engine.api].accepts
    loads = [("load.dataset", spec.load)]
    if spec.sweep is not None:
        sweep_load = _load_override(spec.load, spec.sweep.load, "sweep.load") if spec.sweep.load else spec.load
        loads.append(("sweep.load.dataset", sweep_load))
        loads += [("sweep.configs[].load.dataset", _load_override(sweep_load, c["load"]))
                  for c in spec.sweep.configs if "load" in c]
    for key, load in loads:
        if not DATASET_FORMS[load.dataset] & takes:
            fits = sorted(d for d, forms in DATASET_FORMS.items() if forms & takes)
            raise ConfigError(f"{key}={load.dataset} cannot serve engine.api={spec.engine.api}: it yields "
                              f"{' or '.join(sorted(DATASET_FORMS[load.dataset]))} prompts, the {spec.engine.api} API "
                              f"takes {' or '.join(sorted(takes))}; allowed datasets: {', '.join(fits)}")


def _load_override(base: LoadSpec, override: Any, key: str = "sweep.configs[].load") -> LoadSpec:
    """A sweep's (or a sweep entry's) ``load:`` block applied over ``base``. Raises ``ConfigError`` naming ``key``."""
    if not isinstance(override, dict):
        raise ConfigError(f"{key}: expected a mapping of load settings, got {override!r}")
    try:
        return LoadSpec.model_validate({**base.model_dump(), **override})
    except ValidationError as err:
        raise ConfigError(_format_validation(err, LoadSpec, key)) from None


def check_writable(run_dir: str) -> None:
    """Refuse a run directory whose nearest existing folder cannot be written. Raises ``ConfigError``."""
    path = Path(run_dir)
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise ConfigError(f"run_dir: {run_dir} cannot be written (nearest existing folder {probe} is not writable); "
                          "set hydra.run.dir=<writable folder>")
