"""What a user deploys for the configuration grid names best: its servers' launch commands and the router's, and
Kubernetes manifests in the forms SGLang's deployments use, plus a KubeRay RayJob that reruns the sweep (pure).

* ``launch.sh``: each server's ``python -m sglang.launch_server`` line on its node and GPUs (``CUDA_VISIBLE_DEVICES``),
  a prefill server with its ``--disaggregation-bootstrap-port``, a server spanning nodes started on each with its
  ``--node-rank`` and its first node's ``--dist-init-addr``, and with several servers the router
  (``python -m sglang_router.launch_router``, grid/server/router.py ``router_argv``) on node 0. Run it on each node
  with ``NODE=<index>`` and every node's address in ``NODE<i>_HOST``.
* ``lws.yaml``: one LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``) per role, ``replicas`` servers of ``size`` pods
  (the nodes one server spans), as SGLang's multi-node examples deploy a server.
* ``rbg.yaml``: one RoleBasedGroup (``workloads.x-k8s.io/v1alpha1``, sgl-project/rbg) holding every role and the
  router, which depends on them (starts after them).
* ``rayjob.yaml``: a KubeRay RayJob (``ray.io/v1``) whose workers are the sweep's GPU nodes (each offering grid's
  ``grid_node`` and ``grid_hw:<hardware>`` resources, grid/cluster/node.py) and whose entrypoint reruns the sweep
  with ``engine=sglang``.

Servers listen on :data:`SERVER_PORT` + their index, prefill servers bootstrap on :data:`BOOTSTRAP_PORT` + their index,
the router on :data:`ROUTER_PORT`. In the manifests a server reaches another by its pod's service name
(``<name>-<role>-<index>``), which a cluster's DNS setup may name otherwise: each file says so.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import yaml

#: Ports of the generated deployment: servers from SERVER_PORT (SGLang's own default, 30000), prefill bootstrap from
#: BOOTSTRAP_PORT (SGLang's --disaggregation-bootstrap-port default, 8998), the router on ROUTER_PORT and its metrics
#: on ROUTER_METRICS_PORT (sglang-router 0.3.2's defaults: 30000 is taken by the servers here, so 8000; 29000); a
#: server spanning nodes meets its other nodes at DIST_INIT_PORT on its first (SGLang's --dist-init-addr HOST:PORT).
SERVER_PORT = 30000
BOOTSTRAP_PORT = 8998
ROUTER_PORT = 8000
ROUTER_METRICS_PORT = 29000
DIST_INIT_PORT = 20000


@dataclass(frozen=True)
class Server:
    """One server of the deployment: ``role`` (aggregated, prefill, decode), its ``index`` among all servers, the
    ``node`` it runs on (its first, when it spans ``nodes``), its ``gpus`` there and its SGLang command line ``argv``
    (``python -m sglang.launch_server ...`` without ``--host`` and ``--port``)."""

    role: str
    index: int
    node: int
    gpus: tuple[int, ...]
    argv: tuple[str, ...]
    nodes: int = 1

    @property
    def port(self) -> int:
        return SERVER_PORT + self.index

    @property
    def bootstrap_port(self) -> int | None:
        return BOOTSTRAP_PORT + self.index if self.role == "prefill" else None

    def command(self, host: str = "0.0.0.0", dist: tuple[str, str, str] | None = None) -> list[str]:
        """Its command line, serving on ``host`` and its port (a prefill server with its bootstrap port); ``dist``:
        (first node's address, node count, this node's rank) of a server spanning nodes."""
        argv = list(self.argv)
        if dist is not None:
            for flag in ("--dist-init-addr", "--nnodes", "--node-rank"):  # this node's, below
                if flag in argv:
                    i = argv.index(flag)
                    del argv[i:i + 2]
            argv += ["--dist-init-addr", f"{dist[0]}:{DIST_INIT_PORT}", "--nnodes", dist[1], "--node-rank", dist[2]]
        out = [*argv, "--host", host, "--port", str(self.port)]
        if self.bootstrap_port is not None and "--disaggregation-bootstrap-port" not in self.argv:
            out += ["--disaggregation-bootstrap-port", str(self.bootstrap_port)]
        return out


def k8s_name(name: str) -> str:
    """``name`` as a Kubernetes object name (RFC 1123: lower-case letters, digits and ``-``, at most 63)."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63] or "grid"


