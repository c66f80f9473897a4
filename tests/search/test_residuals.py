"""The residual model of the twin_guided search (grid/search/residuals.py): exact values from closed forms."""

import math

import numpy as np
import pytest

from grid.search.residuals import (HYPER_GRID, Mixture, Posterior, cdf, erfc, expected_improvement, fit,
                                   flag_count, log_cdf, log_evidence, one_hot, p_any_beats, posterior,
                                   residual_points)


def test_erfc_and_normal_cdf_match_the_standard_library():
    x = np.linspace(-6.0, 6.0, 2401)
    ref = np.array([math.erfc(v) for v in x])
    assert np.max(np.abs(erfc(x) / ref - 1)) < 1.2e-7  # Numerical Recipes' bound
    assert cdf([0.0])[0] == pytest.approx(0.5, abs=1e-7)
    assert cdf([1.959964])[0] == pytest.approx(0.975, abs=1e-7)
    # log of a CDF near 1 keeps its precision: log(1 - 0.5 erfc(10 / sqrt 2)) = -7.62e-24
    assert log_cdf([10.0])[0] == pytest.approx(-7.619853e-24, rel=1e-6)
    assert log_cdf([-3.0])[0] == pytest.approx(math.log(0.5 * math.erfc(3 / math.sqrt(2))), rel=1e-6)


def test_one_hot_columns_are_the_swept_values():
    x, cols = one_hot([{"a": 1, "b": "x", "c": True}, {"a": 2, "b": "x", "c": True}, {"a": 1, "b": "y", "c": True}])
    assert cols == [("", ""), ("a", "1"), ("a", "2"), ("b", "'x'"), ("b", "'y'")]  # c never varies: no column
    assert x.tolist() == [[1, 1, 0, 1, 0], [1, 0, 1, 1, 0], [1, 1, 0, 0, 1]]
    assert flag_count(cols) == 2


def test_one_observation_closed_forms():
    # y = w + e, w ~ N(0, d), e ~ N(0, s_res^2 + spread^2): evidence N(y; 0, d + s^2), posterior mean d y / (d + s^2)
    x, y = np.array([[1.0]]), np.array([0.1])
    d, s_res, spread = np.array([0.04]), 0.03, 0.01
    var = 0.04 + 0.03 ** 2 + 0.01 ** 2
    assert log_evidence(x, y, d, s_res, spread) == pytest.approx(
        -0.5 * 0.01 / var - 0.5 * math.log(2 * math.pi * var), abs=1e-7)
    post = posterior(x, y, d, s_res, spread)
    assert post.mean[0] == pytest.approx(0.04 * 0.1 / var, abs=1e-7)  # 0.097561
    assert post.cov[0, 0] == pytest.approx(0.04 * 0.001 / var, abs=1e-9)
    mean, sd = post.latent(np.array([[1.0]]))
    assert sd[0] == pytest.approx(math.sqrt(0.04 * 0.001 / var + 0.03 ** 2), abs=1e-7)  # 1e-9 jitter


def test_fit_weights_are_equal_with_nothing_measured_and_follow_the_evidence():
    empty = fit(np.zeros((0, 3)), np.zeros(0), 1, 0.074, 0.01)
    assert len(empty.parts) == len(HYPER_GRID) == 108  # 18 scales x 6 shares, none dropped
    assert all(w == pytest.approx(1 / 108) for w, _ in empty.parts)
    assert [s for s, _ in HYPER_GRID[::6]][:3] == [0.25, 0.2875, 0.3306] and HYPER_GRID[-1] == (2.6903, 1.0)
    # two values of one flag, measured 20% apart three times each: the error is shared per flag value
    x, _ = one_hot([{"f": 1}] * 3 + [{"f": 2}] * 3)
    y = np.array([0.1, 0.1, 0.1, -0.1, -0.1, -0.1])
    m = fit(x, y, 1, 0.074, 0.01)
    assert m.share > 0.9 and m.scale > 1.0
    assert sum(w for w, _ in m.parts) == pytest.approx(1.0)


