"""Every percentile column of a load point against values computed independently of grid.metrics.

The requests are built so that each metric's population is known by construction (no call into
grid.metrics.request to derive it), and p90, p95 and p99 of every metric differ: a column computed at another
percentile, over another population or with another interpolation fails. Expected values come from
``numpy.percentile(..., method="linear")`` (the documented method) and, for TTFT, from hand arithmetic.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from grid.loadgen.runner import LoadPointResult
from grid.metrics.loadpoint import METRIC_COLUMN_NAMES, summarize

from .test_loadpoint_metrics import shifted
from .test_request_metrics import MS, SEND, record

TTFT = [3, 7, 11, 19, 23, 31, 43, 59, 71, 97, 131]      # ms, one per ok request (not in order of sending below)
GAP = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31]          # ms
QUEUE = [0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 100]       # ms scheduled -> sent
ORDER = [4, 9, 0, 7, 2, 10, 5, 1, 8, 3, 6]              # sending order, so sorting matters
SPACING_MS = 1000                                        # requests never overlap


def build():
    """11 ok requests and one failed one. Request i: first token at TTFT[i]; then events at +g (1 token),
    +2g (2 tokens), +4g (1 token) with g = GAP[i]: 5 output tokens, e2e TTFT + 4g, TPOT 4g / 4 = g, chunk gaps
    g, g, 2g; per-token ITLs g, g/2, g/2, 2g; the first content token arrives with the second event (TTFO TTFT+g)."""
    recs = []
    for slot, i in enumerate(ORDER):
        t, g = TTFT[i], GAP[i]
        chunks = [(t, 1), (t + g, 1), (t + 2 * g, 2), (t + 4 * g, 1)]
        rec = record(chunks, scheduled_ms=QUEUE[i], content_ms=t + g, index=slot)
        rec.slot_wait_ns = QUEUE[i] * MS // 2  # half of its send delay waited for a client slot (max_concurrency)
        recs.append(shifted(rec, SPACING_MS * (slot + 1)))
    # a failed request that got tokens before failing: its figures must stay out of every latency column,
    # but its send delay counts (client queue is over all measured requests)
    failed = record([(1, 1), (500, 1)], status="failed", end_ms=900, scheduled_ms=400, index=11)
    recs.append(shifted(failed, SPACING_MS * 13))
    return recs


POP = {
    "ttft": [float(t) for t in TTFT],
    "tpot": [float(g) for g in GAP],
    "e2e": [float(t + 4 * g) for t, g in zip(TTFT, GAP)],
    "itl": [x for g in GAP for x in (g, g / 2, g / 2, 2 * g)],
    "ttfo": [float(t + g) for t, g in zip(TTFT, GAP)],
    "chunk_gap": [x for g in GAP for x in (g, g, 2 * g)],
    "client_queue": [*map(float, QUEUE), 400.0],
    "slot_wait": [q / 2 for q in QUEUE],  # the failed request records no slot wait
}
STAT_Q = {"median": 50, "p90": 90, "p95": 95, "p99": 99}
PCT_COLUMN = re.compile(r"^(?P<metric>[a-z0-9_]+?)_(?P<stat>median|p\d+)_ms$")


@pytest.fixture
def summary():
    recs = build()
    end = max(r.end_perf_ns for r in recs)
    return summarize(LoadPointResult(recs, SEND, end, 1.0))  # every send is >= 1 s after SEND


def percentile_columns():
    return [c for c in METRIC_COLUMN_NAMES if PCT_COLUMN.match(c)]


def test_every_percentile_column_is_covered():
    cols = percentile_columns()
    assert {PCT_COLUMN.match(c)["metric"] for c in cols} == set(POP)
    assert {PCT_COLUMN.match(c)["stat"] for c in cols} == set(STAT_Q)
    # ttft/tpot/itl/e2e: median, p90, p95, p99; ttfo and chunk_gap: median, p99; client_queue and slot_wait: p99
    assert len(cols) == 4 * 4 + 2 * 2 + 2


@pytest.mark.parametrize("column", percentile_columns())
def test_percentile_column_equals_numpy_linear(summary, column):
    m = PCT_COLUMN.match(column)
    expected = float(np.percentile(np.asarray(POP[m["metric"]], dtype=float), STAT_Q[m["stat"]], method="linear"))
    assert summary[column] == pytest.approx(expected, rel=1e-12, abs=1e-9), column


def test_p90_p95_p99_differ_so_a_shifted_percentile_is_caught(summary):
    for metric in ("ttft", "tpot", "itl", "e2e"):
        vals = [summary[f"{metric}_{s}_ms"] for s in ("median", "p90", "p95", "p99")]
        assert vals == sorted(vals) and len(set(vals)) == 4, (metric, vals)


def test_ttft_percentiles_by_hand(summary):
    # 11 sorted values, linear interpolation: rank q/100 * 10
    assert summary["ttft_median_ms"] == pytest.approx(31.0)                  # rank 5
    assert summary["ttft_p90_ms"] == pytest.approx(97.0)                     # rank 9
    assert summary["ttft_p95_ms"] == pytest.approx(97 + 0.5 * (131 - 97))     # rank 9.5 -> 114
    assert summary["ttft_p99_ms"] == pytest.approx(97 + 0.9 * (131 - 97))     # rank 9.9 -> 127.6
    assert summary["ttft_mean_ms"] == pytest.approx(sum(TTFT) / 11)
    assert summary["ttft_max_ms"] == 131.0


@pytest.mark.parametrize("metric", ["ttft", "tpot", "itl", "e2e"])
def test_mean_and_max_columns(summary, metric):
    assert summary[f"{metric}_mean_ms"] == pytest.approx(float(np.mean(POP[metric])))
    assert summary[f"{metric}_max_ms"] == pytest.approx(max(POP[metric]))


def test_other_means_and_maxima(summary):
    for metric in ("ttfo", "chunk_gap", "client_queue"):
        assert summary[f"{metric}_mean_ms"] == pytest.approx(float(np.mean(POP[metric]))), metric
    assert summary["chunk_gap_max_ms"] == 62.0 and summary["client_queue_max_ms"] == 400.0
    assert summary["completed"] == 11 and summary["failed"] == 1
