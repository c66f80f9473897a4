"""GPU telemetry: NVML readings through a fake pynvml, the no-NVML path, and the twin's modelled telemetry."""

import sys
import types
from pathlib import Path

import pytest
import yaml

from grid.config.specs import HardwareSpec, ModelSpec
from grid.sweep import samplers
from grid.telemetry.modelled import rows_from_snapshots
from grid.telemetry.nvml import NvmlReader, pcie_capacity_bytes_per_s
from grid.telemetry.summary import summarize_gpu_rows
from grid.twin.perf import PerfModel, ServingConfig, modelled_power_fraction

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_pcie_capacity_per_generation():
    assert pcie_capacity_bytes_per_s(5, 16) == pytest.approx(63.0e9, rel=0.01)  # calibration §1b: ~63 GB/s
    assert pcie_capacity_bytes_per_s(4, 16) == pytest.approx(31.5e9, rel=0.01)
    assert pcie_capacity_bytes_per_s(2, 16) == pytest.approx(8.0e9)
    assert pcie_capacity_bytes_per_s(9, 16) is None


def fake_pynvml(n=2):
    nv = types.SimpleNamespace(
        NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1,
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: n, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: f"GPU-0000000{h}-aaaa", nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=100, memory=52),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=90e9, total=96e9),
        nvmlDeviceGetPowerUsage=lambda h: 328_000, nvmlDeviceGetEnforcedPowerLimit=lambda h: 600_000,
        nvmlDeviceGetClockInfo=lambda h, c: 2400 if c == 1 else 14000,
        nvmlDeviceGetPcieThroughput=lambda h, c: 650 if c == 0 else 700,  # KB/s
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5, nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
    )
    return nv


def test_nvml_reader_with_a_fake_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    rows = NvmlReader().read()
    assert [r["gpu_index"] for r in rows] == [0, 1]
    assert [r["gpu_uuid"] for r in rows] == ["GPU-00000000-aaaa", "GPU-00000001-aaaa"]
    r = rows[0]
    assert r["sm_util"] == 1.0 and r["mem_bw_util"] == 0.52 and r["power_w"] == 328.0 and r["power_limit_w"] == 600.0
    assert r["pcie_tx_bytes_per_s"] == 650 * 1024 and r["pcie_rx_bytes_per_s"] == 700 * 1024
    assert r["memory_used_gb"] == 90.0 and r["sm_clock_mhz"] == 2400
    s = summarize_gpu_rows([{**x, "sample_index": 0} for x in rows])
    assert s["gpu_power_frac_mean"] == pytest.approx(328 / 600) and s["gpu_pcie_bytes_per_s"] == 700 * 1024
    assert s["gpu_count_sampled"] == 2 and s["gpu_telemetry_source"] == "nvml"


def test_without_nvml_the_sampler_says_so_once_and_records_nothing(monkeypatch, caplog):
    broken = types.SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(RuntimeError("NVML Shared Library Not Found")))
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    monkeypatch.setattr(samplers, "_said", set())
    ctx = samplers.SamplerContext(None, "http://127.0.0.1:1", None, "sglang", 1.0, "h", "t", None)
    with caplog.at_level("WARNING", logger="grid.samplers"):
        assert samplers.SAMPLERS["gpu_telemetry"](ctx) is None
        assert samplers.SAMPLERS["gpu_telemetry"](ctx) is None
    said = [r.message for r in caplog.records if "GPU telemetry not recorded" in r.message]
    assert len(said) == 1 and "NVML Shared Library Not Found" in said[0]


def seed_perf():
    hw = HardwareSpec(**yaml.safe_load((CONF / "hardware" / "rtx_pro_6000_x8_vm.yaml").read_text()))
    m = ModelSpec(**yaml.safe_load((CONF / "model" / "glm5_nvfp4.yaml").read_text()))
    return PerfModel(m, hw, ServingConfig(tp_size=8, mem_fraction_static=0.85, cuda_graph=False,
                                          kv_cache_dtype="bfloat16"))


def test_modelled_telemetry_of_the_seed_node():
    p = seed_perf()
    t = p.decode_telemetry(1, 512)
    # 157 all-reduces of 6144 x 2 B, 2*7/8 of it per GPU each way, per 89.9 ms step
    assert t["link"] == "pcie"
    assert t["link_bytes_per_s"] == pytest.approx(157 * 1.75 * 6144 * 2 / t["step_s"], rel=1e-6)
    assert t["step_s"] == pytest.approx(p.decode_step_s(1, 512))
    assert t["sm_busy"] > 0.99 and t["mem_bw"] < 0.1 and t["power_frac"] < 0.4
    assert p.decode_telemetry(64, 64 * 512)["mem_bw"] > t["mem_bw"]  # expert coverage grows with the batch


def test_power_rule_anchor():
    assert modelled_power_fraction(1.0, 0.52, 0.0) == pytest.approx(0.534)  # seed §0: 328/600 = 0.55
    assert modelled_power_fraction(0.0, 0.0, 0.0) == 0.10
    assert modelled_power_fraction(1.0, 1.0, 1.0) == 1.0


def test_modelled_rows_scale_by_the_busy_fraction():
    snap0 = {"mnow_s": 10.0, "busy_s": 2.0}
    snap1 = {"mnow_s": 20.0, "busy_s": 7.0, "gpu_count": 8, "tdp_w": 600.0, "memory_total_gb": 96.0,
             "memory_used_gb": 83.7, "interconnect": "pcie", "pcie_gbps": 63.0, "allreduce_bus_gbps": 40.0,
             "running": 4, "decode": {"sm_busy": 1.0, "mem_bw": 0.2, "tensor": 0.0, "link_bytes_per_s": 1e8}}
    rows = rows_from_snapshots(snap0, snap1)
    assert len(rows) == 8 and {r["source"] for r in rows} == {"modelled"}
    r = rows[0]
    assert r["busy_frac"] == 0.5 and r["sm_util"] == 0.5 and r["mem_bw_util"] == 0.1
    assert r["pcie_tx_bytes_per_s"] == 5e7 and r["pcie_capacity_bytes_per_s"] == 63e9
    assert r["power_w"] == pytest.approx(600 * modelled_power_fraction(0.5, 0.1, 0.0))


def test_modelled_rows_without_a_batch_reading_keep_only_the_busy_fraction():
    snap0 = {"mnow_s": 0.0, "busy_s": 0.0}
    snap1 = {"mnow_s": 4.0, "busy_s": 3.0, "gpu_count": 2, "tdp_w": 600.0, "memory_total_gb": 96.0,
             "interconnect": "pcie", "pcie_gbps": 63.0, "allreduce_bus_gbps": 40.0, "decode": None}
    rows = rows_from_snapshots(snap0, snap1)
    assert [r["sm_util"] for r in rows] == [0.75, 0.75] and "mem_bw_util" not in rows[0]
    dec = {"sm_busy": 1.0, "mem_bw": 0.4, "tensor": 0.0, "link_bytes_per_s": 0.0}
    assert rows_from_snapshots(snap0, snap1, dec)[0]["mem_bw_util"] == pytest.approx(0.3)


def test_node_gpus_follow_cuda_visible_devices(monkeypatch):
    from grid.cluster.node import gpu_devices, local_node

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(4))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g["uuid"] for g in gpu_devices()] == [f"GPU-0000000{i}-aaaa" for i in range(4)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # what Ray gives an actor with num_gpus=2
    assert local_node()["gpu_uuids"] == ["GPU-00000002-aaaa", "GPU-00000003-aaaa"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-00000001-aaaa")
    assert local_node()["gpu_names"] == ["NVIDIA H200"]
