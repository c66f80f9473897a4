"""Bottleneck rules (grid/diagnosis/rules.py) on hand-built evidence, the seed session's case first."""

from grid.diagnosis.rules import classify, diagnose

GB = 1e9

# hardware_models_calibration.md §0: all 8 GPUs 100% busy, 52-53% memory bandwidth, ~328 of 600 W,
# PCIe Tx/Rx ~0.6-0.7 MB/s on PCIe Gen5 x16 (63 GB/s per direction, §1b).
SEED = {"status": "ok", "completed": 64, "point_kind": "concurrency", "point_value": 64.0,
        "gpu_telemetry_source": "nvml", "gpu_sm_util_mean": 1.0, "gpu_mem_bw_util_mean": 0.52,
        "gpu_power_w_mean": 328.0, "gpu_power_limit_w": 600.0, "gpu_power_frac_mean": 328 / 600,
        "gpu_pcie_bytes_per_s": 0.7e6, "gpu_pcie_capacity_bytes_per_s": 63 * GB,
        "srv_running_mean": 60.0, "srv_queue_mean": 0.0, "srv_token_usage_max": 0.08, "client_lag_pct": 0.1}


def test_seed_session_telemetry_is_not_interconnect_bound():
    out = diagnose(SEED)
    assert out["bottleneck"] == "latency-bound"
    ev = out["bottleneck_evidence"]
    assert ev.startswith("PCIe 700 KB/s of 63 GB/s, SM 100%, memory bandwidth 52%, power 55% of 600 W")
    assert "not interconnect-bound" in ev and "small all-reduces over PCIe" in ev
    assert "CUDA graphs do not remove" in ev


def test_each_verdict():
    assert classify({**SEED, "gpu_pcie_bytes_per_s": 40 * GB})[0] == "interconnect-bound"
    assert classify({**SEED, "gpu_mem_bw_util_mean": 0.85})[0] == "memory-bandwidth-bound"
    assert classify({**SEED, "gpu_power_frac_mean": 0.95})[0] == "compute-bound"
    assert classify({**SEED, "gpu_sm_util_mean": 0.4})[0] == "launch/CPU-overhead-bound"
    assert "idle 60%" in classify({**SEED, "gpu_sm_util_mean": 0.4})[1]
    kv = classify({**SEED, "srv_queue_mean": 20.0, "srv_running_mean": 40.0, "srv_token_usage_max": 0.97})
    assert kv == ("kv-capacity/queue-bound", "the KV pool is 97% full and 20.0 requests wait")
    assert classify({**SEED, "srv_queue_mean": 20.0, "srv_running_mean": 40.0})[0] == "kv-capacity/queue-bound"
    assert classify({**SEED, "point_kind": "rate", "client_queue_mean_ms": 400.0})[0] == "client-bound"
    assert classify({**SEED, "srv_running_mean": 10.0, "gpu_sm_util_mean": 0.2})[0] == "client-bound"
    nv = {**SEED, "gpu_nvlink_bytes_per_s": 300 * GB, "gpu_nvlink_capacity_bytes_per_s": 370 * GB}
    assert classify(nv) == ("interconnect-bound", "NVLink carries 81% of its capacity")


def test_latency_bound_names_collectives_only_when_the_link_carries_traffic():
    one_gpu = {**SEED, "gpu_pcie_bytes_per_s": 0.0}
    verdict, reason = classify(one_gpu)
    assert verdict == "latency-bound" and "fixed latency of many small kernels, which" in reason
    assert "all-reduce" not in reason
    no_link = {k: v for k, v in SEED.items() if not k.startswith("gpu_pcie")}
    assert "any per-layer collectives" in classify(no_link)[1]


def test_a_small_queue_against_a_large_batch_is_not_queue_bound():
    assert classify({**SEED, "srv_queue_mean": 2.0, "srv_running_mean": 60.0})[0] == "latency-bound"


def test_no_evidence_and_nothing_measured():
    bare = {"status": "ok", "completed": 8, "point_kind": "concurrency", "point_value": 8.0}
    assert diagnose(bare) == {"bottleneck": "unknown", "bottleneck_evidence": "no GPU telemetry recorded"}
    assert diagnose({**SEED, "status": "not_run"}) == {"bottleneck": None, "bottleneck_evidence": None}
    assert diagnose({**SEED, "completed": 0})["bottleneck"] is None


def test_busy_fraction_alone_is_not_enough():
    row = {"status": "ok", "completed": 4, "point_kind": "concurrency", "point_value": 4.0, "gpu_sm_util_mean": 0.9}
    assert classify(row)[0] == "unknown"
