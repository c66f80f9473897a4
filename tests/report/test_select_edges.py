"""Selection and ranking at their edges: level names, SLO texts, number formats, re-judging, misses, ties, order."""

from __future__ import annotations


from grid.storage.schema import judged_point_row, load_point_row
from grid.config.schema import ObjectiveSpec, SLOSpec
from grid.metrics.loadpoint import SLO
from grid.plan import level_name
from grid.report.select import OBJECTIVES, _failure_reason, fmt_delta, fmt_scores, rank, rejudge, rising_note, slo_text

THROUGHPUT = OBJECTIVES["max_output_throughput"]


def same(point: dict, row: dict) -> bool:
    """The verdict's best point is that row: the same configuration and load point, with the same numbers."""
    return point is not None and all(point.get(k) == v for k, v in row.items())


def pt(h, idx, level, out, *, label=None, status="ok", trial="ok", kind="concurrency", err=None, msg=None, log=None,
       error_class=None, tpot=50.0, ttft=100.0, e2e=None, goodput=None):
    return judged_point_row({}, **{
        "config_hash": h, "label": label or h.upper(), "point_index": idx, "point_value": float(level),
        "point_kind": kind, "status": status, "trial_status": trial, "trial_error_class": err,
        "trial_error_message": msg, "log_tail": log, "output_tok_per_s": out, "tpot_median_ms": tpot,
        "goodput_req_per_s": goodput, "error_class": error_class,
        "slo_ttft_at_pct_ms": ttft, "slo_tpot_at_pct_ms": tpot, "slo_e2e_at_pct_ms": e2e})


def test_registry():
    assert {k: (o.metric, o.higher_is_better) for k, o in OBJECTIVES.items()} == {
        "max_output_throughput": ("output_tok_per_s", True), "max_goodput": ("goodput_req_per_s", True),
        "min_tpot": ("tpot_median_ms", False), "max_capacity": ("point_value", True)}


def test_level_names():
    assert level_name({"point_value": 8.0, "point_kind": "concurrency"}) == "concurrency 8"
    assert level_name({"point_value": 1.5, "point_kind": "rate"}) == "1.5 req/s"
    assert level_name({"point_value": float("inf"), "point_kind": "rate"}) == "inf req/s"
    assert level_name({"point_value": 8.0}) == "level 8"


def test_slo_text():
    assert slo_text(None) == "" and slo_text(SLO()) == ""
    assert slo_text(SLO(ttft_ms=2000, tpot_ms=150, e2e_ms=5000, percentile=99.5)) == \
        "p99.5 TTFT <= 2000 ms, p99.5 TPOT <= 150 ms, p99.5 E2E <= 5000 ms"


def test_fmt_scores_and_delta():
    assert fmt_scores(1.000001, 1.000002) == ("1.00000", "1.00000")        # at most 6 figures
    assert fmt_scores(12.34, 12.36) == ("12.3", "12.4") and fmt_scores(12.34, 12.31) == ("12.34", "12.31")
    assert fmt_delta(1e-4) == "+0.0001%" and fmt_delta(-1e-4) == "-0.0001%"
    assert fmt_delta(5e-5) == "+<0.0001%" and fmt_delta(-5e-5) == "-<0.0001%"
    assert fmt_delta(0.0) == "+0.0%" and fmt_delta(0.1) == "+0.1%" and fmt_delta(-0.05) == "-0.05%"


def test_rejudge_edges():
    reqs = [{"config_hash": "a", "point_index": 0, "status": "ok", "ttft_ms": 10.0, "tpot_ms": 1.0, "e2e_ms": 90.0}]
    row = load_point_row({}, config_hash="a", point_index=0, requests_total=1, duration_s=1.0)
    (out,) = rejudge([row], reqs, SLOSpec(e2e_ms=100.0, percentile=50.0))
    assert out["slo_e2e_ms"] == 100.0 and out["slo_attainment_e2e"] == 1.0 and out["slo_e2e_at_pct_ms"] == 90.0
    # no requests recorded and no count: nothing is missing, so it is judged (no request: nothing met)
    (empty,) = rejudge([load_point_row({}, config_hash="b", point_index=0)], reqs, SLOSpec(ttft_ms=50.0))
    assert empty["slo_unjudged"] is None and empty["slo_ttft_ms"] == 50.0
    (lost,) = rejudge([{**row, "requests_total": 3}], reqs, SLOSpec(ttft_ms=50.0))
    assert lost["slo_unjudged"] == "SLOs not judged: 1 of its 3 requests are in parquet/requests"
    assert lost["slo_ttft_ms"] == 50.0 and lost["slo_percentile"] == 99.0 and lost["slo_met"] is None


