"""Per-request metrics at their edges: every impossible timeline names what is wrong, token spreading, TPOT of two
tokens, zero-token events, what a failed or non-streamed request keeps."""

from __future__ import annotations

import pytest

from grid.metrics.request import TimingError, request_metrics, spread_tokens

from .test_request_metrics import MS, SEND, _broken, record

MESSAGES = {
    "end_before_send": "request 0: end - send = -1 ns is negative",
    "zero_e2e": "request 0: end - send = 0 ns is zero",
    "zero_ttft": "request 0: TTFT = 0 ns is zero",
    "days": "request 0: end - send = 20.00 days is not plausible",
    "out_of_order": f"request 0: event at {SEND + 150 * MS} ns is out of order or outside [send, end]",
    "chunk_after_end": f"request 0: event at {SEND + 200 * MS} ns is out of order or outside [send, end]",
    "negative_queue": "request 0: client queue (send - scheduled) = -1 ns is negative",
    "not_sent": "request 0: missing send_perf_ns or end_perf_ns",
    "ok_without_tokens": "request 0: status ok without a token event",
}


@pytest.mark.parametrize("kind", list(MESSAGES))
def test_each_impossible_timeline_says_what(kind):
    with pytest.raises(TimingError) as err:
        request_metrics(_broken(kind))
    assert str(err.value) == MESSAGES[kind]


def test_other_impossible_records():
    r = record([(100, 1), (150, 1)], index=3)
    r.first_token_perf_ns = SEND + 150 * MS
    with pytest.raises(TimingError, match=r"^request 3: first_token_perf_ns is not the first token event$"):
        request_metrics(r)
    r = record([(100, 1), (150, 1)], content_ms=0)
    with pytest.raises(TimingError, match=r"^request 0: TTFO = 0 ns is zero$"):
        request_metrics(r)
    r = record([(100, 1), (150, 1)])
    r.chunk_tokens = [1]
    with pytest.raises(TimingError, match=r"^request 0: chunk_perf_ns and chunk_tokens differ in length$"):
        request_metrics(r)
    r = record([(100, 1), (150, -1)])
    with pytest.raises(TimingError, match=r"^request 0: negative token count in chunk_tokens$"):
        request_metrics(r)
    r = record([(10, 1)])
    with pytest.raises(TimingError, match=r"^time_scale must be a finite number > 0, got 0$"):
        request_metrics(r, 0)


def test_events_at_the_send_instant_and_ties_are_in_order():
    m = request_metrics(record([(0, 0), (100, 1), (150, 1), (150, 1)]))     # a role-only event at send; a tie
    assert m.ttft_ms == 100.0 and m.chunk_gaps_ms == [50.0, 0.0] and m.itl_tokens_ms == [50.0, 0.0]


def test_zero_token_events_in_the_middle():
    m = request_metrics(record([(100, 1), (120, 0), (150, 2), (200, 1)]))
    assert m.chunk_gaps_ms == [50.0, 50.0] and m.itl_tokens_ms == [25.0, 25.0, 50.0]


def test_two_tokens_have_a_tpot():
    m = request_metrics(record([(100, 1), (130, 1)]))
    assert m.tpot_ms == 30.0 and m.itl_tokens_ms == [30.0]


def test_failed_request_may_end_at_its_send():
    m = request_metrics(record([], status="failed", end_ms=0))
    assert m.e2e_ms is None and m.ttft_ms is None and m.chunk_gaps_ms == [] and m.itl_tokens_ms == []


def test_no_schedule_no_queue_and_non_streamed_has_no_gaps():
    r = record([(100, 1)], stream=False)
    r.scheduled_perf_ns = None
    m = request_metrics(r)
    assert m.client_queue_ms is None and m.chunk_gaps_ms == [] and m.itl_tokens_ms == [] and m.e2e_ms == 101.0


@pytest.mark.parametrize("counts,total,expected", [
    ([1, 1, 1], 3, [1, 1, 1]),       # already right
    ([1, 1, 1], None, [1, 1, 1]),    # unknown total
    ([1, 1, 1], 2, [1, 1, 1]),       # fewer tokens than events: cannot be reconciled
    ([], 5, []),
    ([3], 5, [5]),                   # one event takes everything
    ([2, 1], 2, [1, 1]),             # as many tokens as events
    ([1, 3, 1], 7, [1, 3, 3]),       # the first keeps its count, the rest spread evenly
    ([1, 1, 1, 1], 9, [1, 3, 3, 2]),  # earlier events take the remainder
    ([5, 1], 3, [2, 1]),             # the first is capped so every later event keeps a token
])
def test_spread_tokens(counts, total, expected):
    assert spread_tokens(counts, total) == expected
    if total is not None and total >= len(counts) and counts:
        assert sum(spread_tokens(counts, total)) == total


def test_implausible_durations_in_days():
    for days, text in ((1000, "1000.00"), (10**7, "10000000.00")):
        r = record([(10, 1)])
        r.end_perf_ns = SEND + days * 86_400 * 10**9
        with pytest.raises(TimingError, match=rf"^request 0: end - send = {text} days is not plausible$"):
            request_metrics(r)
