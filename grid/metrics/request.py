"""Per-request metrics from a raw ``RequestRecord`` (pure; no clocks, no I/O).

Definitions (``*_ms`` are modelled milliseconds: real nanoseconds x ``time_scale`` / 1e6):

* ``ttft_ms``: send -> first event carrying >= 1 generated token (reasoning tokens count; role-only, empty, finish
  and usage-only events do not). Streaming only; null for a non-streamed request (not measured).
* ``ttfo_ms``: send -> first event carrying a content (non-reasoning) token.
* ``e2e_ms``: send -> last token-carrying event (the usage event and ``[DONE]`` do not move it); non-streamed:
  send -> body fully read. Only for ``ok`` requests.
* ``tpot_ms``: (e2e - TTFT) / (output_tokens - 1); only for ``ok`` streamed requests with output_tokens > 1.
* ``chunk_gaps_ms``: gaps between consecutive token-carrying events, not normalised.
* ``itl_tokens_ms``: each chunk gap split evenly over that event's tokens, repeated once per token; the first
  event's extra tokens get 0 ms. ``len == output_tokens - 1`` and ``sum == e2e - TTFT``. When per-event counts are
  estimates (1 per event) and the server's total differs, the later events' counts are re-spread evenly so that
  both invariants hold. Only for ``ok`` streamed requests.
* ``client_queue_ms``: scheduled send -> actual send (with a cap on requests in flight it includes the slot wait).
* ``slot_wait_ms``: time spent waiting for a free client slot, for open-loop points with ``max_concurrency``
  (SGLang bench_serving's and vLLM's ``--request-rate`` with ``--max-concurrency``); null without a cap. Every
  latency above (TTFT, TTFO, e2e) is measured from the actual send, as those clients measure it; a latency as the
  arrival schedule sees it is that latency plus ``client_queue_ms``.

Failed requests keep whatever was measured before the failure (TTFT, chunk gaps); their e2e/TPOT/ITL are null.

An impossible timeline (a missing stamp, a negative or zero duration, events out of order or outside the request,
a duration over ``MAX_PLAUSIBLE_NS``) raises ``TimingError``: it is a bug in the client, never a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from grid.loadgen.records import RequestRecord

#: No request or load point lasts a day: a longer duration means mixed clocks or units.
MAX_PLAUSIBLE_NS: int = 24 * 3600 * 10**9


class TimingError(ValueError):
    """An impossible timing: a bug in the measurement, never a metric value."""


@dataclass(frozen=True)
class RequestMetrics:
    ttft_ms: float | None
    ttfo_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    client_queue_ms: float | None
    slot_wait_ms: float | None = None
    itl_tokens_ms: list[float] = field(default_factory=list)
    chunk_gaps_ms: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    input_tokens: int | None = None


def check_time_scale(time_scale: float) -> None:
    if not isinstance(time_scale, (int, float)) or not time_scale > 0 or math.isinf(time_scale):
        raise TimingError(f"time_scale must be a finite number > 0, got {time_scale!r}")


def _check_duration(name: str, ns: int, rec: RequestRecord, *, allow_zero: bool) -> None:
    if ns < 0 or (ns == 0 and not allow_zero):
        raise TimingError(f"request {rec.request_index}: {name} = {ns} ns is {'negative' if ns < 0 else 'zero'}")
    if ns > MAX_PLAUSIBLE_NS:
        raise TimingError(f"request {rec.request_index}: {name} = {ns / 1e9 / 86400:.2f} days is not plausible")


def spread_tokens(counts: list[int], total: int | None) -> list[int]:
    """Per-event token counts for ITL: ``counts`` (token-carrying events) adjusted so they sum to ``total``.

    Unchanged when they already do (or when ``total`` is unknown or smaller than the number of events, which cannot
    be reconciled). Otherwise the first event keeps its count (capped) and the rest of ``total`` is spread evenly
    over the later events, earlier events taking the remainder.
    """
    if total is None or sum(counts) == total or total < len(counts) or not counts:
        return list(counts)
    if len(counts) == 1:
        return [total]
    later = len(counts) - 1
    first = min(counts[0], total - later)
    rest = total - first
    base, extra = divmod(rest, later)
    return [first] + [base + (1 if i < extra else 0) for i in range(later)]


def request_metrics(rec: RequestRecord, time_scale: float = 1.0) -> RequestMetrics:
    """Derive the per-request metrics from one record (see the module docstring for the definitions)."""
    check_time_scale(time_scale)
    scale = time_scale / 1e6  # real ns -> modelled ms
    send, end = rec.send_perf_ns, rec.end_perf_ns
    if send is None or end is None:
        raise TimingError(f"request {rec.request_index}: missing send_perf_ns or end_perf_ns")
    _check_duration("end - send", end - send, rec, allow_zero=rec.status != "ok")
    queue_ms = None
    if rec.scheduled_perf_ns is not None:
        queue = send - rec.scheduled_perf_ns
        _check_duration("client queue (send - scheduled)", queue, rec, allow_zero=True)
        queue_ms = queue * scale
    slot_ms = None
    if rec.slot_wait_ns is not None:
        _check_duration("slot wait", rec.slot_wait_ns, rec, allow_zero=True)
        if rec.scheduled_perf_ns is not None and rec.slot_wait_ns > send - rec.scheduled_perf_ns:
            raise TimingError(f"request {rec.request_index}: slot wait exceeds scheduled-to-send")
        slot_ms = rec.slot_wait_ns * scale
    if len(rec.chunk_perf_ns) != len(rec.chunk_tokens):
        raise TimingError(f"request {rec.request_index}: chunk_perf_ns and chunk_tokens differ in length")
    prev = send
    for ts in rec.chunk_perf_ns:
        if ts < prev or ts > end:
            raise TimingError(f"request {rec.request_index}: event at {ts} ns is out of order or outside [send, end]")
        prev = ts
    token_ts = [ts for ts, k in zip(rec.chunk_perf_ns, rec.chunk_tokens) if k > 0]
    counts = [k for k in rec.chunk_tokens if k > 0]
    if any(k < 0 for k in rec.chunk_tokens):
        raise TimingError(f"request {rec.request_index}: negative token count in chunk_tokens")
    ok = rec.status == "ok"

    ttft_ms = ttfo_ms = tpot_ms = e2e_ms = None
    gaps_ms: list[float] = []
    itl_ms: list[float] = []
    if rec.stream:
        if token_ts:
            if rec.first_token_perf_ns is not None and rec.first_token_perf_ns != token_ts[0]:
                raise TimingError(f"request {rec.request_index}: first_token_perf_ns is not the first token event")
            ttft = token_ts[0] - send
            _check_duration("TTFT", ttft, rec, allow_zero=False)
            ttft_ms = ttft * scale
            gaps_ms = [(b - a) * scale for a, b in zip(token_ts, token_ts[1:])]
        if rec.first_content_perf_ns is not None:
            ttfo = rec.first_content_perf_ns - send
            _check_duration("TTFO", ttfo, rec, allow_zero=False)
            ttfo_ms = ttfo * scale
        if ok:
            if not token_ts:
                raise TimingError(f"request {rec.request_index}: status ok without a token event")
            e2e = token_ts[-1] - send
            _check_duration("e2e", e2e, rec, allow_zero=False)
            e2e_ms = e2e * scale
            n = rec.output_tokens
            if n is not None and n > 1:
                tpot_ms = (token_ts[-1] - token_ts[0]) / (n - 1) * scale
            eff = spread_tokens(counts, n)
            itl_ms = [0.0] * (eff[0] - 1)
            for (a, b), k in zip(zip(token_ts, token_ts[1:]), eff[1:]):
                itl_ms.extend([(b - a) / k * scale] * k)
    elif ok:
        e2e_ms = (end - send) * scale

    return RequestMetrics(
        ttft_ms=ttft_ms, ttfo_ms=ttfo_ms, tpot_ms=tpot_ms, e2e_ms=e2e_ms, client_queue_ms=queue_ms, slot_wait_ms=slot_ms,
        itl_tokens_ms=itl_ms, chunk_gaps_ms=gaps_ms, output_tokens=rec.output_tokens, input_tokens=rec.input_tokens,
    )
