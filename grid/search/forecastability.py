"""Whether the twin forecasts a run's configurations, and why not: one question, answered in one place (pure).

What stops a forecast, in the order it is checked:

* ``engine``: the twin models only servers of its own dialect that grid launches (``Engine.forecastable``: the twin
  and SGLang); an external server (``engine=openai``) or another family's is what it is, and is measured only;
* ``hardware``: the twin's constants were fitted on GPUs, so on a CPU host its spec-sheet forecasts count only once
  the sweep has calibrated it (grid/twin/perf.py ``forecasts_need_calibration``);
* ``load``: a replay sends independent prompts of the configured lengths, not conversations whose turns grow with
  their history and reuse it through the prefix cache (grid/search/predict.py ``unforecastable_load``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from grid.config.schema import LoadSpec, RunSpec

Cause = Literal["engine", "hardware", "load"]


@dataclass(frozen=True)
class NoForecast:
    """Why the twin does not forecast: the ``cause`` and the ``reason`` a user reads."""

    cause: Cause
    reason: str


def no_forecast(spec: RunSpec, loads: Iterable[LoadSpec] = (), calibrated: bool = False) -> NoForecast | None:
    """Why the twin does not forecast ``spec``'s configurations under ``loads`` (none given: the engine and hardware
    alone), None when it does. ``calibrated``: the forecasts come from a calibration (``twin.calibration`` or this
    sweep's), which lifts the hardware's caveat."""
    from grid.engines.base import engine_class
    from grid.search.predict import unforecastable_load
    from grid.twin.perf import forecasts_need_calibration

    if not engine_class(spec.engine.kind).forecastable():
        return NoForecast("engine", f"engine={spec.engine.kind}: the twin does not model this server (it is measured "
                                    "only)")
    if not calibrated and (why := forecasts_need_calibration(spec.hardware)):
        return NoForecast("hardware", why)
    why = next((w for load in loads if (w := unforecastable_load(load))), None)
    return NoForecast("load", why) if why else None
