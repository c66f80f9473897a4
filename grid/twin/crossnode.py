"""Tensor parallelism across nodes (``--nnodes`` > 1) in the twin's performance model (pure: no clocks, no I/O).

One SGLang server spans ``N`` nodes of ``M`` GPUs (``--tp-size N*M --nnodes N``): every weight matrix and the KV
heads are split over all ``N x M`` GPUs exactly as within one node (``PerfModel`` already divides by ``tp``), so the
only new cost is the all-reduce of a TP group whose ranks sit on different nodes. SGLang's custom all-reduce only
runs inside one node ("Custom allreduce is disabled because this process group spans across nodes",
``python/sglang/srt/distributed/device_communicators/custom_all_reduce.py``), so every all-reduce is NCCL's, which
for a group spanning nodes works hierarchically:

* **Bandwidth** (:func:`hierarchical_allreduce_s`): a reduce-scatter inside each node over NVLink (or PCIe), an
  all-reduce of each GPU's ``1/M`` shard with its peers on the other nodes over that GPU's NIC (a ring over ``N``
  nodes), then an all-gather inside each node::

      t_bw = 2 (M-1)/M x S / B_node  +  2 (N-1)/N x (S/M) / B_nic

  ``S`` is the message (tokens x hidden x 2 bytes of bf16 activations), ``B_node`` the node's NCCL bus bandwidth
  (``allreduce_bus_gbps``), ``B_nic`` the network bandwidth per GPU (``internode_gbps_per_gpu``: 46-48 GB/s per
  NDR 400 Gb/s NIC, NVIDIA/nccl-tests#290).
* **Latency** (:func:`nccl_tree_latency_us`): NCCL's own tuning model of a small all-reduce across nodes
  (``src/graph/tuning.cc``): NCCL runs small messages as a tree with the LL protocol, whose latency is
  ``baseLat + 2 x ((M-1) x intraHop x 1.8 + log2(N) x netHop)``: ``NCCL_BASE_LAT_US`` 4.4 µs, an NVLink hop
  ``NCCL_NVLINK_HOP_US`` 0.52 µs (PCIe ``NCCL_PCI_HOP_US`` 1.0 µs), multiplied by ``NCCL_MULTINODE_LL_FACTOR`` 1.8
  when the group spans nodes, and the network hop ``internode_hop_latency_us`` of the hardware file (5.0 µs, the
  same table's NET/Tree/LL entry). For 2 nodes of 8 NVLink GPUs: 4.4 + 2 x (7 x 0.936 + 5.0) = 27.5 µs, against
  NCCL's printed estimate of 25.2 µs for a 64-byte all-reduce on an H100 cluster (NVIDIA/nccl#1453, "Algo 0 proto
  0", i.e. Tree/LL) and 7 µs for SGLang's custom all-reduce inside one H100 node.

Nothing here is fitted: the constants are NCCL's tuning table and the NIC figure above. The weight load of startup
runs on every node at once (each node reads its own ranks' shards), so its time is the per-node share.

What is refused instead (grid/releases/checks.py rule ``twin_cross_node_tp``, ``cross_node_refusal``): a hardware
file without several nodes, ``--nnodes`` other than its ``nodes``, ``--tp-size`` other than ``nodes x gpu_count``,
pipeline or data parallelism or an expert-parallel all-to-all across nodes, and any network but InfiniBand (no
public calibration row).
Calibration rows (held out): tt356-h100x16-dsr1-* (tenstorrent/tt-inference-server#356, DeepSeek-R1-0528 on 2 x 8
H100 over InfiniBand); docs/twin.md#tensor-parallelism-across-nodes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the mixin goes before a PerfModel class (grid.twin.perf_class.perf_class); at run time: object
    from grid.twin.perf import PerfModel as _PerfBase
else:
    _PerfBase = object

#: NCCL tuning model (NVIDIA/nccl ``src/graph/tuning.cc``): ``baseLat[Tree][LL]`` (µs).
NCCL_BASE_LAT_US = 4.4
#: ``hwLat[NVLINK][Tree][LL]`` and ``hwLat[PCI][Tree][LL]`` (µs per intra-node hop).
NCCL_NVLINK_HOP_US = 0.52
NCCL_PCI_HOP_US = 1.0
#: ``if (comm->nNodes > 1 && p == NCCL_PROTO_LL) intraLat *= 1.8`` in the same function.
NCCL_MULTINODE_LL_FACTOR = 1.8


def nccl_tree_latency_us(nodes: int, gpus_per_node: int, net_hop_us: float, nvlink: bool = True) -> float:
    """NCCL's modelled latency (µs) of a small all-reduce over ``nodes`` x ``gpus_per_node`` ranks, tree / LL
    protocol (module docstring). Raises ``ValueError`` for fewer than one node or GPU."""
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"nodes and gpus_per_node must be >= 1, not {nodes} and {gpus_per_node}")
    intra = (NCCL_NVLINK_HOP_US if nvlink else NCCL_PCI_HOP_US) * (NCCL_MULTINODE_LL_FACTOR if nodes > 1 else 1.0)
    return NCCL_BASE_LAT_US + 2 * ((gpus_per_node - 1) * intra + math.ceil(math.log2(nodes)) * net_hop_us)


def hierarchical_allreduce_s(size_bytes: float, nodes: int, gpus_per_node: int, node_bus_gbps: float,
                             nic_gbps: float, latency_us: float) -> float:
    """Seconds of one all-reduce of ``size_bytes`` over ``nodes`` x ``gpus_per_node`` ranks: ``latency_us`` plus an
    intra-node reduce-scatter + all-gather at ``node_bus_gbps`` and an inter-node ring over each GPU's NIC at
    ``nic_gbps`` on a ``1/gpus_per_node`` shard (module docstring; bandwidths in GB/s)."""
    m, n = gpus_per_node, nodes
    intra = 2 * (m - 1) / m * size_bytes / (node_bus_gbps * 1e9)
    inter = 2 * (n - 1) / n * (size_bytes / m) / (nic_gbps * 1e9)
    return latency_us * 1e-6 + intra + inter


def spans_nodes(cfg: Any) -> bool:
    """True when the server config (``ServingConfig``) runs over more than one node."""
    return int(getattr(cfg, "nnodes", 1) or 1) > 1


class CrossNodeMixin(_PerfBase):
    """``PerfModel`` mixin for a TP group over ``hardware.nodes`` nodes: every all-reduce is the hierarchical NCCL
    one (:func:`hierarchical_allreduce_s`), the weight load runs on all nodes at once. Chosen by
    grid/twin/perf_class.py when ``cfg.nnodes`` > 1."""

    def _allreduce_s(self, tokens: int) -> float:
        """One all-reduce of ``tokens`` x hidden bf16 values over the TP group spanning the nodes (s)."""
        if self.tp <= 1:
            return 0.0
        hw = self.hardware
        nodes = max(1, int(self.cfg.nnodes))
        per_node = max(1, self.tp // nodes)
        hop_us, nic_gbps = hw.internode_hop_latency_us, hw.internode_gbps_per_gpu
        if hop_us is None or nic_gbps is None:  # HardwareSpec requires both when nodes > 1
            raise ValueError(f"hardware {hw.name!r} does not describe its network (internode_*)")
        lat = nccl_tree_latency_us(nodes, per_node, hop_us, hw.interconnect == "nvlink")
        size = tokens * self.model.hidden_size * 2
        return hierarchical_allreduce_s(size, nodes, per_node, hw.allreduce_bus_gbps, nic_gbps, lat)

    def startup_phases_s(self) -> dict[str, float]:
        """The single-node phases, with the weight load shared by the nodes (each reads its own ranks' shards)."""
        phases = super().startup_phases_s()
        phases["load_weights"] /= max(1, int(self.cfg.nnodes))
        return phases
