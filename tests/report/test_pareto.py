"""Pareto fronts on hand-made load points: exact membership, ties, failed points, and the objective's pick."""

import pytest

from grid.report.pareto import dominates, fronts, pareto_front, throughput_metric


def pt(label, idx, tok, tpot, ttft=100.0, status="ok", trial="ok", level=None):
    return {"config_hash": label, "label": label, "point_index": idx, "point_kind": "concurrency",
            "point_value": float(level if level is not None else 2 ** idx), "trial_status": trial, "status": status,
            "output_tok_per_s": tok, "tpot_median_ms": tpot, "tpot_p99_ms": tpot * 2, "ttft_median_ms": ttft,
            "ttft_p99_ms": ttft * 3, "goodput_req_per_s": None}


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
