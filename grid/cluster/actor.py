"""The Ray actor that owns one node and its server process (one per node of the cluster).

It claims the node's GPUs (or, on nodes without them, nothing but the node's ``grid_node`` slot, which trials
request so that at most one trial runs per node) and delegates to grid/server/session.py. Servers are started
through grid/server/watchdog.py with this actor's pid as owner, so a crashed or killed actor (or a driver killed with
SIGKILL, which ends its workers) takes its server's whole process group with it; ``max_restarts=0`` because a restarted
actor would not know the old group (ray_hydra.md §3.6-3.7). Its name,
``grid-server:<node id>``, and its ``repr`` (node, current configuration) are what the Ray dashboard shows.
"""

from __future__ import annotations

import ray

from grid.server.session import ServerSession

ACTOR_PREFIX = "grid-server:"
NAMESPACE = "grid"
NODE_RESOURCE = "grid_node"


@ray.remote(num_cpus=0, max_restarts=0, concurrency_groups={"control": 1, "inspect": 4})
class ServerActor:
    def __init__(self, node_label: str, host: str = "127.0.0.1") -> None:
        self.node_label = node_label
        self.session = ServerSession(host)

    def __repr__(self) -> str:
        return f"ServerActor(node={self.node_label}, serving={self.session.label})"

    @ray.method(concurrency_group="control")
    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        return self.session.pick_port(preferred)

    @ray.method(concurrency_group="control")
    def launch(self, **kwargs) -> dict:
        return self.session.launch(**kwargs)

    @ray.method(concurrency_group="control")
    def stop(self, grace_s: float = 10.0) -> str | None:
        return self.session.stop(grace_s)

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
    def server_info(self, api_key: str | None = None) -> dict | None:
        return self.session.server_info(api_key)

    def __ray_shutdown__(self) -> None:
        self.session.stop(5.0)


class ActorServer:
    """Adapter giving a ServerActor handle the ServerSession call interface (blocking ``ray.get``)."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def __getattr__(self, name: str):
        method = getattr(self.handle, name)
        return lambda *a, **kw: ray.get(method.remote(*a, **kw))


def actor_name(node_id: str) -> str:
    return f"{ACTOR_PREFIX}{node_id}"
