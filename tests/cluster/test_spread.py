"""A deployment across nodes (grid/cluster/spread.py): each node's session starts its share of the servers, the first
node's starts SGLang's router in front of all of them, the load goes through it, the nodes' logs read as one, and a
stop reaps every node. Here the nodes' sessions run in this process (what each node's Ray actor runs; the Ray path
itself runs against released SGLang servers on a multi-node Ray cluster in tests/cluster/test_spread_sglang.py)."""

from __future__ import annotations

import json
import socket
import sys
import time
from dataclasses import replace

import pytest

from grid.cluster.spread import SpreadServer, loopback_refusal, member_url, node_log_path
from grid.server.handle import LaunchRequest, MemberLaunch
from grid.server.process import free_port, group_alive
from grid.server.metrics_scrape import requests_finished
from grid.server.session import ServerSession
from grid.sweep.measure import COUNT_SETTLE_S, _settled_counts, servers_json
from tests.server.test_router import _router_installed, _twin_members, served_through


def test_a_points_servers_say_what_each_served():
    from grid.server.handle import LaunchResult

    result = LaunchResult("ok", server_urls=["http://a:1", "http://b:2"], server_names=["prefill 0", "decode 1"],
                          server_nodes=["n0", "n1"])
    assert json.loads(servers_json(result, [10.0, None], [18.0, 5.0])) == [
        {"server": "prefill 0", "node": "n0", "url": "http://a:1", "requests": 8},
        {"server": "decode 1", "node": "n1", "url": "http://b:2", "requests": None}]


def test_where_each_nodes_servers_log_and_are_reached():
    assert node_log_path("/r/logs/abc.log", 0) == "/r/logs/abc.log"
    assert node_log_path("/r/logs/abc.log", 2) == "/r/logs/abc.node2.log"
    assert member_url("http://0.0.0.0:30001", "0.0.0.0", "10.0.0.7") == "http://10.0.0.7:30001"
    assert member_url("http://127.0.0.1:30001", "127.0.0.1", "10.0.0.7") == "http://127.0.0.1:30001"
    assert member_url("http://0.0.0.0:30001", "0.0.0.0", None) == "http://0.0.0.0:30001"
    assert loopback_refusal("127.0.0.1", ["127.0.0.1", "127.0.0.1"]) is None  # one machine: loopback reaches all
    assert loopback_refusal("0.0.0.0", ["10.0.0.1", "10.0.0.2"]) is None
    why = loopback_refusal("127.0.0.1", ["10.0.0.1", "10.0.0.2"])
    assert why is not None and "engine.host=0.0.0.0" in why and "10.0.0.1, 10.0.0.2" in why


class _Node:
    """A node's actor as the trial sees it (grid.cluster.actor.ActorServer), its session in this process."""

    def __init__(self, name: str) -> None:
        self.session, self.node = ServerSession(), name

    def __getattr__(self, name: str):
        return getattr(self.session, name)


def _request(tmp_path, members, scale, port):
    return LaunchRequest([], {}, port, str(tmp_path / "trial.log"), scale, 600.0, "generate",
                         "meta-llama/Llama-3.1-8B-Instruct", label="2x TP1", members=tuple(members),
                         router_policy="round_robin")


