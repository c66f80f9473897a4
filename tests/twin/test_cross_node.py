"""Tensor parallelism across nodes (grid/twin/crossnode.py): NCCL's small-message latency model, the hierarchical
all-reduce, how a TP group over two nodes changes the decode step and startup, and what the twin still refuses."""

from __future__ import annotations

import pytest

from grid.config.specs import HardwareSpec
from grid.releases.checks import check_config, cross_node_refusal
from grid.twin import cli
from grid.twin.perf_of_flags import perf_model
from grid.twin.crossnode import hierarchical_allreduce_s, nccl_tree_latency_us
from grid.twin.perf import PerfModel, ServingConfig

from ._specs import hardware, model

DS = model("deepseek_v3_fp8")
IB = hardware("h100_x16_ib")
ONE_NODE = hardware("h100_x8")
TP16 = dict(tp_size=16, nnodes=2, version="0.4.9")


# --- pure functions --------------------------------------------------------------------------------------------------
def test_nccl_tree_latency_follows_nccls_tuning_table():
    # baseLat 4.4 + 2 x ((M-1) x 0.52 x 1.8 + log2(N) x 5.0)
    assert nccl_tree_latency_us(2, 8, 5.0) == pytest.approx(27.504)
    assert nccl_tree_latency_us(4, 8, 5.0) == pytest.approx(37.504)  # one more network hop each way
    assert nccl_tree_latency_us(1, 8, 5.0) == pytest.approx(11.68)  # one node: no 1.8 factor, no network hop
    assert nccl_tree_latency_us(2, 8, 5.0, nvlink=False) == pytest.approx(4.4 + 2 * (7 * 1.8 + 5.0))
    with pytest.raises(ValueError, match="nodes and gpus_per_node must be >= 1"):
        nccl_tree_latency_us(0, 8, 5.0)


def test_hierarchical_allreduce_adds_the_nic_ring_on_one_shard():
    # one decode token of DeepSeek-V3: 7168 bf16 values = 14,336 bytes
    t = hierarchical_allreduce_s(14336, 2, 8, 370, 48, 27.504)
    assert t == pytest.approx(27.504e-6 + 2 * 7 / 8 * 14336 / 370e9 + 1 * 14336 / 8 / 48e9)
    # an 8,192-token prefill chunk: 117 MB; NVLink reduce-scatter + all-gather 0.5555 ms, NIC ring on 1/8 0.3058 ms
    big = 8192 * 7168 * 2
    assert hierarchical_allreduce_s(big, 2, 8, 370, 48, 0.0) == pytest.approx(
        2 * 7 / 8 * big / 370e9 + big / 8 / 48e9)
    assert 1e3 * hierarchical_allreduce_s(big, 2, 8, 370, 48, 0.0) == pytest.approx(0.8613, abs=1e-4)


# --- the model -------------------------------------------------------------------------------------------------------
def test_tp_over_two_nodes_splits_weights_over_16_gpus_and_pays_nccl_across_nodes():
    cross = PerfModel(DS, IB, ServingConfig(**TP16))
    assert type(cross).__name__ == "CrossNodePerfModel"
    flat = PerfModel(DS, ONE_NODE, ServingConfig(tp_size=16, version="0.4.9"))  # as if NVLink spanned 16 GPUs
    assert type(flat) is PerfModel
    assert cross.weight_gb_per_gpu == pytest.approx(flat.weight_gb_per_gpu)
    assert cross.kv_capacity_tokens == flat.kv_capacity_tokens
    assert cross.weight_gb_per_gpu == pytest.approx(flat.params.total / 16 / 1e9, rel=0.35)  # FP8 experts, BF16 rest
    # every all-reduce: NCCL's 27.5 µs tree latency instead of 7 µs custom all-reduce, plus the NIC term
    per_ar = cross._allreduce_s(1) - flat._allreduce_s(1)
    assert per_ar == pytest.approx(
        hierarchical_allreduce_s(14336, 2, 8, 370, 48, 27.504) - (7e-6 + 2 * 15 / 16 * 14336 / 370e9))
    n_ar = 2 * DS.num_layers + 1
    assert cross.decode_step_s(1, 256) - flat.decode_step_s(1, 256) == pytest.approx(n_ar * per_ar)
    assert 1e3 * cross.decode_step_s(1, 256) == pytest.approx(13.09, abs=0.01)
    # each node loads its own ranks' shards: the weight load takes half the time of one node loading everything
    assert cross.startup_phases_s()["load_weights"] == pytest.approx(flat.startup_phases_s()["load_weights"] / 2)


