"""Bottleneck diagnosis of one load point (pure): a verdict and the evidence it rests on.

Inputs are load-point columns: GPU telemetry (``gpu_*``, NVML or the twin's model, grid/telemetry), server metrics
(``srv_*``, scraped /metrics, grid/server/metrics_scrape.py) and the client's own measurements (grid/metrics).
Rules, first match wins (thresholds are grid's, chosen from the sources noted; a GPU figure that was not recorded
never matches):

1. ``client-bound``: the client, not the server, sets the pace. Open loop: requests leave on average
   ``CLIENT_LATE_MS`` or more after their scheduled time. Closed loop: the server runs fewer than half the requests
   the point asks for, nothing queues, and the GPUs are busy less than half the time; never on the twin's virtual
   clock (a point without ``client_lag_pct``), whose client cannot be late: the twin waits for it, and the server
   figures sampled in real time there say how fast the host simulated, not what the server did.
2. ``kv-capacity/queue-bound``: requests wait in the server's queue (mean >= 1 and >= a quarter of the running
   count) - because the KV pool is full (token usage >= ``KV_FULL``) or the running-request cap holds them back.
3. ``interconnect-bound``: the busiest GPU's PCIe (or NVLink) traffic is >= ``LINK_BOUND`` of the link's capacity.
   Collectives that move little data but are paid every layer show as busy GPUs with an idle link: rule 6.
4. ``memory-bandwidth-bound``: memory-bandwidth utilisation >= ``MEM_BOUND``. Decode kernels reach about 0.6-0.9 of
   the spec-sheet bandwidth (ETA_KV 0.60 .. ETA_BW_DENSE 0.90, hardware_models_calibration.md fits in
   grid/twin/perf.py), so a GPU at or above 0.6 is spending its time streaming memory.
5. ``compute-bound``: SM busy >= ``SM_BUSY`` and board power >= ``POWER_BOUND`` of its limit (tensor cores at full
   rate draw the board to its cap; NVIDIA reports no tensor-core utilisation through NVML).
6. ``launch/CPU-overhead-bound``: the GPUs idle more than ``1 - SM_IDLE_BELOW`` of the time: the CPU (scheduling,
   Python, kernel launches) sets the pace. CUDA graphs and the overlap scheduler attack exactly this.
7. ``latency-bound``: the GPUs are busy, yet neither memory bandwidth, power nor the link is near its limit: each
   step is the fixed latency of many small kernels and of the per-layer collectives (small all-reduces whose cost is
   the link's latency, not its bandwidth). CUDA graphs do not remove it (the kernels already run back to back);
   more requests per step amortise it, fewer collectives per step shorten it. This is the seed session's case
   (hardware_models_calibration.md §0: SM 100%, memory 52-53%, 328 of 600 W, PCIe 0.6-0.7 MB/s; CUDA graphs
   changed decode throughput little, §0 rows with and without graphs), which was misread there as a PCIe bottleneck.
8. ``unknown``: no GPU telemetry to judge from (or only a busy fraction, without memory or power readings).
"""

from __future__ import annotations

import json
from typing import Any

CLIENT_LATE_MS = 50.0
KV_FULL = 0.90
LINK_BOUND = 0.50
MEM_BOUND = 0.60
SM_BUSY = 0.90
POWER_BOUND = 0.85
SM_IDLE_BELOW = 0.70

VERDICTS = ("client-bound", "kv-capacity/queue-bound", "interconnect-bound", "memory-bandwidth-bound",
            "compute-bound", "launch/CPU-overhead-bound", "latency-bound", "unknown")


