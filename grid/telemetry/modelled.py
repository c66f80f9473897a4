"""The twin's modelled GPU telemetry (engine=sim): read from its twin-only ``/grid/telemetry`` route, never NVML.

Each read returns the twin's cumulative busy time and the per-GPU telemetry PerfModel.decode_telemetry implies for
the batch running at that moment. Between two reads the fraction of modelled time the twin was busy scales the
instantaneous figures (an idle GPU shows 0% SM, 0% memory bandwidth, no link traffic and idle power), so:

    sm_util     = busy x decode.sm_busy        mem_bw_util = busy x decode.mem_bw
    link B/s    = busy x decode.link_bytes_per_s (PCIe or NVLink, HardwareSpec.interconnect)
    power_w     = tdp_w x modelled_power_fraction(sm_util, mem_bw_util, busy x decode.tensor)

Rows are labelled ``source = "modelled"``; every GPU of the twin's node gets the same values (TP ranks are
symmetric in the model). Link capacity: PCIe ``pcie_gbps`` per direction; NVLink the measured all-reduce bus
bandwidth ``allreduce_bus_gbps`` (conf/hardware; no per-link NVLink figure is modelled).
"""

from __future__ import annotations

import json
from typing import Any

from grid.twin.perf import modelled_power_fraction
from grid.server.net import get_json

TELEMETRY_PATH = "/grid/telemetry"  # grid.twin.server.TELEMETRY_PATH (not imported: it pulls in aiohttp)


class ModelledReader:
    """Polls one twin. ``read()`` raises ``OSError``/``ValueError`` when the twin does not answer."""

    source = "modelled"

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 2.0) -> None:
        self.url = base_url.rstrip("/") + TELEMETRY_PATH
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.prev: dict[str, Any] | None = None
        self.last_decode: dict[str, Any] | None = None  # the latest batch seen in this load point

    def reset(self) -> None:
        """Start a new load point: the next read is its baseline."""
        self.prev, self.last_decode = None, None

    def fetch(self) -> dict[str, Any]:
        return dict(get_json(self.url, self.api_key, self.timeout_s))

    def read(self) -> list[dict[str, Any]]:
        """Rows for the interval since the previous read (none on the first read, which only sets the baseline)."""
        snap = self.fetch()
        prev, self.prev = self.prev, snap
        if snap.get("decode"):
            self.last_decode = snap["decode"]
        if prev is None:
            return []
        return rows_from_snapshots(prev, snap, self.last_decode)


def rows_from_snapshots(prev: dict[str, Any], snap: dict[str, Any], decode: dict[str, Any] | None = None
                        ) -> list[dict[str, Any]]:
    """Per-GPU rows for the interval between two ``/grid/telemetry`` answers (pure; see the module docstring).

    The batch telemetry is the later answer's, else the earlier one's, else ``decode`` (the latest batch seen in the
    load point). Without any, only the busy fraction is known: ``sm_util`` is it and the rest is null."""
    dt = float(snap["mnow_s"]) - float(prev["mnow_s"])
    if dt <= 0:
        return []
    busy = max(0.0, min(1.0, (float(snap["busy_s"]) - float(prev["busy_s"])) / dt))
    dec = snap.get("decode") or prev.get("decode") or decode
    if dec is None and busy > 0:
        return [{**_base(snap, dt, busy), "gpu_index": i, "sm_util": busy}
                for i in range(int(snap.get("gpu_count") or 1))]
    dec = dec or {}
    sm = busy * float(dec.get("sm_busy", 0.0))
    mem = busy * float(dec.get("mem_bw", 0.0))
    tensor = busy * float(dec.get("tensor", 0.0))
    link = busy * float(dec.get("link_bytes_per_s", 0.0))
    nvlink = snap.get("interconnect") == "nvlink"
    tdp = float(snap["tdp_w"])
    row = {
        "source": "modelled", "sm_util": sm, "mem_bw_util": mem,
        "memory_used_gb": float(snap.get("memory_used_gb") or 0.0), "memory_total_gb": float(snap["memory_total_gb"]),
        "power_w": tdp * modelled_power_fraction(sm, mem, tensor), "power_limit_w": tdp,
        "sm_clock_mhz": None, "mem_clock_mhz": None,
        "pcie_tx_bytes_per_s": 0.0 if nvlink else link, "pcie_rx_bytes_per_s": 0.0 if nvlink else link,
        "pcie_capacity_bytes_per_s": float(snap["pcie_gbps"]) * 1e9,
        "nvlink_bytes_per_s": link if nvlink else None,
        "nvlink_capacity_bytes_per_s": float(snap["allreduce_bus_gbps"]) * 1e9 if nvlink else None,
        "interval_s": dt, "busy_frac": busy, "running_reqs": snap.get("running"),
    }
    return [{**row, "gpu_index": i} for i in range(int(snap.get("gpu_count") or 1))]


def _base(snap: dict[str, Any], dt: float, busy: float) -> dict[str, Any]:
    return {"source": "modelled", "memory_used_gb": float(snap.get("memory_used_gb") or 0.0),
            "memory_total_gb": float(snap["memory_total_gb"]), "power_limit_w": float(snap["tdp_w"]),
            "pcie_capacity_bytes_per_s": float(snap["pcie_gbps"]) * 1e9, "interval_s": dt, "busy_frac": busy,
            "running_reqs": snap.get("running")}


def modelled_topology(snap: dict[str, Any]) -> str:
    """The topology record for a twin node, from its ``/grid/telemetry`` answer (JSON, labelled modelled)."""
    n = int(snap.get("gpu_count") or 1)
    return json.dumps({"modelled": True, "gpu_count": n, "gpus": [snap.get("gpu")] * n,
                       "interconnect": snap.get("interconnect"), "p2p_all": snap.get("p2p")}, sort_keys=True)
