"""Arrow schemas of grid's two Parquet tables, and the rows that fill the requests table.

* ``requests``: one row per measured request: the raw timeline (unscaled ``perf_counter_ns`` stamps, so any
  metric convention can be recomputed) plus the derived per-request metrics (modelled ms).
* ``load_points``: one row per load point: orchestration columns filled by the trial, then the metric columns
  of ``grid.metrics.loadpoint.METRIC_COLUMNS``.

Every field carries ``unit`` and ``description`` metadata; both schemas carry ``schema_version`` in their
metadata. Evolve them only by adding nullable columns and bumping ``SCHEMA_VERSION``. Build tables with
``pa.Table.from_pylist(rows, schema=...)`` (not via pandas). Every metric column is nullable: null means "not
measured", never 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from grid.loadgen.records import ERROR_CLASSES
from grid.metrics.loadpoint import METRIC_COLUMNS, SLO_COLUMNS
from grid.metrics.request import request_metrics

if TYPE_CHECKING:
    from grid.loadgen.runner import LoadPointResult
    from grid.storage.rows import JudgedPointRow, LoadPointRow  # generated from this module: never imported by it

SCHEMA_VERSION: int = 15  # 2: server metrics, GPU telemetry and bottleneck columns + their tables; 3: slot wait,
# decode_error, max_concurrency, dataset, srv_gauges_found and probe_status columns; 4: node_id, node_hostname in every
# table, gpu_uuids in load_points, gpu_uuid in gpu_telemetry; 5: skip_reason, forecast_duration_s in load_points;
# 6: window_kind, warmup_requests_run and tail_requests_run in load_points (steady-state closed loops); 7: cpu_graph,
# cached_token in server_log (SGLang's CPU engine); 8: early_stop_objective, twin_behind_pct,
# twin_delivery_lag_ms and client_lag_pct in load_points; 9: failed_context_exceeded in load_points; 10: speculative
# decoding's acceptance: accept_len, accept_rate in server_log, spec_accept_* in server_metrics,
# server_accept_len_mean and srv_spec_accept_length_mean in load_points; 11: prefix caching and sessions:
# cached_tokens, session_index, turn_index in requests, total_cached_tokens, cache_hit_rate and
# server_cache_hit_rate in load_points; 12: host_noise_max_pct in load_points; 13: twin_behind_pct and
# twin_delivery_lag_ms no longer recorded (kept for earlier rows: the twin's virtual clock cannot fall behind);
# 14: deployment_json, srv_kv_transfer_ms_mean and srv_kv_transfers in load_points, kv_transfer_ms_sum and
# kv_transfer_ms_count in server_metrics (deployments of several servers); 15: deployment_servers_json in load_points

#: Generated text is stored up to this many characters (``text_truncated`` says when it was cut).
TEXT_MAX_CHARS: int = 2048

_TYPES: dict[str, pa.DataType] = {
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "list<int64>": pa.list_(pa.int64()),
    "list<int32>": pa.list_(pa.int32()),
    "list<float64>": pa.list_(pa.float64()),
    "list<string>": pa.list_(pa.string()),
}
_TYPE_NAMES: dict[pa.DataType, str] = {t: name for name, t in _TYPES.items()}

#: Where the row was measured (grid/cluster/node.py): every table carries them.
NODE_COLUMNS: list[tuple[str, str, str, str]] = [
    ("node_id", "string", "", "Ray node id of the node whose server was measured (null: outside Ray, e.g. an "
                              "external server)"),
    ("node_hostname", "string", "", "host name of that node (of the external server's URL for engine=openai)"),
]


def _schema(columns: list[tuple[str, str, str, str]], table: str) -> pa.Schema:
    fields = [
        pa.field(name, _TYPES[typ], nullable=True, metadata={"unit": unit, "description": desc})
        for name, typ, unit, desc in columns
    ]
    return pa.schema(fields, metadata={"schema_version": str(SCHEMA_VERSION), "table": table})


REQUEST_COLUMNS: list[tuple[str, str, str, str]] = [
    ("schema_version", "int32", "", "version of this schema"),
    ("config_hash", "string", "", "hash of the server configuration"),
    ("trial_id", "string", "", "Tune trial id"),
    ("point_index", "int32", "", "index of the load point within the trial"),
    ("repeat_index", "int32", "", "which repeat of its load level the point is (0-based; load.repeats)"),
    ("request_index", "int32", "", "index of the request within the load point (send order for closed loop)"),
    ("prompt_index", "int32", "", "index of the prompt in the dataset"),
    ("api", "string", "", "endpoint kind: generate | completions | chat"),
    ("stream", "bool", "flag", "the response was streamed"),
    ("status", "string", "", "ok | failed"),
    ("error_class", "string", "",
     f"why it failed: {', '.join(ERROR_CLASSES)} (the vocabulary below); null when ok"),
    ("error_message", "string", "", "error detail (truncated); null when ok"),
    ("http_status", "int32", "", "HTTP status code (null: no response)"),
    ("finish_reason", "string", "", "finish reason reported by the server (stop, length, abort, ...)"),
    ("scheduled_perf_ns", "int64", "ns", "when the request was due (perf_counter_ns, real, unscaled)"),
    ("scheduled_offset_ns", "int64", "ns", "scheduled time minus the window start (real ns, unscaled)"),
    ("slot_wait_ns", "int64", "ns",
     "time spent waiting for a free client slot (open loop with max_concurrency; real, unscaled); null without a cap"),
    ("send_perf_ns", "int64", "ns", "when the request was sent (perf_counter_ns, real, unscaled)"),
    ("send_unix_ns", "int64", "ns", "wall-clock send time, for correlation with logs only"),
    ("end_perf_ns", "int64", "ns", "when the response ended ([DONE], EOF or the error), perf_counter_ns"),
    ("chunk_perf_ns", "list<int64>", "ns",
     "arrival time of every streamed data event except [DONE] (role, finish and usage events included)"),
    ("chunk_tokens", "list<int32>", "tokens", "generated tokens carried by each event of chunk_perf_ns"),
    ("first_token_perf_ns", "int64", "ns",
     "arrival of the first event carrying a generated token of any kind (reasoning_content included)"),
    ("first_content_perf_ns", "int64", "ns", "arrival of the first event carrying a content (non-reasoning) token"),
    ("last_token_perf_ns", "int64", "ns", "arrival of the last event carrying a generated token"),
    ("done_marker", "bool", "flag", "the [DONE] marker was received"),
    ("usage_prompt_tokens", "int64", "tokens", "prompt tokens reported by the server (usage / meta_info)"),
    ("usage_completion_tokens", "int64", "tokens", "final completion tokens reported by the server"),
    ("cached_tokens", "int64", "tokens",
     "prompt tokens the server reused from its prefix cache (SGLang meta_info.cached_tokens; OpenAI "
     "usage.prompt_tokens_details.cached_tokens, which SGLang sends with --enable-cache-report); null: not reported"),
    ("session_index", "int32", "", "load.dataset=sessions: the conversation this turn belongs to (null otherwise)"),
    ("turn_index", "int32", "", "load.dataset=sessions: the turn within its conversation, 0-based (its prompt "
     "carries every earlier turn's message and answer)"),
    ("max_tokens", "int32", "tokens", "requested maximum output tokens"),
    ("planned_input_len", "int32", "tokens", "prompt length planned by the dataset (estimate for text)"),
    ("input_tokens", "int64", "tokens", "prompt tokens: server usage, else planned"),
    ("input_tokens_source", "string", "", "usage | planned"),
    ("output_tokens", "int64", "tokens", "generated tokens: server usage, else stream count; never the requested max"),
    ("output_tokens_source", "string", "", "usage | stream_count"),
    ("content_null", "bool", "flag", "tokens were generated but no content text (reasoning only / content null)"),
    ("text", "string", "", f"generated content text, first {TEXT_MAX_CHARS} characters"),
    ("text_truncated", "bool", "flag", "text was cut to the first characters"),
    ("ttft_ms", "float64", "ms", "send to first token event of any kind (a reasoning model's reasoning_content "
     "counts), modelled ms (null: no token / not streamed)"),
    ("ttfo_ms", "float64", "ms", "send to first output content token event (chat delta.content, not "
     "reasoning_content; equals ttft_ms for non-reasoning output), modelled ms"),
    ("tpot_ms", "float64", "ms", "(e2e - TTFT) / (output_tokens - 1), modelled ms; ok requests, > 1 token"),
    ("e2e_ms", "float64", "ms", "send to last token event (non-streamed: body read), modelled ms; ok requests"),
    ("client_queue_ms", "float64", "ms", "scheduled to actual send, modelled ms (includes slot_wait_ms)"),
    ("slot_wait_ms", "float64", "ms",
     "time spent waiting for a free client slot, modelled ms (open loop with max_concurrency); null without a cap"),
    ("itl_tokens_ms", "list<float64>", "ms",
     "per-token ITL: each chunk gap split over its tokens (first event's extra tokens 0 ms); ok requests"),
    ("chunk_gaps_ms", "list<float64>", "ms", "gaps between consecutive token-carrying events, modelled ms"),
    ("time_scale", "float64", "modelled s / real s", "time scale of the server; *_ms = real duration x time_scale"),
    *NODE_COLUMNS,
]

LOAD_POINT_ORCHESTRATION_COLUMNS: list[tuple[str, str, str, str]] = [
    ("schema_version", "int32", "", "version of this schema"),
    ("run_name", "string", "", "name of the sweep run"),
    ("trial_id", "string", "", "Tune trial id"),
    ("config_hash", "string", "", "hash of the server configuration"),
    ("config_json", "string", "json", "full server configuration"),
    ("label", "string", "", "short human name of the configuration"),
    ("deployment_json", "string", "json", "the deployment of a configuration of several servers: its role groups "
     "(role, count, tp, attn_dp, ep, settings) and router policy (grid/topology/deployment.py); null: one server"),
    ("deployment_servers_json", "string", "json", "each server of a deployment grid launched (engine=sglang): "
     "[{server, node, url, requests}]: its name ('aggregated 1', 'prefill 0'), the host name of its node, where it "
     "served and the requests it finished during the load point (its num_requests_total counter: the point's warm-up "
     "and tail requests included); null: one server, or the twin (one process plays the deployment)"),
    ("command", "string", "", "server command line, secrets redacted"),
    ("engine", "string", "", "engine kind (sim | sglang | openai)"),
    ("engine_version", "string", "", "engine version: SGLang's release; an external server's as it reports it "
     "(e.g. 'vllm 0.32.0'), 'external' when it does not say"),
    ("model", "string", "", "model name requests carry (an external server's: the id its /v1/models serves)"),
    ("probe_status", "string", "", "correctness probe: passed | failed | skipped (probe.enabled=false) | null "
     "(not launched)"),
    ("hardware", "string", "", "hardware description"),
    ("trial_status", "string", "", "ok | failed | invalid | skipped"),
    ("trial_error_class", "string", "", "why the trial failed (startup_oom, server_crash, ...)"),
    ("trial_error_message", "string", "", "trial error detail"),
    ("startup_s", "float64", "s", "server start to ready (modelled s; the twin: its own modelled startup, "
                                  "without host latency)"),
    ("launch_unix_ns", "int64", "ns", "wall-clock time the server launch began (null: not launched, e.g. refused)"),
    ("ready_unix_ns", "int64", "ns",
     "wall-clock time launch, readiness wait and correctness probe ended (whatever their outcome)"),
    ("log_tail", "string", "", "last lines of the server log"),
    ("point_index", "int32", "", "index of the load point within the trial"),
    ("repeat_index", "int32", "",
     "which repeat of its load level the point is (0-based; load.repeats measures each level that many times)"),
    ("point_kind", "string", "", "concurrency (closed loop) | rate (open loop) | trace (open loop, replayed timestamps)"),
    ("point_value", "float64", "",
     "concurrency (requests), rate (req/s, modelled) or trace speed (1.0: the trace's own timestamps)"),
    ("max_concurrency", "int64", "requests",
     "open loop: cap on requests in flight (a request waits on the client for a slot: slot_wait_*); null: no cap"),
    ("dataset", "string", "", "prompt source: random | sharegpt | trace (grid/loadgen/dataset.py DATASETS)"),
    ("num_prompts", "int32", "requests", "measured requests planned"),
    ("input_len", "int32", "tokens", "dataset input length setting"),
    ("output_len", "int32", "tokens", "dataset output length setting"),
    ("status", "string", "", "load point status: ok | failed | partial | not_run"),
    ("error_class", "string", "", "load point error class"),
    ("time_scale", "float64", "modelled s / real s", "time scale of the server; *_ms = real duration x time_scale"),
    ("started_unix_ns", "int64", "ns", "wall-clock time the load point began (warm-up requests included)"),
    ("finished_unix_ns", "int64", "ns", "wall-clock time the load point finished"),
    ("kv_capacity_tokens", "int64", "tokens", "KV pool size the server reported (/server_info max_total_num_tokens)"),
    ("accuracy_exact_match", "float64", "fraction",
     "share of grid's accuracy prompts the configuration answered exactly (grid/accuracy; null: not run)"),
    ("accuracy_role", "string", "",
     "baseline (computes like the sweep's base) | differs: the settings that change its numerics; null: not run"),
    ("server_gen_tok_per_s_peak", "float64", "tok/s",
     "highest 'gen throughput' in the server's Decode batch log lines during the load point (modelled time)"),
    ("server_running_at_peak", "int64", "requests", "#running-req on that log line"),
    ("server_accept_len_mean", "float64", "tokens",
     "speculative decoding's acceptance length (tokens per verify iteration, the bonus token included): mean accept "
     "len of the Decode batch lines logged during the load point (null: no speculative decoding)"),
    ("server_cache_hit_rate", "float64", "fraction",
     "prefix cache hit rate of the Prefill batch lines logged during the load point: sum #cached-token / sum "
     "(#new-token + #cached-token) (null: no prefill line)"),
    ("server_info_json", "string", "json", "the server's /server_info after it became ready (version, "
     "max_total_num_tokens, resolved args)"),
    *NODE_COLUMNS,
    ("gpu_uuids", "list<string>", "",
     "NVML UUIDs of the GPUs the server's node gave it (GPU-...); null where there is no NVML (the twin)"),
]

#: Load-point columns filled by the samplers (grid/sweep/samplers.py) and the diagnosis (grid/diagnosis/rules.py).
LOAD_POINT_SAMPLER_COLUMNS: list[tuple[str, str, str, str]] = [
    ("srv_scrapes", "int64", "", "number of /metrics scrapes during the load point (null: /metrics not served)"),
    ("srv_gauges_found", "int64", "",
     "how many of the expected gauges (grid/server/metrics_scrape.py GAUGES, any spelling of SGLANG_PREFIXES) the "
     "scrapes named; 0 with srv_scrapes > 0: /metrics answered without them, so the other srv_* columns are null"),
    ("srv_running_mean", "float64", "requests",
     "mean sglang:num_running_reqs (or sglang_num_running_reqs) over the scrapes"),
    ("srv_running_max", "float64", "requests", "largest sglang:num_running_reqs scraped"),
    ("srv_queue_mean", "float64", "requests", "mean sglang:num_queue_reqs over the scrapes"),
    ("srv_queue_max", "float64", "requests", "largest sglang:num_queue_reqs scraped"),
    ("srv_token_usage_mean", "float64", "fraction", "mean sglang:token_usage (KV pool fraction in use)"),
    ("srv_token_usage_max", "float64", "fraction", "largest sglang:token_usage scraped"),
    ("srv_gen_tok_per_s_mean", "float64", "tok/s", "mean sglang:gen_throughput over the scrapes (modelled time)"),
    ("srv_cache_hit_rate", "float64", "fraction", "last sglang:cache_hit_rate scraped"),
    ("srv_spec_accept_length_mean", "float64", "tokens",
     "mean sglang:spec_accept_length over the scrapes (speculative decoding; null: not served or no speculation)"),
    ("srv_kv_transfer_ms_mean", "float64", "ms", "mean KV transfer between the first and the last scrape "
     "(sglang:kv_transfer_latency_ms: the change of its sum over the change of its count; prefill-decode deployments)"),
    ("srv_kv_transfers", "float64", "transfers", "KV transfers between the first and the last scrape"),
    ("gpu_telemetry_source", "string", "", "nvml (measured) | modelled (the twin's PerfModel); null: none"),
    ("gpu_samples", "int64", "", "telemetry samples taken during the load point"),
    ("gpu_count_sampled", "int64", "GPUs", "GPUs sampled"),
    ("gpu_sm_util_mean", "float64", "fraction", "mean fraction of time a kernel ran (NVML utilization.gpu)"),
    ("gpu_mem_bw_util_mean", "float64", "fraction",
     "mean memory utilisation (NVML utilization.memory: time device memory was read/written; modelled: bytes/peak)"),
    ("gpu_power_w_mean", "float64", "W", "mean board power"),
    ("gpu_power_limit_w", "float64", "W", "enforced power limit (modelled: TDP)"),
    ("gpu_power_frac_mean", "float64", "fraction", "mean board power / power limit"),
    ("gpu_memory_used_gb_max", "float64", "GB", "largest device memory in use on any GPU (1e9 bytes)"),
    ("gpu_sm_clock_mhz_mean", "float64", "MHz", "mean SM clock"),
    ("gpu_pcie_bytes_per_s", "float64", "B/s", "busiest GPU's mean PCIe traffic, larger of TX and RX"),
    ("gpu_pcie_capacity_bytes_per_s", "float64", "B/s", "PCIe link capacity per direction (current gen x width)"),
    ("gpu_nvlink_bytes_per_s", "float64", "B/s", "mean NVLink traffic per GPU per direction (modelled only)"),
    ("gpu_nvlink_capacity_bytes_per_s", "float64", "B/s", "NVLink capacity used for the ratio (modelled only)"),
    ("gpu_topology_json", "string", "json",
     "the node's GPU topology (count, P2P matrix, NVLink/PCIe, nvidia-smi topo -m), read once per node"),
    ("bottleneck", "string", "",
     "what limits throughput: client-bound | kv-capacity/queue-bound | interconnect-bound | memory-bandwidth-bound | "
     "compute-bound | launch/CPU-overhead-bound | latency-bound | unknown (grid/diagnosis/rules.py); null: nothing "
     "measured"),
    ("bottleneck_evidence", "string", "", "the evidence behind the verdict, then the reason"),
    ("skip_reason", "string", "", "why a not_run point was skipped by early stopping (error_class early_stop_slo | "
     "early_stop_twin_bound, grid/search/levels.py); null otherwise"),
    ("forecast_duration_s", "float64", "s", "a point skipped by early stopping: the twin's forecast of its modelled "
     "duration (the time saved; summary.json early_stop_gpu_seconds_saved); null otherwise"),
    ("twin_behind_pct", "float64", "%", "recorded up to schema version 12 only (null since): how far the wall-clock "
     "twin fell behind its own clock while sending the point, in percent of its real time; above "
     "grid.metrics.hostnoise.HOST_NOISE_MAX_PCT such a point is host noise"),
    ("client_lag_pct", "float64", "%", "how late the load generator's own event loop ran while sending the point, "
     "in percent of the point's real time (grid/loadgen/looplag.py): a starved client sends and reads late, so every "
     "time it measures grows; above grid.metrics.hostnoise.HOST_NOISE_MAX_PCT the point is host noise"),
    ("host_noise_max_pct", "float64", "%", "the bound the point was judged by (objective.host_noise_max_pct when it "
     "was measured): above it, client_lag_pct (or an earlier row's twin_behind_pct) makes the point host noise; "
     "null: recorded before the column, judged by grid.metrics.hostnoise.HOST_NOISE_MAX_PCT"),
    ("twin_delivery_lag_ms", "float64", "ms", "recorded up to schema version 12 only (null since): how late the "
     "wall-clock twin's deliveries of the point were on average against the schedule each request's arrival set "
     "(modelled ms)"),
    ("early_stop_objective", "string", "", "a point skipped by early stopping: the objective it was judged by (kind "
     "and SLOs, e.g. `max_goodput; p99 TTFT <= 1500 ms`); a report under another objective counts the point as not "
     "measured and a resume measures its configuration again (grid/sweep/rerun.py); null otherwise"),
]

#: ``parquet/rejudged/rejudged.parquet``: the SLO-dependent values the latest report judged every load point by
#: (grid/report: the current objective's SLOs applied to the stored requests). ``load_points`` keeps the values of
#: the SLOs each point was measured under; this table is rewritten by every report.
REJUDGED_COLUMNS: list[tuple[str, str, str, str]] = [
    ("config_hash", "string", "", "hash of the server configuration"),
    ("point_index", "int32", "", "index of the load point within the trial"),
    ("objective_kind", "string", "", "the objective the report ranked by (max_output_throughput, ...)"),
    *[c for c in METRIC_COLUMNS if c[0] in SLO_COLUMNS],
    ("slo_ttft_at_pct_ms", "float64", "ms", "TTFT at the SLO's percentile over ok requests (null: no TTFT SLO)"),
    ("slo_tpot_at_pct_ms", "float64", "ms", "TPOT at the SLO's percentile over ok requests (null: no TPOT SLO)"),
    ("slo_e2e_at_pct_ms", "float64", "ms", "E2E at the SLO's percentile over ok requests (null: no E2E SLO)"),
    ("slo_unjudged", "string", "", "why the SLOs could not be judged (stored requests missing); null: judged"),
]

#: ``parquet/accuracy``: one row per accuracy prompt sent to a configuration (grid/accuracy/prompts.yaml, greedy).
ACCURACY_COLUMNS: list[tuple[str, str, str, str]] = [
    ("schema_version", "int32", "", "version of this schema"),
    ("config_hash", "string", "", "hash of the server configuration"),
    ("trial_id", "string", "", "Tune trial id"),
    ("prompt_id", "string", "", "id of the prompt in grid/accuracy/prompts.yaml"),
    ("kind", "string", "", "arithmetic | fact | code"),
    ("answer", "string", "", "the expected answer"),
    ("reply", "string", "", "what the server generated (temperature 0), first 200 characters"),
    ("correct", "bool", "flag", "the reply's first line starts with the answer (grid.accuracy.matches)"),
]

REQUESTS_SCHEMA: pa.Schema = _schema(REQUEST_COLUMNS, "requests")
ACCURACY_SCHEMA: pa.Schema = _schema(ACCURACY_COLUMNS, "accuracy")
LOAD_POINTS_SCHEMA: pa.Schema = _schema(
    LOAD_POINT_ORCHESTRATION_COLUMNS + METRIC_COLUMNS + LOAD_POINT_SAMPLER_COLUMNS, "load_points")
REJUDGED_SCHEMA: pa.Schema = _schema(REJUDGED_COLUMNS, "rejudged")
#: The columns of ``rejudged`` that ``load_points`` lacks: what the report adds to a load point it judges.
JUDGED_ONLY_COLUMNS: tuple[str, ...] = tuple(n for n in REJUDGED_SCHEMA.names if n not in LOAD_POINTS_SCHEMA.names)
_POINT_COLUMNS: frozenset[str] = frozenset(LOAD_POINTS_SCHEMA.names + list(JUDGED_ONLY_COLUMNS))


def request_rows(result: LoadPointResult, *, config_hash: str, trial_id: str, point_index: int,
                 repeat_index: int = 0) -> list[dict[str, Any]]:
    """Rows matching ``REQUESTS_SCHEMA``, one per measured request (failed ones included).

    Raises ``grid.metrics.request.TimingError`` on an impossible timeline.
    """
    rows = []
    for r in result.records:
        m = request_metrics(r, result.time_scale)
        rows.append({
            "schema_version": SCHEMA_VERSION, "config_hash": config_hash, "trial_id": trial_id,
            "point_index": point_index, "repeat_index": repeat_index, "request_index": r.request_index,
            "prompt_index": r.prompt_index,
            "api": r.api, "stream": r.stream, "status": r.status, "error_class": r.error_class,
            "error_message": r.error_message, "http_status": r.http_status, "finish_reason": r.finish_reason,
            "scheduled_perf_ns": r.scheduled_perf_ns, "scheduled_offset_ns": r.scheduled_offset_ns,
            "slot_wait_ns": r.slot_wait_ns,
            "send_perf_ns": r.send_perf_ns, "send_unix_ns": r.send_unix_ns, "end_perf_ns": r.end_perf_ns,
            "chunk_perf_ns": list(r.chunk_perf_ns), "chunk_tokens": list(r.chunk_tokens),
            "first_token_perf_ns": r.first_token_perf_ns, "first_content_perf_ns": r.first_content_perf_ns,
            "last_token_perf_ns": r.last_token_perf_ns, "done_marker": r.done_marker,
            "usage_prompt_tokens": r.usage_prompt_tokens, "usage_completion_tokens": r.usage_completion_tokens,
            "cached_tokens": r.cached_tokens, "session_index": r.session,
            "turn_index": r.turn if r.session is not None else None,
            "max_tokens": r.max_tokens, "planned_input_len": r.planned_input_len,
            "input_tokens": r.input_tokens, "input_tokens_source": r.input_tokens_source,
            "output_tokens": r.output_tokens, "output_tokens_source": r.output_tokens_source,
            "content_null": r.content_null, "text": r.text[:TEXT_MAX_CHARS],
            "text_truncated": len(r.text) > TEXT_MAX_CHARS,
            "ttft_ms": m.ttft_ms, "ttfo_ms": m.ttfo_ms, "tpot_ms": m.tpot_ms, "e2e_ms": m.e2e_ms,
            "client_queue_ms": m.client_queue_ms, "slot_wait_ms": m.slot_wait_ms,
            "itl_tokens_ms": m.itl_tokens_ms, "chunk_gaps_ms": m.chunk_gaps_ms,
            "time_scale": result.time_scale,
        })
    return rows


def load_point_row(metrics: dict[str, Any], **columns: Any) -> LoadPointRow:
    """A ``LOAD_POINTS_SCHEMA`` row: ``metrics`` (from ``summarize``) plus orchestration ``columns``; the rest null.

    Unknown keys are an error (``KeyError`` naming them), so a typo cannot silently drop a column.
    """
    names = set(LOAD_POINTS_SCHEMA.names)
    unknown = (set(metrics) | set(columns)) - names
    if unknown:
        raise KeyError(f"not columns of LOAD_POINTS_SCHEMA: {sorted(unknown)}")
    row: dict[str, Any] = dict.fromkeys(LOAD_POINTS_SCHEMA.names)
    row["schema_version"] = SCHEMA_VERSION
    row.update(metrics)
    row.update(columns)
    return cast("LoadPointRow", row)


def judged_point_row(metrics: dict[str, Any], **columns: Any) -> JudgedPointRow:
    """A load point as the report judges it (:class:`JudgedPointRow`): :func:`load_point_row` plus the columns only
    ``REJUDGED_SCHEMA`` has (``JUDGED_ONLY_COLUMNS``), null unless given. Raises ``KeyError`` for other keys."""
    judged = {k: columns.pop(k) for k in JUDGED_ONLY_COLUMNS if k in columns}
    row: dict[str, Any] = dict(load_point_row(metrics, **columns))
    row.update(dict.fromkeys(JUDGED_ONLY_COLUMNS), **judged)
    return cast("JudgedPointRow", row)


def point_value(row: LoadPointRow, column: str) -> Any:
    """``row[column]`` for a column named at run time (an SLO's metric, a Pareto axis): the static type check sees
    only names written in the code, so this checks the name against ``LOAD_POINTS_SCHEMA`` (and the judged columns)
    and raises ``KeyError`` naming the closest columns for one it does not hold."""
    if column not in _POINT_COLUMNS:
        import difflib

        near = difflib.get_close_matches(column, sorted(_POINT_COLUMNS), n=3)
        raise KeyError(f"{column!r} is not a load_points column" + (f"; did you mean {', '.join(near)}?" if near
                                                                    else " (docs/schema.md lists them)"))
    return row.get(column)


#: Columns every trial fills in every row it writes (grid/sweep/measure.py ``finalize``, grid/cluster/lost.py): the
#: typed row declares them not null.
IDENTITY_COLUMNS: tuple[str, ...] = ("config_hash", "label", "point_index", "point_kind", "point_value", "status",
                                     "trial_status")

_PY_TYPES: dict[str, str] = {"int32": "int", "int64": "int", "float64": "float", "bool": "bool", "string": "str",
                             "list<int64>": "list[int]", "list<int32>": "list[int]", "list<float64>": "list[float]",
                             "list<string>": "list[str]"}


def rows_module() -> str:
    """The source of grid/storage/rows.py: ``LoadPointRow``, a ``TypedDict`` with one key per ``load_points`` column
    (every value ``T | None``, null being "not measured", but the ``IDENTITY_COLUMNS`` every trial fills), so a
    misspelt column name in code fails the type check
    (``python -m grid.docs`` writes it; tests/storage/test_schema.py fails while it is stale)."""
    lines = ['"""Typed rows of the ``load_points`` table, generated from grid/storage/schema.py by',
             '``python -m grid.docs`` (do not edit).',
             "",
             "Every row the pipeline writes or reads holds every column (:func:`grid.storage.schema.load_point_row`,",
             ":func:`grid.storage.parquet.read_points`), null where not measured. Read a column named in code as",
             "``row[\"ttft_p99_ms\"]`` (a misspelt name fails mypy) and one named at run time with",
             ":func:`grid.storage.schema.point_value` (a misspelt name raises).",
             '"""',
             "",
             "from __future__ import annotations",
             "",
             "from typing import TypedDict",
             "",
             "",
             "class LoadPointRow(TypedDict):",
             '    """One row of ``load_points`` (docs/schema.md gives each column\'s unit and meaning)."""',
             ""]
    lines += [f"    {f.name}: {_PY_TYPES[_TYPE_NAMES[f.type]]}{'' if f.name in IDENTITY_COLUMNS else ' | None'}"
              for f in LOAD_POINTS_SCHEMA]
    lines += ["", "", "class JudgedPointRow(LoadPointRow):",
              '    """A load point as the report judges it under the objective\'s SLOs (grid.report.select.rejudge): the',
              '    ``load_points`` columns plus those only ``rejudged`` has."""', ""]
    judged = [REJUDGED_SCHEMA.field(n) for n in JUDGED_ONLY_COLUMNS]
    lines += [f"    {f.name}: {_PY_TYPES[_TYPE_NAMES[f.type]]} | None" for f in judged]
    return "\n".join(lines) + "\n"


