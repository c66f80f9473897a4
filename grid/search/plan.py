"""Before a sweep: what grid knows of each configuration (refused, known to fail), the twin's forecast of each, the
search policy that will choose among them, and the cost it expects (printed before anything launches).

GPU-seconds are modelled seconds a launch holds its node (the twin's startup model, ``PerfModel.startup_phases_s``,
plus the modelled duration of every load point, grid/search/predict.py) times the GPUs of every node it spans
(``hardware.total_gpus``): a launch occupies the whole node.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any

from grid.config.schema import RunSpec
from grid.search import SEARCHES
from grid.search.knowledge import Known, assess
from grid.search.policy import Budget, Candidate, Policy
from grid.search.forecastability import no_forecast
from grid.search.predict import Forecast, forecast, unforecastable_load
from grid.plan import TrialPlan


@dataclass
class SearchPlan:
    plans: list[TrialPlan]
    known: dict[str, Known]
    forecasts: dict[str, Forecast | None]
    policy: Policy
    #: configurations an earlier run recorded (hash -> measured score, None: failed or no SLO met); the policy was
    #: resumed with them and the estimate counts only what is left to run
    recorded: dict[str, float | None] = field(default_factory=dict)
    #: the SGLang release the forecasts model; the calibration the sweep started from (``twin.calibration``, or the
    #: run directory's recorded points on resume) and the latest (grid/search/calibration.py)
    version: str = ""
    prior: Any = None
    calibration: Any = None

    def resume(self, recorded: dict[str, float | None]) -> None:
        """Resume the policy with configurations an earlier run recorded (:meth:`Policy.resume`)."""
        self.recorded = dict(recorded)
        self.policy.resume(self.recorded)

    def recalibrate(self, spec: RunSpec, version: str, coefficients) -> None:
        """Forecast every configuration that may launch again with ``coefficients`` (the twin calibrated on what
        was measured, grid/search/calibration.py; on a CPU host the first forecasts, grid/twin/perf.py
        ``forecasts_need_calibration``) and hand them to the policy; ``forecasts`` (what the plan printed and the
        cost estimate counts) stay as they were."""
        self.policy.reforecast({p.config_hash: ((f.value if f else None), gpu_seconds(spec, f))
                                for p in self.plans if not self.known[p.config_hash].refused
                                for f in [forecast(spec, p, version, coefficients)] if f is not None})

    def cost_lines(self, spec: RunSpec) -> list[str]:
        """What the sweep is expected to cost, one line each (printed before it starts)."""
        return cost_lines(spec, self)


def gpu_seconds(spec: RunSpec, f: Forecast | None) -> float:
    """Modelled GPU-seconds of one launch: (startup + load) x the GPUs it holds (a deployment's, else
    ``hardware.total_gpus``: every node); 0 when not modelled."""
    return 0.0 if f is None else f.gpu_s * (f.gpus or spec.hardware.total_gpus)


def max_gpu_s(search, cands: list[Candidate]) -> float | None:
    """The GPU-second budget of ``search`` (``max_gpu_hours`` x 3600 and ``max_gpu_fraction`` x the modelled
    GPU-seconds of every candidate not refused, whichever is smaller); None when neither is set."""
    limits = []
    if search.max_gpu_hours is not None:
        limits.append(search.max_gpu_hours * 3600)
    if search.max_gpu_fraction is not None:
        limits.append(search.max_gpu_fraction * sum(c.gpu_s for c in cands if not c.refused))
    return min(limits) if limits else None


def baseline(plans: list[TrialPlan], known: dict, forecasts: dict, higher_is_better: bool) -> str | None:
    """The configuration measured whatever the twin forecasts, in a sweep with disaggregated deployments: the
    aggregated one (one server or replicas; neither refused nor known to fail) with the best forecast; when none has
    one, the first of those with the most GPUs (the disaggregated deployments' peers). Users keep finding that prefill-decode disaggregation gave them nothing
    (sgl-project/sglang#24488, #6459): the answer always holds a measured aggregated baseline. None when no
    deployment is disaggregated or no aggregated one may launch."""
    if not any(p.deployment is not None and p.deployment.disaggregated for p in plans):
        return None
    aggregated = [p for p in plans if (p.deployment is None or not p.deployment.disaggregated)
                  and not known[p.config_hash].refused and not known[p.config_hash].known_to_fail]
    if not aggregated:
        return None
    sign = 1.0 if higher_is_better else -1.0

    def rank(p: TrialPlan) -> tuple[float, int]:
        f = forecasts.get(p.config_hash)
        gpus = p.deployment.gpus if p.deployment is not None else 0
        return (sign * f.value if f is not None and f.value is not None else -math.inf), gpus
    return max(aggregated, key=rank).config_hash


def build(spec: RunSpec, engine: Any, plans: list[TrialPlan], version: str, coefficients=None) -> SearchPlan:
    """Assess every configuration, forecast the ones that may launch (with the twin calibrated to ``coefficients``,
    grid/twin/coefficients.py, when given) and set up ``spec.search``'s policy."""
    from grid.report.select import OBJECTIVES

    known = assess(spec, engine, plans, version)
    blocked = no_forecast(spec, calibrated=coefficients is not None)  # the engine's or the hardware's
    forecasts = {p.config_hash: (None if known[p.config_hash].refused or blocked is not None
                                 else forecast(spec, p, version, coefficients)) for p in plans}
    base = baseline(plans, known, forecasts, OBJECTIVES[spec.objective.kind].higher_is_better)
    # a deployment counts as a setting of its own in the twin's residual model (TwinGuided)
    cands = [Candidate(p.config_hash, refused=bool(known[p.config_hash].refused),
                       known_to_fail=known[p.config_hash].known_to_fail,
                       forecast=(f.value if (f := forecasts[p.config_hash]) else None),
                       gpu_s=gpu_seconds(spec, forecasts[p.config_hash]),
                       settings={**p.settings, **({"deployment": p.deployment.label()} if p.deployment else {})},
                       baseline=p.config_hash == base) for p in plans]
    s = spec.search
    budget = Budget(s.max_launches, max_gpu_s(s, cands))
    # a load the twin cannot forecast leaves nothing to rank or prune by
    kind = "exhaustive" if any(unforecastable_load(p.load) for p in plans) else s.kind
    policy = SEARCHES[kind].policy(cands, budget, higher_is_better=OBJECTIVES[spec.objective.kind].higher_is_better,
                                     try_known_failures=s.try_known_failures, twin_error=s.twin_error, spread=s.spread,
                                     seed=s.seed, tolerance=s.tolerance, risk=s.risk)
    return SearchPlan(plans, known, forecasts, policy, version=version)


def expected_launches(sp: SearchPlan) -> list[str]:
    """The hashes the policy would launch if every measurement came out as the twin forecasts (a dry run of it),
    resumed with ``sp.recorded``: only what is left to run."""
    trial = type(sp.policy)([c for c in sp.policy.candidates], Budget(sp.policy.budget.max_launches,
                                                                       sp.policy.budget.max_gpu_s),
                            higher_is_better=sp.policy.higher_is_better,
                            try_known_failures=sp.policy.try_known_failures, twin_error=sp.policy.twin_error,
                            spread=sp.policy.spread, seed=sp.policy.seed, tolerance=sp.policy.tolerance,
                            risk=sp.policy.risk)
    if sp.recorded:
        trial.resume(sp.recorded)
    launched: list[str] = []
    while True:
        h = trial.next()
        if h in ("done", "wait"):
            if h == "wait":  # nothing else can be issued until the running one reports: it reports its forecast
                for r in list(trial.running):
                    trial.record(r, trial.by_hash[r].forecast)
                continue
            return launched
        c = trial.by_hash[h]
        if not c.refused:
            launched.append(h)
            trial.record(h, None if c.known_to_fail else c.forecast)


#: The plan's third line: what kind of number the estimate is (its error on each run: summary.json estimate_error).
ESTIMATE_CAVEAT = ("An estimate, not a bound: it counts every load point (early stopping may skip some) at the twin's "
                   "modelled duration (a busy host stretches them); the report compares it with what the run records")


#: What the pre-run estimate prints, line by line, and how each number is defined. docs/schema.md shows this table.
COST_FIELDS: tuple[tuple[str, str], ...] = (
    ("configurations", "configurations of the sweep (grid.sweep.space.expand)"),
    ("refused before launch", "configurations SGLang's checks or the kernels' hardware requirements refuse "
     "(grid/search/knowledge.py); never launched"),
    ("known to fail here", "configurations a failure-table row (grid/twin/failures.py) says fail on this hardware "
     "and release; queued last (first with search.try_known_failures), launched by the twin-guided searches only while no "
     "other configuration has measured a score"),
    ("launches expected", "the launches the search policy makes when every measurement comes out as the twin "
     "forecasts and every known failure fails (grid.search.plan.expected_launches); on a resumed run `launches "
     "left (N recorded)`: the policy resumed with the N configurations already recorded, which are not counted"),
    ("GPU-hours for the expected launches", "sum over those launches of the twin's modelled startup "
     "(PerfModel.startup_phases_s, once per launch) plus the modelled seconds of every load point, each level "
     "counted load.repeats times (grid/search/predict.py; with objective max_capacity, the bisection's probes from "
     "the twin's bracket, not repeated), times hardware.total_gpus, / 3600; points early stopping may skip are "
     "counted; on a resumed run `GPU-hours for the launches left`. An estimate, not a bound: early stopping makes it "
     "high, a host slower than the twin's clock (and the gaps between points) low; the report's `Cost:` line and "
     "summary.json `estimate_error` give its error on the run"),
    ("every launchable configuration", "the same over every configuration not refused and not already recorded "
     "(shown when it differs)"),
    ("not counted", "expected launches the twin cannot model (its own argument checks refuse a configuration that "
     "grid's pre-launch checks let through), named instead of counted as 0; when it can model none of them the line "
     "reads `No cost estimate on HARDWARE: the twin cannot model any of the N expected launches (...)`"),
)


def describe_cost() -> str:
    """Markdown table of the pre-run cost estimate's numbers (:data:`COST_FIELDS`)."""
    out = ["### pre-run cost estimate", "", "Printed before a sweep launches anything (also with dry_run=true), e.g. "
           "`Plan (twin_guided search): 49 configurations, 24 refused before launch, 21 known to fail here (last), "
           "4 launches expected` and `Estimated cost on rtx_pro_6000_x8_vm (8 GPUs, the twin's startup and load "
           "model): 7.94 GPU-hours for the expected launches (every launchable configuration: 49.61)` "
           "(`+sweep=nsa_backends`, grid/search/plan.py `cost_lines`).", "", "| number | definition |", "|---|---|"]
    out += [f"| {k} | {d} |" for k, d in COST_FIELDS]
    return "\n".join(out) + "\n"


def indistinct_groups(forecasts: dict[str, float], error: float) -> list[list[str]]:
    """Groups of two or more configurations whose forecasts (config hash -> forecast score, positive) lie within
    ``error`` (relative, ``search.twin_error``) of the highest of the group: the twin cannot tell them apart. Greedy
    from the highest forecast down, in descending order; each configuration in one group at most. Pure."""
    ranked = sorted(((v, h) for h, v in forecasts.items() if v and v > 0), reverse=True)
    groups: list[list[str]] = []
    i = 0
    while i < len(ranked):
        top = ranked[i][0]
        j = i + 1
        while j < len(ranked) and (top - ranked[j][0]) / top <= error:
            j += 1
        if j - i >= 2:
            groups.append([h for _, h in ranked[i:j]])
        i = j
    return groups


def indistinct_notes(spec: RunSpec, sp: SearchPlan) -> list[str]:
    """Before the sweep: the configurations that may launch (not refused, not known to fail) whose forecasts the twin
    cannot separate (:func:`indistinct_groups` with ``search.twin_error``), one line per group, naming them."""
    from grid.report.select import OBJECTIVES

    launchable = {c.config_hash: c.forecast for c in sp.policy.candidates
                  if not c.refused and not c.known_to_fail and c.forecast}
    labels = {p.config_hash: p.label for p in sp.plans}
    err = spec.search.twin_error
    lines = []
    for group in indistinct_groups(launchable, err):
        values = sorted({f"{launchable[h]:.4g}" for h in group})
        unit = OBJECTIVES[spec.objective.kind].unit
        lines.append(f"The twin cannot separate {len(group)} configurations (forecasts {' / '.join(values)} {unit}, "
                     f"within its {err:.1%} error, search.twin_error): {', '.join(labels[h] for h in group)}. "
                     f"Measure them with load.repeats >= 3 (the report then decides by the measured spread), or keep "
                     "one of them.")
    return lines


def cost_lines(spec: RunSpec, sp: SearchPlan) -> list[str]:
    refused = [h for h, k in sp.known.items() if k.refused]
    failing = [h for h, k in sp.known.items() if k.known_to_fail]
    launches = expected_launches(sp)
    by_hash = {c.config_hash: c for c in sp.policy.candidates}
    gpu_s = sum(by_hash[h].gpu_s for h in launches)
    every = sum(c.gpu_s for c in sp.policy.candidates if not c.refused and c.config_hash not in sp.recorded)
    # recorded configurations of this sweep (the run directory may also hold others, e.g. of an earlier grid)
    recorded = [p.config_hash for p in sp.plans if p.config_hash in sp.recorded]
    which = f"launches left ({len(recorded)} recorded)" if recorded else "launches expected"
    blocked = no_forecast(spec, [p.load for p in sp.plans])
    # the search build() chose: exhaustive where the twin cannot replay the load, whatever else stops a forecast
    kind = "exhaustive" if any(unforecastable_load(p.load) for p in sp.plans) else spec.search.kind
    lines = [f"Plan ({kind} search): {len(sp.plans)} configurations, {len(refused)} refused before launch, "
             f"{len(failing)} known to fail here ({'first' if spec.search.try_known_failures else 'last'}), "
             f"{len(launches)} {which}"]
    if blocked is not None and blocked.cause == "hardware":
        lines.append(f"No cost estimate on {spec.hardware.name}: {blocked.reason}")
    elif blocked is not None and blocked.cause == "load":
        lines.append(f"Exhaustive search, no cost estimate: {blocked.reason}")
    elif blocked is None:
        # launches the twin cannot model (its argument checks refuse what grid's pre-launch checks let through)
        # have no modelled cost: say so rather than count them as 0 GPU-hours
        blind = [p.label for p in sp.plans if p.config_hash in launches and sp.forecasts.get(p.config_hash) is None]
        named = ", ".join(blind[:3]) + (", ..." if len(blind) > 3 else "")
        if blind and len(blind) == len(launches):
            lines.append(f"No cost estimate on {spec.hardware.name}: the twin cannot model any of the "
                         f"{len(launches)} {'launches left' if recorded else 'expected launches'} ({named})")
            return lines
        not_counted = f"; not counted: {len(blind)} the twin cannot model ({named})" if blind else ""
        lines.append(f"Estimated cost on {spec.hardware.name} ({spec.hardware.total_gpus} GPUs, the twin's startup and "
                     f"load model): {gpu_s / 3600:.2f} GPU-hours for the "
                     f"{'launches left' if recorded else 'expected launches'}"
                     + (f" (every launchable configuration: {every / 3600:.2f})"
                        if f"{every / 3600:.2f}" != f"{gpu_s / 3600:.2f}" else "")  # the same sum in another order
                     + not_counted)
        lines.append(ESTIMATE_CAVEAT)
    return lines
