"""One trial, start to finish, without Ray: launch the configuration, probe it, run every load point on that one
launch, classify what went wrong, and record every request and every load point to Parquet.

``server`` is a ServerHandle (grid/server/handle.py): the session itself in tests, the Ray actor's adapter in a sweep,
an external server for engine=openai. The only clock read here is the wall clock stamped on finished rows.
"""

from __future__ import annotations

import json
import logging
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from grid.config.schema import RunSpec
from grid.diagnosis.rules import diagnose
from grid.engines.base import Engine, LaunchPlan
from grid.loadgen.dataset import DatasetArgs, PromptForm, build_dataset, random_prompts
from grid.loadgen.records import RequestRecord
from grid.loadgen.runner import LoadPoint, LoadPointResult, Target, run_load_point_sync, span_ns
from grid.metrics.loadpoint import SLO, load_point_status, slo_values, summarize
from grid.plan import TrialPlan, level_name, load_points
from grid.report.select import meets_slos, objective_key
from grid.server.logparse import OUTPUT_ERROR_CLASSES, runtime_error
from grid.server.metrics_scrape import requests_finished
from grid.server.handle import LaunchRequest, LaunchResult, ServerHandle
from grid.server.infra import GuardedServer, infra_verdict
from grid.server.session import redact_secrets
from grid.server.statuses import RequestErrorClass, TrialErrorClass, TrialStatus, status_of
from grid.storage.parquet import write_trial
from grid.storage.rows import LoadPointRow
from grid.storage.schema import SCHEMA_VERSION, load_point_row, request_rows
from grid.search.levels import Capacity, LevelForecast, Levels
from grid.sweep.notes import timeout_fired_text, timeout_run_note
from grid.sweep.samplers import Sampler, SamplerContext, make_samplers

log = logging.getLogger("grid.measure")

HANG_CLASSES = {"stall_timeout", "read_timeout"}
#: Request error classes that say the server failed (not the request, not the client): timeouts with no token
#: progress, resets and broken streams, errors the server reported; ``http_error`` only for 5xx and 429.
SERVER_FAILURE_CLASSES = {"stall_timeout", "read_timeout", "conn_error", "truncated_stream", "server_error"}
LOG_TAIL_BYTES = 4000
EXIT_SETTLE_S = 2.0  # real seconds to wait for a server exit after a failed check request
#: The check request sent after a load point with server failures: a short prompt, a few tokens, at most this many
#: modelled seconds without a token (SGLang's own /health_generate gives up after 20 s: SGLANG_HEALTH_CHECK_TIMEOUT,
#: python/sglang/srt/entrypoints/http_server.py), and never less than CHECK_MIN_REAL_S real seconds (so that a fast
#: twin clock does not turn a moment of CPU contention into a hang).
CHECK_TIMEOUT_S = 20.0
CHECK_MIN_REAL_S = 2.0
CHECK_INPUT_TOKENS = 16
CHECK_OUTPUT_TOKENS = 4


#: Longest error message a progress report carries (characters, with the ellipsis): one terminal line and a half.
MESSAGE_CHARS = 200


def clip_message(text: str | None, width: int = MESSAGE_CHARS) -> str:
    """``text`` on one line, cut at a word boundary with " …" when longer than ``width`` characters
    (``textwrap.shorten``; a first word longer than ``width`` is cut inside it, also with " …"); "" for None."""
    text = " ".join((text or "").split())
    if len(text) <= width:
        return text
    short = textwrap.shorten(text, width=width, placeholder=" …")
    return short if short.strip() != "…" else text[:width - 2] + " …"


