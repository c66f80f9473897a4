"""The node's GPU topology, recorded once per node: GPU count and names, P2P capability between every pair, NVLink or
PCIe, and the raw ``nvidia-smi topo -m`` matrix when nvidia-smi is there.

NVML calls (nvidia-ml-py): ``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_READ)``,
``nvmlDeviceGetTopologyCommonAncestor`` (the levels ``nvidia-smi topo -m`` prints: NV# for NVLink, PIX/PXB one or more
PCIe switches, PHB host bridge, NODE same NUMA node, SYS across sockets), ``nvmlDeviceGetNvLinkState`` per link.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from functools import lru_cache
from typing import Any

from grid.telemetry.nvml import NvmlUnavailable, _nvml

#: NVML topology level -> the abbreviation ``nvidia-smi topo -m`` uses.
LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _smi_topo() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def read_topology() -> dict[str, Any]:
    """The topology as a dict (``gpu_count``, ``gpus``, ``p2p`` matrix of bools, ``path`` matrix of level names,
    ``nvlink_links`` active links per GPU, ``interconnect`` nvlink|pcie, ``p2p_all``, ``nvidia_smi_topo``).

    Raises ``NvmlUnavailable`` when NVML cannot be used.
    """
    nv = _nvml()
    n = nv.nvmlDeviceGetCount()
    hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    idx = nv.NVML_P2P_CAPS_INDEX_READ
    idx = idx[0] if isinstance(idx, tuple) else idx  # nvidia-ml-py defines it with a stray trailing comma

    def p2p(a, b) -> bool | None:
        try:
            return nv.nvmlDeviceGetP2PStatus(a, b, idx) == nv.NVML_P2P_STATUS_OK
        except Exception:
            return None

    def level(a, b) -> str | None:
        try:
            return LEVELS.get(int(nv.nvmlDeviceGetTopologyCommonAncestor(a, b)))
        except Exception:
            return None

    def links(h) -> int:
        up = 0
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                up += nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED
            except Exception:
                break
        return up

    names = []
    for h in hs:
        name = nv.nvmlDeviceGetName(h)
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    p2p_m = [[None if i == j else p2p(hs[i], hs[j]) for j in range(n)] for i in range(n)]
    path = [["X" if i == j else level(hs[i], hs[j]) for j in range(n)] for i in range(n)]
    nvl = [links(h) for h in hs]
    return {
        "gpu_count": n, "gpus": names, "p2p": p2p_m, "path": path, "nvlink_links": nvl,
        "interconnect": "nvlink" if any(nvl) else "pcie",
        "p2p_all": all(v for row in p2p_m for v in row if v is not None) if n > 1 else None,
        "nvidia_smi_topo": _smi_topo(),
    }


@lru_cache(maxsize=1)
def node_topology_json() -> str | None:
    """``read_topology()`` as JSON, read once per process (one server actor per node); None without NVML."""
    try:
        return json.dumps(read_topology(), sort_keys=True)
    except NvmlUnavailable:
        return None
