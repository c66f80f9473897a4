from grid.server.probe import judge, judge_answer


def test_judge_answer_classes():
    assert judge_answer(" Paris, the city of light.", "paris") is None
    assert judge_answer("   ", "paris") == "empty_output"
    assert judge_answer("!!!!!!!!!!!!!!!!", "paris") == "garbage_output"
    assert judge_answer("the the the the the the the the", "4") == "garbage_output"
    assert judge_answer("abc\x00def", "4") == "garbage_output"
    assert judge_answer("London is big", "paris") == "wrong_answer"


def test_judge_overall():
    assert judge([" Paris.", " 4", " Au"]).ok
    assert judge([" Paris.", " 5", " Au"]).ok           # one wrong answer is not garbage
    bad = judge(["!!!!!!!!", "!!!!!!!!", "!!!!!!!!"])
    assert not bad.ok and bad.error_class == "garbage_output"
    nan = judge([" Paris.", " 4", " Au"], "[2026] Detected errors during sampling! NaN in the logits.")
    assert nan.error_class == "nan_output"
    assert judge(["London", "7", "Fe"]).error_class == "garbage_output"
