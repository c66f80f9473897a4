"""What one trial is: a server configuration and the load points it is measured at (pure).

Shared by every layer above the config: the sweep expands a RunSpec into ``TrialPlan``s (grid/sweep/space.py), the
engines turn one into a command line, the search and the report read them. ``load_points`` lists a plan's load
points in the order a trial runs them; ``level_name`` names one as the user set it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from grid.config.schema import LoadSpec
from grid.loadgen.dataset import DatasetArgs, build_dataset
from grid.loadgen.runner import LoadPoint
from grid.topology.deployment import Deployment, RoleGroup


@dataclass(frozen=True)
class TrialPlan:
    """One server configuration to launch and the load to run against it."""

    index: int
    settings: dict[str, Any]     # every setting passed to the server (None entries removed)
    load: LoadSpec
    label: str                   # short human name: the settings that vary across the sweep
    config_hash: str             # 12 hex chars of sha256 over everything that changes a result (see config_hash)
    #: the servers it launches when more than one (grid/topology/deployment.py); None: one server of ``settings``
    deployment: Deployment | None = None

    def role_settings(self, group: RoleGroup) -> dict[str, Any]:
        """The settings a server of ``group`` launches with: the plan's, its shape's and its role's own."""
        return group.settings_over(self.settings)

    @property
    def config_json(self) -> str:
        return json.dumps(self.settings, sort_keys=True)


def load_points(plan: TrialPlan) -> list[LoadPoint]:
    """The trial's load points in order: concurrency levels, request rates, then trace replays (open-loop points
    carry ``load.max_concurrency``), and that sequence ``load.repeats`` times over (point ``i`` belongs to repeat
    ``i // (len(points) / repeats)``). Point ``i`` is seeded ``load.seed * 1000 + i``: identical across
    configurations, and each repeat draws its own prompts (the spread covers the prompts as well as the timing)."""
    return points_of(plan.load)


def point_of(load: LoadSpec, kind: str, value: float) -> LoadPoint:
    """The first load point of ``load`` (repeat 0) at ``kind`` (``concurrency`` or ``rate``) / ``value``, as
    :func:`points_of` makes it; with seed ``load.seed * 1000`` when the load has no such level (a capacity probe, a
    forecast of another level)."""
    levels = _levels(load, traces=False)
    index = next((i for i, (k, v, _, _) in enumerate(levels) if (k, v) == (kind, float(value))), None)
    if index is not None:
        return _point(levels[index], load, index)
    level = _levels(load.model_copy(update={"concurrency": [value] if kind == "concurrency" else [],
                                            "request_rate": [value] if kind == "rate" else []}), traces=False)[0]
    return _point(level, load, 0)


def points_of(load: LoadSpec, repeats: int | None = None) -> list[LoadPoint]:
    """:func:`load_points` of a plan with ``load`` (``repeats``: instead of ``load.repeats``)."""
    levels = _levels(load)
    return [_point(level, load, r * len(levels) + i)
            for r in range(load.repeats if repeats is None else repeats) for i, level in enumerate(levels)]


def _point(level: tuple[str, float, int, dict[str, Any]], load: LoadSpec, index: int) -> LoadPoint:
    kind, value, num, extra = level
    return LoadPoint(kind, value, num, warmup_requests=load.warmup_requests, seed=load.seed * 1000 + index, **extra)


def _levels(load: LoadSpec, traces: bool = True) -> list[tuple[str, float, int, dict[str, Any]]]:
    """(kind, value, requests, LoadPoint settings) of each level of ``load``, in the order a trial runs them
    (``traces``: with the trace replays, whose offsets are read from the dataset)."""
    levels: list[tuple[str, float, int, dict[str, Any]]] = [
        ("concurrency", float(c), load.prompts_for(c), {"steady": load.steady}) for c in load.concurrency]
    levels += [("rate", float(r), load.prompts_for(r), {"arrival": load.arrival, "burstiness": load.burstiness,
                                                       "max_concurrency": load.max_concurrency})
               for r in load.request_rate]
    if traces and load.trace_points:
        offsets = build_dataset(load.dataset, DatasetArgs(0, 1, 1, 1.0, 1, 0, load.dataset_path)).offsets_s or ()
        num = min(load.num_prompts or len(offsets), len(offsets))
        levels += [("trace", float(s), num, {"max_concurrency": load.max_concurrency,
                                             "offsets_s": tuple(offsets[:num])}) for s in load.trace_points]
    return levels


def level_name(row: Mapping[str, Any]) -> str:
    """A load point's level as users set it: ``concurrency 8``, ``1.5 req/s`` (``inf req/s``: all at once), or
    ``level 8`` when the row does not say which kind it is."""
    value = row["point_value"]
    kind = row.get("point_kind")
    if kind == "concurrency":
        return f"concurrency {value:g}"
    if kind == "rate":
        return f"{value:g} req/s"
    return f"level {value:g}"
