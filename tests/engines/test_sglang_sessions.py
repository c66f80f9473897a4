"""Multi-turn sessions against the released SGLang server's radix cache: ``python -m grid.run
+sweep=cpu_prefix_cache engine=sglang hardware=cpu_host``. Runs when tests/engines/test_sglang_cpu.py runs (the same
``GRID_SGLANG_*`` variables) and skips otherwise.

Checked on SGLang's own numbers: each turn finds its whole history cached but the previous answer's last token;
the hit rate falls when the conversations outgrow the KV pool, and further with a smaller pool; without the radix
cache nothing is found; the server's Prefill lines agree with what the requests report; the hierarchical cache dies at
start on a CPU, as rule ``cpu_hierarchical_cache`` says. The twin answers the same way (tests/twin/test_sessions.py).
"""

from __future__ import annotations


import pytest

from grid.releases.checks import RULES
from grid.releases.features import holds
from grid.releases.flags import parse_version
from grid.storage.parquet import read_table
from tests.engines.test_sglang_cpu import _env, _setup, sglang_processes
from tests.timing import COUNT_HOST_NOISE
from tests.grid_cli import run_grid

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(2400)]  # the module's sweep fixture (run_grid: 1800 s)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    python, model, lib = _setup()
    run_dir = tmp_path_factory.mktemp("sglang_sessions") / "run"
    env_override = f"+engine.env={{LD_LIBRARY_PATH:{lib}}}" if lib else "engine.env={}"
    out = run_grid("+sweep=cpu_prefix_cache", "engine=sglang", "hardware=cpu_host", "model=tiny_llama",
                   f"model.path={model}", f"engine.python={python}", "probe.enabled=false", "ray.dashboard=false",
                   env_override, COUNT_HOST_NOISE, run_dir=run_dir, env=_env(), timeout_s=1800)
    assert not sglang_processes()
    lp = read_table(run_dir, "load_points").to_pandas()
    rq = read_table(run_dir, "requests").to_pandas()
    return out.stdout, lp, rq


def _point(lp, label_part: str, level: int):
    rows = lp[lp.label.str.contains(label_part, regex=False) & (lp.point_value == level)]
    assert len(rows) == 1, (label_part, level, lp.label.unique())
    return rows.iloc[0]


BASE = "max_total_tokens=2048 disable_radix_cache=default schedule_policy=default enable_hierarchical_cache=default"


def test_every_turn_finds_its_history_but_the_last_answer_token(sessions):
    stdout, lp, rq = sessions
    assert "Plan (exhaustive search)" in stdout
    row = _point(lp, BASE, 2)
    assert row.status == "ok"
    mine = rq[(rq.config_hash == row.config_hash) & (rq.point_index == row.point_index)]
    assert len(mine) == 8 and set(mine.turn_index) == {0, 1, 2, 3} and mine.session_index.nunique() == 2
    # the last answer token is not found where the release leaves it out of the cache (grid.releases.features)
    last = 0 if holds("caches_last_output_token", parse_version(row.engine_version)) else 1
    for _, turns in mine.sort_values("turn_index").groupby("session_index"):
        prev = None
        for _, r in turns.iterrows():
            expected = 0 if prev is None else prev.input_tokens + prev.output_tokens - last
            assert r.cached_tokens == expected, (r.turn_index, r.cached_tokens, expected)
            assert prev is None or r.input_tokens == prev.input_tokens + prev.output_tokens + 64
            prev = r
    # 0 + 95 + 191 + 287 (0.5.23; 96, 192, 288 on 0.5.9) of 64 + 160 + 256 + 352 prompt tokens per conversation
    assert row.cache_hit_rate == pytest.approx((576 - 3 * last) / 832)
    assert row.server_cache_hit_rate == pytest.approx(row.cache_hit_rate, abs=0.05)


def test_the_hit_rate_falls_as_the_conversations_outgrow_the_pool(sessions):
    _, lp, _ = sessions
    two, twelve = _point(lp, BASE, 2), _point(lp, BASE, 12)
    small = _point(lp, "max_total_tokens=1024 disable_radix_cache=default schedule_policy=default", 12)
    assert twelve.cache_hit_rate < 0.5 * two.cache_hit_rate          # 0.20 vs 0.69 measured
    assert small.cache_hit_rate < twelve.cache_hit_rate              # 0.04 measured


def test_without_the_radix_cache_nothing_is_found(sessions):
    _, lp, rq = sessions
    off = lp[lp.label.str.contains("disable_radix_cache=True")]
    assert set(off.status) == {"ok"} and (off.total_cached_tokens == 0).all()
    assert (off.server_cache_hit_rate == 0).all()
    assert (rq[rq.config_hash.isin(off.config_hash)].cached_tokens == 0).all()


def test_the_hierarchical_cache_dies_at_start_on_a_cpu(sessions):
    stdout, lp, _ = sessions
    hi = lp[lp.label.str.contains("enable_hierarchical_cache=True")]
    assert set(hi.trial_status) == {"failed"} and set(hi.trial_error_class) == {"startup_exit"}
    version = parse_version(lp.engine_version.iloc[0])
    (message,) = [r.message for r in RULES if r.name == "cpu_hierarchical_cache" and r.releases(version)]
    assert message in hi.trial_error_message.iloc[0]
    assert "1 known to fail here" in stdout
