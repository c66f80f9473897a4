"""How grid starts (or joins) its Ray cluster: the arguments of ``ray.init`` and the checks before it.

Single-machine mode (``ray.address: null``, the default) always starts grid's own local cluster
(``ray.init(address="local")``), whatever else runs on the machine: with ``address=None`` Ray would use ``RAY_ADDRESS``
or join the latest cluster a ``ray start`` left behind ("Found multiple active Ray instances ... Connecting to latest
cluster", ray/_private/services.py ``get_ray_address_from_environment``, Ray 2.60) and then refuse grid's
``num_cpus``/``resources``. Joining a cluster is what ``ray.address=auto|HOST:PORT`` is for.

In single-machine mode nothing grid's cluster opens listens beyond 127.0.0.1. ``ray.init(_node_ip_address=
"127.0.0.1")`` alone does not do it: Ray replaces a loopback node address by the machine's routable one
(``resolve_ip_for_localhost``, ray/_private/services.py, Ray 2.60), and its GCS, raylet, object manager, workers and
dashboard agent then listen on all interfaces. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (ray/_private/ray_constants.py:
Ray's switch for its single-machine-only platforms) makes Ray take 127.0.0.1 as the node address, and every one of
those services, the runtime-env agent and the metrics agent bind to it; ``dashboard_host="127.0.0.1"`` binds the
dashboard. Measured on Ray 2.60 with ``ss -ltnp``: without the switch the GCS, raylet and workers listened on ``::``,
the dashboard agent on 0.0.0.0 and the node's external address; with it every socket was 127.0.0.1
(tests/cluster/test_cluster_network.py keeps checking it). The switch only changes which address Ray picks for the
node and makes ``ray start`` refuse to form a multi-node cluster, so it is set for the local cluster only.

The dashboard port (``ray.dashboard_port``, Ray's default 8265) may be held by another process, e.g. a second sweep's
dashboard on the same head node; Ray then fails with a traceback. grid checks it first and uses a free port instead,
saying so. The check cannot close the race with a run started in the same second: the other run's Ray may take the
port between grid's check and its own dashboard's bind. Ray then fails in one of two places (Ray 2.60): its own check
in ``start_api_server`` (ray/_private/services.py: ``ValueError: Failed to bind to HOST:PORT because it's already
occupied``), or the dashboard process, which is given no retries for a port named by the caller
(ray/dashboard/http_server_head.py: ``Exception: Failed to find a valid port for dashboard after 0 retries``, re-raised
by ``ray.init`` with the dashboard's log). ``start_ray`` then shuts the half-started cluster down and starts again on
another free port, up to ``DASHBOARD_PORT_ATTEMPTS`` times, saying so.

Ray runs every worker process (tasks and actors: grid's server actor, the Tune trial that runs the load generator,
and what they start, the server included) at niceness 15 (``worker_niceness``, ray-project/ray#24928; the driver stays
at 0, ray-project/ray#33287). On a machine where anything else runs, the server and the load generator then get a
sliver of the CPU: measured on 2 cores with 8 CPU-burning processes, a twin trial that takes 3 s on an idle machine
took over 2 minutes, and every load point was host noise. On a GPU node the server's scheduler and kernel launches are
CPU work too. grid's job therefore sets ``RAY_worker_niceness=0`` in its runtime environment (as Ray's own job
supervisor does, ray-project/ray#34727), for its local cluster and for a joined one alike (checked by hand on a
``ray start --head`` cluster, Ray 2.60: an actor at 15 without it, at 0 with it): its workers run at the priority of
the command that started the sweep.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field

from grid.cluster.node import hw_resource
from grid.config.schema import RaySpec
from grid.server.process import free_port, port_is_free

LOOPBACK = "127.0.0.1"
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
OBJECT_STORE_BYTES = 200 * 1024**2  # grid moves only small rows through Ray's object store
#: Environment of the job's workers (its runtime_env's env_vars): niceness 0, not Ray's default 15 (module docstring).
WORKER_ENV = {"RAY_worker_niceness": "0"}


@dataclass
class RayInit:
    """The ``ray.init`` keyword arguments for a run, and what to tell the user about them."""

    kwargs: dict
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set in the driver's environment before Ray is imported

    @property
    def local(self) -> bool:
        return self.kwargs.get("address") == "local"


def ray_init_args(ray: RaySpec, namespace: str, node_resource: str, hardware: str | None = None) -> RayInit:
    """The arguments for ``ray.init`` (pure but for the dashboard-port check, which binds a socket on 127.0.0.1).
    The local cluster's node offers one ``node_resource`` slot and, with ``hardware`` (a conf/hardware name), the
    resource that declares it (grid.cluster.node.hw_resource)."""
    kwargs: dict = dict(namespace=namespace, log_to_driver=False, logging_level=logging.WARNING,
                        include_dashboard=ray.dashboard, configure_logging=True,
                        runtime_env={"env_vars": dict(WORKER_ENV)})
    notes: list[str] = []
    if ray.address is not None:
        kwargs["address"] = ray.address
        return RayInit(kwargs, notes)
    env = {LOOPBACK_SWITCH: "0"}
    resources = {node_resource: 1}
    if hardware:
        resources[hw_resource(hardware)] = 1
    kwargs.update(address="local", _node_ip_address=LOOPBACK, resources=resources,
                  num_cpus=ray.num_cpus or max(2, os.cpu_count() or 2), object_store_memory=OBJECT_STORE_BYTES)
    if os.environ.get("RAY_ADDRESS"):
        notes.append(f"RAY_ADDRESS={os.environ['RAY_ADDRESS']} is ignored: with ray.address unset grid starts its own "
                     "local Ray cluster (set ray.address to join a cluster)")
    if ray.dashboard:
        port = ray.dashboard_port
        if not port_is_free(LOOPBACK, port):
            port = free_port(LOOPBACK)
            notes.append(f"ray.dashboard_port {ray.dashboard_port} is in use by another process; "
                         f"the Ray dashboard uses port {port}")
        kwargs.update(dashboard_host=LOOPBACK, dashboard_port=port)
    return RayInit(kwargs, notes, env)


class RayStartError(RuntimeError):
    """Ray could not be started or joined; ``setting`` names the configuration key to change (or None)."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


#: How many ports ``start_ray`` tries for the dashboard before it gives up (each try after the first follows a lost
#: race for the port; two races in a row were never seen in about 15 runs started together).
DASHBOARD_PORT_ATTEMPTS = 3
_PORT_TAKEN = ("Failed to find a valid port for dashboard", "because it's already occupied")


def _dashboard_port_taken(err: BaseException) -> bool:
    """Whether ``ray.init`` failed because the dashboard's port was taken (the two wordings of Ray 2.60 above)."""
    return any(words in str(err) for words in _PORT_TAKEN)


#: Real seconds the pre-flight TCP connect to ``ray.address`` (HOST:PORT) may take. Without it ``ray.init`` on an
#: address where no GCS listens retried for more than 6 minutes (Ray 2.60), printing a warning every 5 s.
GCS_CONNECT_CHECK_S = 5.0


def gcs_unreachable(address: str, timeout_s: float = GCS_CONNECT_CHECK_S) -> str | None:
    """Why nothing answers at ``address`` (``HOST:PORT``, optionally ``ray://`` or ``gcs://``), or None when a TCP
    connection opens there or the address has no port to check (``auto``, ``local``)."""
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        return f"nothing answers at {host}:{port} ({err.strerror or type(err).__name__})"
    return None


#: The logger and the start of the WARNING Ray 2.59+ logs each time ``ray.init`` starts a local cluster with token
#: authentication on (ray/_private/authentication/authentication_token_setup.py, PR #64755). grid says the same
#: where it prints the dashboard's address (grid/sweep/driver.py: "token: `ray get-auth-token`"), so it is not
#: repeated on every run; the warning that token authentication is *off* is kept.
TOKEN_NOTICE = ("ray._private.authentication.authentication_token_setup",
                "Token authentication is enabled for this Ray cluster")


def keep_ray_record(record: logging.LogRecord) -> bool:
    """False for Ray's token-authentication-enabled notice (:data:`TOKEN_NOTICE`), True for every other record."""
    return not (record.name == TOKEN_NOTICE[0] and record.getMessage().startswith(TOKEN_NOTICE[1]))


def start_ray(init: RayInit):
    """``ray.init(**init.kwargs)`` after setting ``init.env``; returns Ray's context. Raises ``RayStartError`` (the
    cluster at ``ray.address`` cannot be reached: ``setting='ray.address'``; the local cluster does not start)."""
    if not init.local and isinstance(init.kwargs.get("address"), str):
        why = gcs_unreachable(init.kwargs["address"])
        if why:
            raise RayStartError(f"cannot join the Ray cluster at ray.address={init.kwargs['address']}: {why}",
                                "ray.address")
    os.environ.update(init.env)
    logging.getLogger(TOKEN_NOTICE[0]).addFilter(keep_ray_record)  # added once however often Ray starts
    import ray
    from ray._private import ray_constants

    if init.env.get(LOOPBACK_SWITCH) == "0":
        # read once when Ray is imported; Ray may have been imported before this call (tests, notebooks)
        ray_constants.ENABLE_RAY_CLUSTER = False
    for attempt in range(1, DASHBOARD_PORT_ATTEMPTS + 1):
        try:
            return ray.init(**init.kwargs)
        except Exception as err:  # Ray raises a bare Exception when its dashboard cannot bind
            raced = init.local and "dashboard_port" in init.kwargs and _dashboard_port_taken(err)
            if not raced or attempt == DASHBOARD_PORT_ATTEMPTS:
                wrapped = _start_error(init, err, raced)
                if wrapped is None:
                    raise
                raise wrapped from err
            ray.shutdown()  # the GCS and raylet of the failed start are still running
            taken = init.kwargs["dashboard_port"]
            init.kwargs["dashboard_port"] = free_port(LOOPBACK)
            init.notes.append(f"the Ray dashboard's port {taken} was taken by another process while Ray started; "
                              f"the Ray dashboard uses port {init.kwargs['dashboard_port']}")
    raise AssertionError("unreachable: the last attempt returns or raises")


def _start_error(init: RayInit, err: Exception, dashboard_port_taken: bool) -> RayStartError | None:
    """What a failed ``ray.init`` is reported as: ``RayStartError`` naming the setting to change where there is one;
    None for an error that is not one of Ray's start errors (it propagates as it is)."""
    if dashboard_port_taken:
        return RayStartError(f"the Ray dashboard found no free port in {DASHBOARD_PORT_ATTEMPTS} tries (each taken by "
                             f"another process while Ray started): {err}", "ray.dashboard_port")
    if isinstance(err, (ConnectionError, ValueError)):
        if init.local:
            return RayStartError(f"the local Ray cluster did not start: {err}")
        return RayStartError(f"cannot join the Ray cluster at ray.address={init.kwargs['address']}: {err}",
                             "ray.address")
    if isinstance(err, RuntimeError):
        return RayStartError(f"Ray did not start: {err}")
    return None
