"""grid's pre-launch rules and the twin's failure table never disagree (issue: one home for each SGLang fact).

Over every catalogued release x every hardware file x every configuration of the shipped sweeps (those that differ
in what the rules read), plus the attention backends on a dense model:

* a kernel requirement (grid/releases/checks.py ``RULES``, stage ``requirement``) refuses a configuration exactly where
  its failure-table row (grid/twin/failures.py, derived from the rule) makes the twin crash;
* no failure-table row restates a launch-time refusal of SGLang (a ``launch`` rule's message): those belong to the
  rules, which the twin applies at launch as SGLang does, so a row could only fire where the rules, per release,
  say SGLang accepts (the drift this test was written for: ``dsa_tilelang_fp8_cuda_rejected`` crashed tilelang with
  an fp8 KV cache at 0.5.22, which SGLang 0.5.22 accepts on SM >= 89).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grid.config.specs import HardwareSpec, ModelSpec
from grid.releases import catalog
from grid.releases.checks import RULES, check_config, refusals
from grid.releases.flags import SETTINGS, parse_version, to_argv
from grid.twin.perf_of_flags import perf_model
from grid.twin.failures import FAILURE_TABLE, RESOLVED_BY_PERF, find_failures

ROOT = Path(__file__).resolve().parents[2]
#: every requirement rule and the failure-table row that shows it on the twin (declared on the rule)
LINKED = {r.name: r.twin_failure.id for r in RULES if r.twin_failure is not None}
SHAPE_RULES = ("shape_needs_gpus", "dp_divides_tp_assert")


def _hardware() -> list[HardwareSpec]:
    out = []
    for path in sorted((ROOT / "conf" / "hardware").glob("*.yaml")):
        hw = HardwareSpec.model_validate(yaml.safe_load(path.read_text()))
        if not hw.is_cpu and hw.nodes == 1:  # the twin models GPUs; one node is what these rules read
            out.append(hw)
    return out


def _configs() -> list[dict]:
    """Every configuration of every shipped sweep (conf/sweep: its base, its grid's product and its extra configs), one
    per distinct value of what the requirement rules and the twin's backend resolution read (the attention and
    sparse-attention backends and the KV cache dtype; joint.yaml's 640 collapse to the few that differ there)."""
    import itertools

    # the parallel shape (shape_needs_gpus and dp_divides_tp_assert read it) is left to the two tests of shapes below
    keys = sorted({k for r in RULES if r.name in LINKED and r.name not in SHAPE_RULES for k in r.reads}
                  | {"kv_cache_dtype"})
    out: dict[tuple, dict] = {}
    for path in sorted((ROOT / "conf" / "sweep").glob("*.yaml")):
        sweep = yaml.safe_load(path.read_text())
        base = sweep.get("base") or {}
        grid = sweep.get("grid") or {}
        configs = [{**base, **dict(zip(grid, values))} for values in itertools.product(*grid.values())] if grid \
            else [dict(base)]
        configs += [{**base, **{k: v for k, v in c.items() if k not in ("label", "load")}}
                    for c in sweep.get("configs") or []]
        for settings in configs:
            out.setdefault(tuple(repr(settings.get(k)) for k in keys), settings)
    return list(out.values())


MODELS = {name: ModelSpec.model_validate(yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text()))
          for name in ("glm5_nvfp4", "llama3_1_8b")}
RELEASES = [".".join(map(str, parse_version(r))) for r in catalog.releases()]


