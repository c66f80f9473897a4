"""The twin learns the user's hardware from measurements (pure; numpy): a few multiplicative coefficients of its
performance model, fitted to measured load points, with their uncertainty and the measurements they came from.

The twin's spec-sheet model is right about mechanisms (batching, chunked prefill, the KV pool, CUDA graphs) and
wrong by a steady factor about a given machine (docs/twin.md: held-out TTFT 44.5%, TPOT 7.9%, output tok/s 7.7%).
Five coefficients absorb that factor, each a multiplier on one modelled time:

* ``decode``: every decode iteration (``PerfModel.decode_step_s``): the achieved memory bandwidth and per-step
  host overhead of this machine; TPOT and output tok/s follow it.
* ``prefill``: every prefill (extend) batch (``PerfModel.prefill_step_s``): the achieved compute efficiency of the
  prefill GEMMs and attention; TTFT under load follows it.
* ``frontend``: each request's front-end latency (``PerfModel.frontend_latency_s``: HTTP, tokenization, the first
  token's delivery); the first-request cost that TTFT pays at any load.
* ``kv_fixed`` and ``kv_link``: the two terms of each KV transfer between a prefill and a decode server of a
  deployment (grid/topology/kv.py ``transfer_s``): the transfer engine's fixed cost per request, and the time the
  bytes take at the link's achieved rate (the rate divided by ``kv_link``). Fitted from SGLang's own
  ``sglang:kv_transfer_latency_ms`` (a load point's ``srv_kv_transfer_ms_mean``): points whose transfers carry more
  bytes or share the link with more transfers (longer prompts, more concurrency) move the link term and not the fixed
  one, so a sweep over load levels tells the two apart; each is left at its prior (1.0, without a replay of its
  own) while no measured point holds that metric.

The fit is maximum a posteriori in log space: each measured metric ``m`` of an observation gives the residual
``(log measured - log twin(theta)) / OBSERVATION_SD[m]``, each coefficient the prior residual ``theta / PRIOR_SD``; the
twin's value comes from replaying the observation in virtual time with the coefficients applied, so queueing,
batching and chunking stay the model's (Levenberg-Marquardt on forward differences, :func:`fit`). A coefficient no
measured metric depends on stays at its prior (1.0). The uncertainty is the Laplace approximation at the optimum,
widened by the residuals' excess over :data:`OBSERVATION_SD`.

A measurement never hides in the fit: callers pass only measured points (not failed, not
infrastructure, not host noise: grid/metrics/hostnoise.py); after the fit, a metric whose residual is an outlier
(:func:`outliers`) is named and left out, and the fit is repeated without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The coefficients, in the order of the parameter vector.
COEFFICIENTS: tuple[str, ...] = ("decode", "prefill", "frontend", "kv_fixed", "kv_link")
#: Prior standard deviation of each coefficient's log. Weak on purpose: a hardware file for a machine the twin was
#: never calibrated on (a host CPU's spec-sheet figures) may be off by a factor of several, and one measured point
#: must be able to move a coefficient by what it shows. ``decode`` is held tighter because the twin's decode model is
#: its best (held-out TPOT 7.9%, output tok/s 7.7%, docs/twin.md) and TPOT is measured on every point; ``prefill``
#: (TTFT 44.5% held out) and ``frontend`` (one fitted constant, 12 ms) get a factor of e and e^1.5 per sd.
#: ``kv_fixed`` and ``kv_link`` get a factor of e: their constants (20 ms per transfer, 80% of the link's rate) come
#: from other transfer engines' measurements (grid/topology/kv.py ``TransferCost``).
PRIOR_SD: dict[str, float] = {"decode": 0.5, "prefill": 1.0, "frontend": 1.5, "kv_fixed": 1.0, "kv_link": 1.0}
#: A coefficient that moves only the twin's value of one metric: fitted only when some observation measured it.
ONLY_MOVES: dict[str, str] = {"kv_fixed": "kv_transfer_ms", "kv_link": "kv_transfer_ms"}
#: Standard deviation of one measured metric's log about the calibrated twin, per metric: the run-to-run spread of a
#: load point plus what the three coefficients cannot express. It sets how strongly a measurement outweighs the prior
#: and the metrics against each other; the reported uncertainty is widened when residuals exceed it. TPOT and output
#: tok/s: 5%, the repeat spread grid/report/compare.py ``DEFAULT_THRESHOLD_PERCENT`` allows them (measured: under
#: 1% in steady state, 4.5-9.1% for loops started together). TTFT: 15%: its measured spread is larger (7.1% p50 in
#: steady state, 67% for loops started together, same source), and it holds what no coefficient models (the load
#: generator's own delivery time, which on the twin's fast clock is a large share of a short TTFT; README "The
#: twin's clock"), so a TTFT residual must not pull the decode and prefill coefficients off what TPOT and throughput
#: show.
#: The mean KV transfer of a load point: 10%, between the two (a mean over hundreds of transfers, but its share of
#: the link moves with how many overlap).
OBSERVATION_SD: dict[str, float] = {"ttft_ms": 0.15, "tpot_ms": 0.05, "output_tok_per_s": 0.05,
                                    "kv_transfer_ms": 0.10}
#: The least log standard deviation a saved calibration keeps as the prior of a later sweep: one TPOT measurement's.
SAVED_SD_FLOOR = OBSERVATION_SD["tpot_ms"]
#: Metrics a calibration fits, and which coefficients move each (documentation; the fit finds it by replay).
METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "output_tok_per_s", "kv_transfer_ms")
#: A metric is an outlier when its log residual after the fit exceeds both ``OUTLIER_Z`` robust standard deviations
#: of all residuals (1.4826 x median absolute residual) and ``log(OUTLIER_MIN_RATIO)``, with at least
#: ``OUTLIER_MIN_RESIDUALS`` residuals to judge from. The floor keeps a calibration that fits within a few percent
#: from naming noise; 3 robust sd is the usual cut for normal residuals (0.3% of them beyond it).
OUTLIER_Z = 3.0
OUTLIER_MIN_RATIO = 1.25
OUTLIER_MIN_RESIDUALS = 5
#: Levenberg-Marquardt: forward-difference step in log space, iteration limit, and the step size that ends it.
FD_STEP = 0.02
#: A stacked residual (log errors over their sd, and prior deviations in prior sds) below which the fit is taken as
#: exact and not iterated: 1e-4, a relative error of 5e-6 in TPOT or tok/s and 1.5e-5 in TTFT (OBSERVATION_SD), far
#: below any error worth fitting and above the live virtual twin's own distance from the replay (measured on the main
#: job: output tok/s up to 5e-7 relative, 1e-5 stacked; TTFT and TPOT 2e-9, tests/twin/test_replay.py). Iterating
#: there moved the coefficients by 1e-7, which made every forecast a new simulation (grid/search/predict.py memoizes
#: by coefficients): 9 s of the driver's CPU after each trial of the main job.
EXACT_FIT = 1e-4
MAX_ITERATIONS = 12
TOLERANCE = 0.01


@dataclass(frozen=True)
class Coefficients:
    """Multipliers on the twin's modelled times (1.0: the spec-sheet model as is)."""

    decode: float = 1.0
    prefill: float = 1.0
    frontend: float = 1.0
    kv_fixed: float = 1.0
    kv_link: float = 1.0

    @classmethod
    def from_log(cls, theta: np.ndarray | list[float]) -> Coefficients:
        return cls(**{k: float(math.exp(v)) for k, v in zip(COEFFICIENTS, theta)})

    def log(self) -> np.ndarray:
        return np.array([math.log(getattr(self, k)) for k in COEFFICIENTS])

    @property
    def identity(self) -> bool:
        return all(getattr(self, k) == 1.0 for k in COEFFICIENTS)


