"""The twin calibrated on a sweep's measurements (grid/search/calibration.py): which recorded points enter it, the
calibration file and its reuse, and the policy re-forecast with it."""

import json
import math

import pytest

from grid.storage.schema import judged_point_row
from grid.config.schema import ConfigError
from grid.engines.base import get_engine
from grid.metrics.hostnoise import host_noise
from grid.search.calibration import CALIBRATION_FILE, counts, key, load, observations, write
from grid.search.plan import build
from grid.search.policy import Budget, Candidate, TwinRanked
from grid.search.predict import forecast, replay_point
from grid.storage.parquet import read_table
from grid.sweep.space import expand
from grid.twin.coefficients import Calibration, Coefficients, Outlier, calibrated, fit
from tests.config.test_configs import spec_for

SWEEP = ["model=llama3_1_8b", "hardware=h100_x1", "+sweep.name=cal", "+sweep.grid.max_running_requests=[64,8]",
         "load.concurrency=[1,16]", "load.input_len=256", "load.output_len=64", "load.min_prompts=16"]




@pytest.fixture
def sweep(tmp_path):
    spec = spec_for(SWEEP, tmp_path)
    plans = {p.config_hash: p for p in expand(spec)}
    return spec, plans, get_engine(spec).version()


def row(h, level, repeat=0, status="ok", lag=0.0, **measured):
    return judged_point_row({}, **{
        "config_hash": h, "point_kind": "concurrency", "point_value": float(level), "repeat_index": repeat,
        "status": status, "trial_status": "ok", "client_lag_pct": lag, **measured})


def test_only_points_that_count_enter_and_repeats_are_averaged(sweep):
    spec, plans, version = sweep
    a, b = sorted(plans)
    rows = [row(a, 1, 0, ttft_median_ms=40.0, tpot_median_ms=10.0, output_tok_per_s=90.0),
            row(a, 1, 1, ttft_median_ms=90.0, tpot_median_ms=10.0, output_tok_per_s=110.0),
            row(a, 16, 0, status="failed", ttft_median_ms=1.0, tpot_median_ms=1.0, output_tok_per_s=1.0),
            row(b, 1, 0, lag=35.0, ttft_median_ms=1.0, tpot_median_ms=1.0, output_tok_per_s=1.0),  # host noise
            row(b, 16, 0, ttft_median_ms=None, tpot_median_ms=12.0, output_tok_per_s=0.0)]
    assert [counts(r) for r in rows] == [True, True, False, False, True]
    assert not counts({**rows[0], "trial_status": "failed"})
    obs = observations(spec, plans, rows, version)
    assert [o.source for o in obs] == [f"{plans[a].label} ({a}) concurrency 1", f"{plans[b].label} ({b}) concurrency 16"]
    assert obs[0].measured == pytest.approx({"ttft_ms": 60.0, "tpot_ms": 10.0, "output_tok_per_s": math.sqrt(9900)})
    assert obs[1].measured == {"tpot_ms": 12.0}  # a missing or zero value is not a measurement
    # the replay is the forecast's own point, with the coefficients applied
    twin = obs[0].replay(obs[0].perf)
    assert twin == replay_point(obs[0].perf, plans[a].load, "concurrency", 1.0)
    slow = obs[0].replay(calibrated(obs[0].perf, Coefficients(decode=2.0)))
    assert slow["tpot_ms"] == pytest.approx(2 * twin["tpot_ms"], rel=0.02)


def test_a_sweep_recalibrated_on_the_twin_learns_the_planted_coefficients(sweep):
    spec, plans, version = sweep
    truth = Coefficients(decode=1.25, prefill=2.0, frontend=3.0)
    rows = []
    for h, p in plans.items():
        for level in (1, 16):
            v = replay_point(calibrated(observations(spec, {h: p}, [row(h, level, tpot_median_ms=1.0)], version)[0].perf,
                                        truth), p.load, "concurrency", float(level))
            rows.append(row(h, level, ttft_median_ms=v["ttft_ms"], tpot_median_ms=v["tpot_ms"],
                            output_tok_per_s=v["output_tok_per_s"]))
    cal = fit(observations(spec, plans, rows, version))
    assert cal.coefficients.decode == pytest.approx(1.25, rel=0.03)
    assert all(e < 0.02 for e in cal.error_after.values()), cal.error_after
    # the search plan re-forecasts with it: every forecast now that of the planted twin
    sp = build(spec, get_engine(spec), list(plans.values()), version)
    sp.recalibrate(spec, version, cal.coefficients)
    for h, p in plans.items():
        assert sp.policy.by_hash[h].forecast == pytest.approx(forecast(spec, p, version, truth).value, rel=0.03)
        assert sp.forecasts[h].value == forecast(spec, p, version).value  # what the plan printed stays