def test_failure_reasons():
    assert _failure_reason(load_point_row({})) == "failed: "
    assert _failure_reason(load_point_row({}, trial_error_class="server_crash", trial_error_message="exit 1")) == \
        "server_crash: exit 1"
    log = "[2026] INFO ok\n[2026] RuntimeError: CUDA error: out of memory\n[2026] exiting"
    crash = load_point_row({}, trial_error_class="server_crash", trial_error_message="exit 1", log_tail=log)
    assert _failure_reason(crash) == "server_crash: exit 1 | log: RuntimeError: CUDA error: out of memory"
    exited = load_point_row({}, trial_error_class="startup_exit", trial_error_message="exited", log_tail=log)
    assert _failure_reason(exited) \
        == "startup_exit: RuntimeError: CUDA error: out of memory"
    assert _failure_reason(load_point_row({}, trial_error_class="startup_exit", trial_error_message="exited")) == \
        "startup_exit: exited"


def test_failed_and_invalid_verdicts_keep_hash_and_rows():
    rows = [pt("f", 0, 1, None, status="not_run", trial="failed", err="startup_exit", msg="m")]
    (v,) = rank(rows, ObjectiveSpec())
    assert (v.config_hash, v.outcome, v.score, v.best_point, v.rows) == ("f", "failed", None, None, rows)


def test_not_counted_points_and_later_best():
    rows = [pt("a", 0, 1, 10.0, status="failed", error_class="server_crash"),
            pt("a", 1, 8, 30.0, status="partial"), pt("a", 2, 16, 50.0), pt("a", 3, 32, 40.0)]
    (v,) = rank(rows, ObjectiveSpec())
    assert v.outcome == "best" and same(v.best_point, rows[2]) and v.score == 50.0
    assert v.reason.endswith("; not counted: concurrency 1: failed (server_crash); concurrency 8: partial")


def test_slo_misses_and_no_eligible_point():
    rows = [pt("a", 0, 1, 10.0, ttft=100.0, tpot=20.0, e2e=5000.0), pt("a", 1, 8, 30.0, ttft=None, e2e=6000.0)]
    obj = ObjectiveSpec(slo=SLOSpec(tpot_ms=20.0, e2e_ms=5000.0))
    (v,) = rank(rows, obj)
    assert v.outcome == "best" and same(v.best_point, rows[0])                       # at the thresholds: met
    assert v.reason.endswith("not counted: concurrency 8: p99 TPOT 50.0 ms > 20, p99 E2E 6000 ms > 5000")
    none = [pt("b", 0, 1, 10.0, ttft=None), pt("b", 1, 2, 10.0, ttft=3000.0)]
    (v,) = rank(none, ObjectiveSpec(slo=SLOSpec(ttft_ms=2000.0)))
    assert (v.config_hash, v.outcome, v.best_point, v.rows) == ("b", "no_eligible_point", None, none)
    assert v.reason == ("no load point met the SLOs: concurrency 1: p99 TTFT not measured (SLO 2000 ms); "
                        "concurrency 2: p99 TTFT 3000 ms > 2000")


def test_no_score_reasons():
    (v,) = rank([pt("a", 0, 1, None)], ObjectiveSpec())
    assert v.reason == "no eligible load point: concurrency 1: output_tok_per_s not measured"
    (v,) = rank([pt("a", 0, 1, 5.0)], ObjectiveSpec(kind="max_goodput"))
    assert v.reason.endswith("goodput needs an SLO (set objective.slo.ttft_ms, tpot_ms or e2e_ms)")
    (v,) = rank([pt("a", 0, 1, 5.0, goodput=None)], ObjectiveSpec(kind="max_goodput", slo=SLOSpec(ttft_ms=1e6)))
    assert v.reason.endswith("goodput_req_per_s not measured")


def test_equal_scores_keep_the_first_point():
    rows = [pt("a", 0, 1, 50.0), pt("a", 1, 8, 50.0)]
    assert same(rank(rows, ObjectiveSpec())[0].best_point, rows[0])
    low = [pt("b", 0, 1, 5.0, tpot=20.0), pt("b", 1, 1, 5.0, tpot=20.0)]       # a level listed twice
    assert same(rank(low, ObjectiveSpec(kind="min_tpot"))[0].best_point, low[0])


def test_ties_count_and_the_boundary():
    rows = [pt("a", 0, 1, 100.0), pt("b", 0, 1, 99.5), pt("c", 0, 1, 99.2), pt("d", 0, 1, 99.0)]
    v = {x.config_hash: x for x in rank(rows, ObjectiveSpec())}
    assert v["a"].reason.endswith("; 2 other configurations within the default 1% (spread not measured): a tie, "
                                  "any of them will do")
    assert v["d"].reason == "99.0 tok/s at concurrency 1 vs best 100 (-1.0%)"     # exactly 1 %: not a tie
    assert v["b"].reason.endswith("(-0.5%): a tie (within the default 1%; spread not measured: load.repeats=1)")
    one = {x.config_hash: x for x in rank(rows[:2], ObjectiveSpec())}
    assert one["a"].reason.endswith("; 1 other configuration within the default 1% (spread not measured): a tie, "
                                    "any of them will do")


