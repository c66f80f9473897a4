import pytest

from grid.storage.schema import judged_point_row
from grid.config.schema import ObjectiveSpec, SLOSpec
from grid.report.render import incomplete_note, markdown, no_winner_text
from grid.report.select import OBJECTIVES, fmt_delta, fmt_score, rank, rejudge, rising_note


def row(h, label, idx, level, out, status="ok", trial="ok", ttft99=100.0, err=None, log=None):
    return judged_point_row({}, **{
        "config_hash": h, "label": label, "point_index": idx, "point_value": level, "status": status,
        "trial_status": trial, "trial_error_class": err, "trial_error_message": "m" if err else None,
        "log_tail": log, "output_tok_per_s": out, "ttft_p99_ms": ttft99, "tpot_median_ms": 50.0,
        "goodput_req_per_s": None, "error_class": None,
        # as rejudge() leaves a row for p99 SLOs (TPOT p99 50 ms)
        "slo_ttft_at_pct_ms": ttft99, "slo_tpot_at_pct_ms": 50.0, "slo_e2e_at_pct_ms": None})


ROWS = [
    row("a", "A", 0, 1, 10.0), row("a", "A", 1, 64, 200.0),
    row("b", "B", 0, 1, 12.0), row("b", "B", 1, 64, 180.0, ttft99=5000.0),
    row("c", "C", 0, 1, None, status="not_run", trial="failed", err="startup_exit",
        log="[x] RuntimeError: Unsupported architecture\n[x] exiting"),
    row("d", "D", 0, 1, None, status="not_run", trial="invalid", err="garbage_output"),
]


def test_rank_max_throughput_no_slo():
    v = rank(ROWS, ObjectiveSpec())
    assert [x.label for x in v] == ["A", "B", "D", "C"]
    assert v[0].outcome == "best" and v[0].score == 200.0
    assert v[1].reason == "180 tok/s at level 64 vs best 200 (-10.0%)"
    tied = rank([*ROWS, row("e", "E", 0, 64, 199.0)], ObjectiveSpec())
    assert tied[0].label == "A" and "1 other configuration within the default 1% (spread not measured)" in tied[0].reason
    assert tied[1].label == "E" and "a tie" in tied[1].reason and "a tie" not in tied[2].reason
    assert v[2].outcome == "invalid" and v[3].outcome == "failed"
    assert "Unsupported architecture" in v[3].reason


def test_rank_with_slo_excludes_points():
    v = rank(ROWS, ObjectiveSpec(slo=SLOSpec(ttft_ms=1000)))
    best = v[0]
    assert best.label == "A" and best.score == 200.0
    assert "not counted" not in best.reason
    b = next(x for x in v if x.label == "B")
    assert b.score == 12.0            # its 64-stream point missed the TTFT SLO
    v = rank(ROWS[2:4], ObjectiveSpec(slo=SLOSpec(ttft_ms=1000)))          # B alone: best, at its lower level
    assert v[0].reason.endswith("12.0 tok/s at level 1; not counted: level 64: p99 TTFT 5000 ms > 1000")
    assert b.reason == "12.0 tok/s at level 1 vs best 200 (-94.0%); not counted: level 64: p99 TTFT 5000 ms > 1000"


def test_rank_refuses_rows_not_judged_for_the_slos():
    raw = [{k: v for k, v in r.items() if not k.startswith("slo_")} for r in ROWS]
    assert [v.label for v in rank(raw, ObjectiveSpec())][:2] == ["A", "B"]      # no SLO: nothing to judge
    with pytest.raises(ValueError, match="judged for these SLOs by rejudge"):
        rank(raw, ObjectiveSpec(slo=SLOSpec(ttft_ms=1000)))


def test_rank_unknown_objective():
    with pytest.raises(ValueError, match="allowed: max_capacity, max_goodput, max_output_throughput, min_tpot"):
        rank(ROWS, ObjectiveSpec(kind="fastest"))


