"""Load the Hydra config YAMLs (conf/model, conf/hardware) as specs for the twin tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from grid.config.specs import HardwareSpec, ModelSpec

CONF = Path(__file__).resolve().parents[2] / "conf"


def model(name: str) -> ModelSpec:
    return ModelSpec(**yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text()))


def hardware(name: str) -> HardwareSpec:
    return HardwareSpec(**yaml.safe_load((CONF / "hardware" / f"{name}.yaml").read_text()))
