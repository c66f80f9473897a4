"""grid never presents host noise as a finding: each load point against a server that keeps real time records how late
the load generator's own loop ran (client_lag_pct); beyond grid.metrics.hostnoise.HOST_NOISE_MAX_PCT the point is not
counted, the report says so, and a resume measures the configuration again. On the twin's virtual clock nothing is
late: no point records a loss."""

import pytest

from grid.storage.schema import judged_point_row
from grid.config.schema import ObjectiveSpec
from grid.metrics.hostnoise import (HOST_NOISE_MAX_PCT, HOST_PERTURBED_PCT, counted_noise, host_error_pct, host_noise,
                                    perturbed)
from grid.report.select import behind_note, rank
from grid.sweep import rerun

from .test_measure import run_one, spec_for


def point(h, label, level, out, lag):
    return judged_point_row({}, config_hash=h, label=label, point_index=level, point_kind="concurrency",
                            point_value=level, repeat_index=0, status="ok", trial_status="ok", output_tok_per_s=out,
                            client_lag_pct=lag, command="x")


@pytest.mark.unit
def test_points_the_host_took_too_much_from_are_not_counted():
    assert HOST_NOISE_MAX_PCT == 20.0
    assert not host_noise({"client_lag_pct": 20.0}) and host_noise({"client_lag_pct": 20.01})
    assert not host_noise({"client_lag_pct": None}) and not host_noise({})
    # a row recorded before schema version 13 by the wall-clock twin: its own lag still counts
    assert host_noise({"twin_behind_pct": 41.0, "client_lag_pct": 0.2}) and not host_noise({"twin_behind_pct": 19.0})
    # the case: the same configuration measured while the host was busy looks 35% faster than the others
    rows = [point("a", "graphs", 8, 100.0, 0.8), point("a", "graphs", 48, 287.0, 1.0),
            point("b", "no graphs", 8, 100.0, 0.9), point("b", "no graphs", 48, 390.0, 38.2)]
    verdicts = rank(rows, ObjectiveSpec())
    assert [(v.label, v.outcome, v.score) for v in verdicts] == [("graphs", "best", 287.0), ("no graphs", "lost", 100.0)]
    assert verdicts[1].reason.endswith("not counted: host noise: the host was too busy while measuring concurrency 48 "
                                       "(load generator 38.2% late), not the configuration (running the same "
                                       "command again measures them again)")
    assert behind_note(rows) == (
        "The host was too busy while measuring 1 load point of 1 configuration: the load generator's event loop ran "
        "late by more than 20% of the point's time (up to 38.2%), so those points are host noise and are not counted. "
        "Run the same command again on a quieter machine to measure them again.")
    assert behind_note(rows[:3]) is None


@pytest.mark.unit
def test_each_point_is_judged_by_the_bound_it_was_measured_under():
    assert ObjectiveSpec().host_noise_max_pct == HOST_NOISE_MAX_PCT  # the setting's default is the documented bound
    raised = {"client_lag_pct": 60.0, "host_noise_max_pct": 1000.0}  # a pipeline check on a busy machine
    assert not host_noise(raised) and counted_noise(raised)
    assert host_noise({"client_lag_pct": 12.0, "host_noise_max_pct": 10.0})
    assert not counted_noise({"client_lag_pct": 12.0})
    assert host_noise({"client_lag_pct": 25.0, "host_noise_max_pct": None})  # recorded before the column: 20%
    rows = [point("a", "graphs", 8, 100.0, 0.8), {**point("b", "no graphs", 8, 120.0, 0.5), **raised},
            {**point("b", "no graphs", 48, 300.0, 0.5), "client_lag_pct": 75.5, "host_noise_max_pct": 1000.0}]
    assert [(v.label, v.outcome) for v in rank(rows, ObjectiveSpec())] == [("no graphs", "best"), ("graphs", "lost")]
    assert behind_note(rows) == (
        "2 load points of 1 configuration lost more than 20% of their time to the host (up to 75.5%) and count only "
        "because objective.host_noise_max_pct was raised to 1000: their latencies and throughput carry that delay; do "
        "not quote them.")


