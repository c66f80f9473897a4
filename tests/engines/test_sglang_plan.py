"""engine=sglang's launch plan on a CPU host and what the sweep's planning knows of it (pure: no server starts)."""

from __future__ import annotations

import pytest

from grid.compose import compose_spec
from grid.config.schema import ConfigError
from grid.engines.sglang import SGLangEngine
from grid.plan import TrialPlan
from grid.search.knowledge import assess
from grid.sweep.space import expand
from grid.twin.perf_of_flags import perf_model


def _spec(tmp_path, *overrides: str):
    return compose_spec(["+sweep=cpu_serving", "engine=sglang", "engine.version=0.5.23", "hardware=cpu_host",
                         "model=tiny_llama", f"model.path={tmp_path}/tiny", "engine.python=py", *overrides],
                        tmp_path / "run")


def test_a_cpu_launch_carries_the_device_flag_and_switch(tmp_path):
    spec = _spec(tmp_path, "+engine.env={LD_LIBRARY_PATH:/opt/libcuda}")
    engine = SGLangEngine(spec)
    plan = TrialPlan(0, {"max_total_tokens": 65536, "schedule_policy": "lpm"}, spec.load, "x", "h")
    launch = engine.launch_plan(plan, 31000)
    assert launch.argv == ["py", "-m", "sglang.launch_server", "--model-path", f"{tmp_path}/tiny",
                           "--max-total-tokens", "65536", "--schedule-policy", "lpm", "--device", "cpu",
                           "--host", "127.0.0.1", "--port", "31000"]
    assert launch.env == {"SGLANG_USE_CPU_ENGINE": "1", "LD_LIBRARY_PATH": "/opt/libcuda"}
    assert launch.command == ("SGLANG_USE_CPU_ENGINE=1 py -m sglang.launch_server --model-path "
                              f"{tmp_path}/tiny --max-total-tokens 65536 --schedule-policy lpm --device cpu "
                              "--host 127.0.0.1 --port 31000")


def test_the_cpu_sweep_plans_four_to_run_and_three_known_failures(tmp_path):
    spec = _spec(tmp_path)
    plans = expand(spec)
    known = assess(spec, SGLangEngine(spec), plans, "0.5.23")
    by_label = {p.label: known[p.config_hash] for p in plans}
    assert len(plans) == 7
    assert sorted(k.failures[0][0] for k in by_label.values() if k.known_to_fail) == [
        "cpu_fa3", "cpu_speculative", "cpu_torch_compile"]
    assert sum(1 for k in by_label.values() if not k.known_to_fail and not k.refused) == 4


def test_on_0_5_9_the_cpu_sweep_refuses_ngram_before_launch(tmp_path):
    # SGLang 0.5.9-0.5.15 refuse NGRAM on any device but CUDA in their argument checks (the launcher exits 1 with
    # "ValueError: Ngram speculative decoding only supports CUDA device.", measured on 0.5.9): nothing to launch
    spec = _spec(tmp_path)
    known = assess(spec, SGLangEngine(spec.model_copy(update={"engine": spec.engine.model_copy(
        update={"version": "0.5.9"})})), expand(spec), "0.5.9")
    by_label = {p.label: known[p.config_hash] for p in expand(spec)}
    (ngram,) = [k for label, k in by_label.items() if "speculative_algorithm=NGRAM" in label]
    assert ngram.refused == ("SGLang 0.5.9 would refuse this configuration: Ngram speculative decoding only "
                             "supports CUDA device.")
    assert sorted(k.failures[0][0] for k in by_label.values() if k.known_to_fail) == ["cpu_fa3", "cpu_torch_compile"]
    assert sum(1 for k in by_label.values() if not k.known_to_fail and not k.refused) == 4