def _bytes(x: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B/s"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _link(row: dict[str, Any]) -> tuple[str, float | None, float | None]:
    """(name, bytes/s, capacity bytes/s) of the link that carries the GPUs' traffic."""
    nvl, cap = row.get("gpu_nvlink_bytes_per_s"), row.get("gpu_nvlink_capacity_bytes_per_s")
    if nvl is not None and cap:
        return "NVLink", nvl, cap
    return "PCIe", row.get("gpu_pcie_bytes_per_s"), row.get("gpu_pcie_capacity_bytes_per_s")


def evidence(row: dict[str, Any]) -> list[str]:
    """The evidence items that were recorded, formatted (units in each item)."""
    items = []
    name, used, cap = _link(row)
    if used is not None:
        items.append(f"{name} {_bytes(used)}" + (f" of {_bytes(cap)}" if cap else ""))
    if row.get("gpu_sm_util_mean") is not None:
        items.append(f"SM {_pct(row['gpu_sm_util_mean'])}")
    if row.get("gpu_mem_bw_util_mean") is not None:
        items.append(f"memory bandwidth {_pct(row['gpu_mem_bw_util_mean'])}")
    if row.get("gpu_power_frac_mean") is not None:
        lim = row.get("gpu_power_limit_w")
        items.append(f"power {_pct(row['gpu_power_frac_mean'])}" + (f" of {lim:.0f} W" if lim else ""))
    if row.get("srv_running_mean") is not None:
        items.append(f"running {row['srv_running_mean']:.1f}")
    if row.get("srv_queue_mean") is not None:
        items.append(f"queued {row['srv_queue_mean']:.1f}")
    if row.get("srv_token_usage_max") is not None:
        items.append(f"KV usage {_pct(row['srv_token_usage_max'])}")
    if row.get("point_kind") == "rate" and row.get("client_queue_mean_ms") is not None:
        items.append(f"client send delay {row['client_queue_mean_ms']:.0f} ms")
    if row.get("gpu_telemetry_source") == "modelled":
        items.append("GPU figures modelled by the twin")
    return items


def classify(row: dict[str, Any]) -> tuple[str, str]:
    """(verdict, reason) for one load-point row; the verdict is one of :data:`VERDICTS`."""
    sm, mem = row.get("gpu_sm_util_mean"), row.get("gpu_mem_bw_util_mean")
    power = row.get("gpu_power_frac_mean")
    running, queue, usage = row.get("srv_running_mean"), row.get("srv_queue_mean"), row.get("srv_token_usage_max")
    name, used, cap = _link(row)
    link = used / cap if used is not None and cap else None
    value = row.get("point_value")
    # 1. client
    late = row.get("client_queue_mean_ms")
    if row.get("point_kind") == "rate" and late is not None and late >= CLIENT_LATE_MS:
        return "client-bound", f"requests left {late:.0f} ms after their scheduled time on average"
    if (row.get("point_kind") == "concurrency" and value and running is not None and running < 0.5 * value
            and row.get("client_lag_pct") is not None
            and (queue or 0) < 0.5 and sm is not None and sm < 0.5):
        return "client-bound", f"the server ran {running:.1f} of the {value:.0f} requests asked for with an empty queue"
    # 2. KV capacity / queue
    if queue is not None and queue >= 1 and queue >= 0.25 * (running or 0):
        if usage is not None and usage >= KV_FULL:
            return "kv-capacity/queue-bound", f"the KV pool is {_pct(usage)} full and {queue:.1f} requests wait"
        return "kv-capacity/queue-bound", (f"{queue:.1f} requests wait while {running or 0:.1f} run: the running-"
                                          "request cap or admission holds them back")
    if sm is None and mem is None and link is None:
        return ("unknown", "no GPU telemetry recorded") if running is None else (
            "unknown", "no GPU telemetry recorded; the server queue is empty")
    # 3. interconnect
    if link is not None and link >= LINK_BOUND:
        return "interconnect-bound", f"{name} carries {_pct(link)} of its capacity"
    not_link = f"not interconnect-bound ({name} at {link:.2%} of capacity)" if link is not None else ""
    # 4. memory bandwidth
    if mem is not None and mem >= MEM_BOUND:
        return "memory-bandwidth-bound", "; ".join(x for x in (not_link, f"memory bandwidth at {_pct(mem)}") if x)
    # 5. compute
    if sm is not None and sm >= SM_BUSY and power is not None and power >= POWER_BOUND:
        return "compute-bound", "; ".join(x for x in (not_link, f"SMs busy and power at {_pct(power)} of the limit")
                                          if x)
    # 6. launch / CPU overhead
    if sm is not None and sm < SM_IDLE_BELOW:
        return "launch/CPU-overhead-bound", "; ".join(
            x for x in (not_link, f"GPUs idle {_pct(1 - sm)} of the time: scheduling and kernel launches on the CPU "
                                  "set the pace") if x)
    if mem is None and power is None:
        return "unknown", f"GPUs busy {_pct(sm)} of the time; no memory-bandwidth or power reading to say why"
    if used:  # traffic on the link: GPUs exchange activations every layer
        latency = f"many small kernels and of the per-layer small all-reduces over {name}"
    elif used is None:
        latency = "many small kernels (and of any per-layer collectives)"
    else:  # an idle link, e.g. one GPU: no collectives to blame
        latency = "many small kernels"
    graphs = ("which CUDA graphs do not remove" if _cuda_graph(row) is not False else
              "run without CUDA graphs here (cuda_graph=false), so kernel launches add to it")
    return "latency-bound", "; ".join(
        x for x in (not_link, "GPUs busy but neither memory bandwidth nor power near their limits: each step is the "
                              f"fixed latency of {latency}, {graphs}; more requests per step "
                              "amortise it") if x)


def _cuda_graph(row: dict[str, Any]) -> bool | None:
    """The configuration's ``cuda_graph`` setting from the row's ``config_json`` (None: not set or not recorded)."""
    try:
        return json.loads(row.get("config_json") or "{}").get("cuda_graph")
    except ValueError:
        return None


def diagnose(row: dict[str, Any]) -> dict[str, Any]:
    """Load-point columns ``bottleneck`` and ``bottleneck_evidence`` (evidence, then ": " and the reason).

    Load points that measured nothing (``not_run``, or no completed request) get nulls.
    """
    if row.get("status") not in (None, "ok", "partial") or not row.get("completed"):
        return {"bottleneck": None, "bottleneck_evidence": None}
    verdict, reason = classify(row)
    ev = ", ".join(evidence(row))
    return {"bottleneck": verdict, "bottleneck_evidence": f"{ev}: {reason}" if ev else reason}
