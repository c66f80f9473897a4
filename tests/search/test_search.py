"""Pre-launch knowledge (hardware requirements, known failures), the search policies and the cost estimate."""

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pytest

from grid.config.schema import ConfigError
from grid.engines.base import get_engine
from grid.releases.checks import CPU, RULES, check_config
from grid.search.knowledge import launch_order, twin_model
from grid.search.plan import build, expected_launches, gpu_seconds
from grid.search.predict import forecast
from grid.search.policy import MIN_SCORED_PER_TERM, DONE, WAIT, Budget, Candidate, Exhaustive, TwinGuided, TwinRanked
from grid.sweep.notes import known_notes
from grid.sweep.space import expand
from tests.config.test_configs import spec_for  # tests/unit is on the path


@pytest.fixture(scope="module")
def nsa(tmp_path_factory):
    spec = spec_for(["+sweep=nsa_backends", "search=twin_guided"], tmp_path_factory.mktemp("nsa"))
    engine = get_engine(spec)
    plans = expand(spec)
    return spec, engine, plans, build(spec, engine, plans, engine.version())


class HW:
    def __init__(self, sm, vendor="nvidia", name="x"):
        self.sm_version, self.vendor, self.name = sm, vendor, name


def test_kernel_requirements_refuse_by_hardware():
    fa3 = {"dsa_prefill_backend": "fa3", "dsa_decode_backend": "trtllm"}
    assert check_config(fa3, "0.5.9", None, HW(90)) == []
    fa3_message = "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`."
    assert check_config(fa3, "0.5.9", None, HW(120)) == [fa3_message]
    # SGLang's fa3 backend serves SM80-89 for models without MLA (create_flashattention_v3_backend's assert): an
    # A100 runs a dense model's fa3, not an MLA model's (grid used to refuse both)
    mla = SimpleNamespace(attention="mla", dsa=None, quantization=None)
    dense = SimpleNamespace(attention="mha", dsa=None, quantization=None)
    for release in ("0.5.9", "0.5.23"):
        assert check_config({"attention_backend": "fa3"}, release, dense, HW(80)) == []
        assert check_config({"attention_backend": "fa3"}, release, dense, HW(89)) == []
        assert check_config({"attention_backend": "fa3"}, release, mla, HW(80)) == [fa3_message]
        assert check_config({"attention_backend": "fa3"}, release, mla, HW(90)) == []
        assert check_config({"attention_backend": "fa3"}, release, dense, HW(100)) == [fa3_message]
        assert check_config({"attention_backend": "fa3"}, release, dense, HW(75)) == [fa3_message]
    aiter = {"dsa_decode_backend": "aiter"}
    assert check_config(aiter, "0.5.9", None, HW(942, vendor="amd")) == []
    assert check_config(aiter, "0.5.9", None, HW(90)) == [
        "aiter kernels are AMD ROCm only: ModuleNotFoundError: No module named 'aiter'"]
    every = [r for r in RULES if r.stage == "requirement" and r.hardware != CPU]
    assert {r.name for r in every} >= {"fa3_needs_sm90", "aiter_needs_rocm", "trtllm_dsa_needs_sm100"}
    assert all(r.twin_failure is not None and r.where for r in every)  # each has its twin row and public source
    # a CPU host's requirement is the host's memory, measured on the released server (docs/sources.md#cpu-host)
    host = [r for r in RULES if r.stage == "requirement" and r.hardware == CPU]
    assert [r.name for r in host] == ["cpu_kv_pool_host_memory"] and "docs/sources.md#cpu-host" in host[0].where


def test_nsa_backends_known_before_launch(nsa):
    spec, engine, plans, sp = nsa
    refused = [p for p in plans if sp.known[p.config_hash].refused]
    failing = [p for p in plans if sp.known[p.config_hash].known_to_fail]
    assert (len(plans), len(refused), len(failing)) == (49, 24, 21)
    assert all({"fa3", "aiter"} & set(p.settings.values()) for p in refused)
    reason = sp.known[refused[0].config_hash].refused
    assert reason.startswith("rtx_pro_6000_x8_vm (SM120) cannot run this configuration: FlashAttention v3 Backend "
                             "requires SM>=80 and SM<=90")
    assert "source: failure table dsa_fa3_sm120" in reason
    assert {r for p in failing for r, _, _ in sp.known[p.config_hash].failures} == {"dsa_flashmla_nan_sm120"}
    runnable = sorted(p.label for p in plans if p not in refused and p not in failing)
    assert runnable == ["prefill=tilelang decode=tilelang", "prefill=tilelang decode=trtllm",
                        "prefill=trtllm decode=tilelang", "prefill=trtllm decode=trtllm"]
    order = launch_order(plans, sp.known)
    assert [sp.known[p.config_hash].known_to_fail for p in order[-21:]] == [True] * 21
    first = launch_order(plans, sp.known, try_known_failures=True)
    assert all(sp.known[p.config_hash].known_to_fail for p in first[24:45])
    notes = known_notes(plans, sp.known)
    assert any(n.startswith("known to fail here (dsa_flashmla_nan_sm120, nan_output: the seed session "
                            "(docs/sources.md#the-seed-session") and
               "21 configurations, queued last" in n for n in notes)


