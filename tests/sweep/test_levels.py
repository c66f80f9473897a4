"""Early stopping across load levels and the capacity bisection (grid/search/levels.py, pure), on recorded values."""

import pytest

from grid.loadgen.runner import LoadPoint
from grid.search.levels import (EARLY_STOP_SLO, EARLY_STOP_TWIN, Capacity, LevelForecast, Levels, bracket, next_rate,
                               skip_reason, twin_bound)


def test_twin_bound_is_the_forecast_over_one_minus_the_error():
    assert twin_bound(300.0, 0.25) == 400.0
    assert twin_bound(300.0, 0.0) == 300.0
    with pytest.raises(ValueError, match="search.twin_bound_error=1"):
        twin_bound(300.0, 1.0)


def test_skip_after_a_lower_level_missed_the_slos():
    missed = [("concurrency", 8.0)]
    assert skip_reason("concurrency", 32.0, missed, None, None, 0.25) == (
        EARLY_STOP_SLO, "the SLOs were already missed at concurrency 8; a higher level only adds load")
    # the same level again (a repeat), a lower one, another kind and trace replays still run
    assert skip_reason("concurrency", 8.0, missed, None, None, 0.25) is None
    assert skip_reason("concurrency", 1.0, missed, None, None, 0.25) is None
    assert skip_reason("rate", 32.0, missed, None, None, 0.25) is None
    assert skip_reason("trace", 32.0, [("trace", 1.0)], None, None, 0.25) is None
    assert skip_reason("rate", 4.0, [("rate", 2.0), ("rate", 1.0)], None, None, 0.25)[1].startswith(
        "the SLOs were already missed at 2 req/s")


def test_skip_where_the_twins_upper_bound_is_below_the_best():
    f = LevelForecast(300.0, 42.0)
    # bound 300 / (1 - 0.25) = 400 tok/s < best 401: cannot win
    assert skip_reason("concurrency", 64.0, [], f, 401.0, 0.25, "tok/s") == (
        EARLY_STOP_TWIN, "the twin's upper bound here, 400 tok/s (forecast 300 / (1 - 0.25)), is below the best "
                         "measured 401 tok/s")
    assert skip_reason("concurrency", 64.0, [], f, 400.0, 0.25) is None     # equal: it might tie, it runs
    assert skip_reason("concurrency", 64.0, [], f, None, 0.25) is None      # nothing measured yet
    assert skip_reason("concurrency", 64.0, [], LevelForecast(None, 42.0), 401.0, 0.25) is None  # not forecast


def points(*levels):
    return [LoadPoint(k, v, 8, seed=i) for i, (k, v) in enumerate(levels)]


def test_levels_skip_only_what_cannot_count():
    pts = points(("concurrency", 1), ("concurrency", 8), ("concurrency", 32), ("concurrency", 64))
    forecasts = {("concurrency", 1.0): LevelForecast(50.0, 10.0), ("concurrency", 8.0): LevelForecast(280.0, 20.0),
                 ("concurrency", 32.0): LevelForecast(600.0, 30.0), ("concurrency", 64.0): LevelForecast(700.0, 40.0)}
    # another configuration measured 900 tok/s: levels whose bound (x 4/3) is below it are skipped
    levels = Levels(pts, forecasts=forecasts, best=900.0, error=0.25, unit="tok/s", metric="output_tok_per_s")
    seen = []
    for index, point, skip in levels:
        seen.append((index, point.value, skip[0] if skip else None))
        if skip is None:
            levels.record(point, "ok", None, {1: 51.0, 64: 905.0}[int(point.value)])
    # the first point always runs (only higher levels are skipped)
    assert seen == [(0, 1, None), (1, 8, EARLY_STOP_TWIN), (2, 32, EARLY_STOP_TWIN), (3, 64, None)]
    assert levels.forecast_s(pts[2]) == 30.0
    # no best yet: a configuration's own point raises it (load.repeats=1)
    levels = Levels(pts, forecasts=forecasts, best=None, error=0.25, unit="tok/s", metric="output_tok_per_s")
    seen = []
    for _index, point, skip in levels:
        seen.append(skip[0] if skip else None)
        if skip is None:
            levels.record(point, "ok", None, {1: 51.0, 8: 281.0, 32: 820.0, 64: 880.0}[int(point.value)])
    assert seen == [None, None, None, None] and levels.best == 880.0   # 700 / 0.75 = 933 > 820: 64 still runs
    # a missed SLO at concurrency 8 skips 32 and 64; early_stop=False runs everything
    for early_stop, expect in ((True, [None, None, EARLY_STOP_SLO, EARLY_STOP_SLO]), (False, [None] * 4)):
        levels = Levels(pts, early_stop=early_stop)
        seen = []
        for _index, point, skip in levels:
            seen.append(skip[0] if skip else None)
            if skip is None:
                levels.record(point, "ok", point.value < 8, None)
        assert seen == expect


