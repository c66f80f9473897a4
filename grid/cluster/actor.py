"""The Ray actor that owns one node and its server process (one per node of the cluster).

It claims the node's GPUs (or, on nodes without them, nothing but the node's ``grid_node`` slot, which trials
request so that at most one trial runs per node) and delegates to grid/server/session.py. Servers are started
through grid/server/watchdog.py with this actor's pid as owner, so a crashed or killed actor (or a driver killed with
SIGKILL, which ends its workers) takes its server's whole process group with it; ``max_restarts=0`` because a restarted
actor would not know the old group (ray_hydra.md §3.6-3.7). Its name,
``grid-server:<node id>``, and its ``repr`` (node, current configuration) are what the Ray dashboard shows.

A lost actor (``ray.kill``, a crashed worker, a lost node) is an infrastructure failure: ``ActorServer`` turns Ray's
``RayActorError`` into grid.server.infra.InfrastructureLost (class ``actor_lost``), and the trial makes a new actor
on the same node with :func:`start_actor` (the name is free again once the old actor is dead).

The actor sets ``GRID_RUN_ID`` and ``GRID_PROCESS_REGISTRY`` in its own process, so every server it starts carries
the run-id marker and is recorded in the run directory (grid/server/process.py, leftovers).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from grid.cluster.node import local_node
from grid.server.handle import LaunchRequest, LaunchResult
from grid.server.infra import InfrastructureLost
from grid.server.process import REGISTRY_ENV, RUN_ID_ENV
from grid.server.session import ServerSession

ACTOR_PREFIX = "grid-server:"
NAMESPACE = "grid"
NODE_RESOURCE = "grid_node"


# Ray's type stubs for ray.remote lack ``concurrency_groups`` (an actor option: ray/_common/ray_option_utils.py), hence
# the ignore here and where the decorated class is used.
@ray.remote(num_cpus=0, max_restarts=0,  # type: ignore[call-overload]
            concurrency_groups={"control": 1, "inspect": 4, "serve": 1})
class ServerActor:
    def __init__(self, node_label: str, host: str = "127.0.0.1", run_id: str | None = None,
                 registry: str | None = None) -> None:
        self.node_label = node_label
        if run_id and registry:  # inherited by every server this actor starts (grid/server/process.py)
            os.environ[RUN_ID_ENV], os.environ[REGISTRY_ENV] = run_id, registry
        self.session = ServerSession(host)
        self._holds: dict[str, threading.Event] = {}  # serve() tokens -> released

    def __repr__(self) -> str:
        return f"ServerActor(node={self.node_label}, serving={self.session.label})"

    @ray.method(concurrency_group="control")
    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        return self.session.pick_port(preferred)

    @ray.method(concurrency_group="control")
    def launch(self, request: LaunchRequest) -> LaunchResult:
        return self.session.launch(request)

    @ray.method(concurrency_group="control")
    def front(self, request: LaunchRequest) -> LaunchResult:
        return self.session.front(request)

    @ray.method(concurrency_group="control")
    def stop(self, grace_s: float = 10.0) -> str | None:
        for hold in list(self._holds.values()):
            hold.set()
        return self.session.stop(grace_s)

    @ray.method(concurrency_group="inspect")
    def node_info(self) -> dict[str, Any]:
        """This node (grid.cluster.node.local_node): Ray node id, host name, NVML UUIDs and names of the GPUs this
        actor claimed (its servers get exactly those)."""
        return local_node()

    @ray.method(concurrency_group="serve")
    def serve(self, label: str, token: str) -> str:
        """Block until :meth:`release` of ``token`` (or ``stop``): the trial submits this as a task named after its
        configuration (:func:`serving_task_name`) for as long as it measures, so that the dashboard's task list and
        ``ray list tasks --filter state=RUNNING`` show, per node, which configuration it serves. Ray reads an actor's
        repr once, at start, so the repr cannot tell this. A release that comes before the task starts counts.
        Returns ``label``."""
        self._hold(token).wait()
        self._holds.pop(token, None)
        return label

    @ray.method(concurrency_group="inspect")
    def release(self, token: str) -> None:
        self._hold(token).set()

    def _hold(self, token: str) -> threading.Event:
        return self._holds.setdefault(token, threading.Event())

    @ray.method(concurrency_group="inspect")
    def alive(self) -> bool:
        return self.session.alive()

    @ray.method(concurrency_group="inspect")
    def exit_code(self) -> int | None:
        return self.session.exit_code()

    @ray.method(concurrency_group="inspect")
    def wait_exit(self, timeout_s: float) -> int | None:
        return self.session.wait_exit(timeout_s)

    @ray.method(concurrency_group="inspect")
    def dirty(self) -> str | None:
        return self.session.dirty

    @ray.method(concurrency_group="inspect")
    def log_tail(self, max_bytes: int = 8000) -> str:
        return self.session.log_tail(max_bytes)

    @ray.method(concurrency_group="inspect")
    def log_size(self) -> int:
        return self.session.log_size()

    @ray.method(concurrency_group="inspect")
    def read_log(self, start: int, end: int | None = None) -> str:
        return self.session.read_log(start, end)

    @ray.method(concurrency_group="inspect")
    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        return self.session.server_info(api_key)

    def __ray_shutdown__(self) -> None:
        self.session.stop(5.0)


@dataclass(frozen=True)
class ActorOwner:
    """What every ServerActor of a run is created with: the servers' host, the run id and the registry directory."""

    host: str = "127.0.0.1"
    run_id: str | None = None
    registry: str | None = None


def grid_nodes() -> list[dict[str, Any]]:
    """The live nodes of the connected cluster that offer the ``grid_node`` resource (``ray.nodes()`` entries)."""
    return [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(NODE_RESOURCE)]


def start_actor(node: dict[str, Any], owner: ActorOwner) -> Any:
    """The ServerActor of ``node`` (a ``ray.nodes()`` entry): the running one, or a new one pinned to the node that
    claims all its GPUs. Returns Ray's actor handle."""
    gpus = int(node["Resources"].get("GPU", 0))
    label = node.get("NodeManagerHostname", node["NodeID"][:8])
    return ServerActor.options(  # type: ignore[attr-defined]
        name=actor_name(node["NodeID"]), namespace=NAMESPACE, get_if_exists=True, num_gpus=gpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
    ).remote(label, owner.host, owner.run_id, owner.registry)


def node_actor(node_id: str, owner: ActorOwner) -> Any:
    """The live ServerActor of node ``node_id`` (Ray's actor handle), made anew when the previous one died. Raises
    ``InfrastructureLost('actor_lost')`` when the node itself is gone."""
    node = next((n for n in grid_nodes() if n["NodeID"] == node_id), None)
    if node is None:
        raise InfrastructureLost("actor_lost", f"node {node_id[:12]} left the Ray cluster")
    handle = start_actor(node, owner)
    try:
        ray.get(handle.alive.remote())  # a handle to an actor that just died answers with RayActorError
    except RayActorError:
        handle = start_actor(node, owner)  # the dead actor's name is released once Ray has marked it dead
        ray.get(handle.alive.remote())
    return handle


class ActorServer:
    """The ServerHandle (grid/server/handle.py) of a node's ServerActor: each call is a blocking ``ray.get`` of the
    actor method of the same name.

    A dead actor raises grid.server.infra.InfrastructureLost (``actor_lost``) from every call but ``stop``, which
    returns None: the server's process group died with the actor (its watchdog), so there is nothing left to stop.
    ``handle`` None: the node's actor could not be had (``lost`` says why).
    """

    def __init__(self, handle: Any, node: str = "") -> None:
        self.handle = handle
        self.node = node
        self.lost: str | None = None  # why the actor is gone, once a call found out

    def _call(self, name: str, *args: Any) -> Any:
        """``ray.get`` of the actor's method ``name``; raises InfrastructureLost once the actor is gone."""
        if self.lost is not None:
            raise InfrastructureLost("actor_lost", self.lost)
        try:
            return ray.get(getattr(self.handle, name).remote(*args))
        except RayActorError as err:
            self.lost = (f"the server actor of node {self.node or '?'} died during {name}(): "
                         f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}").rstrip(": ")
            raise InfrastructureLost("actor_lost", self.lost) from err

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        port, notes = self._call("pick_port", preferred)
        return int(port), list(notes)

    def launch(self, request: LaunchRequest) -> LaunchResult:
        result: LaunchResult = self._call("launch", request)
        return result

    def front(self, request: LaunchRequest) -> LaunchResult:
        """The router in front of this node's servers and ``request.remote`` (grid.server.session.ServerSession.front)."""
        result: LaunchResult = self._call("front", request)
        return result

    def alive(self) -> bool:
        return bool(self._call("alive"))

    def exit_code(self) -> int | None:
        code: int | None = self._call("exit_code")
        return code

    def wait_exit(self, timeout_s: float) -> int | None:
        code: int | None = self._call("wait_exit", timeout_s)
        return code

    def log_tail(self, max_bytes: int = 8000) -> str:
        return str(self._call("log_tail", max_bytes))

    def log_size(self) -> int:
        return int(self._call("log_size"))

    def read_log(self, start: int, end: int | None = None) -> str:
        return str(self._call("read_log", start, end))

    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self._call("server_info", api_key)
        return info

    def node_info(self) -> dict[str, Any]:
        """The actor's node (:meth:`ServerActor.node_info`)."""
        info: dict[str, Any] = self._call("node_info")
        return info

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Stop the node's server; None without asking when the actor is already gone (nothing left to stop)."""
        if self.lost is not None:
            return None
        try:
            dirty: str | None = self._call("stop", grace_s)
        except InfrastructureLost:
            return None
        return dirty


def actor_name(node_id: str) -> str:
    return f"{ACTOR_PREFIX}{node_id}"


SERVING_PREFIX = "grid-serving "


def serving_task_name(run_name: str, label: str, hostname: str) -> str:
    """The name of the task that shows, while a trial measures, what its node serves:
    ``grid-serving <run>: <configuration label> @ <host>``."""
    return f"{SERVING_PREFIX}{run_name}: {label} @ {hostname}"
