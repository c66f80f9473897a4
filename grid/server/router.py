"""SGLang's router in front of several servers: its command line (pure) and its process, which grid starts, waits for
and reaps as it does a server's (grid/server/process.py ``ManagedServer``: its own process group, a watchdog).

The router is the ``sglang-router`` package (``python -m sglang_router.launch_router``; grid's ``router`` extra),
a Rust gateway: with ``--worker-urls`` it spreads requests over aggregated servers, with ``--pd-disaggregation
--prefill URL BOOTSTRAP_PORT ... --decode URL ...`` it sends each request to a prefill and a decode server
(sgl-project/sglang ``docs/advanced_features/sgl_model_gateway.md`` and ``pd_disaggregation.md``). Facts read off
sglang-router 0.3.2 running here in front of two twins and two released SGLang servers on the CPU:

* it answers ``/liveness`` (200) within a second and registers its workers in the background; ``/readiness`` says
  503 until one of them is healthy, and ``GET /workers`` lists each with ``is_healthy``: the router is ready for load
  once every worker is listed healthy;
* it always serves Prometheus metrics on a second port, 29000 unless ``--prometheus-port``; a second router on one
  host then panics ("failed to install Prometheus metrics exporter ... Address already in use"), so grid gives each
  its own;
* it renames its process ``sglang::router`` (setproctitle), so it is found by its port, not its command line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from grid.server.net import get_json
from grid.server.process import ManagedServer, StartupError

#: ``--policy`` values grid uses (sglang-router 0.3.2 ``router_args.py``; its ``manual`` needs a routing key per
#: request, which grid's load does not carry).
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
ROUTER_MODULE = "sglang_router.launch_router"


def router_argv(*, port: int, metrics_port: int, policy: str, workers: Sequence[str] = (),
                prefill: Sequence[tuple[str, int | None]] = (), decode: Sequence[str] = (), host: str = "127.0.0.1",
                python: str = sys.executable) -> list[str]:
    """The router's command line: in front of aggregated ``workers`` (URLs), or of ``prefill`` servers (URL, bootstrap
    port or None) and ``decode`` servers (URLs) in PD mode; serving on ``host``:``port``, its Prometheus metrics on
    ``metrics_port``. Raises ``ValueError`` naming the allowed policies for another ``policy``, and when it is given
    both kinds of servers, neither, or one PD role without the other."""
    if policy not in POLICIES:
        raise ValueError(f"router policy {policy!r}; allowed: {', '.join(POLICIES)}")
    if workers and (prefill or decode):
        raise ValueError("a router fronts aggregated workers or prefill and decode servers, not both")
    argv = [python, "-m", ROUTER_MODULE]
    if workers:
        argv += ["--worker-urls", *workers]
    elif prefill and decode:
        argv.append("--pd-disaggregation")
        for url, bootstrap in prefill:
            argv += ["--prefill", url, "none" if bootstrap is None else str(bootstrap)]
        for url in decode:
            argv += ["--decode", url]
    else:
        raise ValueError("a router needs worker URLs, or prefill and decode servers (both)")
    return argv + ["--policy", policy, "--host", host, "--port", str(port), "--prometheus-host", host,
                   "--prometheus-port", str(metrics_port)]


class Router:
    """A router process in front of ``workers`` (the URLs it must list healthy before load; all of a PD router's
    servers). Lifecycle: :meth:`start` (raises ``StartupError``), :meth:`url` while up, :meth:`stop` (reaps its whole
    process group; safe to call twice)."""

    def __init__(self, argv: list[str], workers: Sequence[str], log_path: str | Path, host: str, port: int) -> None:
        self.workers = list(workers)
        self.proc = ManagedServer(argv, {}, log_path, host, port)

    @property
    def url(self) -> str:
        return f"http://{self.proc.host}:{self.proc.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        """Launch and wait until it serves and lists every worker healthy, within ``timeout_s`` real seconds. Raises
        ``StartupError``: ``startup_exit`` when it exits first (its log tail attached), ``startup_timeout`` naming
        the workers still missing or unhealthy (the router is stopped before raising)."""
        t0 = time.monotonic()
        self.proc.start()
        self.proc.wait_ready(timeout_s, path="/liveness")
        missing = list(self.workers)
        while time.monotonic() - t0 < timeout_s:
            if not self.proc.alive():
                tail = self.proc.log_tail()
                self.proc.stop(1.0)
                raise StartupError("startup_exit", f"the router exited with code {self.proc.exit_code()} while "
                                   "registering its workers", self.proc.exit_code(), tail)
            healthy = {w.get("url") for w in self.listed() if w.get("is_healthy")}
            missing = [u for u in self.workers if u not in healthy]
            if not missing:
                return
            time.sleep(0.1)
        tail = self.proc.log_tail()
        self.proc.stop()
        raise StartupError("startup_timeout", f"the router listed {len(self.workers) - len(missing)} of "
                           f"{len(self.workers)} workers healthy after {timeout_s:g} s; missing: {', '.join(missing)}",
                           None, tail)

    def listed(self) -> list[dict]:
        """The router's ``GET /workers`` list (``url``, ``is_healthy``, ``worker_type``, ...); [] when it does not
        answer."""
        try:
            return list(get_json(f"{self.url}/workers", timeout=5.0).get("workers") or [])
        except (OSError, ValueError):
            return []

    def stop(self, grace_s: float = 10.0) -> None:
        self.proc.stop(grace_s)
