"""The twin calibrated on the sweep's own measurements: the measured load points as calibration
observations (grid/twin/coefficients.py), the run's calibration file, and a saved calibration as the starting point of a
later sweep on the same hardware (``twin.calibration=PATH``).

``calibration.json`` in the run directory (docs/schema.md) holds the coefficients, their log standard deviations, the
key it applies to (hardware, model, engine kind and release), the load points it was fitted on, the outliers it left
out and, per metric, the twin's error on those points: the spec sheet's, the calibrated forecast's (made before each
configuration was measured) and the fitted one's. After every measured configuration its points update the
calibration (a Bayesian update: the calibration so far is the prior, so each point is replayed only when it is added;
:func:`updated`) and the forecasts of the configurations not yet run are recomputed with it (grid/search/plan.py
``SearchPlan.recalibrate``). A resumed sweep fits every recorded point at the start (:func:`starting`).

Only load points that count enter a calibration: status ``ok``, not host noise (grid/metrics/hostnoise.py); failed,
partial and not-run points, and the configurations whose trial failed, never do; nor do loads the
twin's replay cannot forecast (sessions, grid/search/predict.py ``unforecastable_load``): their prompts grow with
their history and hit the prefix cache, so they would teach the replay of independent prompts the wrong speed.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grid.config.schema import ConfigError, RunSpec
from grid.plan import TrialPlan
from grid.twin.coefficients import COEFFICIENTS, PRIOR_SD, Calibration, Coefficients, Observation, Outlier, fit
from grid.storage.rows import LoadPointRow

CALIBRATION_FILE = "calibration.json"
#: Measured columns of ``load_points`` -> the calibration metric each is (grid/twin/coefficients.py ``METRICS``).
MEASURED = {"ttft_median_ms": "ttft_ms", "tpot_median_ms": "tpot_ms", "output_tok_per_s": "output_tok_per_s",
            "srv_kv_transfer_ms_mean": "kv_transfer_ms"}


def key(spec: RunSpec, version: str) -> dict[str, str]:
    """What a calibration applies to: the node's hardware, the model, the engine kind and its release."""
    return {"hardware": spec.hardware.name, "model": spec.model.name, "engine": spec.engine.kind, "release": version}


def counts(row: Mapping[str, Any]) -> bool:
    """Whether a ``load_points`` row may enter a calibration: measured ``ok`` in a trial that did not fail, not host
    noise."""
    from grid.metrics.hostnoise import host_noise

    return row["status"] == "ok" and row["trial_status"] in (None, "ok") and not host_noise(row)


def observations(spec: RunSpec, plans: Mapping[str, TrialPlan], rows: Sequence[LoadPointRow],
                 version: str) -> list[Observation]:
    """One observation per configuration and load level measured (its repeats' geometric mean per metric), from
    ``load_points`` rows; configurations the twin refuses, and levels without a positive measured metric, are left
    out. ``source`` is ``<label> (<hash>) <kind> <level>``."""
    from grid.search.knowledge import plan_model
    from grid.search.predict import unforecastable_load

    groups: dict[tuple[str, str, float], list[Mapping[str, Any]]] = {}
    for r in rows:
        if (counts(r) and r["config_hash"] in plans and r["point_kind"] in ("concurrency", "rate")
                and not unforecastable_load(plans[r["config_hash"]].load)):
            groups.setdefault((r["config_hash"], r["point_kind"], float(r["point_value"])), []).append(r)
    out = []
    perfs: dict[str, Any] = {}
    for (h, kind, level), rs in sorted(groups.items()):
        if h not in perfs:
            perfs[h] = plan_model(spec, plans[h], version)
        if perfs[h] is None:
            continue
        measured = {}
        for col, metric in MEASURED.items():
            values = [float(r[col]) for r in rs if r.get(col) is not None and r[col] > 0 and math.isfinite(r[col])]
            if values:
                measured[metric] = statistics.geometric_mean(values)
        if not measured:
            continue
        plan = plans[h]
        out.append(Observation(f"{plan.label} ({h}) {kind} {level:g}", perfs[h],
                               replayer(plan, kind, level), measured))
    return out


def replayer(plan: TrialPlan, kind: str, level: float):
    """``perf -> metrics``: the load point ``kind`` / ``level`` of ``plan`` replayed on a twin model as the load
    generator ran it (grid/search/predict.py ``replay_point``): an ``Observation``'s replay."""
    from grid.search.predict import replay_point

    return lambda perf: replay_point(perf, plan.load, kind, level)