def test_every_requirement_rule_has_its_row():
    assert set(LINKED) >= {"fa3_needs_sm90", "aiter_needs_rocm", "trtllm_dsa_needs_sm100"}
    assert {r.name for r in RULES if r.stage == "requirement" and r.hardware[0].vendor != "cpu"} == set(LINKED)
    # a start failure on GPUs is one the twin must show too: every such rule declares its twin failure (today every
    # start rule is of the CPU host, which the twin does not play)
    gpu_start = {r.name for r in RULES if r.stage == "start" and any(h.vendor != "cpu" for h in r.hardware)}
    assert gpu_start <= set(LINKED)
    rows = {row.id: row for row in FAILURE_TABLE}
    for rule in RULES:
        if rule.twin_failure is not None:  # the row is the rule's: its source, and SGLang's words in its log line
            row = rows[rule.twin_failure.id]
            assert row.source == rule.where
            assert rule.twin_failure.line(rule.message) == row.log_lines[0]


def test_fa3_follows_sglangs_check_on_every_gpu():
    """SGLang's fa3 backend serves SM90, and SM80-89 for models without MLA (create_flashattention_v3_backend):
    an A100 with a dense model runs fa3 in the pre-launch check and on the twin; GLM-5 (MLA) on an A100 does not."""
    a100 = next(hw for hw in _hardware() if hw.name == "a100_x2")
    for release in ("0.5.9", "0.5.23"):
        for model_name, refused in (("llama3_1_8b", False), ("glm5_nvfp4", True)):
            model = MODELS[model_name]
            settings = {"attention_backend": "fa3", "tp_size": 2}
            reasons = check_config(settings, parse_version(release), model, a100)
            assert bool(reasons) is refused, (release, model_name, reasons)
            perf = perf_model(model, a100, to_argv(settings, parse_version(release)), release)
            if perf is not None:
                rows = {f.id for f in find_failures(model, a100, perf.cfg, perf)}
                assert ("dsa_fa3_sm120" in rows) is refused, (release, model_name, rows)


def test_no_row_restates_a_launch_refusal():
    launch = [r.message.split("{}")[0][:60] for r in RULES if r.stage == "launch"]
    for row in FAILURE_TABLE:
        for line in row.log_lines:
            assert not any(m in line for m in launch), f"failure row {row.id} restates a launch rule: {line}"


@pytest.mark.parametrize("release", RELEASES)
def test_rules_and_the_failure_table_agree(release):
    version = parse_version(release)
    checked = 0
    for hw in _hardware():
        for model_name, settings_list in (("glm5_nvfp4", _configs()),
                                          ("llama3_1_8b", [{"attention_backend": b, "tp_size": 1}
                                                           for b in ("fa3", "aiter", "flashinfer", "triton")])):
            model = MODELS[model_name]
            for settings in settings_list:
                settings = {**settings, "tp_size": settings.get("tp_size", hw.gpu_count)}
                try:
                    reasons = check_config(settings, version, model, hw)
                except ValueError:
                    continue
                refused = {r.name for r in RULES if r.name in LINKED and r.refuses(settings, version, model, hw)}
                if any(not any(r.message.split("{}")[0] in why for r in RULES if r.name in LINKED) for why in reasons):
                    continue  # refused by SGLang's own argument checks: never launched, the twin refuses it too
                perf = perf_model(model, hw, to_argv(settings, version), release)
                if perf is None:
                    continue
                rows = {f.id for f in find_failures(model, hw, perf.cfg, perf)}
                for rule, row in LINKED.items():
                    assert (rule in refused) <= (row in rows), (release, hw.name, settings, rule, rows)
                    explicit = {settings.get("attention_backend"), settings.get("dsa_prefill_backend"),
                                settings.get("dsa_decode_backend")} - {None}
                    resolved = {perf.cfg.attention_backend, perf.dsa_prefill_backend, perf.dsa_decode_backend}
                    if row in rows and explicit >= (resolved - {None}):
                        assert rule in refused, (release, hw.name, settings, row)
                checked += 1
    assert checked > 0


