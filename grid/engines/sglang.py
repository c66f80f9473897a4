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
from grid.server.handle import MemberLaunch
from grid.versions import DEFAULT_RELEASE

#: The step between the ports of a deployment's servers, counted from the router's port. 2 keeps the port's parity: a
#: port the kernel hands out to bind(0) is odd on Linux 4.2 and later, and the even ones are where it puts outbound
#: connections' local ports (torvalds/linux 07f4c90062f8, "tcp/dccp: try to not exhaust ip_local_port_range in
#: connect()", with the default range 32768-60999; 20 of 20 each way on a Linux 6 host), so the servers next to a
#: free port do not race the machine's own connections for their ports. A CI run lost a server on port + 1 so.
PORT_STEP = 2

_VERSION_PROBE = "import importlib.metadata as m; print(m.version('sglang'))"


@register
class SGLangEngine(Engine):
    kind = "sglang"
    release_refusal = _refuse  # pre-launch checks against the version (grid/releases/checks.py)
    serves_deployments = True  # a deployment's servers, each on its node's actor, and SGLang's router on the first

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
    DRY_RUN_DEFAULT_VERSION = DEFAULT_RELEASE

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

    def deployment_refusal(self, trial: TrialPlan) -> str | None:
        """As :meth:`Engine.deployment_refusal`, and a server that spans nodes (``--nnodes``): each node's actor
        launches the servers placed on it (grid/cluster/spread.py), so every server must fit one node."""
        why = super().deployment_refusal(trial)
        if why is not None:
            return why
        deployment = trial.deployment
        assert deployment is not None
        wide = [p for p in deployment.place(self.spec.hardware) if p.nodes > 1]
        if wide:
            return (f"deployment {deployment.label()}: its {wide[0].role} server {wide[0].index} spans {wide[0].nodes} "
                    f"nodes of {self.spec.hardware.gpu_count} GPUs; engine=sglang launches each server on one node "
                    "so far (the twin, engine=sim, measures a server across nodes)")
        return None

    def nodes_needed(self, trial: TrialPlan) -> int:
        """The nodes a deployment's servers are placed on (``Deployment.nodes``); 1 for one server."""
        deployment = trial.deployment
        if deployment is None or deployment.servers == 1:
            return 1
        try:
            return deployment.nodes(self.spec.hardware)
        except ValueError:  # it does not fit: refused before launch (deployment_refusal)
            return 1

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        """``python -m sglang.launch_server --model-path P <settings> [--device cpu] --host H --port N``; the
        device's environment (grid/releases/devices.py) under ``engine.env``, which wins where both set a name.

        A deployment of several servers: each server's command with its role's settings and
        ``--disaggregation-mode`` (a prefill server with ``--disaggregation-bootstrap-port``) on ports ``port + 2``
        onwards in steps of 2 (:data:`PORT_STEP`), on the GPUs ``Deployment.place`` gives it
        (``CUDA_VISIBLE_DEVICES``; none on a CPU host), and SGLang's router on ``port`` in front of them
        (grid/server/router.py)."""
        if trial.deployment is not None and trial.deployment.servers > 1:
            return self._deployment_plan(trial, port)
        model, version = self.spec.model, parse_version(self.version())
        vendor = self.spec.hardware.vendor
        argv = [self.spec.engine.python, "-m", "sglang.launch_server", "--model-path", str(model.path)]
        argv += self.dialect.render(trial.settings, version) + launch_args(vendor) + self.common_args(port)
        device_env = launch_env(vendor)
        return LaunchPlan(argv, {**device_env, **self.spec.engine.env}, self.spec.engine.host, port, 1.0, 1.0,
                          command_env=device_env)

    def _deployment_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        from dataclasses import replace

        from grid.server.router import router_argv

        deployment = trial.deployment
        assert deployment is not None
        groups = [g for g in deployment.groups for _ in range(g.count)]
        places = deployment.place(self.spec.hardware)
        members, commands = [], []
        for i, (group, place) in enumerate(zip(groups, places, strict=True)):
            one = self.launch_plan(replace(trial, settings=group.settings_over(trial.settings, launch=True),
                                           deployment=None), port + PORT_STEP * (1 + i))
            bootstrap = port + PORT_STEP * (1 + len(groups) + i) if group.role == "prefill" else None
            argv = one.argv + ([] if bootstrap is None else ["--disaggregation-bootstrap-port", str(bootstrap)])
            gpus = {} if self.spec.hardware.is_cpu else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, place.gpus))}
            members.append(MemberLaunch(group.role, i, argv, {**one.env, **gpus}, one.port, bootstrap, place.node))
            commands.append(replace(one, argv=argv, command_env={**one.command_env, **gpus}).command)
        host = "127.0.0.1" if self.spec.engine.host in ("0.0.0.0", "") else self.spec.engine.host
        urls = [f"http://{_node_host(host, m.node)}:{m.port}" for m in members]
        prefill = [(u, m.bootstrap_port) for m, u in zip(members, urls) if m.role == "prefill"]
        decode = [u for m, u in zip(members, urls) if m.role == "decode"]
        argv = router_argv(port=port, metrics_port=port + PORT_STEP * (1 + 2 * len(groups)),
                           policy=str(deployment.router_policy), workers=[] if prefill else urls, prefill=prefill,
                           decode=decode, host=host)
        return LaunchPlan(argv, dict(self.spec.engine.env), self.spec.engine.host, port, 1.0, 1.0,
                          members=tuple(members), router_policy=deployment.router_policy,
                          member_commands=tuple(commands))


def _node_host(host: str, node: int) -> str:
    """Where the router reaches a server of node ``node`` that listens on ``host``, as a plan shows it: ``host`` on
    the router's node (0) or for a routable address; ``node<k>`` (the node's address, known once the trial runs: the
    recorded command is the one that ran) for a server on loopback or every address of another node. Pure."""
    return host if node == 0 or host not in ("127.0.0.1", "localhost", "0.0.0.0", "") else f"node{node}"


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout
