"""Typed rows of the ``load_points`` table, generated from grid/storage/schema.py by
``python -m grid.docs`` (do not edit).

Every row the pipeline writes or reads holds every column (:func:`grid.storage.schema.load_point_row`,
:func:`grid.storage.parquet.read_points`), null where not measured. Read a column named in code as
``row["ttft_p99_ms"]`` (a misspelt name fails mypy) and one named at run time with
:func:`grid.storage.schema.point_value` (a misspelt name raises).
"""

from __future__ import annotations

from typing import TypedDict


class LoadPointRow(TypedDict):
    """One row of ``load_points`` (docs/schema.md gives each column's unit and meaning)."""

    schema_version: int | None
    run_name: str | None
    trial_id: str | None
    config_hash: str
    config_json: str | None
    label: str
    deployment_json: str | None
    deployment_servers_json: str | None
    command: str | None
    engine: str | None
    engine_version: str | None
    model: str | None
    probe_status: str | None
    hardware: str | None
    trial_status: str
    trial_error_class: str | None
    trial_error_message: str | None
    startup_s: float | None
    launch_unix_ns: int | None
    ready_unix_ns: int | None
    log_tail: str | None
    point_index: int
    repeat_index: int | None
    point_kind: str
    point_value: float
    max_concurrency: int | None
    dataset: str | None
    num_prompts: int | None
    input_len: int | None
    output_len: int | None
    status: str
    error_class: str | None
    time_scale: float | None
    started_unix_ns: int | None
    finished_unix_ns: int | None
    kv_capacity_tokens: int | None
    accuracy_exact_match: float | None
    accuracy_role: str | None
    server_gen_tok_per_s_peak: float | None
    server_running_at_peak: int | None
    server_accept_len_mean: float | None
    server_cache_hit_rate: float | None
    server_info_json: str | None
    node_id: str | None
    node_hostname: str | None
    gpu_uuids: list[str] | None
    requests_total: int | None
    completed: int | None
    failed: int | None
    failed_http_error: int | None
    failed_conn_error: int | None
    failed_read_timeout: int | None
    failed_stall_timeout: int | None
    failed_parse_error: int | None
    failed_decode_error: int | None
    failed_server_error: int | None
    failed_context_exceeded: int | None
    failed_truncated_stream: int | None
    failed_empty_output: int | None
    failed_client_error: int | None
    error_counts_json: str | None
    stalled: bool | None
    content_null_requests: int | None
    stream_count_requests: int | None
    duration_s: float | None
    held_s: float | None
    window_kind: str | None
    warmup_requests_run: int | None
    tail_requests_run: int | None
    requests_per_s: float | None
    input_tok_per_s: float | None
    output_tok_per_s: float | None
    total_tok_per_s: float | None
    total_input_tokens: int | None
    total_output_tokens: int | None
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    total_cached_tokens: int | None
    cache_hit_rate: float | None
    concurrency_mean: float | None
    concurrency_peak: int | None
    ttft_mean_ms: float | None
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    ttft_max_ms: float | None
    tpot_mean_ms: float | None
    tpot_median_ms: float | None
    tpot_p90_ms: float | None
    tpot_p95_ms: float | None
    tpot_p99_ms: float | None
    tpot_max_ms: float | None
    itl_mean_ms: float | None
    itl_median_ms: float | None
    itl_p90_ms: float | None
    itl_p95_ms: float | None
    itl_p99_ms: float | None
    itl_max_ms: float | None
    e2e_mean_ms: float | None
    e2e_median_ms: float | None
    e2e_p90_ms: float | None
    e2e_p95_ms: float | None
    e2e_p99_ms: float | None
    e2e_max_ms: float | None
    ttfo_mean_ms: float | None
    ttfo_median_ms: float | None
    ttfo_p99_ms: float | None
    chunk_gap_mean_ms: float | None
    chunk_gap_median_ms: float | None
    chunk_gap_p99_ms: float | None
    chunk_gap_max_ms: float | None
    client_queue_mean_ms: float | None
    client_queue_p99_ms: float | None
    client_queue_max_ms: float | None
    slot_wait_mean_ms: float | None
    slot_wait_p99_ms: float | None
    slot_wait_max_ms: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_e2e_ms: float | None
    slo_percentile: float | None
    goodput_req_per_s: float | None
    slo_attainment: float | None
    slo_attainment_ttft: float | None
    slo_attainment_tpot: float | None
    slo_attainment_e2e: float | None
    slo_met: bool | None
    srv_scrapes: int | None
    srv_gauges_found: int | None
    srv_running_mean: float | None
    srv_running_max: float | None
    srv_queue_mean: float | None
    srv_queue_max: float | None
    srv_token_usage_mean: float | None
    srv_token_usage_max: float | None
    srv_gen_tok_per_s_mean: float | None
    srv_cache_hit_rate: float | None
    srv_spec_accept_length_mean: float | None
    srv_kv_transfer_ms_mean: float | None
    srv_kv_transfers: float | None
    gpu_telemetry_source: str | None
    gpu_samples: int | None
    gpu_count_sampled: int | None
    gpu_sm_util_mean: float | None
    gpu_mem_bw_util_mean: float | None
    gpu_power_w_mean: float | None
    gpu_power_limit_w: float | None
    gpu_power_frac_mean: float | None
    gpu_memory_used_gb_max: float | None
    gpu_sm_clock_mhz_mean: float | None
    gpu_pcie_bytes_per_s: float | None
    gpu_pcie_capacity_bytes_per_s: float | None
    gpu_nvlink_bytes_per_s: float | None
    gpu_nvlink_capacity_bytes_per_s: float | None
    gpu_topology_json: str | None
    bottleneck: str | None
    bottleneck_evidence: str | None
    skip_reason: str | None
    forecast_duration_s: float | None
    twin_behind_pct: float | None
    client_lag_pct: float | None
    host_noise_max_pct: float | None
    twin_delivery_lag_ms: float | None
    early_stop_objective: str | None


class JudgedPointRow(LoadPointRow):
    """A load point as the report judges it under the objective's SLOs (grid.report.select.rejudge): the
    ``load_points`` columns plus those only ``rejudged`` has."""

    objective_kind: str | None
    slo_ttft_at_pct_ms: float | None
    slo_tpot_at_pct_ms: float | None
    slo_e2e_at_pct_ms: float | None
    slo_unjudged: str | None
