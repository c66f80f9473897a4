"""One entry per SGLang option (grid/releases/flags.py ``SETTINGS``): what the twin reads, what the launch rules see
and what the accuracy guard treats as numerics are derived from it, so a forgotten hand-kept map cannot make a
setting silently stop applying.

Each test renders a setting to SGLang's command line with grid's flags, parses it with the twin's copy of that
release's parser (grid/twin/cli.py) and checks that the value arrives where the entry says it is read.
"""

from __future__ import annotations

import dataclasses

import pytest

from grid.accuracy import NUMERIC_SETTINGS, computes_differently
from grid.releases import catalog
from grid.releases.flags import SETTINGS, parse_version, release_default, settings_from_args, to_argv
from grid.twin import cli
from grid.twin.perf import ServingConfig

pytestmark = pytest.mark.unit

RELEASES = ["0.5.9", "0.5.13", "0.5.14", "0.5.22", "0.5.23"]
#: ServingConfig fields that are not one setting: piecewise CUDA graphs (an option grid does not sweep, absent from
#: 0.5.20), the release, and speculative decoding's acceptance length (an input, not a flag).
NOT_SETTINGS = {"piecewise_cuda_graph", "version", "speculative_accept_length"}


def _other_value(name: str, version: str):
    """A value of setting ``name`` that SGLang ``version`` accepts and that differs from its default there."""
    s = SETTINGS[name]
    ver = parse_version(version)
    default = release_default(name, ver)
    if s.type is bool:
        return not bool(default)
    allowed = s.allowed(ver)
    if allowed is not None:
        return next(v for v in allowed if v != default and v not in (None, "none", "null"))
    if s.type is int:
        return 3 if default != 3 else 5
    if s.type is float:
        return 0.77 if s.maximum and s.maximum < 1 else 2.5
    return "glm45" if name == "reasoning_parser" else "x-value"


def test_every_performance_setting_is_a_serving_config_field_and_back():
    fields = {f.name for f in dataclasses.fields(ServingConfig)}
    performance = {n for n, s in SETTINGS.items() if s.twin == "performance"}
    assert performance <= fields, performance - fields
    assert fields - NOT_SETTINGS == performance, (fields - NOT_SETTINGS) ^ performance


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("name", sorted(n for n, s in SETTINGS.items() if s.twin == "performance"))
def test_a_modelled_setting_reaches_the_performance_model(name, version):
    """The value rendered with grid's flag for ``version`` is the ServingConfig field the performance model reads."""
    value = _other_value(name, version)
    settings = {name: value}
    if name == "enable_dp_attention":
        settings = {"enable_dp_attention": True, "dp_size": 2, "tp_size": 2}
    argv = to_argv(settings, parse_version(version))
    args = cli.parse_args(["--model-path", "/m", *argv], version)
    cfg = cli.to_serving_config(args)
    for key, want in settings.items():
        assert getattr(cfg, key) == want, (name, version, argv, getattr(cfg, key))


@pytest.mark.parametrize("version", RELEASES)
def test_the_launch_rules_see_every_setting(version):
    """The twin's launch checks read the command line through the same entries: every setting rendered by grid comes
    back under its name (the rules of grid/releases/checks.py are written over these names)."""
    ver = parse_version(version)
    for name in SETTINGS:
        if SETTINGS[name].option(ver) is None:   # a flag of later releases (--enable-pd-role-switch): refused by name
            continue
        if name in ("enable_dp_attention", "dp_size"):
            settings = {"enable_dp_attention": True, "dp_size": 2, "tp_size": 2}
        else:
            settings = {name: _other_value(name, version)}
        args = cli.parse_args(["--model-path", "/m", *to_argv(settings, ver)], version)
        seen = settings_from_args(args, ver)
        for key, want in settings.items():
            assert seen[key] == want, (key, version, seen[key])


def test_dp_attention_reads_as_grid_means_it_on_either_side_of_the_rename():
    """0.5.22 moved attention DP to --attn-dp-size N (with dp_size 1): grid's dp_size still reads N."""
    for version, argv in (("0.5.21", ["--dp-size", "4", "--enable-dp-attention"]), ("0.5.23", ["--attn-dp-size", "4"])):
        args = cli.parse_args(["--model-path", "/m", "--tp-size", "4", *argv], version)
        cli.resolve_args(args)
        seen = settings_from_args(args, parse_version(version))
        assert (seen["dp_size"], seen["enable_dp_attention"]) == (4, True), version


def test_the_unmodelled_settings_are_the_ones_the_twin_ignores():
    """A setting the entry marks inert is a catalog option the twin's CLI calls 'accepted, no effect', and every
    setting the entry marks read is one it calls modelled, in every release."""
    for rel in catalog.releases():
        ver = parse_version(rel)
        for s in SETTINGS.values():
            opt = s.option(ver)
            if opt is None:
                continue
            want = "modelled" if s.twin is not None else "accepted, no effect in the twin"
            assert cli.effect(opt.dest) == want, (rel, s.name)


def test_numerics_come_from_the_entries():
    assert NUMERIC_SETTINGS == {n for n, s in SETTINGS.items() if s.numeric}
    assert {"kv_cache_dtype", "quantization", "dsa_decode_backend", "speculative_algorithm",
            "moe_runner_backend", "prefill_attention_backend"} <= NUMERIC_SETTINGS
    assert not {"mem_fraction_static", "cuda_graph", "schedule_policy", "tp_size"} & NUMERIC_SETTINGS
    assert computes_differently({"kv_cache_dtype": "fp8_e4m3", "cuda_graph": False},
                                {"kv_cache_dtype": "bf16", "cuda_graph": True}) == ["kv_cache_dtype"]


def test_renamed_dests_are_read_from_the_catalog():
    assert SETTINGS["tp_size"].dests == ("tp_size", "tensor_parallel_size")
    assert SETTINGS["dsa_decode_backend"].dests == ("dsa_decode_backend", "nsa_decode_backend")
    assert SETTINGS["two_batch_overlap"].dests == ("enable_two_batch_overlap",)
    assert SETTINGS["two_batch_overlap"].parsed_name == "enable_two_batch_overlap"
    assert SETTINGS["cuda_graph"].renamed is False  # two options, not one renamed: read specially
    assert {n for n, s in SETTINGS.items() if s.renamed} <= set(cli.CANONICAL)
