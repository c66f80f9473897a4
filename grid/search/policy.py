"""The search policies (pure): given the configurations in launch order with what is known of them before launch,
say which to run next, and stop.

* ``exhaustive``: every configuration, in order (refused ones first: recorded without a launch; known failures last,
  or first with ``try_known_failures``); budgets (``max_launches``, ``max_gpu_hours``) still stop it.
* ``twin_guided`` (:class:`TwinGuided`): configurations the twin expects to run, the highest expected improvement
  per GPU-second first, under a model of the twin's error per flag value learned from the measured/forecast residuals
  (grid/search/residuals.py); stops when the probability that one left beats the best measured score by more than
  ``tolerance`` is below ``risk`` (docs/search.md). Configurations the twin forecasts to meet no SLO are measured
  too once one of them has met the SLOs in measurement.
* ``twin_ranked`` (:class:`TwinRanked`): configurations the twin expects to run, best forecast first; after each
  measurement, the next candidate runs only if it could still beat the best measured score by more than the spread:
  its forecast, scaled by the measured/forecast ratio of the configurations measured so far (the twin's bias on this
  model and hardware), widened by ``z`` times ``twin_error`` (``z`` grows with the number of candidates,
  :class:`TwinRanked`), must exceed ``best x (1 + spread)`` (below ``best x (1 - spread)`` for a lower-is-better
  objective). Known failures run only when nothing else is left and no budget stops it, or first with
  ``try_known_failures``.

Refused configurations are issued first by all (they cost nothing: ``Engine.refuse`` records them) and are never
counted against a budget. ``next()`` returns a config hash, :data:`WAIT` (a decision needs a result still running)
or :data:`DONE`; ``skipped`` maps every configuration left out to the reason.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from statistics import NormalDist

from grid.metrics.hostnoise import HOST_NOISE_MAX_PCT
from grid.search import Search, register

WAIT = "wait"
DONE = "done"
#: Configurations in a row measured only as host noise after which a search stops (Policy.host_busy). Two: one such
#: configuration can be a burst of other work on the machine; the busy host of experiments/busy_host.py flagged every
#: point of every configuration (5 launches in 22 min, nothing counted).
HOST_BUSY_STREAK = 2


@dataclass(frozen=True)
class Candidate:
    """One configuration as the search sees it before launch. ``forecast``: the twin's score (None: not modelled, or
    no point meets the SLOs); ``gpu_s``: modelled GPU-seconds of its launch (startup + load, x GPUs)."""

    config_hash: str
    refused: bool = False
    known_to_fail: bool = False
    forecast: float | None = None
    gpu_s: float = 0.0
    settings: dict | None = field(default=None, compare=False)  # the swept settings (model-based searches)
    #: measured whatever the twin forecasts, first among the launchable: the aggregated baseline of a sweep with
    #: disaggregated deployments (grid/search/plan.py ``baseline``)
    baseline: bool = False


@dataclass
class Budget:
    max_launches: int | None = None
    max_gpu_s: float | None = None
    launches: int = 0
    gpu_s: float = 0.0

    def stops(self, c: Candidate) -> str | None:
        """Why launching ``c`` would break the budget, or None."""
        if self.max_launches is not None and self.launches + 1 > self.max_launches:
            return f"search.max_launches={self.max_launches} reached"
        if self.max_gpu_s is not None and self.gpu_s + c.gpu_s > self.max_gpu_s:
            return (f"the GPU budget of {self.max_gpu_s / 3600:g} GPU-hours (search.max_gpu_hours / "
                    f"search.max_gpu_fraction) would be exceeded "
                    f"({(self.gpu_s + c.gpu_s) / 3600:.2f} GPU-hours with it)")
        return None

    def spend(self, c: Candidate) -> None:
        self.launches += 1
        self.gpu_s += c.gpu_s


@dataclass
class Policy:
    """The shared mechanics: a queue of candidates, the budget, what was measured and what was left out."""

    candidates: list[Candidate]
    budget: Budget
    higher_is_better: bool = True
    try_known_failures: bool = False
    twin_error: float = 0.0
    spread: float = 0.0
    measured: dict[str, float | None] = field(default_factory=dict)
    running: set = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)
    issued: list[str] = field(default_factory=list)
    seed: int = 0
    tolerance: float = 0.03
    risk: float = 0.1
    noisy: list[str] = field(default_factory=list)  # configurations whose every measured point was host noise
    #: The forecast each configuration had when its measurement was recorded: the twin calibrated on what was
    #: measured before it, not on its own points (out of sample; the sweep recalibrates after recording).
    forecast_before: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queue = self.order(self.candidates)
        self.by_hash = {c.config_hash: c for c in self.candidates}

    def order(self, cands: list[Candidate]) -> list[Candidate]:
        def rank(c: Candidate) -> tuple[int, bool]:
            if c.refused:
                return 0, False
            if c.known_to_fail:
                return 1 if self.try_known_failures else 3, False
            return 2, not c.baseline
        return sorted(cands, key=rank)

    def reforecast(self, new: dict[str, tuple[float | None, float]]) -> None:
        """New forecasts ``config_hash -> (score, gpu_s)`` (the twin calibrated on what was measured,
        grid/search/calibration.py): every candidate named takes them, and the queue is ordered again."""
        import dataclasses

        def updated(c: Candidate) -> Candidate:
            if c.config_hash not in new:
                return c
            value, gpu_s = new[c.config_hash]
            return dataclasses.replace(c, forecast=value, gpu_s=gpu_s)
        self.candidates = [updated(c) for c in self.candidates]
        self.by_hash = {c.config_hash: c for c in self.candidates}
        self.queue = self.order([updated(c) for c in self.queue])

    def residual_forecasts(self) -> dict[str, float]:
        """The forecast each configuration's residual log(measured / forecast) is taken against: the one it had when
        its measurement was recorded (:attr:`forecast_before`, out of sample), else its current one (not measured
        yet, or recorded by an earlier run, which the calibration at the start already fitted)."""
        return {c.config_hash: self.forecast_before.get(c.config_hash, c.forecast) for c in self.candidates
                if c.forecast is not None}

    def resume(self, recorded: dict[str, float | None]) -> None:
        """Configurations recorded by an earlier run: taken out of the queue, their scores known."""
        self.queue = [c for c in self.queue if c.config_hash not in recorded]
        self.measured.update(recorded)

    def record(self, config_hash: str, value: float | None, host_noise: bool = False) -> None:
        """The measured score of a configuration (None: it failed or no point met the SLOs). ``host_noise``: every
        point it measured was host noise (grid/metrics/hostnoise.py), so nothing of it counts."""
        self.running.discard(config_hash)
        self.measured[config_hash] = value
        c = self.by_hash.get(config_hash)
        if c is not None and c.forecast is not None:
            self.forecast_before.setdefault(config_hash, c.forecast)
        if host_noise:
            self.noisy.append(config_hash)
        elif value is not None:
            self.noisy.clear()  # a configuration measured on a quiet enough host ends the streak

    def host_busy(self) -> str | None:
        """Why the search should stop for the host, not the configurations (:data:`HOST_BUSY_STREAK` configurations in
        a row measured only as host noise: every further launch would cost a server and count nothing), or None."""
        if len(self.noisy) < HOST_BUSY_STREAK:
            return None
        return (f"the host is too busy to measure: every load point of the last {len(self.noisy)} configurations was "
                "host noise (the load generator or the twin lost more than objective.host_noise_max_pct, "
                f"default {HOST_NOISE_MAX_PCT:g}%, of each point's time); run again on a quieter machine, and the "
                "configurations left will be measured then")

    def best(self) -> float | None:
        values = [v for v in self.measured.values() if v is not None]
        if not values:
            return None
        return max(values) if self.higher_is_better else min(values)

    def hopeless(self, c: Candidate) -> str | None:
        """Why ``c`` need not run (None: it should). Exhaustive: never."""
        return None

    def _skip_rest(self, reason: str) -> str:
        for c in self.queue:
            self.skipped.setdefault(c.config_hash, reason)
        self.queue = []
        return DONE

    def next(self) -> str:
        busy = self.host_busy()
        if busy is not None and self.queue:
            return self._skip_rest(busy)
        while self.queue:
            c = self.queue[0]
            if c.refused:
                self.queue.pop(0)
                self.issued.append(c.config_hash)
                return c.config_hash
            if self.running and self.needs_results(c):
                return WAIT
            why = self.hopeless(c)
            if why is not None:
                self.queue.pop(0)
                self.skipped[c.config_hash] = why
                if self.stop_after_hopeless(c):
                    return self._skip_rest(why)
                continue
            over = self.budget.stops(c)
            if over is not None:
                return self._skip_rest(over)
            self.queue.pop(0)
            self.budget.spend(c)
            self.running.add(c.config_hash)
            self.issued.append(c.config_hash)
            return c.config_hash
        return WAIT if self.running else DONE

    def needs_results(self, c: Candidate) -> bool:
        return False

    def stop_after_hopeless(self, c: Candidate) -> bool:
        return False


class Exhaustive(Policy):
    """Every configuration, in launch order, until a budget stops it."""


class ForecastOrdered(Policy):
    """Refused first (they cost nothing), then known failures when ``try_known_failures``, then the rest by forecast
    (best first; those without a forecast after), known failures last otherwise."""

    def order(self, cands: list[Candidate]) -> list[Candidate]:
        sign = -1.0 if self.higher_is_better else 1.0

        def key(c: Candidate):
            group = 0 if c.refused else (1 if self.try_known_failures else 3) if c.known_to_fail else 2
            return (group, not c.baseline, c.forecast is None, sign * c.forecast if c.forecast is not None else 0.0)
        return sorted(cands, key=key)

    def needs_results(self, c: Candidate) -> bool:
        return not (c.known_to_fail and self.try_known_failures)  # a decision on c waits for what is running


class TwinRanked(ForecastOrdered):
    """Best forecast first; stop when the next candidate cannot beat the best measured score by the spread.

    The twin's error on one configuration is taken as normal with sigma ``twin_error``; a candidate is widened by
    ``z`` sigmas, with ``z`` the one-sided normal quantile at ``1 - 1/n`` for ``n`` launchable candidates (neither
    refused nor known to fail): with that many chances, one of them is expected to be off by about that much, so a
    candidate skipped is unlikely to have beaten the best (about 0.67 sigma for 4 candidates, 2.95 for 640).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        n = sum(1 for c in self.candidates if not c.refused and not c.known_to_fail)
        self.z = NormalDist().inv_cdf(1 - 1 / max(2, n))

    def bias(self) -> float:
        """Median measured/forecast ratio over the configurations measured with both (1.0 before any)."""
        before = self.residual_forecasts()
        ratios = [v / forecast for h, v in self.measured.items() if v is not None and (forecast := before.get(h))]
        return statistics.median(ratios) if ratios else 1.0

    def optimistic(self, c: Candidate) -> float | None:
        """``c``'s forecast corrected by the bias and widened by the twin's error, toward better."""
        if c.forecast is None:
            return None
        widen = (1 + self.z * self.twin_error) if self.higher_is_better else (1 - self.z * self.twin_error)
        return c.forecast * self.bias() * widen

    def hopeless(self, c: Candidate) -> str | None:
        if c.known_to_fail and self.try_known_failures:
            return None
        best = self.best()
        if best is None:
            return None
        if c.known_to_fail:
            return "known to fail here, and a configuration already measured a score"
        bound = self.optimistic(c)
        if bound is None:
            return "the twin forecasts no load point meeting the SLOs"
        target = best * (1 + self.spread) if self.higher_is_better else best * (1 - self.spread)
        if (bound <= target) if self.higher_is_better else (bound >= target):
            return (f"cannot beat the best measured {best:.4g} by more than the spread "
                    f"{self.spread:.0%}: twin forecast {c.forecast:.4g} x bias {self.bias():.3f} "
                    f"x (1 {'+' if self.higher_is_better else '-'} {self.z:.2f} x {self.twin_error:g}) = {bound:.4g}")
        return None

    def stop_after_hopeless(self, c: Candidate) -> bool:
        # candidates are in forecast order: once one cannot win, none after it can (known failures included)
        return True


