"""Per-request metrics with exact integer nanosecond timestamps."""

from __future__ import annotations

import pytest

from grid.loadgen.records import RequestRecord
from grid.metrics.request import MAX_PLAUSIBLE_NS, TimingError, request_metrics, spread_tokens

MS = 1_000_000
SEND = 10_000_000_000  # an arbitrary perf_counter origin


def record(chunks: list[tuple[int, int]], *, status="ok", output_tokens=None, end_ms=None, scheduled_ms=0,
           content_ms=None, stream=True, index=0) -> RequestRecord:
    """chunks: (ms after send, tokens)."""
    r = RequestRecord(request_index=index, prompt_index=index, api="generate", stream=stream, max_tokens=256,
                      planned_input_len=8)
    r.scheduled_perf_ns = SEND - scheduled_ms * MS
    r.send_perf_ns = SEND
    r.chunk_perf_ns = [SEND + t * MS for t, _ in chunks]
    r.chunk_tokens = [k for _, k in chunks]
    tok = [SEND + t * MS for t, k in chunks if k]
    r.first_token_perf_ns = tok[0] if tok else None
    r.last_token_perf_ns = tok[-1] if tok else None
    r.first_content_perf_ns = SEND + content_ms * MS if content_ms is not None else r.first_token_perf_ns
    last = max([t for t, _ in chunks], default=0)
    r.end_perf_ns = SEND + (end_ms if end_ms is not None else last + 1) * MS
    r.status = status
    r.output_tokens = output_tokens if output_tokens is not None else sum(r.chunk_tokens)
    r.output_tokens_source = "usage"
    r.input_tokens = 8
    if status != "ok":
        r.error_class = "read_timeout"
    return r


def test_case_1_exact():
    m = request_metrics(record([(100, 1), (150, 2), (200, 1)]))
    assert m.ttft_ms == 100.0
    assert m.itl_tokens_ms == [25.0, 25.0, 50.0]
    assert m.chunk_gaps_ms == [50.0, 50.0]
    assert m.tpot_ms == pytest.approx(100 / 3, rel=1e-12)
    assert m.e2e_ms == 200.0 and m.client_queue_ms == 0.0


def test_itl_invariants_and_first_chunk_extra_tokens():
    m = request_metrics(record([(40, 3), (60, 1), (90, 4)]))
    assert m.itl_tokens_ms == [0.0, 0.0, 20.0, 7.5, 7.5, 7.5, 7.5]
    assert len(m.itl_tokens_ms) == 8 - 1
    assert sum(m.itl_tokens_ms) == pytest.approx(m.e2e_ms - m.ttft_ms)
    assert m.tpot_ms == pytest.approx(50 / 7)


def test_zero_token_events_move_nothing():
    m = request_metrics(record([(5, 0), (300, 1), (320, 1), (330, 0), (400, 0)], end_ms=401))
    assert m.ttft_ms == 300.0 and m.e2e_ms == 320.0 and m.chunk_gaps_ms == [20.0] and m.itl_tokens_ms == [20.0]


def test_usage_total_larger_than_stream_count_is_spread():
    # 4 events counted as 1 token each, server says 10 tokens: TPOT divides by 9, ITL keeps both invariants
    m = request_metrics(record([(10, 1), (20, 1), (30, 1), (60, 1)], output_tokens=10))
    assert m.tpot_ms == pytest.approx(50 / 9)
    assert len(m.itl_tokens_ms) == 9
    assert sum(m.itl_tokens_ms) == pytest.approx(50.0)
    assert spread_tokens([1, 1, 1, 1], 10) == [1, 3, 3, 3]
    assert spread_tokens([1, 1, 1, 1], 11) == [1, 4, 3, 3]
    assert spread_tokens([2, 1], 3) == [2, 1]
    assert spread_tokens([1, 1, 1], 2) == [1, 1, 1]  # cannot be reconciled: left as observed


