"""Compare two runs (pure): the same configurations side by side, what got faster, slower, broke or was fixed.

Input: the load-point rows of run A and run B (grid.storage.schema.LOAD_POINTS_SCHEMA). Configurations are matched
by ``config_hash``; the hash covers the SGLang version, so after an upgrade the remaining ones are matched by their
settings (``config_json``), then by ``label``. Load points are matched by (``point_kind``, ``point_value``).

A difference counts only when it is larger than the spread of the measurement:

* *confidence*: when both sides measured the level at least twice (``load.repeats``: rows of one level with
  ``repeat_index`` 0, 1, ...), their means differ only when the 95 % confidence intervals of the means do not
  overlap (grid/metrics/confidence.py), the rule the report ranks by;
* *measured*: when a run holds the same configuration and load level more than once (repeats, or a level listed
  twice in a run before ``repeat_index`` existed), the spread of a metric there is (max - min) / mean of the
  repeats, in percent; a pair is compared by its means, against the larger spread of its two sides, else against
  the largest spread measured anywhere in the two runs; a measured spread below ``MIN_MEASURED_THRESHOLD_PERCENT``
  is raised to it (two repeats of a deterministic server can agree exactly, which says nothing of a smaller
  difference between two runs);
* *unknown*: with no repeats at all, ``DEFAULT_THRESHOLD_PERCENT`` applies and the result says so.

Runs measured differently (:func:`load_shape_differences`: how the window was taken, dataset, ISL/OSL, requests per
point, repeats) are still compared, but the comparison names each difference first: a TTFT measured over requests
started together is not the same quantity as one measured in a steady state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, cast

from grid.metrics.confidence import interval, overlaps
from grid.plan import level_name
from grid.report.select import fmt_delta, fmt_score

#: Compared metrics: column -> (name, higher is better).
METRICS: dict[str, tuple[str, bool]] = {
    "output_tok_per_s": ("output tok/s", True),
    "tpot_median_ms": ("TPOT p50 ms", False),
    "tpot_p99_ms": ("TPOT p99 ms", False),
    "ttft_median_ms": ("TTFT p50 ms", False),
    "ttft_p99_ms": ("TTFT p99 ms", False),
}

#: Threshold (percent) per metric when no repeated load point measured the spread, by how the points were measured
#: (``window_kind``: ``steady_state`` when both sides were, else ``all_requests``): the largest run-to-run spread,
#: (max - min) / mean, that experiments/steady_state.py measured on the twin (GLM-5-NVFP4 on 8x RTX PRO 6000,
#: trtllm backends, ISL/OSL 256, 2 requests per stream, 8 and 64 streams, five separate launches with their own prompt
#: seeds per start, a shared 2-core machine; docs/loadgen_benchmark.md, "Steady state"), rounded up to 5 %. Steady
#: state: output tok/s 0.6 %, TPOT p50 0.5 %, TPOT p99 0.6 %, TTFT p50 7.1 %, TTFT p99 41.4 %. Started together
#: (the same path before and after the steady-state change, so both five-run sets count): output tok/s 9.1 %, TPOT
#: p50 4.5 %, TPOT p99 5.9 %, TTFT p50 67.1 %, TTFT p99 30.1 %.
DEFAULT_THRESHOLD_PERCENT: dict[str, dict[str, float]] = {
    "steady_state": {"output_tok_per_s": 5.0, "tpot_median_ms": 5.0, "tpot_p99_ms": 5.0, "ttft_median_ms": 10.0,
                     "ttft_p99_ms": 45.0},
    "all_requests": {"output_tok_per_s": 10.0, "tpot_median_ms": 5.0, "tpot_p99_ms": 10.0, "ttft_median_ms": 70.0,
                     "ttft_p99_ms": 35.0},
}


#: Floor (percent) of a *measured* threshold: the spread of two or three repeats can be 0 (the twin is deterministic
#: at a fixed seed), and a 0 % threshold would call any difference, however small, better or worse. 1 % is below
#: every entry of ``DEFAULT_THRESHOLD_PERCENT`` (so a measured spread still tightens the default) and above the
#: rounding of the printed values (one decimal of tok/s and ms).
MIN_MEASURED_THRESHOLD_PERCENT = 1.0

#: Load-point columns that say how a run was measured: column -> name printed in a load-shape warning.
LOAD_SHAPE_COLUMNS: dict[str, str] = {
    "window_kind": "measurement window (window_kind; load.closed_loop_start: steady_state = staggered, "
                   "all_requests = together)",
    "point_kind": "load kind (point_kind)",
    "dataset": "dataset",
    "input_len": "input length ISL (input_len, tokens)",
    "output_len": "output length OSL (output_len, tokens)",
    "num_prompts": "measured requests per load point (num_prompts)",
}


def _shape_values(rows: list[Mapping[str, Any]], column: str) -> list[Any]:
    return sorted({r.get(column) for r in rows if r.get(column) is not None}, key=str)


def load_shape_differences(rows_a: list[Mapping[str, Any]], rows_b: list[Mapping[str, Any]]) -> list[str]:
    """One line per way the two runs' load was shaped differently: for each column of ``LOAD_SHAPE_COLUMNS``
    measured on ok load points, the set of its values in A and in B when they differ, and the number of repeats
    of a load level (``repeat_index`` + 1, ``load.repeats``). Columns a run did not record (older rows) are skipped.
    Empty when both runs were measured alike."""
    ok_a = [r for r in rows_a if r["status"] == "ok"] or list(rows_a)
    ok_b = [r for r in rows_b if r["status"] == "ok"] or list(rows_b)
    out = []
    for column, name in LOAD_SHAPE_COLUMNS.items():
        va, vb = _shape_values(ok_a, column), _shape_values(ok_b, column)
        if va and vb and va != vb:
            out.append(f"{name}: A {', '.join(map(str, va))}; B {', '.join(map(str, vb))}")
    reps_a = max(((r["repeat_index"] or 0) + 1 for r in ok_a), default=1)
    reps_b = max(((r["repeat_index"] or 0) + 1 for r in ok_b), default=1)
    if reps_a != reps_b:
        out.append(f"repeats per load level (load.repeats): A {reps_a}; B {reps_b}")
    return out


def default_threshold(metric: str, *points: list[Mapping[str, Any]]) -> float:
    """``DEFAULT_THRESHOLD_PERCENT`` of ``metric`` for load points measured as ``points`` (lists of rows): the steady
    state's when every row is ``window_kind`` ``steady_state``, else the whole-request one (older rows have none)."""
    steady = all(p["window_kind"] == "steady_state" for group in points for p in group)
    return DEFAULT_THRESHOLD_PERCENT["steady_state" if steady else "all_requests"][metric]


