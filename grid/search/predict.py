"""The twin's forecast of one configuration, in virtual time (no HTTP, no sleeping; pure): modelled startup seconds
(``PerfModel.startup_phases_s``), modelled seconds of every load point and the objective's score.

Each load point is the point the trial runs (grid/plan.py ``point_of``: its request count, warm-up wave, staggered
start and tail, its arrivals with its seed), replayed through grid/twin/simulate.py ``replay`` with the same scheduler
and performance model as the live twin and summarized by the same ``grid.metrics.loadpoint.summarize``: on the twin's
virtual clock the forecast of a point is its measurement (tests/twin/test_replay.py), and a forecast point counts
for the score as the report judges a measured one (``meets_slos``). Lengths are the configured ones (``range_ratio``
and datasets other than ``random`` are not modelled: their prompts are known only when the load runs), and each
prompt is new to the radix cache.

With objective ``max_capacity`` the load points are the twin's own capacity bisection (:func:`capacity_probes`) and the
score is the highest rate at which the SLOs held.

Used by the pre-run cost estimate (grid/search/plan.py), the search policies (grid/search/policy.py) and early
stopping across load levels (:func:`level_forecasts`, grid/search/levels.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grid.config.schema import RunSpec
from grid.search.knowledge import plan_model
from grid.plan import TrialPlan

if TYPE_CHECKING:
    from grid.loadgen.runner import LoadPointResult


@dataclass(frozen=True)
class Forecast:
    """The twin's forecast of one configuration. ``value``: the objective's score (None: no point meets the SLOs,
    or the twin cannot model it); ``startup_s``: modelled seconds of the launch (once per launch); ``load_s``:
    modelled seconds of all its load points, each level counted ``load.repeats`` times as the trial measures it
    (grid/plan.py ``load_points``; capacity probes are not repeated, grid/sweep/measure.py ``run_points``)."""

    startup_s: float
    load_s: float
    value: float | None
    gpus: int | None = None  # GPUs the launch holds when not the hardware's all (a deployment's servers)

    @property
    def gpu_s(self) -> float:
        """Modelled seconds the launch holds its GPUs (startup + load)."""
        return self.startup_s + self.load_s


def _simulate_point(perf, load, kind: str, level: float, slo=None, seed: int | None = None) -> dict:
    """The load point ``kind`` / ``level`` of ``load`` as the trial measures it, replayed on the twin (grid/twin/
    simulate.py ``replay``: the same plan of warm-up wave, staggered start, requests, tail and arrivals with the
    point's seed, or ``seed`` for a capacity probe; the same scheduler and performance model) and summarized as a
    measured point is (``grid.metrics.loadpoint.summarize`` under ``slo``, a ``grid.metrics.loadpoint.SLO``), so a
    forecast of a point and the live twin's measurement of it are one simulation (tests/twin/test_replay.py).
    The row has the measured row's metric columns (``duration_s``: its window; ``held_s``: what the point holds the
    server, warm-up requests and wave included; modelled s), ``status``, ``point_kind`` and ``point_value``. Memoized by model, point, lengths and SLO (:func:`_model_key`)."""
    from grid.metrics.loadpoint import SLO_LATENCY_KEYS, slo_values, summarize
    from grid.metrics.request import request_metrics
    from grid.plan import point_of

    point = point_of(load, kind, level)
    if seed is not None:
        point = dataclasses.replace(point, seed=seed)
    # at most this many requests are in flight (a closed loop's streams, an open loop's cap or all of it), each
    # holding at most input + output KV tokens: a larger pool or running cap never binds
    inflight = int(point.value) if point.kind == "concurrency" else (point.max_concurrency or point.num_prompts)
    model_key = (tuple(_model_key(s.perf) for s in perf.servers) + (repr(perf.deployment), perf.cost)
                 if _deployed(perf) else _model_key(perf, inflight * (load.input_len + load.output_len), inflight))
    key = (model_key, point, load.input_len, load.output_len)
    if (key, slo) not in _ROWS:
        if len(_ROWS) > _WAVES_MAX:
            _ROWS.clear()
        if key not in _REPLAYS:
            from grid.twin.simulate import replay

            if len(_REPLAYS) > _WAVES_MAX:
                _REPLAYS.clear()
            moved: list[float] = []
            _REPLAYS[key] = (perf.replay(point, load.input_len, load.output_len, moved) if _deployed(perf)
                             else replay(perf, point, load.input_len, load.output_len), moved)
        res, moved = _REPLAYS[key]
        row: dict = dict(summarize(res, slo))
        # SGLang's sglang:kv_transfer_latency_ms as the sampler reduces it (grid/server/metrics_scrape.py)
        row.update(srv_kv_transfers=len(moved) if moved else None,
                   srv_kv_transfer_ms_mean=1000 * sum(moved) / len(moved) if moved else None)
        if slo is not None:  # each SLO's percentile value, as the trial adds them to its row (grid/sweep/measure.py)
            requests = [{"status": r.status, "ttft_ms": m.ttft_ms, "tpot_ms": m.tpot_ms, "e2e_ms": m.e2e_ms}
                        for r in res.records for m in (request_metrics(r, res.time_scale),)]
            judged = slo_values(requests, row["duration_s"], slo)
            row.update({k: judged[k] for k in SLO_LATENCY_KEYS.values()})
        row.update(point_kind=kind, point_value=level,
                   status="ok" if row["completed"] == row["requests_total"] else "failed")
        _ROWS[(key, slo)] = row
    return dict(_ROWS[(key, slo)])


def _deployed(perf) -> bool:
    """Whether ``perf`` is a deployment's model (grid/twin/deployment.py ``DeploymentModel``), not one server's."""
    from grid.twin.deployment import DeploymentModel

    return isinstance(perf, DeploymentModel)


def replay_point(perf, load, kind: str, level: float) -> dict[str, float]:
    """The twin's median TTFT (ms), median TPOT (ms), output tok/s and, for a deployment that moves KV, mean KV
    transfer (ms) of the load point ``kind`` / ``level`` of
    ``load`` as the trial measures it (:func:`_simulate_point`, repeat 0 with its seed: grid/plan.py ``point_of``),
    keyed as grid/twin/coefficients.py ``METRICS``: what a calibration compares with the measured point. The replay and
    the live twin agree to float precision (tests/twin/test_replay.py)."""
    row = _simulate_point(perf, load, kind, level)

    def value(name: str) -> float:
        v = row.get(name)
        return float(v) if isinstance(v, (int, float)) else math.nan

    out = {"ttft_ms": value("ttft_median_ms"), "tpot_ms": value("tpot_median_ms"),
           "output_tok_per_s": value("output_tok_per_s")}
    if row["srv_kv_transfer_ms_mean"] is not None:
        out["kv_transfer_ms"] = value("srv_kv_transfer_ms_mean")
    return out


def _slo(spec: RunSpec):
    """``objective.slo`` as the measurement applies it (``grid.metrics.loadpoint.SLO``, as the trial builds it)."""
    from grid.metrics.loadpoint import SLO

    slo = spec.objective.slo
    return SLO(slo.ttft_ms, slo.tpot_ms, slo.e2e_ms, slo.percentile)


def _counts(row: dict, slo) -> bool:
    """Whether a forecast point counts for the score as the report judges a measured one (``meets_slos``: status
    ``ok`` and every SLO's percentile within its target; without an SLO, status ``ok``)."""
    from grid.report.select import meets_slos

    met = meets_slos(row, slo)
    return row["status"] == "ok" if met is None else met


def _point_rows(spec: RunSpec, plan: TrialPlan, perf) -> list[dict]:
    load = plan.load
    if _bisects(spec):
        return capacity_probes(spec, plan, perf)
    levels = [("concurrency", float(c)) for c in load.concurrency] + [("rate", float(r)) for r in load.request_rate]
    return [_simulate_point(perf, load, kind, level, _slo(spec)) for kind, level in levels]


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
        row = _simulate_point(perf, plan.load, "rate", rate, _slo(spec), seed=plan.load.seed * 1000 + len(probes))
        row["slo_held"] = _counts(row, slo)
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
    from grid.twin.coefficients import calibrated
    from grid.twin.perf import forecasts_need_calibration

    if coefficients is None and forecasts_need_calibration(spec.hardware):
        return None
    perf = plan_model(spec, plan, version)  # a deployment of several servers: grid/twin/deployment.py
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
    load, slo = plan.load, _slo(spec)
    given = bool(slo.given())
    out = {}
    for kind, level in [("concurrency", float(c)) for c in load.concurrency] + [("rate", float(r))
                                                                               for r in load.request_rate]:
        row = _simulate_point(perf, load, kind, level, slo)
        value = row.get(metric)
        out[(kind, level)] = LevelForecast(None if not isinstance(value, (int, float)) or math.isnan(value)
                                           else float(value), row["held_s"],
                                           _counts(row, spec.objective.slo) if given else None)
    return out


_WAVES_MAX = 4096
#: Replays (``grid.loadgen.runner.LoadPointResult``, with a deployment's KV transfers in s) by (model, load point,
#: lengths): a replay is a function of them
#: alone (:func:`_model_key`), and the plan, the early stopping and the calibration ask for the same ones again (the
#: main job's 25 forecast configurations are one model to the simulation: 3 replays, not 75); their summaries by SLO
#: too. At most ``_WAVES_MAX`` each.
_REPLAYS: dict[tuple, tuple[LoadPointResult, list[float]]] = {}
_ROWS: dict[tuple, dict] = {}
#: Server settings the performance model never reads once resolved (grid/twin/perf.py): the DSA backends decide what
#: fails (grid/twin/failures.py) and what the log says, not a step's time (it reads ``dsa_active``, from the model and
#: the GPU); tests/search/test_search.py holds step times equal across them.
NOT_TIMED = ("dsa_prefill_backend", "dsa_decode_backend")
#: Schedule policies whose order does not depend on prefix-cache hits (grid/twin/scheduler.py ``Scheduler._order``);
#: the others (lpm, dfs-weight) order a replay's requests, none of which hits the cache, as fcfs.
ORDERED_WITHOUT_CACHE = ("lof", "priority", "random")


def _model_key(perf, kv_tokens: float = math.inf, requests: float = math.inf) -> tuple:
    """What a simulation reads of ``perf`` (a ``PerfModel`` is a function of its model, hardware and server settings,
    grid/twin/perf.py): its class, calibration coefficients, the model's and the hardware's every field (a test or a
    user may define two under one name) and the settings as the simulation sees them: the MoE runner flag as the kernel
    class it resolves to (``PerfModel.moe_runner_class``, the only thing the model reads of it), the memory fraction
    as the KV pool and running-request cap it yields (each at most ``kv_tokens`` / ``requests``, what the simulated
    requests can use), without :data:`NOT_TIMED`."""
    # a replay's prompts are new to the radix cache: the prefix-ordered policies then order as fcfs does
    # (grid/twin/scheduler.py Scheduler._order)
    policy = (perf.cfg.schedule_policy or "fcfs").lower()
    cfg = dataclasses.replace(perf.cfg, moe_runner_backend=perf.moe_runner_class, mem_fraction_static=None,
                              schedule_policy=policy if policy in ORDERED_WITHOUT_CACHE else "fcfs",
                              **{k: None for k in NOT_TIMED})
    return (type(perf).__name__, getattr(perf, "coefficients", None), perf.model.model_dump_json(),
            perf.hardware.model_dump_json(), cfg, min(perf.kv_capacity_tokens, kv_tokens),
            min(perf.max_running_requests, requests))


def score(spec: RunSpec, rows: list[dict]) -> float | None:
    """The objective's score of the forecast points (grid/report/select.py OBJECTIVES: its metric, direction and
    points), over the points meeting the SLOs; None when none does."""
    from grid.report.select import OBJECTIVES

    obj = OBJECTIVES[spec.objective.kind]
    slo = spec.objective.slo
    if _bisects(spec):
        held = [r["point_value"] for r in rows if r.get("slo_held")]
        return max(held) if held else None
    ok = [r for r in obj.points(rows) if _counts(r, slo)] if rows else []
    values = [r[obj.metric] for r in ok if isinstance(r.get(obj.metric), (int, float)) and not math.isnan(r[obj.metric])]
    if not values:
        return None
    return max(values) if obj.higher_is_better else min(values)


def forecast(spec: RunSpec, plan: TrialPlan, version: str, coefficients=None) -> Forecast | None:
    """The twin's forecast of ``plan``, with ``coefficients`` (grid/twin/coefficients.py ``Coefficients``: the twin
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
    if _bisects(spec) and value is not None:
        # what the trial will run: the bisection from the twin's bracket, if the measurements came out as forecast
        rows = capacity_probes(spec, plan, perf, *capacity_bracket(spec, value),
                               max_probes=spec.objective.capacity_max_probes)
    # each level is measured load.repeats times (its own steady-state warm-up wave each time); probes once
    repeats = 1 if _bisects(spec) else plan.load.repeats
    return Forecast(startup, repeats * sum(r["held_s"] for r in rows), value,
                    perf.gpus if _deployed(perf) else None)


def _bisects(spec: RunSpec) -> bool:
    """Whether the objective runs its own rate bisection instead of the configured levels (``Objective.bisects_rate``)."""
    from grid.report.select import OBJECTIVES

    return OBJECTIVES[spec.objective.kind].bisects_rate
