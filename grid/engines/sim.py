"""``engine=sim``: the embedded SGLang twin, launched exactly like SGLang (``python -m grid.twin <sglang flags>``).

The twin reads the model from ``--model-path DIR`` (``DIR/config.json``, written here from conf/model) and learns the
node's hardware, its SGLang version and its clock speed from GRID_TWIN_* variables (docs/architecture.md).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from grid.config.schema import ConfigError, RunSpec
from grid.engines.base import Engine, LaunchPlan, register
from grid.plan import TrialPlan
from grid.releases.checks import refuse as _refuse
from grid.releases.checks import twin_hardware_refusal
from grid.releases.flags import parse_version


@register
class SimEngine(Engine):
    kind = "sim"
    twin = True
    release_refusal = _refuse  # pre-launch checks against the version (grid/releases/checks.py)

    @classmethod
    def check_spec(cls, spec: RunSpec) -> None:
        """The twin models GPUs: a CPU host (``hardware.vendor: cpu``) is refused before anything launches, with the
        reason of rule ``twin_cpu_host`` (grid/releases/checks.py). Raises ``ConfigError`` naming the key."""
        why = twin_hardware_refusal(spec.hardware)
        if why is not None:
            raise ConfigError(f"hardware={spec.hardware.name}: {why} (engine=sim is the twin; README 'Works with')")
        e = spec.engine
        if e.clock == "virtual":
            # set to anything but their defaults (EngineSpec's; time_scale: also conf/engine/sim.yaml's auto) they
            # would do nothing on the virtual clock, silently
            for key in ("time_scale", "max_time_scale", "min_step_real_ms"):
                value = getattr(e, key)
                if value not in (type(e).model_fields[key].default, "auto"):
                    raise ConfigError(
                        f"engine.{key}={value}: the twin's clock here is engine.clock=virtual (the default), on which "
                        f"a load point takes the CPU its simulation needs and no wall-clock speed applies; "
                        f"engine.{key} applies to engine.clock=real only (allowed values of engine.clock: real, "
                        "virtual)")

    def version(self) -> str:
        return self.spec.engine.version or "0.5.9"

    def check_runnable(self) -> None:
        return None

    def model_dir(self, run_dir: str | None = None) -> Path:
        root = Path(run_dir or self.spec.run_dir).resolve()
        return root / "model" / self.spec.model.name.replace("/", "_")

    def prepare(self, run_dir: str) -> None:
        d = self.model_dir(run_dir)
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(self.spec.model.to_hf_config(), indent=1))

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        version = self.version()
        flags = self.dialect.render(trial.settings, parse_version(version))
        argv = [sys.executable, "-m", "grid.twin", "--model-path", str(self.model_dir())]
        argv += flags + self.common_args(port)
        # the virtual clock keeps no wall clock once ready: the serving scale means nothing to it
        scale = self.time_scale(flags, trial) if self.spec.engine.clock == "real" else 1.0
        startup = self.spec.engine.startup_time_scale or scale
        env = {
            "GRID_TWIN_HARDWARE": self.spec.hardware.model_dump_json(),
            "GRID_TWIN_VERSION": version,
            "GRID_TWIN_TIME_SCALE": repr(scale),
            "GRID_TWIN_STARTUP_TIME_SCALE": repr(startup),
            # virtual: the twin's virtual clock (grid/loadgen/vclock.py); real: the wall clock x time_scale
            "GRID_TWIN_CLOCK": self.spec.engine.clock,
            **self.spec.engine.env,
        }
        return LaunchPlan(argv, env, self.spec.engine.host, port, scale, startup)

    def time_scale(self, flags: list[str], trial: TrialPlan) -> float:
        """The serving clock speed for this configuration (modelled seconds per real second).

        ``auto``: :func:`auto_time_scale` of the configuration's single-stream decode step (the twin's own performance
        model) and of the host's load when the server launches (:func:`host_load_per_core`, on the node that runs it):
        about 20 for GLM-5 on 8 PCIe GPUs (90 ms steps) on a quiet host, about 1.7 for Llama-3.1-8B on one H100 (7 ms
        steps), a third of that on a host running three runnable threads per core.
        """
        engine = self.spec.engine
        if engine.time_scale != "auto":
            return float(engine.time_scale)
        step_s = single_stream_step_s(self.spec, flags, self.version(), trial.load.input_len)
        if step_s is None:
            return 1.0
        return auto_time_scale(step_s, engine.min_step_real_ms, engine.max_time_scale, host_load_per_core())


def auto_time_scale(step_s: float, min_step_real_ms: float, max_time_scale: float,
                    load_per_core: float = 0.0) -> float:
    """The fastest clock (modelled s per real s) at which one decode step of ``step_s`` modelled seconds still lasts
    ``min_step_real_ms`` real ms, times the host's ``load_per_core`` where that exceeds 1, between 1 and
    ``max_time_scale``; rounded to 3 decimals. Pure.

    The twin holds its schedule in Python only while a decode step lasts a few real milliseconds of its own CPU
    (experiments/twin_clock_error.py). A host with more runnable threads than cores (the 1-minute load average per
    core: other jobs, CPU burners, a test suite) gives the twin's process about ``1 / load_per_core`` of a core, so
    each step needs that much more real time to be held; below one runnable thread per core the twin has a core of its
    own and the scale is the quiet one. The 1-minute average lags a change of load: on a 2-core machine, 75 s after 4
    CPU burners started it read 2.91 (from 0.19; 1.46 per core), on its way to 4 plus whatever else runs."""
    scale = step_s * 1e3 / (min_step_real_ms * max(1.0, load_per_core))
    return round(max(1.0, min(max_time_scale, scale)), 3)


def host_load_per_core() -> float:
    """This host's 1-minute load average per CPU core (``os.getloadavg`` / ``os.cpu_count``; the share of the CPU
    this process's affinity allows, where the platform says); 0.0 where the platform has no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return load / max(1, cores)


def single_stream_step_s(spec, flags: list[str], version: str, context_tokens: int) -> float | None:
    """The twin's modelled decode step at batch 1 for these flags; None if the twin would refuse them."""
    from grid.twin.perf_of_flags import perf_model

    perf = perf_model(spec.model, spec.hardware, flags, version, spec.engine.env)
    return None if perf is None else perf.decode_step_s(1, context_tokens)
