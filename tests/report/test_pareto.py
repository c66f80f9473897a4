"""Pareto fronts on hand-made load points: exact membership, ties, failed points, and the objective's pick."""

import math

import pytest

from grid.storage.schema import judged_point_row
from grid.report.pareto import (draw_series, dominates, fronts, level_gaps, level_series, pareto_front,
                                throughput_metric)


def pt(label, idx, tok, tpot, ttft=100.0, status="ok", trial="ok", level=None):
    return judged_point_row({}, **{
        "config_hash": label, "label": label, "point_index": idx, "point_kind": "concurrency",
        "point_value": float(level if level is not None else 2 ** idx), "trial_status": trial, "status": status,
        "output_tok_per_s": tok, "tpot_median_ms": tpot, "tpot_p99_ms": tpot * 2, "ttft_median_ms": ttft,
        "ttft_p99_ms": ttft * 3, "goodput_req_per_s": None})


ROWS = [
    pt("a", 0, 100.0, 10.0), pt("a", 1, 400.0, 20.0), pt("a", 2, 700.0, 40.0),
    pt("b", 0, 90.0, 9.0), pt("b", 1, 380.0, 25.0), pt("b", 2, 800.0, 60.0),
    pt("c", 0, 50.0, 50.0),                                   # dominated by everything
    pt("d", 0, 5000.0, 1.0, status="partial"),                # broken point: never a candidate
    pt("e", 0, 5000.0, 1.0, trial="failed"),
    pt("f", 0, 400.0, 20.0),                                  # equal to a@1: neither dominates
]


def test_front_membership_exact():
    front = pareto_front(ROWS, "output_tok_per_s", "tpot_median_ms")
    assert [(p["label"], p["point_index"]) for p in front] == [
        ("b", 0), ("a", 0), ("a", 1), ("f", 0), ("a", 2), ("b", 2)]


def test_dominates_needs_one_strict_improvement():
    a, f = ROWS[1], ROWS[-1]
    assert not dominates(a, f, "output_tok_per_s", "tpot_median_ms")
    assert dominates(ROWS[1], ROWS[4], "output_tok_per_s", "tpot_median_ms")   # 400 tok/s 20 ms vs 380 / 25


def test_fronts_locate_the_objectives_pick():
    chosen = ROWS[4]  # b@1: 380 tok/s, TPOT 25 ms: dominated by a@1 and f@0 (400 tok/s, 20 ms)
    out = fronts(ROWS, "max_output_throughput", chosen)
    assert [f.y for f in out] == ["tpot_median_ms", "tpot_p99_ms", "ttft_median_ms", "ttft_p99_ms"]
    tpot = out[0]
    assert len(tpot.points) == 8 and not tpot.chosen_on_front
    assert [(p["label"], p["point_index"]) for p in tpot.dominated_by] == [("a", 1), ("f", 0)]
    assert tpot.describe().endswith(
        "the objective's pick (b @ concurrency 2) is off it, dominated by a @ concurrency 2, f @ concurrency 1")
    # TTFT is 100 ms everywhere: only the highest throughput (b@2, 800 tok/s) is on that front
    ttft = out[2]
    assert [(p["label"], p["point_index"]) for p in ttft.front] == [("b", 2)]
    assert ttft.describe() == ("TTFT p50 vs output tok/s: 1 of 8 load points on the front (b @ concurrency 4: "
                               "800 / 100 ms); the objective's pick (b @ concurrency 2) is off it, dominated by "
                               "b @ concurrency 4")
    on = fronts(ROWS, "max_output_throughput", ROWS[5])[0]
    assert on.chosen_on_front and on.describe().endswith("the objective's pick (b @ concurrency 4) is on it")


def test_throughput_metric_per_objective():
    assert throughput_metric("max_output_throughput") == "output_tok_per_s"
    assert throughput_metric("max_goodput") == "goodput_req_per_s"
    assert throughput_metric("min_tpot") == "output_tok_per_s"
    assert throughput_metric("max_capacity") == "requests_per_s"
    with pytest.raises(ValueError, match="allowed: max_capacity, max_goodput, max_output_throughput, min_tpot"):
        throughput_metric("fastest")
    # goodput is null on every row: the goodput front has no candidates
    assert fronts(ROWS, "max_goodput")[0].describe() == "TPOT p50 vs goodput req/s: no measured load point"


def rep(label, level, repeat, tok, tpot, status="ok"):
    """A load point of the recorded nsa_backends sweep (load.repeats=3, twin of 8 x RTX PRO 6000), rounded."""
    row = pt(label, 0, tok, tpot, level=level, status=status)
    return dict(row, point_index=[8, 32, 64].index(level) + 3 * repeat, repeat_index=repeat)


