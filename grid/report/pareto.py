"""Pareto fronts of throughput against latency across every configuration and load level (pure).

A load point *dominates* another when its throughput is at least as high and its latency at least as low, and one of
the two strictly so. The front is the set of measured load points no other one dominates: every trade-off between
serving more and answering faster that the sweep found. Each front is drawn for one latency metric (TPOT and TTFT
at the median and at p99, modelled ms) against the objective's throughput (``throughput_metric``).

Input rows are load-point rows (grid.storage.schema.LOAD_POINTS_SCHEMA, re-judged by grid.report.select.rejudge);
only load points of ``ok`` trials whose own status is ``ok`` are candidates (a partial or failed point's numbers
describe a broken run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grid.plan import level_name
from grid.report.select import OBJECTIVES, fmt_score

#: Latency metrics a front is drawn for: load-point column -> its name in the report (modelled ms).
LATENCY_METRICS: dict[str, str] = {
    "tpot_median_ms": "TPOT p50",
    "tpot_p99_ms": "TPOT p99",
    "ttft_median_ms": "TTFT p50",
    "ttft_p99_ms": "TTFT p99",
}

#: Throughput columns and their units, for the names in the report.
THROUGHPUT_UNITS: dict[str, str] = {"output_tok_per_s": "output tok/s", "total_tok_per_s": "total tok/s",
                                    "goodput_req_per_s": "goodput req/s", "requests_per_s": "req/s"}


def throughput_metric(objective_kind: str) -> str:
    """The throughput column the fronts of an objective use: its own score when higher is better and a throughput
    (output tok/s for ``max_output_throughput``, goodput req/s for ``max_goodput``), the completed requests per second
    for ``max_capacity`` (whose score is the offered rate), else output tok/s. Raises ``ValueError`` for an unknown
    kind."""
    obj = OBJECTIVES.get(objective_kind)
    if obj is None:
        raise ValueError(f"objective.kind={objective_kind!r}; allowed: {', '.join(sorted(OBJECTIVES))}")
    if obj.higher_is_better and obj.metric in THROUGHPUT_UNITS:
        return obj.metric
    return "requests_per_s" if objective_kind == "max_capacity" else "output_tok_per_s"


def dominates(a: Mapping[str, Any], b: Mapping[str, Any], x: str, y: str) -> bool:
    """``a`` has at least ``b``'s throughput ``x`` and at most its latency ``y``, and is strictly better in one."""
    return a[x] >= b[x] and a[y] <= b[y] and (a[x] > b[x] or a[y] < b[y])


def candidates(rows: Iterable[Mapping[str, Any]], x: str, y: str) -> list[Mapping[str, Any]]:
    """Load points that can be on a front: trial ``ok``, point ``ok``, both ``x`` and ``y`` measured."""
    return [r for r in rows if r.get("trial_status") == "ok" and r.get("status") == "ok"
            and r.get(x) is not None and r.get(y) is not None]


def pareto_front(rows: Iterable[Mapping[str, Any]], x: str, y: str) -> list[Mapping[str, Any]]:
    """The non-dominated candidates (higher ``x`` is better, lower ``y`` is better), by ascending ``x`` then ``y``.

    Two points with equal ``x`` and ``y`` do not dominate each other: both stay on the front.
    """
    points = candidates(rows, x, y)
    front = [p for p in points if not any(dominates(q, p, x, y) for q in points)]
    return sorted(front, key=lambda r: (r[x], r[y]))


def _key(row: Mapping[str, Any]) -> tuple[str, int]:
    return row["config_hash"], row["point_index"]


@dataclass
class Front:
    """One front: ``x`` (throughput column) against ``y`` (latency column), with the objective's chosen point."""

    x: str
    y: str
    points: list[Mapping[str, Any]]                 # every candidate load point
    front: list[Mapping[str, Any]]                  # the non-dominated ones, by ascending throughput
    chosen: Mapping[str, Any] | None = None         # the load point the objective picked (None: nothing qualified)
    dominated_by: list[Mapping[str, Any]] = field(default_factory=list)  # front points that dominate ``chosen``

    @property
    def chosen_on_front(self) -> bool:
        return self.chosen is not None and any(_key(p) == _key(self.chosen) for p in self.front)

    def describe(self) -> str:
        """One line for the report, e.g. ``TPOT p99 vs output tok/s: 3 of 12 load points on the front (a @
        concurrency 1: 100 tok/s, 10.0 ms; ...); the objective's pick (a @ concurrency 8) is on it``."""
        yname, xname = LATENCY_METRICS.get(self.y, self.y), THROUGHPUT_UNITS.get(self.x, self.x)
        text = f"{yname} vs {xname}: "
        if not self.points:
            return text + "no measured load point"
        shown = "; ".join(f"{p['label']} @ {level_name(p)}: {fmt_score(p[self.x])} / {fmt_score(p[self.y])} ms"
                          for p in self.front)
        text += f"{len(self.front)} of {len(self.points)} load points on the front ({shown})"
        if self.chosen is None:
            return text + "; the objective picked no point"
        pick = f"{self.chosen['label']} @ {level_name(self.chosen)}"
        if self.chosen_on_front:
            return text + f"; the objective's pick ({pick}) is on it"
        if self.chosen.get(self.x) is None or self.chosen.get(self.y) is None:
            return text + f"; the objective's pick ({pick}) has no {yname}"
        better = ", ".join(f"{p['label']} @ {level_name(p)}" for p in self.dominated_by)
        return text + f"; the objective's pick ({pick}) is off it, dominated by {better}"


def fronts(rows: Iterable[Mapping[str, Any]], objective_kind: str,
           chosen: Mapping[str, Any] | None = None) -> list[Front]:
    """One :class:`Front` per ``LATENCY_METRICS`` column against the objective's throughput (``throughput_metric``).

    ``chosen``: the load point the objective picked (``Verdict.best_point`` of the best configuration), located on
    each front. Raises ``ValueError`` for an unknown objective kind.
    """
    rows = list(rows)
    x = throughput_metric(objective_kind)
    out = []
    for y in LATENCY_METRICS:
        points = candidates(rows, x, y)
        front = pareto_front(points, x, y)
        f = Front(x, y, points, front, chosen)
        if chosen is not None and not f.chosen_on_front and chosen.get(x) is not None and chosen.get(y) is not None:
            f.dominated_by = [p for p in front if dominates(p, chosen, x, y)]
        out.append(f)
    return out
