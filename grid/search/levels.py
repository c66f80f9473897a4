"""Which load level a trial measures next (pure): early stopping across load levels, and the capacity bisection.

**Early stopping** (``search.early_stop``, on by default). Before each load point of a configuration, two rules may
skip it; a skipped point is recorded ``not_run`` with its ``error_class`` (below), the reason in ``skip_reason`` and
the twin's forecast of its modelled duration in ``forecast_duration_s`` (summary.json counts the GPU-seconds saved):

* ``early_stop_slo``: a lower level of the same kind (concurrency or request rate) of this configuration already
  missed the SLOs (as the report judges: grid.report.select.meets_slos). A higher level only adds load: queueing delay, and with it every latency
  percentile, does not fall as the offered load rises, so the higher level cannot meet them and cannot count. Without
  SLOs the rule never fires.
* ``early_stop_twin_bound``: the twin's upper bound at this level is below the best score measured so far (of any
  configuration of the run, and of this one's earlier points when ``load.repeats`` is 1). Only levels after the
  trial's first measured point: a launched configuration always measures something. The twin's relative error
  ``(twin - measured) / measured`` is at least ``-e`` (``search.twin_bound_error``), so the measured value is at most
  ``forecast / (1 - e)``: a point whose bound is below the best cannot win, and the configuration's score is the
  best of its points. Only for objectives whose score is a higher-is-better metric the twin forecasts per level
  (output tok/s, goodput); trace replays are never skipped by it.

**Capacity** (objective ``max_capacity``): the highest open-loop request rate at which the SLOs hold. Each probe is
a load point at one rate (SLOs hold: status ``ok`` and every SLO's percentile within its target, as the report
judges); :func:`next_rate` chooses the next, bisecting the
bracket [highest rate that held, lowest rate above it that did not] until its width is within ``rel_tol`` of its
lower end. SGLang's ``python -m sglang.auto_benchmark`` (sgl-project/sglang PR #21736) binary-searches the QPS the
same way, relaunching the server for every QPS point; grid probes every rate on one launch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

EARLY_STOP_SLO = "early_stop_slo"
EARLY_STOP_TWIN = "early_stop_twin_bound"
EARLY_STOP_CLASSES = (EARLY_STOP_SLO, EARLY_STOP_TWIN)
#: Significant figures of a probe rate (so that rates print as set, e.g. 12.35 req/s); a rounded midpoint equal to a
#: rate already probed ends the bisection.
RATE_FIGURES = 4
#: Halvings below the expected bracket's lower end before the search gives up with no capacity: a rate 8x below what
#: the twin expects is near-idle load, where the latencies are the unloaded ones; SLOs missed there are missed at any
#: rate (and each probe at a low rate is long: ``load.prompts_for`` sends at least ``load.min_prompts`` requests).
MAX_HALVINGS = 3


@dataclass(frozen=True)
class LevelForecast:
    """The twin's forecast of one load level: ``value`` in the objective's unit (None: not forecast),
    ``duration_s``, the modelled seconds its load point takes, and ``slo_met``, whether the twin's point meets the
    objective's SLOs (None: no SLO set)."""

    value: float | None
    duration_s: float
    slo_met: bool | None = None


def twin_bound(forecast: float, error: float) -> float:
    """The highest value a measurement can have when the twin forecasts ``forecast`` and its relative error
    ``(twin - measured) / measured`` is at least ``-error`` (0 <= error < 1): ``forecast / (1 - error)``."""
    if not 0 <= error < 1:
        raise ValueError(f"search.twin_bound_error={error}: must be in [0, 1)")
    return forecast / (1 - error)


def _level(kind: str, value: float) -> str:
    return f"concurrency {value:g}" if kind == "concurrency" else f"{value:g} req/s"


def skip_reason(kind: str, value: float, missed: Sequence[tuple[str, float]], forecast: LevelForecast | None,
                best: float | None, error: float, unit: str = "") -> tuple[str, str] | None:
    """(error class, reason) when the load point at level (``kind``, ``value``) need not run, else None (pure).

    ``missed``: (kind, value) of this configuration's measured points that missed the SLOs; ``forecast``: the
    twin's forecast of this level (None: not forecast, or the twin-bound rule does not apply); ``best``: the best
    score measured so far (higher is better, in ``unit``); ``error``: ``search.twin_bound_error``.
    """
    if kind not in ("concurrency", "rate"):
        return None
    below = [v for k, v in missed if k == kind and v < value]
    if below:
        return EARLY_STOP_SLO, (f"the SLOs were already missed at {_level(kind, max(below))}; a higher level only adds "
                                "load")
    if forecast is not None and forecast.value is not None and best is not None:
        bound = twin_bound(forecast.value, error)
        if bound < best:
            return EARLY_STOP_TWIN, (f"the twin's upper bound here, {bound:.4g} {unit} (forecast {forecast.value:.4g} "
                                     f"/ (1 - {error:g})), is below the best measured {best:.4g} {unit}").replace(
                                         "  ", " ")
    return None


