"""Pareto fronts of throughput against latency across every configuration and load level (pure).

A load point *dominates* another when its throughput is at least as high and its latency at least as low, and one of
the two strictly so. The front is the set of measured load points no other one dominates: every trade-off between
serving more and answering faster that the sweep found. Each front is drawn for one latency metric (TPOT and TTFT
at the median and at p99, modelled ms) against the objective's throughput (``throughput_metric``).

Input rows are load-point rows (grid.storage.schema.LOAD_POINTS_SCHEMA, re-judged by grid.report.select.rejudge);
only load points of ``ok`` trials whose own status is ``ok`` are candidates (a partial or failed point's numbers
describe a broken run). Repeats of one configuration at one load level (``load.repeats``: rows with ``repeat_index``
0, 1, ...) are one candidate, the mean of its repeats (:func:`level_means`): a level is never dominated by a repeat
of itself, and a level with a repeat that is not ``ok`` is no candidate (its mean would rest on the lucky repeats).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
    """The throughput column the fronts of an objective use, as the objective declares it (``Objective.pareto_axis``:
    output tok/s for ``max_output_throughput`` and ``min_tpot``, goodput req/s for ``max_goodput``, the completed
    requests per second for ``max_capacity``, whose score is the offered rate). Raises ``ValueError`` for an unknown
    kind."""
    obj = OBJECTIVES.get(objective_kind)
    if obj is None:
        raise ValueError(f"objective.kind={objective_kind!r}; allowed: {', '.join(sorted(OBJECTIVES))}")
    return obj.pareto_axis


def dominates(a: Mapping[str, Any], b: Mapping[str, Any], x: str, y: str) -> bool:
    """``a`` has at least ``b``'s throughput ``x`` and at most its latency ``y``, and is strictly better in one."""
    return a[x] >= b[x] and a[y] <= b[y] and (a[x] > b[x] or a[y] < b[y])


