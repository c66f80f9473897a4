"""KV cache bytes per token, bytes on the wire per disaggregated request, and the transfer's time (pure).

Sizes follow SGLang's own pool sizing (``python/sglang/srt/model_executor/pool_configurator.py::_compute_cell_size``
and ``mem_cache/kv_cache_configurator.py::calculate_mla_kv_cache_dim``, 0.5.23):

* MHA/GQA: ``kv_heads(attn_tp) x (head_dim + v_head_dim) x layers x dtype_bytes`` per attention-TP rank, with
  ``kv_heads(attn_tp) = max(1, num_kv_heads // attn_tp)``: the heads are replicated once ``attn_tp`` exceeds them.
* MLA: ``(kv_lora_rank + qk_rope_head_dim) x layers x dtype_bytes``, the whole latent on every attention-TP rank.
* DSA (GLM-5, DeepSeek-V3.2) adds its indexer's keys, ``index_head_dim`` FP8 bytes plus one FP32 scale per 128,
  per layer.

The transfer time is ``fixed_s + wire_bytes / (efficiency x lane_gbps x lanes / concurrent)``: a per-request fixed
cost (bootstrap, allocation, queueing: SGLang exports them as ``sglang:kv_transfer_bootstrap_ms`` and
``sglang:kv_transfer_alloc_ms``; 10-50 ms per request in NVIDIA/TensorRT-LLM PR #12273) and the bytes over the
link, shared evenly among the transfers in flight (inference-sim/inference-sim PR #831's fair share). Derivations
and the figures the tests check: docs/topology.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from grid.config.specs import HardwareSpec, ModelSpec

#: Bytes per KV element by SGLang ``--kv-cache-dtype`` ("auto": the model's BF16; SGLang
#: ``server_args.py`` choices). An unknown name counts as 2 bytes.
KV_DTYPE_BYTES: dict[str, float] = {
    "auto": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1.0,
    "fp4_e2m1": 0.5,
    "nvfp4": 0.5,
    "fp4_mx_block16": 0.5,
}


def dtype_bytes(kv_cache_dtype: str | None) -> float:
    """Bytes per KV element for SGLang's ``--kv-cache-dtype`` value (:data:`KV_DTYPE_BYTES`; None or unknown: 2)."""
    return KV_DTYPE_BYTES.get(kv_cache_dtype or "auto", 2.0)


