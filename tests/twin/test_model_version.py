"""``grid.twin.MODEL_VERSION`` is part of every twin configuration's identity, so a resumed run measures again what
an older model measured. A change to what the twin measures without a bump would mix two models' results in one run
and nothing else would notice (docs/architecture.md "How to add"): this test pins a fingerprint of the twin's
numbers to the version.

The fingerprint covers the performance model of every model on every hardware file (decode and prefill step times
at a few batch sizes and contexts, the KV pool, startup), and for every configuration of four shipped sweeps on the
oldest and the newest release grid claims: the twin's forecast (score, startup and load seconds), its refusal
(SGLang's launch rules), and its known failures (the failure table's row ids and effects, and the lines the twin logs
for each). Those sweeps exercise the scheduler, the radix cache, speculative decoding, the failure table and the
launch rules. A refactor that keeps every number, refusal and failure keeps it; a change of one changes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grid import twin
from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.versions import DEFAULT_RELEASE
from grid.search.knowledge import assess, twin_model
from grid.search.predict import forecast
from grid.twin.failures import find_failures
from grid.sweep.space import expand
from grid.twin.perf_of_flags import perf_model

CONF = Path(__file__).resolve().parents[2] / "conf"

#: MODEL_VERSION -> the fingerprint of the twin's numbers under it. Bump MODEL_VERSION (grid/twin/__init__.py, with
#: a line saying what changed) and record the new fingerprint here together.
FINGERPRINTS = {"7": "5df7f940e24a1520"}

SWEEPS = ("nsa_backends", "schedule_policy", "prefix_cache", "speculative")
RELEASES = (DEFAULT_RELEASE, "0.5.23")  # the oldest and the newest release grid claims


def _numbers(tmp_path: Path) -> list:
    out: list = []
    models = {p.stem: compose_spec([f"model={p.stem}"], tmp_path / p.stem).model
              for p in sorted((CONF / "model").glob("*.yaml"))}
    hardware = {p.stem: compose_spec(["engine=sglang", "engine.version=0.5.9", f"hardware={p.stem}"],  # cpu_host too
                                     tmp_path / p.stem).hardware for p in sorted((CONF / "hardware").glob("*.yaml"))}
    for m, model in models.items():
        for h, hw in hardware.items():
            perf = perf_model(model, hw, ["--tp-size", str(hw.gpu_count)], DEFAULT_RELEASE)
            if perf is None:
                out.append((m, h, None))
                continue
            steps = [perf.decode_step_s(b, c) for b in (1, 16, 128) for c in (1024.0, 8192.0)]
            steps += [perf.prefill_step_s(n) for n in (128, 2048, 16384)]
            out.append((m, h, steps, sorted(perf.startup_phases_s().items())))
    for sweep, release in [(s, r) for s in SWEEPS for r in RELEASES]:
        spec = compose_spec([f"+sweep={sweep}", f"engine.version={release}"], tmp_path / f"{sweep}-{release}")
        engine = get_engine(spec)
        version = engine.version()
        plans = expand(spec)
        known = assess(spec, engine, plans, version)
        for plan in plans:
            f = forecast(spec, plan, version)
            out.append((sweep, release, plan.label, None if f is None else (f.value, f.startup_s, f.load_s)))
            # what the twin refuses and how it fails: the rows' ids and effects and the lines it logs for them
            k = known[plan.config_hash]
            perf = None if k.refused else twin_model(spec, plan.settings, version)
            lines = [] if perf is None else [list(m.log_lines) for m in find_failures(spec.model, spec.hardware,
                                                                                       perf.cfg, perf)]
            out.append((sweep, release, plan.label, k.refused, [[i, e] for i, e, _ in k.failures], lines))
    return out


def _fingerprint(numbers: list) -> str:
    def rounded(x):
        if isinstance(x, float):
            return float(f"{x:.9g}")   # the last bits of a float sum are not the model
        if isinstance(x, (list, tuple)):
            return [rounded(v) for v in x]
        return x

    return hashlib.sha256(json.dumps(rounded(numbers)).encode()).hexdigest()[:16]


def test_the_twins_numbers_are_those_its_model_version_names(tmp_path):
    numbers = _numbers(tmp_path)
    modelled = [n for n in numbers if len(n) == 4 and n[0] not in SWEEPS]
    forecast_ = [n for n in numbers if n[0] in SWEEPS and len(n) == 4 and n[3] is not None]
    failing = [n for n in numbers if n[0] in SWEEPS and len(n) == 6 and n[4]]
    refused = [n for n in numbers if n[0] in SWEEPS and len(n) == 6 and n[3]]
    assert len(modelled) >= 100 and len(forecast_) >= 120, (len(modelled), len(forecast_))  # what it covers
    assert len(failing) >= 10 and len(refused) >= 1 and any(n[5] for n in failing), (len(failing), len(refused))
    got = _fingerprint(numbers)
    assert FINGERPRINTS.get(twin.MODEL_VERSION) == got, (
        f"the twin's numbers changed but grid.twin.MODEL_VERSION is still {twin.MODEL_VERSION!r}: bump it "
        f"(grid/twin/__init__.py, saying what changed) and record FINGERPRINTS[new version] = {got!r} here")