SERVER_LOG_COLUMNS: list[tuple[str, str, str, str]] = [
    ("schema_version", "int32", "", "version of this schema"),
    ("config_hash", "string", "", "hash of the server configuration"),
    ("trial_id", "string", "", "Tune trial id"),
    ("point_index", "int32", "", "load point during which the server logged the line"),
    ("line_index", "int32", "", "order of the line within the load point"),
    ("ts", "string", "", "the line's own timestamp (the twin's is modelled time)"),
    ("kind", "string", "", "decode | prefill (SGLang 'Decode batch' / 'Prefill batch' lines)"),
    ("running_req", "int64", "requests", "#running-req"),
    ("queue_req", "int64", "requests", "#queue-req"),
    ("token", "int64", "tokens", "#token: KV tokens in use (decode lines)"),
    ("token_usage", "float64", "fraction", "token usage: KV pool fraction in use"),
    ("new_seq", "int64", "requests", "#new-seq (prefill lines)"),
    ("new_token", "int64", "tokens", "#new-token (prefill lines)"),
    ("cuda_graph", "bool", "flag", "cuda graph: whether the batch ran as a CUDA graph"),
    ("cpu_graph", "bool", "flag", "cpu graph: whether the batch ran as a captured CPU graph (SGLang's CPU engine, "
     "--device cpu, in place of cuda graph)"),
    ("cached_token", "int64", "tokens", "#cached-token: prompt tokens of the batch found in the radix cache (prefill "
     "lines)"),
    ("gen_throughput_tok_per_s", "float64", "tok/s",
     "gen throughput: tokens decoded since the previous decode line / time since it (decode lines)"),
    ("input_throughput_tok_per_s", "float64", "tok/s", "input throughput (prefill lines)"),
    ("accept_len", "float64", "tokens", "accept len: tokens per verify iteration since the previous decode line "
     "(speculative decoding)"),
    ("accept_rate", "float64", "fraction", "accept rate: accepted draft tokens / drafted (speculative decoding)"),
    *NODE_COLUMNS,
]
SERVER_LOG_SCHEMA: pa.Schema = _schema(SERVER_LOG_COLUMNS, "server_log")