@pytest.mark.integration
def test_a_deployment_over_two_nodes_serves_through_one_router_and_is_reaped(tmp_path):
    _router_installed()
    members, scale = _twin_members(tmp_path, 2)
    members = [replace(m, node=i) for i, m in enumerate(members)]
    nodes = [_Node("node-a"), _Node("node-b")]
    server = SpreadServer(nodes, "127.0.0.1", ["127.0.0.1", "127.0.0.1"])
    port = free_port()
    result = server.launch(_request(tmp_path, members, scale, port))
    try:
        assert (result.status, result.error_class, result.base_url) == ("ok", None, f"http://127.0.0.1:{port}")
        urls = [f"http://127.0.0.1:{m.port}" for m in members]
        assert result.server_urls == urls
        assert result.server_names == ["aggregated 0", "aggregated 1"]
        assert result.server_nodes == [socket.gethostname()] * 2
        # each node started its own server; the router, on the first node, lists both
        assert [[m.port for m, _ in n.session.members] for n in nodes] == [[members[0].port], [members[1].port]]
        assert nodes[1].session.router is None
        assert {w["url"] for w in nodes[0].session.router.listed()} == set(urls)
        assert server.alive() and server.exit_code() is None
        offset = server.log_size()
        before, served, _ = served_through(result.base_url, urls, 8, time_scale=scale)
        assert served == [4.0, 4.0]
        # what a load point records of each server (grid/sweep/measure.py servers_json)
        after = _settled_counts(urls, None, before, 8)  # every request the point sent is counted: no wait
        t0 = time.monotonic()
        assert _settled_counts(urls, None, before, 9) == after and time.monotonic() - t0 >= COUNT_SETTLE_S
        assert requests_finished(urls) == after
        assert json.loads(servers_json(result, before, after)) == [
            {"server": f"aggregated {i}", "node": socket.gethostname(), "url": urls[i], "requests": 4}
            for i in range(2)]
        # each node's log is its own file; read as one, from where log_size stood
        whole = server.read_log(0)
        assert all(f"Uvicorn running on http://127.0.0.1:{m.port}" in whole for m in members)
        assert (tmp_path / "trial.node1.log").read_text() in whole
        during = server.read_log(offset)
        assert "Uvicorn running" not in during and during.count("POST /generate") >= 8
    finally:
        dirty = server.stop()
    assert dirty is None
    groups = [pgid for n in nodes for pgid, _ in n.session._last if pgid is not None]
    assert len(groups) == 3 and not any(group_alive(g) for g in groups)  # two servers and the router
    assert not server.alive()


@pytest.mark.integration
def test_a_node_whose_server_dies_at_start_fails_the_launch_naming_the_node_and_stops_every_node(tmp_path):
    _router_installed()
    members, scale = _twin_members(tmp_path, 1)
    dead = MemberLaunch("aggregated", 1, [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], {},
                        free_port(), node=1)
    nodes = [_Node("node-a"), _Node("node-b")]
    server = SpreadServer(nodes, "127.0.0.1", ["127.0.0.1", "127.0.0.1"])
    result = server.launch(_request(tmp_path, [members[0], dead], scale, free_port()))
    assert (result.status, result.error_class) == ("failed", "startup_exit")
    assert result.message.startswith("node 1 (node-b): aggregated 1: server exited with code 3"), result.message
    assert all(not n.session.members for n in nodes)  # the first node's healthy server was stopped too
    assert all(not group_alive(pgid) for n in nodes for pgid, _ in n.session._last if pgid is not None)


def test_the_report_says_what_each_server_of_the_best_deployment_served():
    from grid.report.build import servers_line
    from grid.storage.schema import judged_point_row

    row = judged_point_row({"deployment_servers_json": json.dumps([
        {"server": "aggregated 0", "node": "a", "url": "http://a:1", "requests": 8},
        {"server": "aggregated 1", "node": "b", "url": "http://b:1", "requests": None}])})
    assert servers_line(row) == ("Requests per server at its best load point (warm-up included): aggregated 0 on a "
                                 "8, aggregated 1 on b ?")
    assert servers_line(judged_point_row({})) is None


class _Recorder:
    """A node's actor that launches fine (``lost`` False) or is gone (every call raises actor_lost), counting stops."""

    def __init__(self, name: str, lost: bool) -> None:
        self.node, self.is_lost, self.stops = name, lost, 0

    def launch(self, request):
        from grid.server.handle import LaunchResult
        from grid.server.infra import InfrastructureLost

        if self.is_lost:
            raise InfrastructureLost("actor_lost", f"the server actor of node {self.node} died during launch()")
        return LaunchResult("ok", server_urls=[f"http://127.0.0.1:{m.port}" for m in request.members],
                            server_names=[m.name for m in request.members], server_nodes=[self.node])

    def stop(self, grace_s=10.0):
        self.stops += 1
        return None


def test_a_node_lost_at_launch_stops_the_other_nodes_servers_and_the_trial_is_skipped(tmp_path):
    from grid.server.infra import GuardedServer

    nodes = [_Recorder("a", lost=False), _Recorder("b", lost=True)]
    member = MemberLaunch("aggregated", 0, ["x"], {}, free_port())
    guarded = GuardedServer(SpreadServer(nodes, "127.0.0.1", ["127.0.0.1", "127.0.0.1"]))
    result = guarded.launch(_request(tmp_path, [member, replace(member, index=1, node=1)], 1.0, free_port()))
    assert (result.status, result.error_class) == ("skipped", "actor_lost")
    assert nodes[0].stops == 1  # the surviving node's servers were stopped at once
    assert guarded.stop() is None and nodes[0].stops == 2  # and the trial's stop still reaches what is left
