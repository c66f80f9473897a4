"""Choosing the best configuration (pure): objectives by ``kind``, SLO checks, and why every other one lost.

Input is the load-points table as a list of row dicts (grid.storage.schema.LOAD_POINTS_SCHEMA). A configuration is
eligible only if its trial is ``ok``; a load point counts only if every request succeeded (``status == ok``) and its
latency percentiles meet the SLOs. The objective scores each eligible load point; a configuration's score is the
best of its points.

The SLO-dependent columns stored with a load point (goodput, attainment, ``slo_met``) were computed with the SLOs of
the run that measured it, which need not be the current objective's (a resumed sweep does not measure again). The
report therefore first passes the rows through :func:`rejudge`, which recomputes those values, and each SLO metric at
the SLO's percentile, from the stored per-request rows (``grid.metrics.loadpoint.slo_values``); :func:`rank` judges
SLOs from those recomputed values only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from grid.config.schema import ObjectiveSpec
from grid.metrics.confidence import CONFIDENCE, Interval, interval, overlaps
from grid.metrics.hostnoise import (HOST_NOISE_MAX_PCT, HOST_PERTURBED_PCT, counted_noise, host_error_pct, host_noise,
                                    lost_pct, noise_bound, noise_text, perturbed)
from grid.metrics.loadpoint import SLO, SLO_LATENCY_KEYS, slo_values
from grid.plan import level_name
from grid.server.logparse import error_headline
from grid.server.statuses import trial_class
from grid.storage.rows import JudgedPointRow, LoadPointRow
from grid.storage.schema import JUDGED_ONLY_COLUMNS, point_value


@dataclass(frozen=True)
class Objective:
    kind: str
    metric: str              # load-point column the score comes from
    higher_is_better: bool
    unit: str
    describe: str            # "{meeting}" is replaced by " meeting the SLOs (...)" when SLOs are set, else by ""
    points: Callable[[list[Any]], list[Any]] = lambda rows: rows  # load-point rows, or the twin's forecast rows
    noun: str = "score"      # what the score is, for notes ("throughput still rising ...")
    #: why it needs an SLO (None: it does not); the config check refuses the objective without one
    needs_slo: str | None = None
    #: its own load plan: open-loop rate probes chosen by bisection while the trial runs (grid/search/levels.py), not
    #: the configured levels; the twin forecasts the same probes
    bisects_rate: bool = False
    #: the load-point column on the Pareto front's throughput axis (grid/report/pareto.py)
    pareto_axis: str = "output_tok_per_s"

    def description(self, slo) -> str:
        """``describe`` for an objective's ``slo`` (thresholds in ms): names the SLOs only when some are set."""
        text = slo_text(slo)
        return self.describe.format(meeting=f" meeting the SLOs ({text})" if text else "")


OBJECTIVES: dict[str, Objective] = {}

# When the spread is not measured (load.repeats=1), scores closer than this to the best are reported as ties: repeat
# runs of one configuration on the twin differ by about this much (experiments/twin_clock_error.py: -0.2..-2.7%
# output tok/s at the default time scale). With load.repeats >= 2 ties are decided by confidence intervals instead
# (grid/metrics/confidence.py).
TIE_PERCENT = 1.0



def register(obj: Objective) -> Objective:
    OBJECTIVES[obj.kind] = obj
    return obj


register(Objective("max_output_throughput", "output_tok_per_s", True, "tok/s",
                   "highest output throughput at any load point{meeting}", noun="throughput"))
register(Objective("max_goodput", "goodput_req_per_s", True, "req/s",
                   "highest goodput (requests/s within every SLO) at any load point{meeting}", noun="goodput",
                   needs_slo="goodput counts the requests per second that meet them", pareto_axis="goodput_req_per_s"))
register(Objective("min_tpot", "tpot_median_ms", False, "ms", "lowest median TPOT at the lowest load level{meeting}",
                   points=lambda rows: [r for r in rows if r["point_value"] == min(x["point_value"] for x in rows)],
                   noun="median TPOT"))
