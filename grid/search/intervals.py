"""Each configuration's forecast with its interval, as the sweep ends.

The forecast is the twin's score of the configuration as the sweep last calibrated it (grid/search/calibration.py;
``Candidate.forecast`` after ``Policy.reforecast``). Its interval is what the measurements say of the twin's error
there: the residual model of the ``twin_guided`` search (grid/search/residuals.py: log(measured / forecast), each
forecast the one made before that configuration was measured, regressed on the swept flag values, sigma
``search.twin_error`` before anything was measured, hyperparameters by marginal likelihood), whichever search ran. The model's mixture over its hyperparameters is summarised by its mean and
standard deviation in log space, and the interval is ``z`` of those either side (95% by default). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Z95 = 1.959964  # the standard normal's 97.5th percentile: a two-sided 95% interval


@dataclass(frozen=True)
class Interval:
    """One configuration's forecast in the objective's unit: the calibrated twin's ``forecast``, the ``expected``
    score once the twin's error learned from the measured configurations is applied, and its ``low`` .. ``high``
    interval; ``measured``: its measured score, where it ran."""

    forecast: float
    expected: float
    low: float
    high: float
    measured: float | None = None

    def covers(self) -> bool | None:
        """Whether the measured score lies in the interval (None: not measured)."""
        return None if self.measured is None else self.low <= self.measured <= self.high


def intervals(candidates: list[Any], measured: Mapping[str, float | None], higher_is_better: bool,
              twin_error: float, spread: float, z: float = Z95,
              before: Mapping[str, float] | None = None) -> dict[str, Interval]:
    """``config_hash`` -> :class:`Interval` of every candidate (``grid.search.policy.Candidate``) that is not refused,
    has a positive forecast and is not known to fail (unless it was measured with a score). ``measured``: hash -> measured score (None: failed or no SLO met). The residual model
    is fitted on the candidates measured with a positive score; a lower-is-better score is modelled on its
    reciprocal, as the search does. ``before``: hash -> the forecast a configuration had when it was measured
    (``Policy.forecast_before``): its residual is taken against that one, out of sample, so the twin's error is
    learned from forecasts of configurations the calibration had not seen, as the unmeasured ones are; a measured
    configuration without one is taken against its current forecast. The interval is for a measurement (the repeat spread ``spread`` included); a
    measured configuration's comes from the model fitted with its own residual among the others (in sample)."""
    from grid.search.residuals import fit, flag_count, one_hot, residual_points

    sign = 1.0 if higher_is_better else -1.0
    x, cols = one_hot([c.settings or {} for c in candidates])
    rows = {c.config_hash: i for i, c in enumerate(candidates)}
    forecasts = {c.config_hash: c.forecast for c in candidates
                 if not c.refused and c.forecast is not None and c.forecast > 0
                 and (not c.known_to_fail or measured.get(c.config_hash) is not None)}
    against = {**forecasts, **{h: f for h, f in (before or {}).items() if h in forecasts}}
    pts = residual_points(measured, against, rows, higher_is_better)
    model = fit(x[[i for i, _ in pts]], np.array([y for _, y in pts]), flag_count(cols), twin_error, spread)
    hashes = list(forecasts)
    if not hashes:
        return {}
    mean, sd = model.latent(x[[rows[h] for h in hashes]])
    sd = np.sqrt(sd * sd + spread ** 2)
    out = {}
    for h, mu, sigma in zip(hashes, mean.tolist(), sd.tolist()):
        f = forecasts[h]
        ends = (f * math.exp(sign * (mu - z * sigma)), f * math.exp(sign * (mu + z * sigma)))
        out[h] = Interval(f, f * math.exp(sign * mu), min(ends), max(ends), measured.get(h))
    return out
