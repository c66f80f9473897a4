"""``+sweep=prefix_cache`` on the twin, shrunk: multi-turn sessions through Ray Tune, the server actor and the
Parquet tables. Each turn's cached tokens, the hit rate falling once the conversations outgrow
the KV pool, the radix cache off finding nothing, and a search that measures every configuration and calibrates the
twin on none of them (its forecasts replay independent prompts)."""

import json

import pandas as pd
import pytest

from grid.releases.features import holds
from grid.releases.flags import parse_version
from tests.sweep.test_sweep_ray import grid_run

pytestmark = pytest.mark.integration

SWEEP = [
    "+sweep=prefix_cache",
    "sweep.configs=[{},{disable_radix_cache:true}]",
    "+sweep.base.max_total_tokens=2000",   # 16 users' conversations (16 x 240 tokens) outgrow it, 2 users' do not
    "sweep.load.sessions.turns=3",
    "sweep.load.input_len=64",
    "sweep.load.output_len=16",
    "sweep.load.concurrency=[2,16]",
    "+sweep.load.min_prompts=6",
    "ray.dashboard=false",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sessions")
    out = grid_run(SWEEP, run_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    rq = pd.read_parquet(run_dir / "parquet" / "requests")
    return run_dir, out.stdout, lp, rq


def test_every_configuration_is_measured_and_none_calibrates_the_twin(sweep):
    run_dir, stdout, lp, _ = sweep
    assert "Plan (exhaustive search): 2 configurations" in stdout
    assert "Exhaustive search, no cost estimate: load.dataset=sessions" in stdout
    assert set(lp.status) == {"ok"} and lp.config_hash.nunique() == 2
    cal = run_dir / "calibration.json"
    assert not cal.exists() or json.loads(cal.read_text()).get("sources") == []


def test_turns_find_their_history_until_the_pool_is_outgrown(sweep):
    _, _, lp, rq = sweep
    on = lp[lp.label.str.contains("disable_radix_cache=default")].set_index("point_value")
    # 2 users: 0 + 79 + 159 of 64 + 144 + 224 prompt tokens per conversation where each answer's last token is left
    # uncached (0.5.23), 0 + 80 + 160 where the release keeps it (0.5.9, the twin's default; grid.releases.features)
    last = 0 if holds("caches_last_output_token", parse_version(on.engine_version.iloc[0])) else 1
    found = 240 - 2 * last
    assert on.loc[2.0, "cache_hit_rate"] == pytest.approx(found / 432)
    assert on.loc[16.0, "cache_hit_rate"] < 0.8 * on.loc[2.0, "cache_hit_rate"]
    # the server's Prefill lines also count the point's warm-up request (64 tokens, nothing cached)
    assert on.loc[2.0, "server_cache_hit_rate"] == pytest.approx(2 * found / (2 * 432 + 64))
    mine = rq[rq.config_hash == on.config_hash.iloc[0]]
    assert mine.cached_tokens.notna().all() and set(mine.turn_index) == {0, 1, 2}
    # a first turn has no history; its random words may share a word or two with another conversation's start
    assert (mine[mine.turn_index == 0].cached_tokens <= 2).all()


def test_without_the_radix_cache_nothing_is_found(sweep):
    _, _, lp, rq = sweep
    off = lp[lp.label.str.contains("disable_radix_cache=True")]
    assert (off.total_cached_tokens == 0).all() and (off.server_cache_hit_rate == 0).all()
    assert (rq[rq.config_hash.isin(off.config_hash)].cached_tokens == 0).all()