class CalibratedPerf:
    """A ``PerfModel`` with :class:`Coefficients` applied: decode and prefill steps and the front-end latency
    scaled, everything else (memory plan, CUDA graph sizes, startup) the wrapped model's."""

    def __init__(self, perf: Any, coefficients: Coefficients) -> None:
        self._perf = perf
        self.coefficients = coefficients

    def __getattr__(self, name: str) -> Any:
        return getattr(self._perf, name)

    def decode_step_s(self, batch_size: int, context_tokens: float) -> float:
        return self._perf.decode_step_s(batch_size, context_tokens) * self.coefficients.decode

    def prefill_step_s(self, new_tokens: int, cached_tokens: float = 0, num_seqs: int = 1) -> float:
        return self._perf.prefill_step_s(new_tokens, cached_tokens, num_seqs) * self.coefficients.prefill

    def frontend_latency_s(self, input_tokens: int) -> float:
        return self._perf.frontend_latency_s(input_tokens) * self.coefficients.frontend


def calibrated(perf: Any, coefficients: Coefficients | None) -> Any:
    """``perf`` with ``coefficients`` applied (the uncalibrated model when there are none, or all are 1.0); on an
    already calibrated model they replace its coefficients. A deployment's model (grid/twin/deployment.py
    ``DeploymentModel``) applies them to each of its servers."""
    if hasattr(perf, "with_coefficients"):
        return perf.with_coefficients(coefficients)
    base = perf._perf if isinstance(perf, CalibratedPerf) else perf
    if coefficients is None or coefficients.identity:
        return base
    return CalibratedPerf(base, coefficients)


@dataclass(frozen=True)
class Observation:
    """One measured load point: ``source`` names it (provenance: a configuration and level, or a published run),
    ``perf`` is the twin's uncalibrated model of its configuration, ``replay(perf)`` the twin's value of each metric
    for it (virtual time, pure) and ``measured`` the measured values (keys of :data:`METRICS`; positive)."""

    source: str
    perf: Any
    replay: Callable[[Any], Mapping[str, float]]
    measured: Mapping[str, float]


@dataclass(frozen=True)
class Outlier:
    """A measured metric the fit left out: its observation, metric, and measured / the twin calibrated without it."""

    source: str
    metric: str
    ratio: float

    def text(self) -> str:
        return f"{self.source} {self.metric}: measured {self.ratio:.2f}x the calibrated twin"


@dataclass(frozen=True)
class Calibration:
    """A fitted calibration: the coefficients, each coefficient's log standard deviation (``sd``; the prior's where
    no measurement moved it), the observations it used (``sources``), the metrics it left out (``outliers``) and
    ``residuals``: per used measured metric, ``(source, metric, spec sheet, forecast, fitted)``, the log of measured
    / twin for the spec-sheet twin, for the twin as calibrated before this measurement was made (its forecast of it),
    and for this calibration."""

    coefficients: Coefficients = Coefficients()
    sd: Mapping[str, float] = field(default_factory=lambda: dict(PRIOR_SD))
    sources: tuple[str, ...] = ()
    outliers: tuple[Outlier, ...] = ()
    residuals: tuple[tuple[str, str, float, float, float], ...] = ()

    def _error(self, column: int) -> dict[str, float]:
        by: dict[str, list[float]] = {}
        for r in self.residuals:
            by.setdefault(r[1], []).append(float(r[column]))
        return {m: _geomean_abs(v) for m, v in by.items()}

    @property
    def error_before(self) -> dict[str, float]:
        """Per metric, the spec-sheet twin's geometric-mean absolute error on the used measurements (a fraction)."""
        return self._error(2)

    @property
    def error_forecast(self) -> dict[str, float]:
        """The same for the twin's forecast of each measurement, calibrated on what was measured before it."""
        return self._error(3)

    @property
    def error_after(self) -> dict[str, float]:
        """The same for the twin with the coefficients it fitted when each measurement was added (in-sample)."""
        return self._error(4)

    def interval(self, name: str, z: float = 1.96) -> tuple[float, float]:
        """The coefficient's ``z``-sd interval (default 95%), as multipliers."""
        c, s = getattr(self.coefficients, name), self.sd[name]
        return c * math.exp(-z * s), c * math.exp(z * s)

    def text(self) -> str:
        """``decode 1.21x (1.12-1.31), prefill 0.64x (0.40-1.02), frontend 1.00x (prior)`` on one line."""
        parts = []
        for k in COEFFICIENTS:
            lo, hi = self.interval(k)
            moved = self.sd[k] < PRIOR_SD[k] * 0.999
            if k in ONLY_MOVES and not moved and getattr(self.coefficients, k) == 1.0:
                continue  # nothing measured it (no deployment's transfers): not worth a word
            parts.append(f"{k} {getattr(self.coefficients, k):.2f}x " + (f"({lo:.2f}-{hi:.2f})" if moved else "(prior)"))
        return ", ".join(parts)