def fitted(spec: RunSpec, plans: Mapping[str, TrialPlan], version: str, prior: Calibration | None) -> Calibration:
    """The calibration of every load point the run directory has recorded that counts (:func:`counts`), from
    ``prior`` (``prior`` itself when none counts). Writes nothing."""
    from grid.storage.parquet import read_points

    rows = read_points(spec.run_dir)
    return fit(observations(spec, plans, rows, version), prior)


def updated(spec: RunSpec, plans: Mapping[str, TrialPlan], version: str, config_hash: str,
            current: Calibration | None, saved: Calibration | None) -> Calibration:
    """The calibration after ``config_hash`` was measured: its recorded points that count fitted from ``current``
    (the run's calibration so far, as the prior of a Bayesian update), or from ``saved`` (``twin.calibration``) or the
    spec sheet before anything was fitted. Writes nothing."""
    from grid.storage.parquet import read_points

    rows = read_points(spec.run_dir, {config_hash})
    obs = observations(spec, plans, rows, version)
    return fit(obs, current, update=True) if current is not None else fit(obs, saved)


def starting(spec: RunSpec, plans: Mapping[str, TrialPlan], version: str) -> tuple[Calibration | None,
                                                                                       Calibration | None]:
    """(prior, calibration) a sweep starts from: ``twin.calibration`` loaded and checked against this sweep's
    :func:`key` (``ConfigError`` before any launch when it does not apply), and that prior refitted on what the run
    directory already recorded (a resumed sweep); (None, None) with ``twin.calibrate=false`` or nothing to start from."""
    if not spec.twin.calibrate:
        return None, None
    prior = load(spec.twin.calibration, key(spec, version)) if spec.twin.calibration else None
    cal = fitted(spec, plans, version, prior)
    return prior, (None if cal == Calibration() else cal)


def current(spec: RunSpec) -> Coefficients | None:
    """The coefficients of the run directory's ``calibration.json`` (the sweep's calibration so far, which each trial's
    early stopping and capacity bracket use: grid/sweep/measure.py ``level_plan``); None with ``twin.calibrate=false``
    or before the first configuration was measured."""
    path = Path(spec.run_dir) / CALIBRATION_FILE
    if not spec.twin.calibrate or not path.exists():
        return None
    try:
        return load(path).coefficients
    except ConfigError:  # written as a whole (write) but unreadable: the spec-sheet twin, as before the first fit
        return None


def summary_line(cal: Calibration) -> str:
    """``Twin calibrated on 12 load points: decode 1.21x (1.12-1.31), ...; its error on them (spec sheet / forecast
    / fitted): ttft_ms 44% / 12% / 6%, ...``."""
    before, ahead, after = cal.error_before, cal.error_forecast, cal.error_after
    errs = ", ".join(f"{m} {before[m]:.0%} / {ahead[m]:.0%} / {after[m]:.0%}" for m in after)
    out = f"Twin calibrated on {len(cal.sources)} load points: {cal.text()}"
    if errs:
        out += f"; its error on them (spec sheet / forecast before each was measured / fitted): {errs}"
    if cal.outliers:
        out += "; left out as outliers: " + "; ".join(o.text() for o in cal.outliers)
    return out


def to_dict(k: Mapping[str, str], cal: Calibration) -> dict[str, Any]:
    return {"key": dict(k),
            "coefficients": {c: getattr(cal.coefficients, c) for c in COEFFICIENTS},
            "log_sd": dict(cal.sd), "sources": list(cal.sources),
            "outliers": [{"source": o.source, "metric": o.metric, "ratio": o.ratio} for o in cal.outliers],
            "error_before": cal.error_before, "error_forecast": cal.error_forecast, "error_after": cal.error_after,
            "residuals": [{"source": r[0], "metric": r[1], "spec_sheet": r[2], "forecast": r[3], "fitted": r[4]}
                          for r in cal.residuals]}


def write(path: Path, k: Mapping[str, str], cal: Calibration) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_dict(k, cal), indent=1, sort_keys=True))
    tmp.replace(path)


