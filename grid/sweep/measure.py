"""One trial, start to finish, without Ray: launch the configuration, probe it, run every load point on that one
launch, classify what went wrong, and record every request and every load point to Parquet.

``server`` is anything with the ServerSession interface (grid/server/session.py): the session itself in tests, a
Ray actor adapter in a sweep. The only clock read here is the wall clock stamped on finished rows.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from grid.config.schema import RunSpec
from grid.diagnosis.rules import diagnose
from grid.engines.base import Engine
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync
from grid.metrics.loadpoint import SLO, load_point_status, summarize
from grid.server.session import redact_secrets
from grid.storage.parquet import write_trial
from grid.storage.schema import SCHEMA_VERSION, load_point_row, request_rows
from grid.sweep.samplers import SamplerContext, make_samplers
from grid.sweep.space import TrialPlan

HANG_CLASSES = {"stall_timeout", "read_timeout"}
LOG_TAIL_BYTES = 4000
EXIT_SETTLE_S = 2.0  # real seconds to wait for a server exit after a load point with failures


def load_points(plan: TrialPlan) -> list[LoadPoint]:
    """The trial's load points in order: concurrency levels, then request rates (seeded per point index)."""
    load = plan.load
    points = [LoadPoint("concurrency", float(c), load.prompts_for(c), warmup_requests=load.warmup_requests,
                        seed=load.seed * 1000 + i) for i, c in enumerate(load.concurrency)]
    n = len(points)
    points += [LoadPoint("rate", float(r), load.prompts_for(r), arrival=load.arrival, burstiness=load.burstiness,
                         warmup_requests=load.warmup_requests, seed=load.seed * 1000 + n + i)
               for i, r in enumerate(load.request_rate)]
    return points


def _point_status(summary: dict[str, Any]) -> tuple[str, str | None]:
    """(status, most frequent request error class) of a measured load point."""
    status = load_point_status(summary)
    errors = json.loads(summary.get("error_counts_json") or "{}")
    return status, (max(errors, key=errors.get) if errors else None)


def measure_trial(spec: RunSpec, engine: Engine, plan: TrialPlan, server: Any, *, trial_id: str,
                  on_point: Callable[[dict], None] | None = None) -> list[dict]:
    """Run the trial and write its Parquet files. Returns the load-point rows (also written). The server is stopped
    on every way out (KeyboardInterrupt included)."""
    api_key = spec.engine.api_key
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
        result = server.launch(argv=launch.argv, env=launch.env, port=port, log_path=log_path,
                               time_scale=launch.time_scale, startup_time_scale=launch.startup_time_scale,
                               startup_timeout_s=spec.engine.startup_timeout_s,
                               api=spec.engine.api, model=engine.served_model(), api_key=api_key, label=plan.label,
                               probe_enabled=spec.probe.enabled)
        infra_notes += result.get("infra_retries") or []
        if result.get("port") and result["port"] != port:  # retried on another port: record the command that ran
            launch = engine.launch_plan(plan, result["port"])
    try:
        return _measure_launched(spec, engine, plan, server, trial_id, on_point, launch, result, infra_notes,
                                 refusal is None)
    finally:
        if refusal is None:
            server.stop(spec.engine.stop_grace_s)


def _measure_launched(spec: RunSpec, engine: Engine, plan: TrialPlan, server: Any, trial_id: str,
                      on_point: Callable[[dict], None] | None, launch, result: dict, infra_notes: list[str],
                      launched: bool) -> list[dict]:
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
        "log_tail": redact_secrets((result["log_tail"] or "")[-LOG_TAIL_BYTES:], secrets) or None,
        "input_len": load.input_len,
        "output_len": load.output_len,
        "time_scale": launch.time_scale,
        "kv_capacity_tokens": (info or {}).get("max_total_num_tokens"),
        "server_info_json": redact_secrets(json.dumps(info, sort_keys=True, default=str), secrets) if info else None,
        "probe_status": result.get("probe_status"),
    }
    points = load_points(plan)
    rows: list[dict] = []
    point_errors: list[str] = []  # per failed load point: how many requests failed, and the first error
    tables: dict[str, list[dict]] = {"requests": []}
    target = Target(result["base_url"], spec.engine.api, engine.served_model(), api_key, launch.time_scale)
    form = engine.prompt_form(load) if result["status"] == "ok" else None
    samplers = [] if result["status"] != "ok" else make_samplers(SamplerContext(
        server, result["base_url"], api_key, spec.engine.kind, launch.time_scale, plan.config_hash, trial_id,
        spec.hardware))
    slo = SLO(spec.objective.slo.ttft_ms, spec.objective.slo.tpot_ms, spec.objective.slo.e2e_ms,
              spec.objective.slo.percentile)
    stopped: str | None = None if result["status"] == "ok" else "not_run"
    for index, point in enumerate(points):
        row = {**base, "point_index": index, "point_kind": point.kind, "point_value": point.value,
               "num_prompts": point.num_prompts}
        if stopped is not None:
            rows.append({**row, "status": "not_run", "error_class": base["trial_error_class"],
                         "finished_unix_ns": time.time_ns()})
            continue
        prompts = form.random(point.num_prompts + point.warmup_requests, load.input_len, load.output_len,
                              load.range_ratio, point.seed)
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
        tables["requests"] += request_rows(outcome, config_hash=plan.config_hash, trial_id=trial_id,
                                           point_index=index)
        first_error = next((r for r in outcome.records if r.status != "ok"), None)
        if first_error is not None:
            point_errors.append(f"point {index}: {summary['failed']} of {summary['requests_total']} requests failed, "
                                f"first {first_error.error_class}: {first_error.error_message or ''}".rstrip(": "))
        if status != "ok" and server.alive():
            server.wait_exit(EXIT_SETTLE_S)  # a crash surfaces to the client before the exit is recorded
        if not server.alive():
            code = server.exit_code()
            tail = redact_secrets(server.log_tail(LOG_TAIL_BYTES), secrets)
            stopped = "server_crash"
            row.update(status="failed" if status == "failed" else status)
            base.update(trial_status="failed", trial_error_class="server_crash",
                        trial_error_message=f"server exited with code {code} during load point {index}",
                        log_tail=tail)
        elif status == "failed" and error_class in HANG_CLASSES:
            stopped = "server_hang"
            base.update(trial_status="failed", trial_error_class="server_hang",
                        trial_error_message=f"no token progress during load point {index} while the server "
                                            "process was alive (health endpoints are not trusted for this)",
                        log_tail=redact_secrets(server.log_tail(LOG_TAIL_BYTES), secrets))
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
        message = redact_secrets("every load point failed; " + "; ".join(point_errors), secrets)[:2000]
        for row in rows:
            row.update(trial_status="failed", trial_error_class=row.get("error_class") or "all_points_failed",
                       trial_error_message=message)
    rows = [load_point_row({}, **row) for row in rows]
    write_trial(spec.run_dir, plan.config_hash, {**tables, "load_points": rows})
    return rows
