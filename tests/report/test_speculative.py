"""Speculative decoding judged per load level (grid/report/speculative.py): exact values on hand-made rows."""

from __future__ import annotations

import pytest

from grid.storage.schema import judged_point_row
from grid.report import speculative as sp

OFF = {"speculative_algorithm": None}
S1 = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 1, "speculative_eagle_topk": 1,
      "speculative_num_draft_tokens": 2}
S3 = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
      "speculative_num_draft_tokens": 4}
SETTINGS = {"off": OFF, "s1": S1, "s3": S3}


def _row(h: str, c: int, tok_s: float, tpot_ms: float, accept: float | None = None, **kw) -> dict:
    return judged_point_row({}, **{
        "config_hash": h, "point_kind": "concurrency", "point_value": float(c), "point_index": 0,
        "status": "ok", "output_tok_per_s": tok_s, "tpot_median_ms": tpot_ms, "server_accept_len_mean": accept,
        **kw})


# (config, concurrency, output tok/s, TPOT p50 ms, accept len): s3 wins one stream, off wins 64 streams
ROWS = [_row("off", 1, 11.0, 90.0), _row("s1", 1, 19.0, 52.0, 1.85), _row("s3", 1, 29.0, 34.0, 3.03),
        _row("off", 16, 123.0, 125.0), _row("s1", 16, 186.0, 84.0, 1.85), _row("s3", 16, 246.0, 63.0, 3.03),
        _row("off", 64, 345.0, 180.0), _row("s1", 64, 321.0, 150.0, 1.85), _row("s3", 64, 347.0, 140.0, 3.03)]


def test_each_level_names_its_winner_and_its_gain_over_off():
    picks = sp.level_picks(ROWS, SETTINGS)
    tp = picks["output_tok_per_s"]
    assert [(p.level, p.winner.config_hash) for p in tp] == [(1.0, "s3"), (16.0, "s3"), (64.0, "off")]
    assert tp[0].gain_pct == pytest.approx((29 / 11 - 1) * 100)
    assert tp[0].winner.accept_length == 3.03
    # at 64 streams s3 is 0.6% above off: a tie at load.repeats=1 (1%), which goes to the simpler setting, off
    assert "the simpler off wins" in tp[2].why and "s3" not in tp[2].why and "NEXTN 3 steps" in tp[2].why
    pu = picks["tok_per_s_per_user"]
    assert [p.winner.config_hash for p in pu] == ["s3", "s3", "s3"]
    assert pu[2].winner.value == pytest.approx(1000 / 140) and pu[2].off.value == pytest.approx(1000 / 180)


def test_crossover_and_recommendation():
    picks = sp.level_picks(ROWS, SETTINGS)
    assert sp.crossover(picks["output_tok_per_s"]) == (
        "between concurrency 16 and 64 (from NEXTN 3 steps, top-k 1, 4 draft tokens to off)")
    assert sp.crossover(picks["tok_per_s_per_user"]) is None
    assert sp.recommendation(picks["tok_per_s_per_user"], (0, 5, 9), "per-request speed") == (
        "For per-request speed: NEXTN 3 steps, top-k 1, 4 draft tokens at every level measured.")
    old = sp.recommendation(picks["output_tok_per_s"], (0, 5, 9), "output throughput")
    assert old.startswith("For output throughput: it depends on the load (c1: NEXTN 3 steps, top-k 1, 4 draft "
                          "tokens; c16: NEXTN 3 steps, top-k 1, 4 draft tokens; c64: off)")
    assert "runs one setting for every batch size" in old
    assert "can switch the step count by batch size itself" in sp.recommendation(
        picks["output_tok_per_s"], (0, 5, 23), "output throughput")


def test_simpler_settings_win_ties_and_repeats_decide_by_their_spread():
    # two repeats each: s1 and s3 overlap at 100 +- a little, so s1 (fewer draft tokens) wins
    rows = [_row("s1", 4, 99.0, 40.0, repeat_index=0), _row("s1", 4, 101.0, 40.0, repeat_index=1),
            _row("s3", 4, 100.5, 40.0, repeat_index=0), _row("s3", 4, 102.0, 40.0, repeat_index=1)]
    p = sp.level_picks(rows, SETTINGS)["output_tok_per_s"][0]
    assert p.winner.config_hash == "s1" and p.off is None and p.gain_pct is None
    assert "overlap" in p.why
    # far apart: the faster wins however complex
    rows = [_row("s1", 4, 50.0, 40.0, repeat_index=0), _row("s1", 4, 51.0, 40.0, repeat_index=1),
            _row("s3", 4, 100.0, 40.0, repeat_index=0), _row("s3", 4, 101.0, 40.0, repeat_index=1)]
    p = sp.level_picks(rows, SETTINGS)["output_tok_per_s"][0]
    assert (p.winner.config_hash, p.why) == ("s3", "")
    assert sp.simplicity(OFF) < sp.simplicity(S1) < sp.simplicity(S3)


def test_host_noise_and_failed_points_do_not_judge():
    rows = [*ROWS, _row("s1", 64, 999.0, 1.0, client_lag_pct=50.0, repeat_index=1)]
    rows = [r for r in rows if not (r["config_hash"] == "s1" and r["point_value"] == 64.0)] + rows[-1:]
    assert all(p.winner.config_hash != "s1" for p in sp.level_picks(rows, SETTINGS)["output_tok_per_s"])
    assert sp.level_picks([{**ROWS[0], "status": "failed"}], SETTINGS) == {"output_tok_per_s": [],
                                                                          "tok_per_s_per_user": []}


def test_the_section_names_the_cap_and_is_empty_without_speculation():
    text = "\n".join(sp.lines(ROWS, SETTINGS, (0, 5, 9)))
    assert text.startswith("## Speculative decoding per load")
    assert "| c1 | 11.0, 11.1 | NEXTN 3 steps, top-k 1, 4 draft tokens (29.0 tok/s) | +163.6% |" in text
    assert "| c64 | 345, 5.56 | off (345 tok/s) | - | NEXTN 3 steps, top-k 1, 4 draft tokens (7.14 tok/s/user) " \
           "| +28.6% | - |" in text
    assert "ran at most 48 requests at once" in text and "concurrency 64" in text
    capped = {**SETTINGS, "s3": {**S3, "max_running_requests": 128}, "s1": {**S1, "max_running_requests": 128}}
    assert "48 requests" not in "\n".join(sp.lines(ROWS, capped, (0, 5, 9)))
    assert sp.lines(ROWS, {"off": OFF}, (0, 5, 9)) == []
    assert sp.setting_text({**S3, "max_running_requests": 128}) == (
        "NEXTN 3 steps, top-k 1, 4 draft tokens, max_running_requests 128")


def test_a_speculative_sweep_is_judged_per_level_so_early_stopping_skips_no_level(tmp_path):
    from grid.compose import compose_spec
    from grid.engines.base import get_engine
    from grid.sweep.measure import level_plan
    from grid.sweep.space import expand

    spec = compose_spec(["+sweep=speculative"], tmp_path)
    assert sp.judged_per_level(spec) and not sp.judged_per_level(compose_spec(["+sweep=cuda_graph"], tmp_path))
    plan = expand(spec)[1]
    levels = level_plan(spec, get_engine(spec), plan, best=1e9)   # a best no level of it can reach
    assert levels.metric is None and levels.best is None           # the twin-bound rule is off; the SLO rule stays
    assert levels.early_stop
