"""The first-wave / steady-state split of a closed-loop run's mean TTFT (grid.twin.fidelity.ttft_split)."""

from __future__ import annotations

import copy

import pytest
import yaml

from grid.twin.fidelity import TAIL_KEYS, evaluate, load_runs, ttft_split


def _run(run_id: str) -> dict:
    return next(r for r in load_runs() if r["id"] == run_id)


def test_split_of_ix870_c8_adds_up():
    run = _run("ix870-c8")
    s = ttft_split(run)
    assert (s.concurrency, s.requests) == (8, 80)
    # published parts: InferenceX #870, concurrency 8: mean 330.6, P99 1975.4, ITL mean 127.4 / P99 245.0
    assert s.published_rest_ms == pytest.approx((80 * 330.6 - 8 * 1975.4) / 72, rel=1e-12)
    assert s.prefill_stall_ms == pytest.approx(245.0 - 127.4, rel=1e-12)
    # --stream-interval 10, 7 other streams, mean output length of the 80 drawn requests
    assert 0.07 < s.stalled_chunk_fraction < 0.08
    # the twin's parts are its own mean split at the c requests sent at time 0
    assert s.twin_mean_ms == pytest.approx((8 * s.twin_first_wave_ms + 72 * s.twin_rest_ms) / 80, rel=1e-9)
    assert s.twin_first_wave_ms > s.twin_rest_ms
    twin_row = next(r for r in evaluate([run]) if r.metric == "ttft_ms")
    assert s.twin_mean_ms == pytest.approx(twin_row.twin, rel=1e-12)
    assert s.error_if_first_wave == pytest.approx((8 * 1975.4 + 72 * s.twin_rest_ms) / 80 / 330.6 - 1, rel=1e-12)
    assert s.error_if_rest == pytest.approx((8 * s.twin_first_wave_ms + 72 * s.published_rest_ms) / 80 / 330.6 - 1,
                                            rel=1e-12)
    # numpy's P99 of 80 values interpolates between the 79th and 80th sorted (0.99 x 79 = 78.21, 0-based): only the
    # slowest request is certainly at or above it
    assert s.requests_at_p99 == 1


@pytest.mark.parametrize(("run_id", "at_p99"), [("ix870-c16", 2), ("ix870-c32", 4), ("ix870-c64", 7),
                                                ("ix870-c4-1k1k", 1)])
def test_requests_at_p99_follow_numpy_interpolation(run_id, at_p99):
    import numpy as np

    s = ttft_split(_run(run_id))
    assert s.requests == 10 * s.concurrency
    assert s.requests_at_p99 == at_p99
    # the definition holds against numpy itself: with the at_p99 slowest at 1 and the rest at 0, the P99 is above
    # 0; with one fewer slow request it is 0
    values = np.zeros(s.requests)
    values[-at_p99:] = 1.0
    assert np.percentile(values, 99) > 0
    values[-at_p99] = 0.0
    assert np.percentile(values, 99) == 0


def test_every_tail_run_is_closed_loop_with_its_tail_above_its_mean():
    tails = [r for r in load_runs() if r.get("tail")]
    assert {r["id"] for r in tails} == {"ix870-c8", "ix870-c16", "ix870-c32", "ix870-c64", "ix870-c4-1k1k",
                                        "ix870-c4-1k8k", "ix870-c4-8k1k"}
    for r in tails:
        assert r["tail"]["ttft_p99_ms"] > r["metrics"]["ttft_ms"]["value"]
        assert r["tail"]["itl_p99_ms"] >= r["tail"]["itl_mean_ms"]
        # with --stream-interval 10 a chunk spans 10 decode steps: mean ITL is within 2% of 10 x mean TPOT
        assert r["tail"]["itl_mean_ms"] == pytest.approx(10 * r["metrics"]["tpot_ms"]["value"], rel=0.02)


def test_tail_block_checked(tmp_path):
    runs_file = tmp_path / "rows.yaml"

    run = copy.deepcopy(_run("ix870-c8"))
    run["tail"] = {"ttft_p99_ms": 1.0, "itl_mean": 2.0, "itl_p99_ms": 3.0}
    runs_file.write_text(yaml.safe_dump({"runs": [run]}))
    with pytest.raises(ValueError, match=r"ix870-c8.*'tail' keys must be \['ttft_p99_ms', 'itl_mean_ms'"):
        load_runs(runs_file)
    run["tail"] = dict.fromkeys(TAIL_KEYS, 1.0)
    del run["workload"]["max_concurrency"]
    runs_file.write_text(yaml.safe_dump({"runs": [run]}))
    with pytest.raises(ValueError, match="ix870-c8.*closed-loop"):
        load_runs(runs_file)
    with pytest.raises(ValueError, match="dc-h200-70b-tp4-rps4.*'tail' block"):
        ttft_split(_run("dc-h200-70b-tp4-rps4"))