def level_plan(spec: RunSpec, engine: Engine, plan: TrialPlan, best: float | None | str = "read") -> Levels:
    """The trial's load levels (grid/search/levels.py): the fixed points of :func:`load_points`, or with objective
    ``max_capacity`` the bisection over the request rate, bracketed by the twin's forecast capacity ``c`` widened by
    its error ``e`` (``search.twin_bound_error``): [c / (1 + e), c / (1 - e)] req/s (without a forecast, from the
    highest ``load.request_rate``, else 1 req/s). Early stopping (``search.early_stop``) gets the twin's per-level
    forecasts and ``best``, the best score recorded in the run directory (``"read"``: read it there; None: none).
    Both forecasts are the twin's as the sweep has calibrated it so far (``calibration.json``, grid/search/
    calibration.py ``current``; the spec-sheet twin before the first measured configuration).
    The twin-bound rule applies to higher-is-better objectives the twin forecasts per level (output tok/s, goodput)
    and never to an engine the twin does not describe (``Engine.forecastable``: an external server, another server
    family), nor to a sweep that varies speculative decoding: the report judges each of its levels on its own
    (grid/report/speculative.py), so a level is not skipped for being unable to beat another level's score."""
    from grid.report.select import OBJECTIVES
    from grid.report.speculative import judged_per_level
    from grid.search.calibration import current
    from grid.search.predict import Forecast, capacity_bracket, forecast, level_forecasts

    load = plan.load
    obj = OBJECTIVES[spec.objective.kind]
    s = spec.search
    unmodelled = not engine.forecastable()
    coefficients = None if unmodelled else current(spec)
    if obj.bisects_rate:
        f: Forecast | None = None if unmodelled else forecast(spec, plan, engine.version(), coefficients)
        c = f.value if f is not None else None
        if c is None:
            lo = hi = max(load.request_rate, default=1.0)
        else:
            lo, hi = capacity_bracket(spec, c)

        def probe(index: int, rate: float) -> LoadPoint:
            return LoadPoint("rate", rate, load.prompts_for(rate), warmup_requests=load.warmup_requests,
                             seed=load.seed * 1000 + index, arrival=load.arrival, burstiness=load.burstiness,
                             max_concurrency=load.max_concurrency)

        return Levels([], capacity=Capacity(lo, hi, spec.objective.capacity_rel_tol,
                                            spec.objective.capacity_max_probes, probe))
    points = load_points(plan)
    bounded = (s.early_stop and not unmodelled and obj.higher_is_better and obj.metric in TWIN_BOUND_METRICS
               and not judged_per_level(spec))
    forecasts = level_forecasts(spec, plan, engine.version(), coefficients) if s.early_stop and not unmodelled else {}
    known: float | None = None  # the best to beat (the twin-bound rule only)
    if not bounded:  # the durations still say what a skipped point saves
        forecasts = {k: LevelForecast(None, f.duration_s) for k, f in forecasts.items()}
    elif best == "read":
        known = recorded_best(spec, exclude=plan.config_hash)
    elif not isinstance(best, str):
        known = best
    return Levels(points, early_stop=s.early_stop, forecasts=forecasts, best=known, error=s.twin_bound_error,
                  unit=obj.unit, own_best=load.repeats == 1, metric=obj.metric if bounded else None)


#: Objective metrics the twin forecasts per load level (grid.search.predict.level_forecasts) for the twin-bound rule.
TWIN_BOUND_METRICS = ("output_tok_per_s", "goodput_req_per_s")


def recorded_best(spec: RunSpec, exclude: str | None = None) -> float | None:
    """The best score (higher is better) of the configurations recorded in the run directory, judged as the report
    judges them (grid.search.measured.scores); None when none scored."""
    from grid.search.measured import scores

    try:
        values = [v for h, v in scores(spec).items() if v is not None and h != exclude]
    except (OSError, ValueError, KeyError) as err:  # nothing readable yet: no best
        log.debug("no recorded best: %s", err)
        return None
    return max(values) if values else None


def accuracy_role(spec: RunSpec, plan: TrialPlan) -> str | None:
    """Whether the trial runs the accuracy prompts, and as what: None when the guard is off or the sweep varies no
    setting that changes the numerics (grid.accuracy.NUMERIC_SETTINGS); ``baseline`` for a configuration that
    computes like the sweep's base; ``differs: k1, k2`` naming the settings that change its numerics."""
    from grid.accuracy import NUMERIC_SETTINGS, computes_differently

    sweep = spec.sweep
    if not spec.accuracy.enabled or sweep is None:
        return None
    varied = set(sweep.grid) | {k for c in sweep.configs for k in c}
    if not varied & NUMERIC_SETTINGS:
        return None
    differs = computes_differently(plan.settings, {**spec.server, **sweep.base})
    return f"differs: {', '.join(differs)}" if differs else "baseline"


def run_accuracy(spec: RunSpec, plan: TrialPlan, target: Target, trial_id: str
                 ) -> tuple[float | None, list[dict[str, Any]]]:
    """Send grid's accuracy prompts greedily through the run's API (``target.api``); (exact-match share, rows of the
    ``accuracy`` table). An HTTP failure gives (None, []) and a warning: the load points will judge the server."""
    from grid.accuracy import ask, matches, prompts

    items = prompts()
    try:
        replies = ask(target.base_url, items, target.api, target.model, target.api_key,
                      timeout_s=max(10.0, 600 / target.time_scale), max_new_tokens=spec.accuracy.max_new_tokens)
    except OSError as err:
        log.warning("%s: accuracy prompts failed: %s", plan.label, err)
        return None, []
    rows: list[dict[str, Any]] = [
        {"schema_version": SCHEMA_VERSION, "config_hash": plan.config_hash, "trial_id": trial_id, "prompt_id": i.id,
         "kind": i.kind, "answer": i.answer, "reply": r[:200], "correct": matches(r, i.answer)}
        for i, r in zip(items, replies)]
    return sum(r["correct"] for r in rows) / len(rows), rows


def _point_status(summary: dict[str, Any]) -> tuple[str, str | None]:
    """(status, most frequent request error class) of a measured load point."""
    status = load_point_status(summary)
    errors = json.loads(summary.get("error_counts_json") or "{}")
    return status, (max(errors, key=errors.get) if errors else None)


