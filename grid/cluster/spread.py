"""A deployment across nodes: the ServerHandle of a trial whose servers run on several nodes' actors.

Tune grants such a trial one ``grid_node`` slot per node its deployment is placed on (a placement group with one
bundle per node, ``STRICT_SPREAD``; grid/sweep/driver.py), so no other trial uses those nodes meanwhile. The trial
runs on the first node. :class:`SpreadServer` asks each node's ServerActor (grid/cluster/actor.py) to start the
servers ``Deployment.place`` put there (``MemberLaunch.node``), all nodes at once and without a router
(``LaunchRequest.router`` False), then asks the first node's actor to start SGLang's router in front of every one of
them (``ServerSession.front``) and to probe through it. Each node's actor reaps its own servers, as for one server;
:meth:`SpreadServer.stop` stops every node.

A server listening on loopback (``engine.host`` 127.0.0.1) is reachable from another node only when the nodes share
the machine (a local multi-node Ray cluster); on separate machines the sweep refuses to start (:func:`loopback_refusal`,
grid/sweep/driver.py), naming ``engine.host``. With ``engine.host=0.0.0.0`` each server is addressed by its node's IP
(Ray's node IP address).

Each node's servers write their own log: the first node's ``<config hash>.log``, node ``k``'s
``<config hash>.node<k>.log``. The handle reads them as one log: :meth:`log_size` hands out a number standing for
the size of every node's log at that moment, which :meth:`read_log` understands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from grid.cluster.actor import ActorServer
from grid.server.handle import LaunchRequest, LaunchResult, MemberEndpoint
from grid.server.infra import InfrastructureLost

T = TypeVar("T")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def node_log_path(log_path: str, node: int) -> str:
    """Where node ``node``'s servers of a deployment write: ``log_path`` itself on the first node (0),
    ``<stem>.node<k><suffix>`` beside it on node ``k``. Pure."""
    if node == 0:
        return log_path
    path = Path(log_path)
    return str(path.with_name(f"{path.stem}.node{node}{path.suffix}"))


def member_url(url: str, host: str, node_ip: str | None) -> str:
    """The URL another node reaches a server at: ``url`` as the server's session wrote it, its host replaced by the
    node's IP where the server listens on every address (``host`` 0.0.0.0 or empty). Pure."""
    if host not in ("0.0.0.0", "") or not node_ip:
        return url
    scheme, _, rest = url.partition("://")
    port = rest.rsplit(":", 1)[1]
    return f"{scheme}://{node_ip}:{port}"


def loopback_refusal(host: str, node_ips: Sequence[str | None]) -> str | None:
    """Why servers listening on ``host`` cannot serve one router from nodes of ``node_ips``: a loopback host on nodes
    of different machines. None: they can (one machine, or servers listening on every address). Pure."""
    ips = {ip for ip in node_ips if ip}
    if host in LOOPBACK and len(ips) > 1:
        return (f"engine.host={host} serves on loopback, but the deployment's nodes are different machines "
                f"({', '.join(sorted(ips))}): set engine.host=0.0.0.0 so the router on the first node reaches them")
    return None


