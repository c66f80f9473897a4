"""The search space: base settings, grid product, explicit entries, labels, load overrides, duplicates."""

from __future__ import annotations

import hashlib
import json

import pytest

from grid.config.schema import ConfigError, LoadSpec, SweepSpec
from grid.sweep.space import config_hash, config_identity, expand

from .test_config_hash import SETTINGS, base_spec


def spec_with(sweep: SweepSpec | None, server=None, load=None):
    update = {"sweep": sweep, "server": server if server is not None else {"mem_fraction_static": 0.85}}
    if load is not None:
        update["load"] = load
    return base_spec().model_copy(update=update)


def test_no_sweep_is_one_base_configuration():
    spec = spec_with(None, {"mem_fraction_static": 0.85, "cuda_graph": None})
    (plan,) = expand(spec)
    assert (plan.index, plan.label, plan.settings) == (0, "base", {"mem_fraction_static": 0.85})  # None dropped
    assert plan.load == spec.load and plan.config_hash == config_hash(spec, plan.settings, spec.load)
    assert plan.config_json == '{"mem_fraction_static": 0.85}'


def test_grid_product_in_order_with_short_labels():
    sweep = SweepSpec(name="s", grid={"dsa_prefill_backend": ["trtllm", "fa3"],
                                      "dsa_decode_backend": ["trtllm", None]},
                      base={"cuda_graph": False})
    plans = expand(spec_with(sweep))
    assert [p.index for p in plans] == [0, 1, 2, 3]
    assert [p.label for p in plans] == ["prefill=trtllm decode=trtllm", "prefill=trtllm decode=default",
                                        "prefill=fa3 decode=trtllm", "prefill=fa3 decode=default"]
    assert plans[0].settings == {"mem_fraction_static": 0.85, "cuda_graph": False,
                                 "dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm"}
    assert "dsa_decode_backend" not in plans[1].settings
    assert plans[0].config_json == json.dumps(plans[0].settings, sort_keys=True)
    assert len({p.config_hash for p in plans}) == 4


def test_labels_name_only_what_varies_and_keep_other_names_whole():
    sweep = SweepSpec(name="s", grid={"mem_fraction_static": [0.8, 0.9], "schedule_policy": ["lpm"]})
    plans = expand(spec_with(sweep))
    assert [p.label for p in plans] == ["mem_fraction_static=0.8", "mem_fraction_static=0.9"]
    assert all(p.settings["schedule_policy"] == "lpm" for p in plans)


def test_explicit_configs_with_label_and_load():
    sweep = SweepSpec(name="s", grid={"mem_fraction_static": [0.8]},
                      configs=[{"mem_fraction_static": 0.9, "label": "roomy", "load": {"concurrency": [2]}},
                               {"mem_fraction_static": 0.7}],
                      load={"output_len": 64})
    spec = spec_with(sweep, load=LoadSpec(concurrency=[1, 8]))
    plans = expand(spec)
    assert [p.label for p in plans] == ["mem_fraction_static=0.8", "roomy", "mem_fraction_static=0.7"]
    assert [p.load.concurrency for p in plans] == [[1, 8], [2], [1, 8]]
    assert [p.load.output_len for p in plans] == [64, 64, 64]                   # the sweep's load for every entry
    assert plans[1].settings == {"mem_fraction_static": 0.9}                     # label and load are not settings
    assert plans[1].config_hash == config_hash(spec, {"mem_fraction_static": 0.9}, plans[1].load)


def test_duplicates_are_kept_once_with_consecutive_indices():
    sweep = SweepSpec(name="s", grid={"mem_fraction_static": [0.8, 0.85, 0.8]}, configs=[{"cuda_graph": True}])
    plans = expand(spec_with(sweep))
    assert [(p.index, p.settings.get("mem_fraction_static"), p.settings.get("cuda_graph")) for p in plans] == [
        (0, 0.8, None), (1, 0.85, None), (2, 0.85, True)]


def test_the_same_settings_under_another_load_are_another_configuration():
    sweep = SweepSpec(name="s", configs=[{"label": "a"}, {"label": "b", "load": {"input_len": 512}}])
    plans = expand(spec_with(sweep))
    assert [p.label for p in plans] == ["a", "b"] and plans[0].config_hash != plans[1].config_hash


def test_empty_search_space_is_refused():
    with pytest.raises(ConfigError, match=r"^sweep\.s: empty search space \(set sweep\.grid, sweep\.configs or "
                                          r"sweep\.deployments\)$"):
        expand(spec_with(SweepSpec(name="s")))


def test_bad_sweep_load_names_its_key():
    with pytest.raises(ConfigError, match=r"^sweep\.load\.concurrency"):
        expand(spec_with(SweepSpec(name="s", grid={"mem_fraction_static": [0.8]}, load={"concurrency": [0]})))
    with pytest.raises(ConfigError, match=r"^sweep\.configs\[\]\.load\.input_len"):
        expand(spec_with(SweepSpec(name="s", configs=[{"load": {"input_len": 0}}])))


def test_identity_layout_and_hash_definition():
    # If this fails, the identity of every configuration changed, so resumed runs measure again what earlier grid
    # versions recorded. Change it only on purpose, and say so in docs/architecture.md.
    spec = base_spec(version="0.5.9", api="completions", base_url="http://127.0.0.1:30000", env={"A": "1"})
    ident = config_identity(spec, SETTINGS, LoadSpec())
    assert set(ident) == {"engine", "twin_model_version", "model", "hardware", "settings", "load"}
    assert ident["engine"] == {"kind": "sim", "version": "0.5.9", "api": "completions",
                               "base_url": "http://127.0.0.1:30000", "env": {"A": "1"}}
    assert ident["twin_model_version"] == "7" and ident["settings"] == SETTINGS
    assert ident["load"] == LoadSpec().model_dump(mode="json")
    assert ident["hardware"]["name"] == "rtx_pro_6000_x8" and "source" not in ident["hardware"]
    blob = json.dumps(ident, sort_keys=True, separators=(",", ":"))                # canonical, compact JSON
    assert config_hash(spec, SETTINGS, LoadSpec()) == hashlib.sha256(blob.encode()).hexdigest()[:12]
