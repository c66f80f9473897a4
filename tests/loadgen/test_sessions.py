"""Multi-turn sessions: the ``sessions`` dataset kind (a JSONL file, or generated), the prompts a
turn carries, and the load settings that size a sessions point."""

import json

import pytest

from grid.config.schema import LoadSpec
from grid.loadgen.dataset import (DatasetError, SessionTurn, check_dataset, generated_sessions, session_file,
                                  session_prompts)
from grid.loadgen.records import Prompt
from grid.loadgen.runner import sessions_of

pytestmark = pytest.mark.unit


def _file(tmp_path, lines):
    p = tmp_path / "sessions.jsonl"
    p.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return str(p)


def test_a_sessions_file_groups_turns_by_session_in_file_order(tmp_path):
    path = _file(tmp_path, [
        {"session_id": "a", "text": "hello there", "output_length": 8},
        {"session_id": 7, "input_length": 5, "output_length": 3, "delay_ms": 1500},
        "",
        {"session_id": "a", "input_length": 4, "output_length": 2, "delay_ms": 250, "extra": "ignored"},
    ])
    conv = session_file(path)
    assert conv == ((SessionTurn("a", 3, 8, "hello there", 0.0), SessionTurn("a", 4, 2, None, 250.0)),
                    (SessionTurn("7", 5, 3, None, 1500.0),))
    prompts = session_prompts(conv, 3, seed=0)
    assert [(p.index, p.session, p.turn, p.think_s, p.output_len) for p in prompts] == [
        (0, 0, 0, 0.0, 8), (1, 0, 1, 0.25, 2), (2, 1, 0, 1.5, 3)]
    assert prompts[0].text == "hello there" and len(prompts[1].text.split()) == 4
    assert prompts == session_prompts(conv, 3, seed=0)   # seeded: the same words every time
    check_dataset("sessions", path)


@pytest.mark.parametrize("line, message", [
    ({"text": "x", "output_length": 2}, "line 1: 'session_id' must be a string or an integer, got None"),
    ({"session_id": True, "text": "x", "output_length": 2}, "'session_id' must be a string or an integer"),
    ({"session_id": 1, "output_length": 2}, "line 1: 'input_length' must be a whole number >= 1, got None"),
    ({"session_id": 1, "text": "", "output_length": 2}, "'text' must be a non-empty string"),
    ({"session_id": 1, "text": "x", "output_length": 0}, "'output_length' must be a whole number >= 1, got 0"),
    ({"session_id": 1, "text": "x", "output_length": 2, "delay_ms": -1}, "'delay_ms' must be a number >= 0"),
    ("[1, 2]", "line 1 is not a JSON object"),
    ("{nope", "line 1 is not JSON"),
])
def test_a_bad_sessions_line_is_named(tmp_path, line, message):
    path = _file(tmp_path, [line])
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        check_dataset("sessions", path)
    assert str(err.value).startswith("load.dataset_path: ")


def test_generated_sessions_and_their_prompts():
    conv = generated_sessions(3, 2, input_len=4, output_len=5, think_time_s=0.5)
    assert len(conv) == 3 and all(len(c) == 2 for c in conv)
    assert conv[1][1] == SessionTurn("1", 4, 5, None, 500.0)
    prompts = session_prompts(conv, 3, seed=1)       # whole conversations until 3 turns are covered: 2 of them
    assert [(p.session, p.turn) for p in prompts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [[p.index for p in s] for s in sessions_of(list(reversed(prompts)))] == [[2, 3], [0, 1]]
    with pytest.raises(ValueError, match="must be >= 1"):
        generated_sessions(0, 2, 4, 5, 0.0)
    with pytest.raises(ValueError, match="think_time_s must be >= 0"):
        generated_sessions(1, 2, 4, 5, -1.0)


def test_a_turn_carries_its_history():
    p = Prompt(0, 3, 4, text="and now?", session=0, turn=2,
               history=(("first question", "first answer"), ("second", "answer two")))
    assert p.full_text == "first question\nfirst answer\nsecond\nanswer two\nand now?"
    assert p.messages() == [
        {"role": "user", "content": "first question"}, {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second"}, {"role": "assistant", "content": "answer two"},
        {"role": "user", "content": "and now?"}]
    assert Prompt(1, 1, 1, text="alone").full_text == "alone"
    with pytest.raises(ValueError, match="history needs text"):
        Prompt(2, 1, 1, input_ids=(1,), history=(("a", "b"),))


def test_a_sessions_point_plays_whole_conversations_one_user_at_least_each():
    load = LoadSpec(dataset="sessions", sessions={"turns": 8}, concurrency=[4, 16, 64])
    # at least 101 requests (the p99 default) in whole conversations; at least one conversation per user
    assert [load.prompts_for(c) for c in (4, 16, 64)] == [13 * 8, 16 * 8, 64 * 8]
    assert not load.steady and LoadSpec(concurrency=[4]).steady
    fixed = LoadSpec(dataset="sessions", sessions={"turns": 3, "num_sessions": 5}, concurrency=[2])
    assert fixed.prompts_for(2) == 15


def test_sessions_refuse_an_open_loop():
    with pytest.raises(ValueError, match="load.request_rate: load.dataset=sessions replays conversations turn by "
                                         "turn"):
        LoadSpec(dataset="sessions", request_rate=[1.0])
