"""Whether the twin forecasts, and why not (grid/search/forecastability.py): engine, hardware, load, in that order."""

from __future__ import annotations

from grid.compose import compose_spec
from grid.search.forecastability import NoForecast, no_forecast
from grid.sweep.space import expand


def test_each_cause_with_its_reason(tmp_path):
    twin = compose_spec(["+sweep=cuda_graph"], str(tmp_path / "a"))
    assert no_forecast(twin) is None and no_forecast(twin, [twin.load]) is None
    openai = compose_spec(["engine=openai", "engine.base_url=http://127.0.0.1:1"], str(tmp_path / "b"))
    assert no_forecast(openai, [openai.load]) == NoForecast(
        "engine", "engine=openai: the twin does not model this server (it is measured only)")
    cpu = compose_spec(["engine=sglang", "engine.version=0.5.23", "hardware=cpu_host", "model=tiny_llama",
                        "model.path=/models/x"], str(tmp_path / "c"))
    blocked = no_forecast(cpu)
    assert blocked is not None and blocked.cause == "hardware" and "fitted on GPUs" in blocked.reason
    assert no_forecast(cpu, calibrated=True) is None   # a calibration lifts the hardware's caveat
    sessions = compose_spec(["+sweep=prefix_cache"], str(tmp_path / "d"))
    blocked = no_forecast(sessions, [p.load for p in expand(sessions)])
    assert blocked is not None and blocked.cause == "load" and blocked.reason.startswith("load.dataset=")
    assert no_forecast(sessions) is None   # no load asked about: the engine and hardware alone


def test_the_plan_line_names_the_search_chosen_whatever_else_stops_the_forecast(tmp_path):
    # sessions on real SGLang on a CPU: the hardware is the reason given for no estimate, and the search is
    # exhaustive all the same, since the twin cannot replay conversations
    from grid.engines.base import get_engine
    from grid.search.plan import build

    spec = compose_spec(["+sweep=cpu_prefix_cache", "engine=sglang", "engine.version=0.5.23", "hardware=cpu_host",
                         "model=tiny_llama", "model.path=/models/x"], str(tmp_path))
    lines = build(spec, get_engine(spec), expand(spec), "0.5.23").cost_lines(spec)
    assert lines[0].startswith("Plan (exhaustive search): ")
    assert lines[1].startswith("No cost estimate on cpu_host: the twin's constants were fitted on GPUs")