def router_command(servers: list[Server], policy: str, host_of) -> list[str] | None:
    """The router's command line in front of ``servers`` (``host_of(server)``: the address the router reaches it
    at); None for a single aggregated server, which needs no router."""
    from grid.server.router import router_argv

    if len(servers) == 1 and servers[0].role == "aggregated":
        return None
    url = {s.index: f"http://{host_of(s)}:{s.port}" for s in servers}
    kinds = {s.role for s in servers}
    if kinds == {"aggregated"}:
        return router_argv(workers=[url[s.index] for s in servers], port=ROUTER_PORT,
                           metrics_port=ROUTER_METRICS_PORT, policy=policy, host="0.0.0.0", python="python")
    return router_argv(prefill=[(url[s.index], s.bootstrap_port) for s in servers if s.role == "prefill"],
                       decode=[url[s.index] for s in servers if s.role == "decode"], port=ROUTER_PORT,
                       metrics_port=ROUTER_METRICS_PORT, policy=policy, host="0.0.0.0", python="python")


def launch_script(name: str, servers: list[Server], policy: str | None) -> str:
    """``launch.sh``: every server's command on its node, then the router on node 0."""
    lines = ["#!/usr/bin/env bash", f"# {name}: the configuration grid measured best, launched by hand.",
             "# On each node run: NODE=<index> NODE0_HOST=<address of node 0> NODE1_HOST=... bash launch.sh",
             "set -euo pipefail", 'NODE="${NODE:-0}"', ""]
    for s in servers:
        env = f"CUDA_VISIBLE_DEVICES={','.join(map(str, s.gpus))} "
        if s.nodes == 1:
            lines += [f"# {s.role} server {s.index} (node {s.node}, GPUs {','.join(map(str, s.gpus))})",
                      f'if [ "$NODE" = {s.node} ]; then', f"  {env}{shlex.join(s.command())} &", "fi"]
            continue
        first = f"NODE{s.node}_HOST"
        lines.append(f"# {s.role} server {s.index}: nodes {s.node}-{s.node + s.nodes - 1}, GPUs "
                     f"{','.join(map(str, s.gpus))} on each")
        for rank in range(s.nodes):
            command = shlex.join(s.command(dist=("ADDR", str(s.nodes), str(rank)))).replace(
                f"ADDR:{DIST_INIT_PORT}", f'"${{{first}:-127.0.0.1}}:{DIST_INIT_PORT}"')
            lines += [f'if [ "$NODE" = {s.node + rank} ]; then', f"  {env}{command} &", "fi"]
    router = router_command(servers, policy or "round_robin", lambda s: f"${{NODE{s.node}_HOST:-127.0.0.1}}")
    if router is not None:
        # the URLs in double quotes, so that the shell expands the node addresses in them
        quoted = " ".join(f'"{a}"' if a.startswith("http://") else shlex.quote(a) for a in router)
        lines += ["# the router, on node 0, once every server answers GET /health", 'if [ "$NODE" = 0 ]; then',
                  f"  {quoted} &", "fi"]
    return "\n".join([*lines, "wait", ""])


def _container(name: str, command: list[str], gpus: int, image: str, ports: list[int]) -> dict:
    c: dict = {"name": name, "image": image, "command": command,
               "ports": [{"containerPort": p} for p in ports]}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return c


def _pod(name: str, command: list[str], gpus: int, image: str, ports: list[int]) -> dict:
    return {"spec": {"containers": [_container(name, command, gpus, image, ports)]}}


