"""``engine=sglang``: the real SGLang server (``python -m sglang.launch_server``) on a GPU node or a CPU host.

The device comes from the hardware file: ``vendor: cpu`` (conf/hardware/cpu_host.yaml) launches SGLang's CPU engine
with the flags and environment grid/releases/devices.py lists for it; every other vendor launches on its GPUs.
"""

from __future__ import annotations

import shutil
import subprocess

from grid.config.schema import ConfigError, RunSpec
from grid.engines.base import Engine, EngineUnavailable, LaunchPlan, register
from grid.plan import TrialPlan
from grid.releases.checks import refuse as _refuse
from grid.releases.devices import launch_args, launch_env
from grid.releases.flags import parse_version

_VERSION_PROBE = "import importlib.metadata as m; print(m.version('sglang'))"


@register
class SGLangEngine(Engine):
    kind = "sglang"
    release_refusal = _refuse  # pre-launch checks against the version (grid/releases/checks.py)

    @classmethod
    def check_spec(cls, spec: RunSpec) -> None:
        """SGLang loads a checkpoint: ``model.path`` is required. Raises ``ConfigError``."""
        if not spec.model.path:
            raise ConfigError("model.path: required with engine=sglang (a local checkpoint directory or HF id), "
                              "e.g. engine=sglang model.path=/models/GLM-5-NVFP4")

    def _installed_version(self) -> str | None:
        python = self.spec.engine.python
        if shutil.which(python) is None:
            return None
        try:
            out = subprocess.run([python, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None

    # What a dry run plans for when neither engine.version nor an installed SGLang says: the seed session's era,
    # the same default as the twin's (conf/engine/sim.yaml).
    DRY_RUN_DEFAULT_VERSION = "0.5.9"

    def version(self) -> str:
        """engine.version, else the installed SGLang's; a dry run without either plans for 0.5.9 and says so.

        Raises ``EngineUnavailable`` when a real run has no SGLang to launch. The answer is cached per engine.
        """
        if getattr(self, "_version", None) is None:
            self._version = self._resolve_version()
        return self._version

    def _resolve_version(self) -> str:
        if self.spec.engine.version:
            return self.spec.engine.version
        installed = self._installed_version()
        if installed is None:
            if self.spec.dry_run:
                self.notes.append(
                    f"SGLang is not installed for engine.python={self.spec.engine.python!r}: planning for SGLang "
                    f"{self.DRY_RUN_DEFAULT_VERSION} (set engine.version=X to plan for another release)")
                return self.DRY_RUN_DEFAULT_VERSION
            raise EngineUnavailable(
                f"engine=sglang: SGLang is not installed for engine.python={self.spec.engine.python!r}. "
                "Install it on the GPU node (pip install -e '.[sglang]'), or use dry_run=true (optionally with "
                "engine.version=X) to print the command lines without launching."
            )
        parse_version(installed)
        return installed

    def check_runnable(self) -> None:
        if self.spec.ray.address is not None:
            return  # GPUs live on the cluster's nodes, not necessarily on this driver
        if self._installed_version() is None:
            raise EngineUnavailable(
                f"engine=sglang: SGLang is not installed for engine.python={self.spec.engine.python!r} "
                "(pip install -e '.[sglang]' on the GPU node). Use engine=sim to run on the embedded twin, "
                "or dry_run=true engine.version=X to print the command lines."
            )
        if self.spec.hardware.is_cpu:
            return  # SGLang's CPU engine: nothing but the host
        if not _has_gpu():
            raise EngineUnavailable(
                "engine=sglang: no NVIDIA GPU found on this machine (nvidia-smi -L lists none). "
                "Run on a GPU node, join a Ray cluster with ray.address=auto, serve on this machine's CPU with "
                "hardware=cpu_host, or use engine=sim."
            )

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        """``python -m sglang.launch_server --model-path P <settings> [--device cpu] --host H --port N``; the
        device's environment (grid/releases/devices.py) under ``engine.env``, which wins where both set a name."""
        model, version = self.spec.model, parse_version(self.version())
        vendor = self.spec.hardware.vendor
        argv = [self.spec.engine.python, "-m", "sglang.launch_server", "--model-path", str(model.path)]
        argv += self.dialect.render(trial.settings, version) + launch_args(vendor) + self.common_args(port)
        device_env = launch_env(vendor)
        return LaunchPlan(argv, {**device_env, **self.spec.engine.env}, self.spec.engine.host, port, 1.0, 1.0,
                          command_env=device_env)


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout
