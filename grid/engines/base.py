"""Engine kinds: how to turn a trial's settings into the exact server command line, and whether it can run here.

Engines register by ``kind`` (``sim``, ``sglang``); the rest of grid never branches on the kind. An engine only builds
argument lists and environments; grid/server/process.py starts and stops the process.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from grid.config.schema import RunSpec
from grid.plan import TrialPlan
from grid.releases.dialect import SGLANG, Dialect
from grid.server.handle import MemberLaunch, ServerHandle
from grid.versions import ServerIdentity


class EngineUnavailable(RuntimeError):
    """The engine cannot run on this machine (not installed, no GPU); the message says what to do."""


REDACT_FLAGS = ("--api-key", "--admin-api-key")


def redact(argv: list[str]) -> str:
    """The command line as one shell-quoted string with secret flag values replaced by ``***``."""
    out: list[str] = []
    hide = False
    for arg in argv:
        if hide:
            out.append("***")
            hide = False
            continue
        if arg in REDACT_FLAGS:
            hide = True
        elif any(arg.startswith(f + "=") for f in REDACT_FLAGS):
            arg = arg.split("=", 1)[0] + "=***"
        out.append(arg)
    return shlex.join(out)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one server: argv (never a shell string), added env, where it will listen.

    ``command_env``: the part of ``env`` that belongs to the command a user would type (SGLang's CPU switch), shown
    before it as ``NAME=value``; the rest of ``env`` (``engine.env``: library paths, tokens) is not shown.

    A deployment of several servers lists them in ``members`` (grid.server.handle.MemberLaunch) with the router's
    ``router_policy``; ``argv`` is then the router's command as it would run with the members on their planned ports
    (the session builds it again from the ports they get), and ``port`` the router's."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 30000
    time_scale: float = 1.0
    startup_time_scale: float = 1.0
    command_env: dict[str, str] = field(default_factory=dict)
    members: tuple[MemberLaunch, ...] = ()
    router_policy: str | None = None
    member_commands: tuple[str, ...] = ()  # each member's command line, as :attr:`command` shows it

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def command(self) -> str:
        """The command line as one shell string: ``command_env`` as ``NAME=value`` words, then the redacted argv; of
        a deployment, each server's line and then the router's."""
        prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in self.command_env.items())
        if self.members:
            return "\n".join([*self.member_commands, redact(self.argv)])
        return prefix + redact(self.argv)


class Engine(ABC):
    kind: ClassVar[str]
    #: random token ids in [0, model.vocab_size) fit the server (it serves conf/model's checkpoint)
    ids_trusted: ClassVar[bool] = True
    #: the server is already running elsewhere: grid launches nothing, so no launch cost, no node, no failure table
    external: ClassVar[bool] = False
    #: the server is the embedded twin: its performance is modelled (pre-run TTFT notes, unmodelled settings)
    twin: ClassVar[bool] = False
    #: the server family's dialect (grid/releases/dialect.py): how settings are checked and rendered, the readiness
    #: path, whether grid's SGLang knowledge (the twin's forecasts, failure table) describes it. Every engine here
    #: speaks SGLang's (engine=openai's settings only label its trials, in SGLang's names).
    dialect: ClassVar[Dialect] = SGLANG
    #: one trial may deploy several servers behind a router (``TrialPlan.deployment``): :meth:`launch_plan` plans
    #: them all, as one process serving the router's endpoint (the twin) or as each server's command and SGLang's
    #: router (``LaunchPlan.members``, started by grid/server/session.py)
    serves_deployments: ClassVar[bool] = False

    @classmethod
    def forecastable(cls) -> bool:
        """Whether grid's knowledge describes the servers of this engine before they run: the twin's forecasts
        and failure table for its dialect (``dialect.twin_knows``), on a server grid launches (not ``external``)."""
        return cls.dialect.twin_knows and not cls.external

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.notes: list[str] = []   # things the user should know about how commands were planned

    @classmethod
    def check_spec(cls, spec: RunSpec) -> None:
        """Refuse a run this engine cannot plan, before anything launches (grid.compose ``load_run_spec`` asks the
        engine of ``engine.kind``; default: nothing to refuse). Raises ``grid.config.schema.ConfigError`` naming the
        key."""

    @abstractmethod
    def version(self) -> str:
        """The ``engine_version`` label of this engine's servers: for engines that launch SGLang (or its twin), the
        SGLang version the command lines are built for. Raises ``EngineUnavailable``."""

    def identity(self) -> ServerIdentity:
        """Which server family and release this engine's servers are (default: SGLang of :meth:`version`). Ask
        ``identity().sglang_version`` where an SGLang release is needed: it is None for a server that is not
        SGLang. Raises ``EngineUnavailable``."""
        return ServerIdentity.of_sglang(self.version())

    @abstractmethod
    def check_runnable(self) -> None:
        """Raise ``EngineUnavailable`` when servers of this kind cannot be launched here."""

    def prepare(self, run_dir: str) -> None:
        """Write whatever the launches need into the run directory (default: nothing)."""

    def refuse(self, trial: TrialPlan) -> str | None:
        """Why this configuration cannot work here, known before launching it (None: try it): what the engine's
        release would refuse (:meth:`release_refusal`), else a workload longer than the context the server will
        serve (:meth:`context_refusal`); for a deployment of several servers, :meth:`deployment_refusal` first. A
        refused configuration is recorded ``invalid`` with the reason and no launch is spent on it."""
        if trial.deployment is not None and trial.deployment.servers > 1:
            why = self.deployment_refusal(trial)
            if why is not None:
                return why
        return self.release_refusal(trial) or self.context_refusal(trial)

    def deployment_refusal(self, trial: TrialPlan) -> str | None:
        """Why ``trial``'s deployment cannot run: it does not fit the hardware's nodes (grid/topology/deployment.py
        ``Deployment.place``), or SGLang would refuse one of its servers, launched with its role's settings and
        ``--disaggregation-mode`` for a prefill or decode server (grid/releases/checks.py ``refusals``, SGLang's own
        rules: the twin serves the deployment's roles, grid/twin/deployment.py), or a prefill-decode pair of it
        fails its first KV transfer (``Deployment.failing_pairs``). None: it may run."""
        from grid.releases.checks import refusals

        deployment = trial.deployment
        assert deployment is not None
        try:
            deployment.place(self.spec.hardware)
        except ValueError as e:
            return str(e)
        version = self.identity().sglang_version
        if version is None:
            return None
        for group in deployment.groups:
            found = refusals(group.settings_over(trial.settings, launch=True), version, self.spec.model,
                             self.spec.hardware)
            if found:
                return (f"the {group.role} server {group.shape.label()}: SGLang {version} would refuse it: "
                        f"{found[0].message}")
        for p, d, rule, message in deployment.failing_pairs(trial.settings, version, self.spec.model)[:1]:
            return (f"prefill {p.shape.label()} to decode {d.shape.label()}: SGLang {version} starts both but fails "
                    f"their first KV transfer: {message} (rule {rule.name}: {rule.where})")
        return None

    def release_refusal(self, trial: TrialPlan) -> str | None:
        """Why the engine's release would refuse this configuration (default: nothing known)."""
        return None

    def context_limit(self, trial: TrialPlan) -> tuple[int, str] | None:
        """The context length (tokens) the server will serve ``trial`` with, and where the number comes from: for a
        launched server, ``server.context_length`` when the configuration sets it, else the model's
        (``model.context_length``, its ``max_position_embeddings``). None: not known."""
        n = trial.settings.get("context_length")
        if n:
            return int(n), f"server.context_length ({int(n)})"
        m = self.spec.model.context_length
        return m, f"the model's context length ({m} tokens, model.context_length of {self.spec.model.name})"

    def context_refusal(self, trial: TrialPlan) -> str | None:
        """Why requests of ``trial``'s workload would be refused for their length: the longest request
        (grid.loadgen.dataset ``longest_request``: input plus requested output; a conversation's last turn with its
        history) above :meth:`context_limit`, as SGLang (tokenizer_manager: input + max_new_tokens > context length)
        and vLLM refuse it with HTTP 400. The message names the load keys, which requests it hits and the limit.
        None: it fits, or a length is not known before the run."""
        from grid.loadgen.dataset import DatasetError, longest_request

        load = trial.load
        try:
            longest = longest_request(load.dataset, load.input_len, load.output_len, load.dataset_path,
                                      load.sessions.turns)
        except DatasetError:
            return None  # an unreadable file is reported by the dataset check, before this
        limit = self.context_limit(trial)
        if longest is None or limit is None or longest.tokens <= limit[0]:
            return None
        per, which = (" per request", "every request") if longest.which is None else ("", longest.which)
        return (f"the workload does not fit the context: {longest.what} = {longest.tokens} tokens{per}, "
                f"above {limit[1]}; the server would refuse {which} (HTTP 400) before any token. Lower "
                f"{longest.lower}{self.context_hint(trial)}")

    def context_hint(self, trial: TrialPlan) -> str:
        """What else the user can change when the workload does not fit (a launched server: its context length)."""
        if trial.settings.get("context_length"):
            return f", or raise server.context_length (the model serves {self.spec.model.context_length} tokens)"
        return ""

    @abstractmethod
    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        """The command line and environment for ``trial`` listening on ``port`` (with a deployment of several
        servers, only where :attr:`serves_deployments`)."""

    def nodes_needed(self, trial: TrialPlan) -> int:
        """How many of the cluster's nodes one trial of ``trial`` holds at once (default 1: the engine serves a
        deployment on one node, or as one process). An engine that launches each server on its own node says more
        for a deployment across nodes: the trial then holds that many ``grid_node`` slots (grid/sweep/driver.py)."""
        return 1

    def server(self) -> ServerHandle:
        """The server handle a trial measures instead of the node's actor, for an engine whose server runs elsewhere
        (``external``). Raises ``NotImplementedError`` for an engine grid launches (its trials use the node's
        ServerActor, grid/cluster/actor.py)."""
        raise NotImplementedError(f"engine {self.kind} launches its servers on the node's actor")

    def served_model(self) -> str:
        """The model name requests carry (the OpenAI ``model`` field): conf/model's ``name``."""
        return self.spec.model.name

    def tokenizer_source(self, load) -> str | None:
        """Where the prompts' tokenizer comes from: ``load.tokenizer`` (None: no tokenizer)."""
        return load.tokenizer

    def prompt_form(self, load):
        """How ``load``'s prompts are built (grid.loadgen.dataset.PromptForm): with the tokenizer of
        ``tokenizer_source`` when it loads, token ids where the API takes them, text where it needs text. Raises
        ``EngineUnavailable`` when a tokenizer named by ``load.tokenizer`` cannot be loaded."""
        from grid.loadgen.client import ENDPOINTS
        from grid.loadgen.dataset import PromptForm
        from grid.loadgen.tokenizer import NO_TOKENIZER, load_tokenizer

        source = self.tokenizer_source(load)
        tokenizer, why = load_tokenizer(source) if source else (None, "")
        if tokenizer is None and load.tokenizer and load.tokenizer.lower() != NO_TOKENIZER:
            raise EngineUnavailable(f"load.tokenizer={load.tokenizer}: cannot be loaded ({why}); set "
                                    "load.tokenizer=none to send prompts without one")
        return PromptForm.choose(load.dataset, ENDPOINTS[self.spec.engine.api].accepts, self.spec.model.vocab_size,
                                 tokenizer, source or "", ids_trusted=self.ids_trusted)

    def workload_notes(self, load) -> list[str]:
        """What the user should know about how ``load``'s prompts are built (printed before the run). Raises
        ``EngineUnavailable`` when a tokenizer named by ``load.tokenizer`` cannot be loaded."""
        form = self.prompt_form(load)
        if form.text and form.tokenizer is None:
            return [f"engine.api={self.spec.engine.api} takes text: prompts are random words without a tokenizer "
                    "(set load.tokenizer=PATH to build them from the model's vocabulary); their input lengths are "
                    "estimates, the server's usage.prompt_tokens is recorded as each request's input length"]
        return []

    def common_args(self, port: int) -> list[str]:
        args = ["--host", self.spec.engine.host, "--port", str(port)]
        if self.spec.engine.api_key:
            args += ["--api-key", self.spec.engine.api_key]
        return args


ENGINES: dict[str, type[Engine]] = {}


def register(cls: type[Engine]) -> type[Engine]:
    ENGINES[cls.kind] = cls
    return cls


def _import_engines() -> None:
    """Import every module of grid/engines once: each registers its engine kind (a new engine is a new module)."""
    import importlib
    import pkgutil

    import grid.engines

    for info in pkgutil.iter_modules(grid.engines.__path__):
        if info.name != "base":
            importlib.import_module(f"grid.engines.{info.name}")


def engine_class(kind: str) -> type[Engine]:
    """The registered engine of ``kind`` (what shared code asks about an engine instead of branching on its name).
    Raises ``EngineUnavailable`` naming the allowed kinds."""
    if kind not in ENGINES:
        _import_engines()
    try:
        return ENGINES[kind]
    except KeyError:
        raise EngineUnavailable(f"engine.kind={kind!r}; allowed: {', '.join(sorted(ENGINES))}") from None


def get_engine(spec: RunSpec) -> Engine:
    return engine_class(spec.engine.kind)(spec)