def memoized(o: Observation) -> Observation:
    """``o`` whose replay is computed once per set of coefficients (a replay is a whole simulated load point; the
    fit and :func:`holdout` ask for the same one repeatedly)."""
    cache: dict[Any, Mapping[str, float]] = {}
    replay = o.replay

    def once(perf: Any) -> Mapping[str, float]:
        k = _applied(perf)
        if k not in cache:
            cache[k] = replay(perf)
        return cache[k]
    return Observation(o.source, o.perf, once, o.measured)


def _applied(perf: Any) -> Any:
    """What coefficients ``perf`` carries, as a key: a calibrated server's, a deployment's per server with its KV
    transfer multiplier (grid/twin/deployment.py ``DeploymentModel``), None for the spec-sheet model."""
    if isinstance(perf, CalibratedPerf):
        return perf.coefficients
    servers = getattr(perf, "servers", None)
    if servers is not None:
        return tuple(_applied(s.perf) for s in servers), getattr(perf, "cost", None)
    return None


def _residuals(values: Mapping[str, float], measured: Mapping[str, float], keys: list[str]) -> list[float]:
    out = []
    for k in keys:
        v = values.get(k)
        if v is None or not math.isfinite(v) or v <= 0:
            raise ValueError(f"the twin's replay gave {k}={v!r}; a calibrated metric must be positive")
        out.append(math.log(measured[k]) - math.log(v))
    return out


def _used(obs: list[Observation], dropped: set[tuple[int, str]]) -> list[list[str]]:
    keys = []
    for i, o in enumerate(obs):
        for k, v in o.measured.items():
            if k not in METRICS:
                raise ValueError(f"observation {o.source!r}: metric {k!r} is not one of {list(METRICS)}")
            if v is None or not math.isfinite(v) or v <= 0:
                raise ValueError(f"observation {o.source!r}: measured {k}={v!r}; it must be a positive number")
        keys.append([k for k in METRICS if k in o.measured and (i, k) not in dropped])
    return keys


def _noise(keys: list[list[str]]) -> np.ndarray:
    """:data:`OBSERVATION_SD` of each data residual, in the order :func:`_data_residuals` stacks them."""
    return np.array([OBSERVATION_SD[k] for ks in keys for k in ks])


def _data_residuals(obs: list[Observation], keys: list[list[str]], theta: np.ndarray) -> np.ndarray:
    c = Coefficients.from_log(theta)
    out: list[float] = []
    for o, ks in zip(obs, keys):
        if ks:
            out += _residuals(o.replay(calibrated(o.perf, c)), o.measured, ks)
    return np.array(out)


def _solve(obs: list[Observation], keys: list[list[str]], mean: np.ndarray, prior: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levenberg-Marquardt MAP fit from the prior ``mean`` / ``prior`` (sd) of theta: (theta, its covariance, the
    data residuals at theta in log units)."""
    n = len(COEFFICIENTS)
    noise = _noise(keys)

    def stacked(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        data = _data_residuals(obs, keys, theta)
        return data, np.concatenate([data / noise, (theta - mean) / prior])

    measured = {k for ks in keys for k in ks}
    idle = [c in ONLY_MOVES and ONLY_MOVES[c] not in measured for c in COEFFICIENTS]

    def jacobian(theta: np.ndarray, r0: np.ndarray) -> np.ndarray:
        cols = []
        for j in range(n):
            if idle[j]:  # no data residual depends on it: only its prior's, without a replay
                col = np.zeros(len(r0))
                col[len(r0) - n + j] = 1 / prior[j]
                cols.append(col)
                continue
            step = np.zeros(n)
            step[j] = FD_STEP
            cols.append((stacked(theta + step)[1] - r0) / FD_STEP)
        return np.stack(cols, axis=1)

    theta = mean.copy()
    data, r = stacked(theta)
    mu = 1e-3
    jac = jacobian(theta, r)
    # the prior's mean already explains every measurement (the twin measuring itself on the virtual clock, where the
    # replay is the measurement to 2e-9): that is the minimum, and the search below would only try ever shorter steps
    # that cannot improve it (a dozen replays per observation)
    iterations = 0 if np.max(np.abs(r), initial=0.0) < EXACT_FIT else MAX_ITERATIONS
    for i in range(iterations):
        if i:
            jac = jacobian(theta, r)
        a, g = jac.T @ jac, jac.T @ r
        improved = False
        while mu < 1e8:
            delta = -np.linalg.solve(a + mu * np.diag(np.diag(a) + 1e-12), g)
            data_new, r_new = stacked(theta + delta)
            if r_new @ r_new < r @ r:
                theta, data, r, mu, improved = theta + delta, data_new, r_new, max(mu / 10, 1e-9), True
                break
            mu *= 10
        if not improved or np.max(np.abs(delta)) < TOLERANCE:
            break
    # the covariance from the last Jacobian: taken at theta, or one step shorter than TOLERANCE before it
    dof = max(1, len(data) - int(np.sum(np.abs(jac[: len(data)]).sum(axis=0) > 1e-9)))
    excess = max(1.0, float(np.sum((data / noise) ** 2)) / dof) if len(data) else 1.0
    data_jac = jac[: len(data)] * math.sqrt(1 / excess)
    precision = data_jac.T @ data_jac + np.diag(1 / prior**2)
    return theta, np.linalg.inv(precision), data


def outliers(residuals: list[float]) -> list[int]:
    """Indexes of the outlying log residuals (:data:`OUTLIER_Z`, :data:`OUTLIER_MIN_RATIO`), worst first; none when
    there are fewer than :data:`OUTLIER_MIN_RESIDUALS`."""
    if len(residuals) < OUTLIER_MIN_RESIDUALS:
        return []
    r = np.abs(np.array(residuals))
    robust_sd = 1.4826 * float(np.median(r))
    cut = max(OUTLIER_Z * robust_sd, math.log(OUTLIER_MIN_RATIO))
    return sorted((i for i in range(len(r)) if r[i] > cut), key=lambda i: -r[i])


def _geomean_abs(errors: list[float]) -> float:
    """exp(mean |log ratio|) - 1 over log residuals: the geometric-mean absolute error as a fraction."""
    return math.exp(sum(abs(e) for e in errors) / len(errors)) - 1 if errors else math.nan


def prior_of(calibration: Calibration | None, saved: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(mean, sd) of the coefficients' logs before any measurement: :data:`PRIOR_SD` about 1.0, or a calibration's
    coefficients with its sd; a ``saved`` one (another sweep's, fitted on its flags and lengths) floored at
    :data:`SAVED_SD_FLOOR`, so that it may not outweigh one measurement of this sweep."""
    if calibration is None:
        return np.zeros(len(COEFFICIENTS)), np.array([PRIOR_SD[k] for k in COEFFICIENTS])
    floor = SAVED_SD_FLOOR if saved else 0.0
    return calibration.coefficients.log(), np.array([max(calibration.sd[k], floor) for k in COEFFICIENTS])


def fit(observations: list[Observation], prior: Calibration | None = None, update: bool = False) -> Calibration:
    """The calibration that best explains ``observations`` (see the module docstring), starting from ``prior``; the
    prior itself when there are no observations. Outlying metrics are left out one at a time, worst first, and named
    in ``outliers``.

    ``prior``: None (the spec-sheet model), a saved calibration of the same hardware, model and engine release
    (:func:`prior_of`), or with ``update`` this sweep's calibration so far, which the new measurements update as a
    posterior becomes the next prior (Laplace approximation; each measurement is fitted once, when it is added).
    Sources, outliers and residuals accumulate.

    Raises ``ValueError`` naming the observation and metric for a measured value that is not a positive number, or
    a metric outside :data:`METRICS`."""
    obs = [memoized(o) for o in observations]
    if not obs:
        return prior or Calibration()
    mean, sd = prior_of(prior, saved=not update)
    dropped: set[tuple[int, str]] = set()
    keys = _used(obs, dropped)
    theta, cov, data = _solve(obs, keys, mean, sd)
    while True:
        flat = [(i, k) for i, ks in enumerate(keys) for k in ks]
        worst = outliers([float(x) for x in data])
        if not worst:
            break
        dropped.add(flat[worst[0]])
        keys = _used(obs, dropped)
        theta, cov, data = _solve(obs, keys, mean, sd)
    final = Coefficients.from_log(theta)
    named = [Outlier(obs[i].source, k, obs[i].measured[k] / obs[i].replay(calibrated(obs[i].perf, final))[k])
             for i, k in sorted(dropped)]
    spec_sheet = _data_residuals(obs, keys, np.zeros(len(COEFFICIENTS)))
    forecast = _data_residuals(obs, keys, mean) if prior is not None else spec_sheet
    used = [(o.source, k) for o, ks in zip(obs, keys) for k in ks]
    return Calibration(
        coefficients=final,
        sd={k: float(math.sqrt(cov[j, j])) for j, k in enumerate(COEFFICIENTS)},
        sources=(*(prior.sources if prior else ()), *(o.source for o in obs)),
        outliers=(*(prior.outliers if prior else ()), *named),
        residuals=(*(prior.residuals if prior else ()),
                   *((src, m, float(b), float(f), float(a)) for (src, m), b, f, a in zip(used, spec_sheet, forecast, data))),
    )


def forecast_error(calibration: Calibration, observations: list[Observation]) -> dict[str, tuple[float, float]]:
    """Per metric, the twin's geometric-mean absolute error on ``observations`` (measurements the calibration did not
    use) before and after applying it: ``{metric: (before, after)}`` as fractions."""
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    for o in observations:
        keys = [k for k in METRICS if k in o.measured]
        for k, b, a in zip(keys, _residuals(o.replay(o.perf), o.measured, keys),
                           _residuals(o.replay(calibrated(o.perf, calibration.coefficients)), o.measured, keys)):
            before.setdefault(k, []).append(b)
            after.setdefault(k, []).append(a)
    return {k: (_geomean_abs(before[k]), _geomean_abs(after[k])) for k in before}


def subsets(n: int, k: int, limit: int) -> list[tuple[int, ...]]:
    """Up to ``limit`` of the ``k``-element subsets of ``range(n)``, evenly spaced through their lexicographic order
    (all of them when there are no more than ``limit``; deterministic)."""
    from itertools import combinations

    every = list(combinations(range(n), k))
    if len(every) <= limit:
        return every
    return [every[round(i * (len(every) - 1) / (limit - 1))] for i in range(limit)] if limit > 1 else every[:1]


def holdout(observations: list[Observation], k: int, limit: int = 6) -> dict[str, list[tuple[float, float]]]:
    """Calibrate on ``k`` of ``observations`` and forecast the rest, for each subset of :func:`subsets` (``limit``
    of them at most): per metric, the (before, after) log residuals of every forecast, measured / twin."""
    out: dict[str, list[tuple[float, float]]] = {}
    observations = [memoized(o) for o in observations]
    for chosen in subsets(len(observations), k, limit):
        cal = fit([observations[i] for i in chosen])
        for i, o in enumerate(observations):
            if i in chosen:
                continue
            keys = [m for m in METRICS if m in o.measured]
            after = _residuals(o.replay(calibrated(o.perf, cal.coefficients)), o.measured, keys)
            for m, b, a in zip(keys, _residuals(o.replay(o.perf), o.measured, keys), after):
                out.setdefault(m, []).append((b, a))
    return out


def geomean_abs(log_residuals: list[float]) -> float:
    """The geometric-mean absolute error, ``exp(mean |log(measured / twin)|) - 1`` (a fraction), of log residuals."""
    return _geomean_abs(log_residuals)
