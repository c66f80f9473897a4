"""Parquet schemas: metadata on every field, rows that fit, round trips through pyarrow, pandas and duckdb."""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grid.loadgen.runner import LoadPointResult
from grid.metrics.loadpoint import METRIC_COLUMN_NAMES, SLO, load_point_status, summarize
from grid.storage.schema import (LOAD_POINT_SAMPLER_COLUMNS, LOAD_POINTS_SCHEMA, REQUESTS_SCHEMA, SCHEMA_VERSION,
                                 TEXT_MAX_CHARS, describe_schema, load_point_row, request_rows)

from grid.loadgen.records import RequestRecord

MS = 1_000_000
T0 = 10_000_000_000


def record(chunks, *, status="ok", end_ms=None, index=0, start_ms=0) -> RequestRecord:
    """A record sent start_ms after T0 with chunks [(ms after send, tokens)]."""
    send = T0 + start_ms * MS
    r = RequestRecord(request_index=index, prompt_index=index, api="generate", stream=True, max_tokens=64,
                      planned_input_len=8)
    r.scheduled_perf_ns = r.send_perf_ns = send
    r.send_unix_ns = 1_700_000_000 * 10**9
    r.chunk_perf_ns = [send + t * MS for t, _ in chunks]
    r.chunk_tokens = [k for _, k in chunks]
    tok = [t for t, k in zip(r.chunk_perf_ns, r.chunk_tokens) if k]
    r.first_token_perf_ns = r.first_content_perf_ns = tok[0] if tok else None
    r.last_token_perf_ns = tok[-1] if tok else None
    r.end_perf_ns = send + (end_ms if end_ms is not None else max(t for t, _ in chunks) + 1) * MS
    r.status = status
    r.error_class = None if status == "ok" else "read_timeout"
    r.output_tokens, r.output_tokens_source = sum(r.chunk_tokens), "stream_count"
    r.input_tokens, r.input_tokens_source = 8, "planned"
    return r


def four_requests():
    return [record([((i + 1) * 10 + 5 * k, 1) for k in range(10)], index=i, start_ms=100 * i) for i in range(4)]


def result(records, end_ms=None) -> LoadPointResult:
    end = max(r.end_perf_ns for r in records) if end_ms is None else T0 + end_ms * MS
    return LoadPointResult(records=records, window_start_perf_ns=T0, window_end_perf_ns=end, time_scale=1.0)

ORCHESTRATION = {
    "schema_version": pa.int32(), "run_name": pa.string(), "trial_id": pa.string(), "config_hash": pa.string(),
    "config_json": pa.string(), "label": pa.string(), "deployment_json": pa.string(), "deployment_servers_json": pa.string(), "command": pa.string(), "engine": pa.string(),
    "engine_version": pa.string(), "model": pa.string(), "hardware": pa.string(), "trial_status": pa.string(),
    "trial_error_class": pa.string(), "trial_error_message": pa.string(), "startup_s": pa.float64(),
    "log_tail": pa.string(), "point_index": pa.int32(), "repeat_index": pa.int32(),
    "accuracy_exact_match": pa.float64(), "accuracy_role": pa.string(),
    "point_kind": pa.string(), "point_value": pa.float64(),
    "num_prompts": pa.int32(), "max_concurrency": pa.int64(), "dataset": pa.string(),
    "input_len": pa.int32(), "output_len": pa.int32(), "status": pa.string(),
    "error_class": pa.string(), "time_scale": pa.float64(), "finished_unix_ns": pa.int64(), "kv_capacity_tokens": pa.int64(),
    "launch_unix_ns": pa.int64(), "ready_unix_ns": pa.int64(), "started_unix_ns": pa.int64(),
    "server_gen_tok_per_s_peak": pa.float64(), "server_running_at_peak": pa.int64(),
    "server_accept_len_mean": pa.float64(),
    "server_cache_hit_rate": pa.float64(),
    "server_info_json": pa.string(), "probe_status": pa.string(),
    "node_id": pa.string(), "node_hostname": pa.string(), "gpu_uuids": pa.list_(pa.string()),
}


