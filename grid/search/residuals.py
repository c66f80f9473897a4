"""What the measurements so far say about the twin's error on the configurations not yet launched (pure; numpy).

The twin's errors are systematic per mechanism (docs/twin.md: "b12x MoE kernels between 8 and 16 tokens (+20%)",
KV tokens +9.7% / +7.6% at memory fraction 0.85 / 0.92, CUDA graphs +9.7%), so two configurations that share a flag
value share part of their error. The log of a configuration's measured/forecast ratio is modelled as

    y = b + sum over swept flags f of u[f, value of f] + r + e

with ``b`` the twin's common error on this model and hardware (normal, sigma ``twin_error``), ``u`` one term per flag
value (normal, sigma ``s_flag``), ``r`` the configuration's own residual (sigma ``s_res``) and ``e`` run-to-run noise
(sigma ``spread``). A configuration's error has sigma ``scale x twin_error`` in all: ``s_flag^2 = share x (scale x
twin_error)^2 / k`` over the ``k`` swept flags and ``s_res^2 = (1 - share) x (scale x twin_error)^2``. ``share`` and
``scale`` are chosen from :data:`HYPER_GRID` by the marginal likelihood of the residuals measured so far (empirical
Bayes: a Bayesian ridge regression of the residuals on one-hot flag values). With ``share = 0`` the model is one
common bias plus an independent error per configuration; with no measurement it is the prior.

The posterior of a configuration not launched is normal in log space: the forecast's log plus ``mean``, sigma ``sd``
(:meth:`Posterior.latent`). :func:`expected_improvement` and :func:`p_any_beats` (the stopping rule of the
``twin_guided`` search, grid/search/policy.py) are computed from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

#: Scales of the documented error averaged over by :func:`fit`: from a quarter of it to 2.7 times, in steps of 15%.
#: The step is finer than the sampling error of a residual sigma estimated from tens of measurements (about
#: ``1 / sqrt(2 n)``: 11% at n = 40), because the stopping rule rests on the far tail of the residuals left: with
#: hundreds of configurations not launched, P(one beats the best by 3%) is read about 3.5 sigma out, where a sigma
#: 15% too small makes it several times too small. With the earlier grid (0.5, 1, 2 times a 7.7% error), independent
#: residuals scattered by about 3% were fitted at 3.85% or, more often, by handing variance to flag terms (share
#: 0.5-0.75, own sigma 1.9-2.7%), and the search stopped early (experiments/search_benchmark.py, docs/search.md).
SCALES: tuple[float, ...] = tuple(round(0.25 * 1.15 ** i, 4) for i in range(18))
#: (scale, share) pairs averaged over by :func:`fit`: :data:`SCALES` times the share of the variance per flag value,
#: from none (independent errors) to all, in quarters and 0.9.
HYPER_GRID: tuple[tuple[float, float], ...] = tuple(
    (scale, share) for scale in SCALES for share in (0.0, 0.25, 0.5, 0.75, 0.9, 1.0))
#: Draws of the flag terms by which :func:`p_any_beats` averages (fixed seed: the rule is deterministic).
DRAWS = 128
_EPS = 1e-9


def _phi(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def erfc(x) -> np.ndarray:
    """Complementary error function, element-wise, fractional error below 1.2e-7 everywhere (Chebyshev fit
    ``erfcc`` of Numerical Recipes in C, 2nd ed., section 6.2; numpy has no erf and scipy is not a dependency)."""
    x = np.asarray(x, dtype=float)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (
        0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    ans = t * np.exp(-z * z + poly)
    return np.where(x >= 0, ans, 2.0 - ans)


def cdf(x) -> np.ndarray:
    """Standard normal CDF, element-wise (float array)."""
    return 0.5 * erfc(-np.asarray(x, dtype=float) / math.sqrt(2.0))


def log_cdf(x) -> np.ndarray:
    """log of the standard normal CDF, element-wise, accurate where the CDF is close to 1 (as ``log1p`` of the upper
    tail)."""
    x = np.asarray(x, dtype=float)
    upper = 0.5 * erfc(x / math.sqrt(2.0))
    return np.where(x > 0, np.log1p(-np.minimum(upper, 0.5)), np.log(np.maximum(1.0 - upper, 1e-300)))


def one_hot(settings: list[dict]) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Design matrix of ``settings`` (one dict per configuration): an intercept column, then one column per value of
    every key whose value differs between configurations; shape (n, 1 + values). Returns it and the column names
    (``("", "")`` for the intercept, else ``(key, repr(value))``)."""
    keys = sorted({k for s in settings for k in s})
    cols: list[tuple[str, str]] = [("", "")]
    for k in keys:
        values = sorted({repr(s.get(k)) for s in settings})
        if len(values) > 1:
            cols += [(k, v) for v in values]
    index = {c: i for i, c in enumerate(cols)}
    x = np.zeros((len(settings), len(cols)))
    x[:, 0] = 1.0
    for i, s in enumerate(settings):
        for k in keys:
            j = index.get((k, repr(s.get(k))))
            if j is not None:
                x[i, j] = 1.0
    return x, cols


