"""Per-load-point summary over the measured requests (pure).

``summarize(result, slo)`` returns one value per metric column of the ``load_points`` table (``METRIC_COLUMNS``
lists them with type, unit and definition; ``grid.storage.schema`` builds the Arrow schema from it).

Conventions:

* The measured window is ``result.window_start_perf_ns`` (first scheduled send) -> ``window_end_perf_ns`` (last
  request end); ``duration_s`` is that in modelled seconds (x ``time_scale``). Throughputs are per modelled second
  and count successful (``ok``) requests only. How they count depends on ``result.window_kind`` (column
  ``window_kind``):

  - ``all_requests`` (closed loops started together, open loops, traces): the measured requests whole, as SGLang's
    bench_serving and vLLM's benchmark client do (python/sglang/benchmark/serving.py ``calculate_metrics``: tokens
    of the completed requests / first send to last end). A closed loop's window then includes its ramp-down.
  - ``steady_state`` (closed loops with a spread warm-up wave and a tail, ``grid.loadgen.runner``): every worker
    is busy from the window's start to its end, so the window is at the target concurrency throughout. Tokens count
    by the arrival time of the event that carried them, inside the window, from every request of the point:
    measured, warm-up and tail (a tail request cancelled at the window's end counts what arrived before; any other
    failed request counts nothing). This is AIPerf's ``--steady-state`` definition ("only tokens emitted during the
    measurement window are counted", NVIDIA AIPerf's steady-state tutorial,
    https://github.com/nvda-ci/aiperf/blob/main/docs/tutorials/steady-state.md) and GuideLLM's
    (``output_tokens_per_second`` from each request's token timings inside the window after warm-up and before
    cool-down, https://github.com/vllm-project/guidellm src/guidellm/benchmark/schemas/metrics.py;
    ``TransientPhaseConfig``, schemas/base.py). Output tokens: an
    ``ok`` streamed request's per-event counts, re-spread to its reported total as for ITL
    (``grid.metrics.request.spread_tokens``); a non-streamed one counts at its end. Input tokens count when the
    request's first token arrives (its prefill is done then). ``requests_per_s``: ``ok`` requests that ended
    inside the window / ``duration_s``; ``goodput_req_per_s`` = ``requests_per_s`` x the share of ``ok`` measured
    requests that meet every SLO. Mean concurrency is the in-flight time of every request clipped to the window /
    the window, peak concurrency the most clipped lifetimes overlapping.
* Per-request latencies come from the measured requests only, in both kinds; in ``steady_state`` each of them ran
  entirely inside the window, at the target concurrency, with the workers' phases spread (no synchronized waves, so
  TTFT is not bimodal with fixed lengths).
* Latency statistics (mean, median, p90, p95, p99, max; ``numpy.percentile`` with linear interpolation) are over
  ``ok`` requests; ITL pools every per-token ITL of every ``ok`` request.
* Concurrency (``all_requests``; ``steady_state``: above) uses every measured request's lifetime [send, end)
  (failed ones too: they held a connection): mean = sum of lifetimes / window (Little's law), peak = the sweep-line
  maximum of overlapping lifetimes.
* SLOs: a request is *good* when it is ``ok`` and meets every given threshold (TPOT of a 1-token output counts as
  met). ``goodput`` = good / duration; ``slo_attainment`` = good / all measured requests; per-metric attainment
  likewise. ``slo_met``: for every given metric, at least ``percentile`` % of all measured requests meet it (failed
  requests count as misses), i.e. the nearest-rank p<percentile> is within the SLO. ``slo_values`` computes these
  from per-request rows (the stored ``requests`` table or the records of a load point): the report re-judges every
  recorded load point with it under the current objective, and ``summarize`` uses it too, so both agree exactly.
* A value that was not measured is null, never 0: no ``ok`` request means null throughputs and latencies (the
  counts say why); no SLO means null goodput/attainment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from grid.loadgen.records import ERROR_CLASSES, TAIL_CANCELLED, RequestRecord
from grid.metrics.request import (
    MAX_PLAUSIBLE_NS,
    RequestMetrics,
    TimingError,
    check_time_scale,
    request_metrics,
    spread_tokens,
)

if TYPE_CHECKING:
    from grid.loadgen.runner import LoadPointResult


@dataclass(frozen=True)
class SLO:
    """Latency targets (modelled ms; None: no target) that ``percentile`` % (in (0, 100]) of requests must meet."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: float = 99.0

    def given(self) -> dict[str, float]:
        """The targets that are set, by metric name (``ttft``, ``tpot``, ``e2e``) -> threshold in ms."""
        pairs = (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2e", self.e2e_ms))
        return {k: v for k, v in pairs if v is not None}


_STATS: tuple[tuple[str, float | None], ...] = (("mean", None), ("median", 50.0), ("p90", 90.0), ("p95", 95.0),
                                                ("p99", 99.0), ("max", None))
_LAT = {
    "ttft": "time to first token (first event with a generated token)",
    "tpot": "time per output token, (e2e - TTFT) / (output_tokens - 1), one value per request",
    "itl": "per-token inter-token latency (chunk gaps split over their tokens), pooled over requests",
    "e2e": "end-to-end latency, send to last token event",
}

# (name, type, unit, description). type is one of int64, float64, bool, string.
METRIC_COLUMNS: list[tuple[str, str, str, str]] = [
    ("requests_total", "int64", "requests", "measured requests (warm-up excluded), ok and failed"),
    ("completed", "int64", "requests", "requests with status ok"),
    ("failed", "int64", "requests", "requests with status failed"),
    *[(f"failed_{c}", "int64", "requests", f"failed requests with error class {c}") for c in ERROR_CLASSES],
    ("error_counts_json", "string", "json", "JSON object: error class -> failed request count"),
    ("stalled", "bool", "flag", "a request hit the token-progress watchdog (stall_timeout)"),
    ("content_null_requests", "int64", "requests", "ok requests that produced reasoning but no content"),
    ("stream_count_requests", "int64", "requests",
     "ok requests whose output_tokens is a stream count (the server reported no usage)"),
    ("duration_s", "float64", "s", "measured window (first scheduled send to last request end), modelled seconds"),
    ("held_s", "float64", "s",
     "seconds the point held the server, modelled: the warm-up requests' span (first send to last end) plus the "
     "main phase's (its first send, a steady-state wave included, to the window's end; tail requests are cancelled "
     "there), x time_scale; what a GPU-hour count of the point reads (grid/search/summary.py); null: no request sent"),
    ("window_kind", "string", "kind",
     "all_requests: throughputs count the measured requests whole; steady_state: the window is at the target "
     "concurrency throughout and tokens count by arrival inside it (grid/metrics/loadpoint.py)"),
    ("warmup_requests_run", "int64", "requests",
     "requests run before the window and not measured: load.warmup_requests, plus the first wave (one per stream, "
     "output lengths spread over 1/c .. 1 of output_len) of a steady_state point"),
    ("tail_requests_run", "int64", "requests",
     "steady_state: requests sent after the measured ones to keep the load on until they ended (cancelled then); "
     "0 otherwise"),
    ("requests_per_s", "float64", "req/s",
     "ok requests / duration_s (steady_state: ok requests of the point that ended inside the window)"),
    ("input_tok_per_s", "float64", "tok/s",
     "sum of input tokens of ok requests / duration_s (steady_state: of requests whose first token arrived inside "
     "the window)"),
    ("output_tok_per_s", "float64", "tok/s",
     "sum of output tokens of ok requests / duration_s (steady_state: tokens that arrived inside the window)"),
    ("total_tok_per_s", "float64", "tok/s", "input_tok_per_s + output_tok_per_s"),
    ("total_input_tokens", "int64", "tokens", "sum of input tokens of ok requests (server usage, else planned)"),
    ("total_output_tokens", "int64", "tokens", "sum of output tokens of ok requests (never the requested maximum)"),
    ("mean_input_tokens", "float64", "tokens", "mean input tokens of ok requests"),
    ("mean_output_tokens", "float64", "tokens", "mean output tokens of ok requests"),
    ("total_cached_tokens", "int64", "tokens",
     "prompt tokens the server found in its prefix cache, over ok requests that report it (SGLang meta_info."
     "cached_tokens; OpenAI usage.prompt_tokens_details.cached_tokens); null: no request reported it"),
    ("cache_hit_rate", "float64", "fraction",
     "total_cached_tokens / the input tokens of the same requests (the prefix cache's hit rate as requests saw it)"),
    ("concurrency_mean", "float64", "requests",
     "sum of request lifetimes [send, end) / window (Little's law; steady_state: every request's lifetime clipped "
     "to the window)"),
    ("concurrency_peak", "int64", "requests",
     "most requests in flight at once (sweep line over [send, end); steady_state: clipped to the window)"),
    *[
        (f"{m}_{s}_ms", "float64", "ms", f"{s} of {desc} over ok requests, modelled ms")
        for m, desc in _LAT.items()
        for s, _ in _STATS
    ],
    ("ttfo_mean_ms", "float64", "ms", "mean time to first content (non-reasoning) token over ok requests"),
    ("ttfo_median_ms", "float64", "ms", "median time to first content token over ok requests"),
    ("ttfo_p99_ms", "float64", "ms", "p99 time to first content token over ok requests"),
    ("chunk_gap_mean_ms", "float64", "ms", "mean gap between token-carrying events (not per token), ok requests"),
    ("chunk_gap_median_ms", "float64", "ms", "median gap between token-carrying events, ok requests"),
    ("chunk_gap_p99_ms", "float64", "ms", "p99 gap between token-carrying events, ok requests"),
    ("chunk_gap_max_ms", "float64", "ms", "largest gap between token-carrying events, ok requests"),
    ("client_queue_mean_ms", "float64", "ms", "mean scheduled-to-actual send delay, all measured requests"),
    ("client_queue_p99_ms", "float64", "ms", "p99 scheduled-to-actual send delay, all measured requests"),
    ("client_queue_max_ms", "float64", "ms", "largest scheduled-to-actual send delay, all measured requests"),
    ("slot_wait_mean_ms", "float64", "ms",
     "mean time a request waited for a client slot (rate with max_concurrency; null without a cap)"),
    ("slot_wait_p99_ms", "float64", "ms", "p99 time a request waited for a client slot (null without a cap)"),
    ("slot_wait_max_ms", "float64", "ms", "largest time a request waited for a client slot (null without a cap)"),
    ("slo_ttft_ms", "float64", "ms", "TTFT SLO threshold used (null: none)"),
    ("slo_tpot_ms", "float64", "ms", "TPOT SLO threshold used (null: none)"),
    ("slo_e2e_ms", "float64", "ms", "E2E SLO threshold used (null: none)"),
    ("slo_percentile", "float64", "percent", "percentile the SLOs apply to (null: no SLO)"),
    ("goodput_req_per_s", "float64", "req/s",
     "ok requests meeting every given SLO / duration_s (steady_state: requests_per_s x their share of ok requests)"),
    ("slo_attainment", "float64", "fraction", "requests meeting every given SLO / requests_total"),
    ("slo_attainment_ttft", "float64", "fraction", "requests meeting the TTFT SLO / requests_total"),
    ("slo_attainment_tpot", "float64", "fraction", "requests meeting the TPOT SLO / requests_total"),
    ("slo_attainment_e2e", "float64", "fraction", "requests meeting the E2E SLO / requests_total"),
    ("slo_met", "bool", "flag", "for every given SLO, >= percentile % of requests meet it (failed = miss)"),
]
METRIC_COLUMN_NAMES: list[str] = [c[0] for c in METRIC_COLUMNS]

#: The load-point columns whose value depends on the SLOs (``slo_values`` computes them).
SLO_COLUMNS: list[str] = [
    "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms", "slo_percentile", "goodput_req_per_s", "slo_attainment",
    "slo_attainment_ttft", "slo_attainment_tpot", "slo_attainment_e2e", "slo_met",
]
#: Keys ``slo_values`` adds besides ``SLO_COLUMNS`` (never stored): each given SLO metric at the SLO's percentile
#: over ok requests (modelled ms, ``numpy.percentile`` linear interpolation, as the stored p90/p95/p99 columns).
SLO_LATENCY_KEYS: dict[str, str] = {"ttft": "slo_ttft_at_pct_ms", "tpot": "slo_tpot_at_pct_ms",
                                    "e2e": "slo_e2e_at_pct_ms"}


def _stats(prefix: str, values: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    arr = np.asarray(values, dtype=float)
    for name, q in _STATS:
        key = f"{prefix}_{name}_ms"
        if arr.size == 0:
            out[key] = None
        elif name == "mean":
            out[key] = float(arr.mean())
        elif name == "max":
            out[key] = float(arr.max())
        elif q is not None:
            out[key] = float(np.percentile(arr, q))
    return out


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def peak_concurrency(intervals: list[tuple[int, int]]) -> int:
    """Most half-open intervals [start, end) overlapping at any instant (an end at t is before a start at t)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])  # -1 sorts before +1
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def _meets(metric: str, value: float | None, limit: float) -> bool:
    if metric == "tpot":
        return value is None or value <= limit  # a 1-token output has no TPOT: counts as met
    return value is not None and value <= limit


def slo_values(requests: Iterable[Mapping[str, Any]], duration_s: float | None,
               slo: SLO | None, requests_per_s: float | None = None) -> dict[str, float | bool | None]:
    """The SLO-dependent values of one load point, from its measured requests (pure).

    ``requests``: one mapping per measured request with ``status`` (ok | failed) and ``ttft_ms``, ``tpot_ms``,
    ``e2e_ms`` (modelled ms, null when not measured), i.e. rows of the ``requests`` table of one
    (config_hash, point_index), which holds measured requests only. ``duration_s``: the load point's measured
    window in modelled seconds. ``slo``: thresholds in ms and the percentile in (0, 100]; None or no threshold means
    no SLO. ``requests_per_s``: given for a ``steady_state`` point (its stored ``requests_per_s``): goodput is then
    that rate x the share of ``ok`` requests that meet every SLO, instead of good requests / ``duration_s``.

    Returns ``SLO_COLUMNS`` (the thresholds and percentile, ``goodput_req_per_s`` in req/s, ``slo_attainment*`` as
    fractions of all measured requests, ``slo_met``) with the module's definitions, plus ``SLO_LATENCY_KEYS``: the
    p<percentile> (ms) of each given metric over ok requests. Values that are not defined (no SLO, no request, no ok
    request with that metric) are None. ``summarize`` uses this function, so values computed here from the stored
    rows equal the stored ones for the same SLO.
    """
    rows = list(requests)
    given = slo.given() if slo is not None else {}
    out: dict[str, float | bool | None] = {
        "slo_ttft_ms": given.get("ttft"), "slo_tpot_ms": given.get("tpot"), "slo_e2e_ms": given.get("e2e"),
        "slo_percentile": slo.percentile if given and slo is not None else None,
        "goodput_req_per_s": None, "slo_attainment": None, "slo_met": None,
        **{f"slo_attainment_{k}": None for k in ("ttft", "tpot", "e2e")},
        **dict.fromkeys(SLO_LATENCY_KEYS.values()),
    }
    if not given or slo is None:
        return out
    ok = [r for r in rows if r.get("status") == "ok"]
    for k in given:
        out[SLO_LATENCY_KEYS[k]] = _pct([r[f"{k}_ms"] for r in ok if r.get(f"{k}_ms") is not None], slo.percentile)
    if rows:
        n = len(rows)
        meets = {k: [r.get("status") == "ok" and _meets(k, r.get(f"{k}_ms"), lim) for r in rows]
                 for k, lim in given.items()}
        good = sum(1 for i in range(n) if all(meets[k][i] for k in given))
        n_ok = len(ok)
        if requests_per_s is not None:
            out["goodput_req_per_s"] = requests_per_s * good / n_ok if n_ok else None
        else:
            out["goodput_req_per_s"] = good / duration_s if duration_s else None
        out["slo_attainment"] = good / n
        for k, flags in meets.items():
            out[f"slo_attainment_{k}"] = sum(flags) / n
        out["slo_met"] = all(sum(flags) / n >= slo.percentile / 100.0 for flags in meets.values())
    return out


def window_tokens(rec: RequestRecord, start_ns: int, end_ns: int) -> tuple[int, int]:
    """(input, output) tokens of one request that count inside the window [start_ns, end_ns] (perf ns, both ends
    included) of a ``steady_state`` point, by arrival (module docstring): output tokens of the events that arrived
    inside it (an ``ok`` streamed request's per-event counts re-spread to its reported total; a non-streamed one's
    total at its end), input tokens when its first token (non-streamed: its end) arrived inside it. Counts only
    ``ok`` requests and tail requests the runner cancelled (``TAIL_CANCELLED``); (0, 0) for any other."""
    ok = rec.status == "ok"
    if not ok and not (rec.error_class == "client_error" and rec.error_message == TAIL_CANCELLED):
        return 0, 0
    if not rec.stream:
        inside = ok and rec.end_perf_ns is not None and start_ns <= rec.end_perf_ns <= end_ns
        return ((rec.input_tokens or 0), (rec.output_tokens or 0)) if inside else (0, 0)
    stamps = [ts for ts, k in zip(rec.chunk_perf_ns, rec.chunk_tokens) if k > 0]
    counts = [k for k in rec.chunk_tokens if k > 0]
    if ok:
        counts = spread_tokens(counts, rec.output_tokens)
    out_tokens = sum(k for ts, k in zip(stamps, counts) if start_ns <= ts <= end_ns)
    in_tokens = (rec.input_tokens or 0) if stamps and start_ns <= stamps[0] <= end_ns else 0
    return in_tokens, out_tokens


def _steady_window(result: LoadPointResult, out: dict[str, Any], start: int, end: int, window: int,
                   duration_s: float | None) -> float | None:
    """Fill the throughput and concurrency columns of a ``steady_state`` point (module docstring); returns its
    ``requests_per_s`` for the goodput."""
    every = [(r, r.send_perf_ns, r.end_perf_ns) for r in (*result.records, *result.warmup_records, *result.tail_records)
             if r.send_perf_ns is not None and r.end_perf_ns is not None]
    counted = [window_tokens(r, start, end) for r, _, _ in every]
    in_tokens, out_tokens = sum(c[0] for c in counted), sum(c[1] for c in counted)
    ended = sum(1 for r, _, r_end in every if r.status == "ok" and start <= r_end <= end)
    clipped = [(max(r_send, start), min(r_end, end)) for _, r_send, r_end in every]
    clipped = [(s, e) for s, e in clipped if e > s]
    assert duration_s is not None
    have_ok = out["completed"] > 0
    out["requests_per_s"] = ended / duration_s if have_ok else None
    out["input_tok_per_s"] = in_tokens / duration_s if have_ok and out["input_tok_per_s"] is not None else None
    out["output_tok_per_s"] = out_tokens / duration_s if have_ok and out["output_tok_per_s"] is not None else None
    out["total_tok_per_s"] = ((in_tokens + out_tokens) / duration_s
                              if have_ok and out["total_tok_per_s"] is not None else None)
    out["concurrency_mean"] = sum(e - s for s, e in clipped) / window if window > 0 else 0.0
    out["concurrency_peak"] = peak_concurrency(clipped)
    return out["requests_per_s"]


def summarize(result: LoadPointResult, slo: SLO | None = None) -> dict[str, float | int | str | bool | None]:
    """One load point's metrics; keys are exactly ``METRIC_COLUMN_NAMES`` (units: ``METRIC_COLUMNS``)."""
    ts = result.time_scale
    check_time_scale(ts)
    records = result.records
    start, end = result.window_start_perf_ns, result.window_end_perf_ns
    window = end - start
    if records:
        # a zero window is possible only when every request failed at once (a twin on the virtual clock that exited:
        # its requests fail in no modelled time); one that completed needs time
        if window < 0 or (window == 0 and any(r.status == "ok" for r in records)):
            raise TimingError(f"measured window is {window} ns: {'zero' if window == 0 else 'negative'}")
        if window > MAX_PLAUSIBLE_NS:
            raise TimingError(f"measured window of {window / 1e9 / 86400:.2f} days is not plausible")
    metrics: list[RequestMetrics] = []
    for r in records:
        if r.send_perf_ns is None or r.end_perf_ns is None or r.send_perf_ns < start or r.end_perf_ns > end:
            raise TimingError(f"request {r.request_index} lies outside the measured window [{start}, {end}]")
        metrics.append(request_metrics(r, ts))
    ok = [(r, m) for r, m in zip(records, metrics) if r.status == "ok"]
    failed = [r for r in records if r.status != "ok"]
    errors: dict[str, int] = {}
    for r in failed:
        errors[r.error_class or "unknown"] = errors.get(r.error_class or "unknown", 0) + 1

    out: dict[str, float | int | str | bool | None] = {
        "requests_total": len(records),
        "completed": len(ok),
        "failed": len(failed),
        **{f"failed_{c}": errors.get(c, 0) for c in ERROR_CLASSES},
        "error_counts_json": json.dumps(dict(sorted(errors.items()))),
        "stalled": bool(result.stalled or errors.get("stall_timeout")),
        "content_null_requests": sum(1 for r, _ in ok if r.content_null),
        "stream_count_requests": sum(1 for r, _ in ok if r.output_tokens_source == "stream_count"),
    }
    duration_s = window * ts / 1e9 if records else None
    out["duration_s"] = duration_s
    out["held_s"] = result.held_ns * ts / 1e9 if result.held_ns else None
    in_toks = [m.input_tokens for _, m in ok if m.input_tokens is not None]
    out_toks = [m.output_tokens for _, m in ok if m.output_tokens is not None]
    rate_s = duration_s if ok else None  # rates need a window with a successful request in it
    out["requests_per_s"] = len(ok) / rate_s if rate_s is not None else None
    out["input_tok_per_s"] = sum(in_toks) / rate_s if rate_s is not None and in_toks else None
    out["output_tok_per_s"] = sum(out_toks) / rate_s if rate_s is not None and out_toks else None
    out["total_tok_per_s"] = (
        (sum(in_toks) + sum(out_toks)) / rate_s if rate_s is not None and in_toks and out_toks else None
    )
    out["total_input_tokens"] = sum(in_toks) if in_toks else None
    out["total_output_tokens"] = sum(out_toks) if out_toks else None
    out["mean_input_tokens"] = _mean(in_toks)
    out["mean_output_tokens"] = _mean(out_toks)
    reported = [(r.cached_tokens, m.input_tokens) for r, m in ok
                if r.cached_tokens is not None and m.input_tokens is not None]
    out["total_cached_tokens"] = sum(c for c, _ in reported) if reported else None
    seen = sum(n for _, n in reported)
    out["cache_hit_rate"] = sum(c for c, _ in reported) / seen if reported and seen else None
    lifetimes = [(r.send_perf_ns, r.end_perf_ns) for r in records  # every one has both (checked above)
                 if r.send_perf_ns is not None and r.end_perf_ns is not None]
    out["concurrency_mean"] = (sum(e - s for s, e in lifetimes) / window if window > 0 else 0.0) if records else None
    out["concurrency_peak"] = peak_concurrency(lifetimes) if records else None
    steady = result.window_kind == "steady_state"
    out["window_kind"] = result.window_kind
    out["warmup_requests_run"] = len(result.warmup_records)
    out["tail_requests_run"] = len(result.tail_records)
    rate = None
    if steady and records:
        rate = _steady_window(result, out, start, end, window, duration_s)

    out.update(_stats("ttft", [m.ttft_ms for _, m in ok if m.ttft_ms is not None]))
    out.update(_stats("tpot", [m.tpot_ms for _, m in ok if m.tpot_ms is not None]))
    out.update(_stats("itl", [x for _, m in ok for x in m.itl_tokens_ms]))
    out.update(_stats("e2e", [m.e2e_ms for _, m in ok if m.e2e_ms is not None]))
    ttfo = [m.ttfo_ms for _, m in ok if m.ttfo_ms is not None]
    out["ttfo_mean_ms"], out["ttfo_median_ms"], out["ttfo_p99_ms"] = _mean(ttfo), _pct(ttfo, 50), _pct(ttfo, 99)
    gaps = [x for _, m in ok for x in m.chunk_gaps_ms]
    out["chunk_gap_mean_ms"], out["chunk_gap_median_ms"] = _mean(gaps), _pct(gaps, 50)
    out["chunk_gap_p99_ms"], out["chunk_gap_max_ms"] = _pct(gaps, 99), (max(gaps) if gaps else None)
    queue = [m.client_queue_ms for m in metrics if m.client_queue_ms is not None]
    out["client_queue_mean_ms"], out["client_queue_p99_ms"] = _mean(queue), _pct(queue, 99)
    out["client_queue_max_ms"] = max(queue) if queue else None
    slot = [m.slot_wait_ms for m in metrics if m.slot_wait_ms is not None]
    out["slot_wait_mean_ms"], out["slot_wait_p99_ms"] = _mean(slot), _pct(slot, 99)
    out["slot_wait_max_ms"] = max(slot) if slot else None

    judged = slo_values([{"status": r.status, "ttft_ms": m.ttft_ms, "tpot_ms": m.tpot_ms, "e2e_ms": m.e2e_ms}
                         for r, m in zip(records, metrics)], duration_s, slo, rate)
    out.update({k: judged[k] for k in SLO_COLUMNS})
    if set(out) != set(METRIC_COLUMN_NAMES):  # keep summarize and METRIC_COLUMNS in step
        raise AssertionError(f"summary keys differ from METRIC_COLUMNS: {set(out) ^ set(METRIC_COLUMN_NAMES)}")
    return {k: out[k] for k in METRIC_COLUMN_NAMES}


def load_point_status(summary: dict) -> str:
    """``ok`` (no failed request), ``failed`` (no ok request), ``partial`` (some of each), ``not_run`` (none)."""
    total, completed = summary.get("requests_total") or 0, summary.get("completed") or 0
    if total == 0:
        return "not_run"
    if completed == total:
        return "ok"
    return "failed" if completed == 0 else "partial"
