"""Seeded datasets."""

from __future__ import annotations

import json

import pytest

from grid.loadgen.dataset import random_prompts, shared_prefix_prompts, sharegpt_prompts


def test_random_prompts_seeded_and_ranges():
    a = random_prompts(200, 100, 50, 0.5, 32000, seed=3)
    assert a == random_prompts(200, 100, 50, 0.5, 32000, seed=3)
    assert a != random_prompts(200, 100, 50, 0.5, 32000, seed=4)
    assert all(50 <= p.input_len <= 100 and len(p.input_ids) == p.input_len for p in a)
    assert all(25 <= p.output_len <= 50 for p in a)
    assert {p.input_len for p in random_prompts(500, 10, 4, 0.5, 100, seed=0)} == set(range(5, 11))  # inclusive
    assert all(0 <= t < 32000 for p in a for t in p.input_ids)
    assert [p.index for p in a] == list(range(200))


def test_range_ratio_semantics_like_bench_serving():
    fixed = random_prompts(20, 64, 16, 1.0, 100, seed=0)
    assert {(p.input_len, p.output_len) for p in fixed} == {(64, 16)}
    wide = random_prompts(500, 8, 8, 0.0, 100, seed=0)
    assert {p.input_len for p in wide} == set(range(1, 9))  # ratio 0 -> [max(int(0), 1), L]
    with pytest.raises(ValueError):
        random_prompts(1, 8, 8, 1.5, 100, seed=0)


def test_random_text_prompts():
    a = random_prompts(10, 30, 10, 1.0, 100, seed=2, as_text=True)
    assert a == random_prompts(10, 30, 10, 1.0, 100, seed=2, as_text=True)
    assert all(p.input_ids is None and len(p.text.split()) == 30 for p in a)


def test_sharegpt_local_file(tmp_path):
    convs = [{"conversations": [{"from": "human", "value": f"question number {i} " * 3},
                                {"from": "gpt", "value": "x" * (40 * (i + 1))}]} for i in range(10)]
    convs.append({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})  # too short
    convs.append({"conversations": [{"from": "human", "value": "only one turn here"}]})
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs))
    a = sharegpt_prompts(path, 10, seed=1)
    assert a == sharegpt_prompts(path, 10, seed=1)
    assert {p.text for p in a} == {c["conversations"][0]["value"] for c in convs[:10]}
    assert sorted(p.output_len for p in a) == [10 * (i + 1) for i in range(10)]
    assert {p.output_len for p in sharegpt_prompts(path, 3, seed=1, output_len=7)} == {7}
    with pytest.raises(ValueError):
        sharegpt_prompts(path, 11, seed=1)


def test_shared_prefix_groups():
    ps = shared_prefix_prompts(3, 4, prefix_len=20, suffix_len=5, output_len=8, vocab_size=1000, seed=9)
    assert len(ps) == 12 and ps == shared_prefix_prompts(3, 4, 20, 5, 8, 1000, 9)
    prefixes = {p.input_ids[:20] for p in ps}
    assert len(prefixes) == 3
    assert all(len(p.input_ids) == 25 for p in ps)