def test_twin_guided_launches_four_of_49_and_exhaustive_25(nsa):
    spec, engine, plans, sp = nsa
    labels = {p.config_hash: p.label for p in plans}
    # exactly the 4 that work: exhaustive's other 21 launches are all known failures, so on the same measurements both
    # name the same best configuration
    assert sorted(labels[h] for h in expected_launches(sp)) == [
        "prefill=tilelang decode=tilelang", "prefill=tilelang decode=trtllm", "prefill=trtllm decode=tilelang",
        "prefill=trtllm decode=trtllm"]
    lines = sp.cost_lines(spec)
    assert lines[0] == ("Plan (twin_guided search): 49 configurations, 24 refused before launch, 21 known to fail "
                        "here (last), 4 launches expected")
    # the estimate: per launch the twin's startup model (weight load, graph capture...), once, plus the modelled
    # seconds of the concurrency levels (each at least 101 requests: load.min_prompts' default) as the trial runs
    # them (the replay of each point: its load.warmup_requests, then from its warm-up wave to the end of its window),
    # 773.74 s, measured load.repeats=3 times, times the node's 8 GPUs
    h = expected_launches(sp)[0]
    f = sp.forecasts[h]
    plan = next(p for p in plans if p.config_hash == h)
    assert (plan.load.repeats, plan.load.concurrency) == (3, [8, 32, 64])  # conf/sweep/nsa_backends.yaml
    assert (round(f.startup_s, 2), round(f.load_s, 2)) == (221.93, 2321.21)
    perf = twin_model(spec, plan.settings, engine.version())
    assert f.startup_s == sum(perf.startup_phases_s().values())
    once = forecast(spec, dataclasses.replace(plan, load=plan.load.model_copy(update={"repeats": 1})),
                    engine.version())
    assert once.startup_s == f.startup_s and round(once.load_s, 2) == 773.74 and once.value == f.value
    assert f.load_s == pytest.approx(3 * once.load_s, rel=1e-12)
    # each level's modelled seconds are its replay's (held_ns): the warm-up request's own phase (one request of
    # 256 + 4,096 tokens alone, 23.18 s), then from the first send (the warm-up wave) to the window's end
    from grid.plan import point_of
    from grid.twin.simulate import replay

    replays = [replay(perf, point_of(plan.load, "concurrency", float(c)), plan.load.input_len, plan.load.output_len)
               for c in plan.load.concurrency]
    assert once.load_s == pytest.approx(sum(r.held_ns for r in replays) / 1e9, rel=1e-12)
    assert {round((r.held_ns - r.window_end_perf_ns) / 1e9, 2) for r in replays} == {23.18}
    assert round(sum(gpu_seconds(spec, sp.forecasts[h]) for h in expected_launches(sp)), 1) == 81380.6
    assert lines[1] == ("Estimated cost on rtx_pro_6000_x8_vm (8 GPUs, the twin's startup and load model): 22.61 "
                        "GPU-hours for the expected launches (every launchable configuration: 141.29)")
    ex = build(spec.model_copy(update={"search": spec.search.model_copy(update={"kind": "exhaustive"})}), engine,
               plans, engine.version())
    assert len(expected_launches(ex)) == 25


def test_the_cost_line_names_every_launchable_configuration_only_when_it_differs(tmp_path):
    # +sweep=mem_fraction expects all 5 launches; the line said "24.78 GPU-hours for the expected launches (every
    # launchable configuration: 24.78)": the same GPU-seconds summed in another order differ in the last bits
    spec = spec_for(["+sweep=mem_fraction", "search=twin_guided"], tmp_path)
    engine = get_engine(spec)
    sp = build(spec, engine, expand(spec), engine.version())
    assert len(expected_launches(sp)) == 5
    assert sp.cost_lines(spec)[1] == ("Estimated cost on rtx_pro_6000_x8_vm (8 GPUs, the twin's startup and load "
                                      "model): 28.26 GPU-hours for the expected launches")


