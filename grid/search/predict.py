"""The twin's forecast of one configuration, in virtual time (no HTTP, no sleeping; pure): modelled startup seconds
(``PerfModel.startup_phases_s``), modelled seconds of every load point and the objective's score.

Each load point is replayed through grid/twin/simulate.py: a concurrency level as a closed loop of
``load.prompts_for(level)`` requests of ``load.input_len`` / ``load.output_len`` tokens; a request rate as evenly
spaced arrivals at that rate (``inf``: all at once), capped by ``load.max_concurrency``. Warm-up requests are not
modelled; a steady-state closed loop (``load.closed_loop_start=staggered``) adds one mean request time to the
point's modelled seconds (its warm-up wave, which spreads the streams' phases over one request time; its tail is
cancelled when the window ends, grid/loadgen/runner.py) but is scored on the closed loop's own numbers. Lengths are the configured ones (``range_ratio`` and datasets other than ``random`` are
not modelled: their prompts are known only when the load runs).

With objective ``max_capacity`` the load points are the twin's own capacity bisection (:func:`capacity_probes`) and the
score is the highest rate at which the SLOs held.

Used by the pre-run cost estimate (grid/search/plan.py), the search policies (grid/search/policy.py) and early
stopping across load levels (:func:`level_forecasts`, grid/search/levels.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from grid.config.schema import RunSpec
from grid.search.knowledge import twin_model
from grid.plan import TrialPlan


@dataclass(frozen=True)
class Forecast:
    """The twin's forecast of one configuration. ``value``: the objective's score (None: no point meets the SLOs,
    or the twin cannot model it); ``startup_s``: modelled seconds of the launch (once per launch); ``load_s``:
    modelled seconds of all its load points, each level counted ``load.repeats`` times as the trial measures it
    (grid/plan.py ``load_points``; capacity probes are not repeated, grid/sweep/measure.py ``run_points``)."""

    startup_s: float
    load_s: float
    value: float | None

    @property
    def gpu_s(self) -> float:
        """Modelled seconds the launch holds its GPUs (startup + load)."""
        return self.startup_s + self.load_s


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = max(0, min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1))
    return ordered[k]


def _simulate_point(perf, load, kind: str, level: float, seed: int | None = None) -> dict:
    """One load point replayed on the twin in virtual time: a row with ``duration_s``, ``output_tok_per_s`` and the
    per-request ``ttft_ms`` / ``tpot_ms`` / ``e2e_ms`` lists (modelled ms). A rate point's arrivals are evenly
    spaced, or with ``seed`` the load's own schedule (``load.arrival``, grid/loadgen/arrivals.py) with that seed."""
    from grid.twin.scheduler import TwinRequest
    from grid.twin.simulate import simulate

    n = load.prompts_for(level)
    reqs = [TwinRequest(rid=str(i), input_tokens=load.input_len, max_new_tokens=load.output_len) for i in range(n)]
    if kind == "concurrency":
        c = int(level)
        waves = n // c if c > 0 and n % c == 0 else 1
        key = (*_wave_key(perf, c * (load.input_len + load.output_len), c), c, load.input_len, load.output_len)
        if key not in _WAVES:  # identical requests in a closed loop started together: identical waves
            _WAVES[key] = simulate(perf, [(0.0, r) for r in reqs[: n // waves]], max_concurrency=c)
        res = _repeat(_WAVES[key], waves)
    else:
        if seed is not None:
            from grid.loadgen.arrivals import send_offsets

            at = send_offsets(n, level, load.arrival, burstiness=load.burstiness, seed=seed)
        else:
            gap = 0.0 if not math.isfinite(level) else 1.0 / level
            at = [i * gap for i in range(n)]
        res = simulate(perf, list(zip(at, reqs)), max_concurrency=load.max_concurrency)
    ttft = [r.ttft_s * 1000 for r in res.requests]
    e2e = [r.e2e_s * 1000 for r in res.requests]
    tpot = [(r.e2e_s - r.ttft_s) * 1000 / (r.output_tokens - 1) for r in res.requests if r.output_tokens > 1]
    steady = kind == "concurrency" and load.steady and e2e
    return {"point_kind": kind, "point_value": level, "duration_s": res.duration_s,
            "overhead_s": sum(e2e) / len(e2e) / 1000 if steady else 0.0,
            "output_tok_per_s": res.output_throughput, "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e,
            "tpot_median_ms": _percentile(tpot, 50)}


def replay_point(perf, load, kind: str, level: float) -> dict[str, float]:
    """The twin's median TTFT (ms), median TPOT (ms) and output tok/s of the load point ``kind`` / ``level`` of
    ``load`` as the trial measures it, keyed as grid/twin/calibrate.py ``METRICS``: what a calibration compares with
    the measured point. The point (repeat 0, with its seed: grid/plan.py ``point_of``) is replayed as the load
    generator plays it on the twin's virtual clock (grid/twin/simulate.py ``replay``: warm-up wave, staggered start,
    request counts, tail) and summarized as a measured point is (``grid.metrics.loadpoint.summarize``), so the
    replay and the live twin agree to float precision (tests/twin/test_replay.py)."""
    from grid.metrics.loadpoint import summarize
    from grid.plan import point_of
    from grid.twin.simulate import replay

    point = point_of(load, kind, level)
    key = (_model_key(perf), point, load.input_len, load.output_len)
    if key not in _REPLAYS:
        if len(_REPLAYS) > _WAVES_MAX:
            _REPLAYS.clear()
        s = summarize(replay(perf, point, load.input_len, load.output_len))

        def value(name: str) -> float:
            v = s.get(name)
            return float(v) if isinstance(v, (int, float)) else math.nan

        _REPLAYS[key] = {"ttft_ms": value("ttft_median_ms"), "tpot_ms": value("tpot_median_ms"),
                         "output_tok_per_s": value("output_tok_per_s")}
    return dict(_REPLAYS[key])


def _point_rows(spec: RunSpec, plan: TrialPlan, perf) -> list[dict]:
    load = plan.load
    if spec.objective.kind == "max_capacity":
        return capacity_probes(spec, plan, perf)
    levels = [("concurrency", float(c)) for c in load.concurrency] + [("rate", float(r)) for r in load.request_rate]
    return [_simulate_point(perf, load, kind, level) for kind, level in levels]


#: The twin's own capacity bisection: its first probe (req/s; the bisection doubles or halves from there, so the start
#: costs only virtual-time probes) and its probe limit (enough to double from 1 req/s past 1,000 and then bisect).
TWIN_CAPACITY_START = 1.0
TWIN_CAPACITY_MAX_PROBES = 30


def capacity_probes(spec: RunSpec, plan: TrialPlan, perf, lo_bound: float = TWIN_CAPACITY_START,
                    hi_bound: float = TWIN_CAPACITY_START, max_probes: int = TWIN_CAPACITY_MAX_PROBES) -> list[dict]:
    """A capacity bisection on the twin in virtual time (grid/search/levels.py ``next_rate``, bracket ``lo_bound`` ..
    ``hi_bound`` req/s, ``objective.capacity_rel_tol``): one row per probe rate, each with ``slo_held``. Probe ``i``
    sends on the load's arrival schedule seeded ``load.seed * 1000 + i``, as the trial's probe ``i`` does
    (grid.sweep.measure.level_plan)."""
    from grid.search.levels import next_rate

    slo = spec.objective.slo
    rows: list[dict] = []
    probes: list[tuple[float, bool]] = []
    while True:
        rate = next_rate(probes, lo_bound, hi_bound, spec.objective.capacity_rel_tol, max_probes)
        if rate is None:
            return rows
        row = _simulate_point(perf, plan.load, "rate", rate, seed=plan.load.seed * 1000 + len(probes))
        row["slo_held"] = _meets(row, slo, [])
        rows.append(row)
        probes.append((rate, row["slo_held"]))


def capacity_bracket(spec: RunSpec, capacity: float) -> tuple[float, float]:
    """The bracket a measured capacity bisection starts from, around the twin's forecast ``capacity`` (req/s): the
    measured value is ``capacity / (1 + e)`` .. ``capacity / (1 - e)`` when the twin's relative error is within
    ``e`` = ``search.twin_bound_error``."""
    e = spec.search.twin_bound_error
    return capacity / (1 + e), capacity / (1 - e)


def _model(spec: RunSpec, plan: TrialPlan, version: str, coefficients):
    """The twin's model of ``plan`` calibrated to ``coefficients``; None when the twin refuses the configuration, or
    when its spec-sheet forecasts of this hardware count only once calibrated and there are no coefficients
    (grid/twin/perf.py ``forecasts_need_calibration``: a CPU host)."""
    from grid.twin.calibrate import calibrated
    from grid.twin.perf import forecasts_need_calibration

    if coefficients is None and forecasts_need_calibration(spec.hardware):
        return None
    perf = twin_model(spec, plan.settings, version)
    return None if perf is None else calibrated(perf, coefficients)


def unforecastable_load(load) -> str | None:
    """Why the twin's offline replay cannot score this load (None: it can). Sessions: the replay sends independent
    prompts of the configured lengths, while a conversation's turns grow with their history and reuse it through the
    radix cache, which is what the settings of such a sweep change; those runs are measured, never forecast."""
    from grid.loadgen.dataset import DATASETS

    if DATASETS[load.dataset].sessions:
        return (f"load.dataset={load.dataset}: the twin's forecasts replay independent prompts, not conversations "
                "that reuse their history through the prefix cache; every configuration is measured")
    return None


def level_forecasts(spec: RunSpec, plan: TrialPlan, version: str, coefficients=None) -> dict:
    """(point kind, level) -> ``grid.search.levels.LevelForecast`` of each concurrency level and request rate of
    ``plan`` (the objective's metric, e.g. output tok/s, and the modelled seconds of its point), by the twin
    calibrated to ``coefficients`` (None: the spec-sheet model); {} when there is no forecast (:func:`_model`). For
    early stopping across load levels."""
    from grid.report.select import OBJECTIVES
    from grid.search.levels import LevelForecast

    perf = _model(spec, plan, version, coefficients)
    if perf is None or unforecastable_load(plan.load):
        return {}
    metric = OBJECTIVES[spec.objective.kind].metric
    load = plan.load
    out = {}
    for kind, level in [("concurrency", float(c)) for c in load.concurrency] + [("rate", float(r))
                                                                               for r in load.request_rate]:
        row = _simulate_point(perf, load, kind, level)
        row["goodput_req_per_s"] = _goodput(row, spec.objective.slo)
        value = row.get(metric)
        slo = spec.objective.slo
        given = any(getattr(slo, k) is not None for k in ("ttft_ms", "tpot_ms", "e2e_ms"))
        out[(kind, level)] = LevelForecast(None if value is None or isinstance(value, list) or math.isnan(value)
                                           else float(value), row["duration_s"], _meets(row, slo, []) if given else None)
    return out


#: Simulated waves by (configuration, concurrency, lengths). A closed loop of ``waves x c`` identical requests
#: started together runs ``waves`` identical waves (each request of a wave finishes on the same step, and its
#: successor starts then), so one wave is simulated and repeated. Waves are shared between configurations that
#: the simulation cannot tell apart (:func:`_model_key`), the KV pool and running-request cap each capped at what the
#: wave can use (``c`` requests of ``input + output`` tokens; a larger pool or cap never binds).
#: tests/search/test_search.py checks the shortcuts against a full simulation.
_WAVES: dict[tuple, object] = {}
_WAVES_MAX = 4096
#: :func:`replay_point`'s results by (model, load point, lengths): a replay is a function of them alone, and a
#: calibration asks for the same one once per repeat of a level and again after every trial (each of the main job's
#: trials refitted its points, 16 replays, where 8 are distinct).
_REPLAYS: dict[tuple, dict[str, float]] = {}
#: Server settings the performance model never reads once resolved (grid/twin/perf.py): the DSA backends decide what
#: fails (grid/twin/failures.py) and what the log says, not a step's time (it reads ``dsa_active``, from the model and
#: the GPU); tests/search/test_search.py holds step times equal across them.
NOT_TIMED = ("dsa_prefill_backend", "dsa_decode_backend")


def _model_key(perf, kv_tokens: float = math.inf, requests: float = math.inf) -> tuple:
    """What a simulation reads of ``perf`` (a ``PerfModel`` is a function of its model, hardware and server settings,
    grid/twin/perf.py): its class, calibration coefficients, the model's and the hardware's every field (a test or a
    user may define two under one name) and the settings as the simulation sees them: the MoE runner flag as the kernel
    class it resolves to (``PerfModel.moe_runner_class``, the only thing the model reads of it), the memory fraction
    as the KV pool and running-request cap it yields (each at most ``kv_tokens`` / ``requests``, what the simulated
    requests can use), without :data:`NOT_TIMED`."""
    cfg = dataclasses.replace(perf.cfg, moe_runner_backend=perf.moe_runner_class, mem_fraction_static=None,
                              **{k: None for k in NOT_TIMED})
    return (type(perf).__name__, getattr(perf, "coefficients", None), perf.model.model_dump_json(),
            perf.hardware.model_dump_json(), cfg, min(perf.kv_capacity_tokens, kv_tokens),
            min(perf.max_running_requests, requests))


def _wave_key(perf, tokens: int, requests: int) -> tuple:
    if len(_WAVES) > _WAVES_MAX:
        _WAVES.clear()
    return _model_key(perf, tokens, requests)


def _repeat(res, waves: int):
    """``res`` (one wave's ``SimResult``) as ``waves`` back-to-back waves: the same per-request timings repeated,
    ``waves`` times the duration."""
    if waves <= 1:
        return res
    from grid.twin.simulate import SimResult

    return SimResult(requests=list(res.requests) * waves, duration_s=res.duration_s * waves, steps=res.steps * waves)


def _meets(row: dict, slo, reqs_ok: list[bool]) -> bool:
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        limit = getattr(slo, key, None)
        if limit is not None and row[key] and _percentile(row[key], slo.percentile) > limit:
            return False
    return True


def _goodput(row: dict, slo) -> float:
    n = len(row["e2e_ms"])
    if not n or row["duration_s"] <= 0:
        return 0.0
    good = 0
    for i in range(n):
        ok = all(getattr(slo, key, None) is None or i >= len(row[key]) or row[key][i] <= getattr(slo, key)
                 for key in ("ttft_ms", "tpot_ms", "e2e_ms"))
        good += ok
    return good / row["duration_s"]


def score(spec: RunSpec, rows: list[dict]) -> float | None:
    """The objective's score of the forecast points (grid/report/select.py OBJECTIVES: its metric, direction and
    points), over the points meeting the SLOs; None when none does."""
    from grid.report.select import OBJECTIVES

    obj = OBJECTIVES[spec.objective.kind]
    slo = spec.objective.slo
    if spec.objective.kind == "max_capacity":
        held = [r["point_value"] for r in rows if r.get("slo_held")]
        return max(held) if held else None
    for row in rows:
        row["goodput_req_per_s"] = _goodput(row, slo)
    ok = [r for r in obj.points(rows) if _meets(r, slo, [])] if rows else []
    values = [r[obj.metric] for r in ok if r.get(obj.metric) is not None and not math.isnan(r[obj.metric])]
    if not values:
        return None
    return max(values) if obj.higher_is_better else min(values)


def forecast(spec: RunSpec, plan: TrialPlan, version: str, coefficients=None) -> Forecast | None:
    """The twin's forecast of ``plan``, with ``coefficients`` (grid/twin/calibrate.py ``Coefficients``: the twin
    calibrated on measurements; None: the spec-sheet model); None when the twin's argument checks refuse it, or
    its spec-sheet forecasts of the hardware need a calibration first (a CPU host, :func:`_model`).
    ``load_s`` counts every level ``load.repeats`` times (the score is the same: the twin's forecast of a level does
    not change between repeats)."""
    perf = _model(spec, plan, version, coefficients)
    if perf is None:
        return None
    startup = sum(perf.startup_phases_s().values())
    rows = _point_rows(spec, plan, perf)
    value = None if unforecastable_load(plan.load) else score(spec, rows)
    if spec.objective.kind == "max_capacity" and value is not None:
        # what the trial will run: the bisection from the twin's bracket, if the measurements came out as forecast
        rows = capacity_probes(spec, plan, perf, *capacity_bracket(spec, value),
                               max_probes=spec.objective.capacity_max_probes)
    # each level is measured load.repeats times (its own steady-state warm-up wave each time); probes once
    repeats = 1 if spec.objective.kind == "max_capacity" else plan.load.repeats
    return Forecast(startup, repeats * sum(r["duration_s"] + r.get("overhead_s", 0.0) for r in rows), value)