def _twin_failure(model, hw, settings, release, row_id):
    """The failure-table row ``row_id`` that a twin launched with ``settings`` shows (None: it does not fire)."""
    perf = perf_model(model, hw, to_argv(settings, parse_version(release)), release)
    assert perf is not None, settings
    return {f.id: f for f in find_failures(model, hw, perf.cfg, perf)}.get(row_id)


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_a_shape_larger_than_the_node_is_refused_and_crashes_the_twin_alike(release):
    """tp_size x pp_size (x dp_size without DP attention) GPUs per node: more than the hardware file's is refused before
    launch, and the twin launched anyway dies at distributed init with CUDA's error; within it, neither."""
    version = parse_version(release)
    h100x8 = next(hw for hw in _hardware() if hw.name == "h100_x8")
    model = MODELS["llama3_1_8b"]
    for settings, refused in (({"tp_size": 8}, False), ({"tp_size": 16}, True), ({"tp_size": 4, "dp_size": 2}, False),
                              ({"tp_size": 8, "dp_size": 2}, True), ({"tp_size": 4, "pp_size": 2,
                                                                      "disable_overlap_schedule": True}, False),
                              ({"tp_size": 8, "pp_size": 2, "disable_overlap_schedule": True}, True)):
        reasons = check_config(settings, version, model, h100x8)
        assert any("needs" in r and "invalid device ordinal" in r for r in reasons) is refused, (settings, reasons)
        row = _twin_failure(model, h100x8, settings, release, "shape_needs_gpus")
        assert (row is not None) is refused, (settings, row)
        if row is not None:
            assert row.log_lines == ("RuntimeError: CUDA error: invalid device ordinal",)


@pytest.mark.parametrize("release", ["0.5.21", "0.5.22", "0.5.23"])
def test_dp_attention_that_does_not_divide_tp_is_refused_and_crashes_the_twin_alike(release):
    """DP attention with dp_size not dividing tp_size: SGLang's own argument check up to 0.5.21 (dp_divides_tp, its
    message), a bare assert from 0.5.22 (dp_divides_tp_assert: refused before launch, and the twin launched anyway
    stops with ``AssertionError`` at the start); dp_size above tp_size no longer divides the twin's model by zero."""
    version = parse_version(release)
    h100x8 = next(hw for hw in _hardware() if hw.name == "h100_x8")
    model = MODELS["glm5_nvfp4"]
    for settings, refused in (({"tp_size": 8, "dp_size": 4}, False), ({"tp_size": 8, "dp_size": 3}, True),
                              ({"tp_size": 2, "dp_size": 4}, True), ({"tp_size": 2, "dp_size": 3,
                                                                      "enable_dp_attention": False}, False)):
        settings = {"enable_dp_attention": True, **settings}
        reasons = check_config(settings, version, model, h100x8)
        if release == "0.5.21":
            assert reasons == (["tp_size must be divisible by dp_size * attn_cp_size"] if refused else []), settings
            continue
        assert reasons == (["tp_size must be divisible by dp_size with DP attention: SGLang stops at a bare "
                            "AssertionError"] if refused else []), settings
        row = _twin_failure(model, h100x8, settings, release, "dp_divides_tp_assert")
        assert (row is not None) is refused, (settings, row)
        if row is not None:
            assert row.log_lines == ("AssertionError",) and row.effect == "startup_crash"
            assert row.at_s == 0.0  # the start of the first phase: before anything runs


# --- every value of every setting each linked rule reads (not only the shipped sweeps) ------------------------------
#: Values tried for a numeric or boolean setting a rule reads (a choice setting takes every value its release allows).
_NUMBERS = {int: (None, 1, 2, 3, 4, 8, 16), bool: (None, False, True)}


def _values(name: str, version) -> tuple:
    allowed = SETTINGS[name].allowed(version)
    return (None, *allowed) if allowed else _NUMBERS[SETTINGS[name].type]


