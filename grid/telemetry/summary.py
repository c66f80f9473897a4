"""Per-load-point summary of ``gpu_telemetry`` rows (pure). Keys are load-point columns (``gpu_*``)."""

from __future__ import annotations

from typing import Any


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize_gpu_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over samples and GPUs (SM and memory-bandwidth utilisation, power), the largest memory in use, and the
    busiest GPU's mean PCIe traffic (the larger of TX and RX, bytes/s). Null where no sample carried the value."""
    def col(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    power = [r["power_w"] / r["power_limit_w"] for r in rows
             if r.get("power_w") is not None and r.get("power_limit_w")]
    per_gpu: dict[int, list[float]] = {}
    for r in rows:
        tx, rx = r.get("pcie_tx_bytes_per_s"), r.get("pcie_rx_bytes_per_s")
        if tx is not None or rx is not None:
            per_gpu.setdefault(r.get("gpu_index", 0), []).append(max(tx or 0.0, rx or 0.0))
    pcie = max((sum(v) / len(v) for v in per_gpu.values()), default=None)
    caps = col("pcie_capacity_bytes_per_s")
    mem = col("memory_used_gb")
    nvl = col("nvlink_bytes_per_s")
    sources = sorted({r["source"] for r in rows if r.get("source")})
    return {
        "gpu_telemetry_source": ",".join(sources) or None,
        "gpu_samples": len({r.get("sample_index") for r in rows}) if rows else 0,
        "gpu_count_sampled": len({r.get("gpu_index") for r in rows}) if rows else None,
        "gpu_sm_util_mean": _mean(col("sm_util")),
        "gpu_mem_bw_util_mean": _mean(col("mem_bw_util")),
        "gpu_power_w_mean": _mean(col("power_w")),
        "gpu_power_limit_w": max(col("power_limit_w"), default=None),
        "gpu_power_frac_mean": _mean(power),
        "gpu_memory_used_gb_max": max(mem) if mem else None,
        "gpu_sm_clock_mhz_mean": _mean(col("sm_clock_mhz")),
        "gpu_pcie_bytes_per_s": pcie,
        "gpu_pcie_capacity_bytes_per_s": min(caps) if caps else None,
        "gpu_nvlink_bytes_per_s": _mean(nvl),
        "gpu_nvlink_capacity_bytes_per_s": max(col("nvlink_capacity_bytes_per_s"), default=None),
    }
