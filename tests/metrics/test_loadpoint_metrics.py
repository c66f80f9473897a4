"""Load-point summaries with exact integer timestamps."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grid.loadgen.runner import LoadPointResult
from grid.config.schema import SLOSpec
from grid.metrics.loadpoint import (
    METRIC_COLUMN_NAMES,
    SLO,
    SLO_COLUMNS,
    SLO_LATENCY_KEYS,
    load_point_status,
    peak_concurrency,
    slo_values,
    summarize,
)
from grid.metrics.request import TimingError
from grid.report.select import rejudge
from grid.storage.parquet import read_table, write_trial
from grid.storage.schema import load_point_row, request_rows

from .test_request_metrics import MS, SEND, record

T0 = SEND


def shifted(rec, start_ms: int):
    """Move a record so that it is sent start_ms after T0."""
    d = start_ms * MS
    rec.scheduled_perf_ns += d
    rec.send_perf_ns += d
    rec.end_perf_ns += d
    rec.chunk_perf_ns = [t + d for t in rec.chunk_perf_ns]
    for f in ("first_token_perf_ns", "last_token_perf_ns", "first_content_perf_ns"):
        if getattr(rec, f) is not None:
            setattr(rec, f, getattr(rec, f) + d)
    return rec


def result(records, end_ms=None, time_scale=1.0, stalled=False) -> LoadPointResult:
    end = max(r.end_perf_ns for r in records) if end_ms is None else T0 + end_ms * MS
    return LoadPointResult(records=records, window_start_perf_ns=T0, window_end_perf_ns=end, time_scale=time_scale,
                           stalled=stalled)


def four_requests():
    # request i: sent at 100*i ms, TTFT (i+1)*10 ms, then 9 more single-token chunks 5 ms apart, end 1 ms later
    recs = []
    for i in range(4):
        ttft = (i + 1) * 10
        chunks = [(ttft + 5 * k, 1) for k in range(10)]
        recs.append(shifted(record(chunks, index=i), 100 * i))
    return recs  # last ends at 300 + 40 + 45 + 1 = 386 ms


def test_throughput_percentiles_concurrency_exact():
    s = summarize(result(four_requests(), end_ms=400))
    assert list(s) == METRIC_COLUMN_NAMES
    assert s["requests_total"] == 4 and s["completed"] == 4 and s["failed"] == 0
    assert s["duration_s"] == 0.4
    assert s["requests_per_s"] == pytest.approx(10.0)
    assert s["output_tok_per_s"] == pytest.approx(100.0)
    assert s["input_tok_per_s"] == pytest.approx(80.0)
    assert s["total_tok_per_s"] == pytest.approx(180.0)
    ttft = [10.0, 20.0, 30.0, 40.0]
    assert s["ttft_mean_ms"] == 25.0 and s["ttft_median_ms"] == 25.0 and s["ttft_max_ms"] == 40.0
    assert s["ttft_p90_ms"] == pytest.approx(float(np.percentile(ttft, 90)))
    assert s["ttft_p99_ms"] == pytest.approx(39.7)  # linear interpolation: rank 2.97 -> 30 + 0.97 * 10
    assert s["tpot_mean_ms"] == 5.0 and s["itl_p99_ms"] == 5.0 and s["itl_max_ms"] == 5.0
    assert s["e2e_mean_ms"] == pytest.approx(np.mean([55, 65, 75, 85]))
    # lifetimes [100i, 100i + ttft + 46): 56+66+76+86 = 284 ms over 400 ms; never overlapping
    assert s["concurrency_mean"] == pytest.approx(284 / 400)
    assert s["concurrency_peak"] == 1
    assert s["mean_output_tokens"] == 10.0 and s["total_output_tokens"] == 40
    assert s["goodput_req_per_s"] is None and s["slo_met"] is None and s["slo_percentile"] is None
    assert load_point_status(s) == "ok"


def test_time_scale_scales_ms_and_rates():
    s = summarize(result(four_requests(), end_ms=400, time_scale=2.0))
    assert s["duration_s"] == 0.8 and s["requests_per_s"] == pytest.approx(5.0)
    assert s["ttft_mean_ms"] == 50.0 and s["concurrency_mean"] == pytest.approx(284 / 400)


def test_goodput_and_slo_attainment():
    recs = four_requests()
    recs.append(shifted(record([], status="failed", end_ms=7, index=4), 10))  # a failure never meets an SLO
    res = result(recs, end_ms=500)
    s = summarize(res, SLO(ttft_ms=25.0, e2e_ms=80.0, percentile=50.0))
    # ttft 10,20 ok; e2e 55,65,75 ok -> good = {0,1}
    assert s["goodput_req_per_s"] == pytest.approx(2 / 0.5)
    assert s["slo_attainment"] == pytest.approx(2 / 5)
    assert s["slo_attainment_ttft"] == pytest.approx(2 / 5) and s["slo_attainment_e2e"] == pytest.approx(3 / 5)
    assert s["slo_attainment_tpot"] is None
    assert s["slo_met"] is False  # ttft: 2/5 < 50 %
    assert s["slo_ttft_ms"] == 25.0 and s["slo_tpot_ms"] is None and s["slo_percentile"] == 50.0
    s = summarize(res, SLO(ttft_ms=40.0, tpot_ms=5.0, percentile=80.0))
    assert s["slo_attainment"] == pytest.approx(4 / 5) and s["slo_met"] is True
    s = summarize(res, SLO(ttft_ms=40.0, percentile=99.0))
    assert s["slo_met"] is False
    assert load_point_status(s) == "partial"


def test_peak_concurrency_sweep_line():
    assert peak_concurrency([]) == 0
    assert peak_concurrency([(0, 10), (10, 20)]) == 1  # an end and a start at the same instant do not overlap
    assert peak_concurrency([(0, 10), (5, 20), (6, 7), (9, 30)]) == 3  # (6, 7) is over before 9
    assert peak_concurrency([(0, 10), (5, 20), (6, 12), (9, 30)]) == 4
    assert peak_concurrency([(0, 10), (0, 10), (0, 10)]) == 3


def test_mean_concurrency_counts_overlap():
    recs = [record([(50, 1), (99, 1)], end_ms=100, index=i) for i in range(3)]
    s = summarize(result(recs, end_ms=200))
    assert s["concurrency_mean"] == pytest.approx(1.5) and s["concurrency_peak"] == 3


def test_all_failed_point_has_nulls_not_zeros():
    recs = [shifted(record([], status="failed", end_ms=3, index=i), i) for i in range(5)]
    for r in recs[2:]:
        r.error_class = "conn_error"
    s = summarize(result(recs), SLO(ttft_ms=100))
    assert s["completed"] == 0 and s["failed"] == 5
    assert s["failed_read_timeout"] == 2 and s["failed_conn_error"] == 3
    assert json.loads(s["error_counts_json"]) == {"conn_error": 3, "read_timeout": 2}
    for k in ("requests_per_s", "output_tok_per_s", "total_tok_per_s", "ttft_mean_ms", "tpot_p99_ms",
              "itl_median_ms", "e2e_max_ms", "mean_output_tokens", "total_output_tokens"):
        assert s[k] is None, k
    assert s["goodput_req_per_s"] == 0.0 and s["slo_attainment"] == 0.0 and s["slo_met"] is False
    assert load_point_status(s) == "failed"


def test_empty_point():
    s = summarize(LoadPointResult([], T0, T0, 1.0))
    assert s["requests_total"] == 0 and s["duration_s"] is None and s["concurrency_mean"] is None
    assert load_point_status(s) == "not_run"


def test_window_errors_raise():
    recs = four_requests()
    with pytest.raises(TimingError):  # zero window
        summarize(LoadPointResult(recs, T0, T0, 1.0))
    with pytest.raises(TimingError):  # a request longer than the run
        summarize(result(recs, end_ms=200))
    with pytest.raises(TimingError):  # days
        summarize(result(recs, end_ms=20 * 86_400_000))
    with pytest.raises(TimingError):  # a request before the window
        summarize(LoadPointResult(recs, T0 + 1, T0 + 400 * MS, 1.0))


# SLO values recomputed from the stored per-request rows (the report re-judges every load point this way) --------------
def mixed_point():
    """Eight requests with spread TTFTs and TPOTs, one 1-token output (no TPOT) and one failure."""
    recs = []
    for i in range(6):
        ttft, gap = 10 + 7 * i, 3 + 2 * (i % 3)
        recs.append(shifted(record([(ttft + gap * k, 1) for k in range(10)], index=i), 100 * i))
    recs.append(shifted(record([(25, 1)], index=6), 600))                    # 1 token: TPOT counts as met
    recs.append(shifted(record([], status="failed", end_ms=7, index=7), 700))  # a failure never meets an SLO
    return result(recs, end_ms=800, time_scale=1.5)


SLOS = [SLO(ttft_ms=30.0), SLO(ttft_ms=40.0, tpot_ms=6.0, percentile=50.0), SLO(e2e_ms=90.0, percentile=37.5),
        SLO(tpot_ms=5.0, e2e_ms=150.0, percentile=100.0), SLO(ttft_ms=25.0, percentile=90.0), SLO(), None]


@pytest.mark.parametrize("slo", SLOS, ids=str)
def test_slo_values_from_stored_requests_equal_summarize(slo):
    res = mixed_point()
    s = summarize(res, slo)
    rows = request_rows(res, config_hash="h", trial_id="t", point_index=0)
    v = slo_values(rows, s["duration_s"], slo)
    assert {k: v[k] for k in SLO_COLUMNS} == {k: s[k] for k in SLO_COLUMNS}  # exactly, not approximately
    given = slo.given() if slo else {}
    for metric, key in SLO_LATENCY_KEYS.items():
        if metric not in given:
            assert v[key] is None
            continue
        values = [r[f"{metric}_ms"] for r in rows if r["status"] == "ok" and r[f"{metric}_ms"] is not None]
        assert v[key] == float(np.percentile(values, slo.percentile))
        stored = {50.0: "median", 90.0: "p90", 99.0: "p99"}.get(slo.percentile)
        if stored:  # the same definition as the stored percentile columns
            assert v[key] == s[f"{metric}_{stored}_ms"]


def test_slo_values_definitions():
    rows = [{"status": "ok", "ttft_ms": 10.0, "tpot_ms": None, "e2e_ms": 10.0},
            {"status": "ok", "ttft_ms": 30.0, "tpot_ms": 4.0, "e2e_ms": 100.0},
            {"status": "failed", "ttft_ms": 5.0, "tpot_ms": None, "e2e_ms": None}]
    v = slo_values(rows, 2.0, SLO(ttft_ms=20.0, tpot_ms=5.0, percentile=50.0))
    assert v["goodput_req_per_s"] == 0.5            # only the first: ok, TTFT 10 <= 20, no TPOT (1 token) = met
    assert v["slo_attainment"] == pytest.approx(1 / 3) and v["slo_attainment_tpot"] == pytest.approx(2 / 3)
    assert v["slo_attainment_ttft"] == pytest.approx(1 / 3) and v["slo_attainment_e2e"] is None
    assert v["slo_met"] is False                    # TTFT: 1/3 < 50 %
    assert v["slo_ttft_at_pct_ms"] == 20.0 and v["slo_tpot_at_pct_ms"] == 4.0 and v["slo_e2e_at_pct_ms"] is None
    assert v["slo_percentile"] == 50.0 and v["slo_ttft_ms"] == 20.0 and v["slo_e2e_ms"] is None
    none = slo_values(rows, 2.0, SLO())
    assert set(none) == set(SLO_COLUMNS) | set(SLO_LATENCY_KEYS.values()) and set(none.values()) == {None}
    empty = slo_values([], None, SLO(ttft_ms=20.0))
    assert empty["goodput_req_per_s"] is None and empty["slo_met"] is None and empty["slo_ttft_ms"] == 20.0


def test_report_rejudges_through_parquet_exactly(tmp_path):
    """Measured under one SLO, stored, read back and re-judged under another: the values equal a measurement under
    the other SLO, and re-judging under the measuring SLO gives back exactly the stored values."""
    res = mixed_point()
    measured_slo, other = SLO(ttft_ms=2000.0, tpot_ms=150.0), SLO(ttft_ms=30.0, percentile=50.0)
    stored_summary = summarize(res, measured_slo)
    write_trial(tmp_path, "h", {
        "requests": request_rows(res, config_hash="h", trial_id="t", point_index=0),
        "load_points": [load_point_row(stored_summary, config_hash="h", trial_id="t", point_index=0, status="ok")]})
    rows = read_table(tmp_path, "load_points").to_pylist()
    requests = read_table(tmp_path, "requests").to_pylist()
    same = rejudge(rows, requests, SLOSpec(ttft_ms=2000.0, tpot_ms=150.0))[0]
    assert {k: same[k] for k in SLO_COLUMNS} == {k: rows[0][k] for k in SLO_COLUMNS}
    assert same["slo_ttft_at_pct_ms"] == rows[0]["ttft_p99_ms"] and same["slo_tpot_at_pct_ms"] == rows[0]["tpot_p99_ms"]
    again = rejudge(rows, requests, SLOSpec(ttft_ms=30.0, percentile=50.0))[0]
    fresh = summarize(res, other)
    assert {k: again[k] for k in SLO_COLUMNS} == {k: fresh[k] for k in SLO_COLUMNS}
    assert again["slo_ttft_at_pct_ms"] == fresh["ttft_median_ms"]
    assert rows[0]["goodput_req_per_s"] != again["goodput_req_per_s"]  # it did change, and nothing was rewritten
    assert read_table(tmp_path, "load_points").to_pylist() == rows
