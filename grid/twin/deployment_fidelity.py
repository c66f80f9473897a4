"""The twin's forecasts of published multi-server deployments (grid/twin/deployment_rows.yaml): each row replayed
through the deployment simulation (grid/twin/deployment.py) on its model, hardware and workload, and compared with
what its source measured. Pure apart from reading the rows file."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grid.topology.deployment import Deployment, RoleGroup, ServerShape

ROWS_FILE = Path(__file__).with_name("deployment_rows.yaml")
#: The SGLang release whose flags and defaults the replayed servers take (the rows' engines are named in each row).
VERSION = "0.5.23"
#: Load-point summary keys (grid.metrics.loadpoint.summarize) of each compared metric and statistic.
SUMMARY_KEYS = {("e2e_ms", "mean"): "e2e_mean_ms", ("ttft_ms", "mean"): "ttft_mean_ms",
                ("tpot_ms", "mean"): "tpot_mean_ms", ("itl_ms", "mean"): "itl_mean_ms"}


@dataclass(frozen=True)
class Compared:
    """One published metric of a row: its ``measured`` value and the twin's ``twin`` forecast, in the metric's unit."""

    row: str
    metric: str
    measured: float
    twin: float

    @property
    def error(self) -> float:
        """The twin's relative error, ``twin / measured - 1``."""
        return self.twin / self.measured - 1


def load_rows(path: Path = ROWS_FILE) -> list[dict[str, Any]]:
    """The rows of ``path`` (:data:`ROWS_FILE`)."""
    return list(yaml.safe_load(path.read_text())["runs"])


def deployment_of(row: dict[str, Any]) -> Deployment:
    """The row's :class:`Deployment` (its server groups and router policy)."""
    d = row["deployment"]
    groups = tuple(RoleGroup(g["role"], int(g["count"]), ServerShape(int(g.get("tp", 1)), int(g.get("attn_dp", 1)),
                                                                      int(g.get("ep", 1)))) for g in d["groups"])
    return Deployment(groups, router_policy=d.get("router_policy"))


def forecast(row: dict[str, Any]) -> list[Compared]:
    """The twin's forecast of each published metric of ``row``: the row's workload replayed as grid's load generator
    sends it (grid/twin/deployment.py ``replay_deployment``) through its deployment's servers and transfers."""
    from grid.loadgen.runner import LoadPoint
    from grid.metrics.loadpoint import summarize
    from grid.twin.deployment import deployment_model
    from grid.twin.fidelity import conf_spec

    model = deployment_model(deployment_of(row), conf_spec("model", row["model"]),
                             conf_spec("hardware", row["hardware"]), VERSION, row.get("settings") or {})
    w = row["workload"]
    point = LoadPoint("rate", float(w["request_rate"]), int(w["num_prompts"]), arrival=w.get("arrival", "poisson"))
    summary = summarize(model.replay(point, int(w["input_len"]), int(w["output_len"])))
    out = []
    for metric, m in row["metrics"].items():
        twin = summary[SUMMARY_KEYS[(metric, m.get("stat", "mean"))]]
        if isinstance(twin, float) and not math.isnan(twin):
            out.append(Compared(row["id"], metric, float(m["value"]), float(twin)))
    return out