def server_log_rows(lines: list[dict[str, Any]], *, config_hash: str, trial_id: str, point_index: int
                    ) -> list[dict[str, Any]]:
    """Rows of ``SERVER_LOG_SCHEMA`` from parsed batch lines (grid.server.logparse.parse_batch_line dicts)."""
    names = {c[0] for c in SERVER_LOG_COLUMNS}
    rows = []
    for i, line in enumerate(lines):
        row = {k: v for k, v in line.items() if k in names}
        row.update(schema_version=SCHEMA_VERSION, config_hash=config_hash, trial_id=trial_id,
                   point_index=point_index, line_index=i)
        rows.append(row)
    return rows


SERVER_METRICS_COLUMNS: list[tuple[str, str, str, str]] = [
    ("schema_version", "int32", "", "version of this schema"),
    ("config_hash", "string", "", "hash of the server configuration"),
    ("trial_id", "string", "", "Tune trial id"),
    ("point_index", "int32", "", "load point during which /metrics was scraped"),
    ("sample_index", "int32", "", "order of the scrape within the load point"),
    ("t_s", "float64", "s", "seconds since the load point started: real, or modelled on the twin's virtual clock "
                            "(its snapshots every VCLOCK_SAMPLE_S modelled s, grid/twin/server.py)"),
    ("running_reqs", "float64", "requests", "sglang:num_running_reqs (summed over DP ranks)"),
    ("queue_reqs", "float64", "requests", "sglang:num_queue_reqs (summed over DP ranks)"),
    ("used_tokens", "float64", "tokens", "sglang:num_used_tokens"),
    ("token_usage", "float64", "fraction", "sglang:token_usage (largest over ranks)"),
    ("gen_throughput_tok_per_s", "float64", "tok/s", "sglang:gen_throughput"),
    ("cache_hit_rate", "float64", "fraction", "sglang:cache_hit_rate"),
    ("spec_accept_length", "float64", "tokens", "sglang:spec_accept_length (speculative decoding)"),
    ("spec_accept_rate", "float64", "fraction", "sglang:spec_accept_rate (speculative decoding)"),
    ("max_total_num_tokens", "float64", "tokens", "sglang:max_total_num_tokens"),
    ("generation_tokens_total", "float64", "tokens", "sglang:generation_tokens_total (counter)"),
    ("prompt_tokens_total", "float64", "tokens", "sglang:prompt_tokens_total (counter)"),
    ("num_requests_total", "float64", "requests", "sglang:num_requests_total (counter)"),
    ("kv_transfer_ms_sum", "float64", "ms", "sglang:kv_transfer_latency_ms_sum (histogram, prefill servers)"),
    ("kv_transfer_ms_count", "float64", "transfers", "sglang:kv_transfer_latency_ms_count (histogram)"),
    *NODE_COLUMNS,
]
SERVER_METRICS_SCHEMA: pa.Schema = _schema(SERVER_METRICS_COLUMNS, "server_metrics")

