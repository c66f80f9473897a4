"""The accuracy guard: grid's prompts, exact-match scoring, who runs them, the twin's answers, the gate."""

from grid.storage.schema import judged_point_row
from grid.accuracy import Item, computes_differently, matches, prompts, score
from grid.config.schema import ObjectiveSpec
from grid.report.select import accuracy_gate, rank
from grid.twin.textgen import make_completion


def test_shipped_prompts_and_exact_match():
    items = prompts()
    assert len(items) == 20 and {i.kind for i in items} == {"arithmetic", "fact", "code"}
    assert matches(" 43", "43") and matches("43.\nmore text", "43") and matches(" h2o", "H2O")
    assert not matches(" 430", "43") and not matches("", "43") and not matches("The answer is 43", "43")
    two = (Item("a", "fact", "p", "Paris"), Item("b", "arithmetic", "q", "4"))
    assert score([" Paris", " 5"], two) == 0.5


def test_the_twin_answers_every_prompt_and_garbage_answers_none():
    def reply(item, garbage=None):
        c = make_completion(item.prompt, max_new_tokens=16, ignore_eos=False, temperature=0, rid="r",
                            garbage=garbage)
        return c.text(0, c.eos_after if c.eos_after is not None else 16)

    assert score([reply(i) for i in prompts()]) == 1.0
    assert score([reply(i, garbage="!") for i in prompts()]) == 0.0


def test_which_settings_change_the_numerics():
    base = {"kv_cache_dtype": "bfloat16", "dsa_decode_backend": "trtllm", "mem_fraction_static": 0.9}
    assert computes_differently({**base, "mem_fraction_static": 0.8}, base) == []
    assert computes_differently({**base, "kv_cache_dtype": "fp8_e4m3", "dsa_decode_backend": "tilelang"}, base) == \
        ["dsa_decode_backend", "kv_cache_dtype"]


def lp(h, out, share, role):
    return judged_point_row({}, config_hash=h, label=h, point_index=0, point_value=8, point_kind="concurrency",
                            status="ok", trial_status="ok", output_tok_per_s=out, accuracy_exact_match=share,
                            accuracy_role=role)


def test_a_faster_configuration_that_answers_worse_cannot_win():
    rows = [lp("base", 100.0, 1.0, "baseline"), lp("fp8", 130.0, 0.8, "differs: kv_cache_dtype"),
            lp("kern", 110.0, 0.95, "differs: dsa_decode_backend")]
    assert accuracy_gate(rows, 0.1) == (1.0, "the configurations that compute like the sweep's base", {
        "fp8": "less accurate: 80% of grid's accuracy prompts answered exactly vs 100% for the configurations that "
               "compute like the sweep's base (drop 20 points > accuracy.max_drop 10); differs: kv_cache_dtype"})
    v = rank(rows, ObjectiveSpec(), max_accuracy_drop=0.1)
    assert [(x.label, x.outcome) for x in v] == [("kern", "best"), ("base", "lost"), ("fp8", "less_accurate")]
    assert v[2].reason.endswith("differs: kv_cache_dtype; it scored 130 tok/s at concurrency 8")
    assert rank(rows, ObjectiveSpec())[0].label == "fp8"              # the guard off: the fastest wins
    no_base = [lp("a", 1.0, 0.9, "differs: x"), lp("b", 2.0, 0.7, "differs: y")]
    assert accuracy_gate(no_base, 0.1)[:2] == (0.9, ("the best any configuration answered, none measured computing like the sweep's base"))