def test_reforecast_orders_the_queue_again():
    p = TwinRanked([Candidate("a", forecast=100.0), Candidate("b", forecast=90.0), Candidate("c", forecast=80.0)],
                   Budget(), twin_error=0.05)
    assert [c.config_hash for c in p.queue] == ["a", "b", "c"]
    p.reforecast({"c": (120.0, 7.0), "a": (85.0, 5.0)})
    assert [c.config_hash for c in p.queue] == ["c", "b", "a"]
    assert p.by_hash["c"].gpu_s == 7.0 and p.by_hash["b"].forecast == 90.0


def test_the_calibration_file_round_trips_and_refuses_another_setup(sweep, tmp_path):
    spec, _, version = sweep
    cal = Calibration(Coefficients(1.2, 0.5, 2.0), {"decode": 0.05, "prefill": 0.2, "frontend": 1.5,
                                                    "kv_fixed": 1.0, "kv_link": 1.0}, ("x", "y"),
                      (Outlier("y", "tpot_ms", 1.8),), (("x", "tpot_ms", 0.2, 0.1, 0.01),))
    write(tmp_path / "run" / CALIBRATION_FILE, key(spec, version), cal)
    saved = json.loads((tmp_path / "run" / CALIBRATION_FILE).read_text())
    assert saved["key"] == {"hardware": "h100_x1", "model": spec.model.name, "engine": "sim", "release": version}
    assert saved["coefficients"] == {"decode": 1.2, "prefill": 0.5, "frontend": 2.0, "kv_fixed": 1.0, "kv_link": 1.0}
    # exp(0.2) - 1, exp(0.1) - 1, exp(0.01) - 1
    assert (saved["error_before"]["tpot_ms"], saved["error_forecast"]["tpot_ms"], saved["error_after"]["tpot_ms"]) == \
        pytest.approx((0.221403, 0.105171, 0.010050), abs=1e-6)
    assert load(tmp_path / "run", key(spec, version)) == cal  # the run directory or the file itself
    other = spec_for([*SWEEP, "hardware=a100_x1"], tmp_path / "other")
    with pytest.raises(ConfigError, match=r"twin.calibration=.* was fitted on other hardware 'h100_x1' "
                                          r"\(this sweep: 'a100_x1'\)"):
        load(tmp_path / "run", key(other, version))
    with pytest.raises(ConfigError, match=r"twin.calibration=.*nowhere: no calibration.json there"):
        load(tmp_path / "nowhere")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"not a calibration file \(KeyError"):
        load(tmp_path / "bad.json")


@pytest.mark.integration
def test_a_sweep_on_the_twin_calibrates_itself_and_a_later_one_starts_from_it(tmp_path):
    """Through Ray Tune on the twin: calibration.json after each measured configuration, the console line, and a
    second sweep starting from it; a calibration of other hardware is refused before anything launches."""
    from tests.grid_cli import run_grid

    def grid_run(args, run_dir, expect=0):
        return run_grid(*args, run_dir=run_dir, expect=expect)

    first = grid_run([*SWEEP, "search=exhaustive", "search.early_stop=false", "ray.dashboard=false"],
                     tmp_path / "a")
    rows = read_table(tmp_path / "a", "load_points").to_pylist()
    # every load point (2 configurations x 2 levels) enters the calibration: on the twin's virtual clock none can be
    # host noise (grid/metrics/hostnoise.py), whatever else runs on the machine
    counted = [r for r in rows if counts(r)]
    assert len(counted) == 4 and not any(host_noise(r) for r in rows)
    n = len(counted)
    path = tmp_path / "a" / CALIBRATION_FILE
    saved = json.loads(path.read_text())
    assert len(saved["sources"]) == n and saved["key"]["hardware"] == "h100_x1"  # one per counted point
    # the twin measured against its own forecast on the virtual clock: the spec-sheet twin already explains every
    # point (its replay is the measurement), so the fit keeps it
    assert saved["error_after"]["ttft_ms"] <= saved["error_before"]["ttft_ms"] < 1e-6
    printed = " ".join(first.stdout.split())
    # both configurations recalibrate the twin
    assert "the twin was not recalibrated on" not in printed
    assert printed.count("Twin calibrated on ") == 2 and f"Twin calibrated on {n} load points: decode" in printed
    # each configuration's forecast with its interval, in search.json and the report
    searched = json.loads((tmp_path / "a" / "search.json").read_text())
    assert searched["calibrated"] is True and searched["objective"] == "max_output_throughput"
    assert len(searched["forecasts"]) == 2
    for f in searched["forecasts"].values():
        assert f["measured"] > 0 and f["low"] < f["expected"] < f["high"] and f["forecast"] > 0
    report = (tmp_path / "a" / "report.md").read_text()
    assert "## The twin's forecasts (95% interval)" in report and "Twin: the twin calibrated on this sweep's" in report
    assert "<table id='forecasts'>" in (tmp_path / "a" / "report.html").read_text()
    again = grid_run([*SWEEP, "dry_run=true", f"twin.calibration={tmp_path / 'a'}"], tmp_path / "b")
    assert f"Forecasts from the twin calibrated on twin.calibration={tmp_path / 'a'}. Twin calibrated on {n} load " \
           "points" in " ".join(again.stdout.split())
    other = grid_run([*SWEEP, "hardware=a100_x1", "dry_run=true", f"twin.calibration={tmp_path / 'a'}"],
                     tmp_path / "c", expect=2)
    assert "was fitted on other hardware 'h100_x1' (this sweep: 'a100_x1')" in " ".join((other.stdout + other.stderr).split())


