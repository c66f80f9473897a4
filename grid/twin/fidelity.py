"""Fidelity of the twin against published serving measurements (``grid/twin/calibration_rows.yaml``).

Pure apart from reading the rows file and the ``conf/`` specs: each run is replayed in virtual time
(:func:`grid.twin.simulate.simulate`) with the client behaviour the source states (burst, Poisson rate or closed-loop
concurrency; bench_serving's "random" lengths or a ShareGPT-like length mix) and each published metric is compared
with the twin's value computed the way bench_serving computes it:

* ``ttft_ms``: time from sending a request to its first token (mean or median over requests).
* ``tpot_ms``: per request ``(e2e - ttft) / (output_tokens - 1)`` for requests with more than one output token.
* ``output_tok_per_s`` / ``input_tok_per_s``: tokens / (first send to last completion).

Used by ``experiments/twin_fidelity.py`` (prints the table and the geometric-mean errors) and
``tests/twin/test_calibration.py`` (per-row tolerances).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grid.config.specs import HardwareSpec, ModelSpec
from grid.twin.perf import PerfModel, ServingConfig
from grid.twin.scheduler import TwinRequest
from grid.twin.simulate import SimResult, simulate

ROWS_FILE = Path(__file__).with_name("calibration_rows.yaml")
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
SHAREGPT_SIGMA = 1.0  # log-normal spread of ShareGPT lengths (assumption; see calibration_rows.yaml)
SHAREGPT_MAX_TOKENS = 4096  # bench_serving drops longer ShareGPT conversations (context filter)
SPLITS = ("fitted", "held_out", "rejected")  # rejected: shown, never fitted or scored (reject_reason says why)
METRICS = ("ttft_ms", "tpot_ms", "output_tok_per_s", "input_tok_per_s")
# Optional `tail` block of a closed-loop run: published figures that are never scored or fitted, read by ttft_split.
TAIL_KEYS = ("ttft_p99_ms", "itl_mean_ms", "itl_p99_ms")
STREAM_INTERVAL_DEFAULT = 1  # SGLang's --stream-interval default (server_args.py)


@dataclass(frozen=True)
class Row:
    """One published figure and the twin's value for it."""

    run_id: str
    split: str  # "fitted" | "held_out" | "rejected"
    source: str
    engine: str
    condition: str
    metric: str
    stat: str  # "mean" | "median" | "" for throughputs
    published: float
    twin: float
    tol: float | None

    @property
    def error(self) -> float:
        """Relative error of the twin, (twin - published) / published."""
        return self.twin / self.published - 1.0


def load_runs(path: Path = ROWS_FILE) -> list[dict[str, Any]]:
    """The runs of the rows file. Raises ``ValueError`` naming the run and key on a malformed entry."""
    runs = yaml.safe_load(path.read_text())["runs"]
    for r in runs:
        for key in ("id", "split", "source", "model", "hardware", "workload", "metrics"):
            if key not in r:
                raise ValueError(f"{path.name}: run {r.get('id', '?')!r} lacks {key!r}")
        if r["split"] not in SPLITS:
            raise ValueError(f"{path.name}: run {r['id']!r}: split must be one of {SPLITS}, not {r['split']!r}")
        for m in r["metrics"]:
            if m not in METRICS:
                raise ValueError(f"{path.name}: run {r['id']!r}: metric {m!r} not one of {METRICS}")
        tail = r.get("tail")
        if tail is not None:
            if not r["workload"].get("max_concurrency"):
                raise ValueError(f"{path.name}: run {r['id']!r}: 'tail' needs a closed-loop workload "
                                 "(workload.max_concurrency)")
            if sorted(tail) != sorted(TAIL_KEYS):
                raise ValueError(f"{path.name}: run {r['id']!r}: 'tail' keys must be {list(TAIL_KEYS)}, "
                                 f"not {sorted(tail)}")
    return runs


def conf_spec(kind: str, name: str):
    data = yaml.safe_load((CONF_DIR / kind / f"{name}.yaml").read_text())
    return ModelSpec(**data) if kind == "model" else HardwareSpec(**data)


def perf_for(run: dict[str, Any]) -> PerfModel:
    """The twin's performance model for a run (its model, hardware and flags)."""
    return PerfModel(conf_spec("model", run["model"]), conf_spec("hardware", run["hardware"]), ServingConfig(**run.get("flags", {})))


