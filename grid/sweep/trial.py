"""The Ray Tune trainable: one trial = one server configuration, measured on the server actor of the trial's node.

Tune grants the trial its node's ``grid_node`` slot (so one trial per node at a time); the trial finds that node's
ServerActor by name and runs grid.sweep.measure.measure_trial against it, reporting each load point to Tune. An
external engine (engine=openai: a server that is already up) is measured through grid/server/external.py instead.

When the node's actor is lost (``actor_lost``, an infrastructure failure: the trial is recorded ``skipped`` with the
load points measured before the loss), a new actor is made on the node and the configuration runs again, up to
``ACTOR_LOST_ATTEMPTS`` times in all; its last attempt's files replace the earlier ones. A configuration still
``skipped`` runs again when the same command runs again.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlparse

import ray
from ray import tune

from grid.cluster.actor import ActorOwner, ActorServer, node_actor, serving_task_name
from grid.status import clear_running, mark_running
from grid.config.schema import RunSpec
from grid.engines.base import engine_class, get_engine
from grid.sweep.measure import clip_message, measure_trial
from grid.server.infra import InfrastructureLost
from grid.plan import TrialPlan

ACTOR_LOST_ATTEMPTS = 2  # attempts per trial when the node's actor is lost (the first + one on a new actor)

REPORTED = ("point_index", "point_kind", "point_value", "repeat_index", "status", "output_tok_per_s", "total_tok_per_s",
            "ttft_median_ms",
            "tpot_median_ms", "e2e_median_ms", "completed", "failed", "twin_behind_pct", "client_lag_pct",
            "host_noise_max_pct")


def _metrics(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row.get(k) for k in REPORTED}
    out["trial_status"] = row.get("trial_status")
    out["error_class"] = row.get("error_class") or row.get("trial_error_class")
    out["trial_error_class"] = row.get("trial_error_class")
    out["message"] = clip_message(row.get("trial_error_message")) or None
    return {k: v for k, v in out.items() if v is not None}


def _node_server(node_id: str, owner: ActorOwner) -> ActorServer:
    """The node's server actor (made anew if the last one died), or an adapter that reports it lost."""
    try:
        return ActorServer(node_actor(node_id, owner), node_id[:12])
    except InfrastructureLost as err:
        lost = ActorServer(None, node_id[:12])
        lost.lost = str(err)
        return lost


def _deployment_nodes(node_id: str) -> list[str]:
    """The nodes of the trial's placement group, its own first: Tune grants a trial of a deployment across nodes one
    bundle per node (grid/sweep/driver.py ``trial_resources``), bundle 0 the trial's own. ``[node_id]`` outside a
    placement group."""
    from ray.util import get_current_placement_group, placement_group_table

    group = get_current_placement_group()
    if group is None:
        return [node_id]
    bundles = placement_group_table(group)["bundles_to_node_id"]
    nodes = [bundles[i] for i in sorted(bundles)]
    return [node_id] + [n for n in nodes if n != node_id]


def _spread_server(first: ActorServer, first_node: dict[str, Any], node_ids: list[str], spec: RunSpec,
                   owner: ActorOwner) -> Any:
    """The handle of a deployment over ``node_ids`` (grid/cluster/spread.py), ``first`` the trial's node's actor and
    ``first_node`` its node (:func:`_node_of`); a lost node's actor answers as lost."""
    from grid.cluster.spread import SpreadServer

    others = [_node_server(n, owner) for n in node_ids[1:]]
    ips = [first_node.get("node_ip")] + [_node_of(s, n).get("node_ip") for s, n in zip(others, node_ids[1:])]
    return SpreadServer([first, *others], spec.engine.host, ips)


def _node_of(server: ActorServer, node_id: str) -> dict[str, Any]:
    """The server's node (its actor's grid.cluster.node.local_node); what the trial knows when the actor is gone."""
    try:
        info = server.node_info()
    except InfrastructureLost:
        info = None
    return info or {"node_id": node_id, "node_hostname": socket.gethostname(), "gpu_uuids": None}


