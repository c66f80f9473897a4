"""grid.app.report on a run directory written by hand: every load point is re-judged under the current objective's
SLOs from the stored requests (nothing stored is rewritten), and an interrupted sweep is reported as incomplete."""

from pathlib import Path

from tests.sweep.test_measure import run_one, spec_for
from rich.console import Console

from grid.app import report
from grid.metrics.loadpoint import SLO_COLUMNS
from grid.report.select import rejudge
from grid.storage.parquet import read_table, write_trial
from grid.storage.schema import load_point_row
from grid.sweep.space import expand


def write_config(run_dir, plan, ttfts_by_level, stored_goodput=None):
    """One recorded trial: a load point per level (closed loop), 1 s long, with one request per TTFT (ms)."""
    points, requests = [], []
    for idx, (level, ttfts) in enumerate(ttfts_by_level.items()):
        points.append(load_point_row(
            {"requests_total": len(ttfts), "completed": len(ttfts), "failed": 0, "duration_s": 1.0,
             "output_tok_per_s": 100.0 * level, "ttft_median_ms": sorted(ttfts)[len(ttfts) // 2],
             "ttft_p99_ms": max(ttfts), "goodput_req_per_s": stored_goodput},
            config_hash=plan.config_hash, trial_id="t", label=plan.label, command="python -m sglang...",
            trial_status="ok", point_index=idx, point_kind="concurrency", point_value=float(level),
            num_prompts=len(ttfts), status="ok"))
        requests += [{"config_hash": plan.config_hash, "point_index": idx, "request_index": i, "status": "ok",
                      "ttft_ms": t, "tpot_ms": 10.0, "e2e_ms": t + 500.0} for i, t in enumerate(ttfts)]
    write_trial(run_dir, plan.config_hash, {"requests": requests, "load_points": points})


def run_report(spec):
    console = Console(record=True, width=300)
    verdicts = report(spec, console)
    return verdicts, console.export_text(), (Path(spec.run_dir) / "report.md").read_text()


def test_interrupted_sweep_is_reported_incomplete(tmp_path):
    spec = spec_for(tmp_path, "+sweep=mem_fraction")
    plans = expand(spec)
    assert len(plans) == 5
    write_config(tmp_path, plans[0], {1: [100.0, 100.0], 8: [200.0] * 8})
    write_config(tmp_path, plans[1], {1: [100.0, 100.0], 8: [300.0] * 8})
    verdicts, out, md = run_report(spec)
    line = ("Incomplete: 3 of 5 configurations have no result yet (interrupted?); run the same command again to run "
            "them — the best below is among the 2 recorded.")
    assert line in out and f"**{line}**" in md
    assert out.index("Incomplete:") < out.index("Best configuration:")
    assert [v.outcome for v in verdicts] == ["best", "lost"]
    for plan in plans[2:]:
        write_config(tmp_path, plan, {1: [100.0], 8: [100.0]})
    _, out, md = run_report(spec)
    assert "Incomplete" not in out and "Incomplete" not in md


def test_resumed_sweep_is_judged_under_the_new_objective(tmp_path):
    spec = spec_for(tmp_path, "+sweep=mem_fraction", "sweep.grid.mem_fraction_static=[0.8,0.85]")
    a, b = expand(spec)
    # measured under the default objective (no SLO: goodput null) and under other SLOs (a stale goodput)
    write_config(tmp_path, a, {1: [100.0] * 4, 8: [1000.0] * 6 + [9000.0] * 2})
    write_config(tmp_path, b, {1: [4000.0] * 4, 8: [5000.0] * 8}, stored_goodput=50.0)
    before = {t: read_table(tmp_path, t).to_pylist() for t in ("load_points", "requests")}
    spec = spec_for(tmp_path, "+sweep=mem_fraction", "sweep.grid.mem_fraction_static=[0.8,0.85]",
                    "objective=max_goodput", "objective.slo.ttft_ms=3000", "objective.slo.tpot_ms=null",
                    "objective.slo.percentile=50")
    verdicts, out, md = run_report(spec)
    assert [(v.config_hash, v.outcome, v.score) for v in verdicts] == [
        (a.config_hash, "best", 6.0), (b.config_hash, "no_eligible_point", None)]
    assert verdicts[0].reason.startswith("highest goodput (requests/s within every SLO) at any load point meeting "
                                         "the SLOs (p50 TTFT <= 3000 ms): 6.00 req/s at concurrency 8")
    assert "throughput" not in verdicts[0].reason and "goodput still rising at the highest level tested (concurrency 8" \
        in verdicts[0].reason
    assert verdicts[1].reason == ("no load point met the SLOs: concurrency 1: p50 TTFT 4000 ms > 3000; "
                                  "concurrency 8: p50 TTFT 5000 ms > 3000")
    assert "level 1: ok" not in out and "level 1: ok" not in md
    assert {t: read_table(tmp_path, t).to_pylist() for t in before} == before   # nothing stored was rewritten


def test_report_time_slo_values_equal_measured_ones_on_a_twin_trial(tmp_path):
    spec = spec_for(tmp_path, "objective=max_goodput", "objective.slo.percentile=90", "objective.slo.e2e_ms=5000")
    run_one(spec)                                          # a real trial: summarize() under these SLOs, stored
    stored = read_table(tmp_path, "load_points").to_pylist()
    again = rejudge(stored, read_table(tmp_path, "requests").to_pylist(), spec.objective.slo)
    assert [r["status"] for r in stored] == ["ok", "ok"] and all(r["goodput_req_per_s"] > 0 for r in stored)
    for s, a in zip(stored, again):
        assert {k: a[k] for k in SLO_COLUMNS} == {k: s[k] for k in SLO_COLUMNS}   # exactly
        assert (a["slo_ttft_at_pct_ms"], a["slo_tpot_at_pct_ms"], a["slo_e2e_at_pct_ms"]) == \
            (s["ttft_p90_ms"], s["tpot_p90_ms"], s["e2e_p90_ms"])


def test_deploy_command_drops_the_trial_port():
    from grid.report.render import deploy_command

    cmd = "python -m sglang.launch_server --model-path /m --port 53453 --tp-size 8 --api-key '***'"
    assert deploy_command(cmd) == "python -m sglang.launch_server --model-path /m --tp-size 8 --api-key '***'"
    assert deploy_command("x --port=1234 --host 0.0.0.0") == "x --host 0.0.0.0"
    assert deploy_command("x 'unbalanced") == "x 'unbalanced"


def write_skipping(run_dir, plan, ttfts_by_level, skipped_levels, judged):
    """``write_config`` plus, per level of ``skipped_levels``, a point early stopping skipped under ``judged``."""
    write_config(run_dir, plan, ttfts_by_level)
    rows = read_table(run_dir, "load_points").to_pylist()
    mine = [r for r in rows if r["config_hash"] == plan.config_hash]
    for level in skipped_levels:
        mine.append(load_point_row({}, config_hash=plan.config_hash, trial_id="t", label=plan.label,
                                   command="python -m sglang...", trial_status="ok", point_index=len(mine),
                                   point_kind="concurrency", point_value=float(level), num_prompts=4,
                                   status="not_run", error_class="early_stop_twin_bound",
                                   skip_reason="the twin's upper bound here is below the best measured",
                                   early_stop_objective=judged))
    requests = [r for r in read_table(run_dir, "requests").to_pylist() if r["config_hash"] == plan.config_hash]
    write_trial(run_dir, plan.config_hash, {"requests": requests, "load_points": mine})


def test_rejudging_never_picks_from_levels_early_stopping_skipped_for_another_objective(tmp_path):
    # the main job re-judged under max_goodput with SLOs named the configuration measured first,
    # the others having had levels skipped for throughput, and offered to measure nothing
    from grid.sweep.driver import plan_run

    args = ("+sweep=mem_fraction", "sweep.grid.mem_fraction_static=[0.8,0.85]")
    a, b = expand(spec_for(tmp_path, *args))
    write_config(tmp_path, a, {1: [100.0] * 4, 8: [900.0] * 8})
    write_skipping(tmp_path, b, {1: [90.0] * 4}, [8], "max_output_throughput")
    same = spec_for(tmp_path, *args)
    verdicts, out, _ = run_report(same)
    assert "Cannot name a winner yet" not in out and plan_run(same).todo == []   # its own objective: safe to skip
    assert "not counted: concurrency 8: not_run (early_stop_twin_bound: the twin's upper bound here" in verdicts[1].reason
    other = spec_for(tmp_path, *args, "objective=max_goodput", "objective.slo.ttft_ms=1500")
    verdicts, out, md = run_report(other)
    line = ("Cannot name a winner yet: 1 load point of 1 configuration was skipped by early stopping under another "
            "objective (max_output_throughput), so this objective (max_goodput; p99 TTFT <= 1500 ms, p99 TPOT <= 150 "
            "ms) ranks without "
            "them. Run the same command again to measure them (those configurations run again; their earlier files "
            "are kept), or rank with the objective they were measured under.")
    assert line in " ".join(out.split()) and md.index(f"**{line}**") < md.index("**Best:**")
    lost = next(v for v in verdicts if v.config_hash == b.config_hash)
    assert "not measured for this objective: concurrency 8 (skipped by early stopping under objective " \
           "max_output_throughput; running the same command again measures them)" in lost.reason
    plan = plan_run(other)   # the resume measures it
    assert [p.config_hash for p in plan.todo] == [b.config_hash]
    assert plan.again == {b.config_hash: "early stopping skipped load points under another objective "
                                         "(max_output_throughput)"}
