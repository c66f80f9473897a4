"""The twin's serving clock at launch: none on the virtual clock (the default), the user's fixed scale on the wall
clock (engine.clock=real)."""

from __future__ import annotations

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.sweep.space import expand


def test_the_launch_carries_the_clock_and_the_users_scale(tmp_path):
    virtual = compose_spec(["+sweep=nsa_backends"], str(tmp_path / "v"))
    plan = next(p for p in expand(virtual) if p.label == "prefill=trtllm decode=trtllm")
    launch = get_engine(virtual).launch_plan(plan, 30000)
    assert (launch.time_scale, launch.env["GRID_TWIN_CLOCK"]) == (1.0, "virtual")  # no serving scale
    real = get_engine(compose_spec(["+sweep=nsa_backends", "engine.clock=real"], str(tmp_path / "r")))
    launch = real.launch_plan(plan, 30000)
    assert (launch.time_scale, launch.env["GRID_TWIN_TIME_SCALE"], launch.env["GRID_TWIN_CLOCK"]) == (1.0, "1.0", "real")
    fixed = get_engine(compose_spec(["+sweep=nsa_backends", "engine.clock=real", "engine.time_scale=20"],
                                    str(tmp_path / "f")))
    assert fixed.launch_plan(plan, 30000).time_scale == 20.0   # a fixed scale is the user's: never changed
    assert fixed.launch_plan(plan, 30000).startup_time_scale == 200.0  # conf/engine/sim.yaml
