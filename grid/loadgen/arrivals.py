"""Open-loop arrival schedules (pure).

``send_offsets`` returns *absolute* send offsets in modelled seconds from one start time: request 0 at 0, request i
at the sum of the first i inter-arrival gaps. The runner sleeps until ``t0 + offset_i / time_scale`` for each
request (never a chain of relative sleeps, so lateness does not accumulate). Closed-loop load points
(``kind="concurrency"``) have no schedule.

Kinds:

* ``constant``: gaps of exactly ``1/rate``.
* ``poisson``: exponential gaps with mean ``1/rate`` (gamma with shape 1).
* ``gamma``: gamma gaps with shape ``burstiness`` and mean ``1/rate`` (vLLM's ``--burstiness``; < 1 is burstier
  than Poisson, > 1 more regular). Unlike vLLM the schedule is not rescaled to end at ``N/rate``.

``rate = inf`` sends everything at offset 0. The random gaps come from ``numpy.random.default_rng(seed)``, so one
seed gives the same schedule for every server configuration.
"""

from __future__ import annotations

import math

import numpy as np

ARRIVAL_KINDS = ("constant", "poisson", "gamma")


def send_offsets(
    num: int, rate: float, kind: str = "poisson", *, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Absolute send offsets (modelled seconds, non-decreasing, first = 0.0) for ``num`` requests at ``rate`` req/s."""
    if num < 0:
        raise ValueError(f"num must be >= 0, got {num}")
    if not (rate > 0):
        raise ValueError(f"rate must be > 0 req/s, got {rate}")
    if kind not in ARRIVAL_KINDS:
        raise ValueError(f"unknown arrival kind {kind!r}; expected one of {ARRIVAL_KINDS}")
    if num == 0:
        return []
    if math.isinf(rate):
        return [0.0] * num
    if kind == "constant":
        return [i / rate for i in range(num)]
    shape = 1.0 if kind == "poisson" else float(burstiness)
    if not (shape > 0) or math.isinf(shape):
        raise ValueError(f"burstiness must be a finite number > 0, got {burstiness}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=num - 1)
    offsets = np.concatenate(([0.0], np.cumsum(gaps)))
    return [float(x) for x in offsets]


def offsets_to_ns(offsets_s: list[float], time_scale: float = 1.0) -> list[int]:
    """Modelled-second offsets to real nanoseconds (``time_scale`` modelled seconds pass per real second)."""
    if not (time_scale > 0) or math.isinf(time_scale):
        raise ValueError(f"time_scale must be a finite number > 0, got {time_scale}")
    return [round(o * 1e9 / time_scale) for o in offsets_s]
