"""SGLang's router (the sglang-router package) in front of servers grid started: its command line, and the real
router spreading grid's load over two twins, then reaped with its process group."""

from __future__ import annotations

import socket
import sys
import urllib.request

import pytest

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.loadgen.records import Prompt
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync
from grid.server.process import ManagedServer, StartupError, free_port, group_alive
from grid.server.handle import LaunchRequest, MemberLaunch
from grid.server.router import Router, router_argv
from grid.server.session import ServerSession, moved_member
from grid.sweep.space import expand
from tests.real_servers import unavailable


def _router_installed() -> None:
    try:
        import sglang_router  # noqa: F401
    except ImportError:
        unavailable("sglang-router is not installed (pip install -e '.[router]'; the dev extra has it)")


def test_the_command_line_fronts_aggregated_workers_or_prefill_and_decode_servers():
    agg = router_argv(port=8000, metrics_port=8001, policy="round_robin", workers=["http://a:1", "http://b:2"],
                      python="py")
    assert agg == ["py", "-m", "sglang_router.launch_router", "--worker-urls", "http://a:1", "http://b:2",
                   "--policy", "round_robin", "--host", "127.0.0.1", "--port", "8000",
                   "--prometheus-host", "127.0.0.1", "--prometheus-port", "8001"]
    pd = router_argv(port=8000, metrics_port=8001, policy="cache_aware", prefill=[("http://p:1", 8998),
                     ("http://p:2", None)], decode=["http://d:3"], python="py")
    assert pd[3:14] == ["--pd-disaggregation", "--prefill", "http://p:1", "8998", "--prefill", "http://p:2", "none",
                        "--decode", "http://d:3", "--policy", "cache_aware"]
    with pytest.raises(ValueError, match="allowed: random, round_robin, cache_aware, power_of_two"):
        router_argv(port=1, metrics_port=2, policy="manual", workers=["http://a:1"])
    with pytest.raises(ValueError, match="prefill and decode servers \\(both\\)"):
        router_argv(port=1, metrics_port=2, policy="random", prefill=[("http://p:1", None)])
    with pytest.raises(ValueError, match="not both"):
        router_argv(port=1, metrics_port=2, policy="random", workers=["http://a:1"], decode=["http://d:3"])


