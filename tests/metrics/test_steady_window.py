"""Steady-state windows (window_kind steady_state) on a constructed closed loop with exact integer timestamps.

Two workers, every request 100 ms long: TTFT 10 ms, then one token every 10 ms (10 tokens, the last at +100 ms,
which is also its end), the next send 1 ms after the previous end; worker 1's phase is 50 ms behind worker 0's.

    worker 0: warm-up w0 [0, 100]   m0 [101, 201]   m2 [202, 302]   tail t0 [303, 352] cancelled
    worker 1:   warm-up w1 [50, 150]   m1 [151, 251]   m3 [252, 352]

The window is m0's send (101 ms) -> m3's end (352 ms): 251 ms, both workers busy throughout.
"""

from __future__ import annotations

import pytest

from grid.loadgen.records import TAIL_CANCELLED
from grid.loadgen.runner import LoadPointResult
from grid.metrics.loadpoint import SLO, summarize, window_tokens
from grid.report.select import rejudge
from grid.storage.schema import request_rows

from .test_request_metrics import MS, SEND, record

T0 = SEND


def req(index: int, send_ms: int, *, tokens: int = 10, end_ms: int | None = None, warmup: bool = False):
    """A request sent at send_ms (after T0) with ``tokens`` single-token events 10 ms apart from +10 ms."""
    r = record([(10 * (k + 1), 1) for k in range(tokens)], index=index, end_ms=10 * tokens)
    d = send_ms * MS
    r.scheduled_perf_ns = r.send_perf_ns = SEND + d
    r.chunk_perf_ns = [t + d for t in r.chunk_perf_ns]
    r.first_token_perf_ns, r.last_token_perf_ns = r.chunk_perf_ns[0], r.chunk_perf_ns[-1]
    r.first_content_perf_ns = r.first_token_perf_ns
    r.end_perf_ns = SEND + (send_ms + (10 * tokens if end_ms is None else end_ms - send_ms)) * MS
    r.warmup = warmup
    return r


def cancelled_tail(index: int, send_ms: int, end_ms: int):
    r = req(index, send_ms, tokens=4, end_ms=end_ms)
    r.status, r.error_class, r.error_message = "failed", "client_error", TAIL_CANCELLED
    r.output_tokens = 4  # what the stream had counted when it was cut
    return r


def loop() -> LoadPointResult:
    measured = [req(0, 101), req(1, 151), req(2, 202), req(3, 252)]
    warm = [req(100, 0, warmup=True), req(101, 50, warmup=True)]
    tail = [cancelled_tail(200, 303, 352)]
    return LoadPointResult(records=measured, window_start_perf_ns=T0 + 101 * MS, window_end_perf_ns=T0 + 352 * MS,
                           time_scale=1.0, warmup_records=warm, window_kind="steady_state", tail_records=tail)


def test_tokens_count_by_arrival_inside_the_window():
    res = loop()
    start, end = res.window_start_perf_ns, res.window_end_perf_ns
    w0, w1 = res.warmup_records
    assert window_tokens(w0, start, end) == (0, 0)        # every token (and its first) before 101 ms
    assert window_tokens(w1, start, end) == (0, 5)        # tokens at 110..150 ms; its prefill was before
    assert [window_tokens(r, start, end) for r in res.records] == [(8, 10)] * 4   # m3's last token at 352 counts
    assert window_tokens(res.tail_records[0], start, end) == (8, 4)   # cancelled tail: what arrived
    failed = cancelled_tail(201, 303, 352)
    failed.error_class, failed.error_message = "read_timeout", "no bytes"
    assert window_tokens(failed, start, end) == (0, 0)    # a real failure counts nothing


def test_steady_window_throughput_concurrency_exact():
    s = summarize(loop())
    assert s["window_kind"] == "steady_state"
    assert (s["warmup_requests_run"], s["tail_requests_run"]) == (2, 1)
    assert s["duration_s"] == pytest.approx(0.251)
    # 5 + 4 x 10 + 4 output tokens; 5 prefills (m0..m3, t0) of 8 input tokens
    assert s["output_tok_per_s"] == pytest.approx(49 / 0.251)
    assert s["input_tok_per_s"] == pytest.approx(40 / 0.251)
    assert s["total_tok_per_s"] == pytest.approx(89 / 0.251)
    # ok requests that ended inside: w1 (150), m0..m3 (201, 251, 302, 352); w0 ended at 100, before it
    assert s["requests_per_s"] == pytest.approx(5 / 0.251)
    # clipped lifetimes: w1 49 + 4 x 100 + t0 49 = 498 ms over 251 ms; never more than the 2 workers
    assert s["concurrency_mean"] == pytest.approx(498 / 251)
    assert s["concurrency_peak"] == 2
    # the measured requests alone: counts, token totals and latencies
    assert (s["requests_total"], s["completed"], s["total_output_tokens"]) == (4, 4, 40)
    assert s["ttft_median_ms"] == 10.0 and s["ttft_max_ms"] == 10.0 and s["tpot_mean_ms"] == 10.0
    assert s["e2e_max_ms"] == 100.0


def test_the_same_records_counted_whole_read_lower():
    # all_requests over the same window counts the 4 measured requests whole: 40 tokens / 251 ms, 20 % below the
    # 2 workers' rate (2 x 10 tokens per 101 ms = 198 tok/s); the steady window reads 195.2 tok/s
    res = loop()
    whole = LoadPointResult(records=res.records, window_start_perf_ns=res.window_start_perf_ns,
                            window_end_perf_ns=res.window_end_perf_ns, time_scale=1.0)
    s = summarize(whole)
    assert s["window_kind"] == "all_requests" and s["tail_requests_run"] == 0
    assert s["output_tok_per_s"] == pytest.approx(40 / 0.251)
    assert s["requests_per_s"] == pytest.approx(4 / 0.251)
    assert s["concurrency_mean"] == pytest.approx(400 / 251)
    assert summarize(res)["output_tok_per_s"] == pytest.approx(195.219, abs=1e-3)


def test_steady_goodput_is_the_window_rate_times_the_good_share_and_rejudge_agrees():
    res = loop()
    res.records[3] = req(3, 252, end_ms=352)
    res.records[3].chunk_perf_ns[0] += 5 * MS        # m3: TTFT 15 ms
    res.records[3].first_token_perf_ns = res.records[3].chunk_perf_ns[0]
    res.records[3].first_content_perf_ns = res.records[3].first_token_perf_ns
    slo = SLO(ttft_ms=12.0, percentile=50.0)
    s = summarize(res, slo)
    assert s["slo_attainment"] == 0.75
    assert s["goodput_req_per_s"] == pytest.approx(5 / 0.251 * 3 / 4)
    rows = request_rows(res, config_hash="h", trial_id="t", point_index=0)
    point = {"config_hash": "h", "point_index": 0, **s}
    (judged,) = rejudge([point], rows, slo)
    assert judged["goodput_req_per_s"] == s["goodput_req_per_s"]
    (judged,) = rejudge([{**point, "window_kind": "all_requests"}], rows, slo)
    assert judged["goodput_req_per_s"] == pytest.approx(3 / 0.251)   # good requests / duration
