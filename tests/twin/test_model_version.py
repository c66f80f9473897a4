"""``grid.twin.MODEL_VERSION`` is part of every twin configuration's identity, so a resumed run measures again what
an older model measured. A change to what the twin measures without a bump would mix two models' results in one run
and nothing else would notice (docs/architecture.md "How to add"): this test pins a fingerprint of the twin's
numbers to the version.

The fingerprint covers the performance model of every model on every hardware file (decode and prefill step times
at a few batch sizes and contexts, the KV pool, startup), and the twin's forecast (score, startup and load seconds,
or its refusal) of every configuration of four shipped sweeps, which exercise the scheduler, the radix cache,
speculative decoding, the known failures and the launch rules, on the oldest and the newest release grid claims. A refactor that keeps every number keeps it; a
change of a number changes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grid import twin
from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.versions import DEFAULT_RELEASE
from grid.search.predict import forecast
from grid.sweep.space import expand
from grid.twin.perf_of_flags import perf_model

CONF = Path(__file__).resolve().parents[2] / "conf"

#: MODEL_VERSION -> the fingerprint of the twin's numbers under it. Bump MODEL_VERSION (grid/twin/__init__.py, with
#: a line saying what changed) and record the new fingerprint here together.
FINGERPRINTS = {"6": "1a6ea14bdd450b3a"}

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
        version = get_engine(spec).version()
        for plan in expand(spec):
            f = forecast(spec, plan, version)
            out.append((sweep, release, plan.label, None if f is None else (f.value, f.startup_s, f.load_s)))
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
    modelled = [n for n in numbers if len(n) == 4]
    forecast_ = [n for n in numbers if n[0] in SWEEPS and n[3] is not None]
    assert len(modelled) >= 100 and len(forecast_) >= 120, (len(modelled), len(forecast_))  # what it covers
    got = _fingerprint(numbers)
    assert FINGERPRINTS.get(twin.MODEL_VERSION) == got, (
        f"the twin's numbers changed but grid.twin.MODEL_VERSION is still {twin.MODEL_VERSION!r}: bump it "
        f"(grid/twin/__init__.py, saying what changed) and record FINGERPRINTS[new version] = {got!r} here")