def test_zero_best_score():
    rows = [pt("a", 0, 1, 0.0), pt("b", 0, 1, 0.0)]
    v = rank(rows, ObjectiveSpec())
    assert v[1].reason == ("0 tok/s at concurrency 1 vs best 0 (+0.0%): a tie (within the default 1%; spread not "
                           "measured: load.repeats=1)")


def test_loser_not_counted_points_are_listed():
    rows = [pt("a", 0, 1, 100.0), pt("b", 0, 1, 50.0), pt("b", 1, 2, None, status="failed"),
            pt("b", 2, 4, None, status="not_run")]
    v = {x.config_hash: x for x in rank(rows, ObjectiveSpec())}
    assert v["b"].reason.endswith("; not counted: concurrency 2: failed; concurrency 4: not_run")


def test_order_of_configurations_without_score():
    rows = [pt("z", 0, 1, None, label="zz", status="failed"), pt("i", 0, 1, None, label="aa", trial="invalid"),
            pt("f", 0, 1, None, label="ab", trial="failed"), pt("n", 0, 1, None, label="ac", trial="failed")]
    assert [(v.label, v.outcome) for v in rank(rows, ObjectiveSpec())] == [
        ("zz", "no_eligible_point"), ("aa", "invalid"), ("ab", "failed"), ("ac", "failed")]


def rising(points):
    rows = [pt("a", i, level, score) for i, (level, score) in enumerate(points)]
    return rising_note(THROUGHPUT, rows, rows[-1])


def test_rising_note_edges():
    assert rising([(1, 10.0), (4, 50.0), (8, 100.0)]) == (
        "throughput still rising at the highest level tested (concurrency 8, +100.0% over concurrency 4): the peak "
        "may lie beyond; add higher load.concurrency levels")
    assert rising([(1, 100.0), (8, 101.0)]) is None                              # exactly 1 %: a tie
    assert rising([(1, 0.5), (8, 1.0)]).startswith("throughput still rising at the highest level tested "
                                                   "(concurrency 8, +100.0% over concurrency 1)")
    assert "(concurrency 8, from 0 at concurrency 1)" in rising([(1, 0.0), (8, 1.0)])
    assert rising([(1, 0.0), (8, 0.0)]) is None
    assert rising([(1, 5.0), (8, None)]) is None and rising([(1, None), (8, 5.0)]) is None
    rate = [pt("r", 0, 1.0, 10.0, kind="rate"), pt("r", 1, 2.0, 20.0, kind="rate")]
    assert rising_note(THROUGHPUT, rate, rate[-1]).endswith("add higher load.request_rate levels")


def test_points_after_a_miss_are_still_judged():
    slo_first = [pt("a", 0, 1, 90.0, ttft=5000.0), pt("a", 1, 8, 50.0, ttft=100.0)]
    assert same(rank(slo_first, ObjectiveSpec(slo=SLOSpec(ttft_ms=2000.0)))[0].best_point, slo_first[1])
    unscored_first = [pt("b", 0, 1, None), pt("b", 1, 8, 50.0)]
    assert same(rank(unscored_first, ObjectiveSpec())[0].best_point, unscored_first[1])


def test_min_tpot_takes_the_lowest():
    # two measurements of the lowest level are repeats of it: the score is their mean, not the luckier one
    low = [pt("b", 0, 1, 5.0, tpot=20.0), pt("b", 1, 1, 5.0, tpot=10.0), pt("b", 2, 8, 5.0, tpot=1.0)]
    (v,) = rank(low, ObjectiveSpec(kind="min_tpot"))
    assert v.best_point["point_value"] == 1.0 and v.score == 15.0
    assert (v.interval.n, v.interval.low, v.interval.high) == (2, 10.0, 20.0)


def test_unjudged_points_are_skipped_not_the_rest():
    rows = [{**pt("a", 0, 1, 90.0), "slo_unjudged": "SLOs not judged: 1 of its 3 requests are in parquet/requests"},
            pt("a", 1, 8, 50.0)]
    (v,) = rank(rows, ObjectiveSpec(slo=SLOSpec(ttft_ms=2000.0)))
    assert same(v.best_point, rows[1])
    assert v.reason.endswith("; not counted: concurrency 1: SLOs not judged: 1 of its 3 requests are in "
                             "parquet/requests")