def _groups(servers: list[Server]) -> list[list[Server]]:
    """``servers`` grouped by role and shape (command), in order."""
    out: list[list[Server]] = []
    for s in servers:
        if out and out[-1][0].role == s.role and out[-1][0].argv == s.argv:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def _role_name(group: list[Server], groups: list[list[Server]]) -> str:
    same = [g for g in groups if g[0].role == group[0].role]
    return group[0].role if len(same) == 1 else f"{group[0].role}-{same.index(group)}"


def manifests(name: str, servers: list[Server], policy: str | None, image: str) -> dict[str, str]:
    """``lws.yaml`` and ``rbg.yaml`` for ``servers`` (image ``image``)."""
    app = k8s_name(name)
    groups = _groups(servers)

    def host(s: Server) -> str:
        group = next(g for g in groups if s in g)
        return f"{app}-{_role_name(group, groups)}-{group.index(s)}"

    note = (f"# {name}: generated by grid for the configuration it measured best. Servers reach each other by "
            "their pods' service names (<name>-<role>-<index>), which your cluster's DNS may spell otherwise.\n")
    lws, roles = [], []
    for g in groups:
        s0, role = g[0], _role_name(g, groups)
        ports = [s0.port] + ([s0.bootstrap_port] if s0.bootstrap_port is not None else [])
        # a server spanning nodes: LWS gives each pod its leader's address, the group's size and its own index
        dist = ("$(LWS_LEADER_ADDRESS)", "$(LWS_GROUP_SIZE)", "$(LWS_WORKER_INDEX)") if s0.nodes > 1 else None
        pod = _pod("sglang", s0.command(dist=dist), len(s0.gpus), image, [p for p in ports if p is not None])
        lws.append({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                    "metadata": {"name": f"{app}-{role}"},
                    "spec": {"replicas": len(g), "leaderWorkerTemplate": {"size": s0.nodes, "workerTemplate": pod}}})
        roles.append({"name": role, "replicas": len(g), "template": pod})
    router = router_command(servers, policy or "round_robin", host)
    if router is not None:
        roles.append({"name": "router", "replicas": 1, "dependencies": [r["name"] for r in roles],
                      "template": _pod("router", router, 0, image, [ROUTER_PORT, ROUTER_METRICS_PORT])})
    rbg = {"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "metadata": {"name": app},
           "spec": {"roles": roles}}
    return {"lws.yaml": note + yaml.safe_dump_all(lws, sort_keys=False),
            "rbg.yaml": note + yaml.safe_dump(rbg, sort_keys=False)}


def rayjob(name: str, entrypoint: str, hardware: str, nodes: int, gpus_per_node: int, image: str) -> str:
    """``rayjob.yaml``: a KubeRay RayJob of ``nodes`` GPU workers that runs ``entrypoint`` (the sweep again)."""
    resources = f'{{"grid_node": 1, "grid_hw:{hardware}": 1}}'
    job = {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": k8s_name(f"{name}-sweep")},
        "spec": {
            "entrypoint": entrypoint,
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": _pod("ray-head", [], 0, image, [8265])},
                "workerGroupSpecs": [{
                    "groupName": "gpu-nodes", "replicas": nodes, "minReplicas": nodes, "maxReplicas": nodes,
                    "rayStartParams": {"resources": f"'{resources}'"},
                    "template": _pod("ray-worker", [], gpus_per_node, image, []),
                }],
            },
        },
    }
    return (f"# {name}: reruns the sweep on a Ray cluster of {nodes} GPU node(s) (grid's actor per node claims the "
            "node's grid_node slot)\n" + yaml.safe_dump(job, sort_keys=False))


def files(name: str, servers: list[Server], policy: str | None, *, image: str, entrypoint: str, hardware: str,
          nodes: int, gpus_per_node: int) -> dict[str, str]:
    """Every deployment file (file name -> text) of ``servers`` behind a router of ``policy`` (none for a single
    aggregated server). Raises ``ValueError`` for no servers."""
    if not servers:
        raise ValueError("a deployment has at least one server")
    return {"launch.sh": launch_script(name, servers, policy), **manifests(name, servers, policy, image),
            "rayjob.yaml": rayjob(name, entrypoint, hardware, nodes, gpus_per_node, image)}
