"""Load-point summaries at their edges: window checks with their messages, counts, missing token counts, nulls."""

from __future__ import annotations

import json

import pytest

from grid.loadgen.records import ERROR_CLASSES
from grid.loadgen.runner import LoadPointResult
from grid.metrics.loadpoint import SLO, peak_concurrency, slo_values, summarize
from grid.metrics.request import MAX_PLAUSIBLE_NS, TimingError

from .test_loadpoint_metrics import T0, four_requests, result, shifted
from .test_request_metrics import MS, record


def test_peak_concurrency_after_ends():
    # an end lowers the count by exactly one
    assert peak_concurrency([(0, 10), (10, 20), (11, 21), (12, 22)]) == 3


def test_window_checks_and_messages():
    failed_at_start = record([], status="failed", end_ms=0)
    summarize(LoadPointResult([failed_at_start], T0, T0 + 1, 1.0))                          # a 1 ns window is fine
    summarize(LoadPointResult([record([], status="failed", end_ms=0)], T0, T0 + MAX_PLAUSIBLE_NS, 1.0))  # a day too
    # every request failed at the start (a twin on the virtual clock that exited): a zero window, nothing to rate
    s = summarize(LoadPointResult([record([], status="failed", end_ms=0)], T0, T0, 1.0))
    assert (s["duration_s"], s["concurrency_mean"], s["output_tok_per_s"], s["failed"]) == (0.0, 0.0, None, 1)
    with pytest.raises(TimingError, match=r"^measured window is 0 ns: zero$"):
        summarize(LoadPointResult([record([(0, 1)], end_ms=0)], T0, T0, 1.0))  # a completed request needs time
    with pytest.raises(TimingError, match=r"^measured window is -1 ns: negative$"):
        summarize(LoadPointResult([record([], status="failed", end_ms=0)], T0, T0 - 1, 1.0))
    with pytest.raises(TimingError, match=r"^measured window of 2\.00 days is not plausible$"):
        summarize(LoadPointResult([record([], status="failed", end_ms=0)], T0, T0 + 2 * MAX_PLAUSIBLE_NS, 1.0))
    unsent = record([], status="failed", end_ms=0, index=5)
    unsent.send_perf_ns = None
    with pytest.raises(TimingError, match=rf"^request 5 lies outside the measured window \[{T0}, {T0 + MS}\]$"):
        summarize(LoadPointResult([unsent], T0, T0 + MS, 1.0))


def test_failure_counts_by_class():
    recs = [shifted(record([], status="failed", end_ms=1, index=i), i) for i in range(3)]
    recs[0].error_class = None
    recs[1].error_class = "stall_timeout"
    s = summarize(result(recs))
    assert json.loads(s["error_counts_json"]) == {"read_timeout": 1, "stall_timeout": 1, "unknown": 1}
    assert {c: s[f"failed_{c}"] for c in ERROR_CLASSES} == {
        c: (1 if c in ("read_timeout", "stall_timeout") else 0) for c in ERROR_CLASSES}
    assert s["stalled"] is True


def test_stalled_flag():
    assert summarize(result(four_requests()))["stalled"] is False
    assert summarize(result(four_requests(), stalled=True))["stalled"] is True


def test_content_null_and_stream_count_requests_are_counted():
    recs = four_requests()
    recs[0].content_null = True
    recs[2].content_null = True
    recs[1].output_tokens_source = "stream_count"
    s = summarize(result(recs))
    assert s["content_null_requests"] == 2 and s["stream_count_requests"] == 1


def test_tokens_and_their_rates():
    s = summarize(result(four_requests(), end_ms=400))
    assert s["total_input_tokens"] == 32 and s["mean_input_tokens"] == 8.0
    assert s["total_output_tokens"] == 40 and s["mean_output_tokens"] == 10.0


def test_unknown_input_tokens_are_null_not_zero():
    recs = four_requests()
    for r in recs:
        r.input_tokens = None
    s = summarize(result(recs, end_ms=400))
    assert s["input_tok_per_s"] is None and s["total_tok_per_s"] is None
    assert s["total_input_tokens"] is None and s["mean_input_tokens"] is None
    assert s["output_tok_per_s"] == pytest.approx(100.0)


def test_empty_point_has_no_concurrency():
    s = summarize(LoadPointResult([], T0, T0, 1.0))
    assert s["concurrency_peak"] is None and s["client_queue_max_ms"] is None and s["chunk_gap_max_ms"] is None


def test_slo_values_thresholds_and_missing_duration():
    rows = [{"status": "ok", "ttft_ms": 10.0, "tpot_ms": 5.0, "e2e_ms": 100.0}]
    out = slo_values(rows, None, SLO(ttft_ms=20.0, tpot_ms=6.0, e2e_ms=150.0, percentile=90.0))
    assert (out["slo_ttft_ms"], out["slo_tpot_ms"], out["slo_e2e_ms"], out["slo_percentile"]) == (20.0, 6.0, 150.0,
                                                                                                  90.0)
    assert out["goodput_req_per_s"] is None and out["slo_attainment"] == 1.0 and out["slo_met"] is True


def test_slo_met_at_percentile_100():
    rows = [{"status": "ok", "ttft_ms": 10.0, "tpot_ms": 5.0, "e2e_ms": 100.0}] * 199
    rows.append({"status": "ok", "ttft_ms": 30.0, "tpot_ms": 5.0, "e2e_ms": 100.0})
    assert slo_values(rows, 1.0, SLO(ttft_ms=20.0, percentile=100.0))["slo_met"] is False   # 99.5 % < 100 %
    assert slo_values(rows, 1.0, SLO(ttft_ms=20.0, percentile=99.5))["slo_met"] is True


def test_implausible_windows_in_days():
    day = MAX_PLAUSIBLE_NS
    for days, text in ((1000, "1000.00"), (10**7, "10000000.00")):
        with pytest.raises(TimingError, match=rf"^measured window of {text} days is not plausible$"):
            summarize(LoadPointResult([record([], status="failed", end_ms=0)], T0, T0 + days * day, 1.0))


def test_unknown_error_classes_add_up():
    recs = [shifted(record([], status="failed", end_ms=1, index=i), i) for i in range(2)]
    for r in recs:
        r.error_class = None
    assert json.loads(summarize(result(recs))["error_counts_json"]) == {"unknown": 2}


def test_unknown_output_tokens_are_null_not_zero():
    recs = four_requests()
    for r in recs:
        r.output_tokens = None
    s = summarize(result(recs, end_ms=400))
    assert s["output_tok_per_s"] is None and s["total_tok_per_s"] is None and s["total_output_tokens"] is None
    assert s["input_tok_per_s"] == pytest.approx(80.0)


def test_chunk_gap_median_interpolates():
    s = summarize(result([record([(100, 1), (110, 1), (130, 1), (160, 1), (200, 1)])]))
    assert s["chunk_gap_median_ms"] == 25.0 and s["chunk_gap_mean_ms"] == 25.0 and s["chunk_gap_max_ms"] == 40.0