@dataclass(frozen=True)
class MetricDiff:
    metric: str
    level: str
    a: float
    b: float
    delta_percent: float        # (b - a) / a x 100
    threshold_percent: float
    spread_source: str          # confidence | measured | unknown (default threshold)
    verdict: str                # better | worse | within spread
    repeats_a: int = 1          # repeats of the level in run A (rows by repeat_index)
    repeats_b: int = 1


@dataclass
class ConfigDiff:
    label: str
    hash_a: str | None
    hash_b: str | None
    matched_by: str             # hash | settings | label | only in A | only in B
    status_a: str | None
    status_b: str | None
    diffs: list[MetricDiff] = field(default_factory=list)
    error_a: str | None = None  # trial_error_class of a configuration that did not end ok (refused, server_crash...)
    error_b: str | None = None

    @property
    def change(self) -> str:
        """broke | fixed | still failing | faster | slower | mixed | same | only in A | only in B."""
        if self.hash_a is None or self.hash_b is None:
            return self.matched_by
        ok_a, ok_b = self.status_a == "ok", self.status_b == "ok"
        if ok_a and not ok_b:
            return "broke"
        if ok_b and not ok_a:
            return "fixed"
        if not ok_a:
            return "still failing"
        verdicts = {d.verdict for d in self.diffs}
        if {"better", "worse"} <= verdicts:
            return "mixed"
        return "faster" if "better" in verdicts else "slower" if "worse" in verdicts else "same"