# The report re-judges every load point under the current SLOs, from the stored requests ---------------------------
def point(h, level, idx, ttfts, tpot=20.0, duration_s=10.0, stored_slo=None, status="ok", out=100.0):
    """A load point measured with `stored_slo` (its stored goodput is whatever that run computed) and its requests."""
    lp = {**row(h, h.upper(), idx, level, out, status=status, ttft99=max(ttfts)), "requests_total": len(ttfts),
          "duration_s": duration_s, "ttft_median_ms": sorted(ttfts)[len(ttfts) // 2], "tpot_p99_ms": tpot,
          "goodput_req_per_s": stored_slo, "slo_ttft_ms": None, "slo_percentile": None, "point_kind": "concurrency"}
    lp = {k: v for k, v in lp.items() if not k.endswith("_at_pct_ms")}  # as stored: not yet judged
    reqs = [{"config_hash": h, "point_index": idx, "status": "ok", "ttft_ms": t, "tpot_ms": tpot, "e2e_ms": t + 1000}
            for t in ttfts]
    return lp, reqs


def table(*points):
    return [p[0] for p in points], [r for p in points for r in p[1]]


def test_slo_percentile_50_and_any_other_is_judged():
    # bug: p50 looked up a column "ttft_p50_ms" that does not exist, so every point missed "p50 TTFT - ms > 5000"
    rows, reqs = table(point("a", 1, 0, [100.0, 200.0, 9000.0]), point("b", 1, 0, [6000.0, 7000.0, 100.0]))
    spec = ObjectiveSpec(slo=SLOSpec(ttft_ms=5000, percentile=50))
    v = rank(rejudge(rows, reqs, spec.slo), spec)         # from the requests
    assert v[0].label == "A" and v[0].outcome == "best"
    assert v[1].reason == "no load point met the SLOs: concurrency 1: p50 TTFT 6000 ms > 5000"
    spec = ObjectiveSpec(slo=SLOSpec(ttft_ms=5000, percentile=37.5))
    v = rank(rejudge(rows, reqs, spec.slo), spec)
    assert [x.outcome for x in v] == ["best", "lost"]     # p37.5 (linear interpolation): A 175 ms, B 4525 ms
    spec = ObjectiveSpec(slo=SLOSpec(ttft_ms=100, percentile=37.5))
    v = rank(rejudge(rows, reqs, spec.slo), spec)
    assert v[0].outcome == "no_eligible_point" and "p37.5 TTFT 175 ms > 100" in v[0].reason
    with pytest.raises(ValueError, match="rejudge"):     # stored rows carry no judgement for these SLOs
        rank(rows, spec)


def test_max_goodput_rejudged_for_configurations_measured_under_other_slos():
    # measured under the default objective (no SLO: goodput null), or under other SLOs (a stale goodput)
    rows, reqs = table(point("a", 1, 0, [100.0] * 4, duration_s=10.0), point("a", 8, 1, [100.0] * 8, duration_s=4.0),
                       point("b", 1, 0, [100.0] * 4, duration_s=8.0, stored_slo=99.0),
                       point("c", 1, 0, [4000.0] * 4), point("c", 8, 1, [5000.0] * 8))
    spec = ObjectiveSpec(kind="max_goodput", slo=SLOSpec(ttft_ms=3000, percentile=50))
    with pytest.raises(ValueError, match="rejudge"):     # the stale 99 req/s of other SLOs is never ranked
        rank(rows, spec)
    v = rank(rejudge(rows, reqs, spec.slo), spec)
    assert [(x.label, x.outcome) for x in v] == [("A", "best"), ("B", "lost"), ("C", "no_eligible_point")]
    assert v[0].score == 2.0 and v[1].score == 0.5      # 8 good requests / 4 s; 4 / 8 s
    assert v[0].reason.startswith("highest goodput (requests/s within every SLO) at any load point meeting the SLOs "
                                  "(p50 TTFT <= 3000 ms): 2.00 req/s at concurrency 8")
    # every point of C is ok but misses the SLO: the reason names the misses, never "level 1: ok"
    assert v[2].reason == ("no load point met the SLOs: concurrency 1: p50 TTFT 4000 ms > 3000; "
                           "concurrency 8: p50 TTFT 5000 ms > 3000")
    assert ": ok" not in " ".join(x.reason for x in v)


def test_rejudge_is_pure_and_flags_points_whose_requests_are_missing():
    rows, reqs = table(point("a", 1, 0, [100.0] * 4), point("a", 8, 1, [100.0] * 8))
    before = [dict(r) for r in rows]
    out = rejudge(rows, reqs[:4], SLOSpec(ttft_ms=3000))  # the requests of level 8 are gone
    assert rows == before
    assert out[0]["goodput_req_per_s"] == 0.4 and out[0]["slo_met"] is True and out[0]["slo_unjudged"] is None
    assert out[1]["goodput_req_per_s"] is None and "0 of its 8 requests" in out[1]["slo_unjudged"]
    v = rank(out, ObjectiveSpec(kind="max_goodput", slo=SLOSpec(ttft_ms=3000)))
    assert v[0].score == 0.4
    v = rank(rejudge(rows, [], SLOSpec(ttft_ms=3000)), ObjectiveSpec(slo=SLOSpec(ttft_ms=3000)))
    assert v[0].outcome == "no_eligible_point" and "SLOs not judged: 0 of its 4 requests" in v[0].reason


def test_max_goodput_without_slo_says_what_is_missing():
    rows, reqs = table(point("a", 1, 0, [100.0] * 4))
    v = rank(rejudge(rows, reqs, SLOSpec()), ObjectiveSpec(kind="max_goodput"))
    assert v[0].reason == ("no eligible load point: concurrency 1: goodput needs an SLO (set objective.slo.ttft_ms, "
                           "tpot_ms or e2e_ms)")


def test_best_reason_names_slos_only_when_set_and_scores_have_three_figures():
    v = rank(ROWS, ObjectiveSpec())
    assert "SLO" not in v[0].reason
    assert v[0].reason.startswith("highest output throughput at any load point: 200 tok/s at level 64")
    v = rank([{**r, "slo_tpot_at_pct_ms": 60.0} for r in ROWS], ObjectiveSpec(slo=SLOSpec(ttft_ms=1000, tpot_ms=80)))
    assert v[0].reason.startswith("highest output throughput at any load point meeting the SLOs "
                                  "(p99 TTFT <= 1000 ms, p99 TPOT <= 80 ms): 200 tok/s")
    v = rank([row("a", "A", 0, 1, 1.0), row("b", "B", 0, 1, 1.0)], ObjectiveSpec(kind="min_tpot"))
    assert v[0].reason.startswith("lowest median TPOT at the lowest load level: 50.0 ms")
    close = [{**row("a", "A", 0, 8, 1.0), "goodput_req_per_s": 0.3131},
             {**row("b", "B", 0, 8, 1.0), "goodput_req_per_s": 0.3125}]
    v = rank(close, ObjectiveSpec(kind="max_goodput", slo=SLOSpec(ttft_ms=1000)))
    assert v[1].reason == "0.312 req/s at level 8 vs best 0.313 (-0.2%): a tie (within the default 1%; spread " \
                          "not measured: load.repeats=1)"
    assert [fmt_score(x) for x in (0.0, 0.31249, 1.0, 12.34, 180.0, 1234.5, 98765.4)] == \
        ["0", "0.312", "1.00", "12.3", "180", "1234", "98765"]
    near = [row("a", "A", 0, 8, 75.4912), row("b", "B", 0, 8, 75.4601), row("c", "C", 0, 8, 75.4911)]
    v = rank(near, ObjectiveSpec())                       # more figures until the scores print differently
    assert [fmt_delta(x) for x in (-10.0, 0.0, -0.0413, 0.00004)] == ["-10.0%", "+0.0%", "-0.041%", "+<0.0001%"]
    assert v[1].reason.startswith("75.4911 tok/s at level 8 vs best 75.4912 (-0.00013%): a tie")
    assert v[2].reason.startswith("75.46 tok/s at level 8 vs best 75.49 (-0.041%): a tie")


def test_rising_note_when_the_best_is_the_highest_level_and_still_climbing():
    v = rank(ROWS, ObjectiveSpec())                       # A: 10 -> 200 tok/s from level 1 to 64
    assert v[0].reason.endswith("; throughput still rising at the highest level tested (level 64, +1900.0% over level 1): "
                                "the peak may lie beyond; add higher load.concurrency levels")
    assert "still rising" not in v[1].reason
    obj = OBJECTIVES["max_output_throughput"]
    flat = [row("a", "A", 0, 32, 100.0), row("a", "A", 1, 64, 100.9)]   # within the tie threshold: a plateau
    assert rising_note(obj, flat, flat[1]) is None
    peak = [row("a", "A", 0, 32, 100.0), row("a", "A", 1, 64, 150.0), row("a", "A", 2, 128, 140.0)]
    assert rising_note(obj, peak, peak[1]) is None                      # a higher level was tested (and fell)
    failed_above = [*peak[:2], row("a", "A", 2, 128, None, status="failed")]
    assert rising_note(obj, failed_above, failed_above[1]) is None      # it was tested; it failed
    assert rising_note(obj, peak[:1], peak[0]) is None                  # one level: nothing to compare with
    queued = [row("a", "A", 0, 32, 100.0), {**row("a", "A", 1, 64, 150.0), "bottleneck": "kv-capacity/queue-bound"}]
    assert rising_note(obj, queued, queued[1]) is None                  # requests queue: the server is saturated
    rate = [{**r, "point_kind": "rate"} for r in peak[:2]] + [{**peak[2], "point_kind": "concurrency"}]
    assert rising_note(obj, rate, rate[1]).endswith("add higher load.request_rate levels")
    assert rising_note(OBJECTIVES["min_tpot"], peak, peak[1]) is None
    v = rank(peak, ObjectiveSpec())
    assert "still rising" not in v[0].reason and v[0].reason.endswith("150 tok/s at level 64")
    # the level above was planned but skipped by early stopping: it was not left untested
    skipped = [*peak[:2], {**row("a", "A", 2, 128, None, status="not_run"), "error_class": "early_stop_twin_bound",
                           "skip_reason": "the twin's upper bound here, 120 tok/s, is below the best measured 150"}]
    v = rank(skipped, ObjectiveSpec())
    assert v[0].reason == ("highest output throughput at any load point: 150 tok/s at level 64; not counted: level 128: "
                           "not_run (early_stop_twin_bound: the twin's upper bound here, 120 tok/s, is below the best "
                           "measured 150)")


def test_no_winner_says_how_each_configuration_ended():
    refused = [row(h, h.upper(), 0, 8, None, status="not_run", trial="invalid", err="refused") for h in "abc"]
    v = rank(refused, ObjectiveSpec())
    # +sweep=cuda_graph engine.version=0.5.23 on SM120: all six refused, and the run said only "No configuration
    # qualified."
    assert no_winner_text(v) == ("No configuration qualified: 3 invalid (every configuration refused before launch: "
                                 "nothing ran).")
    assert "**No configuration qualified: 3 invalid (every configuration refused before launch: nothing ran).**" in \
        markdown(v, "t")
    mixed = rank([*refused[:1], *ROWS[2:3], *ROWS[3:4]], ObjectiveSpec(slo=SLOSpec(ttft_ms=1)))
    assert no_winner_text(mixed) == ("No configuration qualified: 1 invalid, 1 no_eligible_point "
                                     "(1 refused before launch).")


def test_incomplete_note():
    assert incomplete_note(6, 6) is None
    assert incomplete_note(6, 4) == ("Incomplete: 2 of 6 configurations have no result yet (interrupted?); run the "
                                     "same command again to run them — the best below is among the 4 recorded.")
    assert incomplete_note(3, 2).startswith("Incomplete: 1 of 3 configurations has no result yet")
    assert "nothing is recorded yet" in incomplete_note(2, 0)
    md = markdown(rank([{**r, "command": "x"} for r in ROWS], ObjectiveSpec()), "t", headline=[incomplete_note(6, 4)])
    assert md.splitlines()[2] == f"**{incomplete_note(6, 4)}**"   # it qualifies the answer: above it


def rep(h, label, idx, r, level, out):
    return {**row(h, label, idx, level, out), "repeat_index": r, "point_kind": "concurrency"}


def test_repeats_score_by_mean_and_tie_by_confidence_interval():
    from grid.report.select import is_tie, level_scores, spread_text

    # A: 98, 100, 102 (95% CI 95.03 .. 104.97); B: 104, 106, 108 (101.03 .. 110.97); C: 86, 87, 88 (84.5 .. 89.5)
    rows = [rep("a", "A", i, i, 64, x) for i, x in enumerate((98.0, 100.0, 102.0))]
    rows += [rep("b", "B", i, i, 64, x) for i, x in enumerate((104.0, 106.0, 108.0))]
    rows += [rep("c", "C", i, i, 64, x) for i, x in enumerate((86.0, 87.0, 88.0))]
    v = rank(rows, ObjectiveSpec())
    assert [x.label for x in v] == ["B", "A", "C"]
    assert v[0].score == 106.0 and v[1].score == 100.0 and v[2].score == 87.0
    assert v[0].reason.startswith("highest output throughput at any load point: 106 tok/s at concurrency 64 "
                                  "(mean of 3 repeats, min 104 .. max 108 tok/s, 95% CI 101 .. 111)")
    assert "1 other configuration within the measured spread (confidence intervals overlap)" in v[0].reason
    assert v[1].reason == ("100 tok/s at concurrency 64 vs best 106 (-5.7%): tied within the measured spread "
                           "(95% CI 95.0 .. 105 vs 101 .. 111 tok/s overlap)")
    assert v[2].reason == ("87.0 tok/s at concurrency 64 vs best 106 (-17.9%): outside the measured spread "
                           "(95% CI 84.5 .. 89.5 vs 101 .. 111 tok/s)")
    # one repeat short of eligible: the level does not count
    broken = rows[:2] + [{**rows[2], "status": "failed"}]
    levels = level_scores(broken, broken[:2], "output_tok_per_s")
    assert levels == []
    assert spread_text(None, "tok/s").startswith("spread not measured (load.repeats=1)")
    assert is_tie(None, None, -0.5, "tok/s")[0] and not is_tie(None, None, -1.5, "tok/s")[0]
