"""The configuration identity covers every value that changes a result, and nothing else moves it.

A trial's ``config_hash`` decides what a resumed run skips and which rows the report reads. The tests walk every
leaf of the identity's inputs programmatically (every field of the model and hardware specs, nested ones included,
every load field, every engine field that enters it, every setting), change it to another valid value, and check
that the hash changes; and that key order, non-identity engine fields and the specs' citations do not move it.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

import grid.twin
from grid.config.schema import EngineSpec, LoadSpec, RunSpec
from grid.config.specs import HardwareSpec, ModelSpec
from grid.sweep.space import ENGINE_FIELDS_IN_IDENTITY, SPEC_FIELDS_NOT_IN_IDENTITY, config_hash, expand

CONF = Path(__file__).resolve().parents[2] / "conf"
SETTINGS = {"dsa_decode_backend": "flashmla_sparse", "mem_fraction_static": 0.85, "cuda_graph": True,
            "cuda_graph_max_bs": 64}


def _yaml(kind: str, name: str) -> dict:
    return yaml.safe_load((CONF / kind / f"{name}.yaml").read_text())


def base_spec(**engine: Any) -> RunSpec:
    # GLM-5 has every optional block of ModelSpec filled (MLA ranks, MoE, DSA), so every nested leaf is walked
    return RunSpec(name="t", run_dir="/tmp/unused", engine=EngineSpec(**engine),
                   model=ModelSpec(**_yaml("model", "glm5_nvfp4")),
                   hardware=HardwareSpec(**_yaml("hardware", "rtx_pro_6000_x8")))


def _literal_choices(model_cls: type[BaseModel], field: str) -> tuple:
    ann = model_cls.model_fields[field].annotation
    for arg in (ann, *typing.get_args(ann)):
        if typing.get_origin(arg) is typing.Literal:
            return typing.get_args(arg)
    return ()


def _other_values(value: Any, choices: tuple = ()) -> list[Any]:
    """Candidate replacements for a leaf, in order of preference (the first one that validates is used)."""
    if choices:
        return [c for c in choices if c != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1]
    if isinstance(value, float):  # (0.0 x 0.5 is no other value)
        return [v for v in (value * 0.5, value + 1.0, value * 1.5) if v != value]
    if isinstance(value, str):
        return [value + "-changed", "0.5.10"]
    if value is None:
        return ["0.5.10", 3, 2.5, "changed"]
    raise TypeError(f"no candidate for {value!r}")


def leaves(data: dict, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    """(path, value) of every scalar, list and empty-mapping leaf of a nested dict (lists are leaves)."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.extend(leaves(value, (*prefix, key)))
        else:
            out.append(((*prefix, key), value))
    return out


def _set(data: dict, path: tuple, value: Any) -> dict:
    if len(path) == 1:
        return {**data, path[0]: value}
    return {**data, path[0]: _set(data[path[0]], path[1:], value)}


def _variants(model_cls: type[BaseModel] | None, path: tuple, value: Any) -> list[Any]:
    choices = _literal_choices(model_cls, path[-1]) if model_cls is not None and len(path) == 1 else ()
    if model_cls is EngineSpec and path == ("kind",):  # a registered engine kind (grid/engines), not a Literal
        from grid.engines.base import ENGINES, _import_engines

        _import_engines()  # every kind (engine_class imports them only for a kind not yet registered)
        choices = tuple(sorted(ENGINES))
    if isinstance(value, list):
        return [[*value, *(value[-1:] or [1.0])], value[:-1]] if value else [[1.0], [1]]
    if isinstance(value, dict):  # an empty mapping (engine.env): add an entry
        return [{"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}]
    return _other_values(value, choices)


def _changed(model_cls: type[BaseModel], data: dict, path: tuple, value: Any) -> BaseModel:
    errors = []
    candidates = _variants(model_cls, path, value)
    for candidate in candidates:
        try:
            return model_cls.model_validate(_set(data, path, candidate))
        except ValidationError as err:
            errors.append(str(err))
    if len(path) == 1:  # a top-level field whose other values need more than itself to validate (a dataset kind
        # and its file, a Literal with one choice today): set it without validation; the hash must still move
        return model_cls.model_validate(data).model_copy(
            update={path[0]: candidates[0] if candidates else f"{value}-future"})
    raise AssertionError(f"no valid other value for {path} = {value!r}: {errors}")


SPEC_CASES = [(ModelSpec, "model"), (HardwareSpec, "hardware")]


@pytest.mark.parametrize("cls,part", SPEC_CASES, ids=[p for _, p in SPEC_CASES])
def test_every_spec_leaf_changes_the_hash(cls, part):
    spec = base_spec()
    before = config_hash(spec, SETTINGS, spec.load)
    data = getattr(spec, part).model_dump(mode="json")
    walked = leaves({k: v for k, v in data.items() if k not in SPEC_FIELDS_NOT_IN_IDENTITY})
    top = {p[0] for p, _ in walked}
    assert top == set(cls.model_fields) - SPEC_FIELDS_NOT_IN_IDENTITY  # every field, not only the name
    assert len(walked) > len(top)                                       # nested leaves too (tflops, dsa)
    for path, value in walked:
        changed = _changed(cls, data, path, value)
        other = spec.model_copy(update={part: changed})
        assert config_hash(other, SETTINGS, other.load) != before, f"{part}.{'.'.join(map(str, path))} not in hash"


def test_only_citations_stay_out_of_the_identity():
    assert SPEC_FIELDS_NOT_IN_IDENTITY == {"source"}
    spec = base_spec()
    before = config_hash(spec, SETTINGS, spec.load)
    other = spec.model_copy(update={"model": spec.model.model_copy(update={"source": "another reference"}),
                                    "hardware": spec.hardware.model_copy(update={"source": "a spec sheet"})})
    assert config_hash(other, SETTINGS, other.load) == before


def test_every_load_leaf_changes_the_hash():
    spec = base_spec()
    load = LoadSpec(concurrency=[1, 8], request_rate=[2.0], num_prompts=16)
    before = config_hash(spec, SETTINGS, load)
    data = load.model_dump(mode="json")
    walked = leaves(data)
    assert {p[0] for p, _ in walked} == set(LoadSpec.model_fields)
    for path, value in walked:
        other = _changed(LoadSpec, data, path, value)
        assert config_hash(spec, SETTINGS, other) != before, f"load.{path[0]} not in hash"


@pytest.mark.parametrize("field", ENGINE_FIELDS_IN_IDENTITY)
def test_every_engine_identity_field_changes_the_hash(field):
    spec = base_spec(base_url="http://127.0.0.1:30000", version="0.5.9")
    before = config_hash(spec, SETTINGS, spec.load)
    data = spec.engine.model_dump(mode="json")
    engine = _changed(EngineSpec, data, (field,), data[field])
    other = spec.model_copy(update={"engine": engine})
    assert config_hash(other, SETTINGS, other.load) != before


def test_engine_identity_names_what_the_issue_requires():
    assert {"kind", "version", "api", "base_url"} <= set(ENGINE_FIELDS_IN_IDENTITY)


@pytest.mark.parametrize("field,value", [("port", 30001), ("host", "127.0.0.2"), ("time_scale", 4.0),
                                         ("startup_timeout_s", 60.0), ("api_key", "k"), ("stop_grace_s", 3.0)])
def test_how_the_server_is_reached_or_timed_is_not_identity(field, value):
    spec = base_spec()
    other = spec.model_copy(update={"engine": spec.engine.model_copy(update={field: value})})
    assert config_hash(other, SETTINGS, other.load) == config_hash(spec, SETTINGS, spec.load)


def test_default_version_is_resolved_before_hashing():
    # engine.version None plans for 0.5.9 (RunSpec.version): the same server as an explicit 0.5.9
    assert config_hash(base_spec(), SETTINGS, LoadSpec()) == config_hash(base_spec(version="0.5.9"), SETTINGS,
                                                                          LoadSpec())
    assert config_hash(base_spec(), SETTINGS, LoadSpec()) != config_hash(base_spec(version="0.5.10"), SETTINGS,
                                                                          LoadSpec())


@pytest.mark.parametrize("key", list(SETTINGS))
def test_every_setting_changes_the_hash(key):
    spec = base_spec()
    before = config_hash(spec, SETTINGS, spec.load)
    changed = {**SETTINGS, key: _other_values(SETTINGS[key])[0]}
    assert config_hash(spec, changed, spec.load) != before
    assert config_hash(spec, {k: v for k, v in SETTINGS.items() if k != key}, spec.load) != before


def test_twin_model_version_changes_twin_identity_only(monkeypatch):
    sim, real = base_spec(), base_spec(kind="sglang")
    sim_before, real_before = config_hash(sim, SETTINGS, sim.load), config_hash(real, SETTINGS, real.load)
    monkeypatch.setattr(grid.twin, "MODEL_VERSION", grid.twin.MODEL_VERSION + "+1")
    assert config_hash(sim, SETTINGS, sim.load) != sim_before
    assert config_hash(real, SETTINGS, real.load) == real_before   # a real server's results do not depend on it


def test_key_order_does_not_change_the_hash():
    spec = base_spec(env={"A": "1", "B": "2"})
    h = config_hash(spec, SETTINGS, spec.load)
    reordered = dict(reversed(list(SETTINGS.items())))
    hw = spec.hardware.model_copy(update={"tflops": dict(reversed(list(spec.hardware.tflops.items())))})
    env = spec.engine.model_copy(update={"env": {"B": "2", "A": "1"}})
    other = spec.model_copy(update={"hardware": hw, "engine": env})
    assert list(other.hardware.tflops) != list(spec.hardware.tflops)
    assert config_hash(other, reordered, spec.load) == h
    assert len(h) == 12 and int(h, 16) >= 0


def test_expand_uses_the_identity_and_keeps_duplicates_once():
    spec = base_spec().model_copy(update={"server": dict(SETTINGS)})
    plans = expand(spec)
    assert [p.config_hash for p in plans] == [config_hash(spec, SETTINGS, spec.load)]
