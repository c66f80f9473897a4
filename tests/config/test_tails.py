"""Each load point gets enough completed requests that the tail it is judged by is not its slowest request
the rule, the defaults it sets, the notes before and after a sweep, and the load it plans."""

from __future__ import annotations

import numpy as np
import pytest

from grid.compose import compose_spec
from grid.config.schema import LoadSpec, requests_for_tail
from grid.plan import load_points
from grid.report.render import sample_note
from grid.storage.schema import load_point_row
from grid.sweep.notes import thin_tail_note
from grid.sweep.space import expand


@pytest.mark.parametrize(("percentile", "n"), [(50, 3), (90, 11), (95, 21), (99, 101), (99.9, 1001), (100, 1)])
def test_requests_for_tail(percentile, n):
    assert requests_for_tail(percentile) == n


@pytest.mark.parametrize("percentile", [50, 90, 95, 99, 99.9])
def test_one_slow_request_stays_out_of_the_tail_from_that_many_requests_on(percentile):
    """The rule checked against numpy.percentile itself (linear interpolation, as grid/metrics/loadpoint.py): with
    ``requests_for_tail(p)`` requests one outlier does not move the p-th percentile; with one request fewer it does."""
    n = requests_for_tail(percentile)
    with_outlier = lambda k: np.percentile([1.0] * (k - 1) + [1000.0], percentile)  # noqa: E731
    assert with_outlier(n) == pytest.approx(1.0, rel=1e-9)  # p99.9: the rank 999 is 999.0000000001 in binary
    assert with_outlier(n - 1) > 1.0


@pytest.mark.parametrize("bad", [0, -1, 100.5])
def test_requests_for_tail_refuses_a_percentile_outside_0_100(bad):
    with pytest.raises(ValueError, match="percentile must be in"):
        requests_for_tail(bad)


def point(**columns):
    return load_point_row({}, **columns)


def test_defaults_give_each_point_enough_requests_for_p99(tmp_path):
    assert LoadSpec().min_prompts == 101
    spec = compose_spec([], str(tmp_path))
    assert spec.load.min_prompts == 101
    assert [(p.value, p.num_prompts) for p in load_points(expand(spec)[0])] == [
        (1.0, 101), (8.0, 101), (32.0, 101), (64.0, 128)]


def test_the_floor_does_not_follow_the_objective(tmp_path):
    """The load is part of a configuration's hash: an objective at another percentile re-judges what was measured
    instead of measuring it again; the plan's note says what that percentile would need."""
    p999 = compose_spec(["objective.slo.percentile=99.9"], str(tmp_path))
    assert p999.load.min_prompts == 101
    assert expand(p999)[0].config_hash == expand(compose_spec([], str(tmp_path)))[0].config_hash
    assert thin_tail_note(p999, expand(p999)).startswith(
        "concurrency 1 with 101, concurrency 8 with 101, concurrency 32 with 101, concurrency 64 with 128 requests: "
        "fewer than the 1001 that p99.9 needs")


def test_the_main_job_measures_at_least_101_requests_per_point(tmp_path):
    spec = compose_spec(["+sweep=nsa_backends"], str(tmp_path))
    points = load_points(expand(spec)[0])
    assert sorted({(p.value, p.num_prompts) for p in points}) == [(8.0, 101), (32.0, 101), (64.0, 101)]
    assert thin_tail_note(spec, expand(spec)) is None


def test_a_thin_tail_is_named_before_the_sweep(tmp_path):
    spec = compose_spec(["load.min_prompts=8", "load.concurrency=[1,8,64]"], str(tmp_path))
    assert thin_tail_note(spec, expand(spec)) == (
        "concurrency 1 with 8, concurrency 8 with 16 requests: fewer than the 101 that p99 needs not to be the "
        "slowest request, so one slow request sets those tails and the SLOs judged on them (set load.min_prompts=101; "
        "null gives 101, enough for p99)")
    p95 = compose_spec(["load.min_prompts=8", "load.concurrency=[1,8,64]", "objective.slo.percentile=95"],
                       str(tmp_path))
    assert thin_tail_note(p95, expand(p95)).startswith("concurrency 1 with 8, concurrency 8 with 16 requests: fewer than the 21 that p95 ")


def test_the_report_says_when_a_tail_rests_on_too_few_requests():
    assert sample_note([point(completed=8), point(completed=128)]) == (
        "Percentiles rest on 8-128 completed requests per load point; p99 needs at least 101 not to be the slowest "
        "request. For tighter tails set load.min_prompts=101 (null gives 101, enough for p99) or raise "
        "load.prompts_per_stream.")
    assert sample_note([point(completed=101), point(completed=500)]) is None
    assert sample_note([point(completed=100)]).startswith("Percentiles rest on 100 completed requests")
    assert sample_note([point(completed=None), point(completed=0)]) is None
    # an SLO at p99.9 needs 1001; one at p95 still leaves the report's p99 columns needing 101
    assert "p99.9 needs at least 1001" in sample_note([point(completed=500, slo_percentile=99.9)])
    assert sample_note([point(completed=101, slo_percentile=95.0)]) is None


def test_an_all_at_once_rate_is_a_burst_of_min_prompts(tmp_path):
    """``load.request_rate=[inf]`` (README: all at once) used to crash planning (``prompts_for`` rounded
    prompts_per_stream x inf): it is a burst of ``min_prompts`` requests, and the tail note names it."""
    spec = compose_spec(["load.request_rate=[inf]", "load.concurrency=[]"], str(tmp_path))
    assert [(p.kind, p.value, p.num_prompts) for p in load_points(expand(spec)[0])] == [("rate", float("inf"), 101)]
    few = compose_spec(["load.request_rate=[2,inf]", "load.concurrency=[]", "load.min_prompts=8"], str(tmp_path))
    assert thin_tail_note(few, expand(few)).startswith("2 req/s with 8, inf req/s with 8 requests: fewer than the 101")