#: Configurations with a measured score per term of the residual model before :class:`TwinGuided` may stop.
MIN_SCORED_PER_TERM = 2


class TwinGuided(ForecastOrdered):
    """Ranked on the twin, corrected by what is measured, stopped when nothing left is likely to win.

    Each measurement's log(measured / forecast) is a residual of the twin; a Bayesian ridge regression of the
    residuals on one-hot flag values (grid/search/residuals.py, hyperparameters by marginal likelihood) predicts the
    twin's error on every configuration not launched, shared through the flag values it has in common with the
    measured ones, with the uncertainty left (normal in log space).

    * **Next**: the configuration with the highest expected improvement over the best measured score per modelled
      GPU-second of its launch (``gpu_s``): the most promising first, the cheaper first at equal promise.
    * **Stop** when the probability that any configuration not launched beats the best measured score by more than
      ``tolerance`` is below ``risk`` (:func:`grid.search.residuals.p_any_beats`), once at least twice as many
      configurations have measured a score as the model has terms (one per swept flag value, plus the common one,
      :data:`MIN_SCORED_PER_TERM`): the terms need one measurement each to be identified, and the split of the
      twin's error between flag values and each configuration's own residual needs as many again (residual degrees
      of freedom); with fewer, chance agreement between a few residuals reads as a shared flag effect and the rule
      stops too early (experiments/search_benchmark.py, flags mode with own residuals of 3.7% and 5.2%: 3 of 20
      seeds more than 3% from the optimum with one measurement per term, 0-2 of 20 with two; docs/search.md).

    Configurations without a forecast (the twin sees no load point meeting the SLOs) and known failures run only
    before anything measured a score (or, for known failures, first with ``try_known_failures``), with one exception:
    once a configuration the twin gave no forecast has measured a score, the twin's "no load point meets the SLOs"
    is shown wrong on this model, hardware and load (its SLO forecast is itself uncertain), so the others without a
    forecast are measured too, in launch order after those it ranks (it cannot rank them; :meth:`doubted`). The
    aggregated baseline of a sweep with disaggregated deployments (``Candidate.baseline``) is measured first,
    whatever its forecast. A lower-is-better objective is searched on the reciprocal of its score.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        from grid.search.residuals import flag_count, one_hot

        self.x, self.cols = one_hot([c.settings or {} for c in self.candidates])
        self.k = flag_count(self.cols)
        # terms the launchable configurations can inform (values found only on refused or known-to-fail ones aside)
        launchable = [i for i, c in enumerate(self.candidates) if not c.refused and not c.known_to_fail]
        self.terms = int((self.x[launchable].sum(axis=0) > 0).sum()) if launchable else 0
        self.row = {c.config_hash: i for i, c in enumerate(self.candidates)}
        self.last_p: float | None = None
        self._fitted: tuple | None = None

    def _log(self, v: float) -> float:
        return math.log(v) if self.higher_is_better else -math.log(v)

    def model(self):
        """The residual model fitted on every configuration measured with a score and a forecast made before it was
        measured (:meth:`residual_forecasts`; cached)."""
        from grid.search.residuals import fit, residual_points

        pts = residual_points(self.measured, self.residual_forecasts(), self.row, self.higher_is_better)
        key = tuple(pts)
        if self._fitted is None or self._fitted[0] != key:
            import numpy as np

            rows = [i for i, _ in pts]
            y = np.array([r for _, r in pts])
            self._fitted = (key, fit(self.x[rows], y, self.k, self.twin_error, self.spread))
        return self._fitted[1]

    def doubted(self) -> str | None:
        """The first configuration measured with a score although the twin forecast no load point meeting the SLOs
        (its forecast None or not positive), or None: then the configurations without a forecast are not skipped."""
        return next((h for h, v in self.measured.items()
                     if v is not None and h in self.by_hash and not (self.by_hash[h].forecast or 0) > 0), None)

    def _unranked(self) -> list[Candidate]:  # launchable, without a positive forecast, in queue order
        return [c for c in self.queue if not c.refused and not c.known_to_fail and not (c.forecast and c.forecast > 0)]

    def _open(self) -> list[Candidate]:  # each with a positive forecast (:func:`_forecast`)
        return [c for c in self.queue if not c.refused and not c.known_to_fail and c.forecast and c.forecast > 0]

    def p_left(self, best: float, open_: list[Candidate]) -> float:
        """Probability that a configuration of ``open_`` beats ``best`` by more than ``tolerance``."""
        import numpy as np

        rows = [self.row[c.config_hash] for c in open_]
        logf = np.array([self._log(_forecast(c)) for c in open_])
        return self.model().p_any_beats(self.x[rows], logf, self._log(best) + math.log1p(self.tolerance),
                                        seed=self.seed)

    def pick(self, best: float | None, open_: list[Candidate]) -> Candidate:
        """The configuration of ``open_`` with the highest expected improvement per GPU-second (ties: queue order)."""
        import numpy as np

        rows = [self.row[c.config_hash] for c in open_]
        logf = np.array([self._log(_forecast(c)) for c in open_])
        ref = self._log(best) if best is not None else float(logf.max())
        gain = self.model().expected_improvement(self.x[rows], logf, ref) / np.array([max(c.gpu_s, 1.0) for c in open_])
        return open_[int(np.argmax(gain))]

    def next(self) -> str:
        while self.queue and self.queue[0].refused:
            c = self.queue.pop(0)
            self.issued.append(c.config_hash)
            return c.config_hash
        if not self.queue:
            return WAIT if self.running else DONE
        busy = self.host_busy()
        if busy is not None:
            return self._skip_rest(busy)
        best = self.best()
        first = [c for c in self.queue if c.known_to_fail and self.try_known_failures]
        if first:
            c = first[0]
        elif (base := next((c for c in self.queue if c.baseline), None)) is not None:
            if self.running:
                return WAIT
            c = base
        else:
            if self.running:
                return WAIT
            open_ = self._open()
            unranked: list[Candidate] = []
            if best is not None:
                doubted = self.doubted()
                for c in self.queue:
                    if c.known_to_fail:
                        self.skipped[c.config_hash] = "known to fail here, and a configuration already measured a score"
                    elif (not c.forecast or c.forecast <= 0) and doubted is None:
                        self.skipped[c.config_hash] = "the twin forecasts no load point meeting the SLOs"
                self.queue = [c for c in self.queue if c.config_hash not in self.skipped]
                unranked = self._unranked()
                if not open_ and not unranked:
                    return DONE
                scored = sum(1 for h, v in self.measured.items() if v is not None and h in self.row)
                enough = scored >= MIN_SCORED_PER_TERM * self.terms
                self.last_p = self.p_left(best, open_) if open_ and enough else None
                if self.last_p is not None and self.last_p < self.risk:
                    m = self.model()
                    why = (f"P(one of the {len(open_)} left beats the best measured {best:.4g} by more than "
                           f"{self.tolerance:.0%}) = {self.last_p:.3f} < risk {self.risk:g} (twin error "
                           f"{m.scale * self.twin_error:.1%}, {m.share:.0%} of its variance shared per flag value)")
                    if not unranked:
                        return self._skip_rest(why)
                    for c in open_:  # the unranked ones stay: the twin's residual model says nothing of them
                        self.skipped[c.config_hash] = why
                    self.queue = [c for c in self.queue if c.config_hash not in self.skipped]
                    open_ = []
            c = self.pick(best, open_) if open_ else (unranked or self.queue)[0]
        over = self.budget.stops(c)
        if over is not None:
            return self._skip_rest(over)
        self.queue.remove(c)
        self.budget.spend(c)
        self.running.add(c.config_hash)
        self.issued.append(c.config_hash)
        return c.config_hash


register(Search("exhaustive", "every configuration", Exhaustive))
register(Search("twin_ranked", "ranked on the twin, measured in forecast order until the next cannot win",
                TwinRanked))
register(Search("twin_guided", "ranked on the twin, corrected by what is measured, stopped when nothing left is "
                "likely to win", TwinGuided))


def _forecast(c: Candidate) -> float:
    """The forecast of an open candidate (``TwinGuided._open`` keeps only those with one); ``ValueError`` without."""
    if c.forecast is None:
        raise ValueError(f"{c.config_hash}: no forecast")
    return c.forecast
