"""Host noise: a load point measured while the machine was too busy to measure it.

Every time the load generator measures against a server that keeps real time (SGLang, an OpenAI-compatible server,
the twin with ``engine.clock=real``) stretches when its own event loop runs late (``client_lag_pct``;
grid/loadgen/looplag.py). On the twin's virtual clock (the default) nothing is late and no point is host noise: its
times are modelled, whatever else the machine runs. Rows recorded before schema version 13 may also carry
``twin_behind_pct`` (the wall-clock twin behind its own clock), and count it. A point that lost more than
:data:`HOST_NOISE_MAX_PCT` of its real time is host noise: the report does not count it, a
resume measures it again (grid/sweep/rerun.py), and the search stops after configurations measured only so
(grid/search/policy.py). A point that lost less counts with its loss as its error: its throughput may be off by about
that share, a lead smaller than the loss of the points it rests on is reported as a tie (grid/report/select.py
``is_tie``), and the report names the points that lost more than :data:`HOST_PERTURBED_PCT`. Pure functions over
``load_points`` rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A load point is host noise when the load generator's own event loop (load_points.client_lag_pct) lost more than
# this share of the point's real time: every time the client measures stretches with it. Measured on a 2-core machine
# (the twin on the wall clock): quiet up to 6.4% (the test suite's own load: a client answering a storm of HTTP 429s
# is busy with its own work), two CPU burners per core 58-90% on the main job (its throughput 7-30% low); 20% sits
# between (experiments/busy_host.py).
HOST_NOISE_MAX_PCT = 20.0

# Every counted load point states its loss as its error: each time the client measured may carry up to that share
# of delay, so its throughput may be off by about as much (a latency, a short interval, by more), and the report calls
# a lead smaller than it a tie. Above this share a point is also named (the report's caveats, the progress line).
# Measured on a 2-core machine (experiments/busy_host.py, main job): quiet, 0.03-1.8% (the twin at time scale 20
# keeping 64 streams busy is work on the same cores); with two CPU burners per core 0.7-7.1%, output tok/s within
# 0.22% of the quiet run. 1% is the report's default tie (grid.report.select.TIE_PERCENT): with one repeat a smaller
# loss never decides a tie; with repeats it can, unnamed here (the tie's reason gives the loss).
HOST_PERTURBED_PCT = 1.0


def lost_pct(row: Mapping[str, Any]) -> float:
    """The share of a load point's real time (%) the host took from it: ``client_lag_pct``, or the larger of it and
    ``twin_behind_pct`` in rows recorded before schema version 13 (0 where neither was recorded)."""
    return max(row.get("twin_behind_pct") or 0.0, row.get("client_lag_pct") or 0.0)


def noise_bound(row: Mapping[str, Any]) -> float:
    """The bound (%) ``row`` is judged by: its ``host_noise_max_pct`` (``objective.host_noise_max_pct`` when it was
    measured), else :data:`HOST_NOISE_MAX_PCT` (rows recorded before the column)."""
    bound = row.get("host_noise_max_pct")
    return HOST_NOISE_MAX_PCT if bound is None or bound != bound else float(bound)


def host_noise(row: Mapping[str, Any]) -> bool:
    """Whether a measured load point is host noise: it lost more than :func:`noise_bound` of its real time."""
    return lost_pct(row) > noise_bound(row)


def counted_noise(row: Mapping[str, Any]) -> bool:
    """Whether a load point lost more than :data:`HOST_NOISE_MAX_PCT` but counts, because a raised
    ``objective.host_noise_max_pct`` let it (the report names such points)."""
    return HOST_NOISE_MAX_PCT < lost_pct(row) <= noise_bound(row)


def perturbed(row: Mapping[str, Any]) -> bool:
    """Whether a load point counts but lost more than :data:`HOST_PERTURBED_PCT` of its real time to the host: the
    report and the progress line name it, with its loss."""
    return HOST_PERTURBED_PCT < lost_pct(row) <= noise_bound(row)


def host_error_pct(rows: Sequence[Mapping[str, Any]]) -> float:
    """The share (%) by which a throughput resting on ``rows`` (the repeats of one level) may be off because of the
    host: the largest :func:`lost_pct` among those that count (0.0 for none)."""
    return max((lost_pct(r) for r in rows if not host_noise(r)), default=0.0)


def noise_text(row: Mapping[str, Any]) -> str:
    """``client 12.0% late, twin 3.1% behind`` for a load point: what lost time, in percent of its real time."""
    parts = []
    if row.get("client_lag_pct") is not None:
        parts.append(f"load generator {row['client_lag_pct']:.1f}% late")
    if row.get("twin_behind_pct") is not None:
        parts.append(f"twin {row['twin_behind_pct']:.1f}% behind its clock")
    return ", ".join(parts)


def all_host_noise(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a configuration's measured load points (``ok`` / ``partial`` rows) were all host noise: nothing of it
    counts (False when it measured none)."""
    measured = [r for r in rows if r.get("status") in ("ok", "partial")]
    return bool(measured) and all(host_noise(r) for r in measured)
