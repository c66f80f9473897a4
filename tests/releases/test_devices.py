"""The host CPU as SGLang's device: the hardware kind, the launch rules read off the released server on a CPU, the
flags and environment a launch gets, and what the sweep's planning makes of them (all pure, no server)."""

from __future__ import annotations

import pytest

from grid.config.specs import HardwareSpec
from grid.releases.checks import RULES, check_config, refuse, start_failures
from grid.releases.devices import exit_meaning, launch_args, launch_env

CPU_HOST = dict(name="cpu_host", vendor="cpu", gpu="AMD EPYC 9004 (Zen 4), 2 vCPUs", gpu_count=1, sm_version=0,
                cpu_cores=2, memory_gb=24, memory_bandwidth_gbps=460.8, tflops={"bf16": 0.47}, tdp_w=7.5,
                allreduce_latency_us=1, allreduce_bus_gbps=1)
H100 = dict(name="h100_x1", gpu="NVIDIA H100 80GB HBM3", gpu_count=1, sm_version=90, memory_gb=80,
            memory_bandwidth_gbps=3350, tflops={"bf16": 989}, tdp_w=700, allreduce_latency_us=7,
            allreduce_bus_gbps=370)


def cpu() -> HardwareSpec:
    return HardwareSpec(**CPU_HOST)


def test_a_cpu_host_is_one_device_without_a_compute_capability():
    assert cpu().is_cpu and not HardwareSpec(**H100).is_cpu
    for bad in ({"sm_version": 90}, {"gpu_count": 2}, {"cpu_cores": None}):
        with pytest.raises(ValueError, match="vendor cpu needs sm_version 0, gpu_count 1 and cpu_cores"):
            HardwareSpec(**{**CPU_HOST, **bad})
    # several CPU hosts on a network: a deployment's servers go to each in turn (grid/topology/deployment.py)
    hosts = HardwareSpec(**{**CPU_HOST, "nodes": 2, "internode_link": "ethernet", "internode_gbps_per_gpu": 1.25,
                            "internode_hop_latency_us": 50})
    from grid.topology.deployment import Deployment, RoleGroup, ServerShape

    three = Deployment((RoleGroup("aggregated", 3, ServerShape()),), router_policy="round_robin")
    assert [p.node for p in three.place(hosts)] == [0, 1, 0] and three.nodes(hosts) == 2
    assert [p.node for p in three.place(cpu())] == [0, 0, 0] and three.nodes(cpu()) == 1
    with pytest.raises(ValueError, match="sm_version must be > 0 for vendor nvidia"):
        HardwareSpec(**{**H100, "sm_version": 0})


def test_the_cpu_device_adds_its_flag_and_switch():
    assert launch_args("cpu") == ["--device", "cpu"]
    assert launch_env("cpu") == {"SGLANG_USE_CPU_ENGINE": "1"}
    assert launch_args("nvidia") == [] and launch_env("nvidia") == {}
    with pytest.raises(KeyError, match="hardware.vendor='tpu'; allowed: nvidia, amd, cpu"):
        launch_args("tpu")


def test_a_sigkill_is_read_with_the_log():
    """SGLang's launcher SIGKILLs its own tree after a child fails, saying so first (lines 63-64 of a real 0.5.23
    log: 'Received sigquit from a child process. ...', 'kill_process_tree called: ... include_parent=True'); a SIGKILL
    without that line came from outside (the OOM killer), and is not called SGLang's own."""
    tail = ("AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90.\n"
            "[2026-12-02 09:06:26] Received sigquit from a child process. It usually means the child failed.\n"
            "[2026-12-02 09:06:26] kill_process_tree called: parent_pid=2543, include_parent=True, pid=2543\n")
    assert exit_meaning(-9, tail) == exit_meaning(137, tail) == (
        "the launcher killed itself after a child process failed (SIGKILL of its own process tree)")
    assert exit_meaning(-9, "Loading safetensors checkpoint shards: 50%") == (
        "killed by SIGKILL from outside the server (the kernel's out-of-memory killer, an operator, a supervisor)")
    assert exit_meaning(1, tail) is None and exit_meaning(None, tail) is None


def test_a_kv_pool_sized_from_host_memory_is_refused_before_launch():
    base = {"mem_fraction_static": 0.85, "enable_metrics": True}
    reasons = check_config(base, "0.5.23", None, cpu())
    assert reasons == ["on a CPU host SGLang sizes the KV pool as --mem-fraction-static x host memory (0.85 x 24 GB), "
                       "which leaves the host too little: set server.max_total_tokens (e.g. 65536) to size the pool "
                       "in tokens"]
    assert check_config({**base, "max_total_tokens": 65536}, "0.5.23", None, cpu()) == []
    assert check_config(base, "0.5.23", None, HardwareSpec(**H100)) == []   # a GPU's fraction is of GPU memory


def test_what_dies_at_start_on_a_cpu_is_known_not_refused():
    fa3 = {"attention_backend": "fa3", "max_total_tokens": 65536}
    compiled = {"torch_compile": True, "max_total_tokens": 65536}
    for version in ("0.5.9", "0.5.23"):
        assert check_config(fa3, version, None, cpu()) == []
        assert [r.name for r in start_failures(fa3, version, None, cpu())] == ["cpu_fa3"]
        assert [r.name for r in start_failures(compiled, version, None, cpu())] == ["cpu_torch_compile"]
        assert start_failures({"max_total_tokens": 65536}, version, None, cpu()) == []
        assert start_failures(compiled, version, None, HardwareSpec(**H100)) == []
    messages = {(r.name, v): r.message for r in RULES for v in ("0.5.9", "0.5.10", "0.5.11", "0.5.23")
                if r.stage == "start" and r.releases(tuple(map(int, v.split("."))))}
    assert messages[("cpu_fa3", "0.5.9")] == messages[("cpu_fa3", "0.5.10")] == (
        "RuntimeError: No CUDA GPUs are available")
    assert messages[("cpu_fa3", "0.5.11")] == messages[("cpu_fa3", "0.5.23")] == (
        "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.")
    assert messages[("cpu_torch_compile", "0.5.9")] == (
        "AttributeError: 'TorchNativeAttnBackend' object has no attribute 'get_graph_seq_len_fill_value'")
    assert messages[("cpu_torch_compile", "0.5.10")] == messages[("cpu_torch_compile", "0.5.23")] == (
        "AttributeError: 'TorchNativeAttnBackend' object has no attribute 'init_cpu_graph_state'")
    # fa3's GPU requirement (Hopper only) is about GPUs: it does not refuse a CPU host before launch
    assert not any(r.startswith("FlashAttention-3") for r in check_config(fa3, "0.5.23", None, cpu()))


class _Engine:
    twin = False

    def __init__(self, spec):
        self.spec = spec

    def version(self) -> str:
        return "0.5.23"


class _Spec:
    model = None
    hardware = cpu()


class _Trial:
    settings = {"mem_fraction_static": 0.85}


def test_the_refusal_names_the_cpu_host():
    why = refuse(_Engine(_Spec()), _Trial())
    assert why is not None and why.startswith("cpu_host (CPU) cannot run this configuration: on a CPU host SGLang")
    assert why.endswith("(source: measured: SGLang 0.5.23 --device cpu without --max-total-tokens on a 24 GB host "
                        "(docs/sources.md#cpu-host))")
