"""engine=sglang's launch plan on a CPU host and what the sweep's planning knows of it (pure: no server starts)."""

from __future__ import annotations

import pytest

from grid.compose import compose_spec
from grid.config.schema import ConfigError
from grid.engines.sglang import SGLangEngine
from grid.plan import TrialPlan
from grid.search.knowledge import assess
from grid.sweep.space import expand
from grid.twin.configured import perf_model


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


def test_the_cpu_sweep_plans_four_to_run_and_two_known_failures(tmp_path):
    spec = _spec(tmp_path)
    plans = expand(spec)
    known = assess(spec, SGLangEngine(spec), plans, "0.5.23")
    by_label = {p.label: known[p.config_hash] for p in plans}
    assert len(plans) == 6
    assert sorted(k.failures[0][0] for k in by_label.values() if k.known_to_fail) == ["cpu_fa3", "cpu_torch_compile"]
    assert sum(1 for k in by_label.values() if not k.known_to_fail and not k.refused) == 4


def test_the_twin_does_not_model_a_cpu_host(tmp_path):
    spec = _spec(tmp_path)
    assert perf_model(spec.model, spec.hardware, ["--max-total-tokens", "65536"], "0.5.23") is None


def test_the_twin_refuses_a_cpu_host_before_launch(tmp_path):
    with pytest.raises(ConfigError, match=r"^hardware=cpu_host: the twin cannot model serving on a CPU host "
                                          r"\(cpu_host\): its performance model is of GPUs .* run real SGLang there "
                                          r"with engine=sglang \(engine=sim is the twin"):
        compose_spec(["hardware=cpu_host"], tmp_path / "run")