def flag_count(cols: list[tuple[str, str]]) -> int:
    """Swept flags in a design's columns (``k``)."""
    return len({k for k, _ in cols[1:]})


@dataclass(frozen=True)
class Posterior:
    """Posterior of the flag terms ``w`` (intercept first; ``mean`` shape (p,), ``cov`` (p, p)) and the residual
    sigma ``s_res`` of a configuration not launched, with the hyperparameters chosen (``scale``, ``share``)."""

    mean: np.ndarray
    cov: np.ndarray
    s_res: float
    scale: float
    share: float

    def latent(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) of log(true / forecast) for configurations ``x`` (n, p) not launched."""
        m = x @ self.mean
        v = np.einsum("ij,jk,ik->i", x, self.cov, x) + self.s_res ** 2
        return m, np.sqrt(np.maximum(v, 0.0))


def _prior_var(p: int, k: int, twin_error: float, scale: float, share: float) -> tuple[np.ndarray, float]:
    total = (scale * twin_error) ** 2
    d = np.full(p, share * total / max(k, 1))
    d[0] = twin_error ** 2  # the common bias
    return d, (1.0 - share) * total


def log_evidence(x: np.ndarray, y: np.ndarray, d: np.ndarray, s_res: float, spread: float) -> float:
    """Log marginal likelihood of residuals ``y`` (n,) under prior variances ``d`` (p,) of the flag terms, residual
    sigma ``s_res`` and noise sigma ``spread``: y ~ N(0, X diag(d) X' + s^2 I), s^2 = s_res^2 + spread^2. Computed in
    the p-dimensional weight space (matrix determinant lemma and Woodbury identity: A = diag(1/d) + X'X / s^2,
    log|K| = log|A| + sum log d + n log s^2, y'K^-1 y = y'y / s^2 - b'A^-1 b with b = X'y / s^2), so its cost does
    not grow with the cube of the measurements."""
    n = len(y)
    if n == 0:
        return 0.0
    noise = s_res ** 2 + spread ** 2 + _EPS
    d = np.maximum(d, _EPS)
    a = x.T @ x / noise + np.diag(1.0 / d)
    c = np.linalg.cholesky(a)
    b = np.linalg.solve(c, x.T @ y / noise)
    logdet = 2 * np.log(np.diag(c)).sum() + np.log(d).sum() + n * math.log(noise)
    quad = float(y @ y) / noise - float(b @ b)
    return float(-0.5 * quad - 0.5 * logdet - 0.5 * n * math.log(2 * math.pi))


def posterior(x: np.ndarray, y: np.ndarray, d: np.ndarray, s_res: float, spread: float, scale: float = 1.0,
              share: float = 0.0) -> Posterior:
    """Bayesian linear regression of ``y`` on ``x``: the flag terms' posterior (closed form)."""
    noise = s_res ** 2 + spread ** 2 + _EPS
    a = x.T @ x / noise + np.diag(1.0 / np.maximum(d, _EPS))
    cov = np.linalg.inv(a)
    cov = 0.5 * (cov + cov.T)
    return Posterior(cov @ x.T @ y / noise, cov, math.sqrt(s_res ** 2), scale, share)


@dataclass(frozen=True)
class Mixture:
    """The posteriors under the hyperparameters of :data:`HYPER_GRID`, each with its weight (normalised marginal
    likelihood of the residuals measured so far under a uniform prior over the grid; those lighter than
    ``MIN_WEIGHT`` times the heaviest dropped and the rest renormalised)."""

    parts: tuple[tuple[float, Posterior], ...]

    def latent(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) of log(true / forecast) for configurations ``x`` (n, p) not launched: the moments of the
        mixture (the weighted means, and the weighted second moments less the mean squared)."""
        mean, second = np.zeros(len(x)), np.zeros(len(x))
        for weight, post in self.parts:
            part_mean, part_sd = post.latent(x)
            mean += weight * part_mean
            second += weight * (part_sd * part_sd + part_mean * part_mean)
        return mean, np.sqrt(np.maximum(second - mean * mean, 0.0))

    def expected_improvement(self, x: np.ndarray, log_forecast: np.ndarray, best: float) -> np.ndarray:
        """Expected improvement (log space) of configurations ``x`` (n, p) over ``best``, averaged over the parts."""
        out = np.zeros(len(x))
        for weight, post in self.parts:
            mean, sd = post.latent(x)
            out += weight * expected_improvement(log_forecast + mean, sd, best)
        return out

    def p_any_beats(self, x: np.ndarray, log_forecast: np.ndarray, threshold: float, draws: int = DRAWS,
                    seed: int = 0) -> float:
        """:func:`p_any_beats` averaged over the parts."""
        return float(sum(w * p_any_beats(post, x, log_forecast, threshold, draws, seed) for w, post in self.parts))

    @property
    def share(self) -> float:
        """Posterior mean of ``share`` (the variance shared per flag value)."""
        return sum(w * p.share for w, p in self.parts)

    @property
    def scale(self) -> float:
        """Posterior mean of ``scale``."""
        return sum(w * p.scale for w, p in self.parts)


#: Parts of a :class:`Mixture` lighter than this fraction of the heaviest are dropped (they change no decision and
#: cost time). Relative, not absolute: with nothing measured the 108 parts of :data:`HYPER_GRID` weigh 1/108 each and
#: all stay.
MIN_WEIGHT = 0.01


def residual_points(measured: Mapping[str, float | None], forecasts: Mapping[str, float], row: Mapping[str, int],
                    higher_is_better: bool) -> list[tuple[int, float]]:
    """``(design row, residual)`` of every configuration measured with a positive score and a positive forecast,
    sorted: the residual is log(measured / forecast), of the reciprocals for a lower-is-better score (the search
    models that score on its reciprocal). ``measured``: hash -> score (None: failed or no SLO met); ``forecasts``:
    hash -> forecast (those not positive are left out); ``row``: hash -> row of the design matrix."""
    sign = 1.0 if higher_is_better else -1.0
    return sorted((row[h], sign * (math.log(v) - math.log(forecasts[h])))
                  for h, v in measured.items()
                  if v is not None and v > 0 and h in row and forecasts.get(h, 0.0) > 0)


def fit(x: np.ndarray, y: np.ndarray, k: int, twin_error: float, spread: float) -> Mixture:
    """The posteriors under every (scale, share) of :data:`HYPER_GRID`, weighted by the marginal likelihood of
    ``y`` (Bayesian model averaging over the grid; with nothing measured, equal weights). ``x`` (n, p) design rows of
    the measured configurations, ``y`` (n,) their log(measured / forecast), ``k`` swept flags."""
    fits = []
    for scale, share in HYPER_GRID:
        d, s_res2 = _prior_var(x.shape[1], k, twin_error, scale, share)
        fits.append((log_evidence(x, y, d, math.sqrt(s_res2), spread), scale, share, d, s_res2))
    top = max(f[0] for f in fits)
    weights = [math.exp(f[0] - top) for f in fits]
    total = sum(weights)
    kept = [(w / total, f) for w, f in zip(weights, fits) if w >= MIN_WEIGHT]  # the heaviest weighs 1
    norm = sum(w for w, _ in kept)
    return Mixture(tuple((w / norm, posterior(x, y, f[3], math.sqrt(f[4]), spread, f[1], f[2])) for w, f in kept))


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """Expected amount by which normal(``mu``, ``sd``) exceeds ``best`` (all in log space; sd 0: the plain excess)."""
    mu, sd = np.asarray(mu, float), np.asarray(sd, float)
    safe = np.where(sd > 0, sd, 1.0)
    z = (mu - best) / safe
    ei = safe * (z * cdf(z) + _phi(z))
    return np.where(sd > 0, ei, np.maximum(mu - best, 0.0))


def p_any_beats(post: Posterior, x: np.ndarray, log_forecast: np.ndarray, threshold: float, draws: int = DRAWS,
                seed: int = 0) -> float:
    """Probability that at least one of the configurations ``x`` (n, p) not launched, with log forecasts
    ``log_forecast`` (n,), is truly above ``threshold`` (log space): the flag terms averaged over ``draws`` draws
    from their posterior (seeded), each configuration's own residual (sigma ``s_res``) independent given them."""
    if len(x) == 0:
        return 0.0
    rng = np.random.default_rng(seed)
    w = rng.multivariate_normal(post.mean, post.cov, size=draws, method="eigh")  # (draws, p)
    m = log_forecast[:, None] + x @ w.T  # (n, draws)
    if post.s_res <= 0:
        return float(np.mean((m > threshold).any(axis=0)))
    p_none = np.exp(log_cdf((threshold - m) / post.s_res).sum(axis=0))
    return float(1.0 - p_none.mean())
