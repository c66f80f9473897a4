"""Command line: ``python -m grid.run +sweep=<name> [overrides]`` (Hydra). Composes the config, hands it on as
plain data, and exits with grid.app's status. All logic lives below grid.app."""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any, cast

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf

from grid.app import main as run_app

#: Where a run keeps its resolved config, as Hydra's default ``hydra.output_subdir`` would (conf/config.yaml sets
#: that to null: grid writes these files itself once nothing refuses the run).
OUTPUT_SUBDIR = ".hydra"


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

#: Refused input, before anything ran (README, "Exit status").
EXIT_REFUSED = 2


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


def composition_error(overrides: list[str]) -> str | None:
    """Grid's message for command-line ``overrides`` that Hydra cannot compose, or None when they compose.

    Hydra's own messages end in exit status 1 (grid's status for a bug) and, for a misspelt key, advise appending it
    with ``+``, which only moves the error; this names the key, the closest known key and every key allowed there,
    or the group's choices for a misspelt group value (``+sweep=nsa_backend``, ``objective=max_throughput``)."""
    try:
        _compose(overrides)
        return None
    except MissingConfigException as e:
        group, _, name = str(e.missing_cfg_file or "").rpartition("/")
        options = sorted(e.options or [])
        if not group or not options:
            return str(e).split("\nConfig search path")[0]
        close = difflib.get_close_matches(name, options, n=1)
        hint = f"; did you mean {group}={close[0]}?" if close else ""
        return f"{group}={name}: no such {group}{hint} (choices: {', '.join(options)})"
    except HydraException as e:
        bad = re.search(r"Could not override '([^']+)'", str(e))
        if bad is None:
            return str(e).splitlines()[0]
        key = bad.group(1)
        parent, _, leaf = key.rpartition(".")
        rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
        try:
            node = OmegaConf.select(_compose(rest), parent) if parent else _compose(rest)
        except HydraException:
            node = None
        keys = sorted(str(k) for k in node) if isinstance(node, DictConfig) else []
        close = difflib.get_close_matches(leaf, keys, n=1)
        given = next((o.lstrip("+~") for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), key)
        msg = f"{key}: unknown key"
        msg += f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else (
            f"; a setting the defaults do not name is added with '+': +{given}")
        return msg + (f" (keys of {parent or 'the config'}: {', '.join(keys)})" if keys else "")


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
        print(f"Configuration error: {_refused}")
        sys.exit(EXIT_REFUSED)
    main()
