"""Deployments: their checks, labels, placement on nodes and the KV transfer between their roles."""

import pytest

from grid.topology.deployment import Deployment, Placement, RoleGroup, ServerShape, kv_transfer_s
from grid.topology.kv import TransferCost
from tests.twin._specs import hardware, model


def agg(count, tp=8, policy="round_robin"):
    return Deployment((RoleGroup("aggregated", count, ServerShape(tp)),), router_policy=policy)


def pd(x, y, p=None, d=None, policy="round_robin"):
    return Deployment((RoleGroup("prefill", x, p or ServerShape(8)), RoleGroup("decode", y, d or ServerShape(8))),
                      router_policy=policy)


def test_shapes_check_their_sizes_and_say_them():
    assert ServerShape(8, attn_dp=8, ep=8).label() == "TP8 DP8 EP8" and ServerShape(8, attn_dp=8).attn_tp == 1
    assert ServerShape(4).label() == "TP4" and ServerShape(4).attn_tp == 4
    with pytest.raises(ValueError, match="attn_dp=3 must divide tp=8"):
        ServerShape(8, attn_dp=3)
    with pytest.raises(ValueError, match="tp must be >= 1"):
        ServerShape(0)


def test_a_deployment_is_one_kind_with_a_router_when_it_has_several_servers():
    assert agg(1, policy=None).label() == "1x TP8" and not agg(1, policy=None).disaggregated
    assert pd(1, 2, d=ServerShape(8, 8, 8)).label() == "1P2D P:TP8 D:TP8 DP8 EP8"
    assert pd(1, 2).gpus == 24 and pd(1, 2).servers == 3 and pd(1, 2).count("decode") == 2
    with pytest.raises(ValueError, match="need a router"):
        agg(2, policy=None)
    with pytest.raises(ValueError, match="it has no decode server"):
        Deployment((RoleGroup("prefill", 1, ServerShape(8)),))
    with pytest.raises(ValueError, match="cannot be mixed"):
        Deployment((RoleGroup("aggregated", 1, ServerShape(8)), RoleGroup("decode", 1, ServerShape(8))), "random")
    with pytest.raises(ValueError, match="role must be one of aggregated, prefill, decode"):
        RoleGroup("router", 1, ServerShape(1))  # type: ignore[arg-type]


def test_servers_fill_nodes_in_order_and_a_large_one_spans_whole_nodes():
    two_nodes = hardware("h100_x16_ib")  # 2 nodes x 8 GPUs
    assert pd(1, 1, p=ServerShape(4), d=ServerShape(4)).place(two_nodes) == [
        Placement("prefill", 0, 0, 1, (0, 1, 2, 3)), Placement("decode", 0, 0, 1, (4, 5, 6, 7))]
    assert pd(1, 1).place(two_nodes) == [Placement("prefill", 0, 0, 1, tuple(range(8))),
                                         Placement("decode", 0, 1, 1, tuple(range(8)))]
    assert agg(1, tp=16, policy=None).place(two_nodes) == [Placement("aggregated", 0, 0, 2, tuple(range(8)))]
    with pytest.raises(ValueError, match="needs 24 GPUs; hardware h100_x16_ib has 16"):
        pd(1, 2).place(two_nodes)
    with pytest.raises(ValueError, match="decode server 0 \\(4 GPUs\\) fits on no node"):
        pd(2, 1, p=ServerShape(6), d=ServerShape(4)).place(two_nodes)  # 6 + 6 leave 2 + 2


def test_kv_moves_over_the_network_between_nodes_and_nvlink_within_one():
    llama70 = model("llama3_1_70b")
    ideal = TransferCost(fixed_s=0.0, efficiency=1.0)
    # TP8 prefill on node 0, TP8 decode on node 1: 8 lanes of 48 GB/s; an 8K prompt is 2.68 GB
    across = kv_transfer_s(pd(1, 1), llama70, hardware("h100_x16_ib"), 8192, cost=ideal)
    assert across == pytest.approx(2_684_354_560 / (8 * 48e9))
    # both TP4 on one node: 4 lanes of NVLink (370 GB/s)
    within = kv_transfer_s(pd(1, 1, ServerShape(4), ServerShape(4)), llama70, hardware("h100_x8"), 8192, cost=ideal)
    assert within == pytest.approx(2_684_354_560 / (4 * 370e9))
    # concurrent transfers share it, each paying the fixed cost
    cost = TransferCost(fixed_s=0.02, efficiency=0.8)
    four = kv_transfer_s(pd(1, 1), llama70, hardware("h100_x16_ib"), 8192, concurrent=4, cost=cost)
    assert four == pytest.approx(0.02 + 4 * 2_684_354_560 / (0.8 * 8 * 48e9))
    with pytest.raises(ValueError, match="is aggregated"):
        kv_transfer_s(agg(2), llama70, hardware("h100_x16_ib"), 8192)
