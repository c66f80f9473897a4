"""``engine=sim``: the embedded SGLang twin, launched exactly like SGLang (``python -m grid.twin <sglang flags>``).

The twin reads the model from ``--model-path DIR`` (``DIR/config.json``, written here from conf/model) and learns the
node's hardware, its SGLang version and its clock speed from GRID_TWIN_* variables (docs/architecture.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grid.config.schema import ConfigError, RunSpec
from grid.engines.base import Engine, LaunchPlan, register
from grid.plan import TrialPlan
from grid.releases.checks import refuse as _refuse
from grid.releases.checks import twin_hardware_refusal
from grid.releases.flags import parse_version
from grid.versions import DEFAULT_RELEASE


@register
class SimEngine(Engine):
    kind = "sim"
    twin = True
    serves_deployments = True  # one twin process plays the deployment's servers and router (grid/twin/deployment.py)
    release_refusal = _refuse  # pre-launch checks against the version (grid/releases/checks.py)

    @classmethod
    def check_spec(cls, spec: RunSpec) -> None:
        """The twin models GPUs: a CPU host (``hardware.vendor: cpu``) is refused before anything launches, with the
        reason of rule ``twin_cpu_host`` (grid/releases/checks.py). Raises ``ConfigError`` naming the key."""
        why = twin_hardware_refusal(spec.hardware)
        if why is not None:
            raise ConfigError(f"hardware={spec.hardware.name}: {why} (engine=sim is the twin; README 'Works with')")
        e = spec.engine
        if e.clock == "virtual" and e.time_scale != type(e).model_fields["time_scale"].default:
            # it would do nothing on the virtual clock, silently
            raise ConfigError(
                f"engine.time_scale={e.time_scale}: the twin's clock here is engine.clock=virtual (the default), on "
                "which a load point takes the CPU its simulation needs and no wall-clock speed applies; "
                "engine.time_scale applies to engine.clock=real only (allowed values of engine.clock: real, virtual)")

    def version(self) -> str:
        return self.spec.engine.version or DEFAULT_RELEASE

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
        scale = float(self.spec.engine.time_scale) if self.spec.engine.clock == "real" else 1.0
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
        if trial.deployment is not None and trial.deployment.servers > 1:
            # the twin serves the deployment as its router's endpoint: each server its group's shape and settings
            env["GRID_TWIN_DEPLOYMENT"] = json.dumps({**trial.deployment.identity(), "settings": trial.settings},
                                                     sort_keys=True)
        return LaunchPlan(argv, env, self.spec.engine.host, port, scale, startup)
