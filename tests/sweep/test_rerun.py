"""Re-run what you choose: recorded configurations run again by status, error class, label or hash
without touching the others, a probe now off re-runs what the probe had marked invalid, and the earlier files are
kept, set aside."""

import pytest

from grid.config.schema import ConfigError
from grid.storage.parquet import TABLES, write_trial
from grid.sweep import rerun
from grid.sweep.driver import plan_run
from grid.sweep.space import expand

from .test_measure import spec_for

pytestmark = pytest.mark.unit

RECORDED = [
    {"config_hash": "aaaa11112222", "label": "mem=0.8", "trial_status": "ok", "trial_error_class": None,
     "probe_status": "passed"},
    {"config_hash": "bbbb11112222", "label": "mem=0.85", "trial_status": "failed", "trial_error_class": "startup_oom",
     "probe_status": None},
    {"config_hash": "cccc11112222", "label": "mem=0.9", "trial_status": "invalid", "trial_error_class": "nan_output",
     "probe_status": "failed"},
    {"config_hash": "dddd11112222", "label": "mem=0.95", "trial_status": "skipped", "trial_error_class": "actor_lost",
     "probe_status": None},
]


def test_selection_by_each_key(tmp_path):
    def pick(*overrides):
        return rerun.selected(spec_for(tmp_path, "+sweep=mem_fraction", *overrides), RECORDED)

    skipped = {"dddd11112222": "skipped (its machinery was lost)"}   # always runs again
    assert pick() == skipped
    assert pick("rerun.status=[failed]") == {"bbbb11112222": "rerun.status=failed", **skipped}
    assert pick("retry_failed=true") == {"bbbb11112222": "retry_failed=true", **skipped}
    assert pick("rerun.error_class=[nan_output]") == {"cccc11112222": "rerun.error_class=nan_output", **skipped}
    assert pick("rerun.label=['mem=0.8']") == {"aaaa11112222": "rerun.label=mem=0.8", **skipped}
    assert pick("rerun.config_hash=[aaaa,cccc1]") == {"aaaa11112222": "rerun.config_hash=aaaa",
                                                       "cccc11112222": "rerun.config_hash=cccc1", **skipped}
    # the probe that marked mem=0.9 invalid is now off: it runs again; nothing else does
    assert pick("probe.enabled=false") == {
        "cccc11112222": "the probe that marked it invalid is now off (probe.enabled=false)", **skipped}


@pytest.mark.parametrize("override, words", [
    ("rerun.status=[broken]", "rerun.status: 'broken' is not a trial status; allowed: ok, failed, invalid, skipped"),
    ("rerun.error_class=[nan_out]", "rerun.error_class: 'nan_out' is not a trial error class; allowed: actor_lost, "),
    ("rerun.config_hash=[ab]", "rerun.config_hash: 'ab' is not a config hash or a prefix of one"),
])
def test_a_value_that_can_never_match_is_refused(tmp_path, override, words):
    with pytest.raises(ConfigError) as err:
        rerun.check(spec_for(tmp_path, "+sweep=mem_fraction", override))
    assert str(err.value).startswith(words)


def test_plan_runs_only_the_chosen_and_sets_their_files_aside(tmp_path):
    spec = spec_for(tmp_path, "+sweep=mem_fraction", "rerun.label=['*0.85']")
    plans = expand(spec)
    for p in plans:
        write_trial(tmp_path, p.config_hash, {"load_points": [{"config_hash": p.config_hash, "label": p.label,
                                                                "trial_status": "ok", "point_index": 0}]})
        (tmp_path / "logs").mkdir(exist_ok=True)
        (tmp_path / "logs" / f"{p.config_hash}.log").write_text("log of " + p.label)
    plan = plan_run(spec)
    chosen = next(p for p in plans if p.label == "mem_fraction_static=0.85")
    assert [p.label for p in plan.todo] == ["mem_fraction_static=0.85"]
    assert plan.again == {chosen.config_hash: "rerun.label=*0.85"}
    assert rerun.set_aside(tmp_path, plan.again) == len(TABLES) + 1   # every table's file and the server log
    moved = sorted(p.relative_to(tmp_path).as_posix().split("/", 3)[-1]
                   for p in (tmp_path / "parquet" / "_superseded").rglob("*.parquet"))
    assert f"load_points/{chosen.config_hash}.parquet" in moved and f"requests/{chosen.config_hash}.parquet" in moved
    assert not (tmp_path / "parquet" / "load_points" / f"{chosen.config_hash}.parquet").exists()
    assert [p.name for p in (tmp_path / "logs" / "_superseded").rglob("*.log")] == [f"{chosen.config_hash}.log"]
    # the others stay recorded; the chosen one is no longer
    assert {r["config_hash"] for r in rerun.recorded_rows(tmp_path)} == {p.config_hash for p in plans} - {
        chosen.config_hash}
    assert plan_run(spec_for(tmp_path, "+sweep=mem_fraction")).todo == [chosen]