def _round(rate: float) -> float:
    if rate <= 0 or not math.isfinite(rate):
        return rate
    return round(rate, RATE_FIGURES - 1 - math.floor(math.log10(rate)))


def bracket(probes: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """(lo, hi) of ``probes`` (rate in req/s, SLOs held): ``lo`` the highest rate that held, ``hi`` the lowest rate
    above ``lo`` that did not (a failure below ``lo`` is noise and ignored); None where there is none."""
    held = [r for r, ok in probes if ok]
    lo = max(held) if held else None
    failed = [r for r, ok in probes if not ok and (lo is None or r > lo)]
    return lo, (min(failed) if failed else None)


def next_rate(probes: Sequence[tuple[float, bool]], lo_bound: float, hi_bound: float, rel_tol: float,
              max_probes: int) -> float | None:
    """The next request rate to probe (req/s), or None when the search is over (pure).

    ``probes``: (rate, SLOs held) so far, in order; ``lo_bound`` <= ``hi_bound``: the expected bracket (the twin's
    forecast widened by its error). The first probe is ``lo_bound``; while every probe held, the next is
    ``hi_bound`` and then twice the highest (the bracket has no upper end yet); while none held, half the lowest
    (down to ``lo_bound / 2 ** MAX_HALVINGS``: below that no capacity is found); then the midpoint of
    :func:`bracket`. Over when ``hi - lo <= rel_tol * lo``, after ``max_probes`` probes, or when the rounded midpoint
    (:data:`RATE_FIGURES`) was probed already.
    """
    if not probes:
        return _round(lo_bound)
    if len(probes) >= max_probes:
        return None
    lo, hi = bracket(probes)
    done = {r for r, _ in probes}
    if lo is None:
        nxt = _round(min(done) / 2)
        if nxt < lo_bound / 2 ** MAX_HALVINGS:
            return None
    elif hi is None:
        nxt = _round(hi_bound) if lo < _round(hi_bound) else _round(lo * 2)
    else:
        if hi - lo <= rel_tol * lo:
            return None
        nxt = _round((lo + hi) / 2)
    return None if nxt in done or nxt <= 0 else nxt


@dataclass
class Capacity:
    """The capacity bisection's settings: the expected bracket (req/s), ``objective.capacity_rel_tol`` and
    ``objective.capacity_max_probes``, and ``make_point(index, rate)`` building the load point of a probe."""

    lo_bound: float
    hi_bound: float
    rel_tol: float
    max_probes: int
    make_point: Callable[[int, float], Any]


@dataclass
class Levels:
    """A trial's load points in order, each with the reason to skip it (None: run it). Call :meth:`record` with each
    point run before asking for the next. ``points``: the fixed points (grid.plan.load_points), unused when
    ``capacity`` is set (the probes are chosen as they go); ``forecasts``: (kind, value) -> the twin's forecast
    (empty: no twin-bound rule); ``best``: the best score other configurations measured (None: none);
    ``own_best``: whether this configuration's own points raise ``best`` (``load.repeats`` is 1)."""

    points: Sequence[Any]
    early_stop: bool = True
    forecasts: dict[tuple[str, float], LevelForecast] = field(default_factory=dict)
    best: float | None = None
    error: float = 0.25
    unit: str = ""
    own_best: bool = True
    capacity: Capacity | None = None
    metric: str | None = None  # the load-point column record() reads the score from (None: own points never raise best)
    missed: list[tuple[str, float]] = field(default_factory=list)
    measured: int = 0          # points of this trial measured so far
    probes: list[tuple[float, bool]] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[int, Any, tuple[str, str] | None]]:
        if self.capacity is not None:
            c = self.capacity
            index = 0
            while True:
                rate = next_rate(self.probes, c.lo_bound, c.hi_bound, c.rel_tol, c.max_probes)
                if rate is None:
                    return
                yield index, c.make_point(index, rate), None
                index += 1
        for index, point in enumerate(self.points):
            skip = None
            if self.early_stop:  # only higher levels: the twin-bound rule waits for a measured point of this trial
                skip = skip_reason(point.kind, point.value, self.missed,
                                   self.forecasts.get((point.kind, float(point.value))) if self.measured else None,
                                   self.best, self.error, self.unit)
            yield index, point, skip

    def forecast_s(self, point: Any) -> float | None:
        f = self.forecasts.get((point.kind, float(point.value)))
        return f.duration_s if f is not None else None

    def record(self, point: Any, status: str, slo_met: bool | None, value: float | None) -> None:
        """What a measured point gave: its status, whether it met the SLOs (None: no SLO set) and the objective's
        metric."""
        self.measured += 1
        if self.capacity is not None:
            self.probes.append((float(point.value), status == "ok" and slo_met is True))
            return
        if slo_met is False:
            self.missed.append((point.kind, float(point.value)))
        elif self.own_best and status == "ok" and value is not None and (self.best is None or value > self.best):
            self.best = value
