"""The twin's ``time_scale=auto`` accounts for the host: a host with more runnable threads than
cores gives the twin less than a core, so each decode step gets that much more real time."""

from __future__ import annotations

import os

import pytest

from grid.compose import compose_spec
from grid.engines import sim
from grid.engines.base import get_engine
from grid.sweep.space import expand


@pytest.mark.parametrize(("step_s", "load", "scale"), [
    (0.090, 0.0, 20.0),     # GLM-5 on 8 PCIe GPUs: 90 ms / 4 ms = 22.5, capped at 20
    (0.090, 0.9, 20.0),     # under one runnable thread per core: the quiet scale
    (0.090, 2.0, 11.25),    # 22.5 / 2
    (0.090, 3.0, 7.5),      # 22.5 / 3
    (0.007, 0.0, 1.75),     # Llama-3.1-8B on one H100
    (0.007, 3.0, 1.0),      # never below real time
    (0.0123456, 1.5, 2.058),
])
def test_auto_time_scale(step_s, load, scale):
    assert sim.auto_time_scale(step_s, 4.0, 20.0, load) == scale


def test_host_load_per_core_reads_the_load_average_over_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 4.0, 2.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert sim.host_load_per_core() == 3.0

    def none():
        raise OSError("no load average")
    monkeypatch.setattr(os, "getloadavg", none)
    assert sim.host_load_per_core() == 0.0


def test_the_main_jobs_launch_slows_its_clock_on_a_loaded_host(monkeypatch, tmp_path):
    spec = compose_spec(["+sweep=nsa_backends", "engine.clock=real"], str(tmp_path))
    engine = get_engine(spec)
    plan = next(p for p in expand(spec) if p.label == "prefill=trtllm decode=trtllm")
    virtual = get_engine(compose_spec(["+sweep=nsa_backends"], str(tmp_path)))
    assert virtual.launch_plan(plan, 30000).time_scale == 1.0  # the virtual clock (the default) has no serving scale
    monkeypatch.setattr(sim, "host_load_per_core", lambda: 0.5)
    quiet = engine.launch_plan(plan, 30000)
    monkeypatch.setattr(sim, "host_load_per_core", lambda: 3.0)
    busy = engine.launch_plan(plan, 30000)
    assert (quiet.time_scale, busy.time_scale) == (20.0, 7.493)   # its 89.91 ms step: 22.48, capped; 22.48 / 3
    assert busy.env["GRID_TWIN_TIME_SCALE"] == "7.493"
    fixed = get_engine(compose_spec(["+sweep=nsa_backends", "engine.clock=real", "engine.time_scale=20"],
                                    str(tmp_path)))
    assert fixed.launch_plan(plan, 30000).time_scale == 20.0   # a fixed scale is the user's: never changed