GPU_TELEMETRY_COLUMNS: list[tuple[str, str, str, str]] = [
    ("schema_version", "int32", "", "version of this schema"),
    ("config_hash", "string", "", "hash of the server configuration"),
    ("trial_id", "string", "", "Tune trial id"),
    ("point_index", "int32", "", "load point during which the GPU was sampled"),
    ("sample_index", "int32", "", "order of the sample within the load point"),
    ("t_s", "float64", "s", "seconds since the load point started: real, or modelled on the twin's virtual clock "
                            "(its snapshots every VCLOCK_SAMPLE_S modelled s, grid/twin/server.py)"),
    ("gpu_index", "int32", "", "NVML device index"),
    ("source", "string", "", "nvml (measured) | modelled (the twin's PerfModel, never a measurement)"),
    ("sm_util", "float64", "fraction", "fraction of time a kernel ran (NVML utilization.gpu)"),
    ("mem_bw_util", "float64", "fraction", "memory utilisation (NVML utilization.memory; modelled: bytes / peak)"),
    ("memory_used_gb", "float64", "GB", "device memory in use (1e9 bytes)"),
    ("memory_total_gb", "float64", "GB", "device memory (1e9 bytes)"),
    ("power_w", "float64", "W", "board power"),
    ("power_limit_w", "float64", "W", "enforced power limit (modelled: TDP)"),
    ("sm_clock_mhz", "float64", "MHz", "SM clock"),
    ("mem_clock_mhz", "float64", "MHz", "memory clock"),
    ("pcie_tx_bytes_per_s", "float64", "B/s", "PCIe transmit throughput"),
    ("pcie_rx_bytes_per_s", "float64", "B/s", "PCIe receive throughput"),
    ("pcie_capacity_bytes_per_s", "float64", "B/s", "PCIe link capacity per direction"),
    ("nvlink_bytes_per_s", "float64", "B/s", "NVLink traffic per direction (modelled only)"),
    ("nvlink_capacity_bytes_per_s", "float64", "B/s", "NVLink capacity used for the ratio (modelled only)"),
    ("gpu_uuid", "string", "", "NVML UUID of the sampled GPU (null: modelled)"),
    *NODE_COLUMNS,
]
GPU_TELEMETRY_SCHEMA: pa.Schema = _schema(GPU_TELEMETRY_COLUMNS, "gpu_telemetry")