def load(path: str | Path, expected: Mapping[str, str] | None = None) -> Calibration:
    """The calibration saved at ``path`` (a :data:`CALIBRATION_FILE` or the run directory holding one). Raises
    ``ConfigError`` naming ``twin.calibration`` when it is missing, unreadable, or was fitted on other hardware, model
    or engine release than ``expected`` (:func:`key`)."""
    p = Path(path)
    if p.is_dir():
        p = p / CALIBRATION_FILE
    try:
        data = json.loads(p.read_text())
        # a coefficient a file predates is at its prior there; files of the one KV-transfer multiplier
        # (kv_transfer, on the fixed cost and the wire time alike) give it to both terms
        saved, saved_sd = dict(data["coefficients"]), dict(data["log_sd"])
        for k in ("kv_fixed", "kv_link"):
            if "kv_transfer" in saved and k not in saved:
                saved[k], saved_sd[k] = saved["kv_transfer"], saved_sd.get("kv_transfer", PRIOR_SD[k])
        coefficients = Coefficients(**{c: float(saved.get(c, 1.0)) for c in COEFFICIENTS})
        sd = {c: float(saved_sd.get(c, PRIOR_SD[c])) for c in COEFFICIENTS}
    except FileNotFoundError:
        raise ConfigError(f"twin.calibration={path}: no {CALIBRATION_FILE} there (a sweep's run directory writes "
                          "one after its first measured configuration)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"twin.calibration={path}: not a calibration file ({type(e).__name__}: {e})") from None
    if expected is not None:
        saved = data.get("key") or {}
        wrong = [f"{k} {saved.get(k)!r} (this sweep: {v!r})" for k, v in expected.items() if saved.get(k) != v]
        if wrong:
            raise ConfigError(f"twin.calibration={path} was fitted on other {', '.join(wrong)}; a calibration "
                              "applies to one hardware, model, engine and release")
    return Calibration(coefficients=coefficients, sd=sd, sources=tuple(data.get("sources", ())),
                       outliers=tuple(Outlier(o["source"], o["metric"], o["ratio"]) for o in data.get("outliers", ())),
                       residuals=tuple((r["source"], r["metric"], float(r["spec_sheet"]), float(r["forecast"]),
                                        float(r["fitted"])) for r in data.get("residuals", ())))


#: calibration.json's keys: (key, type, unit, definition), for docs/schema.md (grid/docs.py).
FILE_KEYS = (
    ("key", "object", "", "what it applies to: hardware, model, engine (kind) and release (the SGLang version); "
                          "twin.calibration refuses a file whose key differs from the sweep's"),
    ("coefficients", "object", "x", "decode, prefill, frontend, kv_fixed, kv_link: multipliers on the twin's decode "
                                    "step, prefill step, front-end latency and a deployment's KV transfers (their "
                                    "fixed cost and their bytes' time on the link; grid/twin/coefficients.py); 1.0 "
                                    "is the spec-sheet model"),
    ("log_sd", "object", "log", "each coefficient's posterior standard deviation in natural-log units (the prior's, "
                                "grid/twin/coefficients.py PRIOR_SD, where no measurement moved it); the 95% interval is "
                                "coefficient x exp(+-1.96 log_sd)"),
    ("sources", "list", "", "the load points it was fitted on: `<label> (<config_hash>) <point_kind> <point_value>` "
                            "(a saved calibration's sources first)"),
    ("outliers", "list", "", "measured metrics left out: source, metric, ratio (measured / the twin calibrated "
                             "without it)"),
    ("residuals", "list", "log", "per measured metric it used: source, metric, and ln(measured / twin) for the "
                                 "spec-sheet twin (`spec_sheet`), the twin calibrated on what was measured before "
                                 "this configuration (`forecast`: out of sample) and the calibration fitted with it "
                                 "(`fitted`)"),
    ("error_before", "object", "fraction", "per metric (ttft_ms, tpot_ms, output_tok_per_s; kv_transfer_ms where a "
                                           "deployment's transfers were measured), exp(mean |spec_sheet|) "
                                           "- 1: the spec-sheet twin's geometric-mean absolute error on those points"),
    ("error_forecast", "object", "fraction", "the same for `forecast`: how well the calibrated twin forecast each "
                                             "configuration before it was measured"),
    ("error_after", "object", "fraction", "the same for `fitted` (in-sample)"),
)


def describe_file() -> str:
    """docs/schema.md's section on :data:`CALIBRATION_FILE`."""
    from grid.storage.summary import key_table

    return key_table(CALIBRATION_FILE, "The twin calibrated on the run's own load points (grid/search/calibration.py, "
                     "docs/twin.md): rewritten after every measured configuration with `twin.calibrate=true` (the "
                     "default) on an engine the twin forecasts; `twin.calibration=PATH` starts a later sweep on the "
                     "same hardware, model and release from it. Only points that count enter it: status ok, trial not "
                     "failed, not host noise.", FILE_KEYS)


def report_note(run_dir: str | Path) -> str | None:
    """The report's line on the run's calibration (:data:`CALIBRATION_FILE`): its coefficients with their 95%
    intervals, the twin's error on the measured points before and after, the outliers; None without one."""
    path = Path(run_dir) / CALIBRATION_FILE
    if not path.exists():
        return None
    try:
        cal = load(path)
    except ConfigError as e:
        return f"The twin's calibration could not be read: {e}"
    return summary_line(cal).replace("Twin calibrated", f"The twin was calibrated ({CALIBRATION_FILE})", 1)
