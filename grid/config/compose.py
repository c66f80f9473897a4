"""A validated RunSpec from the shipped ``conf/`` and Hydra overrides, without the command line: what
``python -m grid.run OVERRIDES hydra.run.dir=RUN_DIR`` would run, for tests, benchmark scripts and notebooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from grid.config.schema import RunSpec, load_run_spec

#: The Hydra config directory grid.run composes from (grid/run.py ``config_path="../conf"``).
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_spec(overrides: Sequence[str], run_dir: str | Path) -> RunSpec:
    """Compose ``conf/config.yaml`` with ``overrides`` (Hydra syntax, e.g. ``+sweep=mem_fraction``) and ``run_dir`` as
    the run directory (``${hydra:runtime.output_dir}``), then validate it. Raises Hydra's errors for overrides it
    cannot apply and ``grid.config.schema.ConfigError`` for invalid values, naming the key."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("config", overrides=[*overrides, f"hydra.runtime.output_dir={run_dir}"],
                      return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
        return load_run_spec(cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True)))
