"""Which node a trial ran on, and which hardware a node declares.

Every row grid stores names its node (``node_id``: the Ray node id; ``node_hostname``) and, on GPU nodes, the GPUs
its server had (``gpu_uuids``: NVML UUIDs, the ``GPU-...`` strings ``nvidia-smi -L`` prints). The twin and CPU-only
nodes have no NVML: ``gpu_uuids`` is null there.

A node declares the hardware it is (one ``conf/hardware`` entry) with the custom Ray resource
``grid_hw:<name>`` beside its ``grid_node`` slot, e.g.
``ray start --resources='{"grid_node": 1, "grid_hw:h200_x8": 1}'``. The ``<prefix>:<value>`` spelling follows Ray's
own ``accelerator_type:<type>`` resource (ray/_private/accelerators, Ray 2.60). A sweep's trials request the
resource of the sweep's ``hardware`` (unless ``ray.any_hardware=true``), so Ray places them only on matching nodes.
"""

from __future__ import annotations

import os
import socket
from typing import Any

HW_RESOURCE_PREFIX = "grid_hw:"


def hw_resource(hardware: str) -> str:
    """The Ray resource a node of ``hardware`` (a conf/hardware name) declares: ``grid_hw:<hardware>``."""
    return f"{HW_RESOURCE_PREFIX}{hardware}"


def node_hardware(resources: dict[str, float]) -> list[str]:
    """The hardware names a node declares (its ``grid_hw:*`` resources, sorted). Pure."""
    return sorted(k[len(HW_RESOURCE_PREFIX):] for k, v in resources.items() if k.startswith(HW_RESOURCE_PREFIX) and v)


def _visible(count: int) -> list[str | int]:
    """The NVML devices this process may use: ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs) when set, else all."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(count))
    out: list[str | int] = []
    for item in (x.strip() for x in env.split(",") if x.strip()):
        out.append(item if item.startswith(("GPU-", "MIG-")) else int(item))
    return out


def gpu_devices() -> list[dict[str, str]] | None:
    """``[{"uuid": ..., "name": ...}]`` of the GPUs this process may use, read from NVML; None where NVML is not
    available (the twin, CI, a CPU node); ``[]`` when NVML works but none is visible."""
    from grid.telemetry.nvml import NvmlUnavailable, _nvml

    try:
        nv = _nvml()
    except NvmlUnavailable:
        return None
    try:
        count = nv.nvmlDeviceGetCount()
        every = []
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid, name = nv.nvmlDeviceGetUUID(h), nv.nvmlDeviceGetName(h)
            every.append({"uuid": uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                          "name": name.decode() if isinstance(name, bytes) else str(name)})
    except Exception:  # pynvml.NVMLError: a broken driver is "no NVML", not a failed trial
        return None
    by_uuid = {d["uuid"]: d for d in every}
    return [by_uuid[v] if isinstance(v, str) else every[v] for v in _visible(count)
            if (v in by_uuid if isinstance(v, str) else 0 <= v < count)]


def local_node() -> dict[str, Any]:
    """This process's node: ``node_id`` (the Ray node id; None outside Ray), ``node_hostname``, ``node_ip`` (Ray's
    address of the node: where other nodes reach it; None outside Ray), ``gpu_uuids``
    (NVML UUIDs of the GPUs this process may use; None without NVML) and ``gpu_names``."""
    node_id = node_ip = None
    try:
        import ray

        if ray.is_initialized():
            node_id = ray.get_runtime_context().get_node_id()
            node_ip = ray.util.get_node_ip_address()
    except Exception:  # not inside Ray
        node_id = node_ip = None
    gpus = gpu_devices()
    return {"node_id": node_id, "node_hostname": socket.gethostname(), "node_ip": node_ip,
            "gpu_uuids": None if gpus is None else [g["uuid"] for g in gpus],
            "gpu_names": None if gpus is None else [g["name"] for g in gpus]}


def node_columns(node: dict[str, Any] | None) -> dict[str, Any]:
    """The node columns every stored row carries (grid.storage.schema.NODE_COLUMNS). Pure."""
    node = node or {}
    return {"node_id": node.get("node_id"), "node_hostname": node.get("node_hostname")}


def hardware_mismatch(hardware_gpu: str, gpu_names: list[str] | None) -> str | None:
    """Why a node that declares a conf/hardware entry whose ``gpu`` is ``hardware_gpu`` is not that hardware (its
    NVML GPU names differ), or None (they match, or there is no NVML to ask). Case-insensitive substring match:
    NVML names e.g. ``NVIDIA H200`` for the H200 SXM. Pure."""
    if not gpu_names:
        return None
    wrong = sorted({n for n in gpu_names if hardware_gpu.lower() not in n.lower() and n.lower() not in
                    hardware_gpu.lower()})
    if not wrong:
        return None
    return f"its GPUs are {', '.join(wrong)} (NVML), not {hardware_gpu}"


def pick_nodes(nodes: list[dict], hardware: str, any_hardware: bool) -> tuple[list[dict], str | None]:
    """The nodes (``ray.nodes()`` entries offering a ``grid_node`` slot) a sweep on ``hardware`` runs on, and why
    there are none (a message naming what the nodes declare and the settings to change), else None. Pure.

    Without ``any_hardware`` a node must declare ``grid_hw:<hardware>``. A cluster where no node declares any
    hardware at all (every node started with ``grid_node`` alone, as before hardware labels existed) is refused
    too: the message says how to label the nodes."""
    if any_hardware:
        return list(nodes), None if nodes else "no node offers a grid_node slot"
    chosen = [n for n in nodes if hardware in node_hardware(n.get("Resources", {}))]
    if chosen:
        return chosen, None
    declared: dict[str, int] = {}
    for n in nodes:
        for hw in node_hardware(n.get("Resources", {})) or ["(none)"]:
            declared[hw] = declared.get(hw, 0) + 1
    have = ", ".join(f"{k}: {v} node{'s' * (v != 1)}" for k, v in sorted(declared.items())) or "no grid_node node"
    return [], (f"no node of the Ray cluster declares hardware={hardware} (resource '{hw_resource(hardware)}'); "
                f"the grid_node nodes declare {have}. Start the nodes of that hardware with ray start "
                f"--resources='{{\"grid_node\": 1, \"{hw_resource(hardware)}\": 1}}', choose the hardware=... of "
                "the nodes you have, or set ray.any_hardware=true to run on every node")
