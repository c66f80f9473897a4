"""What real servers and runs bring, in configuration: /metrics in either SGLang spelling, a run directory
whose files differ in columns, and the load settings for capped rates and user datasets."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import grid
from grid.config.schema import LoadSpec
from grid.report.render import metrics_names_note
from grid.server.metrics_scrape import gauges_found, missing_gauges_message, parse_metrics
from grid.storage.parquet import read_table, table_dir

COLON = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 21.0
sglang:num_running_reqs{tp_rank="1"} 11.0
# TYPE sglang:token_usage gauge
sglang:token_usage{tp_rank="0"} 0.08
sglang:token_usage{tp_rank="1"} 0.29
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 11179.0
"""
UNDERSCORE = COLON.replace("sglang:", "sglang_")
# Hugging Face TGI's gauges (text-generation-inference router metrics): an engine grid has no names for.
TGI = """\
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 3.0
# TYPE tgi_queue_size gauge
tgi_queue_size 0.0
"""


def test_both_sglang_spellings_read_the_same_values():
    expected = {"running_reqs": 32.0, "token_usage": 0.29, "generation_tokens_total": 11179.0}
    assert parse_metrics(COLON) == expected
    assert parse_metrics(UNDERSCORE) == expected
    assert parse_metrics(UNDERSCORE, ("sglang:",)) == {}  # the default prefixes are what reads it


def test_a_scrape_without_expected_gauges_says_so():
    assert missing_gauges_message(UNDERSCORE) is None
    msg = missing_gauges_message(TGI)
    assert msg.startswith("/metrics names none of the expected gauges (e.g. sglang:num_running_reqs or "
                          "sglang_num_running_reqs); it has: tgi_batch_current_size, tgi_queue_size.")
    assert gauges_found([parse_metrics(TGI)]) == 0 and gauges_found([parse_metrics(COLON), {}]) == 2


def test_report_note_once_for_configurations_without_gauges():
    rows = [{"config_hash": "aaa", "srv_scrapes": 4, "srv_gauges_found": 0},
            {"config_hash": "aaa", "srv_scrapes": 3, "srv_gauges_found": 0},
            {"config_hash": "bbb", "srv_scrapes": 4, "srv_gauges_found": 5},
            {"config_hash": "ccc", "srv_scrapes": None, "srv_gauges_found": None}]  # /metrics not served
    note = metrics_names_note(rows)
    assert note.startswith("Server metrics: /metrics answered but named none of the expected gauges for 1 of 2 "
                           "configurations (aaa); their srv_* columns are null")
    assert metrics_names_note(rows[2:]) is None


def test_tables_whose_files_differ_in_columns_read_whole(tmp_path):
    """The first file (by name) lacks a column the second has: every row keeps it (null where not written)."""
    d = table_dir(tmp_path, "load_points")
    d.mkdir(parents=True)
    pq.write_table(pa.table({"config_hash": ["a"], "point_index": pa.array([0], pa.int32()),
                             "status": ["ok"]}), d / "a.parquet")
    pq.write_table(pa.table({"config_hash": ["b"], "point_index": pa.array([1], pa.int64()), "status": ["ok"],
                             "srv_gauges_found": [3], "a_newer_column": ["x"]}), d / "b.parquet")
    t = read_table(tmp_path, "load_points")
    rows = sorted(t.to_pylist(), key=lambda r: r["config_hash"])
    assert [(r["config_hash"], r["srv_gauges_found"], r["a_newer_column"]) for r in rows] == [
        ("a", None, None), ("b", 3, "x")]
    assert t.schema.field("point_index").type == pa.int64()  # promoted over both files
    df = grid.read_results(tmp_path, "load_points")
    assert df["a_newer_column"].isna().sum() == 1 and set(df["a_newer_column"].dropna()) == {"x"}
    assert len(df.columns) == len(t.schema)
    assert read_table(tmp_path, "load_points", ["a_newer_column", "config_hash"]).column_names == [
        "a_newer_column", "config_hash"]
    with pytest.raises(KeyError, match="no column"):
        read_table(tmp_path, "load_points", ["nope"])
    import pandas as pd

    assert "a_newer_column" not in pd.read_parquet(d).columns  # what the old README recipe lost


def test_read_results_refuses_a_misspelt_table_or_a_missing_run(tmp_path):
    # grid.read_results("outputs/nsa_backends", "requets") read as an empty DataFrame, as did a missing run directory
    (tmp_path / "parquet" / "rejudged").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"^table='requets': unknown table; allowed: accuracy, gpu_telemetry, "
                                         r"load_points, rejudged, requests, server_log, server_metrics$"):
        grid.read_results(tmp_path, "requets")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        grid.read_results(tmp_path / "nope", "load_points")
    assert grid.read_results(tmp_path, "rejudged").empty and grid.read_results(tmp_path, "requests").empty


def test_load_settings_for_caps_and_datasets(tmp_path):
    assert LoadSpec(request_rate=[4.0], max_concurrency=8).max_concurrency == 8
    with pytest.raises(ValueError, match="load.max_concurrency: caps open-loop points"):
        LoadSpec(max_concurrency=8)  # only closed-loop points
    with pytest.raises(ValueError, match="load.dataset: unknown kind 'alpaca'"):
        LoadSpec(dataset="alpaca")
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"timestamp": t, "input_length": 4, "output_length": 2})
                               for t in (0, 500, 900)))
    spec = LoadSpec(dataset="trace", dataset_path=str(trace), concurrency=[], trace_speed=[1.0, 2.0])
    assert spec.trace_points == [1.0, 2.0]
    assert LoadSpec(dataset="random").trace_points == []
    with pytest.raises(ValueError, match="no load points"):
        LoadSpec(dataset="trace", dataset_path=str(trace), concurrency=[], trace_speed=[])
    # every load setting is part of a trial's identity (grid/sweep/space.py config_identity), defaults included
    assert {"dataset_path", "trace_speed", "max_concurrency"} <= set(LoadSpec().model_dump())
    assert LoadSpec(request_rate=[1.0], max_concurrency=2).model_dump()["max_concurrency"] == 2


def test_trial_load_points_carry_the_cap_and_the_trace(tmp_path):
    from grid.plan import TrialPlan, load_points

    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"timestamp": t, "input_length": 4, "output_length": 2})
                               for t in (1000, 1500, 1900)))
    load = LoadSpec(dataset="trace", dataset_path=str(trace), concurrency=[2], request_rate=[3.0],
                    trace_speed=[1.0, 4.0], max_concurrency=2, warmup_requests=0)
    points = load_points(TrialPlan(0, {}, load, "x", "h"))
    assert [(p.kind, p.value, p.num_prompts, p.max_concurrency) for p in points] == [
        ("concurrency", 2.0, 101, None), ("rate", 3.0, 101, 2), ("trace", 1.0, 3, 2), ("trace", 4.0, 3, 2)]
    assert points[2].offsets_s == (0.0, 0.5, 0.9)
