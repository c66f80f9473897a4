"""Command line: ``python -m grid.run +sweep=<name> [overrides]`` (Hydra). Composes the config, hands it on as
plain data, and exits with grid.app's status. All logic lives below grid.app."""

from __future__ import annotations

import sys
from typing import Any, cast

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from grid.app import main as run_app

# hydra.output_subdir (conf/config.yaml): a dry run writes no .hydra/ into the run directory, so that it never
# replaces the resolved config of the results already there.
OmegaConf.register_new_resolver("grid_output_subdir", lambda dry_run: None if dry_run else ".hydra", replace=True)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    status = run_app(cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)),
                     overrides=list(HydraConfig.get().overrides.task))
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
