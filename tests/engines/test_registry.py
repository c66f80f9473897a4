"""Every launched-server family grid ships is a module of grid/engines that registers its kind, and a Hydra file
conf/engine/KIND.yaml that selects it: a new engine missing either is caught here, not by a user's
"engine=KIND: no such engine" (docs/architecture.md "How to add")."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import yaml

import grid.engines
from grid.engines.base import ENGINES, _import_engines

CONF = Path(__file__).resolve().parents[2] / "conf" / "engine"


def _shipped() -> dict[str, str]:
    """kind -> the grid/engines module that registers it (engines registered by tests are left out)."""
    _import_engines()
    return {kind: cls.__module__ for kind, cls in ENGINES.items() if cls.__module__.startswith("grid.engines.")}


def test_every_engine_config_names_the_kind_of_its_file_and_that_kind_is_registered():
    for path in sorted(CONF.glob("*.yaml")):
        kind = yaml.safe_load(path.read_text())["engine"]["kind"]
        assert kind == path.stem, f"{path.name} selects engine.kind={kind!r}"
        assert kind in _shipped(), f"{path.name}: no module of grid/engines registers kind {kind!r} (@register)"


def test_every_registered_engine_has_its_config_file_and_every_module_registers_one():
    shipped = _shipped()
    assert {p.stem for p in CONF.glob("*.yaml")} == set(shipped) == {"sim", "sglang", "openai"}
    modules = {f"grid.engines.{m.name}" for m in pkgutil.iter_modules(grid.engines.__path__) if m.name != "base"}
    assert modules == set(shipped.values()), modules - set(shipped.values())