def _requests_served(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sglang:num_requests_total"))


def served_through(router_url: str, urls: list[str], n: int, time_scale: float = 1.0,
                   read_timeout_s: float = 60) -> tuple[list[float], list[float], list]:
    """``n`` requests of 16 prompt and 8 output tokens at concurrency 4 through the router at ``router_url``, each
    answered ok (asserted): each server's ``sglang:num_requests_total`` before, its rise (what it served of them),
    and the requests' records."""
    before = [_requests_served(u) for u in urls]
    prompts = [Prompt(i, 16, 8, input_ids=tuple(range(100 + i, 116 + i))) for i in range(n)]
    res = run_load_point_sync(Target(router_url, time_scale=time_scale), LoadPoint("concurrency", 4, n), prompts,
                              read_timeout_s=read_timeout_s)
    assert [r.status for r in res.records] == ["ok"] * n, [r.error_message for r in res.records]
    return before, [_requests_served(u) - b for u, b in zip(urls, before)], res.records


@pytest.mark.integration
def test_the_real_router_spreads_grids_load_over_two_twins_and_is_reaped(tmp_path):
    _router_installed()
    spec = compose_spec(["model=llama3_1_8b", "hardware=h100_x1", "engine.clock=real", "engine.time_scale=20",
                         "load.concurrency=[4]"], tmp_path)
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    twins = []
    try:
        for i in range(2):
            port = free_port()
            plan = engine.launch_plan(expand(spec)[0], port)
            twin = ManagedServer(plan.argv, plan.env, tmp_path / f"twin{i}.log", "127.0.0.1", port, plan.time_scale)
            twin.start()
            twins.append(twin)
        for twin in twins:
            twin.wait_ready(600)
        urls = [f"http://127.0.0.1:{t.port}" for t in twins]
        port = free_port()
        router = Router(router_argv(port=port, metrics_port=free_port(), policy="round_robin", workers=urls), urls,
                        tmp_path / "router.log", "127.0.0.1", port)
        router.start()
        try:
            assert {w["url"] for w in router.listed() if w["is_healthy"]} == set(urls)
            _, served, records = served_through(router.url, urls, 16, time_scale=20)
            assert {r.output_tokens for r in records} == {8}
            assert served == [8.0, 8.0]  # round robin: each twin served half of the requests
        finally:
            router.stop()
        group = router.proc.last_pgid
        assert group is not None and not group_alive(group)
    finally:
        for twin in twins:
            twin.stop()


def _twin_members(tmp_path, n: int) -> tuple[list[MemberLaunch], float]:
    spec = compose_spec(["model=llama3_1_8b", "hardware=h100_x1", "engine.clock=real", "engine.time_scale=20",
                         "load.concurrency=[4]"], tmp_path)
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    members = []
    for i in range(n):
        plan = engine.launch_plan(expand(spec)[0], free_port())
        members.append(MemberLaunch("aggregated", i, plan.argv, plan.env, plan.port))
    return members, plan.time_scale


@pytest.mark.integration
def test_a_session_launches_a_deployment_behind_the_real_router_and_reaps_all_of_it(tmp_path):
    """ServerSession with ``members``: both twins start, the router lists them, the probe and the load go through the
    router (round robin: half each), their lines share the trial's log, and one stop reaps every group."""
    _router_installed()
    members, scale = _twin_members(tmp_path, 2)
    port = free_port()
    session = ServerSession()
    result = session.launch(LaunchRequest([], {}, port, str(tmp_path / "trial.log"), scale, 600.0, "generate",
                                          "meta-llama/Llama-3.1-8B-Instruct", label="2x TP1", members=tuple(members),
                                          router_policy="round_robin"))
    try:
        assert (result.status, result.error_class, result.base_url) == ("ok", None, f"http://127.0.0.1:{port}")
        assert result.startup_s is not None and result.startup_s > 0
        urls = [f"http://127.0.0.1:{m.port}" for m in members]
        assert session.router is not None and {w["url"] for w in session.router.listed()} == set(urls)
        assert session.alive() and session.exit_code() is None
        assert served_through(result.base_url, urls, 8, time_scale=scale)[1] == [4.0, 4.0]
        log = session.read_log(0)  # both servers write the trial's log; the router its own
        assert {f"Uvicorn running on http://127.0.0.1:{m.port}" in log for m in members} == {True}
        assert (tmp_path / "trial.router.log").stat().st_size > 0
    finally:
        dirty = session.stop()
    stopped = [port for _, port in session._last]
    assert dirty is None and sorted(stopped) == sorted([port, *(m.port for m in members)])
    assert all(not group_alive(pgid) for pgid, _ in session._last if pgid is not None)
    assert not session.alive() and session.stop() is None  # a second stop finds nothing to do
    assert session.read_log(0).startswith(log)  # the log stays readable after the stop


@pytest.mark.integration
def test_a_deployment_whose_server_dies_at_start_fails_naming_it_and_leaves_nothing(tmp_path):
    _router_installed()
    members, scale = _twin_members(tmp_path, 1)
    dead = MemberLaunch("aggregated", 1, [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], {},
                        free_port())
    session = ServerSession()
    result = session.launch(LaunchRequest([], {}, free_port(), str(tmp_path / "trial.log"), scale, 600.0, "generate",
                                          "m", members=(members[0], dead), router_policy="round_robin"))
    assert (result.status, result.error_class) == ("failed", "startup_exit")
    assert result.message.startswith("aggregated 1: server exited with code 3 before it was ready"), result.message
    assert session.router is None and not session.members
    assert all(not group_alive(pgid) for pgid, _ in session._last if pgid is not None)


@pytest.mark.integration
def test_a_deployment_server_whose_port_is_taken_before_it_binds_starts_again_on_a_free_one(tmp_path, monkeypatch):
    """Member 1's port is free when checked and taken before the server binds it (a clean-clone CI run saw a
    released server lose its port so, to another process on the machine): that server alone starts again on a free
    port, never charged, with a note naming it; the router fronts it where it listens."""
    _router_installed()
    members, scale = _twin_members(tmp_path, 2)
    taken = members[1].port
    holders: list[socket.socket] = []
    start = ManagedServer.start

    def start_then_take(self, grace_s=10.0):
        start(self, grace_s)
        if self.port == taken and not holders:  # the server is starting its interpreter: take its port now
            held = socket.socket()
            held.bind(("127.0.0.1", taken))
            held.listen()
            holders.append(held)

    monkeypatch.setattr(ManagedServer, "start", start_then_take)
    session = ServerSession()
    port = free_port()
    try:
        result = session.launch(LaunchRequest([], {}, port, str(tmp_path / "trial.log"), scale, 600.0, "generate",
                                              "meta-llama/Llama-3.1-8B-Instruct", members=tuple(members),
                                              router_policy="round_robin"))
        moved = session.members[1][0]
        assert (result.status, result.error_class) == ("ok", None), result.message
        assert moved.port != taken and f"--port {moved.port}" in " ".join(moved.argv)
        assert result.infra_retries == [f"port_in_use: aggregated 1: {taken} taken at launch; retried on {moved.port}"]
        assert result.server_urls == [f"http://127.0.0.1:{members[0].port}", f"http://127.0.0.1:{moved.port}"]
        assert session.router is not None and {w["url"] for w in session.router.listed()} == set(result.server_urls)
        assert "error while attempting to bind on address" in session.read_log(0)
    finally:
        session.stop()
        for held in holders:
            held.close()
    assert all(not group_alive(pgid) for pgid, _ in session._last if pgid is not None)


def test_a_moved_prefill_server_gets_both_its_ports_anew():
    member = MemberLaunch("prefill", 0, ["python", "-m", "sglang.launch_server", "--port", "30001",
                                         "--disaggregation-bootstrap-port", "30003"], {}, 30001, 30003)
    moved = moved_member(member, 40001, 40003)
    assert (moved.port, moved.bootstrap_port, moved.name) == (40001, 40003, "prefill 0")
    assert moved.argv[-4:] == ["--port", "40001", "--disaggregation-bootstrap-port", "40003"]


def test_a_router_whose_workers_never_come_up_times_out_naming_them(tmp_path):
    _router_installed()
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    port = free_port()
    router = Router(router_argv(port=port, metrics_port=free_port(), policy="random", workers=[dead]), [dead],
                    tmp_path / "router.log", "127.0.0.1", port)
    with pytest.raises(StartupError, match=f"0 of 1 workers healthy after 5 s; missing: {dead}"):
        router.start(timeout_s=5)
    assert router.proc.pgid is None and not group_alive(router.proc.last_pgid)


@pytest.mark.real_sglang
@pytest.mark.timeout(1200)
def test_the_real_router_spreads_load_over_two_released_sglang_servers_on_the_cpu(tmp_path):
    """The same over two of SGLang's released servers on this CPU (SGLang's own launch through grid's engine): the
    router registers them as SGLang workers, round robin gives each half, and all of it is reaped."""
    from tests.engines.test_sglang_cpu import _env, _setup, sglang_processes

    _router_installed()
    python, model, lib = _setup()
    spec = compose_spec(["engine=sglang", "hardware=cpu_host", "model=tiny_llama", f"model.path={model}",
                         f"engine.python={python}", "+server.max_total_tokens=16384", "server.cuda_graph=null",
                         "engine.env={}" if not lib else f"+engine.env={{LD_LIBRARY_PATH:{lib}}}"], tmp_path)
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    env_keep = {k: v for k, v in _env().items() if k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    servers = []
    try:
        for i in range(2):
            port = free_port()
            plan = engine.launch_plan(expand(spec)[0], port)
            server = ManagedServer(plan.argv, {**plan.env, **env_keep}, tmp_path / f"sglang{i}.log", "127.0.0.1", port)
            server.start()
            servers.append(server)
        for server in servers:
            server.wait_ready(900)
        urls = [f"http://127.0.0.1:{s.port}" for s in servers]
        port = free_port()
        router = Router(router_argv(port=port, metrics_port=free_port(), policy="round_robin", workers=urls), urls,
                        tmp_path / "router.log", "127.0.0.1", port)
        router.start(timeout_s=120)
        try:
            listed = router.listed()
            assert {w["url"] for w in listed if w["is_healthy"]} == set(urls)
            assert {w["worker_type"] for w in listed} == {"regular"}
            # SGLang counts its own start-up warm-up request in sglang:num_requests_total (the twin does not): the
            # routed requests are the counters' rise during the load
            _, served, records = served_through(router.url, urls, 16, read_timeout_s=300)
            assert {r.output_tokens for r in records} == {8}
            assert served == [8.0, 8.0]
        finally:
            router.stop()
        assert not group_alive(router.proc.last_pgid)
    finally:
        for server in servers:
            server.stop()
    assert not sglang_processes(), sglang_processes()
