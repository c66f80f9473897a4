"""What the report leads with: the best's lead over the runner-up and the sweep's base with its
confidence, one row per configuration x load level, and a long refusal reason once per group."""

from types import SimpleNamespace

import pytest

from grid.storage.schema import judged_point_row
from grid.config.schema import ObjectiveSpec
from grid.releases.flags import parse_version, release_default
from grid.report.lead import lead_lines, sweep_base, swept_keys
from grid.report.render import level_rows, verdict_groups
from grid.report.select import OBJECTIVES, rank
from grid.versions import ServerIdentity

pytestmark = pytest.mark.unit
OBJ = OBJECTIVES["max_output_throughput"]
SG059 = ServerIdentity.of_sglang("0.5.9")


def row(h, label, level, out, repeat=0, status="ok", trial_status="ok", cls=None, msg=None, ttft=None):
    return judged_point_row({}, **{
        "config_hash": h, "label": label, "point_index": repeat * 10 + level, "point_kind": "concurrency",
        "point_value": level, "repeat_index": repeat, "status": status, "trial_status": trial_status,
        "output_tok_per_s": out, "ttft_p99_ms": ttft, "tpot_p99_ms": None, "trial_error_class": cls,
        "trial_error_message": msg, "command": "x"})


def repeats(h, label, level, outs):
    return [row(h, label, level, v, repeat=i) for i, v in enumerate(outs)]


def plan(h, label, **settings):
    return SimpleNamespace(config_hash=h, label=label, settings=settings)


def test_release_defaults_come_from_the_catalog():
    v = parse_version("0.5.9")
    assert release_default("schedule_policy", v) == "fcfs"          # --schedule-policy default (0.5.9 catalog)
    assert release_default("moe_runner_backend", v) == "auto"
    assert release_default("mem_fraction_static", v) is None         # SGLang picks it at start-up
    assert release_default("two_batch_overlap", v) is False          # a switch: off unless given
    assert release_default("cuda_graph", v) is True                  # on unless --disable-cuda-graph
    assert release_default("cuda_graph", parse_version("0.5.23")) is True
    with pytest.raises(KeyError):
        release_default("no_such_setting", v)


def test_the_sweep_base_is_the_configuration_at_sglangs_defaults():
    plans = [plan("a", "lpm", schedule_policy="lpm", cuda_graph=True),
             plan("b", "fcfs", schedule_policy="fcfs", cuda_graph=True),
             plan("c", "fcfs nograph", schedule_policy="fcfs", cuda_graph=False)]
    assert swept_keys([p.settings for p in plans]) == ["cuda_graph", "schedule_policy"]
    base = sweep_base(plans, SG059)
    assert (base.config_hash, base.label, base.why_none) == ("b", "fcfs", None)
    assert sweep_base(plans, ServerIdentity.parse("vllm 0.32.0")).why_none == (
        "the server measured (vllm 0.32.0) is not an SGLang release: its defaults are not known")
    assert sweep_base(plans, ServerIdentity.parse("external")).why_none == (
        "the server measured (a server that does not say what it is) is not an SGLang release: its defaults are not "
        "known")
    none = sweep_base([plan("a", "x", mem_fraction_static=0.8), plan("b", "y", mem_fraction_static=0.9)], SG059)
    assert none.config_hash is None and none.why_none.startswith("every configuration sets mem_fraction_static, which "
                                                                 "SGLang 0.5.9 picks itself at start-up")
    unset = sweep_base([plan("a", "x", mem_fraction_static=0.8), plan("b", "y", mem_fraction_static=None)], SG059)
    assert unset.config_hash == "b"   # null: SGLang's own choice
    other = sweep_base([plan("a", "x", schedule_policy="lpm"), plan("b", "y", schedule_policy="lof")], SG059)
    assert other.why_none == "no configuration runs SGLang 0.5.9's defaults (schedule_policy='fcfs')"


def test_lead_over_runner_up_and_base_with_confidence():
    rows = [*repeats("a", "lpm", 8, [300.0, 301.0, 299.0]), *repeats("b", "fcfs", 8, [250.0, 251.0, 249.0]),
            *repeats("c", "dfs", 8, [296.0, 300.0, 304.0])]
    verdicts = rank(rows, ObjectiveSpec())
    assert [v.label for v in verdicts] == ["lpm", "dfs", "fcfs"]
    base = sweep_base([plan("a", "lpm", schedule_policy="lpm"), plan("b", "fcfs", schedule_policy="fcfs"),
                       plan("c", "dfs", schedule_policy="dfs")], SG059)
    lines = lead_lines(verdicts, OBJ, base)
    # 300 vs 300 (mean of 296, 300, 304): the intervals overlap, a tie
    assert lines[0].startswith("Lead over the runner-up `dfs`: +0.0% (300 vs 300 tok/s at concurrency 8); not a "
                               "confident lead: tied within the measured spread (95% CI")
    # 300 vs 250: +20.0%, the intervals apart
    assert lines[1].startswith("Lead over the sweep's base `fcfs` (SGLang's defaults for the swept settings): +20.0% "
                               "(300 vs 250 tok/s at concurrency 8); confident: outside the measured spread (95% CI")