def test_single_token_has_no_tpot_and_no_itl():
    m = request_metrics(record([(10, 1)]))
    assert m.tpot_ms is None and m.itl_tokens_ms == [] and m.ttft_ms == 10.0 and m.e2e_ms == 10.0


def test_time_scale_and_client_queue():
    m = request_metrics(record([(100, 1), (150, 2), (200, 1)], scheduled_ms=3), time_scale=4.0)
    assert m.ttft_ms == 400.0 and m.itl_tokens_ms == [100.0, 100.0, 200.0] and m.client_queue_ms == 12.0


def test_failed_request_keeps_partial_measurements_but_no_e2e():
    m = request_metrics(record([(10, 1), (20, 1)], status="failed", end_ms=600))
    assert m.ttft_ms == 10.0 and m.chunk_gaps_ms == [10.0]
    assert m.e2e_ms is None and m.tpot_ms is None and m.itl_tokens_ms == []


def test_failed_without_tokens_has_null_ttft():
    m = request_metrics(record([], status="failed", end_ms=5))
    assert m.ttft_ms is None and m.ttfo_ms is None and m.e2e_ms is None


def test_ttfo_after_reasoning():
    m = request_metrics(record([(100, 1), (300, 1)], content_ms=300))
    assert m.ttft_ms == 100.0 and m.ttfo_ms == 300.0


def test_non_streamed_has_e2e_only():
    r = record([(50, 32)], stream=False, end_ms=50)
    m = request_metrics(r)
    assert m.e2e_ms == 50.0 and m.ttft_ms is None and m.tpot_ms is None and m.output_tokens == 32


# TimingError --------------------------------------------------------------------------------------------------------
def _broken(kind: str) -> RequestRecord:
    r = record([(100, 1), (150, 2), (200, 1)])
    if kind == "end_before_send":
        r.end_perf_ns = SEND - 1
    elif kind == "zero_e2e":
        r.chunk_perf_ns = [SEND]
        r.chunk_tokens = [1]
        r.first_token_perf_ns = r.last_token_perf_ns = r.first_content_perf_ns = SEND
        r.end_perf_ns = SEND
    elif kind == "zero_ttft":
        r.chunk_perf_ns[0] = SEND
        r.first_token_perf_ns = r.first_content_perf_ns = SEND
    elif kind == "days":
        r.end_perf_ns = SEND + 20 * 86400 * 10**9  # the 20-day wall time
    elif kind == "unix_mixed":
        r.end_perf_ns = 1_700_000_000 * 10**9  # a unix stamp where a perf stamp belongs
    elif kind == "out_of_order":
        r.chunk_perf_ns[1], r.chunk_perf_ns[2] = r.chunk_perf_ns[2], r.chunk_perf_ns[1]
    elif kind == "chunk_after_end":
        r.end_perf_ns = SEND + 150 * MS
    elif kind == "negative_queue":
        r.scheduled_perf_ns = SEND + 1
    elif kind == "not_sent":
        r.send_perf_ns = None
    elif kind == "ok_without_tokens":
        r.chunk_tokens = [0, 0, 0]
        r.first_token_perf_ns = r.last_token_perf_ns = None
    return r


@pytest.mark.parametrize("kind", ["end_before_send", "zero_e2e", "zero_ttft", "days", "unix_mixed", "out_of_order",
                                  "chunk_after_end", "negative_queue", "not_sent", "ok_without_tokens"])
def test_impossible_timings_raise(kind):
    with pytest.raises(TimingError):
        request_metrics(_broken(kind))


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_time_scale_raises(scale):
    with pytest.raises(TimingError):
        request_metrics(record([(10, 1)]), time_scale=scale)


def test_plausibility_limit_is_a_day():
    assert MAX_PLAUSIBLE_NS == 86_400 * 10**9
    r = record([(10, 1)], end_ms=86_400_000)  # exactly a day is (barely) allowed
    request_metrics(r)
