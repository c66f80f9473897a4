"""SGLang's router (the sglang-router package) in front of servers grid started: its command line, and the real
router spreading grid's load over two twins, then reaped with its process group."""

from __future__ import annotations

import urllib.request

import pytest

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.loadgen.records import Prompt
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync
from grid.server.process import ManagedServer, StartupError, free_port, group_alive
from grid.server.router import Router, router_argv
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
            before = [_requests_served(u) for u in urls]
            prompts = [Prompt(i, 16, 8, input_ids=tuple(range(100 + i, 116 + i))) for i in range(16)]
            res = run_load_point_sync(Target(router.url, time_scale=20), LoadPoint("concurrency", 4, 16), prompts,
                                      read_timeout_s=60)
            assert [r.status for r in res.records] == ["ok"] * 16
            assert {r.output_tokens for r in res.records} == {8}
            # round robin: each twin served half of the requests
            assert [_requests_served(u) - b for u, b in zip(urls, before)] == [8.0, 8.0]
        finally:
            router.stop()
        group = router.proc.last_pgid
        assert group is not None and not group_alive(group)
    finally:
        for twin in twins:
            twin.stop()


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
            before = [_requests_served(u) for u in urls]
            prompts = [Prompt(i, 16, 8, input_ids=tuple(range(100 + i, 116 + i))) for i in range(16)]
            res = run_load_point_sync(Target(router.url), LoadPoint("concurrency", 4, 16), prompts, read_timeout_s=300)
            assert [r.status for r in res.records] == ["ok"] * 16, [r.error_message for r in res.records]
            assert {r.output_tokens for r in res.records} == {8}
            assert [_requests_served(u) - b for u, b in zip(urls, before)] == [8.0, 8.0]
        finally:
            router.stop()
        assert not group_alive(router.proc.last_pgid)
    finally:
        for server in servers:
            server.stop()
    assert not sglang_processes(), sglang_processes()
