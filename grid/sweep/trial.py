"""The Ray Tune trainable: one trial = one server configuration, measured on the server actor of the trial's node.

Tune grants the trial its node's ``grid_node`` slot (so one trial per node at a time); the trial finds that node's
ServerActor by name and runs grid.sweep.measure.measure_trial against it, reporting each load point to Tune.
"""

from __future__ import annotations

import ray
from ray import tune

from grid.cluster.actor import NAMESPACE, ActorServer, actor_name
from grid.config.schema import RunSpec
from grid.engines.base import get_engine
from grid.sweep.measure import measure_trial
from grid.sweep.space import TrialPlan

REPORTED = ("point_index", "point_value", "status", "output_tok_per_s", "total_tok_per_s", "ttft_median_ms",
            "tpot_median_ms", "e2e_median_ms", "completed", "failed")


def _metrics(row: dict) -> dict:
    out = {k: row.get(k) for k in REPORTED}
    out["trial_status"] = row.get("trial_status")
    out["error_class"] = row.get("error_class") or row.get("trial_error_class")
    return {k: v for k, v in out.items() if v is not None}


def run_trial(config: dict, *, spec: RunSpec, plans: dict[str, TrialPlan]) -> None:
    plan = plans[config["config_hash"]]
    node_id = ray.get_runtime_context().get_node_id()
    server = ActorServer(ray.get_actor(actor_name(node_id), namespace=NAMESPACE))
    trial_id = tune.get_context().get_trial_id() or plan.config_hash
    reported = []

    def on_point(row: dict) -> None:
        reported.append(row)
        tune.report(_metrics(row))

    rows = measure_trial(spec, get_engine(spec), plan, server, trial_id=trial_id, on_point=on_point)
    if not reported:  # nothing was measured: report the verdict only
        first = rows[0] if rows else {}
        tune.report({"trial_status": first.get("trial_status", "failed"),
                     "error_class": first.get("trial_error_class") or "unknown",
                     "message": (first.get("trial_error_message") or "")[:200]})
