"""Arrival schedules: exact, seeded, absolute offsets."""

from __future__ import annotations

import numpy as np
import pytest

from grid.loadgen.arrivals import offsets_to_ns, send_offsets


def test_constant_is_exact():
    assert send_offsets(5, 4.0, "constant") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert offsets_to_ns(send_offsets(5, 4.0, "constant"), time_scale=2.0) == [0, 125_000_000, 250_000_000,
                                                                               375_000_000, 500_000_000]


def test_poisson_seeded_golden_values():
    # pinned: the same seed must give the same schedule for every server configuration
    assert send_offsets(5, 4.0, "poisson", seed=7) == pytest.approx(
        [0.0, 0.17688231394798037, 0.4331831510217066, 0.5753203153675195, 0.7990977812663103], abs=1e-15)
    assert send_offsets(5, 4.0, "poisson", seed=7) == send_offsets(5, 4.0, "poisson", seed=7)
    assert send_offsets(5, 4.0, "poisson", seed=8) != send_offsets(5, 4.0, "poisson", seed=7)
    # poisson == gamma with shape 1
    assert send_offsets(50, 3.0, "gamma", burstiness=1.0, seed=3) == send_offsets(50, 3.0, "poisson", seed=3)


def test_gamma_seeded_golden_values():
    assert send_offsets(5, 4.0, "gamma", burstiness=0.5, seed=7) == pytest.approx(
        [0.0, 0.20734761225796217, 0.6130498540969529, 0.6580997533956564, 0.6581136151117405], abs=1e-15)


@pytest.mark.parametrize("kind,burst", [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)])
def test_mean_rate_and_burstiness(kind, burst):
    off = np.array(send_offsets(40_001, 10.0, kind, burstiness=burst, seed=1))
    gaps = np.diff(off)
    assert off[0] == 0.0 and (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burst), rel=0.05)  # gamma CV = 1/sqrt(shape)


def test_offsets_are_absolute_cumulative_sums():
    off = send_offsets(1000, 50.0, "poisson", seed=5)
    gaps = np.random.default_rng(5).gamma(1.0, 1 / 50.0, size=999)
    assert off[-1] == pytest.approx(float(np.cumsum(gaps)[-1]), rel=1e-12)


def test_infinite_rate_and_edges():
    assert send_offsets(3, float("inf"), "poisson") == [0.0, 0.0, 0.0]
    assert send_offsets(0, 1.0) == []
    for bad in [dict(num=3, rate=0.0), dict(num=3, rate=-1.0), dict(num=-1, rate=1.0),
                dict(num=3, rate=1.0, kind="zipf"), dict(num=3, rate=1.0, kind="gamma", burstiness=0.0)]:
        with pytest.raises(ValueError):
            send_offsets(**bad)
    with pytest.raises(ValueError):
        offsets_to_ns([0.0], time_scale=0.0)


def test_defaults_are_poisson_like_gamma_seed_0():
    assert send_offsets(6, 4.0) == send_offsets(6, 4.0, "poisson", seed=0)
    assert send_offsets(6, 4.0, "gamma") == send_offsets(6, 4.0, "gamma", burstiness=1.0, seed=0)
    assert send_offsets(6, 4.0, "gamma") == send_offsets(6, 4.0, "poisson", seed=0)


def test_poisson_ignores_burstiness():
    assert send_offsets(20, 3.0, "poisson", burstiness=0.25, seed=3) == send_offsets(20, 3.0, "poisson", seed=3)
    assert send_offsets(20, 3.0, "gamma", burstiness=0.25, seed=3) != send_offsets(20, 3.0, "poisson", seed=3)


@pytest.mark.parametrize("kwargs,message", [
    (dict(num=-1, rate=1.0), "num must be >= 0, got -1"),
    (dict(num=3, rate=0.0), r"rate must be > 0 req/s, got 0.0"),
    (dict(num=3, rate=1.0, kind="zipf"), r"unknown arrival kind 'zipf'; expected one of \('constant', 'poisson'"),
    (dict(num=3, rate=1.0, kind="gamma", burstiness=float("inf")), "burstiness must be a finite number > 0, got inf"),
])
def test_errors_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        send_offsets(**kwargs)


def test_offsets_to_ns_exact_and_any_positive_scale():
    assert offsets_to_ns([0.0, 1.0, 10.0]) == [0, 1_000_000_000, 10_000_000_000]
    assert offsets_to_ns([1.0, 2.5], time_scale=0.5) == [2_000_000_000, 5_000_000_000]   # a slower clock
    with pytest.raises(ValueError, match="time_scale must be a finite number > 0, got inf"):
        offsets_to_ns([0.0], time_scale=float("inf"))