@pytest.mark.unit
def test_a_point_the_host_took_a_little_from_counts_with_its_loss_as_its_error():
    assert HOST_PERTURBED_PCT == 1.0
    assert not perturbed({"client_lag_pct": 1.0}) and perturbed({"client_lag_pct": 1.01})
    assert perturbed({"client_lag_pct": 20.0}) and not perturbed({"client_lag_pct": 20.01})  # beyond: host noise
    assert not perturbed({}) and not perturbed({"client_lag_pct": 0.4})
    assert host_error_pct([{"client_lag_pct": 0.9}, {"client_lag_pct": 4.9, "twin_behind_pct": 1.3}]) == 4.9
    assert host_error_pct([{"client_lag_pct": 0.9}, {"client_lag_pct": 0.4}]) == 0.9   # not named, but counted
    assert host_error_pct([{"client_lag_pct": 0.9}, {"client_lag_pct": 35.0}]) == 0.9   # host noise does not count
    assert host_error_pct([]) == 0.0
    # one repeat: B leads A by 3%, more than the default 1% tie, but B's point lost 4% of its time to the host
    rows = [point("a", "A", 8, 100.0, 0.3), {**point("b", "B", 8, 103.0, 0.5), "client_lag_pct": 4.0},
            point("c", "C", 8, 90.0, 0.2)]
    v = rank(rows, ObjectiveSpec())
    assert [(x.label, x.outcome, x.host_pct) for x in v] == [("B", "best", 4.0), ("A", "lost", 0.3),
                                                            ("C", "lost", 0.2)]
    assert v[1].reason == ("100 tok/s at concurrency 8 vs best 103 (-2.9%): a tie within the host's share of the "
                           "points' time (the host took up to 4.0% of it, so the values may be off by about as much)")
    assert v[2].reason == "90.0 tok/s at concurrency 8 vs best 103 (-12.6%)"   # a lead larger than the host's share
    assert v[0].reason.endswith("; 1 other configuration within the share of the points' time the host took: a tie, "
                                "any of them will do")
    assert behind_note(rows) == (
        "1 load point of 1 configuration lost 4.0% of its time to the host (the load generator running late; over "
        "1%): it counts, but its throughput may be off by about as much and latencies by "
        "more, so a lead smaller than the loss of the points it rests on is reported as a tie.")
    assert behind_note([*rows, {**point("a", "A", 48, 200.0, 1.5)}]).startswith(
        "2 load points of 2 configurations lost 1.5-4.0% of their time to the host (the load generator running late; "
        "over 1%): they count, but their throughput")
    both = rank([*rows, point("d", "D", 8, 102.5, 0.2)], ObjectiveSpec())   # D within the default 1% of B
    assert both[0].reason.endswith("; 2 other configurations within the default 1% (spread not measured) or within "
                                   "the share of the points' time the host took: a tie, any of them will do")
    quiet = [{**r, "client_lag_pct": 0.9} for r in rows]   # a lead larger than the loss stands
    assert [x.reason for x in rank(quiet, ObjectiveSpec())][1] == "100 tok/s at concurrency 8 vs best 103 (-2.9%)"
    assert behind_note(quiet) is None


@pytest.mark.unit
def test_a_lead_outside_the_measured_spread_but_inside_the_hosts_share_is_a_tie():
    from grid.report.lead import lead_lines
    from grid.report.select import OBJECTIVES

    def reps(h, label, values, lag):
        return [{**point(h, label, 64, x, 0.2), "point_index": i, "repeat_index": i, "client_lag_pct": lag}
                for i, x in enumerate(values)]

    # A: 100, 100.5, 101 (95% CI 99.3 .. 101.7); B: 103, 103.5, 104 (102.3 .. 104.7): apart by 3%
    busy = reps("a", "A", (100.0, 100.5, 101.0), 0.5) + reps("b", "B", (103.0, 103.5, 104.0), 3.5)
    v = rank(busy, ObjectiveSpec())
    assert [x.label for x in v] == ["B", "A"] and v[0].host_pct == 3.5
    assert v[1].reason == ("100 tok/s at concurrency 64 vs best 104 (-2.9%): a tie within the host's share of the "
                           "points' time (the host took up to 3.5% of it, so the values may be off by about as much); "
                           "95% CI 99.3 .. 102 vs 102 .. 105 tok/s do not overlap")
    assert lead_lines(v, OBJECTIVES[ObjectiveSpec().kind], None)[0].startswith(
        "Lead over the runner-up `A`: +3.0% (104 vs 100 tok/s at concurrency 64); not a confident lead: a tie within "
        "the host's share")
    # the same values on a quiet host: a confident lead
    quiet = [{**r, "client_lag_pct": 0.5} for r in busy]
    v = rank(quiet, ObjectiveSpec())
    assert v[1].reason.endswith("outside the measured spread (95% CI 99.3 .. 102 vs 102 .. 105 tok/s)")
    assert "; confident: outside the measured spread" in lead_lines(v, OBJECTIVES[ObjectiveSpec().kind], None)[0]


