"""What the report says about the run itself: what was measured, the command to deploy, warnings about the sweep's
base, and the known failure modes that explain a failed configuration.

These need the typed run specification (``grid.config.schema.RunSpec``) and grid's engines, so they live here and
not in the pure ranking/rendering modules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grid.config.schema import LoadSpec, RunSpec, requests_for_tail
from grid.engines.base import engine_class
from grid.report.explain import Cause, settings_of
from grid.metrics.confidence import CONFIDENCE
from grid.report.select import OBJECTIVES, TIE_PERCENT, Verdict, fmt_delta, slo_text
from grid.server.statuses import FAILURE_CLASSES
from grid.topology.deployment import Deployment
from grid.versions import ServerIdentity

ENGINE_WORDS = {
    "sim": "the embedded SGLang twin (modelled performance; no GPU ran)",
    "sglang": "real SGLang servers (measured on the GPUs)",
    "openai": "an already running OpenAI-compatible server (measured)",
}
#: The same where the hardware is the host CPU (``hardware.vendor: cpu``).
ENGINE_WORDS_CPU = {"sglang": "real SGLang servers (measured on the host CPU, SGLang's --device cpu)"}


def _levels(values: Sequence[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _distinct(values) -> list:
    out = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return out


def start_line(start: str) -> str:
    """How the closed-loop points started and which window they were measured over (grid/loadgen/runner.py,
    grid/metrics/loadpoint.py)."""
    if start == "staggered":
        return ("Closed-loop load: steady state (load.closed_loop_start=staggered, as AIPerf's --steady-state): "
                "warm-up, outside the window: the lone warm-up request(s), then a first wave of one request per "
                "stream, stream k of c asking for (k+1)/c of the output length, so the streams' phases spread over "
                "one loaded request time; window: first measured send to last measured end, every stream busy "
                "throughout (tail requests kept the load on, then were cancelled); throughputs count tokens by "
                "arrival inside the window")
    return ("Closed-loop load: all workers at once (load.closed_loop_start=together): window from the first send to "
            "the last end, requests counted whole, ramp-down included; with fixed lengths the requests run in "
            "synchronized waves, which makes TTFT percentiles jump between runs")


def _span(values: list, fmt: str = "{:g}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}-{fmt.format(hi)}"


def window_line(rows: Sequence[Mapping[str, Any]], twin: bool = True) -> str | None:
    """What the steady-state windows of the measured closed-loop points were (their ``window_kind``,
    ``duration_s``, ``warmup_requests_run``, ``tail_requests_run`` columns), in the twin's modelled time when
    ``twin`` else in real time; None without any."""
    steady = [r for r in rows if r["window_kind"] == "steady_state" and r["duration_s"] is not None]
    if not steady:
        return None
    parts = [f"{len(steady)} closed-loop point{'s' if len(steady) != 1 else ''} measured in steady state",
             f"window {_span([r['duration_s'] for r in steady], '{:.3g}')} s"]
    warm = [r["warmup_requests_run"] for r in steady if r["warmup_requests_run"] is not None]
    if warm:
        parts.append(f"{_span(warm)} warm-up requests per point before it")
    tail = [r["tail_requests_run"] for r in steady if r["tail_requests_run"] is not None]
    if tail:
        parts.append(f"{_span(tail)} tail requests per point after the measured ones")
    return "Measured windows: " + ", ".join(parts) + (" (modelled time)" if twin else "")


def repeats_line(repeats: int) -> str:
    """How often each load point was measured, and so how ties are decided (grid/report/select.py)."""
    host = ("; so is a lead smaller than the share of the points' time the host took (load_points.client_lag_pct)")
    if repeats < 2:
        return (f"Repeats: 1 per load point: the spread is not measured, so scores within the default "
                f"{TIE_PERCENT:g}% of the best count as ties (set load.repeats=3 to measure it){host}")
    return (f"Repeats: {repeats} per load point; a score is the mean over its repeats, and two configurations "
            f"whose {CONFIDENCE * 100:g}% confidence intervals of that mean overlap are tied within the measured "
            f"spread{host}")


def measured_identity(rows: Sequence[Mapping[str, Any]]) -> ServerIdentity | None:
    """The server the run's load points measured (the first row's ``engine_version``, typed), or None when no row
    records one."""
    return next((ServerIdentity.parse(r["engine_version"]) for r in rows if r["engine_version"]), None)


def _server_words(labels: Sequence[str]) -> str:
    """The engine line's release part: ``SGLang release 0.5.23`` for SGLang servers and the twin, else what each
    server said of itself (``vllm 0.32.0``; ``release not reported``)."""
    servers = [ServerIdentity.parse(label) for label in labels]
    if servers and all(s.is_sglang for s in servers):
        return f"SGLang release {', '.join(s.version or '?' for s in servers)}"
    return ", ".join(s.describe() for s in servers)


def measured_lines(spec: RunSpec, rows: Sequence[Mapping[str, Any]], plans: list | None = None) -> list[str]:
    """Bullet lines saying what was measured: model, hardware, engine and release, twin or real, workload (ISL/OSL,
    closed or open loop, levels, requests per point), the twin's time scale and the objective.

    ``rows``: the run's load-point rows (versions, time scales and request counts are read from them); ``plans``:
    ``grid.sweep.space.expand(spec)`` (each configuration's load; default: ``spec.load``).
    """
    hw = spec.hardware
    versions = _distinct(r["engine_version"] for r in rows) or [spec.version]
    engine = spec.engine.kind
    words = ENGINE_WORDS.get(engine, engine)
    if engine_class(engine).external:
        hardware = (f"Hardware: not known to grid: the server at {spec.engine.base_url} runs where it was started "
                    f"(hardware={hw.name} only names the run)")
    elif hw.is_cpu:
        hardware = f"Hardware: {hw.name}: the host CPU, {hw.gpu} ({hw.cpu_cores} cores, {hw.memory_gb:g} GB memory)"
        words = ENGINE_WORDS_CPU.get(engine, words)
    else:
        hardware = (f"Hardware: {hw.name}: {f'{hw.nodes} nodes x ' if hw.nodes > 1 else ''}{hw.gpu_count} x {hw.gpu} "
                    f"(sm_{hw.sm_version}, {hw.memory_gb:g} GB each, {hw.interconnect})")
    lines = [
        f"Model: {spec.model.name}" + (f" ({spec.model.path})" if spec.model.path and not
                                         engine_class(engine).external else ""),
        hardware,
        f"Engine: {words}; {_server_words(versions)} (engine={engine})",
    ]
    loads = _distinct(p.load for p in plans) if plans else [spec.load]
    for load in loads:
        lengths = (f"ISL {load.input_len} / OSL {load.output_len} tokens"
                   + (" (fixed)" if load.range_ratio >= 1 else
                      f" (uniform in [{load.range_ratio:g}x, 1x] of each)"))
        parts = []
        if load.concurrency:
            parts.append(f"closed loop at concurrency {_levels(load.concurrency)}")
        if load.request_rate:
            parts.append(f"open loop ({load.arrival} arrivals) at {_levels(load.request_rate)} req/s")
        requests = (f"{load.num_prompts} requests per point" if load.num_prompts else
                    f"{load.prompts_per_stream} requests per stream per point (at least {load.min_prompts}"
                    + (f", enough for p{spec.objective.slo.percentile:g} not to be the slowest request)"
                       if load.min_prompts >= requests_for_tail(spec.objective.slo.percentile) else ")"))
        lines.append(f"Workload: random prompts, {lengths}; {' and '.join(parts) or 'no load points'}; {requests}, "
                     f"after {load.warmup_requests} warm-up request{'s' if load.warmup_requests != 1 else ''}")
        if load.concurrency:
            lines.append(start_line(load.closed_loop_start))
        lines.append(repeats_line(load.repeats))
    window = window_line(rows, engine_class(engine).twin)
    if window:
        lines.append(window)
    counts = [r["num_prompts"] for r in rows if r["num_prompts"] and r["status"] != "not_run"]
    if counts:
        lines.append(f"Requests measured per load point: {min(counts)}" +
                     (f"-{max(counts)}" if max(counts) != min(counts) else ""))
    scales = _distinct(r["time_scale"] for r in rows)
    if engine_class(engine).twin and spec.engine.clock == "virtual":
        lines.append("Time: the twin's virtual clock (engine.clock=virtual): every ms and per-second value is modelled "
                     "time, a function of the configuration, the load and its seed, not of the host (README, 'The "
                     "twin's clock')")
    elif engine_class(engine).twin:
        scale = _levels(scales) if scales else str(spec.engine.time_scale)
        startup = spec.engine.startup_time_scale
        lines.append(f"Time: the twin ran its clock {scale}x faster than real time while serving ("
                     + (f"{startup:g}x until ready" if startup else "the same until ready")
                     + "); every ms and per-second value is modelled time (README, 'The twin's clock')")
    lines.append(f"Objective: {spec.objective.kind}" + (f" with SLOs {slo_text(spec.objective.slo)}"
                                                       if slo_text(spec.objective.slo) else " (no SLOs)"))
    return lines


#: The run directory's folder of the best configuration's deployment files (:func:`deployment_files`).
DEPLOY_DIR = "deploy"


def _sglang_engine(spec: RunSpec, verdict: Verdict):
    """grid's sglang engine for the SGLang release ``verdict`` was measured on (its ``engine_version``), with
    ``--model-path`` ``model.path`` (else a placeholder naming the model), and that release; None for engine=openai
    (grid did not launch that server), an engine of another dialect, or a server that is not an SGLang release."""
    from grid.engines.sglang import SGLangEngine
    from grid.releases.dialect import SGLANG

    cls = engine_class(spec.engine.kind)
    if cls.external or cls.dialect is not SGLANG or not verdict.rows:
        return None  # another family's launched server: its own engine's command is the one recorded
    version = ServerIdentity.parse(verdict.rows[0]["engine_version"] or spec.version).sglang_version
    if version is None:
        return None  # the server measured is not an SGLang release: no SGLang command line describes it
    model = spec.model.model_copy(update={"path": spec.model.path or f"/path/to/{spec.model.name}"})
    engine_spec = spec.engine.model_copy(update={"kind": "sglang", "version": version, "python": "python",
                                                 "env": {}})
    return SGLangEngine(spec.model_copy(update={"engine": engine_spec, "model": model})), version


def _server_command(engine, settings: dict[str, Any], verdict: Verdict) -> str:
    from grid.plan import TrialPlan
    from grid.report.render import deploy_command

    plan = TrialPlan(0, settings, engine.spec.load, verdict.label, verdict.config_hash)
    return deploy_command(engine.launch_plan(plan, 30000).command)


def real_command(spec: RunSpec, verdict: Verdict, deployment: Deployment | None = None) -> str | None:
    """The ``python -m sglang.launch_server ...`` line of ``verdict``'s configuration for the SGLang release it was
    measured for (its ``engine_version``), rendered by grid's sglang engine: no twin-only flag, no ``--port``
    (SGLang's default applies); for a ``deployment`` of several servers, the command that runs the launch script
    :func:`deployment_files` writes (``deploy/launch.sh``: each server on its node, then the router). None for
    engine=openai (grid did not launch that server) and for an engine of another dialect."""
    built = _sglang_engine(spec, verdict)
    if built is not None and deployment is not None and deployment.servers > 1:
        nodes = sorted({p.node + k for p in deployment.place(spec.hardware) for k in range(p.nodes)})
        hosts = " ".join(f"NODE{n}_HOST=<address of node {n}>" for n in nodes) if len(nodes) > 1 else ""
        return (f"NODE=<this node: {', '.join(map(str, nodes))}> {hosts} bash {DEPLOY_DIR}/launch.sh" if hosts
                else f"bash {DEPLOY_DIR}/launch.sh")
    return None if built is None else _server_command(built[0], settings_of(verdict), verdict)


def deployment_files(spec: RunSpec, verdict: Verdict, deployment: Deployment | None = None) -> dict[str, str]:
    """The files a user deploys ``verdict``'s configuration with (grid/report/deploy.py: launch.sh, lws.yaml,
    rbg.yaml, rayjob.yaml): each server's SGLang command on its place (one server: the node's first ``tp_size x
    pp_size`` GPUs; a ``deployment`` of several: ``Deployment.place``, each with its role's settings and
    ``--disaggregation-mode``) and the router in front of them, the image of the release it was measured on, and a
    RayJob that reruns this sweep with ``engine=sglang``. Empty where there is no SGLang command (another engine's
    server)."""
    import shlex

    from grid.report import deploy

    built = _sglang_engine(spec, verdict)
    if built is None:
        return {}
    engine, version = built

    def argv_of(settings: dict[str, Any]) -> tuple[str, ...]:
        argv = shlex.split(_server_command(engine, settings, verdict))
        if "--host" in argv:
            i = argv.index("--host")
            del argv[i:i + 2]
        return tuple(argv)

    settings = settings_of(verdict)
    policy = None
    if deployment is not None and deployment.servers > 1:
        groups = [g for g in deployment.groups for _ in range(g.count)]
        servers = [deploy.Server(place.role, i, place.node, place.gpus,
                                 argv_of(group.settings_over(settings, launch=True)), place.nodes)
                   for i, (group, place) in enumerate(zip(groups, deployment.place(spec.hardware), strict=True))]
        policy = deployment.router_policy
    else:
        gpus = int(settings.get("tp_size") or 1) * int(settings.get("pp_size") or 1)
        nodes = max(1, -(-gpus // spec.hardware.gpu_count))
        servers = [deploy.Server("aggregated", 0, 0, tuple(range(min(gpus, spec.hardware.gpu_count))),
                                 argv_of(settings), nodes)]
    sweep = f" +sweep={spec.sweep.name}" if spec.sweep is not None else ""
    entrypoint = (f"python -m grid.run{sweep} engine=sglang engine.version={version} model={spec.model.name} "
                  f"hardware={spec.hardware.name}")
    return deploy.files(f"{spec.name} {verdict.label}", servers, policy, image=f"lmsysorg/sglang:v{version}",
                        entrypoint=entrypoint, hardware=spec.hardware.name, nodes=spec.hardware.nodes,
                        gpus_per_node=spec.hardware.gpu_count)


#: The objective's metric -> the metric of grid.twin.uncertainty that bounds the twin's error on it (goodput has none).
TWIN_UNCERTAINTY_METRIC = {"output_tok_per_s": "output_tok_per_s", "tpot_median_ms": "tpot_ms"}


def twin_spread_note(spec: RunSpec, verdicts: list[Verdict]) -> list[str]:
    """With the twin (``engine.kind=sim``): when the best configuration is ahead of the runner-up by less than the
    twin's calibration spread for the objective's metric on this kind of model and GPU
    (``grid.twin.uncertainty.uncertainty``: RMS relative error over the published rows of docs/twin.md), one line
    saying that the decision rests on a difference smaller than that spread. Errors the two configurations share
    cancel in a ranking, so this flags decisions to confirm on GPUs rather than overturning them. Empty for real
    servers, for objectives without a twin metric (goodput), and when fewer than two configurations scored."""
    from grid.twin.uncertainty import hardware_family, uncertainty

    if not engine_class(spec.engine.kind).twin:
        return []
    obj = OBJECTIVES[spec.objective.kind]
    metric = TWIN_UNCERTAINTY_METRIC.get(obj.metric)
    scored = [v for v in verdicts if v.score is not None]
    if metric is None or len(scored) < 2 or spec.hardware.sm_version < 80:
        return []
    best, second = scored[0], scored[1]
    if not best.score:
        return []
    gap = abs(best.score - (second.score or 0.0)) / abs(best.score)  # second.score is set: it is in ``scored``
    moe = spec.model.is_moe
    family = hardware_family(spec.hardware)
    sigma = uncertainty(metric, moe=moe, gpu=family)
    if gap >= sigma:
        return []
    return [f"The best configuration is ahead of the next ({second.label}) by {fmt_delta(gap * 100).lstrip('+')}, less than the "
            f"twin's calibration spread for {metric} on {'MoE' if moe else 'dense'} models on {family} GPUs "
            f"({sigma * 100:.0f}% RMS over its published calibration rows, docs/twin.md): the decision rests on a "
            "modelled difference the twin has not shown it resolves in absolute terms; measure both on GPUs to "
            "confirm it."]


def cuda_graph_forecast(spec: RunSpec, settings: Mapping[str, Any], batches: Sequence[int], input_len: int,
                        output_len: int) -> list[tuple[int, float, float]] | None:
    """The twin's decode step (``grid.twin.perf.PerfModel.decode_step_s``, ms) of ``settings`` on ``spec``'s model
    and hardware with CUDA graphs off and on, at each batch of ``batches`` holding ``batch x (ISL + OSL/2)`` KV
    tokens (the mean context of a closed loop of ``input_len`` / ``output_len`` tokens): [(batch, off ms, on ms)].
    TPOT follows the decode step. None when the twin refuses either setting (its argument checks, as SGLang's).
    On a GPU whose step is long next to its kernel launches (the PCIe VM of docs/twin.md) the two agree; on a single
    H100 the twin's A5 anchor is 9.28 ms eager vs 7.06 ms with graphs (grid/twin/perf.py). None on a CPU host (no
    CUDA graphs there)."""
    from grid.releases.flags import parse_version, to_argv
    from grid.twin.perf_of_flags import perf_model

    if spec.hardware.is_cpu:
        return None

    perfs = [perf_model(spec.model, spec.hardware, to_argv({**settings, "cuda_graph": on}, parse_version(spec.version)),
                        spec.version, spec.engine.env) for on in (False, True)]
    if perfs[0] is None or perfs[1] is None:
        return None
    ctx = input_len + output_len / 2
    return [(b, perfs[0].decode_step_s(b, b * ctx) * 1000, perfs[1].decode_step_s(b, b * ctx) * 1000)
            for b in batches]


def base_warnings(spec: RunSpec, best_settings: Mapping[str, Any] | None = None,
                  load: LoadSpec | None = None) -> list[str]:
    """Warnings about settings every configuration of the sweep shares (``sweep.base`` over ``server``): CUDA graphs
    turned off (SGLang's own capture-failure hint calls ``--disable-cuda-graph`` "Not recommended. Huge performance
    loss": python/sglang/srt/model_executor/cuda_graph_runner.py, 0.5.x). How much they lose depends on the
    hardware, so the warning quotes the twin's forecast (:func:`cuda_graph_forecast`) for ``best_settings`` (the
    best configuration's, else the base's) at the closed-loop levels of ``load`` (the trials' ``LoadSpec``, else
    ``spec.load``; 1 for open-loop runs)."""
    sweep = spec.sweep
    base = {**spec.server, **(sweep.base if sweep else {})}
    out = []
    if base.get("cuda_graph") is False:
        varied = sweep is not None and ("cuda_graph" in sweep.grid or any("cuda_graph" in c for c in sweep.configs))
        head = ("The sweep's base turns CUDA graphs off (cuda_graph=false)"
                + (" except where a configuration sets it" if varied else " for every configuration")
                + ": decode runs kernel by kernel")
        load = load or spec.load
        settings = {**base, **(best_settings or {})}
        steps = cuda_graph_forecast(spec, settings, list(load.concurrency) or [1], load.input_len, load.output_len)
        if steps is None:
            out.append(head + ", so absolute throughput and TPOT may be worse than a deployment with CUDA graphs "
                       "(the twin cannot model this configuration to say by how much); compare configurations with "
                       "each other, not with production numbers.")
            return out
        gains = [(off - on) / on * 100 for _, off, on in steps]
        levels = ", ".join(str(b) for b, _, _ in steps)
        span = (f"{min(gains):.1f}%" if round(min(gains), 1) == round(max(gains), 1)
                else f"{min(gains):.1f}-{max(gains):.1f}%")
        where = (f"on {spec.hardware.name} the twin forecasts decode steps (TPOT) {span} longer without CUDA graphs "
                 f"than with them at batch {levels} (the twin's performance model, docs/twin.md; kernel launches "
                 "cost only where they exceed the GPU's own time per step)")
        if max(gains) < 1.0:
            out.append(head + f"; {where}, so on this hardware the numbers should hold with CUDA graphs too "
                       "(confirm with cuda_graph=true on GPUs before quoting them for a deployment).")
        else:
            out.append(head + f"; {where}: absolute throughput and TPOT are worse than a deployment with CUDA "
                       "graphs by about that; compare configurations with each other, not with production numbers.")
    return out


#: Which known failure effects (grid/twin/failures.py) can produce which recorded trial error class: declared on each
#: class (grid/server/statuses.py ``FailureClass.known_effects``).
EFFECT_CLASSES: dict[str, set[str]] = {
    effect: {c.name for c in FAILURE_CLASSES if effect in c.known_effects}
    for effect in sorted({e for c in FAILURE_CLASSES for e in c.known_effects})
}


def known_causes(spec: RunSpec, verdict: Verdict) -> list[Cause]:
    """The known failure modes (grid/twin/failures.py, each with its source) whose conditions hold for ``verdict``'s
    configuration on this model and hardware and whose effect matches its recorded error class; [] when none does
    or the configuration cannot be parsed for its version."""
    from grid.releases.flags import parse_version, to_argv
    from grid.twin.perf_of_flags import perf_model
    from grid.twin.failures import find_failures

    row = verdict.rows[0] if verdict.rows else None
    cls = row["trial_error_class"] if row else None
    version = ServerIdentity.parse((row and row["engine_version"]) or spec.version).sglang_version
    if version is None:  # the failure table is of SGLang's releases
        return []
    try:
        flags = to_argv(settings_of(verdict), parse_version(version))
    except (ValueError, KeyError):
        return []
    perf = perf_model(spec.model, spec.hardware, flags, version, spec.engine.env)
    if perf is None or perf.on_host:  # the failure table is of GPUs
        return []
    modes = find_failures(spec.model, spec.hardware, perf.cfg, perf)
    return [Cause(m.id, m.description, m.source) for m in modes if cls in EFFECT_CLASSES.get(m.effect, set())]

