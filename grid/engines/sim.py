"""``engine=sim``: the embedded SGLang twin, launched exactly like SGLang (``python -m grid.twin <sglang flags>``).

The twin reads the model from ``--model-path DIR`` (``DIR/config.json``, written here from conf/model) and learns the
node's hardware, its SGLang version and its clock speed from GRID_TWIN_* variables (docs/architecture.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grid.engines.base import Engine, LaunchPlan, register
from grid.engines.checks import refuse as _refuse
from grid.engines.flags import parse_version, to_argv
from grid.sweep.space import TrialPlan


@register
class SimEngine(Engine):
    kind = "sim"
    refuse = _refuse  # pre-launch checks against the version (grid/engines/checks.py)

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
        argv = [sys.executable, "-m", "grid.twin", "--model-path", str(self.model_dir())]
        argv += to_argv(trial.settings, parse_version(version)) + self.common_args(port)
        env = {
            "GRID_TWIN_HARDWARE": self.spec.hardware.model_dump_json(),
            "GRID_TWIN_VERSION": version,
            "GRID_TWIN_TIME_SCALE": repr(self.spec.engine.time_scale),
            "GRID_TWIN_STARTUP_TIME_SCALE": repr(self.startup_time_scale),
            **self.spec.engine.env,
        }
        return LaunchPlan(argv, env, self.spec.engine.host, port, self.spec.engine.time_scale,
                          self.startup_time_scale)

    @property
    def startup_time_scale(self) -> float:
        return self.spec.engine.startup_time_scale or self.spec.engine.time_scale