def _serving(server: ActorServer, spec: RunSpec, plan: TrialPlan, node: dict[str, Any], token: str) -> Any:
    """Start the actor's named ``serve`` task (grid.cluster.actor.ServerActor.serve) for the dashboard: its Ray
    object ref, None when the actor is gone. It ends when the trial releases ``token`` (or the server is stopped)."""
    if server.handle is None or server.lost is not None:
        return None
    name = serving_task_name(spec.name, plan.label, node.get("node_hostname") or str(node.get("node_id"))[:12])
    return server.handle.serve.options(name=name).remote(plan.label, token)


def run_trial(config: dict[str, Any], *, spec: RunSpec, plans: dict[str, TrialPlan],
              owner: ActorOwner | None = None) -> None:
    plan = plans[config["config_hash"]]
    node_id = ray.get_runtime_context().get_node_id()
    engine = get_engine(spec)
    trial_id = tune.get_context().get_trial_id() or plan.config_hash
    reported: list[dict[str, Any]] = []

    def on_point(row: dict[str, Any]) -> None:
        reported.append(row)
        tune.report(_metrics(row))

    if getattr(engine, "external", False):  # already running elsewhere: no launch, no node actor (external.py)
        node = {"node_id": None, "node_hostname": urlparse(spec.engine.base_url or "").hostname, "gpu_uuids": None}
        rows = measure_trial(spec, engine, plan, engine.server(), trial_id=trial_id, on_point=on_point, node=node)
    else:
        nodes = _deployment_nodes(node_id) if engine.nodes_needed(plan) > 1 else [node_id]
        for attempt in range(1, ACTOR_LOST_ATTEMPTS + 1):
            server = _node_server(node_id, owner or ActorOwner(spec.engine.host))
            node = _node_of(server, node_id)
            handle: Any = server if len(nodes) == 1 else _spread_server(server, node, nodes, spec,
                                                                         owner or ActorOwner(spec.engine.host))
            mark_running(spec.run_dir, plan, node, trial_id)
            token = f"{trial_id}:{attempt}"
            serving = _serving(server, spec, plan, node, token)
            try:
                rows = measure_trial(spec, engine, plan, handle, trial_id=trial_id, on_point=on_point, node=node)
            finally:
                if serving is not None and server.lost is None:
                    try:
                        ray.get(server.handle.release.remote(token), timeout=30)
                    except Exception:  # the actor died meanwhile: its serve task died with it
                        pass
                clear_running(spec.run_dir, plan)
            if not (rows and rows[0]["trial_error_class"] == "actor_lost") or attempt == ACTOR_LOST_ATTEMPTS:
                break
            tune.report({"note": f"attempt {attempt}: {rows[0]['trial_error_message']}; running the "
                                 "configuration again on a new server actor"})
    final = rows[-1]["trial_status"] if rows else "failed"
    # nothing was measured, or the verdict changed after the last point (e.g. every point failed): report the verdict
    if not reported or final != reported[-1].get("trial_status"):
        first = rows[0] if rows else None
        tune.report({"trial_status": first["trial_status"] if first else "failed",
                     "error_class": (first and first["trial_error_class"]) or "unknown",
                     "message": clip_message(first and first["trial_error_message"])})


def dry_run_nodes(spec: RunSpec) -> list[str]:
    """The nodes a sweep would run on, for ``dry_run``: ``["local node"]`` without ``ray.address``; else every live
    node of that cluster offering the ``grid_node`` resource (hostname and GPU count), read by joining it briefly.
    An external engine (engine=openai) runs nowhere but at its URL. Never raises: an unreachable cluster is named."""
    if engine_class(spec.engine.kind).external:
        return [f"external server {spec.engine.base_url}"]
    if spec.ray.address is None:
        return ["local node"]
    from grid.cluster.actor import NAMESPACE, NODE_RESOURCE

    try:
        ray.init(address=spec.ray.address, namespace=NAMESPACE, log_to_driver=False, include_dashboard=False)
        nodes = [f"{n.get('NodeManagerHostname', n['NodeID'][:8])} ({int(n['Resources'].get('GPU', 0))} GPU)"
                 for n in ray.nodes() if n["Alive"] and n["Resources"].get(NODE_RESOURCE)]
    except Exception as err:  # dry run: report, do not fail
        return [f"Ray cluster at {spec.ray.address} (not reachable: {err})"]
    finally:
        if ray.is_initialized():
            ray.shutdown()
    return nodes or [f"Ray cluster at {spec.ray.address} (no node offers the '{NODE_RESOURCE}' resource)"]
