"""NVML readings of every GPU of this node, through nvidia-ml-py (``pynvml``, imported lazily: CI has no GPU).

What each field is (NVML API reference, ``nvmlDevice*`` calls):

* ``sm_util``: ``nvmlDeviceGetUtilizationRates().gpu`` / 100: fraction of the last sample period (1/6 s to 1 s) in
  which at least one kernel ran. A kernel that spins waiting on a collective counts as busy.
* ``mem_bw_util``: ``...().memory`` / 100: fraction of that period in which device memory was read or written (what
  nvidia-smi shows as memory utilisation; the seed session's "52-53% memory-bandwidth utilisation").
* ``memory_used_gb``/``memory_total_gb``: ``nvmlDeviceGetMemoryInfo`` bytes / 1e9.
* ``power_w``/``power_limit_w``: ``nvmlDeviceGetPowerUsage`` / ``nvmlDeviceGetEnforcedPowerLimit`` (mW) / 1000.
* ``sm_clock_mhz``/``mem_clock_mhz``: ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM / NVML_CLOCK_MEM)``.
* ``pcie_tx_bytes_per_s``/``pcie_rx_bytes_per_s``: ``nvmlDeviceGetPcieThroughput`` (KB/s over a 20 ms window) x 1024.
* ``pcie_capacity_bytes_per_s``: the current link, per direction: generation rate (2.5/5/8/16/32/64 GT/s for gen
  1-6) x width x encoding (8b/10b to gen 2, 128b/130b from gen 3) / 8 (PCI-SIG base specifications; gen 5 x16 =
  63 GB/s, hardware_models_calibration.md §1b).
"""

from __future__ import annotations

from typing import Any

#: PCIe generation -> GT/s per lane, and the line encoding efficiency (PCI-SIG base specifications 1.0-6.0).
PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def pcie_capacity_bytes_per_s(generation: int, width: int) -> float | None:
    """Per-direction PCIe payload capacity in bytes/s (None for an unknown generation)."""
    rate = PCIE_GT_S.get(int(generation))
    if rate is None or width <= 0:
        return None
    enc = 8 / 10 if generation <= 2 else 128 / 130
    return rate * 1e9 * width * enc / 8


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: nvidia-ml-py not installed, or no driver / no GPU (the message says which)."""


def _nvml():
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install -e '.[sglang]')") from None
    try:
        pynvml.nvmlInit()
    except Exception as err:  # pynvml.NVMLError subclasses: library not found, driver not loaded, ...
        raise NvmlUnavailable(f"NVML did not initialise: {err}") from None
    return pynvml


class NvmlReader:
    """Reads every GPU NVML lists. Raises ``NvmlUnavailable`` from the constructor when NVML cannot be used."""

    source = "nvml"

    def __init__(self) -> None:
        self.nv = _nvml()
        self.handles = [self.nv.nvmlDeviceGetHandleByIndex(i) for i in range(self.nv.nvmlDeviceGetCount())]
        if not self.handles:
            raise NvmlUnavailable("NVML lists no GPU")
        self._caps = [self._capacity(h) for h in self.handles]

    def _capacity(self, h: Any) -> float | None:
        try:
            return pcie_capacity_bytes_per_s(self.nv.nvmlDeviceGetCurrPcieLinkGeneration(h),
                                             self.nv.nvmlDeviceGetCurrPcieLinkWidth(h))
        except Exception:
            return None

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # a field the GPU/driver does not support is recorded as null
            return None

    def _uuid(self, h: Any) -> str | None:
        uuid = self._try(lambda: self.nv.nvmlDeviceGetUUID(h))
        return uuid.decode() if isinstance(uuid, bytes) else uuid

    def read(self) -> list[dict[str, Any]]:
        """One row per GPU (``gpu_index`` and the fields in the module docstring; null where NVML has no value)."""
        nv, out = self.nv, []
        for i, h in enumerate(self.handles):
            util = self._try(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._try(nv.nvmlDeviceGetMemoryInfo, h)
            power = self._try(nv.nvmlDeviceGetPowerUsage, h)
            limit = self._try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            tx = self._try(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            rx = self._try(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
            out.append({
                "gpu_index": i, "source": self.source, "gpu_uuid": self._uuid(h),
                "sm_util": None if util is None else util.gpu / 100.0,
                "mem_bw_util": None if util is None else util.memory / 100.0,
                "memory_used_gb": None if mem is None else mem.used / 1e9,
                "memory_total_gb": None if mem is None else mem.total / 1e9,
                "power_w": None if power is None else power / 1000.0,
                "power_limit_w": None if limit is None else limit / 1000.0,
                "sm_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                "mem_clock_mhz": self._try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                "pcie_tx_bytes_per_s": None if tx is None else tx * 1024.0,
                "pcie_rx_bytes_per_s": None if rx is None else rx * 1024.0,
                "pcie_capacity_bytes_per_s": self._caps[i],
            })
        return out