# prefill/decode backends tilelang/tilelang (T) and trtllm/trtllm (R): output tok/s and TPOT p50 (ms) per repeat;
# R's later repeats at 8 and all at 32 were not run (the sweep's budget ran out)
REPEATED = [
    rep("T", 8, 0, 73.397, 108.112), rep("T", 32, 0, 199.534, 159.622), rep("T", 64, 0, 298.127, 214.062),
    rep("T", 8, 1, 73.250, 108.133), rep("T", 32, 1, 199.873, 159.619), rep("T", 64, 1, 298.545, 214.061),
    rep("T", 8, 2, 73.363, 108.123), rep("T", 32, 2, 199.192, 159.630), rep("T", 64, 2, 297.744, 214.047),
    rep("R", 8, 0, 73.387, 108.132), rep("R", 64, 0, 297.511, 214.062), rep("R", 64, 1, 298.149, 214.096),
    rep("R", 64, 2, 298.039, 214.076), rep("R", 8, 1, 0.0, 0.0, status="not_run"),
    rep("R", 32, 0, 0.0, 0.0, status="not_run"),
]


def test_repeats_are_one_candidate_the_mean_and_never_dominate_themselves():
    chosen = {**REPEATED[2], "output_tok_per_s": 298.13867}   # the objective's pick: T @ 64, first repeat's row
    tpot = fronts(REPEATED, "max_output_throughput", chosen)[0]
    assert [(p["label"], p["point_value"], p["repeats"]) for p in tpot.points] == [
        ("T", 8, 3), ("T", 32, 3), ("T", 64, 3), ("R", 8, 1), ("R", 64, 3)]
    means = {(p["label"], p["point_value"]): (round(p["output_tok_per_s"], 5), round(p["tpot_median_ms"], 5))
             for p in tpot.points}
    assert means == {("T", 8): (73.33667, 108.12267), ("T", 32): (199.533, 159.62367),
                     ("T", 64): (298.13867, 214.05667), ("R", 8): (73.387, 108.132), ("R", 64): (297.89967, 214.078)}
    # R @ 64 (297.9 tok/s, 214.078 ms) is dominated by T @ 64 (298.1, 214.057); R @ 8 has more tok/s than T @ 8
    assert [(p["label"], p["point_value"]) for p in tpot.front] == [("T", 8), ("R", 8), ("T", 32), ("T", 64)]
    assert tpot.chosen_on_front and tpot.dominated_by == []
    assert tpot.describe() == (
        "TPOT p50 vs output tok/s: 4 of 5 load levels (means over repeats) on the front (T @ concurrency 8: "
        "73.3 / 108 ms; R @ concurrency 8: 73.4 / 108 ms; T @ concurrency 32: 200 / 160 ms; T @ concurrency 64: "
        "298 / 214 ms); the objective's pick (T @ concurrency 64) is on it")


def test_a_level_with_a_failed_repeat_is_no_candidate():
    rows = REPEATED[:9] + [dict(rep("T", 64, 3, 500.0, 1.0), status="partial")]
    levels = [(p["label"], p["point_value"]) for p in fronts(rows, "max_output_throughput")[0].points]
    assert levels == [("T", 8), ("T", 32)]


def test_plot_series_are_per_level_means_in_level_order():
    # repeats come in run order 8, 32, 64, 8, ...: a line through the rows drew 8 -> 32 -> 64 -> 8
    t = [r for r in REPEATED if r["label"] == "T"]
    assert [(lv, round(m, 5), lo, hi) for lv, m, lo, hi in level_series(t, "output_tok_per_s")] == [
        (8.0, 73.33667, 73.25, 73.397), (32.0, 199.533, 199.192, 199.873), (64.0, 298.13867, 297.744, 298.545)]
    r = [x for x in REPEATED if x["label"] == "R"]     # not_run repeats are left out
    assert level_series(r, "tpot_median_ms") == [(8.0, 108.132, 108.132, 108.132),
                                                 (64.0, 214.078, 214.062, 214.096)]
    assert level_series(r, "tpot_median_ms", kind="request_rate") == []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    draw_series(ax, level_series(t, "output_tok_per_s"), label="T")
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [8.0, 32.0, 64.0]
    # R's level 32 was not run: its line breaks there instead of drawing a value across it
    assert level_gaps(r, "tpot_median_ms") == [32.0] and level_gaps(t, "output_tok_per_s") == []
    plt.close(fig)
    fig, ax = plt.subplots()
    draw_series(ax, level_series(r, "tpot_median_ms"), level_gaps(r, "tpot_median_ms"), label="R")
    gap = ax.get_lines()[0]   # the line through the means (then the bars' caps)
    assert list(gap.get_xdata()) == [8.0, 32.0, 64.0] and math.isnan(gap.get_ydata()[1])
    assert list(gap.get_ydata())[::2] == [108.132, pytest.approx(214.078)]
    plt.close(fig)


def test_every_objective_declares_a_throughput_axis_the_report_can_name():
    from grid.report.pareto import THROUGHPUT_UNITS, throughput_metric
    from grid.report.select import OBJECTIVES

    assert {k: throughput_metric(k) for k in OBJECTIVES} == {
        "max_output_throughput": "output_tok_per_s", "max_goodput": "goodput_req_per_s",
        "min_tpot": "output_tok_per_s", "max_capacity": "requests_per_s"}
    assert all(o.pareto_axis in THROUGHPUT_UNITS for o in OBJECTIVES.values())
    assert [k for k, o in OBJECTIVES.items() if o.needs_slo] == ["max_goodput", "max_capacity"]
    assert [k for k, o in OBJECTIVES.items() if o.bisects_rate] == ["max_capacity"]
