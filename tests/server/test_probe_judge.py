"""Every rule of the correctness probe's verdict, each with a case that must fail and one just inside it."""

from __future__ import annotations

import pytest

from grid.server.probe import NAN_LOG, PROBES, contains_answer, judge, judge_answer

RIGHT = [" Paris.", " 4", " Au"]


@pytest.mark.parametrize("text,expected", [
    ("Paris.", "paris"), ("PARIS", "paris"), (" The answer is 4.", "4"), ("2+2=4", "4"), ("4", "4"),
    ("Answer:4\n", "4"), ("Au (from Latin aurum)", "au"), ("gold's symbol is Au.", "au"),
    ("4,000 or 4", "4"), ("New York", "new york"), ("in new  York.", "New York"),
])
def test_whole_words_and_numbers_are_found(text, expected):
    assert contains_answer(text, expected)


@pytest.mark.parametrize("text,expected", [
    ("w1234 w88 w4 x4", "4"),        # a random-weight model's words (the probe passed it by substring)
    ("14", "4"), ("40", "4"), ("4.5", "4"), ("4,000", "4"), ("4th", "4"), ("_4", "4"), ("1234", "4"),
    ("Parisian", "paris"), ("Aura", "au"), ("Beau", "au"), ("saucer", "au"),
    ("York New", "new york"), ("", "4"), ("4", ""),
])
def test_right_characters_inside_another_word_or_number_are_not_the_answer(text, expected):
    assert not contains_answer(text, expected)
    if text.strip() and expected:
        assert judge_answer(text, expected) == "wrong_answer"


def test_empty_is_empty_output():
    for text in ("", "   ", "\n\t \r\n"):
        assert judge_answer(text, "paris") == "empty_output"
    assert judge_answer(" x ", "paris") == "wrong_answer"  # one visible character is not empty


@pytest.mark.parametrize("text", ["abc\x00def", "Paris\x07", "Par\ufffdis", "\x1b[0mParis", "Paris\x1fcity"])
def test_bytes_that_are_not_text_are_garbage(text):
    assert judge_answer(text, "paris") == "garbage_output"


@pytest.mark.parametrize("text", ["Paris\n", "Paris\tcity", "\r\nParis"])
def test_newlines_and_tabs_are_text(text):
    assert judge_answer(text, "paris") is None


def test_repetition_threshold():
    # at least 4 pieces, at most one distinct piece in 8 (at least 1)
    assert judge_answer("!!!!", "paris") == "garbage_output"               # 4 pieces, 1 distinct
    assert judge_answer("!!!", "paris") == "wrong_answer"                   # 3 pieces: too short to judge
    assert judge_answer("Paris Paris Paris", "paris") is None               # 3 pieces
    assert judge_answer("Paris Paris Paris Paris", "paris") == "garbage_output"
    sixteen_two = " ".join(["Paris", "city"] * 8)                           # 16 pieces, 2 distinct <= 16 // 8
    assert judge_answer(sixteen_two, "paris") == "garbage_output"
    sixteen_three = " ".join(["Paris", "city"] * 7 + ["of", "light"])       # 16 pieces, 3 distinct
    assert judge_answer(sixteen_three, "paris") is None
    fifteen_two = " ".join(["Paris", "city"] * 7 + ["Paris"])               # 15 pieces, 2 distinct > 15 // 8
    assert judge_answer(fifteen_two, "paris") is None
    seven_one = " ".join(["Paris"] * 7)                                     # 7 // 8 = 0, but at least 1
    assert judge_answer(seven_one, "paris") == "garbage_output"
    eight_two = " ".join(["Paris"] * 7 + ["city"])                          # 8 pieces, 2 distinct > 1
    assert judge_answer(eight_two, "paris") is None


def test_punctuation_counts_as_pieces():
    assert judge_answer("Paris . . .", "paris") is None                    # 4 pieces, 2 distinct > 1
    assert judge_answer("....", "paris") == "garbage_output"
    assert judge_answer("Paris!!!!!!!!!!!!!!!", "paris") == "garbage_output"  # 16 pieces, 2 distinct


def test_right_answers_pass():
    res = judge(RIGHT)
    assert res.ok and res.error_class is None and res.detail == "" and res.answers == RIGHT
    assert [exp for _, exp in PROBES] == ["paris", "4", "au"]


def test_one_wrong_answer_is_tolerated_but_not_two_thirds_garbage():
    assert judge([" Paris.", " 5", " Au"]).ok
    assert judge([" London.", " 5", " Au"]).ok                            # one right answer is enough
    res = judge([" London", " 7", " Fe"])
    assert not res.ok and res.error_class == "garbage_output" and "no probe answered correctly" in res.detail


def test_random_weight_words_fail():
    res = judge(["w1234 w77 parisw", "w1234 4w w41", "w9 auw w3"])
    assert not res.ok and res.error_class == "garbage_output"


@pytest.mark.parametrize("i", range(3))
def test_an_empty_answer_fails_even_when_the_others_are_right(i):
    answers = list(RIGHT)
    answers[i] = "  "
    res = judge(answers)
    assert not res.ok and res.error_class == "empty_output" and res.detail.startswith(f"probe {i}:")


@pytest.mark.parametrize("i", range(3))
def test_a_garbage_answer_fails_even_when_the_others_are_right(i):
    answers = list(RIGHT)
    answers[i] = "!!!!!!!!"
    res = judge(answers)
    assert not res.ok and res.error_class == "garbage_output" and res.detail == f"probe {i}: '!!!!!!!!'"


def test_garbage_is_reported_before_empty():
    res = judge(["", "!!!!!!!!", " Au"])
    assert res.error_class == "garbage_output" and res.detail.startswith("probe 1:")


def test_detail_quotes_at_most_80_characters():
    bad = "\x00" + "x" * 200
    res = judge([" Paris.", bad, " Au"])
    assert res.detail == "probe 1: " + repr(bad[:80])


@pytest.mark.parametrize("log", [
    "[2026-05-01] Detected errors during sampling! NaN in the logits.",
    "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
    "probability tensor contains either inf, nan or element < 0",
    "nan IN THE LOGITS",
])
def test_nan_in_the_log_fails_even_with_right_answers(log):
    assert NAN_LOG.search(log)
    res = judge(RIGHT, "line before\n" + log + "\nline after")
    assert not res.ok and res.error_class == "nan_output" and res.answers == RIGHT


def test_other_log_lines_do_not_fail():
    assert judge(RIGHT, "Decode batch. #running-req: 1, token usage: 0.01, nan_count: 0").ok
    assert judge(RIGHT, "").ok


def test_every_failure_carries_false_its_detail_and_the_answers():
    nan = judge(RIGHT, "NaN in the logits")
    assert (nan.ok, nan.error_class, nan.detail, nan.answers) == (
        False, "nan_output", "server log reports NaN in the logits", RIGHT)
    empty = judge([" Paris.", "", " Au"])
    assert (empty.ok, empty.error_class, empty.detail, empty.answers) == (
        False, "empty_output", "probe 1: ''", [" Paris.", "", " Au"])
    wrong = ["London " + "x" * 50, "7", "Fe"]
    res = judge(wrong)
    assert (res.ok, res.error_class, res.answers) == (False, "garbage_output", wrong)
    assert res.detail == "no probe answered correctly: " + repr(["London " + "x" * 33, "7", "Fe"])
    assert judge(RIGHT).ok is True