@pytest.mark.parametrize("kv_fixed, kv_link", [(3.0, 1.0), (1.0, 3.0)])
def test_a_deployments_kv_transfers_are_learned_from_sglangs_transfer_metric(tmp_path, kv_fixed, kv_link):
    """A prefill-decode deployment over PCIe measured with transfers whose fixed cost or whose bytes' time on the link
    is 3x the twin's (SGLang's sglang:kv_transfer_latency_ms, a point's srv_kv_transfer_ms_mean), at two prompt
    lengths and two concurrencies: the calibration finds which term it was, and the servers' own coefficients stay
    where they were; a one-server calibration never mentions them."""
    from grid.topology.deployment import Deployment, RoleGroup, ServerShape
    from grid.twin.coefficients import PRIOR_SD, Observation
    from grid.twin.deployment import deployment_model

    truth = Coefficients(kv_fixed=kv_fixed, kv_link=kv_link)
    pd = Deployment((RoleGroup("prefill", 1, ServerShape(1)), RoleGroup("decode", 1, ServerShape(1))),
                    router_policy="round_robin")
    obs = []
    for isl in (512, 4096):
        spec = spec_for(["model=llama3_1_8b", "hardware=rtx_pro_6000_x8", "load.concurrency=[4,16]",
                         f"load.input_len={isl}", "load.output_len=64", "load.min_prompts=16"], tmp_path / str(isl))
        version = get_engine(spec).version()
        twin = deployment_model(pd, spec.model, spec.hardware, version, {})
        for level in (4.0, 16.0):
            measured = replay_point(calibrated(twin, truth), spec.load, "concurrency", level)
            spec_sheet = replay_point(twin, spec.load, "concurrency", level)
            assert spec_sheet["kv_transfer_ms"] > 20.0  # at least the transfer engine's fixed 20 ms
            assert measured["kv_transfer_ms"] > spec_sheet["kv_transfer_ms"] * 1.1
            obs.append(Observation(f"1P1D ISL {isl} concurrency {level:g}", twin,
                                   lambda perf, level=level, load=spec.load: replay_point(perf, load, "concurrency",
                                                                                          level), measured))
    cal = fit(obs)
    assert cal.coefficients.kv_fixed == pytest.approx(kv_fixed, rel=0.05)
    assert cal.coefficients.kv_link == pytest.approx(kv_link, rel=0.1)
    assert cal.coefficients.decode == pytest.approx(1.0, rel=0.03)
    moved = "kv_fixed" if kv_fixed > 1 else "kv_link"
    assert cal.sd[moved] < PRIOR_SD[moved] / 2
    assert f"{moved} {getattr(cal.coefficients, moved):.2f}x ({cal.interval(moved)[0]:.2f}-" in cal.text()
    # a file of the one multiplier of before (kv_transfer) gives it to both terms; one predating it leaves them at
    # their priors, unmentioned
    saved = tmp_path / "old.json"
    write(saved, key(spec, version), cal)
    data = json.loads(saved.read_text())
    for k in ("kv_fixed", "kv_link"):
        del data["coefficients"][k], data["log_sd"][k]
    saved.write_text(json.dumps({**data, "coefficients": {**data["coefficients"], "kv_transfer": 2.5},
                                 "log_sd": {**data["log_sd"], "kv_transfer": 0.1}}))
    old = load(saved)
    assert (old.coefficients.kv_fixed, old.coefficients.kv_link, old.sd["kv_link"]) == (2.5, 2.5, 0.1)
    saved.write_text(json.dumps(data))
    older = load(saved)
    assert (older.coefficients.kv_fixed, older.sd["kv_fixed"]) == (1.0, PRIOR_SD["kv_fixed"])
    assert "kv_" not in older.text()
