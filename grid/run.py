"""Command line: ``python -m grid.run +sweep=<name> [overrides]`` (Hydra). Composes the config, hands it on as
plain data, and exits with grid.app's status. All logic lives below grid.app."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from grid.app import EXIT_REFUSED
from grid.app import main as run_app
from grid.compose import composition_error

#: Where a run keeps its resolved config, as Hydra's default ``hydra.output_subdir`` would (conf/config.yaml sets
#: that to null: grid writes these files itself once nothing refuses the run).
OUTPUT_SUBDIR = ".hydra"


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)

    def save_resolved_config() -> None:
        """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml``, as Hydra writes them (hydra.core.utils
        ``run_job``), but only for a run that nothing refused: a mistyped command or a dry run into a results
        folder must not replace the configuration its results were measured with."""
        out = Path(hydra_cfg.runtime.output_dir) / OUTPUT_SUBDIR
        out.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, out / "config.yaml")
        OmegaConf.save(OmegaConf.create({"hydra": hydra_cfg}), out / "hydra.yaml")
        OmegaConf.save(OmegaConf.create(overrides), out / "overrides.yaml")

    status = run_app(cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)),
                     overrides=overrides, accepted=save_resolved_config)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    _refused = None if any(a.startswith("-") for a in sys.argv[1:]) else composition_error(sys.argv[1:])
    if _refused:
        print(f"Configuration error: {_refused}")  # stdout, as grid.app prints every other refusal
        sys.exit(EXIT_REFUSED)
    main()