def test_on_a_cpu_host_the_twin_adds_up_op_time_and_dispatch_and_forecasts_only_once_calibrated(tmp_path):
    from grid.search.predict import forecast, level_forecasts
    from grid.twin import perf as pm
    from grid.twin.coefficients import Coefficients

    spec = _spec(tmp_path)
    perf = perf_model(spec.model, spec.hardware, ["--max-total-tokens", "65536"], "0.5.23")
    assert perf.on_host and perf.cuda_graph_max_bs == 0 and perf.kv_capacity_tokens == 65536
    t = perf.breakdown(4, 4 * 96)
    # 2 layers x 14 ops + 6 (embedding, final norm, head, sampling), each dispatched from Python, none overlapped
    assert t["eager_cpu"] == pytest.approx(34 * pm.T_OP_CPU_EAGER)
    assert t["launch"] == 0.0 and t["allreduce"] == 0.0
    assert t["total"] == pytest.approx(max(t["memory"], t["compute"]) + 34 * pm.T_OP_CPU_EAGER + pm.T_STEP_CPU
                                       + 4 * pm.T_REQ_CPU)
    assert perf.prefill_step_s(64) > 34 * pm.T_OP_CPU_EAGER + pm.T_STEP_CPU
    # the constants were fitted on GPUs: no forecast decides anything before a calibration
    plan = expand(spec)[0]
    assert pm.forecasts_need_calibration(spec.hardware).startswith("the twin's constants were fitted on GPUs")
    assert forecast(spec, plan, "0.5.23") is None and level_forecasts(spec, plan, "0.5.23") == {}
    calibrated = forecast(spec, plan, "0.5.23", Coefficients(decode=10.0))
    assert calibrated is not None and calibrated.value > 0
    assert level_forecasts(spec, plan, "0.5.23", Coefficients(decode=10.0))


def test_the_twin_refuses_a_cpu_host_before_launch(tmp_path):
    with pytest.raises(ConfigError, match=r"^hardware=cpu_host: the twin cannot play a server on a CPU host "
                                          r"\(cpu_host\): its server, logs and failure table are of SGLang on GPUs.* run real SGLang there "
                                          r"with engine=sglang \(engine=sim is the twin"):
        compose_spec(["hardware=cpu_host"], tmp_path / "run")


def _deployment_plan(spec, identity: dict, settings: dict | None = None) -> TrialPlan:
    from grid.topology.deployment import Deployment

    return TrialPlan(0, settings or {}, spec.load, "d", "h", deployment=Deployment.from_identity(identity))


def test_a_deployment_is_each_servers_command_on_its_own_port_and_the_router_in_front(tmp_path):
    spec = _spec(tmp_path)
    engine = SGLangEngine(spec)
    two = _deployment_plan(spec, {"groups": [{"role": "aggregated", "count": 2, "tp": 1, "attn_dp": 1, "ep": 1}],
                                  "router_policy": "round_robin"}, {"max_total_tokens": 16384, "schedule_policy": "lpm"})
    launch = engine.launch_plan(two, 31001)  # odd, as the kernel's free ports are
    assert [(m.role, m.index, m.port, m.bootstrap_port) for m in launch.members] == [
        ("aggregated", 0, 31003, None), ("aggregated", 1, 31005, None)]
    for m in launch.members:
        assert m.argv == ["py", "-m", "sglang.launch_server", "--model-path", f"{tmp_path}/tiny", "--tp-size", "1",
                          "--max-total-tokens", "16384", "--schedule-policy", "lpm", "--device", "cpu",
                          "--host", "127.0.0.1", "--port", str(m.port)]
        assert m.env == {"SGLANG_USE_CPU_ENGINE": "1"}  # a CPU host: no CUDA_VISIBLE_DEVICES
    assert launch.port == 31001 and launch.router_policy == "round_robin"
    assert launch.argv[1:] == ["-m", "sglang_router.launch_router", "--worker-urls", "http://127.0.0.1:31003",
                               "http://127.0.0.1:31005", "--policy", "round_robin", "--host", "127.0.0.1", "--port",
                               "31001", "--prometheus-host", "127.0.0.1", "--prometheus-port", "31011"]
    lines = launch.command.splitlines()
    assert len(lines) == 3 and lines[0].startswith("SGLANG_USE_CPU_ENGINE=1 py -m sglang.launch_server")
    assert lines[1].endswith("--port 31005") and "sglang_router.launch_router" in lines[2]
    assert engine.refuse(two) is None
    # each server is checked as SGLang would check it: without a token-sized KV pool the host's memory is too little
    unsized = _deployment_plan(spec, two.deployment.identity(), {"schedule_policy": "lpm"})
    assert engine.refuse(unsized).startswith("the aggregated server TP1: SGLang 0.5.23 would refuse it: on a CPU host")