def test_expected_improvement_and_p_any_beats():
    # at the best, sd 1: phi(0) = 0.398942; sd 0: the plain excess
    assert expected_improvement([0.0], [1.0], 0.0)[0] == pytest.approx(0.398942, abs=1e-6)
    assert expected_improvement([1.0, -1.0], [0.0, 0.0], 0.5).tolist() == [0.5, 0.0]
    # flag terms known exactly (zero covariance): independent residuals, 1 - prod Phi((t - m) / s_res)
    post = Posterior(np.array([0.0]), np.zeros((1, 1)), 0.05, 1.0, 0.0)
    x = np.ones((3, 1))
    logf = np.array([0.0, -0.02, -0.05])
    expect = 1 - math.prod(0.5 * math.erfc(-(0.03 - m) / 0.05 / math.sqrt(2)) for m in logf)
    assert p_any_beats(post, x, logf, 0.03) == pytest.approx(expect, abs=1e-6)  # 0.498...
    assert p_any_beats(post, x[:0], logf[:0], 0.03) == 0.0
    exact = Posterior(np.array([0.0]), np.zeros((1, 1)), 0.0, 1.0, 1.0)
    assert p_any_beats(exact, x, logf, 0.03) == 0.0 and p_any_beats(exact, x, logf, -0.03) == 1.0


def test_log_evidence_in_weight_space_equals_the_direct_normal_density():
    settings = [{"a": i % 3, "b": i % 2, "c": i % 5} for i in range(12)]
    x, _ = one_hot(settings)
    y = np.array([0.05, -0.02, 0.01, 0.08, -0.04, 0.0, 0.03, -0.07, 0.02, 0.06, -0.01, 0.04])
    d = np.full(x.shape[1], 0.002)
    k = x @ np.diag(d) @ x.T + (0.03 ** 2 + 0.01 ** 2 + 1e-9) * np.eye(12)
    sign, logdet = np.linalg.slogdet(k)
    direct = -0.5 * y @ np.linalg.solve(k, y) - 0.5 * logdet - 6 * math.log(2 * math.pi)
    assert log_evidence(x, y, d, 0.03, 0.01) == pytest.approx(direct, abs=1e-8)


def test_residual_points_keep_positive_scores_with_positive_forecasts_in_row_order():
    measured = {"a": 2.0, "b": None, "c": 0.0, "d": 6.0, "e": 3.0, "z": 1.0}
    forecasts = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 2.0, "e": 0.0, "z": 1.0}
    row = {"a": 1, "b": 0, "c": 2, "d": 0, "e": 3}  # z has no design row
    higher, lower = residual_points(measured, forecasts, row, True), residual_points(measured, forecasts, row, False)
    assert [r for r, _ in higher] == [r for r, _ in lower] == [0, 1]
    assert [y for _, y in higher] == pytest.approx([math.log(3.0), math.log(2.0)])
    # a lower-is-better score is modelled on its reciprocal: log(forecast / measured)
    assert [y for _, y in lower] == pytest.approx([-math.log(3.0), -math.log(2.0)])


def test_mixture_latent_is_the_mixtures_mean_and_sd():
    x = np.array([[1.0]])
    low = Posterior(np.array([0.0]), np.array([[0.0]]), 0.1, 1.0, 0.0)   # mean 0.0, sd 0.1
    high = Posterior(np.array([0.2]), np.array([[0.0]]), 0.1, 1.0, 0.0)  # mean 0.2, sd 0.1
    mean, sd = Mixture(((1.0, high),)).latent(x)
    assert (mean[0], sd[0]) == pytest.approx((0.2, 0.1))
    # 0.25 x 0.0 + 0.75 x 0.2 = 0.15; second moment 0.25 x 0.01 + 0.75 x (0.01 + 0.04) = 0.04; var 0.04 - 0.0225
    mean, sd = Mixture(((0.25, low), (0.75, high))).latent(x)
    assert (mean[0], sd[0]) == pytest.approx((0.15, math.sqrt(0.0175)))