def workload(run: dict[str, Any], seed: int = 0) -> tuple[list[tuple[float, TwinRequest]], int | None]:
    """((send time, request) pairs, max concurrency) for a run's workload; lengths drawn with a fixed seed."""
    w = run["workload"]
    rng = random.Random(seed)
    n = int(w["num_prompts"])
    reqs: list[tuple[int, int]] = []
    if w["kind"] == "random":
        r = float(w.get("range_ratio", 0.0))
        for _ in range(n):
            i = rng.randint(max(1, int(w["input_len"] * r)), w["input_len"])
            o = rng.randint(max(1, int(w["output_len"] * r)), w["output_len"])
            reqs.append((i, o))
    elif w["kind"] == "sharegpt":
        s = SHAREGPT_SIGMA

        def draw(mean: float) -> int:
            return int(min(SHAREGPT_MAX_TOKENS, max(4, rng.lognormvariate(math.log(mean) - s * s / 2, s))))

        reqs = [(draw(w["mean_input"]), draw(w["mean_output"])) for _ in range(n)]
    else:
        raise ValueError(f"run {run['id']!r}: workload kind {w['kind']!r} not one of ['random', 'sharegpt', 'decode']")
    rate = w.get("request_rate")
    t, out = 0.0, []
    for k, (i, o) in enumerate(reqs):
        out.append((t, TwinRequest(f"{run['id']}-{k}", i, o)))
        if rate:
            t += rng.expovariate(float(rate))
    return out, w.get("max_concurrency")