def kv_heads_per_rank(model: ModelSpec, attn_tp: int) -> int:
    """KV heads one attention-TP rank holds (MHA/GQA): ``max(1, num_kv_heads // attn_tp)``."""
    return max(1, model.num_kv_heads // attn_tp)


def kv_bytes_per_token(model: ModelSpec, attn_tp: int = 1, kv_cache_dtype: str | None = None, *,
                       indexer: bool = True) -> int:
    """Bytes of KV cache one token takes on one attention-TP rank, all layers (int, bytes).

    ``attn_tp``: the attention tensor-parallel size (``--tp-size`` divided by the attention-DP size). ``indexer``:
    count a DSA model's indexer keys (stored and transferred; a decode step's attention does not read them all).
    Raises ``ValueError`` for ``attn_tp`` < 1."""
    if attn_tp < 1:
        raise ValueError(f"attn_tp must be >= 1, got {attn_tp}")
    b = dtype_bytes(kv_cache_dtype)
    if model.attention == "mla":
        cell = (model.kv_lora_rank + model.qk_rope_head_dim) * model.num_layers * b
    else:
        v_head_dim = model.v_head_dim or model.head_dim
        cell = kv_heads_per_rank(model, attn_tp) * (model.head_dim + v_head_dim) * model.num_layers * b
    if indexer and model.dsa is not None:
        cell += (model.dsa.index_head_dim + model.dsa.index_head_dim // 128 * 4) * model.num_layers
    return int(cell)


def wire_bytes_per_token(model: ModelSpec, decode_attn_tp: int, kv_cache_dtype: str | None = None) -> int:
    """Bytes moved from the prefill server to the decode server per prompt token (int, bytes): every decode
    attention-TP rank pulls the KV it holds, so ``kv_bytes_per_token(model, decode_attn_tp) x decode_attn_tp``.

    That is one full copy for GQA while ``decode_attn_tp <= num_kv_heads``, ``decode_attn_tp / num_kv_heads`` copies
    beyond, and ``decode_attn_tp`` copies of an MLA latent (each rank holds all of it; SGLang's
    ``disaggregation/common/conn.py::_resolve_rank_mapping``); with DP attention ``decode_attn_tp`` is 1."""
    return kv_bytes_per_token(model, decode_attn_tp, kv_cache_dtype) * decode_attn_tp


@dataclass(frozen=True)
class KvLink:
    """The path KV takes from a prefill rank to a decode rank: ``gbps`` per rank pair and direction (GB/s, 1e9 B),
    ``kind`` and where the figure comes from."""

    kind: Literal["nvlink", "pcie", "network"]
    gbps: float
    source: str


def kv_link(hardware: HardwareSpec, same_node: bool) -> KvLink:
    """The link a transfer between two servers on ``hardware`` takes: within a node NVLink (its all-reduce bus
    bandwidth, ``allreduce_bus_gbps``) or the host's PCIe (``pcie_gbps``); between nodes the NIC per GPU
    (``internode_gbps_per_gpu``). Raises ``ValueError`` when the servers are on different nodes and the hardware
    describes no network (conf/hardware/h100_x16_ib.yaml shows one)."""
    if same_node:
        if hardware.interconnect == "nvlink":
            return KvLink("nvlink", hardware.allreduce_bus_gbps, f"hardware {hardware.name}: allreduce_bus_gbps")
        return KvLink("pcie", hardware.pcie_gbps, f"hardware {hardware.name}: pcie_gbps")
    if hardware.internode_gbps_per_gpu is None:
        raise ValueError(f"hardware {hardware.name!r} describes no network between nodes (internode_gbps_per_gpu): "
                         "prefill and decode servers on different nodes need it")
    return KvLink("network", hardware.internode_gbps_per_gpu, f"hardware {hardware.name}: internode_gbps_per_gpu")


@dataclass(frozen=True)
class TransferCost:
    """What one request's KV transfer costs: ``fixed_s`` per request (s) and ``efficiency`` of the link's rate
    (0-1, above 1 only where a calibration finds the link faster than its file says) achieved by the transfer engine.
    Defaults: 20 ms, inside the 10-50 ms per KV task measured in NVIDIA/TensorRT-LLM PR #12273; efficiency 0.8, the
    share of PCIe's rate pinned copies reach (inference-sim/inference-sim#806). Calibration replaces both
    (:meth:`calibrated`) with what it fits to a deployment's own ``sglang:kv_transfer_latency_ms``."""

    fixed_s: float = 0.020
    efficiency: float = 0.8

    def calibrated(self, kv_fixed: float, kv_link: float) -> TransferCost:
        """This cost with the fixed cost multiplied by ``kv_fixed`` and the bytes' time by ``kv_link`` (the
        coefficients of grid/twin/coefficients.py)."""
        return TransferCost(self.fixed_s * kv_fixed, self.efficiency / kv_link)


#: The default cost until calibration fits one (:class:`TransferCost`'s defaults).
DEFAULT_COST = TransferCost()


def transfer_s(wire_bytes: float, link: KvLink, lanes: int, concurrent: int = 1,
               cost: TransferCost = DEFAULT_COST) -> float:
    """Seconds to move ``wire_bytes`` (bytes) over ``lanes`` rank pairs of ``link`` while ``concurrent`` transfers
    (this one included) share them evenly: ``fixed_s + wire_bytes / (efficiency x gbps x 1e9 x lanes /
    concurrent)``. ``lanes`` is ``min(prefill attention-TP, decode attention-TP)``: each pair moves over its own
    GPU's link. Raises ``ValueError`` for ``lanes`` or ``concurrent`` < 1 or a negative size."""
    if lanes < 1 or concurrent < 1:
        raise ValueError(f"lanes and concurrent must be >= 1, got {lanes} and {concurrent}")
    if wire_bytes < 0:
        raise ValueError(f"wire_bytes must be >= 0, got {wire_bytes}")
    rate = cost.efficiency * link.gbps * 1e9 * lanes / concurrent
    return cost.fixed_s + wire_bytes / rate