@dataclass
class Comparison:
    versions_a: list[str]
    versions_b: list[str]
    configs: list[ConfigDiff]
    spread_measured: bool       # some metric's spread came from repeated load points
    load_differences: list[str] = field(default_factory=list)  # load_shape_differences(A, B)

    def by_change(self, change: str) -> list[ConfigDiff]:
        return [c for c in self.configs if c.change == change]


def _by_config(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["config_hash"], []).append(r)
    return out


def _settings(rows: list[Mapping[str, Any]]) -> str:
    return json.dumps(json.loads(rows[0]["config_json"] or "{}"), sort_keys=True)


def match_configs(a: dict[str, list], b: dict[str, list]) -> list[tuple[str | None, str | None, str]]:
    """(hash in A, hash in B, matched by) for every configuration of either run: by hash, then by settings, then by
    label; the rest ``only in A`` / ``only in B``. Order: A's order, then B's leftovers (:func:`compare` sorts its
    result by label)."""
    pairs: dict[str, tuple[str, str]] = {h: (h, "hash") for h in a if h in b}
    left_b = [h for h in b if h not in a]
    for how, key in (("settings", _settings), ("label", lambda rows: rows[0]["label"])):
        for h in a:
            if h in pairs:
                continue
            found = next((hb for hb in left_b if key(b[hb]) == key(a[h])), None)
            if found is not None:
                pairs[h] = (found, how)
                left_b.remove(found)
    out: list[tuple[str | None, str | None, str]] = [
        (h, *pairs[h]) if h in pairs else (h, None, "only in A") for h in a]
    return out + [(None, h, "only in B") for h in left_b]


def _points(rows: list[Mapping[str, Any]]) -> dict[tuple[str, float], list[Mapping[str, Any]]]:
    """ok load points of an ok trial by (kind, level), in ``repeat_index`` order; more than one per key are
    repeats."""
    out: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["repeat_index"] or 0, r["point_index"] or 0)):
        if r["trial_status"] == "ok" and r["status"] == "ok":
            out.setdefault((r["point_kind"] or "", r["point_value"]), []).append(r)
    return out


def spread_percent(values: list[float]) -> float | None:
    """(max - min) / mean x 100 of repeated measurements; None for fewer than two or a zero mean."""
    if len(values) < 2 or fmean(values) == 0:
        return None
    return (max(values) - min(values)) / abs(fmean(values)) * 100


def _values(points: list[Mapping[str, Any]], metric: str) -> list[float]:
    return [p[metric] for p in points if p.get(metric) is not None]


def compare(rows_a: Iterable[Mapping[str, Any]], rows_b: Iterable[Mapping[str, Any]]) -> Comparison:
    """Compare run A (before) with run B (after); see the module docstring for matching and thresholds."""
    rows_a, rows_b = list(rows_a), list(rows_b)
    a, b = _by_config(rows_a), _by_config(rows_b)
    pts_a = {h: _points(rows) for h, rows in a.items()}
    pts_b = {h: _points(rows) for h, rows in b.items()}
    run_spread: dict[str, float] = {}
    for pts in (*pts_a.values(), *pts_b.values()):
        for group in pts.values():
            for m in METRICS:
                s = spread_percent(_values(group, m))
                if s is not None:
                    run_spread[m] = max(run_spread.get(m, 0.0), s)
    configs = []
    for ha, hb, how in match_configs(a, b):
        ref = a[ha][0] if ha else b[cast(str, hb)][0]  # match_configs names at least one side
        c = ConfigDiff(ref["label"], ha, hb, how, a[ha][0]["trial_status"] if ha else None,
                       b[hb][0]["trial_status"] if hb else None,
                       error_a=a[ha][0].get("trial_error_class") if ha else None,
                       error_b=b[hb][0].get("trial_error_class") if hb else None)
        if ha and hb:
            for key in sorted(set(pts_a[ha]) & set(pts_b[hb]), key=lambda k: (k[0], k[1])):
                pa_, pb_ = pts_a[ha][key], pts_b[hb][key]
                for m, (_, higher) in METRICS.items():
                    va, vb = _values(pa_, m), _values(pb_, m)
                    if not va or not vb or fmean(va) == 0:
                        continue
                    own = [s for s in (spread_percent(va), spread_percent(vb)) if s is not None]
                    if own:
                        threshold, source = max(max(own), MIN_MEASURED_THRESHOLD_PERCENT), "measured"
                    elif m in run_spread:
                        threshold, source = max(run_spread[m], MIN_MEASURED_THRESHOLD_PERCENT), "measured"
                    else:
                        threshold, source = default_threshold(m, pa_, pb_), "unknown"
                    delta = (fmean(vb) - fmean(va)) / abs(fmean(va)) * 100
                    if len(va) > 1 and len(vb) > 1:
                        source = "confidence"
                        within = overlaps(interval(va), interval(vb))
                    else:
                        within = abs(delta) <= threshold
                    verdict = "within spread" if within else "better" if (delta > 0) == higher else "worse"
                    c.diffs.append(MetricDiff(m, level_name(pa_[0]), fmean(va), fmean(vb), delta, threshold,
                                              source, verdict, len(va), len(vb)))
        configs.append(c)
    configs.sort(key=lambda c: c.label)
    versions = [sorted({r["engine_version"] or "?" for rows in x.values() for r in rows}) for x in (a, b)]
    return Comparison(versions[0], versions[1], configs, bool(run_spread), load_shape_differences(rows_a, rows_b))