def _cases(version, rules, pairs: bool):
    """Settings to try: each setting a rule reads at each of its values, the others unset (``pairs``: each two settings
    one rule reads at every pair of their values, so that a rule over a conjunction is met), tp_size at the node's
    GPUs unless varied."""
    import itertools

    seen: set[tuple] = set()
    for rule in rules:
        groups = itertools.combinations(rule.reads, 2) if pairs and len(rule.reads) > 1 else ((k,) for k in rule.reads)
        for names in groups:
            for values in itertools.product(*(_values(k, version) for k in names)):
                key = tuple(zip(names, values))
                if key not in seen:
                    seen.add(key)
                    yield dict(key)


def _disagreements(release: str, rules=None, pairs: bool = False):
    """Where a linked requirement rule and its twin row disagree on ``release`` (yielded as found): over every GPU
    hardware file, both models and :func:`_cases`. A rule that refuses the settings as given must make the twin crash
    with its row; a row that fires must be one whose rule refuses the settings the server resolved (a backend left
    unset resolves to the model's default)."""
    version = parse_version(release)
    rules = [r for r in RULES if r.name in LINKED] if rules is None else rules
    reads = sorted({k for r in rules for k in r.reads})
    for hw in _hardware():
        for model in MODELS.values():
            for case in _cases(version, rules, pairs):
                settings = {"tp_size": hw.gpu_count, **case}
                if any(r.rule is None or r.rule.name not in LINKED for r in refusals(settings, version, model, hw)):
                    continue  # refused by SGLang's own checks: never launched, the twin refuses it alike
                perf = perf_model(model, hw, to_argv(settings, version), release)
                if perf is None:
                    continue
                rows = {f.id for f in find_failures(model, hw, perf.cfg, perf)}
                resolved = {k: (getattr(perf, k) if k in RESOLVED_BY_PERF else getattr(perf.cfg, k, None))
                            for k in reads}
                for rule in rules:
                    row = LINKED[rule.name]
                    if rule.refuses(settings, version, model, hw) is not None and row not in rows:
                        yield hw.name, model.name, settings, rule.name, "refused, the twin starts"
                    if row in rows and rule.refuses(resolved, version, model, hw) is None:
                        yield hw.name, model.name, settings, rule.name, "accepted, the twin crashes"


def _newest_release(rule) -> str:
    return next(r for r in reversed(RELEASES) if rule.releases(parse_version(r)))


@pytest.mark.parametrize("release", RELEASES)
def test_every_value_of_every_setting_a_rule_reads_agrees(release):
    assert list(_disagreements(release)) == []


@pytest.mark.parametrize("rule", sorted(LINKED))
def test_every_pair_of_values_a_rule_reads_agrees(rule):
    (the_rule,) = [r for r in RULES if r.name == rule]
    assert list(_disagreements(_newest_release(the_rule), [the_rule], pairs=True)) == []


@pytest.mark.parametrize("rule", sorted(LINKED))
def test_a_twin_row_that_ignores_a_setting_its_rule_reads_is_caught(rule, monkeypatch):
    """The enumeration above finds a disagreement when a rule's twin row is made blind to one setting the rule reads
    (the row reads it as unset): each setting a rule declares is one the twin must receive."""
    import dataclasses

    from grid.twin import failures

    (the_rule,) = [r for r in RULES if r.name == rule]
    original = {row.id: row for row in failures.FAILURE_TABLE}[LINKED[rule]]

    class Blind:
        def __init__(self, obj, hidden):
            self._obj, self._hidden = obj, hidden

        def __getattr__(self, name):
            return None if name == self._hidden else getattr(self._obj, name)

    for hidden in the_rule.reads:
        def when(c, hidden=hidden):
            return original.when(dataclasses.replace(c, cfg=Blind(c.cfg, hidden), perf=Blind(c.perf, hidden)))
        table = tuple(dataclasses.replace(row, when=when) if row is original else row for row in failures.FAILURE_TABLE)
        monkeypatch.setattr(failures, "FAILURE_TABLE", table)
        assert next(_disagreements(_newest_release(the_rule), [the_rule], pairs=True), None) is not None, hidden