# The capacity: the highest open-loop request rate whose load point meets the SLOs. Its probes are chosen by bisection
# while the trial runs (grid/search/levels.py, objective.capacity_rel_tol); any recorded rate points rank the same way.
register(Objective("max_capacity", "point_value", True, "req/s",
                   "highest request rate (open loop, found by bisection){meeting}",
                   points=lambda rows: [r for r in rows if r["point_kind"] == "rate"], noun="capacity",
                   needs_slo="the capacity is the highest request rate at which they hold", bisects_rate=True,
                   pareto_axis="requests_per_s"))

def describe_objectives() -> str:
    """Markdown table of the registered objectives (:data:`OBJECTIVES`): kind, the load-point column scored,
    direction, unit, and what it means."""
    out = ["### objectives", "", "`objective.kind` (conf/objective/, registered in grid/report/select.py). A "
           "configuration's score is the best of its load points that meet the SLOs; `max_capacity`'s points are "
           "the probes of a bisection over the request rate (grid/search/levels.py).", "",
           "| kind | scored column | better | unit | meaning |", "|---|---|---|---|---|"]
    out += [f"| `{o.kind}` | `{o.metric}` | {'higher' if o.higher_is_better else 'lower'} | {o.unit} | "
            f"{o.describe.format(meeting=' meeting the SLOs')} |" for o in OBJECTIVES.values()]
    return "\n".join(out) + "\n"


_LOAD_FIELD = {"concurrency": "load.concurrency", "rate": "load.request_rate"}


def unmeasured_note(rows: Iterable[Mapping[str, Any]], objective) -> str | None:
    """``Cannot name a winner yet: ...`` when load points early stopping skipped under another objective (kind or
    SLOs: their ``early_stop_objective``) are missing from this objective's ranking; None when there are none
    (pure). A rule that was safe for the objective it judged by (grid/search/levels.py) says nothing of another."""
    key = objective_key(objective)
    stale = [r for r in rows if r["status"] == "not_run" and r["early_stop_objective"]
             and r["early_stop_objective"] != key]
    if not stale:
        return None
    configs = {r["config_hash"] for r in stale}
    judged = sorted({r["early_stop_objective"] for r in stale})
    return (f"Cannot name a winner yet: {len(stale)} load point{'s' if len(stale) != 1 else ''} of {len(configs)} "
            f"configuration{'s' if len(configs) != 1 else ''} {'were' if len(stale) != 1 else 'was'} skipped by early "
            "stopping under another objective "
            f"({'; '.join(judged)}), so this objective ({key}) ranks without them. Run the same command again to "
            "measure them (those configurations run again; their earlier files are kept), or rank with the "
            "objective they were measured under.")