def test_lead_when_the_base_failed_or_won_or_was_not_measured():
    rows = [row("a", "lpm", 8, 300.0), row("b", "fcfs", 8, None, status="not_run", trial_status="failed",
                                            cls="startup_oom", msg="exited")]
    verdicts = rank(rows, ObjectiveSpec())
    plans = [plan("a", "lpm", schedule_policy="lpm"), plan("b", "fcfs", schedule_policy="fcfs")]
    lines = lead_lines(verdicts, OBJ, sweep_base(plans, SG059))
    assert lines == ["No runner-up: no other configuration qualified",
                     "The sweep's base `fcfs` (SGLang's defaults for the swept settings) did not qualify (failed): "
                     "startup_oom: exited"]
    won = lead_lines(rank([row("b", "fcfs", 8, 300.0), row("a", "lpm", 8, 100.0)], ObjectiveSpec()), OBJ,
                     sweep_base(plans, SG059))
    assert won[0] == ("Lead over the runner-up `lpm`: +200.0% (300 vs 100 tok/s at concurrency 8); spread not measured "
                      "(load.repeats=1): set load.repeats=3 to know how confident")
    assert won[1] == ("The best configuration is the sweep's base (SGLang's defaults for the swept settings): the "
                      "swept settings gain nothing over SGLang's defaults here")
    alone = lead_lines(rank([row("a", "lpm", 8, 300.0)], ObjectiveSpec()), OBJ, sweep_base(plans, SG059))
    assert alone[1] == "The sweep's base `fcfs` (SGLang's defaults for the swept settings) was not measured in this run"
    assert lead_lines(rank([row("b", "x", 8, None, status="not_run", trial_status="failed", cls="startup_oom",
                                msg="m")], ObjectiveSpec()), OBJ, None) == []


def test_min_tpot_lead_counts_lower_as_better():
    rows = [{**row("a", "A", 1, None), "tpot_median_ms": 10.0}, {**row("b", "B", 1, None), "tpot_median_ms": 12.5}]
    verdicts = rank(rows, ObjectiveSpec(kind="min_tpot"))
    assert lead_lines(verdicts, OBJECTIVES["min_tpot"], None)[0].startswith(
        "Lead over the runner-up `B`: +20.0% (10.0 vs 12.5 ms at concurrency 1)")


def test_one_row_per_configuration_and_level_and_refusals_grouped():
    rows = [*repeats("a", "A", 8, [100.0, 110.0]), row("a", "A", 32, 300.0, repeat=0, ttft=50.0),
            row("a", "A", 32, None, repeat=1, status="failed"),
            row("r1", "R1", 8, None, status="not_run", trial_status="invalid", cls="refused", msg="fa3 requires SM90"),
            row("r2", "R2", 8, None, status="not_run", trial_status="invalid", cls="refused", msg="fa3 requires SM90"),
            row("f", "F", 8, None, status="not_run", trial_status="failed", cls="startup_oom", msg="oom")]
    verdicts = rank(rows, ObjectiveSpec())
    levels = level_rows(verdicts)
    assert levels == [
        {"label": "A", "outcome": "best", "status": "ok", "level": "concurrency 8", "output_tok_per_s": 105.0,
         "ttft_p99_ms": None, "tpot_p99_ms": None},
        {"label": "A", "outcome": "best", "status": "1/2 ok", "level": "concurrency 32", "output_tok_per_s": 300.0,
         "ttft_p99_ms": 50.0, "tpot_p99_ms": None}]
    groups = verdict_groups(verdicts)
    assert [(g.labels, g.outcome) for g in groups] == [(("A",), "best"), (("R1", "R2"), "invalid"), (("F",), "failed")]
    assert groups[1].reason == "refused: fa3 requires SM90" and groups[1].first.label == "R1"  # given once


def test_a_skipped_configuration_is_said_skipped_never_failed():
    # the console printed "failed" for a configuration whose node's actor was lost
    from grid.report.render import no_winner_text

    rows = [row("a", "A", 8, 100.0), row("s", "S", 8, None, status="not_run", trial_status="skipped",
                                         cls="actor_lost", msg="the node's server actor died")]
    verdicts = rank(rows, ObjectiveSpec())
    assert [(v.label, v.outcome) for v in verdicts] == [("A", "best"), ("S", "skipped")]
    assert verdicts[1].reason == ("not measured, an infrastructure failure (not charged to the configuration): "
                                  "actor_lost: the node's server actor died; it runs again when the same command runs "
                                  "again")
    assert no_winner_text(rank(rows[1:], ObjectiveSpec())) == "No configuration qualified: 1 skipped."