@pytest.mark.parametrize("schema", [REQUESTS_SCHEMA, LOAD_POINTS_SCHEMA], ids=["requests", "load_points"])
def test_every_field_has_unit_and_description(schema):
    assert schema.metadata[b"schema_version"] == str(SCHEMA_VERSION).encode()
    assert len(set(schema.names)) == len(schema.names)
    for f in schema:
        assert f.nullable, f.name
        assert set(f.metadata) >= {b"unit", b"description"}, f.name
        assert f.metadata[b"description"], f.name


def test_load_points_columns():
    for name, typ in ORCHESTRATION.items():
        assert LOAD_POINTS_SCHEMA.field(name).type == typ, name
    assert set(METRIC_COLUMN_NAMES) <= set(LOAD_POINTS_SCHEMA.names)
    sampler = {c[0] for c in LOAD_POINT_SAMPLER_COLUMNS}  # srv_*, gpu_*, bottleneck*: samplers + diagnosis
    assert set(LOAD_POINTS_SCHEMA.names) == set(ORCHESTRATION) | set(METRIC_COLUMN_NAMES) | sampler


def test_requests_columns():
    need = {"config_hash", "trial_id", "point_index", "request_index", "status", "error_class", "error_message",
            "scheduled_offset_ns", "send_perf_ns", "send_unix_ns", "chunk_perf_ns", "chunk_tokens",
            "first_token_perf_ns", "first_content_perf_ns", "end_perf_ns", "usage_prompt_tokens",
            "usage_completion_tokens", "input_tokens", "output_tokens", "output_tokens_source", "content_null", "text",
            "ttft_ms", "ttfo_ms", "tpot_ms", "e2e_ms", "client_queue_ms", "itl_tokens_ms", "chunk_gaps_ms",
            "time_scale"}
    assert need <= set(REQUESTS_SCHEMA.names)
    assert REQUESTS_SCHEMA.field("chunk_perf_ns").type == pa.list_(pa.int64())


def _mixed_result() -> LoadPointResult:
    recs = four_requests()
    bad = record([], status="failed", end_ms=3, index=4, start_ms=50)
    bad.error_message = "ServerTimeoutError: timeout"
    recs.append(bad)
    recs[0].text = "x" * (TEXT_MAX_CHARS + 10)
    return result(recs, end_ms=500)


def _all_failed_result() -> LoadPointResult:
    recs = [record([], status="failed", end_ms=2, index=i, start_ms=i) for i in range(3)]
    for r in recs:
        r.error_class, r.output_tokens, r.output_tokens_source = "conn_error", None, None
    return result(recs)


@pytest.mark.parametrize("make", [_mixed_result, _all_failed_result], ids=["mixed", "all_failed"])
def test_rows_fit_and_round_trip(tmp_path, make):
    res = make()
    rows = request_rows(res, config_hash="abc", trial_id="t1", point_index=2)
    table = pa.Table.from_pylist(rows, schema=REQUESTS_SCHEMA)
    summary = summarize(res, SLO(ttft_ms=30.0))
    lp = pa.Table.from_pylist([load_point_row(summary, trial_id="t1", point_index=2, status=load_point_status(summary),
                                              time_scale=1.0, run_name="r", point_kind="concurrency")],
                              schema=LOAD_POINTS_SCHEMA)
    req_path, lp_path = tmp_path / "requests.parquet", tmp_path / "load_points.parquet"
    pq.write_table(table, req_path)
    pq.write_table(lp, lp_path)
    assert pq.read_schema(req_path).equals(REQUESTS_SCHEMA, check_metadata=False)
    back = pq.read_table(req_path)
    assert back.schema.field("ttft_ms").metadata[b"unit"] == b"ms"
    df = pd.read_parquet(req_path)
    assert len(df) == len(rows) and set(df["trial_id"]) == {"t1"}
    failed = df[df["status"] == "failed"]
    assert failed["ttft_ms"].isna().all() and failed["e2e_ms"].isna().all()
    con = duckdb.connect()
    n_failed, = con.execute(f"select count(*) from read_parquet('{req_path}') where status = 'failed'").fetchone()
    assert n_failed == len(failed)
    got = con.execute(f"select completed, failed, ttft_mean_ms, requests_per_s, status "
                      f"from read_parquet('{lp_path}')").fetchone()
    assert got[0] == summary["completed"] and got[1] == summary["failed"]
    if summary["completed"] == 0:
        assert got[2] is None and got[3] is None and got[4] == "failed"  # null, never 0
    else:
        assert got[2] == pytest.approx(summary["ttft_mean_ms"]) and got[4] == "partial"
        lens = con.execute(f"select len(itl_tokens_ms), len(chunk_perf_ns), text_truncated "
                           f"from read_parquet('{req_path}') order by request_index limit 1").fetchone()
        assert lens == (9, 10, True)


