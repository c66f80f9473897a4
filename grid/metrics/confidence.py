"""Spread and confidence intervals of repeated measurements (pure).

A load point measured ``load.repeats`` times gives one value of a metric per repeat. :func:`interval` summarizes
them: mean, min, max and the two-sided confidence interval of the mean under Student's t distribution
(``mean +- t(1 - alpha/2, n - 1) * s / sqrt(n)``, ``s`` the sample standard deviation). Two configurations whose
intervals overlap are tied within the measured spread (:func:`overlaps`).

The t quantile comes from ``scipy.stats.t.ppf`` when scipy is installed, else from ``T_975``: the 0.975 quantiles
for 1..30 degrees of freedom, as tabulated in NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2
("Critical values of the Student's t distribution"), to three decimals; above 30 degrees of freedom the 30 row
(2.042) is used, which is wider than the exact value (1.96 at infinity), so the interval errs on the safe side.
The table holds only the 95 % level; other levels need scipy (``ValueError`` without it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Student t 0.975 quantiles by degrees of freedom (NIST/SEMATECH e-Handbook, 1.3.6.7.2).
T_975: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
    21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
}

CONFIDENCE = 0.95


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student t critical value for ``df`` degrees of freedom at ``confidence`` (0.95: the 0.975
    quantile). scipy when installed, else ``T_975`` (0.95 only). Raises ``ValueError`` for ``df < 1``, a
    confidence outside (0, 1), or a level other than 0.95 without scipy."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    try:
        from scipy.stats import t as student_t
    except ImportError:
        if confidence != CONFIDENCE:
            raise ValueError(f"confidence {confidence}: only {CONFIDENCE} is tabulated without scipy "
                             "(pip install scipy)") from None
        return T_975[min(df, 30)]
    return float(student_t.ppf(0.5 + confidence / 2, df))


@dataclass(frozen=True)
class Interval:
    """Repeats of one metric: ``n`` values, their ``mean``, ``low``..``high`` range and the confidence interval
    ``ci_low``..``ci_high`` of the mean (None for a single value: the spread is not measured). Units: the metric's."""

    n: int
    mean: float
    low: float
    high: float
    ci_low: float | None
    ci_high: float | None

    @property
    def measured(self) -> bool:
        return self.ci_low is not None

    @property
    def half_width(self) -> float | None:
        return None if self.ci_high is None else self.ci_high - self.mean


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The :class:`Interval` of ``values`` (one per repeat). Raises ``ValueError`` when ``values`` is empty or holds
    a non-finite number."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no values")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"values must be finite, got {vals}")
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return Interval(1, mean, vals[0], vals[0], None, None)
    half = t_quantile(len(vals) - 1, confidence) * statistics.stdev(vals) / math.sqrt(len(vals))
    return Interval(len(vals), mean, min(vals), max(vals), mean - half, mean + half)


def overlaps(a: Interval, b: Interval) -> bool:
    """Whether the confidence intervals of ``a`` and ``b`` overlap (touching counts). Raises ``ValueError`` when
    either has no interval (a single repeat)."""
    if not (a.measured and b.measured):
        raise ValueError("both intervals need at least two repeats")
    return a.ci_low <= b.ci_high and b.ci_low <= a.ci_high  # type: ignore[operator]
