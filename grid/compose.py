"""The run's configuration at the entry point: the composed Hydra config -> a RunSpec checked against everything grid
knows, before any server launches.

``load_run_spec(plain_dict)`` (grid/app.py calls it with the config ``python -m grid.run`` composed) checks the
fields (grid.config.schema ``parse_run_spec``), then the kinds other packages register (``objective.kind``:
grid.report.select ``OBJECTIVES``; ``search.kind``: grid.search ``SEARCHES``; the engine's own checks:
``Engine.check_spec``), the settings against the SGLang release, the dataset against the API, and the run directory.
It lives above every package it asks, so that grid.config itself imports none of them.

``compose_spec(overrides, run_dir)``: what ``python -m grid.run OVERRIDES hydra.run.dir=RUN_DIR`` would run,
without the command line, for tests, benchmark scripts and notebooks."""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict

from grid.config.schema import ConfigError, RunSpec, check_dataset_api, check_settings, check_writable, parse_run_spec
from grid.engines.base import EngineUnavailable, engine_class
from grid.report.select import OBJECTIVES
from grid.search import SEARCHES


#: A command-line override of a run-level load setting: ``load.concurrency=[1,8]`` (also ``+load.X=``/``++load.X=``);
#: not ``sweep.load.X`` (the sweep's own block, set on purpose).
_LOAD_OVERRIDE = re.compile(r"^\+{0,2}load\.([A-Za-z_]\w*)=(.*)$")


def command_line_load_wins(cfg: dict[str, Any], overrides: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Let the load settings typed on the command line win over the sweep's ``load:`` block. A sweep's ``sweep.load``
    is applied over the run's ``load`` (grid.config.schema ``_load_override``), so ``load.concurrency=[1,8]`` next to
    ``+sweep=cuda_graph`` (whose ``load:`` sets ``concurrency``) would be silently ignored; the user typed it last.
    ``overrides`` are Hydra's task overrides as typed (``HydraConfig.get().overrides.task``). Returns the config with
    every such key dropped from ``sweep.load`` (the run's ``load`` already holds the typed value) and one note per
    key, e.g. ``load.concurrency=[1,8] from the command line replaces the sweep's [8, 48, 96, 160]``. Pure: ``cfg``
    is not changed."""
    sweep = cfg.get("sweep")
    if not isinstance(sweep, dict):
        return cfg, []
    sweep_load = sweep.get("load")
    if not isinstance(sweep_load, dict) or not sweep_load:
        return cfg, []
    typed = {m.group(1): m.group(2) for m in map(_LOAD_OVERRIDE.match, overrides) if m}
    replaced = {k: v for k, v in typed.items() if k in sweep_load}
    if not replaced:
        return cfg, []
    notes = [f"load.{key}={text} from the command line replaces the sweep's {sweep_load[key]!r}"
             for key, text in replaced.items()]
    kept = {k: v for k, v in sweep_load.items() if k not in replaced}
    return {**cfg, "sweep": {**sweep, "load": kept}}, notes


def load_run_spec(cfg: dict[str, Any]) -> RunSpec:
    """Build and validate the RunSpec from the resolved config dict. Raises ``ConfigError`` naming the key and, where
    there is a closed set, the allowed values."""
    spec = parse_run_spec(cfg)
    if spec.objective.kind not in OBJECTIVES:
        raise ConfigError(f"objective.kind: unknown objective {spec.objective.kind!r}; allowed: "
                          f"{', '.join(sorted(OBJECTIVES))}")
    why = OBJECTIVES[spec.objective.kind].needs_slo
    if why is not None:
        slo = spec.objective.slo
        if slo.ttft_ms is None and slo.tpot_ms is None and slo.e2e_ms is None:
            raise ConfigError(f"objective.kind={spec.objective.kind} needs an SLO: set objective.slo.ttft_ms, tpot_ms "
                              f"or e2e_ms ({why})")
    if spec.search.kind not in SEARCHES:
        raise ConfigError(f"search.kind: unknown search {spec.search.kind!r}; allowed: {', '.join(sorted(SEARCHES))}")
    requires = SEARCHES[spec.search.kind].requires
    if requires is not None and importlib.util.find_spec(requires[0]) is None:
        raise ConfigError(f"search.kind={spec.search.kind} needs the {requires[0]} package: {requires[1]}")
    try:
        engine = engine_class(spec.engine.kind)
    except EngineUnavailable as err:  # an unknown kind: the registered ones are the allowed values
        raise ConfigError(str(err)) from None
    if not engine.twin and spec.engine.clock == "virtual" and "clock" in spec.engine.model_fields_set:
        raise ConfigError(f"engine.clock=virtual: only the twin (engine=sim) has a virtual clock, not "
                          f"engine={spec.engine.kind}")
    check_settings(spec, engine.dialect.check_setting)
    check_dataset_api(spec)
    engine.check_spec(spec)
    check_writable(spec.run_dir)
    return spec


#: The Hydra config directory grid.run composes from (grid/run.py ``config_path="../conf"``).
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


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
        plain, _ = command_line_load_wins(cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True)), overrides)
        return load_run_spec(plain)


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