def test_the_cost_line_says_which_launches_the_twin_cannot_model(tmp_path):
    """A launch the twin cannot model has no modelled cost: the estimate says so and names it, instead of counting
    it as 0 GPU-hours; with none modelled there is no estimate."""
    spec = spec_for(["+sweep=mem_fraction", "search=twin_guided"], tmp_path)
    engine = get_engine(spec)
    plans = expand(spec)
    sp = build(spec, engine, plans, engine.version())
    launches = expected_launches(sp)
    blind = launches[:2]
    for h in blind:
        sp.forecasts[h] = None
    labels = [p.label for p in plans if p.config_hash in blind]
    line = sp.cost_lines(spec)[1]
    assert line.startswith("Estimated cost on rtx_pro_6000_x8_vm")
    assert line.endswith(f"; not counted: 2 the twin cannot model ({', '.join(labels)})"), line
    for h in launches:
        sp.forecasts[h] = None
    lines = sp.cost_lines(spec)
    assert lines[1].startswith("No cost estimate on rtx_pro_6000_x8_vm: the twin cannot model any of the 5 expected "
                               "launches (") and lines[1].endswith(", ...)") and len(lines) == 2


def test_a_resumed_plan_counts_only_the_launches_left(tmp_path):
    """After a resume the plan says what is left: the policy resumed with the recorded configurations (their
    scores known), and the GPU-hours of only the launches left."""
    spec = spec_for(["+sweep=nsa_backends", "search=twin_guided"], tmp_path)
    engine = get_engine(spec)
    plans = expand(spec)
    sp = build(spec, engine, plans, engine.version())
    four = expected_launches(sp)
    sp.resume({h: sp.forecasts[h].value for h in four[:3]})  # three measured as forecast
    assert expected_launches(sp) == four[3:]
    lines = sp.cost_lines(spec)
    assert lines[0] == ("Plan (twin_guided search): 49 configurations, 24 refused before launch, 21 known to fail "
                        "here (last), 1 launches left (3 recorded)")
    # one launch of 2,543.14 modelled s x 8 GPUs = 20,345.2 GPU-s; every launchable one not recorded: 141.29 GPU-h
    # less 3 x 20,345.2 GPU-s
    assert round(gpu_seconds(spec, sp.forecasts[four[3]]), 1) == 20345.2
    assert lines[1] == ("Estimated cost on rtx_pro_6000_x8_vm (8 GPUs, the twin's startup and load model): 5.65 "
                        "GPU-hours for the launches left (every launchable configuration: 124.33)")
    # a run directory's rows of configurations outside this sweep (an earlier grid) are not counted as recorded
    sp.resume({"0123456789ab": 1.0})
    assert sp.cost_lines(spec)[0].endswith("4 launches expected")
    sp.resume({h: sp.forecasts[h].value for h in four})
    assert expected_launches(sp) == []
    assert sp.cost_lines(spec)[0].endswith("0 launches left (4 recorded)")


def c(h, f=None, refused=False, fail=False, gpu_s=100.0):
    return Candidate(h, refused=refused, known_to_fail=fail, forecast=f, gpu_s=gpu_s)


def drain(policy, measured):
    """Run a policy to the end, one trial at a time, with ``measured`` as the results."""
    out = []
    while True:
        h = policy.next()
        if h == DONE:
            return out
        assert h != WAIT
        out.append(h)
        if not policy.by_hash[h].refused:
            policy.record(h, measured.get(h))


def test_exhaustive_runs_everything_known_failures_last_and_budget_stops_it():
    cands = [c("k", 9.0, fail=True), c("a", 1.0), c("r", refused=True), c("b", 2.0)]
    assert drain(Exhaustive(cands, Budget()), {}) == ["r", "a", "b", "k"]
    assert drain(Exhaustive(cands, Budget(), try_known_failures=True), {}) == ["r", "k", "a", "b"]
    p = Exhaustive(cands, Budget(max_launches=2))
    assert drain(p, {}) == ["r", "a", "b"]  # the refusal is not a launch
    assert p.skipped == {"k": "search.max_launches=2 reached"}
    p = Exhaustive(cands, Budget(max_gpu_s=250.0))
    assert drain(p, {}) == ["r", "a", "b"] and p.budget.gpu_s == 200.0


def test_twin_ranked_stops_when_the_next_cannot_beat_the_best():
    cands = [c("lo", 80.0), c("hi", 100.0), c("mid", 99.0), c("k", 120.0, fail=True), c("r", refused=True)]
    # 3 launchable candidates: z = NormalDist().inv_cdf(1 - 1/3) = 0.4307, widening 1 + 0.4307 x 0.074 = 1.0319;
    # measured 10% under the forecasts: bias 0.9; mid's bound 99 x 0.9 x 1.0319 = 91.94 > 90 x 1.01 -> runs;
    # lo's bound 80 x 0.9 x 1.0319 = 74.29 cannot beat 90.9 -> stop; the known failure is skipped
    p = TwinRanked(cands, Budget(), twin_error=0.074, spread=0.01)
    assert p.z == pytest.approx(0.430727, abs=1e-6)
    assert drain(p, {"hi": 90.0, "mid": 89.1}) == ["r", "hi", "mid"]
    assert p.skipped["lo"].startswith("cannot beat the best measured 90 by more than the spread 1%: twin forecast 80 "
                                      "x bias 0.900 x (1 + 0.43 x 0.074) = 74.29")
    assert set(p.skipped) == {"lo", "k"}
    # lower is better (min_tpot): the widening goes down
    q = TwinRanked([c("a", 10.0), c("b", 12.0)], Budget(), higher_is_better=False, twin_error=0.074, spread=0.01)
    assert drain(q, {"a": 10.0}) == ["a"]
    # nothing measured a score yet: known failures still run (the table may be out of date)
    z = TwinRanked([c("x", 5.0), c("k", 9.0, fail=True)], Budget())
    assert drain(z, {}) == ["x", "k"]