def test_bracket_ignores_failures_below_the_highest_rate_that_held():
    assert bracket([]) == (None, None)
    assert bracket([(10.0, True), (15.0, False), (12.5, True), (13.75, False)]) == (12.5, 13.75)
    assert bracket([(4.0, False), (5.0, True), (8.0, False), (6.0, False)]) == (5.0, 6.0)
    assert bracket([(4.0, False), (2.0, False)]) == (None, 2.0)


def bisect(capacity, lo_bound, hi_bound, rel_tol=0.05, max_probes=10):
    """The probes of a bisection against a server whose SLOs hold up to ``capacity`` req/s."""
    probes = []
    while (rate := next_rate(probes, lo_bound, hi_bound, rel_tol, max_probes)) is not None:
        probes.append((rate, rate <= capacity))
    return probes


def test_bisection_inside_the_twins_bracket():
    # twin forecast 12 req/s, error 0.25: bracket 12 / 1.25 .. 12 / 0.75 = 9.6 .. 16
    assert bisect(13.7, 9.6, 16.0) == [(9.6, True), (16.0, False), (12.8, True), (14.4, False), (13.6, True),
                                       (14.0, False)]
    # stop: 14.0 - 13.6 = 0.4 <= 0.05 x 13.6 = 0.68
    assert bracket(bisect(13.7, 9.6, 16.0)) == (13.6, 14.0)


def test_bisection_outside_the_bracket_widens_it():
    # capacity above the bracket: double past it
    assert bisect(40.0, 9.6, 16.0) == [(9.6, True), (16.0, True), (32.0, True), (64.0, False), (48.0, False),
                                       (40.0, True), (44.0, False), (42.0, False)]  # 42 - 40 <= 0.05 x 40
    # below it: halve
    assert bisect(3.0, 9.6, 16.0) == [(9.6, False), (4.8, False), (2.4, True), (3.6, False), (3.0, True),
                                      (3.3, False), (3.15, False)]
    # SLOs missed at an eighth of the bracket's lower end: no capacity, the search gives up
    assert bisect(0.5, 9.6, 16.0) == [(9.6, False), (4.8, False), (2.4, False), (1.2, False)]
    # max_probes ends it; rates are rounded to 4 significant figures
    assert bisect(13.7, 9.6, 16.0, rel_tol=0.001, max_probes=4) == [(9.6, True), (16.0, False), (12.8, True),
                                                                    (14.4, False)]
    assert next_rate([], 1 / 3, 1.0, 0.05, 10) == 0.3333


def test_capacity_levels_are_the_bisection_probes():
    made = []

    def make(index, rate):
        made.append((index, rate))
        return LoadPoint("rate", rate, 8, seed=index)

    levels = Levels([], capacity=Capacity(9.6, 16.0, 0.05, 10, make))
    for _index, point, skip in levels:
        assert skip is None
        levels.record(point, "ok" if point.value != 14.4 else "partial", point.value <= 15.0, None)
    # 14.4 held the SLOs' percentile but a request failed (partial): it does not count as held
    assert made == [(0, 9.6), (1, 16.0), (2, 12.8), (3, 14.4), (4, 13.6), (5, 14.0)]
    assert bracket(levels.probes) == (14.0, 14.4)