def server_failures(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The failed requests whose failure came from the server (``SERVER_FAILURE_CLASSES``, or an HTTP status of 5xx
    or 429). Pure."""
    return [r for r in records if r.status != "ok" and (
        r.error_class in SERVER_FAILURE_CLASSES
        or (r.error_class == "http_error" and r.http_status is not None and (r.http_status >= 500
                                                                             or r.http_status == 429)))]


def check_request(target: Target, vocab_size: int, seed: int, form: PromptForm | None = None) -> RequestRecord:
    """Send one short request (``CHECK_INPUT_TOKENS`` in, ``CHECK_OUTPUT_TOKENS`` out) and return its record; it
    fails with ``stall_timeout`` when no token comes within ``CHECK_TIMEOUT_S`` modelled seconds. The prompt is built
    in the run's ``form`` (text for the chat API, which refuses token ids), else as token ids in
    ``[0, vocab_size)``."""
    timeout = max(CHECK_TIMEOUT_S / target.time_scale, CHECK_MIN_REAL_S)
    prompts = (form.random(1, CHECK_INPUT_TOKENS, CHECK_OUTPUT_TOKENS, 1.0, seed) if form is not None
               else random_prompts(1, CHECK_INPUT_TOKENS, CHECK_OUTPUT_TOKENS, 1.0, vocab_size, seed))
    outcome = run_load_point_sync(target, LoadPoint("concurrency", 1, 1), prompts, read_timeout_s=timeout,
                                  stall_timeout_s=timeout)
    return outcome.records[0]


def _ttft_ms(rec: RequestRecord | None, time_scale: float) -> float | None:
    if rec is None or rec.status != "ok" or rec.first_token_perf_ns is None or rec.send_perf_ns is None:
        return None
    return (rec.first_token_perf_ns - rec.send_perf_ns) / 1e6 * time_scale


def _counts_text(failed: Sequence[RequestRecord], total: int) -> str:
    counts: dict[str, int] = {}
    for r in failed:
        key = f"http {r.http_status}" if r.error_class == "http_error" else str(r.error_class)
        counts[key] = counts.get(key, 0) + 1
    return f"{len(failed)} of {total} requests failed ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"


def broken_verdict(index: int, *, alive: bool, exit_code: int | None, failed: Sequence[RequestRecord], total: int,
                   check: RequestRecord | None, runtime: tuple[TrialErrorClass, str] | None, fired: str | None,
                   check_timeout_s: float = CHECK_TIMEOUT_S) -> tuple[TrialErrorClass, str] | None:
    """(trial error class, message) when the server broke during load point ``index``, else None (pure).

    ``failed``: the point's requests that failed from the server (:func:`server_failures`) out of ``total``;
    ``check``: the check request sent after it (None: none was sent); ``runtime``: the first runtime error the
    server logged meanwhile (``logparse.runtime_error``); ``fired``: which timeouts fired (``notes.timeout_fired_text``).

    * the process exited: the runtime error's class (``runtime_oom``, ``nccl_error``, ``cuda_error``) or
      ``server_crash``, with the exit code;
    * it logged NaN in the logits: ``nan_output`` (its output is garbage; the trial is ``invalid``);
    * the check request failed too: the runtime error's class, else ``server_hang`` (no token within
      ``check_timeout_s`` modelled seconds) or ``server_broken`` (reset, HTTP error, an error in the stream);
    * the check request succeeded, or none was needed: None (an overloaded but healthy server; the point's failures
      count against its goodput).
    """
    cause = f": {runtime[1]}" if runtime is not None else ""
    where = f"during load point {index}"
    if not alive:
        cls: TrialErrorClass = (runtime[0] if runtime is not None and runtime[0] not in OUTPUT_ERROR_CLASSES
                                else "server_crash")
        return cls, f"server exited with code {exit_code} {where}{cause}"
    if runtime is not None and runtime[0] in OUTPUT_ERROR_CLASSES:
        return runtime[0], f"the server logged '{runtime[1]}' {where}: its output is garbage from there on"
    if check is None or check.status == "ok":
        return None
    what = fired or (_counts_text(failed, total) if failed else "no request failed")
    if check.error_class in HANG_CLASSES:
        told = (f"no token progress {where} while the server process was alive ({what}); a check request "
                f"afterwards got no token within {check_timeout_s:g} s either (health endpoints are not trusted "
                "for this)")
        return (runtime[0], f"{runtime[1]} logged {where}; {told}") if runtime else ("server_hang", told)
    told = (f"the server process lives but stopped serving {where} ({what}); a check request afterwards failed "
            f"with {check.error_class}: {clip_message(check.error_message)}".rstrip(": "))
    return (runtime[0], f"{runtime[1]} logged {where}; {told}") if runtime else ("server_broken", told)


@dataclass(frozen=True)
class TrialVerdict:
    """The trial's verdict so far: the trial-level columns every load-point row carries (``trial_status``,
    ``trial_error_class``, ``trial_error_message``, ``log_tail``; docs/schema.md). It starts as the launch's and
    changes when a load point finds the server broken, when a note is added, and once more when the trial is final
    (env_dirty after the stop, every load point failed, the machinery lost)."""

    status: TrialStatus
    error_class: TrialErrorClass | RequestErrorClass | None
    message: str | None
    log_tail: str | None

    @classmethod
    def of_launch(cls, result: LaunchResult, infra_notes: Sequence[str], secrets: tuple[str, ...]) -> TrialVerdict:
        """The launch's verdict: its status and class, its message followed by the infrastructure notes (ports
        retried), its log tail cut to ``LOG_TAIL_BYTES``; secrets redacted."""
        message = redact_secrets("; ".join([result.message, *infra_notes]).strip("; "), secrets)
        return cls(result.status, result.error_class, message or None,
                   redact_secrets((result.log_tail or "")[-LOG_TAIL_BYTES:], secrets) or None)

    def noted(self, *notes: str | None) -> TrialVerdict:
        """This verdict with ``notes`` added after its message (``; `` between; empty ones left out)."""
        return replace(self, message="; ".join(x for x in (self.message, *notes) if x))

    def columns(self) -> dict[str, Any]:
        """The verdict as load-point columns."""
        return {"trial_status": self.status, "trial_error_class": self.error_class,
                "trial_error_message": self.message, "log_tail": self.log_tail}


@dataclass(frozen=True)
class TrialStart:
    """How the trial's server started. ``launch``: the command that ran (on the port the server got);
    ``launched``: a launch was attempted (False: the engine refused the configuration, nothing to stop);
    ``infra_notes``: infrastructure notes (ports that were taken); ``launch_unix_ns`` / ``ready_unix_ns``: the
    wall clock before the launch and after the probe (the report's timeline; None when nothing was launched)."""

    launch: LaunchPlan
    result: LaunchResult
    infra_notes: list[str]
    launched: bool
    launch_unix_ns: int | None = None
    ready_unix_ns: int | None = None


@dataclass
class _Health:
    broken: tuple[TrialErrorClass, str] | None
    runtime: tuple[TrialErrorClass, str] | None
    check_ttft_ms: float | None


def _judge_server(server: ServerHandle, target: Target, vocab_size: int, seed: int, index: int,
                  records: list[RequestRecord], log_offset: int, fired: str | None,
                  form: PromptForm | None = None) -> _Health:
    """After load point ``index``: read what the server logged meanwhile, send the check request when requests
    failed from the server or it logged a runtime error, and judge (:func:`broken_verdict`)."""
    failed = server_failures(records)
    check = None
    runtime = runtime_error(server.read_log(log_offset))
    if (failed or runtime is not None) and server.alive():
        check = check_request(target, vocab_size, seed, form)
        if check.status != "ok" and server.alive():
            server.wait_exit(EXIT_SETTLE_S)  # a crash surfaces to the client before the exit is recorded
        runtime = runtime_error(server.read_log(log_offset))  # the error may be logged after the requests failed
    alive = server.alive()
    verdict = broken_verdict(index, alive=alive, exit_code=None if alive else server.exit_code(), failed=failed,
                             total=len(records), check=check, runtime=runtime, fired=fired)
    return _Health(verdict, runtime, _ttft_ms(check, target.time_scale))


def _longest_wait_ms(summary: dict[str, Any]) -> float:
    """The longest wait for a token of the point's ok requests (TTFT or gap between chunks), modelled ms."""
    return max((v for v in (summary.get("ttft_max_ms"), summary.get("chunk_gap_max_ms")) if v is not None),
               default=0.0)


def measure_trial(spec: RunSpec, engine: Engine, plan: TrialPlan, server: ServerHandle, *, trial_id: str,
                  on_point: Callable[[dict[str, Any]], None] | None = None,
                  node: dict[str, Any] | None = None) -> list[LoadPointRow]:
    """Run the trial and write its Parquet files. Returns the load-point rows (also written).

    Three steps: :func:`start_server` (launch, ready, probe), :func:`run_points` (each load point, then what the
    server's state says about it, :func:`classify_fault`), :func:`finalize` (the trial's verdict on every row, the
    Parquet files). The server is stopped once, between the last two, on every way out (KeyboardInterrupt
    included). ``node``: where the server runs (grid.cluster.node.local_node of the server's process: ``node_id``,
    ``node_hostname``, ``gpu_uuids``); None: this process's node."""
    if node is None:
        from grid.cluster.node import local_node

        node = local_node()
    guarded = GuardedServer(server)  # a lost actor ends the trial as an infrastructure failure (grid/server/infra.py)
    start = start_server(spec, engine, plan, guarded)
    try:
        run = run_points(TrialContext.of(spec, engine, plan, guarded, trial_id, start, node), on_point)
    finally:
        dirty = guarded.stop(spec.engine.stop_grace_s) if start.launched else None
    return finalize(run, dirty)


def refused_start(spec: RunSpec, engine: Engine, plan: TrialPlan) -> TrialStart | None:
    """The start of a configuration the engine refuses (``invalid``, class ``refused``, nothing launched), or None
    when the engine would launch it."""
    refusal = engine.refuse(plan)
    if refusal is None:
        return None
    return TrialStart(engine.launch_plan(plan, spec.engine.port or 0),
                      LaunchResult(status_of("refused"), "refused", refusal), [], launched=False)


def record_refusal(spec: RunSpec, engine: Engine, plan: TrialPlan) -> list[LoadPointRow] | None:
    """Record a configuration the engine refuses, as a trial would (its load points ``not_run``, its command, the
    reason), without a server, a node or a Ray Tune trial: the driver records refusals before the sweep. Returns the
    rows written, or None when the engine does not refuse ``plan`` (nothing written)."""
    start = refused_start(spec, engine, plan)
    if start is None:
        return None
    node = {"node_id": None, "node_hostname": None, "gpu_uuids": None}  # refused before any node was chosen
    server = GuardedServer(cast(ServerHandle, _Unlaunched()))
    return finalize(run_points(TrialContext.of(spec, engine, plan, server, plan.config_hash, start, node)), None)


class _Unlaunched:
    """The server handle of a refused configuration: nothing was launched, so nothing may be asked of it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a refused configuration has no server (asked for {name})")


def start_server(spec: RunSpec, engine: Engine, plan: TrialPlan, server: ServerHandle) -> TrialStart:
    """Launch the configuration (unless the engine refuses it: ``invalid``, class ``refused``, nothing launched) and
    wait for it to be ready and pass the probe."""
    refused = refused_start(spec, engine, plan)
    if refused is not None:
        return refused
    port, infra_notes = server.pick_port(spec.engine.port or 0)
    launch = engine.launch_plan(plan, port)
    launch_ns = time.time_ns()
    result = server.launch(LaunchRequest(
        argv=launch.argv, env=launch.env, port=port, log_path=f"{spec.run_dir}/logs/{plan.config_hash}.log",
        time_scale=launch.time_scale, startup_time_scale=launch.startup_time_scale,
        startup_timeout_s=spec.engine.startup_timeout_s, api=spec.engine.api, model=engine.served_model(),
        api_key=spec.engine.api_key, label=plan.label, probe_enabled=spec.probe.enabled,
        ready_path=engine.dialect.ready_path, members=launch.members, router_policy=launch.router_policy))
    ready_ns = time.time_ns()
    if result.port and result.port != port:
        # retried on another port with the same environment: record the command that ran, and keep the clock the
        # server was given (a twin's auto time scale reads the host's load again on every plan)
        again = engine.launch_plan(plan, result.port)
        launch = replace(launch, argv=again.argv, port=again.port)
    if result.router_argv:  # the router's command as it ran: its servers where they listen
        launch = replace(launch, argv=list(result.router_argv))
    return TrialStart(launch, result, [*infra_notes, *result.infra_retries], launched=True, launch_unix_ns=launch_ns,
                      ready_unix_ns=ready_ns)


@dataclass(frozen=True)
class TrialContext:
    """What every step of one trial reads: the run, the configuration, the server and how its load is sent."""

    spec: RunSpec
    engine: Engine
    plan: TrialPlan
    server: GuardedServer
    trial_id: str
    start: TrialStart
    node: dict[str, Any]
    target: Target
    secrets: tuple[str, ...]
    slo: SLO

    @classmethod
    def of(cls, spec: RunSpec, engine: Engine, plan: TrialPlan, server: GuardedServer, trial_id: str,
           start: TrialStart, node: dict[str, Any]) -> TrialContext:
        api_key = spec.engine.api_key
        target = Target(start.result.base_url, spec.engine.api, engine.served_model(), api_key,
                        start.launch.time_scale, clock=spec.engine.clock if spec.engine.kind == "sim" else "real")
        slo = spec.objective.slo
        return cls(spec, engine, plan, server, trial_id, start, node, target, (api_key,) if api_key else (),
                   SLO(slo.ttft_ms, slo.tpot_ms, slo.e2e_ms, slo.percentile))

    @property
    def up(self) -> bool:
        """The server started and passed the probe: its load points are measured."""
        return self.start.result.status == "ok"


@dataclass
class TrialRun:
    """What :func:`run_points` measured, for :func:`finalize`: the load-point rows (as reported to ``on_point``),
    the other tables' rows, each failed point's summary (``point 2: 8 of 8 requests failed, ...``) and the verdict
    after the last point."""

    trial: TrialContext
    rows: list[dict[str, Any]]
    tables: dict[str, list[dict[str, Any]]]
    point_errors: list[str]
    verdict: TrialVerdict


def startup_seconds(engine: Engine, measured_s: float | None, info: dict[str, Any] | None) -> float | None:
    """The launch's startup in modelled seconds: for the twin its own modelled startup (``twin_startup_s`` of its
    /server_info: its startup phases, warm-up request and any fault's ready time, grid/twin/server.py), since the launcher's measure (``measured_s``: real seconds from
    launch to the first 200 of /health_generate, times ``startup_time_scale``) also scales the host's process-start
    and polling latency (about 1.6 real s, x200 by default: +35%); otherwise ``measured_s``."""
    twin_s = (info or {}).get("twin_startup_s") if engine.twin else None
    return float(twin_s) if twin_s is not None else measured_s


def _trial_columns(trial: TrialContext) -> dict[str, Any]:
    """The columns every load-point row of the trial shares but the verdict's: the configuration, the command, the
    engine, the launch and what the server said about itself."""
    from grid.cluster.node import node_columns

    spec, engine, plan, start, secrets = trial.spec, trial.engine, trial.plan, trial.start, trial.secrets
    result, node = start.result, trial.node
    info = trial.server.server_info(spec.engine.api_key) if trial.up else None
    return {
        "schema_version": SCHEMA_VERSION,
        "run_name": spec.name,
        "trial_id": trial.trial_id,
        "config_hash": plan.config_hash,
        "config_json": plan.config_json,
        "label": plan.label,
        "deployment_json": json.dumps(plan.deployment.identity(), sort_keys=True)
        if plan.deployment is not None and plan.deployment.servers > 1 else None,
        "command": start.launch.command,
        "engine": spec.engine.kind,
        "engine_version": engine.version(),
        "model": engine.served_model(),
        "hardware": spec.hardware.name,
        "startup_s": startup_seconds(engine, result.startup_s, info),
        "launch_unix_ns": start.launch_unix_ns,
        "ready_unix_ns": start.ready_unix_ns,
        "input_len": plan.load.input_len,
        "output_len": plan.load.output_len,
        "time_scale": start.launch.time_scale,
        "kv_capacity_tokens": (info or {}).get("max_total_num_tokens"),
        "server_info_json": redact_secrets(json.dumps(info, sort_keys=True, default=str), secrets) if info else None,
        "probe_status": result.probe_status,
        **node_columns(node),
        "gpu_uuids": node.get("gpu_uuids"),
    }


@dataclass
class TimeoutNotes:
    """The timeout notes of a running trial: the longest wait for a token so far (modelled ms) and which notes
    (``fired``, ``near``) were given already (each once per trial)."""

    longest_wait_ms: float = 0.0
    given: set[str] = field(default_factory=set)


def run_points(trial: TrialContext, on_point: Callable[[dict[str, Any]], None] | None = None) -> TrialRun:
    """Measure the trial's load levels on the launched server, in order (:func:`level_plan`: the fixed points, or
    the capacity bisection; early stopping may skip levels), each with :func:`run_point`, judging the server after
    each (:func:`classify_fault`). After a point that broke the server, and for a server that never came up, the
    remaining points are recorded ``not_run``; a skipped level is ``not_run`` with the rule's class and reason.
    Each row goes to ``on_point`` as soon as it is measured."""
    spec, plan, load = trial.spec, trial.plan, trial.plan.load
    base = _trial_columns(trial)
    verdict = TrialVerdict.of_launch(trial.start.result, trial.start.infra_notes, trial.secrets)
    levels = level_plan(spec, trial.engine, plan) if trial.up else Levels(load_points(plan), early_stop=False)
    per_repeat = max(1, len(levels.points) // load.repeats)
    rows: list[dict[str, Any]] = []
    point_errors: list[str] = []  # per failed load point: how many requests failed, and the first error
    tables: dict[str, list[dict[str, Any]]] = {"requests": []}
    role = accuracy_role(spec, plan) if trial.up else None
    if role is not None:
        share, tables["accuracy"] = run_accuracy(spec, plan, trial.target, trial.trial_id)
        base.update(accuracy_exact_match=share, accuracy_role=role if share is not None else None)
    form = trial.engine.prompt_form(load) if trial.up else None
    samplers = [] if not trial.up else make_samplers(SamplerContext(
        trial.server, trial.target.base_url, spec.engine.api_key, spec.engine.kind, trial.target.time_scale,
        plan.config_hash, trial.trial_id, spec.hardware, trial.target.clock, tuple(trial.start.result.server_urls)))
    stopped: str | None = None if trial.up else "not_run"
    timeouts = TimeoutNotes()
    for index, point, skip in levels:
        if stopped is not None and levels.capacity is not None:
            break  # the server broke: no further probe
        repeat = 0 if levels.capacity is not None else index // per_repeat  # capacity probes are not repeated
        row = {**base, **verdict.columns(), "point_index": index, "repeat_index": repeat,
               "point_kind": point.kind, "point_value": point.value, "num_prompts": point.num_prompts,
               "max_concurrency": point.max_concurrency, "dataset": load.dataset}
        if stopped is not None:
            rows.append({**row, "status": "not_run", "error_class": verdict.error_class,
                         "finished_unix_ns": time.time_ns()})
            continue
        if skip is not None:
            log.info("%s: %s not run: %s", plan.label, level_name(row), skip[1])
            rows.append({**row, "status": "not_run", "error_class": skip[0], "skip_reason": skip[1],
                         "early_stop_objective": objective_key(spec.objective),
                         "forecast_duration_s": levels.forecast_s(point), "finished_unix_ns": time.time_ns()})
            continue
        measured = run_point(trial, index, point, row, samplers, form)
        for table, sampled in measured.sampled:
            tables.setdefault(table, []).extend(sampled)
        tables["requests"] += measured.requests
        judged = {**row, **slo_values(measured.requests, row.get("duration_s"), trial.slo)}  # as the report judges
        levels.record(point, row["status"], meets_slos(judged, spec.objective.slo),
                      row.get(levels.metric) if levels.metric else None)
        if measured.failure is not None:
            point_errors.append(measured.failure)
        verdict, stopped = classify_fault(trial, index, point, row, measured, verdict, timeouts, form)
        row.update(verdict.columns())  # the verdict so far (a crash or hang found at this point included)
        rows.append(row)
        if on_point is not None:
            on_point(row)
    return TrialRun(trial, rows, tables, point_errors, verdict)


@dataclass
class PointRun:
    """What one load point produced besides its row: its request records and rows, each sampler's (table, rows),
    which timeouts fired (``notes.timeout_fired_text``), the failed point's summary for the trial message, the
    server log's size when it started and the load-point summary (grid.metrics.loadpoint.summarize)."""

    records: list[RequestRecord]
    requests: list[dict[str, Any]]
    sampled: list[tuple[str, list[dict[str, Any]]]]
    fired: str | None
    failure: str | None
    log_offset: int
    summary: dict[str, Any]