def test_max_gpu_fraction_is_a_share_of_every_launch_not_refused(tmp_path):
    from grid.search.plan import max_gpu_s

    spec = spec_for(["search.max_gpu_fraction=0.2", "search.max_gpu_hours=1"], tmp_path)
    cands = [c("a", 1.0, gpu_s=10_000.0), c("k", 1.0, fail=True, gpu_s=5_000.0), c("r", refused=True, gpu_s=9e9)]
    assert max_gpu_s(spec.search, cands) == 3000.0  # 0.2 x 15,000 (the refusal costs nothing) < 1 GPU-hour
    assert max_gpu_s(spec.search.model_copy(update={"max_gpu_hours": 0.5}), cands) == 1800.0
    assert max_gpu_s(spec.search.model_copy(update={"max_gpu_hours": None, "max_gpu_fraction": None}), cands) is None
    with pytest.raises(ConfigError, match="max_gpu_fraction"):
        spec_for(["search.max_gpu_fraction=1.5"], tmp_path)


def test_unknown_search_kind_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="search.kind: unknown search .nope.; allowed: exhaustive, optuna, twin_guided, twin_ranked"):
        spec_for(["search.kind=nope"], tmp_path)


def test_a_search_whose_package_is_missing_is_refused_naming_how_to_install_it(tmp_path, monkeypatch):
    from grid.search import SEARCHES, Search

    monkeypatch.setitem(SEARCHES, "needs_pkg", Search("needs_pkg", "x", SEARCHES["exhaustive"].policy,
                                                      requires=("no_such_package_here", "pip install it")))
    with pytest.raises(ConfigError, match="search.kind=needs_pkg needs the no_such_package_here package: pip install it"):
        spec_for(["search.kind=needs_pkg"], tmp_path)


