"""Search-space expansion: the sweep spec -> the ordered list of trials to run (pure).

A trial is one server configuration (base settings + sweep base + one point of the grid, or one explicit entry)
together with the load points it is measured at. Its ``config_hash`` identifies it across runs: resume skips
trials whose hash already has results, and the report reads only the rows of the current run's hashes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from grid import twin
from grid.config.schema import ConfigError, LoadSpec, RunSpec, _load_override
from grid.engines.base import engine_class
from grid.plan import TrialPlan
from grid.topology.deployment import Deployment, RoleGroup, ServerShape

RESERVED_KEYS = ("label", "load")


#: Fields of the model and hardware specs that do not enter the identity: ``source`` is the citation of the facts
#: (conf/model/*.yaml, conf/hardware/*.yaml), not a fact; fixing a reference must not re-measure a sweep.
SPEC_FIELDS_NOT_IN_IDENTITY = frozenset({"source"})
#: Engine settings that enter the identity. The others do not change a measured value: the twin's clock
#: (``clock``, ``time_scale``, ``startup_time_scale``: results are in modelled time),
#: where and how the server is reached (``python``, ``host``, ``port``, ``api_key``) and the time limits
#: (``startup_timeout_s``, ``stop_grace_s``).
ENGINE_FIELDS_IN_IDENTITY = ("kind", "version", "api", "base_url", "env")


def _spec_identity(spec_model: Any) -> dict[str, Any]:
    return {k: v for k, v in spec_model.model_dump(mode="json").items() if k not in SPEC_FIELDS_NOT_IN_IDENTITY}


def config_identity(spec: RunSpec, settings: dict[str, Any], load: LoadSpec,
                    deployment: Deployment | None = None) -> dict[str, Any]:
    """Everything that changes a trial's results, as a JSON-able dict (pure).

    The engine (``ENGINE_FIELDS_IN_IDENTITY``; ``version`` as resolved: ``RunSpec.version``), every field of the
    model and hardware specs (their facts, not only their names; ``source`` excepted), the server settings, the
    load (every LoadSpec field) and, for the twin (an engine whose ``Engine.twin`` is set: ``engine.kind=sim``),
    ``grid.twin.MODEL_VERSION``; a trial of several servers adds its ``deployment`` (a one-server trial's identity is
    as it was before deployments existed).
    """
    engine = {k: getattr(spec.engine, k) for k in ENGINE_FIELDS_IN_IDENTITY}
    engine["version"] = spec.version
    return {
        "engine": engine,
        "twin_model_version": twin.MODEL_VERSION if engine_class(spec.engine.kind).twin else None,
        "model": _spec_identity(spec.model),
        "hardware": _spec_identity(spec.hardware),
        "settings": settings,
        "load": load.model_dump(mode="json"),
        **({"deployment": deployment.identity()} if deployment is not None else {}),
    }


def config_hash(spec: RunSpec, settings: dict[str, Any], load: LoadSpec, deployment: Deployment | None = None) -> str:
    """Stable identity of a trial: 12 hex chars of sha256 over :func:`config_identity` (canonical JSON, sorted keys).

    Same identity -> same hash, whatever the order of keys; a change of any value in it -> another hash. Rows that an
    older grid recorded under its narrower identity (engine kind, version, model and hardware names, settings, load)
    have other hashes: a resumed run measures those configurations again and its report ignores the old rows.
    """
    blob = json.dumps(config_identity(spec, settings, load, deployment), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _points(spec: RunSpec) -> list[dict[str, Any]]:
    sweep = spec.sweep
    if sweep is None:
        return [{}]
    points: list[dict[str, Any]] = []
    if sweep.grid:
        keys = list(sweep.grid)
        for combo in itertools.product(*(sweep.grid[k] for k in keys)):
            points.append(dict(zip(keys, combo)))
    points.extend(dict(c) for c in sweep.configs)
    if not points and sweep.deployments:
        points = [{}]  # the deployments are the search space: each with the base settings
    if not points:
        raise ConfigError(f"sweep.{sweep.name}: empty search space (set sweep.grid, sweep.configs or "
                          "sweep.deployments)")
    return points


def _label(settings: dict[str, Any], varying: list[str]) -> str:
    if not varying:
        return "base"
    parts = []
    for key in varying:
        value = settings.get(key)
        short = key.removeprefix("dsa_").removesuffix("_backend")
        parts.append(f"{short}={'default' if value is None else value}")
    return " ".join(parts)


def expand(spec: RunSpec) -> list[TrialPlan]:
    """All trials of the run in sweep order. Duplicate configurations are kept once. Raises ``ConfigError``."""
    base = {**spec.server, **(spec.sweep.base if spec.sweep else {})}
    sweep_load = _load_override(spec.load, spec.sweep.load, "sweep.load") if spec.sweep and spec.sweep.load \
        else spec.load
    raw = []
    for point in _points(spec):
        overrides = {k: v for k, v in point.items() if k not in RESERVED_KEYS}
        settings = {k: v for k, v in {**base, **overrides}.items() if v is not None}
        load = _load_override(sweep_load, point["load"]) if "load" in point else sweep_load
        raw.append((settings, load, point.get("label")))
    keys = list(dict.fromkeys(k for s, _, _ in raw for k in s))
    varying = [k for k in keys if len({json.dumps(s.get(k)) for s, _, _ in raw}) > 1]
    deployments = _deployments(spec)
    plans: list[TrialPlan] = []
    seen: set[str] = set()
    for settings, load, label in raw:
        for deployment, name in deployments:
            chosen = settings
            if deployment is not None and deployment.servers == 1:
                # one server: an ordinary trial of its shape's and role's settings (the same identity)
                group = deployment.groups[0]
                chosen = group.settings_over(settings)
                deployment = None
            h = config_hash(spec, chosen, load, deployment)
            if h in seen:
                continue
            seen.add(h)
            text = label or _label(settings, varying)
            if name:
                text = name if text == "base" else f"{name} {text}"
            plans.append(TrialPlan(len(plans), chosen, load, text, h, deployment))
    return plans


def _deployments(spec: RunSpec) -> list[tuple[Deployment | None, str | None]]:
    """``sweep.deployments`` as ``(Deployment, label)`` pairs; ``[(None, None)]`` without any (one server per
    configuration). Raises ``ConfigError`` naming the deployment for one that is not a deployment
    (grid/topology/deployment.py: a mix of roles, a role missing, a size that does not divide)."""
    if spec.sweep is None or not spec.sweep.deployments:
        return [(None, None)]
    out: list[tuple[Deployment | None, str | None]] = []
    for i, d in enumerate(spec.sweep.deployments):
        try:
            groups = tuple(RoleGroup(g.role, g.count, ServerShape(g.tp, g.attn_dp, g.ep),
                                     tuple(sorted(g.settings.items()))) for g in d.groups)
            deployment = Deployment(groups, router_policy=d.router_policy)
        except ValueError as e:
            raise ConfigError(f"sweep.deployments[{i}]: {e}") from None
        out.append((deployment, d.label or deployment.label()))
    return out