#: Real seconds a load point's end waits for its servers' request counters to count every request it sent (a server
#: counts a request as it finishes it, which may follow the answer the client already has).
COUNT_SETTLE_S = 2.0


def _settled_counts(urls: list[str], api_key: str | None, before: list[float | None], sent: int) -> list[float | None]:
    """Each server's finished-request count once their increase since ``before`` adds up to ``sent``, or after
    ``COUNT_SETTLE_S`` real seconds (a scrape that fails counts nothing)."""
    deadline = time.monotonic() + COUNT_SETTLE_S
    while True:
        after = requests_finished(urls, api_key)
        done = sum(a - b for a, b in zip(after, before) if a is not None and b is not None)
        if done >= sent or time.monotonic() >= deadline:
            return after
        time.sleep(0.1)


def servers_json(result: LaunchResult, before: list[float | None], after: list[float | None]) -> str:
    """The ``deployment_servers_json`` of a load point: for each server of the deployment (``result.server_urls``),
    its name (``aggregated 1``), the host name of its node, its URL and the requests it finished during the point
    (``after - before`` of its ``num_requests_total``: every request it finished, the point's warm-up and tail
    requests included; None where a scrape failed).
    Pure."""
    names = result.server_names or [""] * len(result.server_urls)
    nodes = result.server_nodes or [""] * len(result.server_urls)
    out = [{"server": name, "node": node, "url": url,
            "requests": None if b is None or a is None else int(round(a - b))}
           for name, node, url, b, a in zip(names, nodes, result.server_urls, before, after, strict=True)]
    return json.dumps(out)


