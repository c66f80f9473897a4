"""A deployment: the SGLang servers of one configuration, their roles and where they run (pure).

An aggregated deployment is ``n`` identical servers that each prefill and decode, behind a router when ``n`` > 1.
A disaggregated one (``xPyD``) is ``x`` prefill servers (``--disaggregation-mode prefill``) and ``y`` decode servers
(``--disaggregation-mode decode``), always behind a router: SGLang's decode server cannot prefill a request itself,
so every request goes prefill -> KV transfer -> decode (llm-d/llm-d ``docs/operations/disaggregation/``, its SGLang page). Each
server is ``tp`` GPUs, its attention split into ``attn_dp`` data-parallel groups of ``tp / attn_dp`` (SGLang's
``--attn-dp-size``, ``--dp-size N --enable-dp-attention`` before 0.5.22) and its experts over ``ep`` GPUs
(``--ep-size``). Servers are placed on nodes in order, each on the first node with enough free GPUs; a server of
more GPUs than a node spans whole nodes (``--nnodes``). Sources: docs/topology.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from grid.config.specs import HardwareSpec, ModelSpec
from grid.topology.kv import DEFAULT_COST, TransferCost, kv_link, transfer_s, wire_bytes_per_token

Role = Literal["aggregated", "prefill", "decode"]
ROLES: tuple[Role, ...] = get_args(Role)


@dataclass(frozen=True)
class ServerShape:
    """One server's parallelism: ``tp`` GPUs (``--tp-size``), ``attn_dp`` attention data-parallel groups
    (``--attn-dp-size``; 1: attention is tensor-parallel over all ``tp``), ``ep`` expert-parallel size (``--ep-size``).
    Raises ``ValueError`` naming the key when a size is below 1, ``attn_dp`` or ``ep`` does not divide ``tp``."""

    tp: int = 1
    attn_dp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for key in ("tp", "attn_dp", "ep"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        for key in ("attn_dp", "ep"):
            if self.tp % getattr(self, key):
                raise ValueError(f"{key}={getattr(self, key)} must divide tp={self.tp} (SGLang splits the tp GPUs "
                                 f"into {key} groups)")

    @property
    def gpus(self) -> int:
        return self.tp

    @property
    def attn_tp(self) -> int:
        """GPUs one attention group spans: ``tp / attn_dp``."""
        return self.tp // self.attn_dp

    def settings(self) -> dict[str, int | bool]:
        """grid's settings for this shape (``tp_size``; ``dp_size`` with ``enable_dp_attention`` and ``ep_size``
        where not 1), which the release's dialect renders as that release's flags (grid/releases/flags.py:
        ``--dp-size N --enable-dp-attention`` before 0.5.22, ``--attn-dp-size N`` from it)."""
        out: dict[str, int | bool] = {"tp_size": self.tp}
        if self.attn_dp > 1:
            out.update(dp_size=self.attn_dp, enable_dp_attention=True)
        if self.ep > 1:
            out["ep_size"] = self.ep
        return out

    def label(self) -> str:
        """``TP8``, ``TP8 DP8 EP8``: the sizes that are not 1 besides TP."""
        return " ".join([f"TP{self.tp}"] + [f"{name}{n}" for name, n in (("DP", self.attn_dp), ("EP", self.ep))
                                            if n > 1])


@dataclass(frozen=True)
class RoleGroup:
    """``count`` servers of one ``role`` and ``shape``, launched with the run's settings and ``settings`` (grid's
    names, ``(name, value)`` pairs: this role's own flags over the run's, e.g. a decode server's
    ``cuda_graph_max_bs``)."""

    role: Role
    count: int
    shape: ServerShape
    settings: tuple[tuple[str, Any], ...] = ()

    def settings_over(self, base: Mapping[str, Any], launch: bool = False) -> dict[str, Any]:
        """The settings a server of this group runs with: ``base`` (the configuration's), its shape's
        (:meth:`ServerShape.settings`) and its own; with ``launch``, also ``disaggregation_mode`` for a prefill or
        decode server (what SGLang is launched with; the twin's performance model takes the role from the
        deployment instead)."""
        out = {**base, **self.shape.settings(), **dict(self.settings)}
        if launch and self.role != "aggregated":
            out["disaggregation_mode"] = self.role
        return out

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.count < 1:
            raise ValueError(f"{self.role}: count must be >= 1, got {self.count}")


@dataclass(frozen=True)
class Placement:
    """Where one server runs: its ``role``, its index among that role's servers, the ``node`` (0-based; its first
    node when it spans several), how many ``nodes`` it spans and its GPU indices on each (``gpus``)."""

    role: Role
    index: int
    node: int
    nodes: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Deployment:
    """The servers of one configuration: aggregated groups only, or prefill and decode groups (not both kinds).
    ``router_policy``: the router's policy (``sglang_router`` ``--policy``), needed with more than one server.
    Raises ``ValueError`` for an empty deployment, a mix of aggregated and disaggregated roles, a disaggregated one
    without both roles, or several servers without a router policy."""

    groups: tuple[RoleGroup, ...]
    router_policy: str | None = None

    def __post_init__(self) -> None:
        roles = {g.role for g in self.groups}
        if not self.groups:
            raise ValueError("a deployment needs at least one server")
        if "aggregated" in roles and roles != {"aggregated"}:
            raise ValueError("a deployment is aggregated or disaggregated: aggregated servers cannot be mixed with "
                             "prefill or decode ones")
        if roles & {"prefill", "decode"} and roles != {"prefill", "decode"}:
            missing = ({"prefill", "decode"} - roles).pop()
            raise ValueError(f"a disaggregated deployment needs prefill and decode servers; it has no {missing} "
                             "server")
        if self.servers > 1 and not self.router_policy:
            raise ValueError(f"{self.servers} servers need a router: set router_policy (e.g. round_robin)")

    @property
    def disaggregated(self) -> bool:
        return self.groups[0].role != "aggregated"

    @property
    def servers(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def gpus(self) -> int:
        return sum(g.count * g.shape.gpus for g in self.groups)

    def count(self, role: Role) -> int:
        return sum(g.count for g in self.groups if g.role == role)

    def identity(self) -> dict[str, Any]:
        """The deployment as JSON-able values: its groups (role, count, tp, attn_dp, ep, settings) and router
        policy (a trial's identity, grid/sweep/space.py ``config_identity``)."""
        return {"groups": [{"role": g.role, "count": g.count, "tp": g.shape.tp, "attn_dp": g.shape.attn_dp,
                            "ep": g.shape.ep, "settings": dict(g.settings)} for g in self.groups],
                "router_policy": self.router_policy}

    @classmethod
    def from_identity(cls, d: Mapping[str, Any]) -> Deployment:
        """The deployment :meth:`identity` wrote. Raises ``ValueError`` (or ``KeyError`` for a missing key) as the
        constructors do."""
        groups = tuple(RoleGroup(g["role"], int(g["count"]), ServerShape(int(g["tp"]), int(g["attn_dp"]), int(g["ep"])),
                                 tuple(sorted(dict(g.get("settings") or {}).items()))) for g in d["groups"])
        return cls(groups, router_policy=d.get("router_policy"))

    def label(self) -> str:
        """``1x TP8`` or ``2x TP4`` (aggregated), ``1P2D P:TP8 D:TP8 DP8 EP8`` (disaggregated): the xPyD ratio counts
        servers, not nodes or GPUs."""
        if not self.disaggregated:
            return " + ".join(f"{g.count}x {g.shape.label()}" for g in self.groups)
        shapes = " ".join(f"{g.role[0].upper()}:{g.shape.label()}" for g in self.groups)
        return f"{self.count('prefill')}P{self.count('decode')}D {shapes}"

    def failing_pairs(self, settings: Mapping[str, Any], version: str, model: Any) -> list[tuple[RoleGroup, RoleGroup,
                                                                                                  Any, str]]:
        """Each (prefill group, decode group, rule, SGLang's message) whose first KV transfer SGLang ``version``
        fails, the servers launched over ``settings`` (grid/releases/checks.py ``PAIR_RULES``); empty when every
        pair transfers (and for an aggregated deployment)."""
        from grid.releases.checks import pair_refusals

        out = []
        for p in (g for g in self.groups if g.role == "prefill"):
            for d in (g for g in self.groups if g.role == "decode"):
                out += [(p, d, rule, message) for rule, message in pair_refusals(
                    p.settings_over(settings, launch=True), d.settings_over(settings, launch=True), version, model)]
        return out

    def nodes(self, hardware: HardwareSpec) -> int:
        """How many nodes of ``hardware`` the deployment's servers run on (:meth:`place`)."""
        return len({n for p in self.place(hardware) for n in range(p.node, p.node + p.nodes)})

    def place(self, hardware: HardwareSpec) -> list[Placement]:
        """Every server's place on ``hardware``'s ``nodes`` x ``gpu_count`` GPUs, in the groups' order. Raises
        ``ValueError`` when the deployment needs more GPUs than there are, or a server cannot be placed whole. On a
        CPU host (``vendor: cpu``, SGLang's CPU engine) every server runs on the host's cores, no GPUs: all on node 0
        of one host, in turn over the hosts (server ``i`` on node ``i % nodes``) of several.
        """
        if hardware.is_cpu:
            servers = [(g.role, i) for g in self.groups for i in range(g.count)]
            return [Placement(role, i, k % hardware.nodes, 1, ()) for k, (role, i) in enumerate(servers)]
        per_node, nodes = hardware.gpu_count, hardware.nodes
        if self.gpus > per_node * nodes:
            raise ValueError(f"deployment {self.label()} needs {self.gpus} GPUs; hardware {hardware.name} has "
                             f"{per_node * nodes} ({nodes} node(s) x {per_node})")
        free = [per_node] * nodes
        out: list[Placement] = []
        for g in self.groups:
            for i in range(g.count):
                out.append(_place_one(g.role, i, g.shape.gpus, free, per_node, self.label(), hardware.name))
        return out


def _place_one(role: Role, index: int, gpus: int, free: list[int], per_node: int, label: str,
               hardware: str) -> Placement:
    if gpus <= per_node:
        for node, left in enumerate(free):
            if left >= gpus:
                first = per_node - left
                free[node] -= gpus
                return Placement(role, index, node, 1, tuple(range(first, first + gpus)))
    elif gpus % per_node == 0:
        span = gpus // per_node
        for node in range(len(free) - span + 1):
            if all(free[n] == per_node for n in range(node, node + span)):
                for n in range(node, node + span):
                    free[n] = 0
                return Placement(role, index, node, span, tuple(range(per_node)))
    raise ValueError(f"deployment {label}: {role} server {index} ({gpus} GPUs) fits on no node of {hardware} "
                     f"(free GPUs per node: {free}); a server spans whole nodes of {per_node} GPUs")


def kv_transfer_s(deployment: Deployment, model: ModelSpec, hardware: HardwareSpec, prompt_tokens: int,
                  concurrent: int = 1, kv_cache_dtype: str | None = None,
                  cost: TransferCost = DEFAULT_COST, prefill: int = 0, decode: int = 0) -> float:
    """Seconds to move one request's KV (``prompt_tokens`` uncached prompt tokens; SGLang's decode server keeps no
    radix cache unless ``--disaggregation-decode-enable-radix-cache``) from prefill server ``prefill`` to decode server
    ``decode`` (indexes among their role's servers, in placement order), ``concurrent`` transfers sharing the link
    (grid/topology/kv.py ``transfer_s``). The link is the node's own when both share a node, else the network.
    Raises ``ValueError`` for an aggregated deployment or an index beyond the role's servers."""
    if not deployment.disaggregated:
        raise ValueError(f"deployment {deployment.label()} is aggregated: no KV moves between its servers")
    places = deployment.place(hardware)
    shapes = [g.shape for g in deployment.groups for _ in range(g.count)]
    by_role = {role: [(p, s) for p, s in zip(places, shapes) if p.role == role] for role in ("prefill", "decode")}
    for role, i in (("prefill", prefill), ("decode", decode)):
        if not 0 <= i < len(by_role[role]):
            raise ValueError(f"deployment {deployment.label()} has {len(by_role[role])} {role} server(s); no index {i}")
    (p_place, p_shape), (d_place, d_shape) = by_role["prefill"][prefill], by_role["decode"][decode]
    link = kv_link(hardware, same_node=p_place.nodes == d_place.nodes == 1 and p_place.node == d_place.node)
    wire = prompt_tokens * wire_bytes_per_token(model, d_shape.attn_tp, kv_cache_dtype)
    return transfer_s(wire, link, lanes=min(p_shape.attn_tp, d_shape.attn_tp), concurrent=concurrent, cost=cost)
