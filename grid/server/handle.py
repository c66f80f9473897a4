"""The trial boundary: what a trial asks of the thing that runs its server (:class:`ServerHandle`), what it asks it
to start (:class:`LaunchRequest`) and what it hears back (:class:`LaunchResult`).

Four classes implement the handle:

* grid.server.session.ServerSession: a server process on this node (tests, and inside the Ray actor);
* grid.server.external.ExternalServer: a server that is already running (engine=openai): nothing to start or stop;
* grid.cluster.actor.ActorServer: the ServerSession inside the node's Ray actor, each call a blocking ``ray.get``;
  the request and result are plain dataclasses, so they cross Ray as they are (pickled);
* grid.server.infra.GuardedServer: any of those, answering as a server that is gone once the machinery behind it
  was lost (infrastructure failures, never charged to the configuration).

Lifecycle of one trial (grid/sweep/measure.py drives it; the shape follows guidellm's backend Protocol,
``src/guidellm/scheduler/schemas/backend.py``, https://github.com/vllm-project/guidellm):

1. **port**: ``pick_port(preferred)`` -> (port, notes about an occupied preferred port).
2. **launch, ready, probe**: ``launch(request)`` starts the server, waits until it is ready (SGLang's ``/health``;
   phases in ``LaunchResult.phases``) and sends the correctness probe (grid/server/probe.py). It never raises for a
   server that fails: the :class:`LaunchResult` says how (``status``, ``error_class``), and which stage it reached
   (``startup_s`` is None before ready, ``probe_status`` None before the probe). A handle owns at most one server:
   a launch stops the previous one first.
3. **while load points run**: liveness (``alive``, ``exit_code``, ``wait_exit``), logs (``log_size`` and
   ``read_log`` for what was logged during a load point, ``log_tail`` for a failure message; secrets redacted), and
   what the server says about itself (``server_info``: SGLang's ``/server_info``, e.g. ``max_total_num_tokens``).
   Telemetry during a load point (``/metrics``, the Decode/Prefill log lines, GPU counters) is read by the samplers
   (grid/sweep/samplers.py) through these same calls and the server's ``base_url``.
4. **stop**: ``stop(grace_s)`` ends the server's whole process group and checks the node is clean; it returns why
   it is not (``env_dirty``), None when it is. A trial stops what it launched exactly once; stopping again, or a
   handle that launched nothing, is a no-op. Logs stay readable after the stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from grid.releases.dialect import SGLANG
from grid.server.statuses import ProbeStatus, TrialErrorClass, TrialStatus


@dataclass(frozen=True)
class MemberLaunch:
    """One server of a deployment of several (grid/topology/deployment.py): its ``role`` (``aggregated``,
    ``prefill``, ``decode``) and index among the deployment's servers, its command (``argv``, carrying ``--port P``),
    the variables added to its environment (``env``: e.g. its GPUs), the ``port`` it should listen on and, for a
    prefill server, the ``bootstrap_port`` its decode servers fetch the KV cache through (SGLang's
    ``--disaggregation-bootstrap-port``; None otherwise), and the ``node`` of the deployment it runs on (0-based,
    ``grid.topology.deployment.Placement.node``)."""

    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    port: int
    bootstrap_port: int | None = None
    node: int = 0

    @property
    def name(self) -> str:
        """``aggregated 0``, ``prefill 1``: how logs and messages name this server."""
        return f"{self.role} {self.index}"


@dataclass(frozen=True)
class MemberEndpoint:
    """A server of a deployment that another node's actor started and that is ready: its ``role``, where it serves
    (``url``, reachable from the router's node) and, for a prefill server, its ``bootstrap_port``."""

    role: str
    url: str
    bootstrap_port: int | None = None
    name: str = ""    # ``aggregated 1``: MemberLaunch.name
    node: str = ""    # the host name of its node


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a handle needs to start one server and judge it ready and sane.

    ``argv``: the command (never a shell string; it carries ``--port P`` when the port may have to change);
    ``env``: variables added to the server's environment; ``port``: where it should listen; ``log_path``: the file its
    stdout and stderr go to; ``time_scale``: modelled seconds per real second while serving (1 for a real server; the
    twin runs faster) and ``startup_time_scale`` until ready (None: ``time_scale``); ``startup_timeout_s``: modelled
    seconds to wait for readiness; ``api``: the endpoint the probe uses (``generate``, ``completions``, ``chat``);
    ``model``: the name requests carry; ``api_key``: sent as a bearer token and redacted from every log tail;
    ``label``: the configuration's label (what the Ray dashboard shows); ``probe_enabled``: False skips the probe;
    ``ready_path``: the GET path that answers 200 once the server serves (the engine's dialect says which).

    A deployment of several servers (``members``, each a :class:`MemberLaunch`) is started as its servers and
    SGLang's router in front of them (grid/server/router.py, ``--policy router_policy``), the router listening on
    ``port`` with ``argv`` unused: the trial's endpoint, probe and load go through the router. The servers write to
    ``log_path`` together (each SGLang line is one write), the router to ``<log_path stem>.router.log``.
    """

    argv: list[str]
    env: dict[str, str]
    port: int
    log_path: str
    time_scale: float
    startup_timeout_s: float
    api: str
    model: str
    api_key: str | None = None
    label: str = ""
    startup_time_scale: float | None = None
    probe_enabled: bool = True
    ready_path: str = SGLANG.ready_path
    members: tuple[MemberLaunch, ...] = ()
    router_policy: str | None = None
    router: bool = True
    remote: tuple[MemberEndpoint, ...] = ()


@dataclass
class LaunchResult:
    """Outcome of launch + readiness + correctness probe (plain data: it crosses Ray).

    ``status``: ``ok`` (ready and the probe passed or was skipped), ``failed`` (did not start, or the probe's requests
    failed), ``invalid`` (the probe's answers are wrong), ``skipped`` (infrastructure: ``env_dirty``, ``port_in_use``,
    ``actor_lost``; nothing was judged). ``error_class``: why (grid.server.statuses; None when ok).
    ``port``: the port the server listens on (another than asked when the asked one was taken at launch; the
    notes are in ``infra_retries``). ``startup_s``: modelled seconds from launch to ready; ``port_open_s``: to the
    port opening; ``phases``: the readiness phases seen. ``exit_code``: of a server that exited before ready.
    ``log_tail``: the server's last lines when it failed (secrets redacted). ``probe_answers``: what the probe got.
    ``server_urls``: a deployment's servers, each where it listens (its ``/metrics``; ``base_url`` is the router's);
    empty for one server. ``server_names`` (``aggregated 1``) and ``server_nodes`` (the host name of each one's node)
    say which server each URL is. ``router_argv``: the router's command as it was started (empty: no router).
    """

    status: TrialStatus
    error_class: TrialErrorClass | None = None
    message: str = ""
    port: int = 0
    base_url: str = ""
    startup_s: float | None = None
    port_open_s: float | None = None
    phases: list[str] = field(default_factory=list)
    exit_code: int | None = None
    log_tail: str = ""
    probe_answers: list[str] = field(default_factory=list)
    infra_retries: list[str] = field(default_factory=list)
    probe_status: ProbeStatus | None = None
    server_urls: list[str] = field(default_factory=list)
    router_argv: list[str] = field(default_factory=list)
    server_names: list[str] = field(default_factory=list)
    server_nodes: list[str] = field(default_factory=list)


@runtime_checkable
class ServerHandle(Protocol):
    """What a trial needs from the thing that runs its server; the lifecycle is in this module's docstring."""

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        """``preferred`` when it is free (0: any), else a free port; the notes say why the preferred one was not
        used (``port_in_use: ...``)."""
        ...

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Start the server (stopping the previous one), wait for readiness, run the correctness probe. Never raises
        for a server that fails to start or answers wrongly: the result says so."""
        ...

    def alive(self) -> bool:
        """Whether the server is up (its process lives; an external server answers)."""
        ...

    def exit_code(self) -> int | None:
        """The exit code of a server process that ended; None while it runs or when there is no process."""
        ...

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` real seconds for the server to exit; its exit code, or None if still running."""
        ...

    def log_tail(self, max_bytes: int = 8000) -> str:
        """The server's last log lines, at most ``max_bytes``, without grid's own poll lines, secrets redacted."""
        ...

    def log_size(self) -> int:
        """The log's size in bytes now: where the next load point's lines start (:meth:`read_log`)."""
        ...

    def read_log(self, start: int, end: int | None = None) -> str:
        """The log from byte ``start`` to ``end`` (None: to its end), secrets redacted."""
        ...

    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        """What the server says about itself (SGLang's ``/server_info``); None when it does not say."""
        ...

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Stop the server (SIGTERM, then SIGKILL after ``grace_s`` real seconds) and check the node is clean;
        why it is not (``env_dirty``), None when it is."""
        ...