def behind_note(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """The caveat for load points measured while the host was too busy (:func:`host_noise`, by each point's bound),
    and for those a raised ``objective.host_noise_max_pct`` let count; None when there are neither (pure)."""
    measured = [r for r in rows if r["status"] in ("ok", "partial")]
    noisy = [r for r in measured if host_noise(r)]
    counted = [r for r in measured if counted_noise(r)]
    notes = []
    if noisy:
        bounds = sorted({noise_bound(r) for r in noisy})
        notes.append(
            f"The host was too busy while measuring {len(noisy)} load point{'s' if len(noisy) != 1 else ''} of "
            f"{_configs(noisy)}: the load generator's event loop ran late by "
            f"more than {' / '.join(f'{b:g}%' for b in bounds)} of the point's time (up to "
            f"{max(map(lost_pct, noisy)):.1f}%), so those points are host noise and are not counted. Run the same "
            "command again on a quieter machine to measure them again.")
    if counted:
        notes.append(
            f"{len(counted)} load point{'s' if len(counted) != 1 else ''} of {_configs(counted)} lost more than "
            f"{HOST_NOISE_MAX_PCT:g}% of {'their' if len(counted) != 1 else 'its'} time to the host (up to "
            f"{max(map(lost_pct, counted)):.1f}%) and count only because objective.host_noise_max_pct was raised to "
            f"{max(map(noise_bound, counted)):g}: their latencies and throughput carry that delay; do not quote them.")
    shaken = [r for r in measured if r["status"] == "ok" and perturbed(r) and not counted_noise(r)]
    if shaken:
        low, high = f"{min(map(lost_pct, shaken)):.1f}%", f"{max(map(lost_pct, shaken)):.1f}%"
        one = len(shaken) == 1
        notes.append(
            f"{len(shaken)} load point{'' if one else 's'} of {_configs(shaken)} lost "
            f"{low if low == high else f'{low[:-1]}-{high}'} of {'its' if one else 'their'} time to the host (the "
            f"load generator running late; over {HOST_PERTURBED_PCT:g}%): "
            f"{'it counts' if one else 'they count'}, but {'its' if one else 'their'} throughput may be off by about "
            "as much and latencies by more, so a lead smaller than the loss of the points it rests on is reported "
            "as a tie.")
    return " ".join(notes) or None


def _configs(rows: list[Mapping[str, Any]]) -> str:
    n = len({r["config_hash"] for r in rows})
    return f"{n} configuration{'s' if n != 1 else ''}"


def _pct_label(percentile: float) -> str:
    return f"{percentile:g}"


def slo_text(slo) -> str:
    """The SLOs that are set, e.g. ``p99 TTFT <= 2000 ms, p99 TPOT <= 150 ms`` (thresholds in modelled ms); "" when
    none is set. ``slo``: anything with ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` and ``percentile`` (or None)."""
    if slo is None:
        return ""
    pct = _pct_label(slo.percentile)
    return ", ".join(f"p{pct} {name.upper()} <= {target:g} ms"
                     for name, target in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e", slo.e2e_ms))
                     if target is not None)


def objective_key(objective) -> str:
    """What a judgement depends on: the objective's kind and its SLOs, e.g. ``max_goodput; p99 TTFT <= 1500 ms``
    (``objective``: an ObjectiveSpec). Recorded with every point early stopping skipped (``early_stop_objective``)."""
    slo = slo_text(objective.slo)
    return f"{objective.kind}; {slo}" if slo else objective.kind


def fmt_score(value: float, figures: int = 3) -> str:
    """A score (any unit) with ``figures`` significant figures, never in exponent form (integer digits are kept):
    0.312, 12.3, 180, 12345."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def fmt_scores(value: float, best: float) -> tuple[str, str]:
    """``value`` and ``best`` with 3 significant figures, or more (up to 6) until they print differently."""
    for figures in range(3, 7):
        a, b = fmt_score(value, figures), fmt_score(best, figures)
        if a != b or value == best:
            break
    return a, b


def fmt_delta(percent: float) -> str:
    """A signed difference in percent: one decimal, two significant figures below 0.1 %, never in exponent form:
    -10.0%, -0.043%, -<0.0001%."""
    if percent == 0 or abs(percent) >= 0.1:
        return f"{percent:+.1f}%"
    if abs(percent) < 1e-4:
        return f"{'-' if percent < 0 else '+'}<0.0001%"
    return f"{percent:+.2g}%"


def rejudge(rows: Iterable[LoadPointRow], requests: Iterable[Mapping[str, Any]], slo) -> list[JudgedPointRow]:
    """Copies of the load-point ``rows`` with their SLO-dependent values recomputed for ``slo`` (pure).

    ``requests``: rows of the ``requests`` table (``config_hash``, ``point_index``, ``status``, ``ttft_ms``,
    ``tpot_ms``, ``e2e_ms`` in modelled ms). ``slo``: thresholds in ms and a percentile in (0, 100] (``SLOSpec`` or
    ``grid.metrics.loadpoint.SLO``). Every row gets ``SLO_COLUMNS`` (goodput in req/s over the row's ``duration_s``,
    or from its ``requests_per_s`` for a ``steady_state`` row; attainment fractions, ``slo_met``) and
    ``SLO_LATENCY_KEYS`` (ms) from ``grid.metrics.loadpoint.slo_values`` over its own requests. A row whose stored
    requests do not number ``requests_total`` (files lost or damaged) cannot be judged under SLOs: its SLO values are null and
    ``slo_unjudged`` says why. The input rows are not modified.
    """
    target = SLO(slo.ttft_ms, slo.tpot_ms, slo.e2e_ms, slo.percentile)
    by_point: dict[tuple[str | None, int | None], list[Mapping[str, Any]]] = {}
    for r in requests:
        by_point.setdefault((r["config_hash"], r["point_index"]), []).append(r)
    out = []
    for row in rows:
        new: dict[str, Any] = {**row, **dict.fromkeys(JUDGED_ONLY_COLUMNS)}
        mine = by_point.get((row["config_hash"], row["point_index"]), [])
        total = row["requests_total"] or 0
        if len(mine) == total or not target.given():
            steady = row["window_kind"] == "steady_state"
            new.update(slo_values(mine, row["duration_s"], target,
                                  row["requests_per_s"] if steady else None))
        else:
            new.update(slo_values([], None, target))
            new["slo_unjudged"] = (f"SLOs not judged: {len(mine)} of its {total} requests are in parquet/requests")
        out.append(cast("JudgedPointRow", new))
    return out


@dataclass
class Verdict:
    config_hash: str
    label: str
    outcome: str                       # best | lost | less_accurate | no_eligible_point | invalid | failed | skipped
    score: float | None
    reason: str
    best_point: JudgedPointRow | None = None
    rows: list[JudgedPointRow] = field(default_factory=list)
    interval: Interval | None = None   # the score's repeats at the best level (None: not scored)
    host_pct: float = 0.0              # how far (%) the host may have moved the score (hostnoise.host_error_pct)


def _score(v: Verdict) -> float:
    """The score of a scored verdict (``TypeError`` for one without)."""
    if v.score is None:
        raise TypeError(f"{v.label}: not scored")
    return v.score


def _best_point(v: Verdict) -> JudgedPointRow:
    """The best load point of a scored verdict (``TypeError`` for one without)."""
    if v.best_point is None:
        raise TypeError(f"{v.label}: no best load point")
    return v.best_point


def _slo_misses(row: Mapping[str, Any], slo) -> list[str]:
    """Each SLO the row misses, as text, from the percentile values :func:`rejudge` put on the row. Raises
    ``ValueError`` for a row that did not pass through it (the stored goodput and percentiles belong to the SLOs of
    the run that measured the point, not necessarily these)."""
    pct = _pct_label(slo.percentile)
    misses = []
    for name, target in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2e", slo.e2e_ms)):
        if target is None:
            continue
        key = SLO_LATENCY_KEYS[name]
        if key not in row:
            raise ValueError(f"rank() needs load-point rows judged for these SLOs by rejudge() (no {key!r})")
        value = row[key]
        if value is None:
            misses.append(f"p{pct} {name.upper()} not measured (SLO {target:g} ms)")
        elif value > target:
            misses.append(f"p{pct} {name.upper()} {fmt_score(value)} ms > {target:g}")
    return misses


def meets_slos(row: Mapping[str, Any], slo) -> bool | None:
    """Whether a measured load point counts under ``slo`` as :func:`rank` judges it: its status is ``ok`` and each
    SLO's percentile value (``SLO_LATENCY_KEYS``, on rows from ``summarize`` or :func:`rejudge`) is within its
    target. None when ``slo`` sets no target. (``slo_met``, the share of requests meeting each target, can differ from
    this at the edge: a percentile interpolates between requests.)"""
    if not slo_text(slo):
        return None
    return row["status"] == "ok" and not _slo_misses(dict(row), slo)


def _no_score(obj: Objective, slo) -> str:
    if obj.metric == "goodput_req_per_s" and not slo_text(slo):
        return "goodput needs an SLO (set objective.slo.ttft_ms, tpot_ms or e2e_ms)"
    return f"{obj.metric} not measured"


#: What each early-stopping class (grid.search.levels) says of every point it skipped, for a group of them.
EARLY_STOP_TEXT = {
    "early_stop_twin_bound": "the twin's upper bound at each is below the best score measured before it",
    "early_stop_slo": "a lower level of the same kind already missed the SLOs",
}


def _skipped_text(error_class: str, points: list[tuple[str, str]]) -> str:
    """The "not counted" entry of the load points one early-stopping rule skipped (``points``: level name, its
    ``skip_reason``): one point with its own reason, several as one entry with the rule's reason (each point's own,
    with its numbers, is in ``load_points.skip_reason``)."""
    if len(points) == 1:
        level, reason = points[0]
        return f"{level}: not_run ({error_class}: {reason})"
    return (f"{len(points)} load points not run ({', '.join(level for level, _ in points)}): {error_class}: "
            f"{EARLY_STOP_TEXT[error_class]} (each point's reason: load_points.skip_reason)")


def rising_note(obj: Objective, rows: list[JudgedPointRow], best: Mapping[str, Any]) -> str | None:
    """A note when ``best`` (the chosen load point of a configuration whose load points are ``rows``) is the
    highest load level tested of its kind and its score (``obj.metric``) rose from the level below by more than
    ``TIE_PERCENT`` %: the peak may lie beyond the levels tested. None otherwise (and for lower-is-better
    objectives, and when requests already queue at the server at that point: it is saturated, see
    ``grid.diagnosis.rules``)."""
    if not obj.higher_is_better or best["bottleneck"] == "kv-capacity/queue-bound":
        return None
    kind = best["point_kind"]
    same = [r for r in rows if r["point_kind"] == kind]
    level = best["point_value"]
    if any(r["point_value"] > level for r in same):
        return None
    below = [r for r in same if r["point_value"] < level]
    if not below:
        return None
    prev = max(below, key=lambda r: r["point_value"])
    score, before = best.get(obj.metric), point_value(prev, obj.metric)
    if score is None or before is None:
        return None
    if before > 0:
        rise = (score - before) / before * 100
        if rise <= TIE_PERCENT:
            return None
        by = f"+{rise:.1f}% over {level_name(prev)}"
    elif score > before:
        by = f"from {fmt_score(before)} at {level_name(prev)}"
    else:
        return None
    if obj.metric == "point_value":  # capacity: every probe held the SLOs; the bisection ran out of probes
        return (f"the SLOs held at every rate probed, up to {level_name(best)}: the capacity may lie beyond; raise "
                "objective.capacity_max_probes")
    knob = _LOAD_FIELD.get(kind or "", "load.concurrency")
    return (f"{obj.noun} still rising at the highest level tested ({level_name(best)}, {by}): the peak may lie beyond; "
            f"add higher {knob} levels")


def _repeat_text(row: Mapping[str, Any]) -> str:
    r = row["repeat_index"]
    return f" (repeat {r})" if r else ""


def level_scores(rows: Iterable[Mapping[str, Any]], eligible: Sequence[Mapping[str, Any]],
                 metric: str) -> list[tuple[JudgedPointRow, Interval, list[Mapping[str, Any]]]]:
    """Per load level (``point_kind``, ``point_value``) of ``rows`` whose every repeat is in ``eligible``: a copy of
    its first repeat's row with ``metric`` replaced by the mean over the repeats, the repeats' :class:`Interval`, and
    the repeats' rows (pure). A level with a repeat that is not eligible does not count: its score would rest on the lucky repeats.
    Repeats are the rows of one level (``repeat_index`` 0, 1, ...; rows of runs before repeat_index existed that
    list a level twice count as repeats too)."""
    ok = {id(r) for r in eligible}
    levels: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for r in rows:
        levels.setdefault((r["point_kind"], r["point_value"]), []).append(r)
    out = []
    for reps in levels.values():
        if not all(id(r) in ok for r in reps):
            continue
        reps = sorted(reps, key=lambda r: (r["repeat_index"] or 0, r["point_index"]))
        iv = interval([r[metric] for r in reps])
        out.append((cast("JudgedPointRow", {**reps[0], metric: iv.mean}), iv, reps))
    return out


def spread_text(iv: Interval | None, unit: str) -> str:
    """What the repeats of a score say: ``mean of 3 repeats, min 98.0 .. max 102 tok/s, 95% CI 96.1 .. 104``;
    with one repeat, that the spread is not measured and which rule decides ties instead."""
    if iv is None or not iv.measured:
        return (f"spread not measured (load.repeats=1): ties decided by the default {TIE_PERCENT:g}%; "
                "set load.repeats=3 to measure it")
    return (f"mean of {iv.n} repeats, min {fmt_score(iv.low)} .. max {fmt_score(iv.high)} {unit}, "
            f"{CONFIDENCE * 100:g}% CI {fmt_score(iv.ci_low)} .. {fmt_score(iv.ci_high)}")  # type: ignore[arg-type]


def is_tie(mine: Interval | None, best: Interval | None, delta_percent: float, unit: str,
           host_pct: float = 0.0) -> tuple[bool, str]:
    """(tied, why) for a configuration scoring ``mine`` against the best's ``best`` (pure). With both spreads
    measured (two repeats or more): tied when the confidence intervals of the means overlap. Otherwise: tied when
    ``|delta_percent|`` (its score vs the best's, in percent) is below ``TIE_PERCENT``, said to be a default
    (``why`` is "" for a loss by that rule: the report states the rule once, :func:`spread_text`). Either way also
    tied when ``|delta_percent|`` is below ``host_pct``: the share (%) the host may have moved either score
    (grid.metrics.hostnoise.host_error_pct of the load points the two scores rest on; 0: nothing lost). That share
    bounds a throughput's error; a latency score may be off by more, which this does not widen."""
    by_host = abs(delta_percent) < host_pct
    host_why = (f"a tie within the host's share of the points' time (the host took up to {host_pct:.1f}% of it, so "
                "the values may be off by about as much)")
    if mine is not None and best is not None and mine.measured and best.measured:
        ci = (f"{CONFIDENCE * 100:g}% CI {fmt_score(mine.ci_low)} .. {fmt_score(mine.ci_high)} vs "  # type: ignore
              f"{fmt_score(best.ci_low)} .. {fmt_score(best.ci_high)} {unit}")  # type: ignore[arg-type]
        if overlaps(mine, best):
            return True, f"tied within the measured spread ({ci} overlap)"
        if by_host:
            return True, f"{host_why}; {ci} do not overlap"
        return False, f"outside the measured spread ({ci})"
    if abs(delta_percent) < TIE_PERCENT:
        return True, f"a tie (within the default {TIE_PERCENT:g}%; spread not measured: load.repeats=1)"
    if by_host:
        return True, host_why
    return False, ""


def _failure_reason(first: LoadPointRow) -> str:
    cls = first["trial_error_class"] or "failed"
    msg = first["trial_error_message"] or ""
    line = error_headline(first["log_tail"])
    known = trial_class(cls)
    if line and known is not None and known.phase == "startup":
        return f"{cls}: {line}"            # the server's own error says more than "exited before ready"
    return f"{cls}: {msg}" + (f" | log: {line}" if line else "")


def accuracy_gate(rows: Sequence[Mapping[str, Any]], max_drop: float) -> tuple[float | None, str, dict[str, str]]:
    """(baseline exact-match share, where it comes from, {config_hash: why it cannot win}) from the load-point
    columns ``accuracy_exact_match`` / ``accuracy_role`` (grid/accuracy; pure). The baseline is the lowest share of
    the configurations that compute like the sweep's base; with none measured, the highest share measured (the
    best any configuration answered). A configuration measured below the baseline by more than ``max_drop``
    (fraction) is gated."""
    share: dict[str, tuple[float, str]] = {}
    for r in rows:
        if r["accuracy_exact_match"] is not None and r["trial_status"] == "ok":
            share[r["config_hash"]] = (r["accuracy_exact_match"], r["accuracy_role"] or "")
    if not share:
        return None, "", {}
    base = [s for s, role in share.values() if role == "baseline"]
    if base:
        baseline, source = min(base), "the configurations that compute like the sweep's base"
    else:
        baseline, source = max(s for s, _ in share.values()), ("the best any configuration answered, none measured "
                                                               "computing like the sweep's base")
    gated = {h: (f"less accurate: {s * 100:.0f}% of grid's accuracy prompts answered exactly vs {baseline * 100:.0f}% "
                 f"for {source} (drop {(baseline - s) * 100:.0f} points > accuracy.max_drop {max_drop * 100:g}); "
                 f"{role}")
             for h, (s, role) in share.items() if baseline - s > max_drop + 1e-12}
    return baseline, source, gated


def rank(rows: Sequence[JudgedPointRow], objective: ObjectiveSpec, max_accuracy_drop: float | None = None,
         mismatched: Mapping[str, str] | None = None) -> list[Verdict]:
    """Verdicts, best first, then losers by score, then invalid and failed configurations (pure).

    ``max_accuracy_drop``: the accuracy guard (fraction; None: off): a configuration whose exact-match share is
    below the baseline's by more than this is ``less_accurate`` and cannot win (:func:`accuracy_gate`), as is each
    configuration of ``mismatched`` (config hash -> why: a speculative configuration whose greedy answers differ
    from the same configuration without it, grid.accuracy ``speculative_mismatches``) while the guard is on.

    ``rows``: load-point rows, passed through :func:`rejudge` for ``objective.slo`` first when it sets any SLO
    (``ValueError`` otherwise). A verdict's
    ``score`` is in the objective's unit (tok/s, req/s or ms); ``reason`` says why it won, lost or failed.
    """
    obj = OBJECTIVES.get(objective.kind)
    if obj is None:
        raise ValueError(f"objective.kind={objective.kind!r}; allowed: {', '.join(sorted(OBJECTIVES))}")
    by_config: dict[str, list[JudgedPointRow]] = {}
    for row in rows:
        by_config.setdefault(row["config_hash"] or "", []).append(row)
    verdicts: list[Verdict] = []
    excluded: dict[str, list[str]] = {}    # per configuration: its load points not counted, and why
    key = objective_key(objective)
    for h, group in by_config.items():
        group.sort(key=lambda r: r["point_index"])
        # a configuration is judged by its worst trial verdict: one row whose server broke keeps it from ranking
        first = next((r for r in group if r["trial_status"] != "ok"), group[0])
        status = first["trial_status"]
        if status != "ok":
            if status == "skipped":  # the machinery was lost: infrastructure, never the configuration's failure
                verdicts.append(Verdict(h, first["label"], "skipped", None,
                                        f"not measured, an infrastructure failure (not charged to the configuration): "
                                        f"{_failure_reason(first)}; it runs again when the same command runs again",
                                        None, group))
                continue
            outcome = "invalid" if status == "invalid" else "failed"
            verdicts.append(Verdict(h, first["label"], outcome, None, _failure_reason(first), None, group))
            continue
        eligible, misses, slo_missed = [], [], False
        skipped: dict[str, list[tuple[str, str]]] = {}   # early-stop class -> (level, its own reason), in order
        unmeasured: dict[str, list[str]] = {}   # objective early stopping judged by -> levels it skipped
        noisy: list[str] = []                   # levels measured while the host was too busy
        for row in obj.points(group):
            level = level_name(row) + _repeat_text(row)
            if row["status"] in ("ok", "partial") and host_noise(row):
                noisy.append(f"{level} ({noise_text(row)})")
                continue
            if row["status"] == "not_run" and row["error_class"] in EARLY_STOP_TEXT and row["skip_reason"]:
                judged = row["early_stop_objective"]
                if judged and judged != key:   # skipped for another objective: nothing says it could not count here
                    unmeasured.setdefault(judged, []).append(level)
                    continue
                skipped.setdefault(row["error_class"], []).append((level, row["skip_reason"]))
                continue
            if row["status"] != "ok":
                misses.append(f"{level}: {row['status']}"
                              + (f" ({row['error_class']}: {row['skip_reason']})" if row["skip_reason"] else
                                 f" ({row['error_class']})" if row["error_class"] else ""))
                continue
            if row.get("slo_unjudged"):
                misses.append(f"{level}: {row['slo_unjudged']}")
                continue
            slo_miss = _slo_misses(row, objective.slo)
            if slo_miss:
                slo_missed = True
                misses.append(f"{level}: " + ", ".join(slo_miss))
                continue
            if row.get(obj.metric) is None:
                misses.append(f"{level}: {_no_score(obj, objective.slo)}")
                continue
            eligible.append(row)
        misses += [_skipped_text(cls, points) for cls, points in skipped.items()]
        if noisy:
            misses.append(f"host noise: the host was too busy while measuring {', '.join(noisy)}, not the "
                          "configuration (running the same command again measures them again)")
        misses += [f"not measured for this objective: {', '.join(levels)} (skipped by early stopping under "
                   f"objective {judged}; running the same command again measures them)"
                   for judged, levels in unmeasured.items()]
        best: JudgedPointRow | None = None
        best_iv: Interval | None = None
        best_reps: list[Mapping[str, Any]] = []
        for agg, iv, reps in level_scores(obj.points(group), eligible, obj.metric):
            better = best_iv is None or (iv.mean > best_iv.mean if obj.higher_is_better else iv.mean < best_iv.mean)
            if better:
                best, best_iv, best_reps = agg, iv, reps
        # how far the host may have moved the score: a measured score rests on its level's repeats; a capacity (a
        # rate set, not measured) on every probe's pass or fail, the failing ones above it included
        host_pct = host_error_pct([r for r in obj.points(group) if r["status"] in ("ok", "partial")]
                                  if obj.metric == "point_value" else best_reps)
        if best is None or best_iv is None:
            head = "no load point met the SLOs" if slo_missed else "no eligible load point"
            verdicts.append(Verdict(h, first["label"], "no_eligible_point", None,
                                    f"{head}: " + "; ".join(misses), None, group))
        else:
            verdicts.append(Verdict(h, first["label"], "lost", best_iv.mean, "", best, group, best_iv, host_pct))
            excluded[h] = misses
    if max_accuracy_drop is not None:
        _, _, gated = accuracy_gate(rows, max_accuracy_drop)
        gated = {**gated, **{h: f"less accurate: {why}" for h, why in (mismatched or {}).items()}}
        for v in verdicts:
            if v.config_hash in gated and v.score is not None:
                v.outcome = "less_accurate"
                v.reason = (f"{gated[v.config_hash]}; it scored {fmt_score(v.score)} {obj.unit} at "
                            f"{level_name(_best_point(v))}")
                v.score = None
    scored = sorted((v for v in verdicts if v.score is not None),
                    key=_score, reverse=obj.higher_is_better)
    if scored:
        top = scored[0]
        top.outcome = "best"
        top.reason = f"{obj.description(objective.slo)}: {fmt_score(_score(top))} {obj.unit}" + (
            f" at {level_name(_best_point(top))}" if obj.metric != "point_value" else "")  # capacity: the level itself
        if top.interval is not None and top.interval.measured:
            top.reason += f" ({spread_text(top.interval, obj.unit)})"
        ties: list[str] = []   # which rule tied each tied configuration: "spread" or "host"
        for v in scored[1:]:
            delta = (_score(v) - _score(top)) / _score(top) * 100 if top.score else 0.0
            mine, theirs = fmt_scores(_score(v), _score(top))
            where = f" at {level_name(_best_point(v))}" if obj.metric != "point_value" else ""
            v.reason = (f"{mine} {obj.unit}{where} vs best {theirs} "
                        f"({fmt_delta(delta)})")
            tied, why = is_tie(v.interval, top.interval, delta, obj.unit, max(v.host_pct, top.host_pct))
            if tied:   # by the spread or the default, or only by the host's share
                ties.append("spread" if is_tie(v.interval, top.interval, delta, obj.unit)[0] else "host")
            if why:
                v.reason += f": {why}"
            if excluded.get(v.config_hash):
                v.reason += "; not counted: " + "; ".join(excluded[v.config_hash])
        if ties:
            rules = []
            if "spread" in ties:
                rules.append("within the measured spread (confidence intervals overlap)"
                             if top.interval is not None and top.interval.measured else
                             f"within the default {TIE_PERCENT:g}% (spread not measured)")
            if "host" in ties:
                rules.append("within the share of the points' time the host took")
            n = len(ties)
            top.reason += (f"; {n} other configuration{'s' if n > 1 else ''} {' or '.join(rules)}: "
                           "a tie, any of them will do")
        if excluded.get(top.config_hash):
            top.reason += "; not counted: " + "; ".join(excluded[top.config_hash])
        levels = [agg for agg, _, _ in level_scores(obj.points(top.rows), [r for r in top.rows if r["status"] == "ok"
                                                                        and r.get(obj.metric) is not None],
                                                 obj.metric)]
        peak = _best_point(top)
        # a higher level in the plan that did not count (skipped by early stopping, failed, missed the SLOs) was
        # not left untested: "add higher levels" would send the user after levels the sweep already has
        planned_above = any(r["point_kind"] == peak["point_kind"] and r["point_value"] > peak["point_value"]
                            for r in obj.points(top.rows))
        note = None if planned_above else rising_note(obj, levels, peak)
        if note:
            top.reason += f"; {note}"
    order = {"best": 0, "lost": 1, "less_accurate": 2, "no_eligible_point": 3, "invalid": 4, "failed": 5,
             "skipped": 6}
    rest = [v for v in verdicts if v.score is None]
    rest.sort(key=lambda v: (order[v.outcome], v.label))
    return scored + rest
