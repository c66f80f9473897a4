"""Load-point summaries with exact integer timestamps."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grid.loadgen.runner import LoadPointResult
from grid.metrics.loadpoint import METRIC_COLUMN_NAMES, SLO, load_point_status, peak_concurrency, summarize
from grid.metrics.request import TimingError

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