class SpreadServer:
    """The ServerHandle (grid/server/handle.py) of one deployment over ``nodes``' ActorServers, the first being the
    trial's node (where the router runs). ``host``: ``engine.host``, what every server listens on. Calls that ask
    about the server ask every node (``alive``: all are up; ``exit_code``: the first node's that ended);
    ``server_info`` and ``pick_port`` are the first node's. A lost node's actor raises ``InfrastructureLost`` as
    one node's does."""

    def __init__(self, nodes: Sequence[ActorServer], host: str, node_ips: Sequence[str | None]) -> None:
        if len(nodes) != len(node_ips) or not nodes:
            raise ValueError(f"{len(nodes)} node actors for {len(node_ips)} node IPs")
        self.nodes = list(nodes)
        self.host = host
        self.node_ips = list(node_ips)
        self._sizes: dict[int, list[int]] = {}  # what log_size handed out -> each node's log size then

    def _each(self, call: Callable[[int, ActorServer], T]) -> list[T]:
        """``call(k, actor)`` on every node's actor at once, in node order. The first InfrastructureLost raised is
        raised."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            return list(pool.map(call, range(len(self.nodes)), self.nodes))

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        return self.nodes[0].pick_port(preferred)

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Start each node's servers at once (no router), then the router on the first node in front of all of
        them, and probe through it. A node whose servers fail to start fails the launch, naming the node, and every
        node's servers are stopped. The result's ``startup_s`` is the slowest server's."""
        shares = [replace(request, members=tuple(m for m in request.members if m.node == k), router=False,
                          log_path=node_log_path(request.log_path, k), probe_enabled=False)
                  for k in range(len(self.nodes))]
        # the trial holds exactly the nodes Deployment.place fills (grid/sweep/driver.py trial_placement)
        assert all(share.members for share in shares), "a node of the trial has no server of the deployment"
        try:
            return self._launch(request, shares)
        except InfrastructureLost:  # a node's actor is gone: stop what the others started, then say so
            self.stop()
            raise

    def _launch(self, request: LaunchRequest, shares: list[LaunchRequest]) -> LaunchResult:
        results = self._each(lambda k, node: node.launch(shares[k]))
        failed = next(((k, r) for k, r in enumerate(results) if r.status != "ok"), None)
        if failed is not None:
            self.stop()
            k, result = failed
            return replace(result, message=f"node {k} ({self.nodes[k].node}): {result.message}")
        remote = tuple(MemberEndpoint(m.role, member_url(url, self.host, self.node_ips[k]), m.bootstrap_port, m.name,
                                      node)
                       for k in range(1, len(self.nodes))
                       for m, url, node in zip(shares[k].members, results[k].server_urls, results[k].server_nodes,
                                               strict=True))
        front = self.nodes[0].front(replace(request, members=shares[0].members, remote=remote))
        notes = [note for r in results for note in r.infra_retries]
        slowest = max((r.startup_s for r in results if r.startup_s is not None), default=front.startup_s)
        return replace(front, startup_s=slowest, infra_retries=notes + [n for n in front.infra_retries
                                                                          if n not in notes])

    def alive(self) -> bool:
        return all(self._each(lambda _, node: node.alive()))

    def exit_code(self) -> int | None:
        return next((c for c in self._each(lambda _, node: node.exit_code()) if c is not None), None)

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` real seconds on every node at once for its servers to exit (all nodes' waits end
        before this returns); the first node's exit code that ended, None if all still run."""
        return next((c for c in self._each(lambda _, node: node.wait_exit(timeout_s)) if c is not None), None)

    def log_tail(self, max_bytes: int = 8000) -> str:
        """Each node's tail, the first node's last (it holds the router's view), each under a line naming the node
        where there are several; at most about ``max_bytes`` in all."""
        share = max(1000, max_bytes // len(self.nodes))
        tails = self._each(lambda _, node: node.log_tail(share))
        parts = [f"--- node {k} ({self.nodes[k].node}) ---\n{tails[k]}" for k in range(1, len(tails)) if tails[k]]
        return "\n".join(parts + [tails[0]])

    def log_size(self) -> int:
        sizes = self._each(lambda _, node: node.log_size())
        total = sum(sizes)
        self._sizes[total] = sizes
        return total

    def read_log(self, start: int, end: int | None = None) -> str:
        """Every node's log from where it stood when :meth:`log_size` returned ``start`` to where it stood at ``end``
        (None: to its end), in node order. A ``start`` this handle did not hand out reads each log from its
        beginning."""
        starts = self._sizes.get(start, [0] * len(self.nodes))
        ends: list[int | None] = list(self._sizes[end]) if end is not None and end in self._sizes \
            else [None] * len(self.nodes)
        texts = self._each(lambda k, node: node.read_log(starts[k], ends[k]))
        return "".join(t if not t or t.endswith("\n") else t + "\n" for t in texts)

    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        return self.nodes[0].server_info(api_key)

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Stop every node's servers (the router with the first node's); why a node is not clean, each named."""
        def one(_: int, node: ActorServer) -> str | None:
            try:
                return node.stop(grace_s)
            except InfrastructureLost:
                return None
        dirty = self._each(one)
        found = [f"node {k} ({self.nodes[k].node}): {d}" for k, d in enumerate(dirty) if d]
        return "; ".join(found) or None