@pytest.mark.unit
def test_the_hosts_share_widens_ties_strictly_and_for_a_capacity_by_every_probe():
    from grid.config.schema import SLOSpec
    from grid.report.select import is_tie
    from tests.report.test_select_edges import pt

    assert is_tie(None, None, -2.99, "tok/s", 3.0)[0] and not is_tie(None, None, -3.0, "tok/s", 3.0)[0]
    assert not is_tie(None, None, -2.0, "tok/s")[0]   # no loss given: the default 1% alone
    # a capacity is a rate set, not measured: the probe that failed decides it as much as the one that passed.
    # A: 10 req/s held the SLO, 10.5 missed it while the host took 15%; B: 10.3 held it on a quiet host
    slo = SLOSpec(tpot_ms=8.0)
    rows = [{**pt("a", 0, 10.0, 500.0, kind="rate", tpot=7.5), "client_lag_pct": 0.2},
            {**pt("a", 1, 10.5, 520.0, kind="rate", tpot=8.4), "client_lag_pct": 15.0},
            {**pt("b", 0, 10.3, 510.0, kind="rate", tpot=7.9), "client_lag_pct": 0.2}]
    best, lost = rank(rows, ObjectiveSpec(kind="max_capacity", slo=slo))
    assert (best.label, best.score, best.host_pct, lost.label, lost.host_pct) == ("B", 10.3, 0.2, "A", 15.0)
    assert lost.reason.startswith("10.0 req/s vs best 10.3 (-2.9%): a tie within the host's share of the points' "
                                  "time (the host took up to 15.0% of it")


@pytest.mark.unit
def test_the_progress_line_and_the_speculative_picks_use_the_hosts_share():
    import io

    from rich.console import Console

    from grid.metrics.confidence import interval
    from grid.report.speculative import Entry, pick
    from grid.sweep.progress import ProgressCallback

    out = io.StringIO()
    reporter = ProgressCallback({}, 1, Console(file=out, width=300))
    reporter.on_trial_result(0, [], None, {**point("a", "A", 8, 100.0, 0.3), "client_lag_pct": 4.2})
    reporter.on_trial_result(0, [], None, {**point("a", "A", 16, 180.0, 0.3), "client_lag_pct": 0.9})
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("(the host took 4.2% of its time: values may be off by about as much)")
    assert "host" not in lines[1]
    # speculative decoding on (3% faster) against off: a tie when the host took more than 3% of either point
    off = Entry("off", {}, 100.0, interval([100.0]), None, 0.5)
    on = Entry("on", {"speculative_algorithm": "EAGLE"}, 103.0, interval([103.0]), 2.1, 3.5)
    assert pick([off, on], "tok/s")[0] is off
    assert pick([off, Entry("on", on.settings, 103.0, on.interval, 2.1, 0.5)], "tok/s")[0].config_hash == "on"


@pytest.mark.unit
def test_a_resume_measures_host_noise_again(tmp_path):
    spec = spec_for(tmp_path)
    recorded = [{"config_hash": "aaaa", "label": "a", "trial_status": "ok", "host_noise": True},
                {"config_hash": "bbbb", "label": "b", "trial_status": "ok", "host_noise": False}]
    assert rerun.selected(spec, recorded) == {"aaaa": "host noise: the host was too busy while measuring it"}


@pytest.mark.integration
def test_only_a_point_timed_in_real_time_records_a_loss(tmp_path):
    _, rows, reported = run_one(spec_for(tmp_path / "virtual", "load.concurrency=[4]"))
    assert rows[0]["client_lag_pct"] is None and rows[0]["twin_behind_pct"] is None and not host_noise(rows[0])
    assert rows[0]["host_noise_max_pct"] == reported[0]["host_noise_max_pct"] == HOST_NOISE_MAX_PCT
    _, rows, _ = run_one(spec_for(tmp_path / "real", "load.concurrency=[1]", "engine.clock=real", "engine.time_scale=10",
                                  "objective.host_noise_max_pct=1000"))
    assert rows[0]["host_noise_max_pct"] == 1000.0  # each point records the bound it is judged by
    assert rows[0]["client_lag_pct"] >= 0 and rows[0]["twin_behind_pct"] is None