def test_summary_exact_values_on_recorded_rows():
    from grid.report.select import Verdict
    from grid.search.summary import cost_note, launch_seconds, summarize
    from grid.storage.schema import load_point_row
    from grid.storage.summary import SUMMARY_FIELDS

    s = 1_000_000_000
    rows = [  # a refused configuration, one that ran two points (one not run), one that crashed during startup
        load_point_row({}, config_hash="r", trial_error_class="refused", status="not_run", startup_s=None),
        load_point_row({}, config_hash="a", status="ok", startup_s=300.0, time_scale=10.0, started_unix_ns=5 * s,
                       finished_unix_ns=7 * s),
        load_point_row({}, config_hash="a", status="ok", startup_s=300.0, time_scale=10.0, started_unix_ns=8 * s,
                       finished_unix_ns=8 * s + s // 2),
        load_point_row({}, config_hash="a", status="not_run", startup_s=300.0, time_scale=10.0),
        load_point_row({}, config_hash="c", trial_error_class="startup_exit", status="not_run", startup_s=None),
        # two points early stopping skipped (the twin forecast 40 s and 12.5 s for them): no load time, GPU-s saved
        load_point_row({}, config_hash="a", status="not_run", error_class="early_stop_slo", forecast_duration_s=40.0,
                       startup_s=300.0, time_scale=10.0),
        load_point_row({}, config_hash="a", status="not_run", error_class="early_stop_twin_bound",
                       forecast_duration_s=12.5, startup_s=300.0, time_scale=10.0),
    ]
    assert launch_seconds(rows, {"c": 120.0}) == {"a": 325.0, "c": 120.0}
    verdicts = [Verdict("a", "prefill=trtllm", "best", 1234.5, ""), Verdict("c", "x", "failed", None, "")]
    # the plan's estimate of each launch (modelled s per GPU): a's 300 s startup and 87.5 s of load, c's 200 s
    out = summarize(rows, verdicts, objective="max_output_throughput", search="twin_guided", gpu_count=8,
                    configurations=3, refused=1, known_to_fail=0, not_run=0, modelled_startup_s={"c": 120.0},
                    estimated_s={"a": 387.5, "c": 200.0})
    assert out == {"launches": 2, "gpu_seconds": 3560.0, "best_label": "prefill=trtllm", "best_value": 1234.5,
                   "objective": "max_output_throughput", "search": "twin_guided", "configurations": 3,
                   "refused": 1, "known_to_fail": 0, "not_run": 0, "early_stopped_points": 2,
                   "early_stop_gpu_seconds_saved": 420.0, "estimated_gpu_seconds": 4700.0,
                   "estimate_error": -0.2426}                                     # 3560 / 4700 - 1
    assert [k for k, *_ in SUMMARY_FIELDS] == list(out)
    # 0.99 recorded of 1.31 estimated GPU-h; without the 420 GPU-s skipped, 3560 / 4280 - 1 = -16.8 %
    assert cost_note(out) == ("Cost: 0.99 GPU-hours recorded for 2 launches; the plan estimated 1.31 for them (-24.3%: "
                              "early stopping skipped 0.12 GPU-hours of load points, and what ran took -16.8% against "
                              "its forecast; summary.json estimate_error)")
    # a launch without an estimate (an engine the twin does not model): no estimate, no error, no line
    partial = summarize(rows, verdicts, objective="max_output_throughput", search="twin_guided", gpu_count=8,
                        configurations=3, estimated_s={"a": 387.5})
    assert (partial["estimated_gpu_seconds"], partial["estimate_error"], cost_note(partial)) == (None, None, None)
    # a point that says how long it held the server (held_s, modelled: the twin's virtual clock stamps its requests
    # while the wall clock runs for a second) is counted by that, not by its wall-clock stamps
    held = [{**rows[1], "held_s": 376.75}, {**rows[2], "held_s": float("nan")}]  # NaN: a row from before held_s
    assert launch_seconds(held) == {"a": 300.0 + 376.75 + 5.0}


def test_optuna_never_launches_refused_and_keeps_the_budget():
    pytest.importorskip("optuna")
    from grid.search.optuna import OptunaPolicy

    cands = [Candidate(f"h{a}{b}", refused=(a == 0), forecast=10.0 + a + b, gpu_s=10.0, settings={"a": a, "b": b})
             for a in range(3) for b in range(4)]
    scores = {c.config_hash: None if c.refused else c.forecast for c in cands}
    p = OptunaPolicy(cands, Budget(max_launches=5), seed=3)
    issued = drain(p, scores)
    launched = [h for h in issued if not p.by_hash[h].refused]
    assert len(launched) == 5 and p.budget.launches == 5 and p.budget.gpu_s == 50.0
    assert all(not p.by_hash[h].refused for h in launched)
    assert set(p.skipped) == {c.config_hash for c in cands} - set(issued)
    assert all(why == "search.max_launches=5 reached" for why in p.skipped.values())
    again = OptunaPolicy(cands, Budget(max_launches=5), seed=3)
    assert drain(again, scores) == issued  # seeded: the same proposals


@pytest.mark.parametrize("cls", [TwinGuided, TwinRanked])
def test_resume_takes_recorded_configurations_out_and_counts_their_scores(cls):
    p = cls([c("a", 100.0), c("b", 99.0), c("lo", 50.0)], Budget(max_launches=1), twin_error=0.074)
    p.resume({"a": 100.0})  # recorded by an earlier run: not run again, not counted, its score is the best so far
    assert drain(p, {"b": 99.5}) == ["b"]
    assert p.budget.launches == 1 and p.best() == 100.0
    assert set(p.skipped) == {"lo"}


def space(bias_of=lambda s: 1.0):
    """3 MoE runners x 3 CUDA-graph sizes; forecasts 100 / 101 / 102 by graph size, launches dearer with it."""
    cands = [Candidate(f"m{m}c{g}", forecast=100.0 + g, gpu_s=100.0 + 50 * g, settings={"moe": m, "cg": g})
             for m in ("a", "b", "t") for g in (0, 1, 2)]
    return cands, {x.config_hash: x.forecast * bias_of(x.settings) for x in cands}


def test_twin_guided_learns_a_flag_values_bias_and_stops():
    cands, measured = space(lambda s: 0.85 if s["moe"] == "t" else 1.0)  # the twin overrates moe=t by 15%
    extra = [Candidate("r", refused=True), Candidate("k", known_to_fail=True, forecast=200.0, settings={"moe": "a", "cg": 0})]
    p = TwinGuided(cands + extra, Budget(), twin_error=0.074, spread=0.01)
    # 7 terms: the common one and one per runner and graph size (the refused configuration's unset values are none);
    # it may stop only once twice as many configurations measured a score, so 9 configurations all run
    assert p.terms == 7 and MIN_SCORED_PER_TERM == 2
    assert drain(p, measured) == ["r", "mac0", "mbc0", "mtc1", "mac2", "mbc2", "mtc0", "mbc1", "mac1", "mtc2"]
    assert p.skipped == {"k": "known to fail here, and a configuration already measured a score"}
    assert p.last_p is None  # never enough scores to judge


def big_space(bias_of=lambda s: 1.0):
    """4 MoE runners x 3 CUDA-graph sizes x 4 policies (48 configurations, 12 terms); forecasts by graph size."""
    cands = [Candidate(f"m{m}c{g}p{q}", forecast=100.0 + g, gpu_s=100.0 + 50 * g,
                       settings={"moe": m, "cg": g, "pol": q})
             for m in ("a", "b", "c", "t") for g in (0, 1, 2) for q in ("p", "q", "r", "s")]
    return cands, {x.config_hash: x.forecast * bias_of(x.settings) for x in cands}


def test_twin_guided_stops_after_twice_its_terms_once_nothing_left_can_win():
    cands, measured = big_space(lambda s: 0.85 if s["moe"] == "t" else 1.0)
    p = TwinGuided(cands, Budget(), twin_error=0.074, spread=0.01)
    assert p.terms == 12
    issued = drain(p, measured)
    # 24 launches (2 x 12 terms), then nothing left is likely to beat 102 by 3%: moe=t, learned to be 15% low from
    # its two launches, is never launched again
    assert len(issued) == 24 and len(p.skipped) == 24
    assert sorted(h for h in issued if h.startswith("mt")) == ["mtc1ps", "mtc2pr"]
    assert {h for h in p.skipped if h.startswith("mt")} == {c.config_hash for c in cands if c.config_hash.startswith("mt")} - {"mtc1ps", "mtc2pr"}
    # the learned twin error is 9.1-9.2%: the model averaging's weights go through Cholesky solves whose rounding
    # depends on the CPU's BLAS kernels, and parts lighter than 1% of the heaviest are dropped, so the last digit (and
    # the tiny P below) differ between machines (9.2% and P 6.7e-05 on one, 9.1% and 5.4e-05 on an AVX-512 EPYC)
    (why,) = set(p.skipped.values())
    learned = re.fullmatch(r"P\(one of the 24 left beats the best measured 102 by more than 3%\) = 0\.000 < risk 0\.1 "
                           r"\(twin error 9\.[12]%, 100% of its variance shared per flag value\)", why)
    assert learned is not None, why
    # measured exactly as forecast: the twin's error is learned to be small (2.0%) and the same 24 suffice
    flat, measured = big_space()
    q = TwinGuided(flat, Budget(), twin_error=0.074, spread=0.01)
    assert len(drain(q, measured)) == 24 and 4e-05 < q.last_p < 8e-05
    assert "(twin error 2.0%, 99% of its variance shared per flag value)" in next(iter(q.skipped.values()))


def test_twin_guided_cheaper_first_lower_is_better_and_budget():
    same = [Candidate("dear", forecast=100.0, gpu_s=300.0, settings={"f": 1}),
            Candidate("cheap", forecast=100.0, gpu_s=100.0, settings={"f": 2})]
    assert TwinGuided(same, Budget()).next() == "cheap"
    # lower is better (min_tpot): the lower forecast first
    low = [Candidate("slow", forecast=12.0, gpu_s=100.0, settings={"f": 1}),
           Candidate("fast", forecast=10.0, gpu_s=100.0, settings={"f": 2})]
    assert TwinGuided(low, Budget(), higher_is_better=False).next() == "fast"
    p = TwinGuided(space()[0], Budget(max_gpu_s=250.0), twin_error=0.074, spread=0.01)
    drain(p, space()[1])
    assert p.budget.gpu_s <= 250.0 and any(v.startswith("the GPU budget of 0.0694444 GPU-hours") for v in p.skipped.values())
    # nothing measured a score yet: known failures and unforecast configurations still run
    z = TwinGuided([Candidate("x", forecast=5.0, settings={"f": 1}), Candidate("k", known_to_fail=True, forecast=9.0,
                                                                              settings={"f": 2})], Budget())
    assert drain(z, {}) == ["x", "k"]


def test_twin_guided_measures_unforecast_configurations_once_one_met_the_slos():
    # schedule_policy: the twin forecasts no load point meeting the SLOs for any policy (the same forecast inputs:
    # it does not model the policy); fcfs, launched first, met them at 0.4457 req/s, so the forecast is wrong here and
    # the other four are measured too, in launch order
    pol = ["fcfs", "lpm", "lof", "random", "dfs-weight"]
    cands = [Candidate(x, forecast=None, gpu_s=100.0, settings={"schedule_policy": x}) for x in pol]
    p = TwinGuided(cands, Budget(), twin_error=0.074, spread=0.01)
    assert drain(p, {"fcfs": 0.4457, "lpm": 0.4457, "lof": 0.4401, "random": None, "dfs-weight": 0.45}) == pol
    assert p.skipped == {} and p.doubted() == "fcfs"
    # nothing scored: each runs while no score exists (unchanged)
    p = TwinGuided(cands, Budget(), twin_error=0.074, spread=0.01)
    assert drain(p, {"fcfs": None}) == pol
    p = TwinGuided(cands[:1] + [Candidate("f", forecast=0.5, gpu_s=100.0, settings={"schedule_policy": "x"})]
                   + cands[1:3], Budget(), twin_error=0.074, spread=0.01)
    # a forecast configuration ran first and scored: the twin's "none meets the SLOs" is not contradicted
    assert drain(p, {"f": 0.44}) == ["f"] and p.doubted() is None
    assert p.skipped == {h: "the twin forecasts no load point meeting the SLOs" for h in ("fcfs", "lpm", "lof")}
    # once doubted, the ranked configuration runs first, then the unranked ones
    q = TwinGuided(cands[:2] + [Candidate("f", forecast=0.5, gpu_s=100.0, settings={"schedule_policy": "x"})],
                   Budget(), twin_error=0.074, spread=0.01)
    q.resume({"fcfs": 0.4457})
    assert drain(q, {"f": 0.44, "lpm": 0.43}) == ["f", "lpm"] and q.skipped == {}


def test_the_report_says_what_early_stopping_skipped():
    from grid.app import early_stop_note

    rows = [{"config_hash": "a", "status": "ok", "error_class": None},
            {"config_hash": "b", "status": "not_run", "error_class": "early_stop_slo", "forecast_duration_s": 40.0},
            {"config_hash": "b", "status": "not_run", "error_class": "early_stop_twin_bound",
             "forecast_duration_s": 12.5},
            {"config_hash": "c", "status": "not_run", "error_class": "early_stop_twin_bound",
             "forecast_duration_s": 10.0},
            {"config_hash": "d", "status": "not_run", "error_class": "startup_exit", "forecast_duration_s": None}]
    assert early_stop_note(rows, 8) == (
        "Early stopping (search.early_stop) did not run 3 load points of 2 configurations (1 after a lower level "
        "missed the SLOs; 2 where the twin's upper bound was below the best measured score), saving about 500 "
        "GPU-seconds by the twin's forecast; each is recorded not_run with its reason (search.early_stop=false "
        "measures every level)")
    assert early_stop_note(rows[:1] + rows[-1:], 8) is None


def test_forecast_shortcuts_equal_a_full_simulation(tmp_path):
    """predict.py shares a replay between configurations the simulation cannot tell apart (MoE flags reaching the same
    kernels, memory fractions yielding the same KV pool and cap): each shared forecast row is the summary of its own
    configuration's replay, to the bit."""
    from grid.metrics.loadpoint import summarize
    from grid.plan import point_of
    from grid.search import predict
    from grid.search.knowledge import twin_model
    from grid.twin.simulate import replay

    spec = spec_for(["+sweep=joint", "sweep.grid.mem_fraction_static=[0.80,0.92]",
                     "sweep.grid.moe_runner_backend=[auto,flashinfer_cutlass]", "sweep.grid.torch_compile=[false]",
                     "sweep.grid.chunked_prefill_size=[8192]", "sweep.grid.schedule_policy=[fcfs]",
                     "sweep.grid.cuda_graph_max_bs=[32]"], tmp_path)
    plans = expand(spec)
    version = get_engine(spec).version()
    assert len(plans) == 4
    predict._REPLAYS.clear()
    load = plans[0].load
    distinct = set()
    for plan in plans:
        perf = twin_model(spec, plan.settings, version)
        rows = predict._point_rows(spec, plan, perf)
        for row, level in zip(rows, load.concurrency):
            own = summarize(replay(perf, point_of(load, "concurrency", float(level)), load.input_len,
                                   load.output_len), predict._slo(spec))
            assert {k: row[k] for k in own} == own
            # what the simulation can tell apart at this level: the kernels, and the pool and cap up to what
            # `level` streams of input + output tokens can use
            distinct.add((level, perf.moe_runner_class, min(perf.kv_capacity_tokens,
                                                            level * (load.input_len + load.output_len)),
                          min(perf.max_running_requests, level)))
    assert len({k[1] for k in distinct}) == 1 and len(distinct) < len(plans) * len(load.concurrency)
    assert len(predict._REPLAYS) == len(distinct)  # one replay for each


def test_the_dsa_backends_change_no_step_time_so_their_forecasts_are_shared(tmp_path):
    """The performance model reads whether DSA runs (the model and the GPU), not which backend pair: every step time of
    the 49 pairs of the main job is the same, so their replays are one per level (predict.NOT_TIMED), and each equals a
    replay of its own model without the memo."""
    from grid.search import predict
    from grid.twin.simulate import replay
    from grid.metrics.loadpoint import summarize
    from grid.plan import point_of

    spec = spec_for(["+sweep=nsa_backends"], tmp_path)
    plans = expand(spec)
    version = get_engine(spec).version()
    perfs = [(p, perf) for p in plans for perf in [twin_model(spec, p.settings, version)] if perf is not None]
    assert len(perfs) == 49 and len({(perf.dsa_prefill_backend, perf.dsa_decode_backend) for _, perf in perfs}) > 20
    first = perfs[0][1]
    for _, perf in perfs:
        for bs in (1, 7, 64, 200):
            for ctx in (0, 5000, 123456.5):
                assert perf.decode_step_s(bs, ctx) == first.decode_step_s(bs, ctx)
            assert perf.prefill_step_s(bs * 256, bs * 100.0, bs) == first.prefill_step_s(bs * 256, bs * 100.0, bs)
    predict._REPLAYS.clear()
    load = plans[0].load
    for _, perf in perfs[::8]:
        for c in load.concurrency:
            shared = predict.replay_point(perf, load, "concurrency", float(c))
            own = summarize(replay(perf, point_of(load, "concurrency", float(c)), load.input_len, load.output_len))
            assert shared == {"ttft_ms": own["ttft_median_ms"], "tpot_ms": own["tpot_median_ms"],
                              "output_tok_per_s": own["output_tok_per_s"]}
    assert len(predict._REPLAYS) == len(load.concurrency)


@pytest.mark.parametrize("make", [
    lambda cands: Exhaustive(cands, Budget()),
    lambda cands: TwinRanked(cands, Budget(), twin_error=0.074, spread=0.01),
    lambda cands: TwinGuided(cands, Budget(), twin_error=0.074, spread=0.01),
], ids=["exhaustive", "twin_ranked", "twin_guided"])
def test_a_search_stops_when_the_host_is_too_busy_to_measure(make):
    """Two configurations in a row whose every point was host noise: the rest is not launched, each with the reason
    (the busy half of experiments/busy_host.py kept launching, every point flagged, until stopped by hand)."""
    from grid.search.policy import HOST_BUSY_STREAK

    cands = [c("a", 10.0), c("b", 9.0), c("d", 8.0), c("e", 7.0), c("r", refused=True)]
    policy = make(cands)
    launched = []
    while (h := policy.next()) not in (DONE, WAIT):
        launched.append(h)
        if not policy.by_hash[h].refused:
            policy.record(h, None, host_noise=True)
    assert HOST_BUSY_STREAK == 2 and [h for h in launched if h != "r"] == ["a", "b"]
    assert set(policy.skipped) == {"d", "e"}
    assert all(why.startswith("the host is too busy to measure: every load point of the last 2 configurations")
               for why in policy.skipped.values())


def test_a_quiet_configuration_ends_the_streak():
    policy = Exhaustive([c("a", 10.0), c("b", 9.0), c("d", 8.0), c("e", 7.0)], Budget())
    for noisy in (True, False, True):
        policy.record(policy.next(), None if noisy else 5.0, host_noise=noisy)
    assert policy.host_busy() is None and policy.next() == "e"


def test_a_forecast_point_is_judged_under_the_objectives_slos(tmp_path):
    # the twin's forecast of each level says whether its point meets the SLOs, read from the percentiles of its
    # replayed requests as a measured row's are (a summarized row alone has no slo_*_at_pct_ms: judging it raised)
    from grid.plan import point_of
    from grid.search.predict import level_forecasts
    from grid.twin.simulate import replay

    verdicts = {}
    for e2e_ms in (1e9, 1.0):
        spec = spec_for(["+sweep=nsa_backends", f"objective.slo.e2e_ms={e2e_ms}"], tmp_path / str(e2e_ms))
        engine = get_engine(spec)
        plan = next(p for p in expand(spec) if p.label == "prefill=trtllm decode=trtllm")
        verdicts[e2e_ms] = {k: f.slo_met for k, f in level_forecasts(spec, plan, engine.version()).items()}
    levels = [("concurrency", 8.0), ("concurrency", 32.0), ("concurrency", 64.0)]
    assert verdicts == {1e9: dict.fromkeys(levels, True), 1.0: dict.fromkeys(levels, False)}
    # an SLO between a level's p99 E2E latency and the next level's separates them
    perf = twin_model(spec, plan.settings, engine.version())
    p99 = {c: float(np.percentile([(r.end_perf_ns - r.send_perf_ns) / 1e6 for r in replay(
        perf, point_of(plan.load, "concurrency", c), plan.load.input_len, plan.load.output_len).records], 99))
        for c in (8.0, 32.0)}
    assert p99[8.0] < p99[32.0]
    spec = spec_for(["+sweep=nsa_backends", f"objective.slo.e2e_ms={(p99[8.0] + p99[32.0]) / 2}"], tmp_path / "mid")
    met = {k: f.slo_met for k, f in level_forecasts(spec, plan, engine.version()).items()}
    assert (met[("concurrency", 8.0)], met[("concurrency", 32.0)]) == (True, False)
