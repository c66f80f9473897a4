"""The evidence text of a diagnosis: every recorded figure, with its unit, and nothing that was not recorded."""

from __future__ import annotations

import pytest

from grid.diagnosis.rules import classify, diagnose, evidence

GB = 1e9
FULL = {"status": "ok", "completed": 10, "point_kind": "rate", "point_value": 4.0, "gpu_telemetry_source": "modelled",
        "gpu_nvlink_bytes_per_s": 2.5e6, "gpu_nvlink_capacity_bytes_per_s": 400 * GB,
        "gpu_pcie_bytes_per_s": 1e3, "gpu_pcie_capacity_bytes_per_s": 63 * GB,
        "gpu_sm_util_mean": 0.95, "gpu_mem_bw_util_mean": 0.304, "gpu_power_frac_mean": 0.5,
        "gpu_power_limit_w": 600.0, "srv_running_mean": 12.25, "srv_queue_mean": 0.5, "srv_token_usage_max": 0.426,
        "client_queue_mean_ms": 12.4}


def test_every_item_in_order():
    assert evidence(FULL) == ["NVLink 2.5 MB/s of 400 GB/s", "SM 95%", "memory bandwidth 30%", "power 50% of 600 W",
                              "running 12.2", "queued 0.5", "KV usage 43%", "client send delay 12 ms",
                              "GPU figures modelled by the twin"]


def test_nothing_recorded_nothing_said():
    assert evidence({}) == []
    assert evidence({"point_kind": "rate"}) == []
    assert evidence({"gpu_telemetry_source": "nvml"}) == []


def test_items_without_their_limits():
    row = {"gpu_pcie_bytes_per_s": 7e5, "gpu_power_frac_mean": 0.5}
    assert evidence(row) == ["PCIe 700 KB/s", "power 50%"]
    assert evidence({**row, "gpu_pcie_capacity_bytes_per_s": 0.0, "gpu_power_limit_w": 0.0}) == \
        ["PCIe 700 KB/s", "power 50%"]


def test_client_send_delay_only_for_open_loop():
    assert "client send delay 12 ms" not in evidence({**FULL, "point_kind": "concurrency"})


@pytest.mark.parametrize("x,text", [(1e9, "1 GB/s"), (999_999_999.0, "1e+03 MB/s"), (1e6, "1 MB/s"),
                                    (999_999.0, "1e+03 KB/s"), (1e3, "1 KB/s"), (999.0, "999 B/s"),
                                    (0.0, "0 B/s"), (63e9, "63 GB/s"), (2.5e6, "2.5 MB/s")])
def test_byte_rates(x, text):
    assert evidence({"gpu_pcie_bytes_per_s": x}) == [f"PCIe {text}"]


def test_link_choice():
    # NVLink when it has both a reading and a capacity; PCIe otherwise
    only_cap = {"gpu_nvlink_capacity_bytes_per_s": 400 * GB, "gpu_pcie_bytes_per_s": 1e6,
                "gpu_pcie_capacity_bytes_per_s": 63 * GB}
    assert evidence(only_cap) == ["PCIe 1 MB/s of 63 GB/s"]
    assert evidence({**only_cap, "gpu_nvlink_bytes_per_s": 0.0}) == ["NVLink 0 B/s of 400 GB/s"]
    assert evidence({**only_cap, "gpu_nvlink_bytes_per_s": 5e9, "gpu_nvlink_capacity_bytes_per_s": 0.0}) == \
        ["PCIe 1 MB/s of 63 GB/s"]


def test_reasons_in_full():
    seed = {"point_kind": "concurrency", "point_value": 64.0, "gpu_sm_util_mean": 0.4, "gpu_mem_bw_util_mean": 0.3,
            "gpu_power_frac_mean": 0.5, "gpu_pcie_bytes_per_s": 6.3e6, "gpu_pcie_capacity_bytes_per_s": 63 * GB,
            "srv_running_mean": 60.0, "srv_queue_mean": 0.0}
    assert classify(seed) == ("launch/CPU-overhead-bound", "not interconnect-bound (PCIe at 0.01% of capacity); "
                              "GPUs idle 60% of the time: scheduling and kernel launches on the CPU set the pace")
    no_link = {k: v for k, v in seed.items() if not k.startswith("gpu_pcie")}
    assert classify(no_link)[1] == "GPUs idle 60% of the time: scheduling and kernel launches on the CPU set the pace"
    assert classify({"srv_queue_mean": 1.0}) == (
        "kv-capacity/queue-bound",
        "1.0 requests wait while 0.0 run: the running-request cap or admission holds them back")
    # a link reading without SM, memory or power: nothing to judge the GPUs by
    link_only = {"gpu_pcie_bytes_per_s": 1e6, "gpu_pcie_capacity_bytes_per_s": 63 * GB}
    assert classify(link_only) == ("unknown", "GPUs busy n/a of the time; no memory-bandwidth or power reading to "
                                              "say why")


def test_diagnose_joins_evidence_and_reason():
    out = diagnose({**FULL, "point_kind": "concurrency", "point_value": 16.0})
    assert out["bottleneck"] == "latency-bound"
    assert out["bottleneck_evidence"].startswith("NVLink 2.5 MB/s of 400 GB/s, SM 95%, memory bandwidth 30%, ")
    assert out["bottleneck_evidence"].endswith(", GPU figures modelled by the twin: not interconnect-bound (NVLink "
                                               "at 0.00% of capacity); GPUs busy but neither memory bandwidth nor "
                                               "power near their limits: each step is the fixed latency of many "
                                               "small kernels and of the per-layer small all-reduces over NVLink, "
                                               "which CUDA graphs do not remove; more requests per step amortise it")
    assert diagnose({"status": "ok", "completed": 1}) == {"bottleneck": "unknown",
                                                          "bottleneck_evidence": "no GPU telemetry recorded"}
    assert diagnose({**FULL, "status": "partial"})["bottleneck"] is not None
    assert diagnose({**FULL, "status": None})["bottleneck"] is not None
    assert diagnose({**FULL, "status": "failed"}) == {"bottleneck": None, "bottleneck_evidence": None}


def test_latency_reason_without_a_link_reading():
    row = {"point_kind": "concurrency", "point_value": 64.0, "gpu_sm_util_mean": 1.0, "gpu_mem_bw_util_mean": 0.5,
           "gpu_power_frac_mean": 0.5}
    assert classify(row) == ("latency-bound", "GPUs busy but neither memory bandwidth nor power near their limits: "
                                              "each step is the fixed latency of many small kernels (and of any "
                                              "per-layer collectives), which CUDA graphs do not remove; more "
                                              "requests per step amortise it")