def sampled_rows(columns: list[tuple[str, str, str, str]], samples: list[dict[str, Any]], *, config_hash: str,
                 trial_id: str, point_index: int) -> list[dict[str, Any]]:
    """Rows of a sampler table: each sample's known columns plus the trial keys (unknown keys are dropped)."""
    names = {c[0] for c in columns}
    return [{**{k: v for k, v in s.items() if k in names}, "schema_version": SCHEMA_VERSION,
             "config_hash": config_hash, "trial_id": trial_id, "point_index": point_index} for s in samples]


def describe_schema() -> str:
    """Markdown tables of every schema: column, type, unit, definition."""
    out = [f"Schema version {SCHEMA_VERSION}. Null means not measured, never 0.", ""]
    for title, schema in (("requests", REQUESTS_SCHEMA), ("load_points", LOAD_POINTS_SCHEMA),
                          ("server_log", SERVER_LOG_SCHEMA), ("server_metrics", SERVER_METRICS_SCHEMA),
                          ("gpu_telemetry", GPU_TELEMETRY_SCHEMA), ("rejudged", REJUDGED_SCHEMA),
                          ("accuracy", ACCURACY_SCHEMA)):
        out += [f"### {title}", "", "| column | type | unit | definition |", "|---|---|---|---|"]
        for f in schema:
            meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
            desc = meta["description"].replace("|", "\\|")
            out.append(f"| `{f.name}` | {f.type} | {meta['unit']} | {desc} |")
        out.append("")
    from grid.storage.summary import describe_summary
    from grid.storage.vocabulary import describe_vocabulary

    return "\n".join(out) + "\n" + describe_summary() + "\n" + describe_vocabulary()
