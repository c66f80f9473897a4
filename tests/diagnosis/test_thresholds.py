"""Each threshold of the bottleneck rules, just below its value and at it (``>=`` vs ``>`` included).

The values are written out here, not read from grid.diagnosis.rules: a threshold that drifts (0.60 -> 0.80) or a
boundary that flips (``>=`` -> ``>``) must fail these tests. Sources of the values: the module's docstring.
"""

from __future__ import annotations

import pytest

from grid.diagnosis import rules
from grid.diagnosis.rules import classify

GB = 1e9
# The seed session's load point (tests/diagnosis/test_rules.py): latency-bound, every figure far from a threshold.
BASE = {"status": "ok", "completed": 64, "point_kind": "concurrency", "point_value": 64.0,
        "gpu_telemetry_source": "nvml", "gpu_sm_util_mean": 1.0, "gpu_mem_bw_util_mean": 0.52,
        "gpu_power_w_mean": 328.0, "gpu_power_limit_w": 600.0, "gpu_power_frac_mean": 328 / 600,
        "gpu_pcie_bytes_per_s": 0.7e6, "gpu_pcie_capacity_bytes_per_s": 63 * GB,
        "srv_running_mean": 60.0, "srv_queue_mean": 0.0, "srv_token_usage_max": 0.08}


def verdict(**changes) -> str:
    return classify({**BASE, **changes})[0]


def test_documented_values():
    assert (rules.CLIENT_LATE_MS, rules.KV_FULL, rules.LINK_BOUND, rules.MEM_BOUND, rules.SM_BUSY,
            rules.POWER_BOUND, rules.SM_IDLE_BELOW) == (50.0, 0.90, 0.50, 0.60, 0.90, 0.85, 0.70)


def test_base_is_latency_bound():
    assert verdict() == "latency-bound"


def test_open_loop_client_late_at_50_ms():
    rate = {"point_kind": "rate", "point_value": 4.0}
    assert verdict(**rate, client_queue_mean_ms=49.99) == "latency-bound"
    assert verdict(**rate, client_queue_mean_ms=50.0) == "client-bound"
    assert classify({**BASE, **rate, "client_queue_mean_ms": 50.0})[1] == \
        "requests left 50 ms after their scheduled time on average"
    # a late client in a closed loop is not the open-loop rule
    assert verdict(client_queue_mean_ms=500.0) == "latency-bound"


CLOSED = {"srv_running_mean": 31.0, "srv_queue_mean": 0.0, "gpu_sm_util_mean": 0.4,  # of 64 asked
          "client_lag_pct": 0.0}  # a point on a real clock (the twin's virtual clock records none)


def test_closed_loop_client_bound_running_below_half_of_the_level():
    assert verdict(**CLOSED) == "client-bound"
    assert verdict(**{**CLOSED, "client_lag_pct": None}) != "client-bound"  # the virtual clock's client is never late
    assert classify({**BASE, **CLOSED})[1] == "the server ran 31.0 of the 64 requests asked for with an empty queue"
    assert verdict(**{**CLOSED, "srv_running_mean": 31.99}) == "client-bound"
    assert verdict(**{**CLOSED, "srv_running_mean": 32.0}) == "launch/CPU-overhead-bound"


def test_closed_loop_client_bound_needs_an_empty_queue():
    assert verdict(**{**CLOSED, "srv_queue_mean": 0.49}) == "client-bound"
    assert verdict(**{**CLOSED, "srv_queue_mean": 0.5}) == "launch/CPU-overhead-bound"
    assert verdict(**{**CLOSED, "srv_queue_mean": None}) == "client-bound"  # no queue reading: not queued


def test_closed_loop_client_bound_needs_idle_gpus():
    assert verdict(**{**CLOSED, "gpu_sm_util_mean": 0.49}) == "client-bound"
    assert verdict(**{**CLOSED, "gpu_sm_util_mean": 0.5}) == "launch/CPU-overhead-bound"
    assert verdict(**{**CLOSED, "gpu_sm_util_mean": None, "gpu_mem_bw_util_mean": 0.52}) == "latency-bound"


def test_closed_loop_client_rule_needs_its_readings():
    assert verdict(**{**CLOSED, "point_kind": "rate"}) == "launch/CPU-overhead-bound"
    assert verdict(**{**CLOSED, "point_value": None}) == "launch/CPU-overhead-bound"
    assert verdict(**{**CLOSED, "srv_running_mean": None}) == "launch/CPU-overhead-bound"


def test_queue_bound_from_one_waiting_request():
    assert verdict(srv_queue_mean=0.99, srv_running_mean=2.0) == "latency-bound"
    assert verdict(srv_queue_mean=1.0, srv_running_mean=2.0) == "kv-capacity/queue-bound"