def test_a_prefill_decode_deployment_on_gpus_gets_roles_gpus_and_a_bootstrap_port(tmp_path):
    spec = compose_spec(["engine=sglang", "engine.version=0.5.23", "hardware=h200_x8", "model=llama3_1_8b",
                         f"model.path={tmp_path}/m", "engine.python=py"], tmp_path / "run")
    engine = SGLangEngine(spec)
    pd = _deployment_plan(spec, {"groups": [{"role": "prefill", "count": 2, "tp": 2, "attn_dp": 1, "ep": 1},
                                            {"role": "decode", "count": 1, "tp": 4, "attn_dp": 1, "ep": 1}],
                                 "router_policy": "random"})
    launch = engine.launch_plan(pd, 40000)
    assert [(m.role, m.port, m.bootstrap_port, m.env["CUDA_VISIBLE_DEVICES"]) for m in launch.members] == [
        ("prefill", 40002, 40008, "0,1"), ("prefill", 40004, 40010, "2,3"), ("decode", 40006, None, "4,5,6,7")]
    prefill = launch.members[0].argv
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert prefill[-2:] == ["--disaggregation-bootstrap-port", "40008"]
    assert prefill[prefill.index("--tp-size") + 1] == "2"
    decode = launch.members[2].argv
    assert decode[decode.index("--disaggregation-mode") + 1] == "decode" and "--disaggregation-bootstrap-port" not in decode
    router = launch.argv[launch.argv.index("--pd-disaggregation"):]
    assert router[:9] == ["--pd-disaggregation", "--prefill", "http://127.0.0.1:40002", "40008", "--prefill",
                          "http://127.0.0.1:40004", "40010", "--decode", "http://127.0.0.1:40006"]
    assert launch.command.splitlines()[0].startswith("CUDA_VISIBLE_DEVICES=0,1 py -m sglang.launch_server")


def test_a_deployment_across_nodes_holds_each_node_and_a_server_across_nodes_is_refused_by_name(tmp_path):
    spec = compose_spec(["engine=sglang", "engine.version=0.5.23", "hardware=h200_x16_roce", "model=llama3_1_8b",
                         f"model.path={tmp_path}/m", "engine.python=py"], tmp_path / "run")
    engine = SGLangEngine(spec)
    wide = _deployment_plan(spec, {"groups": [{"role": "aggregated", "count": 16, "tp": 1, "attn_dp": 1, "ep": 1}],
                                   "router_policy": "round_robin"})
    assert engine.refuse(wide) is None and engine.nodes_needed(wide) == 2
    launch = engine.launch_plan(wide, 40000)
    assert [m.node for m in launch.members] == [0] * 8 + [1] * 8
    assert [m.env["CUDA_VISIBLE_DEVICES"] for m in launch.members[7:9]] == ["7", "0"]
    # the plan names a server of node 1 by its node (its address is known when the trial runs)
    workers = launch.argv[launch.argv.index("--worker-urls") + 1:launch.argv.index("--policy")]
    assert workers[7:9] == ["http://127.0.0.1:40016", "http://node1:40018"]
    narrow = _deployment_plan(spec, {"groups": [{"role": "aggregated", "count": 8, "tp": 1, "attn_dp": 1, "ep": 1}],
                                     "router_policy": "round_robin"})
    assert engine.refuse(narrow) is None and engine.nodes_needed(narrow) == 1
    spanning = _deployment_plan(spec, {"groups": [{"role": "aggregated", "count": 2, "tp": 8, "attn_dp": 1, "ep": 1},
                                                  {"role": "aggregated", "count": 1, "tp": 16, "attn_dp": 1, "ep": 1}],
                                       "router_policy": "round_robin"})
    assert engine.refuse(spanning) == (
        "deployment 2x TP8 + 1x TP16 needs 32 GPUs; hardware h200_x16_roce has 16 (2 node(s) x 8)")
    four = compose_spec(["engine=sglang", "engine.version=0.5.23", "hardware=h200_x16_roce", "hardware.nodes=4",
                         "model=llama3_1_8b", f"model.path={tmp_path}/m", "engine.python=py"], tmp_path / "run4")
    spanning = _deployment_plan(four, {"groups": [{"role": "aggregated", "count": 2, "tp": 16, "attn_dp": 1, "ep": 1}],
                                       "router_policy": "round_robin"})
    # a server over two nodes needs --nnodes: SGLang's own GPU count refuses it first
    assert SGLangEngine(four).refuse(spanning).startswith(
        "the aggregated server TP16: SGLang 0.5.23 would refuse it: the configuration needs 16 GPUs")