def measure(run: dict[str, Any], res: SimResult) -> dict[str, dict[str, float]]:
    """The twin's value of every metric, both statistics, from a simulated run."""
    done = [r for r in res.requests if r.finish_reason != "abort"]
    ttft = [1e3 * r.ttft_s for r in done]
    tpot = [1e3 * (r.e2e_s - r.ttft_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    dur = res.duration_s
    return {
        "ttft_ms": {"mean": statistics.fmean(ttft), "median": statistics.median(ttft)},
        "tpot_ms": {"mean": statistics.fmean(tpot) if tpot else 0.0, "median": statistics.median(tpot) if tpot else 0.0},
        "output_tok_per_s": {"": res.output_tokens / dur},
        "input_tok_per_s": {"": res.input_tokens / dur},
    }


def decode_only(run: dict[str, Any], perf: PerfModel) -> dict[str, dict[str, float]]:
    """A decode-only sweep point (``workload: {kind: decode, concurrency: c, context: k}``: ``c`` requests decoding
    together, each holding ``k`` tokens of context, as voipmonitor/rtx6kpro's ``llm_decode_bench.py`` measures):
    ``output_tok_per_s`` = c / one decode step, ``tpot_ms`` = the step."""
    w = run["workload"]
    c, k = int(w["concurrency"]), int(w.get("context", 0))
    step = perf.decode_step_s(c, c * (k + 1))
    return {"output_tok_per_s": {"": c / step}, "tpot_ms": {"mean": 1e3 * step, "median": 1e3 * step}}


def evaluate(runs: list[dict[str, Any]] | None = None) -> list[Row]:
    """Replay every run and return one ``Row`` per published metric."""
    rows: list[Row] = []
    for run in runs if runs is not None else load_runs():
        values = replay(run, perf_for(run))
        for metric, spec in run["metrics"].items():
            stat = spec.get("stat", "")
            rows.append(Row(run["id"], run["split"], run["source"], run.get("engine", ""), run.get("condition", ""),
                            metric, stat, float(spec["value"]), values[metric][stat], spec.get("tol")))
    return rows


def replay(run: dict[str, Any], perf: Any) -> dict[str, dict[str, float]]:
    """The twin's value of every metric (both statistics) for ``run`` on ``perf`` (any performance model: a
    calibrated one, grid/twin/coefficients.py, included)."""
    if run["workload"]["kind"] == "decode":
        return decode_only(run, perf)
    reqs, conc = workload(run)
    return measure(run, simulate(perf, reqs, max_concurrency=conc))


def observation(run: dict[str, Any]):
    """A published run as a calibration measurement (``grid.twin.coefficients.Observation``): its published metrics
    that a calibration fits (``calibrate.METRICS``; ``input_tok_per_s`` follows the same duration as output tok/s
    and is left out), each at the statistic the source states; ``source`` is the run id."""
    from grid.twin.coefficients import METRICS as FITTED, Observation

    stats = {m: spec.get("stat", "") for m, spec in run["metrics"].items() if m in FITTED}

    def values(perf: Any) -> dict[str, float]:
        twin = replay(run, perf)
        return {m: twin[m][stat] for m, stat in stats.items()}

    return Observation(source=run["id"], perf=perf_for(run), replay=values,
                       measured={m: float(run["metrics"][m]["value"]) for m in stats})


@dataclass(frozen=True)
class TtftSplit:
    """A closed-loop run's mean TTFT split into its first wave and its steady state (all times in ms).

    ``concurrency`` c requests are sent at time 0 (the first wave), ``requests`` N in all.

    * ``published_rest_ms``: the published steady-state mean if the first wave took the published P99,
      ``(N x mean - c x P99) / (N - c)``.
    * ``twin_first_wave_ms`` / ``twin_rest_ms``: the twin's mean TTFT over the first c requests / the others.
    * ``prefill_stall_ms``: published P99 minus mean inter-chunk latency. A chunk spans ``--stream-interval`` decode
      steps; one during which another request is prefilled is longer by that prefill, so this is about one prefill
      as the running requests see it, meaningful when ``stalled_chunk_fraction`` (about
      ``stream_interval x (c - 1) / mean output length``) is above 1%.
    * ``twin_prefill_ms``: the twin's prefill step for one prompt of the run's mean input length.
    * ``error_if_first_wave`` / ``error_if_rest``: the twin's mean TTFT error (fraction) if only its first wave took
      the published P99 / only its steady state took ``published_rest_ms``.
    * ``requests_at_p99``: the fewest requests whose TTFT the published P99 shows to be at least the P99. numpy's
      P99 of n values interpolates between the sorted values at ``floor`` and ``ceil`` of ``0.99 (n - 1)``, so only
      the ``n - ceil(0.99 (n - 1))`` slowest are certainly at or above it (1 of 80, 2 of 160, 4 of 320, 7 of 640).
      ``published_rest_ms`` assumes all ``concurrency`` first-wave requests took the P99; the P99 itself says only
      that ``requests_at_p99`` did.
    """

    concurrency: int
    requests: int
    published_mean_ms: float
    published_p99_ms: float
    published_rest_ms: float
    twin_mean_ms: float
    twin_p99_ms: float
    twin_first_wave_ms: float
    twin_rest_ms: float
    prefill_stall_ms: float
    stalled_chunk_fraction: float
    twin_prefill_ms: float
    error_if_first_wave: float
    error_if_rest: float
    requests_at_p99: int


def ttft_split(run: dict[str, Any]) -> TtftSplit:
    """Replay a run that has a ``tail`` block (see ``TAIL_KEYS``) and split its mean TTFT. Raises ``ValueError``
    naming the run when it has no ``tail`` block or no ``ttft_ms`` mean."""
    tail = run.get("tail")
    ttft_spec = run["metrics"].get("ttft_ms", {})
    if not tail or ttft_spec.get("stat") != "mean":
        raise ValueError(f"run {run['id']!r}: ttft_split needs a 'tail' block and a mean ttft_ms")
    import numpy as np  # bench_serving's percentiles are numpy's (linear interpolation)

    perf = perf_for(run)
    reqs, conc = workload(run)
    c = int(conc or 1)
    res = simulate(perf, reqs, max_concurrency=conc)
    ttft = [1e3 * r.ttft_s for r in res.requests if r.finish_reason != "abort"]
    n = len(ttft)
    mean, p99 = float(ttft_spec["value"]), float(tail["ttft_p99_ms"])
    pub_rest = (n * mean - c * p99) / (n - c)
    first, rest = statistics.fmean(ttft[:c]), statistics.fmean(ttft[c:])
    interval = int(run.get("flags", {}).get("stream_interval", STREAM_INTERVAL_DEFAULT))
    mean_out = statistics.fmean(r.max_new_tokens for _, r in reqs)
    mean_in = statistics.fmean(r.input_tokens for _, r in reqs)
    return TtftSplit(
        concurrency=c, requests=n, published_mean_ms=mean, published_p99_ms=p99, published_rest_ms=pub_rest,
        twin_mean_ms=statistics.fmean(ttft), twin_p99_ms=float(np.percentile(ttft, 99)),
        twin_first_wave_ms=first, twin_rest_ms=rest,
        prefill_stall_ms=float(tail["itl_p99_ms"]) - float(tail["itl_mean_ms"]),
        stalled_chunk_fraction=interval * (c - 1) / mean_out,
        twin_prefill_ms=1e3 * perf.prefill_step_s(round(mean_in)),
        error_if_first_wave=(c * p99 + (n - c) * rest) / n / mean - 1,
        error_if_rest=(c * first + (n - c) * pub_rest) / n / mean - 1,
        requests_at_p99=n - math.ceil(0.99 * (n - 1)),
    )


def geomean_abs_error(rows: list[Row]) -> float:
    """Geometric mean of |twin/published - 1| (each floored at 0.5% so one exact row does not zero it)."""
    if not rows:
        return float("nan")
    return math.exp(statistics.fmean(math.log(max(0.005, abs(r.error))) for r in rows))


def uncertainty_cells(rows: list[Row], runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The spread table of :mod:`grid.twin.uncertainty` from replayed rows (fitted and held out; rejected left out):
    each row's cell is its metric, its run's model kind (MoE or dense, from conf/model) and GPU family (conf/hardware
    SM version, ``-multinode`` across nodes)."""
    from grid.twin.uncertainty import hardware_family, spread_table

    by_id = {r["id"]: r for r in (runs if runs is not None else load_runs())}
    errors = []
    for row in rows:
        if row.split == "rejected":
            continue
        run = by_id[row.run_id]
        model, hw = conf_spec("model", run["model"]), conf_spec("hardware", run["hardware"])
        errors.append((row.metric, model.is_moe, hardware_family(hw), row.error))
    return spread_table(errors)


def summary(rows: list[Row]) -> dict[tuple[str, str], tuple[int, float]]:
    """(split, metric) -> (rows, geometric-mean absolute error); metric "all" pools the split."""
    out: dict[tuple[str, str], tuple[int, float]] = {}
    for split in ("fitted", "held_out"):
        sel = [r for r in rows if r.split == split]
        for metric in (*METRICS, "all"):
            part = sel if metric == "all" else [r for r in sel if r.metric == metric]
            if part:
                out[(split, metric)] = (len(part), geomean_abs_error(part))
    return out
