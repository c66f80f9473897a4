"""One trial, start to finish, without Ray: launch the configuration, probe it, run every load point on that one
launch, classify what went wrong, and record every request and every load point to Parquet.

``server`` is anything with the ServerSession interface (grid/server/session.py): the session itself in tests, a
Ray actor adapter in a sweep. The only clock read here is the wall clock stamped on finished rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from grid.config.schema import RunSpec
from grid.diagnosis.rules import diagnose
from grid.engines.base import Engine
from grid.loadgen.dataset import DatasetArgs, build_dataset, random_prompts
from grid.loadgen.records import RequestRecord
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync
from grid.metrics.loadpoint import SLO, load_point_status, slo_values, summarize
from grid.plan import TrialPlan, level_name, load_points
from grid.report.select import meets_slos
from grid.server.logparse import OUTPUT_ERROR_CLASSES, runtime_error
from grid.server.infra import GuardedServer, infra_verdict
from grid.server.session import redact_secrets
from grid.storage.parquet import write_trial
from grid.storage.schema import SCHEMA_VERSION, load_point_row, request_rows
from grid.search.levels import Capacity, LevelForecast, Levels
from grid.sweep.notes import timeout_fired_text, timeout_run_note
from grid.sweep.samplers import SamplerContext, make_samplers

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


def level_plan(spec: RunSpec, engine: Engine, plan: TrialPlan, best: float | None | str = "read") -> Levels:
    """The trial's load levels (grid/search/levels.py): the fixed points of :func:`load_points`, or with objective
    ``max_capacity`` the bisection over the request rate, bracketed by the twin's forecast capacity ``c`` widened by
    its error ``e`` (``search.twin_bound_error``): [c / (1 + e), c / (1 - e)] req/s (without a forecast, from the
    highest ``load.request_rate``, else 1 req/s). Early stopping (``search.early_stop``) gets the twin's per-level
    forecasts and ``best``, the best score recorded in the run directory (``"read"``: read it there; None: none).
    The twin-bound rule applies to higher-is-better objectives the twin forecasts per level (output tok/s, goodput)
    and never to an external engine (there is no hardware to model)."""
    from grid.report.select import OBJECTIVES
    from grid.search.predict import Forecast, capacity_bracket, forecast, level_forecasts

    load = plan.load
    obj = OBJECTIVES[spec.objective.kind]
    s = spec.search
    external = getattr(engine, "external", False)
    if spec.objective.kind == "max_capacity":
        f: Forecast | None = None if external else forecast(spec, plan, engine.version())
        c = f.value if f is not None else None
        start = max(load.request_rate, default=1.0) if c is None else None
        lo, hi = (start, start) if c is None else capacity_bracket(spec, c)

        def probe(index: int, rate: float) -> LoadPoint:
            return LoadPoint("rate", rate, load.prompts_for(rate), warmup_requests=load.warmup_requests,
                             seed=load.seed * 1000 + index, arrival=load.arrival, burstiness=load.burstiness,
                             max_concurrency=load.max_concurrency)

        return Levels([], capacity=Capacity(lo, hi, spec.objective.capacity_rel_tol,
                                            spec.objective.capacity_max_probes, probe))
    points = load_points(plan)
    bounded = s.early_stop and not external and obj.higher_is_better and obj.metric in TWIN_BOUND_METRICS
    forecasts = level_forecasts(spec, plan, engine.version()) if s.early_stop and not external else {}
    if not bounded:  # the durations still say what a skipped point saves
        forecasts = {k: LevelForecast(None, f.duration_s) for k, f in forecasts.items()}
    elif best == "read":
        best = recorded_best(spec, exclude=plan.config_hash)
    return Levels(points, early_stop=s.early_stop, forecasts=forecasts,
                  best=best if bounded and best != "read" else None, error=s.twin_bound_error, unit=obj.unit,
                  own_best=load.repeats == 1, metric=obj.metric if bounded else None)


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


def run_accuracy(spec: RunSpec, plan: TrialPlan, base_url: str, trial_id: str, time_scale: float
                 ) -> tuple[float | None, list[dict]]:
    """Send grid's accuracy prompts greedily; (exact-match share, rows of the ``accuracy`` table). An HTTP failure
    gives (None, []) and a warning: the load points will judge the server."""
    from grid.accuracy import ask, matches, prompts

    items = prompts()
    try:
        replies = ask(base_url, items, spec.engine.api_key, timeout_s=max(10.0, 600 / time_scale),
                      max_new_tokens=spec.accuracy.max_new_tokens)
    except OSError as err:
        log.warning("%s: accuracy prompts failed: %s", plan.label, err)
        return None, []
    rows = [{"schema_version": SCHEMA_VERSION, "config_hash": plan.config_hash, "trial_id": trial_id,
             "prompt_id": i.id, "kind": i.kind, "answer": i.answer, "reply": r[:200], "correct": matches(r, i.answer)}
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


def check_request(target: Target, vocab_size: int, seed: int) -> RequestRecord:
    """Send one short request (``CHECK_INPUT_TOKENS`` in, ``CHECK_OUTPUT_TOKENS`` out) and return its record; it
    fails with ``stall_timeout`` when no token comes within ``CHECK_TIMEOUT_S`` modelled seconds."""
    timeout = max(CHECK_TIMEOUT_S / target.time_scale, CHECK_MIN_REAL_S)
    prompts = random_prompts(1, CHECK_INPUT_TOKENS, CHECK_OUTPUT_TOKENS, 1.0, vocab_size, seed)
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
                   check: RequestRecord | None, runtime: tuple[str, str] | None, fired: str | None,
                   check_timeout_s: float = CHECK_TIMEOUT_S) -> tuple[str, str] | None:
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
        cls = runtime[0] if runtime is not None and runtime[0] not in OUTPUT_ERROR_CLASSES else "server_crash"
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
            f"with {check.error_class}: {(check.error_message or '')[:200]}".rstrip(": "))
    return (runtime[0], f"{runtime[1]} logged {where}; {told}") if runtime else ("server_broken", told)


@dataclass
class _Health:
    broken: tuple[str, str] | None
    runtime: tuple[str, str] | None
    check_ttft_ms: float | None


def _judge_server(server: Any, target: Target, vocab_size: int, seed: int, index: int, records: list[RequestRecord],
                  log_offset: int, fired: str | None) -> _Health:
    """After load point ``index``: read what the server logged meanwhile, send the check request when requests
    failed from the server or it logged a runtime error, and judge (:func:`broken_verdict`)."""
    failed = server_failures(records)
    check = None
    runtime = runtime_error(server.read_log(log_offset))
    if (failed or runtime is not None) and server.alive():
        check = check_request(target, vocab_size, seed)
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


def measure_trial(spec: RunSpec, engine: Engine, plan: TrialPlan, server: Any, *, trial_id: str,
                  on_point: Callable[[dict], None] | None = None, node: dict | None = None) -> list[dict]:
    """Run the trial and write its Parquet files. Returns the load-point rows (also written). The server is stopped
    on every way out (KeyboardInterrupt included). ``node``: where the server runs (grid.cluster.node.local_node of
    the server's process: ``node_id``, ``node_hostname``, ``gpu_uuids``); None: this process's node."""
    if node is None:
        from grid.cluster.node import local_node

        node = local_node()
    api_key = spec.engine.api_key
    server = GuardedServer(server)  # a lost actor ends the trial as an infrastructure failure (grid/server/infra.py)
    refusal = engine.refuse(plan)
    if refusal is not None:
        port, infra_notes = spec.engine.port or 0, []
        launch = engine.launch_plan(plan, port)
        result = {"status": "invalid", "error_class": "refused", "message": refusal, "startup_s": None,
                  "log_tail": "", "base_url": ""}
    else:
        port, infra_notes = server.pick_port(spec.engine.port)
        launch = engine.launch_plan(plan, port)
        log_path = f"{spec.run_dir}/logs/{plan.config_hash}.log"
        launch_ns = time.time_ns()
        result = server.launch(argv=launch.argv, env=launch.env, port=port, log_path=log_path,
                               time_scale=launch.time_scale, startup_time_scale=launch.startup_time_scale,
                               startup_timeout_s=spec.engine.startup_timeout_s,
                               api=spec.engine.api, model=engine.served_model(), api_key=api_key, label=plan.label,
                               probe_enabled=spec.probe.enabled)
        result.update(launch_unix_ns=launch_ns, ready_unix_ns=time.time_ns())  # for the report's timeline
        infra_notes += result.get("infra_retries") or []
        if result.get("port") and result["port"] != port:  # retried on another port: record the command that ran
            launch = engine.launch_plan(plan, result["port"])
    try:
        return _measure_launched(spec, engine, plan, server, trial_id, on_point, launch, result, infra_notes,
                                 refusal is None, node)
    finally:
        if refusal is None:
            server.stop(spec.engine.stop_grace_s)


def _measure_launched(spec: RunSpec, engine: Engine, plan: TrialPlan, server: Any, trial_id: str,
                      on_point: Callable[[dict], None] | None, launch, result: dict, infra_notes: list[str],
                      launched: bool, node: dict) -> list[dict]:
    from grid.cluster.node import node_columns

    load = plan.load
    api_key = spec.engine.api_key
    secrets = (api_key,) if api_key else ()
    info = server.server_info(api_key) if result["status"] == "ok" else None
    base = {
        "schema_version": SCHEMA_VERSION,
        "run_name": spec.name,
        "trial_id": trial_id,
        "config_hash": plan.config_hash,
        "config_json": plan.config_json,
        "label": plan.label,
        "command": launch.command,
        "engine": spec.engine.kind,
        "engine_version": engine.version(),
        "model": engine.served_model(),
        "hardware": spec.hardware.name,
        "trial_status": result["status"],
        "trial_error_class": result["error_class"],
        "trial_error_message": redact_secrets("; ".join([result["message"], *infra_notes]).strip("; "),
                                              secrets) or None,
        "startup_s": result["startup_s"],
        "launch_unix_ns": result.get("launch_unix_ns"),
        "ready_unix_ns": result.get("ready_unix_ns"),
        "log_tail": redact_secrets((result["log_tail"] or "")[-LOG_TAIL_BYTES:], secrets) or None,
        "input_len": load.input_len,
        "output_len": load.output_len,
        "time_scale": launch.time_scale,
        "kv_capacity_tokens": (info or {}).get("max_total_num_tokens"),
        "server_info_json": redact_secrets(json.dumps(info, sort_keys=True, default=str), secrets) if info else None,
        "probe_status": result.get("probe_status"),
        **node_columns(node),
        "gpu_uuids": node.get("gpu_uuids"),
    }
    levels = level_plan(spec, engine, plan) if result["status"] == "ok" else Levels(load_points(plan),
                                                                                    early_stop=False)
    per_repeat = max(1, len(levels.points) // load.repeats)
    rows: list[dict] = []
    point_errors: list[str] = []  # per failed load point: how many requests failed, and the first error
    tables: dict[str, list[dict]] = {"requests": []}
    role = accuracy_role(spec, plan) if result["status"] == "ok" else None
    if role is not None and spec.engine.api in ("generate",):
        share, tables["accuracy"] = run_accuracy(spec, plan, result["base_url"], trial_id, launch.time_scale)
        base.update(accuracy_exact_match=share, accuracy_role=role if share is not None else None)
    target = Target(result["base_url"], spec.engine.api, engine.served_model(), api_key, launch.time_scale)
    form = engine.prompt_form(load) if result["status"] == "ok" else None
    samplers = [] if result["status"] != "ok" else make_samplers(SamplerContext(
        server, result["base_url"], api_key, spec.engine.kind, launch.time_scale, plan.config_hash, trial_id,
        spec.hardware))
    slo = SLO(spec.objective.slo.ttft_ms, spec.objective.slo.tpot_ms, spec.objective.slo.e2e_ms,
              spec.objective.slo.percentile)
    stopped: str | None = None if result["status"] == "ok" else "not_run"
    longest_wait_ms = 0.0        # the longest wait for a token seen so far (modelled ms), for the timeout notes
    noted: set[str] = set()      # timeout notes already given ("fired", "near")
    for index, point, skip in levels:
        if stopped is not None and levels.capacity is not None:
            break  # the server broke: no further probe
        repeat = 0 if levels.capacity is not None else index // per_repeat  # capacity probes are not repeated
        row = {**base, "point_index": index, "repeat_index": repeat, "point_kind": point.kind,
               "point_value": point.value,
               "num_prompts": point.num_prompts, "max_concurrency": point.max_concurrency, "dataset": load.dataset}
        if stopped is not None:
            rows.append({**row, "status": "not_run", "error_class": base["trial_error_class"],
                         "finished_unix_ns": time.time_ns()})
            continue
        if skip is not None:
            log.info("%s: %s not run: %s", plan.label, level_name(row), skip[1])
            rows.append({**row, "status": "not_run", "error_class": skip[0], "skip_reason": skip[1],
                         "forecast_duration_s": levels.forecast_s(point), "finished_unix_ns": time.time_ns()})
            continue
        prompts = build_dataset(load.dataset, DatasetArgs(
            point.num_prompts + point.warmup_requests + point.wave_warmup + point.tail_prompts, load.input_len,
            load.output_len, load.range_ratio, spec.model.vocab_size, point.seed, load.dataset_path, form=form)).prompts
        log_offset = server.log_size()
        row["started_unix_ns"] = time.time_ns()
        for sampler in samplers:
            sampler.start(index)
        outcome = run_load_point_sync(
            target, point, prompts,
            read_timeout_s=load.read_timeout_s / launch.time_scale,
            stall_timeout_s=None if load.stall_timeout_s is None else load.stall_timeout_s / launch.time_scale)
        summary = summarize(outcome, slo)
        status, error_class = _point_status(summary)
        row.update(summary)
        for sampler in samplers:
            sampled, columns = sampler.stop()
            tables.setdefault(sampler.table, []).extend(sampled)
            row.update(columns)
        row.update(status=status, error_class=error_class, finished_unix_ns=time.time_ns())
        row.update(diagnose(row))  # bottleneck verdict + evidence (grid/diagnosis/rules.py)
        point_requests = request_rows(outcome, config_hash=plan.config_hash, trial_id=trial_id,
                                      point_index=index, repeat_index=repeat)
        tables["requests"] += point_requests
        judged = {**row, **slo_values(point_requests, row.get("duration_s"), slo)}  # as the report will judge it
        levels.record(point, status, meets_slos(judged, spec.objective.slo),
                      row.get(levels.metric) if levels.metric else None)
        fired = timeout_fired_text(json.loads(summary.get("error_counts_json") or "{}"), summary["requests_total"],
                                   load.stall_timeout_s, load.read_timeout_s)
        first_error = next((r for r in outcome.records if r.status != "ok"), None)
        if first_error is not None:
            point_errors.append(f"point {index}: {summary['failed']} of {summary['requests_total']} requests failed, "
                                + (fired or f"first {first_error.error_class}: {first_error.error_message or ''}"
                                   .rstrip(": ")))
        health = _judge_server(server, target, spec.model.vocab_size, point.seed + 7919, index, outcome.records,
                               log_offset, fired)
        longest_wait_ms = max(longest_wait_ms, _longest_wait_ms(summary))
        notes = []
        note = timeout_run_note(level_name(row), fired, health.check_ttft_ms if health.broken is None else None,
                                longest_wait_ms or None, load.stall_timeout_s, load.read_timeout_s)
        if note is not None and ("fired" if fired else "near") not in noted:
            noted.add("fired" if fired else "near")
            log.warning("%s: %s", plan.label, note)
            notes.append(note)
        if health.broken is not None:
            cls, message = health.broken
            stopped = cls
            base.update(trial_status="invalid" if cls in OUTPUT_ERROR_CLASSES else "failed", trial_error_class=cls,
                        trial_error_message="; ".join(x for x in (message, base["trial_error_message"]) if x),
                        log_tail=redact_secrets(server.log_tail(LOG_TAIL_BYTES), secrets))
        elif health.runtime is not None:  # it logged an error, yet answers: noted; the point's failures count
            notes.append(f"the server logged '{health.runtime[1]}' during load point {index} but answered a check "
                         "request afterwards")
        if notes:
            base["trial_error_message"] = "; ".join(x for x in (base["trial_error_message"], *notes) if x)
        for key in ("trial_status", "trial_error_class", "trial_error_message", "log_tail"):
            row[key] = base[key]  # the verdict so far (a crash or hang found at this point included)
        rows.append(row)
        if on_point is not None:
            on_point(row)
    if launched:
        dirty = server.stop(spec.engine.stop_grace_s)
        if dirty:  # the verdict stands; the node is refused for later launches until it is clean
            base["trial_error_message"] = "; ".join(x for x in (base["trial_error_message"],
                                                                 f"env_dirty after stop: {dirty}") if x)
    for row in rows:  # trial-level verdict applies to every row of the trial
        for key in ("trial_status", "trial_error_class", "trial_error_message", "log_tail"):
            row[key] = base[key]
    if base["trial_status"] == "ok" and not any(r["status"] in ("ok", "partial") for r in rows):
        message = redact_secrets("; ".join(x for x in ("every load point failed", *point_errors,
                                                        base["trial_error_message"]) if x), secrets)[:2000]
        for row in rows:
            row.update(trial_status="failed", trial_error_class=row.get("error_class") or "all_points_failed",
                       trial_error_message=message)
    if server.lost is not None:
        infra_verdict(server.lost, server.lost_in, rows, tables)
    rows = [load_point_row({}, **row) for row in rows]
    for table in tables.values():  # every stored row names its node
        for row in table:
            row.update(node_columns(node))
    write_trial(spec.run_dir, plan.config_hash, {**tables, "load_points": rows})
    return rows
