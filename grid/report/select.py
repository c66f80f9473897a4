"""Choosing the best configuration (pure): objectives by ``kind``, SLO checks, and why every other one lost.

Input is the load-points table as a list of row dicts (grid.storage.schema.LOAD_POINTS_SCHEMA). A configuration is
eligible only if its trial is ``ok``; a load point counts only if every request succeeded (``status == ok``) and its
latency percentiles meet the SLOs. The objective scores each eligible load point; a configuration's score is the
best of its points.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from grid.config.schema import ObjectiveSpec


@dataclass(frozen=True)
class Objective:
    kind: str
    metric: str              # load-point column the score comes from
    higher_is_better: bool
    unit: str
    describe: str
    points: Callable[[list[dict]], list[dict]] = lambda rows: rows


OBJECTIVES: dict[str, Objective] = {}

# Scores closer than this to the best are reported as ties: repeat runs of one configuration on the twin differ by
# about this much (experiments/twin_clock_error.py: -0.2..-2.7% output tok/s at the default time scale).
TIE_PERCENT = 1.0


def register(obj: Objective) -> Objective:
    OBJECTIVES[obj.kind] = obj
    return obj


register(Objective("max_output_throughput", "output_tok_per_s", True, "tok/s",
                   "highest output throughput at any load point meeting the SLOs"))
register(Objective("max_goodput", "goodput_req_per_s", True, "req/s",
                   "highest goodput (requests/s meeting every SLO) at any load point"))
register(Objective("min_tpot", "tpot_median_ms", False, "ms", "lowest median TPOT at the lowest load level",
                   points=lambda rows: [r for r in rows if r["point_value"] == min(x["point_value"] for x in rows)]))


@dataclass
class Verdict:
    config_hash: str
    label: str
    outcome: str                       # best | lost | failed | invalid | no_eligible_point
    score: float | None
    reason: str
    best_point: dict | None = None
    rows: list[dict] = field(default_factory=list)


def _slo_misses(row: dict, slo) -> list[str]:
    pct = int(slo.percentile) if float(slo.percentile).is_integer() else slo.percentile
    misses = []
    for name, target in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e", slo.e2e_ms)):
        if target is None:
            continue
        value = row.get(f"{name}_p{pct}_ms")
        if value is None or value > target:
            misses.append(f"p{pct} {name.upper()} {'-' if value is None else f'{value:.0f}'} ms > {target:g}")
    return misses


_ERR_LINE = re.compile(r"(\w*Error\b|error:|Exception\b|\bNaN\b|Unsupported|out of memory|refuse)")
_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def headline(log_tail: str | None) -> str:
    """The most telling log line of a failed launch: the last one that names an error ("" if none)."""
    lines = [_PREFIX.sub("", ln.strip()) for ln in (log_tail or "").splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line.startswith("server_args=") and _ERR_LINE.search(line):
            return line[:160]
    return ""


def _failure_reason(first: dict) -> str:
    cls = first.get("trial_error_class") or "failed"
    msg = first.get("trial_error_message") or ""
    line = headline(first.get("log_tail"))
    if line and cls.startswith("startup"):
        return f"{cls}: {line}"            # the server's own error says more than "exited before ready"
    return f"{cls}: {msg}" + (f" | log: {line}" if line else "")


def rank(rows: list[dict], objective: ObjectiveSpec) -> list[Verdict]:
    """Verdicts, best first, then losers by score, then invalid and failed configurations."""
    obj = OBJECTIVES.get(objective.kind)
    if obj is None:
        raise ValueError(f"objective.kind={objective.kind!r}; allowed: {', '.join(sorted(OBJECTIVES))}")
    by_config: dict[str, list[dict]] = {}
    for row in rows:
        by_config.setdefault(row["config_hash"], []).append(row)
    verdicts: list[Verdict] = []
    for h, group in by_config.items():
        group.sort(key=lambda r: r["point_index"])
        first = group[0]
        status = first["trial_status"]
        if status != "ok":
            outcome = "invalid" if status == "invalid" else "failed"
            verdicts.append(Verdict(h, first["label"], outcome, None, _failure_reason(first), None, group))
            continue
        best, misses = None, []
        for row in obj.points(group):
            if row["status"] != "ok" or row.get(obj.metric) is None:
                misses.append(f"level {row['point_value']:g}: {row['status']}"
                              + (f" ({row['error_class']})" if row.get("error_class") else ""))
                continue
            slo_miss = _slo_misses(row, objective.slo)
            if slo_miss:
                misses.append(f"level {row['point_value']:g}: " + ", ".join(slo_miss))
                continue
            better = best is None or (row[obj.metric] > best[obj.metric] if obj.higher_is_better
                                      else row[obj.metric] < best[obj.metric])
            if better:
                best = row
        if best is None:
            verdicts.append(Verdict(h, first["label"], "no_eligible_point", None,
                                    "no load point met the SLOs: " + "; ".join(misses), None, group))
        else:
            verdicts.append(Verdict(h, first["label"], "lost", best[obj.metric], "", best, group))
    scored = sorted((v for v in verdicts if v.score is not None),
                    key=lambda v: v.score, reverse=obj.higher_is_better)
    if scored:
        top = scored[0]
        top.outcome = "best"
        top.reason = f"{obj.describe}: {top.score:.1f} {obj.unit} at level {top.best_point['point_value']:g}"
        ties = 0
        for v in scored[1:]:
            delta = (v.score - top.score) / top.score * 100 if top.score else 0.0
            v.reason = (f"{v.score:.1f} {obj.unit} at level {v.best_point['point_value']:g} vs best "
                        f"{top.score:.1f} ({delta:+.1f}%)")
            if abs(delta) < TIE_PERCENT:
                ties += 1
                v.reason += f": a tie (within {TIE_PERCENT:g}%, the measurement's repeatability)"
        if ties:
            top.reason += (f"; {ties} other configuration{'s' if ties > 1 else ''} within {TIE_PERCENT:g}% "
                           "(a tie: any of them will do)")
    order = {"best": 0, "lost": 1, "no_eligible_point": 2, "invalid": 3, "failed": 4}
    rest = [v for v in verdicts if v.score is None]
    rest.sort(key=lambda v: (order[v.outcome], v.label))
    return scored + rest