ORDER = ("broke", "slower", "mixed", "faster", "fixed", "same", "still failing", "only in A", "only in B")


def markdown(cmp: Comparison, name_a: str = "A", name_b: str = "B") -> str:
    """The comparison as markdown: a summary line per kind of change, then each configuration's differences."""
    va, vb = ", ".join(cmp.versions_a), ", ".join(cmp.versions_b)
    lines = [f"# {name_a} (SGLang {va}) vs {name_b} (SGLang {vb})", ""]
    if cmp.load_differences:
        lines += ["**Warning: the two runs were measured differently**, so a difference below may come from how "
                  "the load was shaped rather than from the server:", ""]
        lines += [f"- {d}" for d in cmp.load_differences]
        lines.append("")
    if cmp.spread_measured:
        lines.append("Thresholds: the spread measured by repeated load points ((max - min) / mean), at least "
                     f"{MIN_MEASURED_THRESHOLD_PERCENT:g}% (MIN_MEASURED_THRESHOLD_PERCENT: repeats that agree "
                     "exactly do not show a smaller difference is real); where both "
                     "runs repeated a level, a difference counts only when the 95% confidence intervals of the two "
                     "means do not overlap (threshold source 'confidence').")
    else:
        kinds = {"steady_state": "steady state", "all_requests": "whole requests"}
        lines.append("Spread unknown (no repeated load points in either run): a difference counts only beyond the "
                     "default thresholds, " + "; ".join(
                         f"{kinds[k]}: " + ", ".join(f"{METRICS[m][0]} {t:g}%" for m, t in table.items())
                         for k, table in DEFAULT_THRESHOLD_PERCENT.items())
                     + " (grid.report.compare.DEFAULT_THRESHOLD_PERCENT).")
    lines.append("")
    for change in ORDER:
        group = cmp.by_change(change)
        if group:
            lines.append(f"- **{change}** ({len(group)}): " + ", ".join(f"`{c.label}`" for c in group))
    lines += ["", "| configuration | matched by | status A -> B | level | metric | A | B | change | threshold | "
                  "verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for change in ORDER:
        for c in cmp.by_change(change):
            status = " -> ".join((st or "-") + (f" ({err})" if err and st != "ok" else "")
                                 for st, err in ((c.status_a, c.error_a), (c.status_b, c.error_b)))
            if not c.diffs:
                lines.append(f"| `{c.label}` | {c.matched_by} | {status} | | | | | | | {change} |")
            for d in c.diffs:
                level = d.level + (f" ({d.repeats_a} vs {d.repeats_b} repeats)"
                                   if max(d.repeats_a, d.repeats_b) > 1 else "")
                lines.append(f"| `{c.label}` | {c.matched_by} | {status} | {level} | {METRICS[d.metric][0]} | "
                             f"{fmt_score(d.a)} | {fmt_score(d.b)} | {fmt_delta(d.delta_percent)} | "
                             f"{d.threshold_percent:.1f}% ({d.spread_source}) | {d.verdict} |")
    return "\n".join(lines) + "\n"
