"""Each configuration's forecast with its interval (grid/search/intervals.py) and the report's table of them."""

from __future__ import annotations

import math

import pytest

from grid.report.forecasts import forecast_rows, markdown_lines
from grid.search.intervals import Z95, intervals
from grid.search.policy import Candidate
from grid.search.residuals import SCALES


def _cands(n_a: int = 4, n_b: int = 3) -> list[Candidate]:
    return [Candidate(f"h{a}{b}", forecast=100.0 + 10 * a + b, settings={"a": a, "b": b})
            for a in range(n_a) for b in range(n_b)]


def test_before_any_measurement_the_interval_is_the_twins_documented_error_and_the_repeat_spread():
    # prior: common term sigma e, plus (scale x e)^2 split between the flag values and the configuration's own
    # residual; every configuration has one value of each flag, so its variance is e^2 (1 + scale^2) whatever the
    # share, averaged over the equally weighted scales, plus the spread of one measurement
    e, spread = 0.077, 0.01
    out = intervals(_cands(), {}, True, e, spread)
    sd = math.sqrt(e * e * (1 + sum(s * s for s in SCALES) / len(SCALES)) + spread * spread)
    assert len(out) == 12
    iv = out["h21"]
    assert iv.forecast == iv.expected == 121.0 and iv.measured is None and iv.covers() is None
    assert iv.low == pytest.approx(121.0 * math.exp(-Z95 * sd)) and iv.high == pytest.approx(121.0 * math.exp(Z95 * sd))


def test_measurements_above_the_forecast_move_the_others_and_narrow_their_interval():
    cands = _cands()
    measured = {c.config_hash: c.forecast * 1.10 for c in cands[:8]}
    before = intervals(cands, {}, True, 0.077, 0.01)
    out = intervals(cands, measured, True, 0.077, 0.01)
    left = [h for h in out if h not in measured]
    for h in left:
        iv = out[h]
        assert iv.forecast * 1.05 < iv.expected <= iv.forecast * 1.10 + 1e-9
        assert iv.low < iv.expected < iv.high
        assert iv.high / iv.low < before[h].high / before[h].low  # what was measured narrows it
    assert all(out[h].covers() for h in measured)


def test_the_twins_error_is_learned_from_forecasts_made_before_each_measurement():
    """A calibration fitted to a configuration's own points makes its forecast match its measurement: residuals taken
    against those forecasts (in sample) say the twin is exact. The forecasts made before (out of sample) keep its
    error: here 10% low on every configuration, which the unmeasured ones' expected values carry."""
    from grid.search.policy import Budget, Policy

    cands = _cands()
    policy = Policy(cands, Budget())
    for c in cands[:8]:
        policy.record(c.config_hash, c.forecast * 1.10)       # measured 10% above the forecast it had then
    # the sweep recalibrates after each record: the fitted twin now forecasts the measured ones exactly
    policy.reforecast({c.config_hash: (c.forecast * 1.10, 0.0) for c in cands[:8]})
    assert policy.forecast_before == {c.config_hash: c.forecast for c in cands[:8]}
    assert policy.residual_forecasts()["h00"] == 100.0 and policy.residual_forecasts()["h30"] == 130.0
    in_sample = intervals(policy.candidates, policy.measured, True, 0.077, 0.01)
    out = intervals(policy.candidates, policy.measured, True, 0.077, 0.01, before=policy.forecast_before)
    for h in ("h30", "h31", "h32", "h22"):   # not measured
        assert in_sample[h].expected == pytest.approx(in_sample[h].forecast, rel=1e-6)   # "exact": no correction
        assert out[h].forecast * 1.05 < out[h].expected <= out[h].forecast * 1.10 + 1e-9


def test_a_lower_is_better_score_is_modelled_on_its_reciprocal():
    cands = [Candidate(c.config_hash, forecast=c.forecast, settings=c.settings) for c in _cands()]
    measured = {c.config_hash: c.forecast * 0.9 for c in cands[:8]}  # lower: 10% better than forecast
    out = intervals(cands, measured, False, 0.077, 0.01)
    iv = out["h31"]
    assert iv.forecast * 0.9 - 1e-9 <= iv.expected < iv.forecast * 0.95 and iv.low < iv.expected < iv.high


def test_refused_unforecast_and_known_failing_configurations_get_no_interval():
    cands = [Candidate("r", refused=True, forecast=5.0, settings={"a": 0}), Candidate("n", forecast=None,
                                                                                     settings={"a": 1}),
             Candidate("ok", forecast=3.0, settings={"a": 2}),
             Candidate("fails", known_to_fail=True, forecast=4.0, settings={"a": 3})]
    assert list(intervals(cands, {}, True, 0.077, 0.01)) == ["ok"]
    assert list(intervals(cands, {"fails": 3.5}, True, 0.077, 0.01)) == ["ok", "fails"]  # it ran after all


def test_the_report_lists_them_best_expected_first_and_only_for_the_objective_they_scored():
    searched = {"objective": "max_output_throughput", "calibrated": True, "forecasts": {
        "a": {"label": "x=1", "forecast": 100.0, "expected": 110.0, "low": 95.0, "high": 125.0, "measured": 112.0},
        "b": {"label": "x=2", "forecast": 120.0, "expected": 130.0, "low": 110.0, "high": 150.0, "measured": None},
        "c": {"label": "x=3", "forecast": 90.0, "expected": 99.0, "low": 95.0, "high": 104.0, "measured": 80.0}}}
    assert [r["label"] for r in forecast_rows(searched, "max_output_throughput")] == ["x=2", "x=1", "x=3"]
    assert forecast_rows(searched, "min_tpot") == []
    lines = markdown_lines(searched, "max_output_throughput")
    assert lines[0] == "## The twin's forecasts (95% interval)"
    assert lines[2].endswith("1 of 2 measured scores lie in their interval")
    assert "| x=2 | 120 tok/s | 130 (110 .. 150) | not run |  |" in lines
    assert "| x=3 | 90.0 tok/s | 99.0 (95.0 .. 104) | 80.0 tok/s | no |" in lines