# --- what is accepted and what is refused ----------------------------------------------------------------------------
def test_cross_node_tp_is_accepted_on_a_hardware_file_describing_the_nodes():
    assert check_config({"tp_size": 16, "nnodes": 2}, "0.5.9", DS, IB, twin=True) == []
    args = cli.parse_args(["--model-path", "m", "--tp-size", "16", "--nnodes", "2"], "0.5.9")
    cli.resolve_args(args, DS)
    cli.check_server_args(args, DS, IB)
    assert cli.to_serving_config(args).nnodes == 2
    perf = perf_model(DS, IB, ["--tp-size", "16", "--nnodes", "2"], "0.5.9")
    assert perf is not None and type(perf).__name__ == "CrossNodePerfModel"
    assert perf_model(DS, ONE_NODE, ["--tp-size", "16", "--nnodes", "2"], "0.5.9") is None


ETHERNET = IB.model_copy(update={"name": "h100_x16_eth", "internode_link": "ethernet"})


@pytest.mark.parametrize("settings, hw, words", [
    ({"tp_size": 16, "nnodes": 2}, ONE_NODE,
     "the hardware description (h100_x8) is one node; describe the nodes (hardware.nodes, internode_link"),
    ({"tp_size": 24, "nnodes": 3}, IB, "nnodes must equal hardware.nodes (2) of h100_x16_ib, not 3"),
    ({"tp_size": 8, "nnodes": 2}, IB, "tp_size must be nnodes x hardware.gpu_count = 16 across nodes, not 8"),
    ({"tp_size": 16, "nnodes": 2}, ETHERNET,
     "hardware.internode_link 'ethernet' has no calibration row (allowed: infiniband"),
    ({"tp_size": 16, "nnodes": 2, "dp_size": 2, "enable_dp_attention": True}, IB, "dp_size must be 1 across nodes"),
    ({"tp_size": 16, "nnodes": 2, "moe_a2a_backend": "deepep"}, IB,
     "moe_a2a_backend must be 'none' across nodes (expert all-to-all over the network is not modelled), not 'deepep'"),
])
def test_twin_refuses_cross_node_layouts_it_does_not_model(settings, hw, words):
    reasons = check_config(settings, "0.5.9", DS, hw, twin=True)
    assert reasons and reasons[0].startswith(f"the twin cannot model --nnodes {settings['nnodes']} here: {words}")
    assert "docs/twin.md#what-the-twin-refuses" in reasons[0]
    with pytest.raises(ValueError, match="the twin cannot model --nnodes"):
        PerfModel(DS, hw, ServingConfig(**{k: v for k, v in settings.items() if k != "enable_dp_attention"}))


def test_pp_across_nodes_is_refused():
    assert cross_node_refusal({"nnodes": 2, "tp_size": 16, "pp_size": 2}, IB) == (
        "pp_size must be 1 across nodes (only tensor parallelism over every GPU is modelled), not 2")
    assert cross_node_refusal({"nnodes": 1, "tp_size": 8}, None) is None


def test_a_hardware_file_of_several_nodes_must_name_its_network():
    data = ONE_NODE.model_dump() | {"nodes": 2}
    with pytest.raises(ValueError, match="nodes=2 needs internode_link, internode_gbps_per_gpu, internode_hop_latency_us"):
        HardwareSpec(**data)
    assert IB.total_gpus == 16 and ONE_NODE.total_gpus == 8