def level_key(row: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """(config_hash, point_kind, point_value): what the repeats of one load level share."""
    return row["config_hash"], row["point_kind"], row["point_value"]


def level_means(rows: Iterable[Mapping[str, Any]], keys: Iterable[str]) -> list[dict[str, Any]]:
    """One row per load level (:func:`level_key`) of ``rows``, in first-seen order: a copy of its first repeat's row
    (lowest ``repeat_index``) with each column of ``keys`` replaced by the mean over the repeats that measured it
    (None when none did), and ``repeats`` (how many rows the level has; rows that are means already count their own
    ``repeats``, so means of means of one row each are unchanged) added (pure)."""
    keys = list(keys)
    levels: dict[tuple[Any, Any, Any], list[Mapping[str, Any]]] = {}
    for r in rows:
        levels.setdefault(level_key(r), []).append(r)
    out = []
    for reps in levels.values():
        reps = sorted(reps, key=lambda r: (r["repeat_index"] or 0, r["point_index"] or 0))
        row = {**reps[0], "repeats": sum(r.get("repeats", 1) for r in reps)}
        for k in keys:
            vals = [r[k] for r in reps if r.get(k) is not None]
            row[k] = sum(vals) / len(vals) if vals else None
        out.append(row)
    return out


def candidates(rows: Iterable[Mapping[str, Any]], x: str, y: str) -> list[dict[str, Any]]:
    """Load levels that can be on a front: trial ``ok``, every repeat of the level that ran (status not ``not_run``)
    ``ok`` with both ``x`` and ``y`` measured; one row per level, ``x`` and ``y`` the means over its repeats (:func:`level_means`)."""
    rows = [r for r in rows if r["trial_status"] == "ok" and r["status"] != "not_run"]
    broken = {level_key(r) for r in rows if r["status"] != "ok" or r.get(x) is None or r.get(y) is None}
    return level_means([r for r in rows if level_key(r) not in broken], (x, y))


def pareto_front(rows: Iterable[Mapping[str, Any]], x: str, y: str) -> list[Mapping[str, Any]]:
    """The non-dominated candidates (higher ``x`` is better, lower ``y`` is better), by ascending ``x`` then ``y``.

    Two points with equal ``x`` and ``y`` do not dominate each other: both stay on the front.
    """
    points = candidates(rows, x, y)
    front = [p for p in points if not any(dominates(q, p, x, y) for q in points)]
    return sorted(front, key=lambda r: (r[x], r[y]))


@dataclass
class Front:
    """One front: ``x`` (throughput column) against ``y`` (latency column), with the objective's chosen point."""

    x: str
    y: str
    points: Sequence[Mapping[str, Any]]             # every candidate load level (means over its repeats)
    front: list[Mapping[str, Any]]                  # the non-dominated ones, by ascending throughput
    chosen: Mapping[str, Any] | None = None         # the load point the objective picked (None: nothing qualified)
    dominated_by: list[Mapping[str, Any]] = field(default_factory=list)  # front points that dominate ``chosen``

    @property
    def chosen_on_front(self) -> bool:
        return self.chosen is not None and any(level_key(p) == level_key(self.chosen) for p in self.front)

    def describe(self) -> str:
        """One line for the report, e.g. ``TPOT p99 vs output tok/s: 3 of 12 load points on the front (a @
        concurrency 1: 100 tok/s, 10.0 ms; ...); the objective's pick (a @ concurrency 8) is on it``."""
        yname, xname = LATENCY_METRICS.get(self.y, self.y), THROUGHPUT_UNITS.get(self.x, self.x)
        text = f"{yname} vs {xname}: "
        if not self.points:
            return text + "no measured load point"
        shown = "; ".join(f"{p['label']} @ {level_name(p)}: {fmt_score(p[self.x])} / {fmt_score(p[self.y])} ms"
                          for p in self.front)
        what = "load levels (means over repeats)" if any(p.get("repeats", 1) > 1 for p in self.points) else \
            "load points"
        text += f"{len(self.front)} of {len(self.points)} {what} on the front ({shown})"
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
    each front by its level (:func:`level_key`); where its level is a candidate, the level's means stand for it.
    Raises ``ValueError`` for an unknown objective kind.
    """
    rows = list(rows)
    x = throughput_metric(objective_kind)
    out = []
    for y in LATENCY_METRICS:
        points = candidates(rows, x, y)
        front = pareto_front(points, x, y)
        pick = None if chosen is None else next((p for p in points if level_key(p) == level_key(chosen)), chosen)
        f = Front(x, y, points, front, pick)
        if pick is not None and not f.chosen_on_front and pick.get(x) is not None and pick.get(y) is not None:
            f.dominated_by = [p for p in front if dominates(p, pick, x, y)]
        out.append(f)
    return out


def level_series(rows: Iterable[Mapping[str, Any]], key: str,
                 kind: str | None = None) -> list[tuple[float, float, float, float]]:
    """What a plot draws for one configuration: (load level, mean, min, max of ``key`` over the level's repeats) per
    level by ascending level, from the rows whose status is ``ok``, ``key`` is measured and, when ``kind`` is given,
    ``point_kind`` is ``kind`` (pure). With one repeat min = mean = max."""
    levels: dict[float, list[float]] = {}
    for r in rows:
        if r["status"] == "ok" and r.get(key) is not None and (kind is None or r["point_kind"] == kind):
            levels.setdefault(r["point_value"], []).append(r[key])
    return [(lv, sum(v) / len(v), min(v), max(v)) for lv, v in sorted(levels.items())]


def level_gaps(rows: Iterable[Mapping[str, Any]], key: str, kind: str | None = None) -> list[float]:
    """The load levels (of ``kind`` when given) the configuration has rows for but no measured ``key`` on an ``ok``
    row: skipped by early stopping, failed or not run (pure). :func:`draw_series` breaks its line there."""
    measured = {s[0] for s in level_series(rows, key, kind)}
    return sorted({r["point_value"] for r in rows if (kind is None or r["point_kind"] == kind)
                   and r["point_value"] is not None} - measured)


def draw_series(ax, series: list[tuple[float, float, float, float]], gaps: Iterable[float] = (),
                **style: Any) -> None:
    """One line through the means of ``series`` (:func:`level_series`), with min..max bars where a level has
    repeats that differ; the line breaks at each level of ``gaps`` (:func:`level_gaps`), so it never draws a value
    between two measured levels across one that was planned and not measured."""
    have = {s[0] for s in series}
    nan = float("nan")
    series = sorted([*series, *((g, nan, nan, nan) for g in gaps if g not in have)])
    xs, means = [s[0] for s in series], [s[1] for s in series]
    if any(s[2] != s[3] for s in series):
        err = [[m - s[2] for m, s in zip(means, series)], [s[3] - m for m, s in zip(means, series)]]
        ax.errorbar(xs, means, yerr=err, marker="o", capsize=2, **style)
    else:
        ax.plot(xs, means, marker="o", **style)
