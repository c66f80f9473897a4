"""Before the sweep, say what the twin cannot separate: the shipped cuda_graph sweep on the default
hardware launched all 6 configurations though every forecast was the same, and nothing said so."""

import pytest

from grid.search.plan import indistinct_groups

pytestmark = pytest.mark.unit


def test_groups_within_the_twin_error_of_their_highest():
    forecasts = {"a": 100.0, "b": 95.0, "c": 92.0, "d": 80.0, "e": 79.0, "f": 50.0, "g": None, "h": 0.0}
    # a: b and c within 8% of 100; d starts a new group with e (1.25% below it); f alone; no forecast: left out
    assert indistinct_groups(forecasts, 0.08) == [["a", "b", "c"], ["d", "e"]]
    assert indistinct_groups(forecasts, 0.0) == []
    assert indistinct_groups({"x": 5.0, "y": 5.0}, 0.0) == [["y", "x"]]   # equal forecasts: never separable
    assert indistinct_groups({}, 0.1) == []


def test_the_cuda_graph_sweep_is_named_before_it_runs(tmp_path):
    from grid.compose import compose_spec
    from grid.engines.base import get_engine
    from grid.search.plan import build, indistinct_notes
    from grid.sweep.space import expand

    spec = compose_spec(["+sweep=cuda_graph"], tmp_path)
    sp = build(spec, get_engine(spec), expand(spec), spec.version)
    (line,) = indistinct_notes(spec, sp)
    assert line.startswith("The twin cannot separate 6 configurations (forecasts ")
    assert "within its 7.7% error, search.twin_error" in line and "cuda_graph=False cuda_graph_max_bs=default" in line
    assert line.endswith("Measure them with load.repeats >= 3 (the report then decides by the measured spread), or "
                         "keep one of them.")