def test_capacity_ranks_the_highest_rate_that_met_the_slos():
    # two configurations' bisection probes (p99 TPOT in ms as re-judged), recorded as rate points
    slo = SLOSpec(tpot_ms=8.0)
    rows = [pt("a", 0, 4.2, 250.0, kind="rate", tpot=7.8), pt("a", 1, 7.0, 544.0, kind="rate", tpot=10.3),
            pt("a", 2, 5.6, 265.0, kind="rate", tpot=8.45), pt("a", 3, 4.9, 260.0, kind="rate", tpot=7.9),
            pt("b", 0, 4.2, 250.0, kind="rate", tpot=7.5), pt("b", 1, 7.0, 500.0, kind="rate", tpot=7.9),
            pt("b", 2, 9.8, 600.0, kind="rate", tpot=9.0, status="partial", error_class="stall_timeout"),
            pt("b", 3, 8.4, 580.0, kind="rate", tpot=7.95),
            pt("b", 4, 1.0, 90.0, tpot=7.0)]                  # a concurrency point: not a rate, not counted
    best, lost = rank(rows, ObjectiveSpec(kind="max_capacity", slo=slo))
    assert (best.label, best.score, lost.label, lost.score) == ("B", 8.4, "A", 4.9)
    assert best.reason.startswith("highest request rate (open loop, found by bisection) meeting the SLOs "
                                  "(p99 TPOT <= 8 ms): 8.40 req/s; not counted: 9.8 req/s: partial (stall_timeout)")
    assert lost.reason.startswith("4.90 req/s vs best 8.40 (-41.7%)")


def test_points_skipped_by_early_stopping_are_named_with_their_reason():
    rows = [pt("a", 0, 1, 100.0), pt("a", 1, 8, 700.0),
            pt("b", 0, 1, 110.0), {**pt("b", 1, 8, None, status="not_run", error_class="early_stop_twin_bound"),
                                   "skip_reason": "the twin's upper bound here, 400 tok/s (forecast 300 / (1 - 0.25)), "
                                                  "is below the best measured 700 tok/s"}]
    best, lost = rank(rows, ObjectiveSpec(kind="max_output_throughput"))
    assert (best.label, lost.label, lost.score) == ("A", "B", 110.0)
    assert lost.reason == ("110 tok/s at concurrency 1 vs best 700 (-84.3%); not counted: concurrency 8: not_run "
                           "(early_stop_twin_bound: the twin's upper bound here, 400 tok/s (forecast 300 / (1 - 0.25)), "
                           "is below the best measured 700 tok/s)")


def test_points_skipped_by_one_early_stopping_rule_are_named_once():
    from grid.report.select import EARLY_STOP_TEXT
    from grid.search.levels import EARLY_STOP_CLASSES

    assert set(EARLY_STOP_TEXT) == set(EARLY_STOP_CLASSES)
    # +sweep=nsa_backends: the best's "why" repeated a 120-character reason for each of its 5 skipped points
    bound = "the twin's upper bound here, {} tok/s (forecast {} / (1 - 0.25)), is below the best measured 700 tok/s"
    rows = [pt("a", 0, 1, 100.0), pt("a", 1, 8, 700.0),
            pt("b", 0, 1, 110.0),
            *({**pt("b", i, level, None, status="not_run", error_class="early_stop_twin_bound"),
               "skip_reason": bound.format(400 * i, 300 * i)} for i, level in ((1, 8), (2, 16), (3, 32)))]
    best, lost = rank(rows, ObjectiveSpec(kind="max_output_throughput"))
    assert lost.reason == ("110 tok/s at concurrency 1 vs best 700 (-84.3%); not counted: 3 load points not run "
                           "(concurrency 8, concurrency 16, concurrency 32): early_stop_twin_bound: the twin's upper "
                           "bound at each is below the best score measured before it (each point's reason: "
                           "load_points.skip_reason)")


def test_capacity_with_every_probe_held_says_to_probe_further():
    rows = [pt("a", i, r, 100.0, kind="rate", tpot=5.0) for i, r in enumerate((4.2, 7.0, 14.0, 28.0))]
    (best,) = rank(rows, ObjectiveSpec(kind="max_capacity", slo=SLOSpec(tpot_ms=8.0)))
    assert best.score == 28.0 and best.reason.endswith(
        "28.0 req/s; the SLOs held at every rate probed, up to 28 req/s: the capacity may lie beyond; raise "
        "objective.capacity_max_probes")


def test_meets_slos_judges_as_rank_does():
    from grid.report.select import meets_slos

    row = pt("a", 0, 4.2, 250.0, kind="rate", tpot=7.99)
    assert meets_slos(row, SLOSpec(tpot_ms=8.0)) is True
    assert meets_slos({**row, "slo_met": False}, SLOSpec(tpot_ms=8.0)) is True      # the percentile decides
    assert meets_slos(row, SLOSpec(tpot_ms=7.9)) is False
    assert meets_slos({**row, "status": "partial"}, SLOSpec(tpot_ms=8.0)) is False
    assert meets_slos(row, SLOSpec()) is None