def test_load_point_row_rejects_unknown_columns():
    with pytest.raises(KeyError):
        load_point_row({}, not_a_column=1)
    row = load_point_row({}, trial_id="x")
    assert row["schema_version"] == SCHEMA_VERSION and row["ttft_p99_ms"] is None
    pa.Table.from_pylist([row], schema=LOAD_POINTS_SCHEMA)


def test_describe_schema_lists_every_column():
    md = describe_schema()
    for name in REQUESTS_SCHEMA.names + LOAD_POINTS_SCHEMA.names:
        assert f"| `{name}` |" in md
    assert "| `ttft_p99_ms` | double | ms |" in md


def test_schema_doc_is_current():
    from grid.docs import SCHEMA_DOC, schema_doc

    assert SCHEMA_DOC.exists(), "docs/schema.md is missing: python -m grid.docs writes it"
    assert SCHEMA_DOC.read_text() == schema_doc(), "docs/schema.md is stale: python -m grid.docs rewrites it"


def test_typed_row_is_current_and_names_every_column():
    from typing import get_type_hints

    from grid.docs import ROWS_MODULE
    from grid.storage.rows import LoadPointRow
    from grid.storage.schema import LOAD_POINTS_SCHEMA, rows_module

    assert ROWS_MODULE.read_text() == rows_module(), "grid/storage/rows.py is stale: python -m grid.docs rewrites it"
    hints = get_type_hints(LoadPointRow)
    assert list(hints) == LOAD_POINTS_SCHEMA.names
    assert hints["ttft_p99_ms"] == float | None and hints["config_hash"] is str and hints["trial_id"] == str | None
    assert hints["gpu_uuids"] == list[str] | None and hints["point_index"] is int


def test_a_column_named_at_run_time_is_checked():
    from grid.storage.schema import load_point_row, point_value

    row = load_point_row({"ttft_p99_ms": 12.5}, config_hash="abc")
    assert point_value(row, "ttft_p99_ms") == 12.5 and point_value(row, "tpot_p99_ms") is None
    with pytest.raises(KeyError, match="'tft_p99_ms' is not a load_points column; did you mean ttft_p99_ms"):
        point_value(row, "tft_p99_ms")


def test_read_table_reads_only_the_columns_asked_for(tmp_path):
    from grid.storage.parquet import read_table, table_dir

    d = table_dir(tmp_path, "requests")
    d.mkdir(parents=True)
    old = pa.table({"config_hash": ["a"], "point_index": [0], "status": ["ok"]})  # written before ttft_ms existed
    pq.write_table(old, d / "a.parquet")
    new = pa.table({"config_hash": ["b"], "point_index": [1], "status": ["failed"], "ttft_ms": [12.5]})
    pq.write_table(new, d / "b.parquet")
    t = read_table(tmp_path, "requests", ["config_hash", "status", "ttft_ms"])
    assert t.column_names == ["config_hash", "status", "ttft_ms"]
    assert t.to_pylist() == [{"config_hash": "a", "status": "ok", "ttft_ms": None},
                             {"config_hash": "b", "status": "failed", "ttft_ms": 12.5}]
    with pytest.raises(KeyError):
        read_table(tmp_path, "requests", ["no_such_column"])