def run_point(trial: TrialContext, index: int, point: LoadPoint, row: dict[str, Any], samplers: Sequence[Sampler],
              form: PromptForm | None) -> PointRun:
    """Send load point ``index`` (its seeded prompts, built in ``form``) while the samplers record, and fill ``row``
    with its metrics, status, sampler columns and bottleneck diagnosis (grid/diagnosis/rules.py)."""
    spec, load, scale = trial.spec, trial.plan.load, trial.target.time_scale
    prompts = build_dataset(load.dataset, DatasetArgs(
        point.num_prompts + point.warmup_requests + point.wave_warmup + point.tail_prompts, load.input_len,
        load.output_len, load.range_ratio, spec.model.vocab_size, point.seed, load.dataset_path, form=form,
        turns=load.sessions.turns, think_time_s=load.sessions.think_time_s)).prompts
    log_offset = trial.server.log_size()
    servers = trial.start.result.server_urls  # a deployment's servers (empty: one server, or the twin's deployment)
    before = requests_finished(servers, spec.engine.api_key) if servers else []
    row["started_unix_ns"] = time.time_ns()
    for sampler in samplers:
        sampler.start(index)
    outcome = run_load_point_sync(
        trial.target, point, prompts, read_timeout_s=load.read_timeout_s / scale,
        stall_timeout_s=None if load.stall_timeout_s is None else load.stall_timeout_s / scale)
    if servers:
        sent = len(outcome.records) + len(outcome.warmup_records) + len(outcome.tail_records)
        row["deployment_servers_json"] = servers_json(trial.start.result, before,
                                                      _settled_counts(servers, spec.engine.api_key, before, sent))
    virtual = outcome.clock == "virtual"  # the twin's virtual clock: the host's load cannot move the numbers
    if outcome.real_s > 0 and not virtual:
        row["client_lag_pct"] = round(outcome.loop_late_s / outcome.real_s * 100, 3)
    row["host_noise_max_pct"] = spec.objective.host_noise_max_pct
    summary: dict[str, Any] = summarize(outcome, trial.slo)
    status, error_class = _point_status(summary)
    row.update(summary)
    sampled: list[tuple[str, list[dict[str, Any]]]] = []
    window = _modelled_span_s(outcome) if virtual else None
    for sampler in samplers:
        sampler_rows, columns = sampler.stop(window)
        sampled.append((sampler.table, sampler_rows))
        row.update(columns)
    row.update(status=status, error_class=error_class, finished_unix_ns=time.time_ns())
    row.update(diagnose(row))  # bottleneck verdict + evidence (grid/diagnosis/rules.py)
    requests = request_rows(outcome, config_hash=trial.plan.config_hash, trial_id=trial.trial_id, point_index=index,
                            repeat_index=row["repeat_index"])
    fired = timeout_fired_text(json.loads(summary.get("error_counts_json") or "{}"), summary["requests_total"],
                               load.stall_timeout_s, load.read_timeout_s)
    first_error = next((r for r in outcome.records if r.status != "ok"), None)
    failure = None
    if first_error is not None:
        failure = (f"point {index}: {summary['failed']} of {summary['requests_total']} requests failed, "
                   + (fired or f"first {first_error.error_class}: {first_error.error_message or ''}".rstrip(": ")))
    return PointRun(outcome.records, requests, sampled, fired, failure, log_offset, summary)


def _modelled_span_s(outcome: LoadPointResult) -> tuple[float, float] | None:
    """A virtual-clock point's modelled span, first send of any of its requests (warm-up included) to the last end
    (s); None when nothing was sent."""
    span = span_ns([*outcome.warmup_records, *outcome.records, *outcome.tail_records])
    return None if span is None else (span[0] / 1e9, span[1] / 1e9)


def classify_fault(trial: TrialContext, index: int, point: LoadPoint, row: dict[str, Any], measured: PointRun,
                   verdict: TrialVerdict, timeouts: TimeoutNotes,
                   form: PromptForm | None = None) -> tuple[TrialVerdict, str | None]:
    """Judge the server after load point ``index`` (:func:`broken_verdict`: a crash, a hang, NaN, a server that
    stopped serving) and add the timeout notes. Returns the verdict after the point and, when the server broke, its
    class (the remaining points are not run)."""
    load = trial.plan.load
    health = _judge_server(trial.server, trial.target, trial.spec.model.vocab_size, point.seed + 7919, index,
                           measured.records, measured.log_offset, measured.fired, form)
    timeouts.longest_wait_ms = max(timeouts.longest_wait_ms, _longest_wait_ms(measured.summary))
    notes = []
    note = timeout_run_note(level_name(row), measured.fired, health.check_ttft_ms if health.broken is None else None,
                            timeouts.longest_wait_ms or None, load.stall_timeout_s, load.read_timeout_s)
    kind = "fired" if measured.fired else "near"
    if note is not None and kind not in timeouts.given:
        timeouts.given.add(kind)
        log.warning("%s: %s", trial.plan.label, note)
        notes.append(note)
    stopped: str | None = None
    if health.broken is not None:
        cls, message = health.broken
        stopped = cls
        verdict = TrialVerdict(status_of(cls), cls,
                               "; ".join(x for x in (message, verdict.message) if x),
                               redact_secrets(trial.server.log_tail(LOG_TAIL_BYTES), trial.secrets))
    elif health.runtime is not None:  # it logged an error, yet answers: noted; the point's failures count
        notes.append(f"the server logged '{health.runtime[1]}' during load point {index} but answered a check "
                     "request afterwards")
    if notes:
        verdict = verdict.noted(*notes)
    return verdict, stopped


def finalize(run: TrialRun, dirty: str | None) -> list[LoadPointRow]:
    """Give every row of the trial its final verdict (in place: the rows ``on_point`` got see it too) and write the
    trial's Parquet files. ``dirty``: why the node was not clean after the stop (env_dirty; the verdict stands, the
    node is refused for later launches until it is clean). A trial whose server stayed healthy but whose every load
    point failed is ``failed`` (the points' request class, else ``all_points_failed``); a trial whose machinery was
    lost gets the infrastructure verdict (grid.server.infra.infra_verdict)."""
    from grid.cluster.node import node_columns

    trial, rows, tables = run.trial, run.rows, run.tables
    verdict = run.verdict if not dirty else run.verdict.noted(f"env_dirty after stop: {dirty}")
    for row in rows:  # trial-level verdict applies to every row of the trial
        row.update(verdict.columns())
    if verdict.status == "ok" and not any(r["status"] in ("ok", "partial") for r in rows):
        message = redact_secrets("; ".join(x for x in ("every load point failed", *run.point_errors,
                                                        verdict.message) if x), trial.secrets)[:2000]
        for row in rows:
            cls = row.get("error_class") or "all_points_failed"
            row.update(trial_status=status_of(cls), trial_error_class=cls,
                       trial_error_message=message)
    server = trial.server
    if server.lost is not None:
        infra_verdict(server.lost, server.lost_in, rows, tables)
    stored = [load_point_row({}, **row) for row in rows]
    for table in tables.values():  # every stored row names its node
        for row in table:
            row.update(node_columns(trial.node))
    write_trial(trial.spec.run_dir, trial.plan.config_hash, {**tables, "load_points": stored})
    return stored