def test_queue_bound_needs_a_quarter_of_the_running_count():
    assert verdict(srv_queue_mean=9.99, srv_running_mean=40.0) == "latency-bound"
    assert verdict(srv_queue_mean=10.0, srv_running_mean=40.0) == "kv-capacity/queue-bound"
    assert verdict(srv_queue_mean=1.0, srv_running_mean=None) == "kv-capacity/queue-bound"


def test_kv_full_at_90_percent():
    q = {"srv_queue_mean": 20.0, "srv_running_mean": 40.0}
    below = classify({**BASE, **q, "srv_token_usage_max": 0.8999})[1]
    at = classify({**BASE, **q, "srv_token_usage_max": 0.90})[1]
    assert below == "20.0 requests wait while 40.0 run: the running-request cap or admission holds them back"
    assert at == "the KV pool is 90% full and 20.0 requests wait"


def test_link_bound_at_half_the_capacity():
    assert verdict(gpu_pcie_bytes_per_s=31.49 * GB) == "latency-bound"
    assert verdict(gpu_pcie_bytes_per_s=31.5 * GB) == "interconnect-bound"
    nv = {"gpu_nvlink_capacity_bytes_per_s": 400 * GB}
    assert verdict(**nv, gpu_nvlink_bytes_per_s=199.9 * GB) == "latency-bound"
    assert verdict(**nv, gpu_nvlink_bytes_per_s=200 * GB) == "interconnect-bound"


def test_nvlink_needs_its_capacity_to_be_judged():
    # an NVLink reading without a capacity falls back to PCIe (idle here): not interconnect-bound
    assert verdict(gpu_nvlink_bytes_per_s=300 * GB, gpu_nvlink_capacity_bytes_per_s=None) == "latency-bound"
    assert verdict(gpu_nvlink_bytes_per_s=300 * GB, gpu_nvlink_capacity_bytes_per_s=0.0) == "latency-bound"
    assert verdict(gpu_pcie_bytes_per_s=40 * GB, gpu_pcie_capacity_bytes_per_s=None) == "latency-bound"


def test_memory_bandwidth_bound_at_60_percent():
    assert verdict(gpu_mem_bw_util_mean=0.5999) == "latency-bound"
    assert verdict(gpu_mem_bw_util_mean=0.60) == "memory-bandwidth-bound"
    assert classify({**BASE, "gpu_mem_bw_util_mean": 0.60})[1] == \
        "not interconnect-bound (PCIe at 0.00% of capacity); memory bandwidth at 60%"


def test_compute_bound_needs_busy_sms_and_power():
    hot = {"gpu_power_frac_mean": 0.85, "gpu_sm_util_mean": 0.90}
    assert verdict(**hot) == "compute-bound"
    assert verdict(**{**hot, "gpu_sm_util_mean": 0.8999}) == "latency-bound"
    assert verdict(**{**hot, "gpu_power_frac_mean": 0.8499}) == "latency-bound"
    assert verdict(**{**hot, "gpu_power_frac_mean": None}) == "latency-bound"
    assert classify({**BASE, **hot})[1] == \
        "not interconnect-bound (PCIe at 0.00% of capacity); SMs busy and power at 85% of the limit"


def test_launch_bound_below_70_percent_busy():
    assert verdict(gpu_sm_util_mean=0.6999) == "launch/CPU-overhead-bound"
    assert verdict(gpu_sm_util_mean=0.70) == "latency-bound"


def test_rule_order_first_match_wins():
    # link over memory, memory over compute, compute over launch
    assert verdict(gpu_pcie_bytes_per_s=40 * GB, gpu_mem_bw_util_mean=0.9) == "interconnect-bound"
    assert verdict(gpu_mem_bw_util_mean=0.9, gpu_power_frac_mean=0.95) == "memory-bandwidth-bound"
    assert verdict(srv_queue_mean=30.0, gpu_pcie_bytes_per_s=40 * GB) == "kv-capacity/queue-bound"


@pytest.mark.parametrize("missing,expected", [
    ({"gpu_sm_util_mean": None, "gpu_mem_bw_util_mean": None, "gpu_pcie_bytes_per_s": None},
     ("unknown", "no GPU telemetry recorded; the server queue is empty")),
    ({"gpu_sm_util_mean": None, "gpu_mem_bw_util_mean": None, "gpu_pcie_bytes_per_s": None,
      "srv_running_mean": None}, ("unknown", "no GPU telemetry recorded")),
    ({"gpu_mem_bw_util_mean": None, "gpu_power_frac_mean": None},
     ("unknown", "GPUs busy 100% of the time; no memory-bandwidth or power reading to say why")),
])
def test_unknown_without_readings(missing, expected):
    assert classify({**BASE, **missing}) == expected


def test_memory_reading_alone_judges():
    only_mem = {"gpu_sm_util_mean": None, "gpu_pcie_bytes_per_s": None, "gpu_mem_bw_util_mean": 0.7}
    assert classify({**BASE, **only_mem}) == ("memory-bandwidth-bound", "memory bandwidth at 70%")
