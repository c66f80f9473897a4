"""Samplers: what is recorded beside the client's own measurements while a load point runs.

A sampler starts when a load point starts and stops when it ends; it returns time-series rows for its own Parquet
table and summary columns for the load-point row. Samplers register by name; measure_trial runs every registered
one whose factory returns an instance for the trial (a factory returns None where it does not apply, e.g. NVML
telemetry on a node without NVIDIA GPUs).

Built in: ``server_log`` (SGLang's Decode/Prefill batch lines from the server log), ``server_metrics`` (/metrics
scraped with prometheus_client's parser, when the server serves it) and ``gpu_telemetry`` (NVML on a GPU node; the
twin's modelled telemetry when engine=sim). The periodic samplers poll from a background thread at most once per
``POLL_INTERVAL_S`` real seconds (plus one read when the load point starts and one when it ends), so they cost the
sweep almost nothing. Against a twin on the virtual clock (``SamplerContext.clock``) they do not poll: the twin
snapshots its /metrics and telemetry every few modelled seconds of a point (grid/twin/server.py ``VCLOCK_SAMPLE_S``),
and at the point's end they read the snapshots of its modelled window, so what they record is the same on any host.
A sampler that cannot work on a trial says why once per process and records nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar
from urllib.parse import urlparse

from grid.engines.base import engine_class
from grid.server.handle import ServerHandle
from grid.server.logparse import parse_batch_line, peak_gen_throughput
from grid.storage.schema import GPU_TELEMETRY_COLUMNS, SERVER_METRICS_COLUMNS, sampled_rows, server_log_rows

log = logging.getLogger("grid.samplers")

#: Real seconds between two polls of a periodic sampler (one scrape a second at most keeps the server lightly loaded).
POLL_INTERVAL_S = 1.0
#: The first poll after the start comes sooner, so that short load points (the twin at time_scale 20 finishes one
#: in a second or two) still get a reading while requests run.
FIRST_POLL_S = 0.5

_said: set[str] = set()


def say_once(key: str, message: str) -> None:
    """Log ``message`` the first time ``key`` is seen in this process."""
    if key not in _said:
        _said.add(key)
        log.warning(message)


@dataclass(frozen=True)
class SamplerContext:
    """What a sampler may need about the trial: the trial's server (its log, what it says about itself), where it
    listens; ``engine`` is the engine kind (``engine.kind``); ``server_urls``: a deployment's servers, whose
    ``/metrics`` are read together (``base_url`` is then the router's); empty: the server at ``base_url``."""

    server: ServerHandle
    base_url: str
    api_key: str | None
    engine: str
    time_scale: float
    config_hash: str
    trial_id: str
    hardware: Any
    clock: str = "real"  # "virtual": the twin's virtual clock (grid/loadgen/vclock.py)
    server_urls: tuple[str, ...] = ()

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        """Where the server metrics are read: each of a deployment's servers, else the trial's endpoint."""
        return self.server_urls or (self.base_url,)


class Sampler(ABC):
    table: ClassVar[str]   # Parquet table of its rows (grid.storage.parquet.TABLES)

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self, point_index: int) -> None:
        """Begin sampling for load point ``point_index``."""

    @abstractmethod
    def stop(self, window_s: tuple[float, float] | None = None) -> tuple[list[dict], dict[str, Any]]:
        """End sampling: (rows for ``table``, summary columns for the load-point row). ``window_s``: on the twin's
        virtual clock, the point's modelled span (first send to last end, s) whose snapshots to read."""


SAMPLERS: dict[str, Callable[[SamplerContext], Sampler | None]] = {}


def register(name: str):
    def deco(factory):
        SAMPLERS[name] = factory
        return factory
    return deco


def make_samplers(ctx: SamplerContext) -> list[Sampler]:
    return [s for s in (factory(ctx) for factory in SAMPLERS.values()) if s is not None]


@register("server_log")
class ServerLogSampler(Sampler):
    """The server's "Decode batch" / "Prefill batch" lines logged during the load point."""

    table = "server_log"

    def start(self, point_index: int) -> None:
        self.point_index = point_index
        self.offset = self.ctx.server.log_size()

    def stop(self, window_s: tuple[float, float] | None = None) -> tuple[list[dict], dict[str, Any]]:
        text = self.ctx.server.read_log(self.offset)
        lines = [p for p in map(parse_batch_line, text.splitlines()) if p is not None]
        peak, running = peak_gen_throughput(text)
        rows = server_log_rows(lines, config_hash=self.ctx.config_hash, trial_id=self.ctx.trial_id,
                               point_index=self.point_index)
        accept = [ln["accept_len"] for ln in lines if ln["kind"] == "decode"
                  and isinstance(ln.get("accept_len"), (int, float)) and ln["accept_len"] > 0]
        prefill = [(ln.get("new_token") or 0, ln.get("cached_token") or 0) for ln in lines if ln["kind"] == "prefill"]
        asked = sum(n + c for n, c in prefill)
        return rows, {"server_gen_tok_per_s_peak": peak, "server_running_at_peak": running,
                      "server_accept_len_mean": sum(accept) / len(accept) if accept else None,
                      "server_cache_hit_rate": sum(c for _, c in prefill) / asked if asked else None}


class PeriodicSampler(Sampler):
    """Polls ``read()`` from a daemon thread: once at start, after ``FIRST_POLL_S``, then every ``POLL_INTERVAL_S``,
    and once at stop. Each read returns sample dicts; ``t_s`` and ``sample_index`` are added here."""

    columns: ClassVar[list]
    samples: list[dict[str, Any]]

    @abstractmethod
    def read(self) -> list[dict[str, Any]]:
        """One poll's samples (may raise ``OSError``/``ValueError``: the poll is skipped)."""

    def summarize(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {}

    def read_window(self, snapshots: list[dict[str, Any]], start_s: float) -> list[dict[str, Any]]:
        """Virtual clock: the samples of the twin's ``snapshots`` (``{"vt", "kind", "metrics", "telemetry"}``, oldest first)
        of a point that began at modelled ``start_s``; ``t_s`` is modelled seconds from it."""
        return []

    @property
    def virtual(self) -> bool:
        return self.ctx.clock == "virtual"

    def _poll(self) -> None:
        try:
            got = self.read()
        except (OSError, ValueError) as err:
            say_once(f"{self.table}:poll", f"{self.table}: a poll failed ({err}); continuing")
            return
        t = time.perf_counter() - self.t0
        for row in got:
            row.setdefault("t_s", t)
            row["sample_index"] = self.n
        self.samples += got
        self.n += 1

    def _loop(self) -> None:
        wait = FIRST_POLL_S
        while not self.halt.wait(wait):
            self._poll()
            wait = POLL_INTERVAL_S

    def start(self, point_index: int) -> None:
        self.point_index, self.samples, self.n = point_index, [], 0
        if self.virtual:
            return  # read at the end, from the twin's snapshots
        self.t0 = time.perf_counter()
        self.halt = threading.Event()
        self._poll()
        self.thread = threading.Thread(target=self._loop, name=f"grid-{self.table}", daemon=True)
        self.thread.start()

    def stop(self, window_s: tuple[float, float] | None = None) -> tuple[list[dict], dict[str, Any]]:
        if self.virtual:
            self.samples = self._read_virtual(window_s)
        else:
            self.halt.set()
            self.thread.join(timeout=10)
            self._poll()
        rows = sampled_rows(self.columns, self.samples, config_hash=self.ctx.config_hash, trial_id=self.ctx.trial_id,
                            point_index=self.point_index)
        return rows, self.summarize(self.samples)

    def _read_virtual(self, window_s: tuple[float, float] | None) -> list[dict[str, Any]]:
        if window_s is None:
            return []
        try:
            # the records' ends are the twin's modelled seconds rounded to the ns (vclock.to_ns): a snapshot at the
            # window's last end may lie up to half a ns past it
            snapshots = vclock_samples(self.ctx.base_url, self.ctx.api_key, window_s[0] - 1e-9, window_s[1] + 1e-9)
        except (OSError, ValueError) as err:
            say_once(f"{self.table}:vclock", f"{self.table}: the twin's snapshots could not be read ({err})")
            return []
        out = self.read_window(snapshots, window_s[0])
        for i, row in enumerate(out):
            row["sample_index"] = i
        return out


def vclock_samples(base_url: str, api_key: str | None, since_s: float, until_s: float) -> list[dict[str, Any]]:
    """The twin's snapshots with modelled times in ``[since_s, until_s]`` (GET /grid/vclock/samples; grid/loadgen/
    vclock.py). Raises ``OSError`` when the twin does not answer, ``ValueError`` for an answer that is not JSON."""
    import urllib.parse

    from grid.loadgen.vclock import SAMPLES_PATH
    from grid.server.net import get_json

    query = urllib.parse.urlencode({"from": repr(float(since_s)), "to": repr(float(until_s))})
    return list(get_json(f"{base_url.rstrip('/')}{SAMPLES_PATH}?{query}", api_key)["samples"])


@register("server_metrics")
def _server_metrics(ctx: SamplerContext) -> Sampler | None:
    from grid.server.metrics_scrape import MetricsUnavailable, fetch_text, missing_gauges_message

    try:
        text = "\n".join(fetch_text(url, api_key=ctx.api_key) for url in ctx.metrics_urls)
    except MetricsUnavailable as err:
        say_once("server_metrics", f"server metrics not recorded: {err}")
        return None
    try:
        missing = missing_gauges_message(text)
    except ValueError as err:  # not the Prometheus text format
        missing = f"/metrics is not in the Prometheus text format ({err})"
    if missing:  # recorded anyway (srv_gauges_found = 0 tells the report)
        say_once("server_metrics:names", f"server metrics: {missing}")
    return ServerMetricsSampler(ctx)


class ServerMetricsSampler(PeriodicSampler):
    """The server's Prometheus gauges (running/queued requests, token usage, gen throughput, cache hit rate); of a
    deployment, its servers' read as one server's ranks are (grid/server/metrics_scrape.py ``GAUGES``: requests,
    tokens and throughput add up, fractions take the fullest server)."""

    table = "server_metrics"
    columns = SERVER_METRICS_COLUMNS

    def read(self) -> list[dict[str, Any]]:
        from grid.server.metrics_scrape import MetricsUnavailable, fetch_text, parse_metrics

        try:
            return [parse_metrics("\n".join(fetch_text(url, api_key=self.ctx.api_key)
                                             for url in self.ctx.metrics_urls))]
        except MetricsUnavailable as err:
            raise OSError(str(err)) from None

    def read_window(self, snapshots: list[dict[str, Any]], start_s: float) -> list[dict[str, Any]]:
        from grid.server.metrics_scrape import parse_metrics

        return [{**parse_metrics(s["metrics"]), "t_s": float(s["vt"]) - start_s, "snapshot": s.get("kind")}
                for s in snapshots if s.get("metrics")]

    def summarize(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        from grid.server.metrics_scrape import gauges_found, summarize_series, summarize_transfers

        # the first and last scrapes bracket the load point (the server is idle then, its gauges those of its last
        # step before): the summary uses only the ones in between, and stays null for a load point shorter than
        # FIRST_POLL_S. The virtual clock's snapshots say which they are: those at its start and at the end of a
        # point without a measured window bracket it; those every VCLOCK_SAMPLE_S and at the window's end (the
        # gauges of its last step, under load) lie inside (grid/twin/server.py SNAPSHOT_KINDS)
        inside = [s for s in samples if s.get("snapshot") in ("tick", "window_end")] if self.virtual else samples[1:-1]
        return {**summarize_series(inside), **summarize_transfers(samples), "srv_scrapes": len(samples),
                "srv_gauges_found": gauges_found(samples)}


@register("gpu_telemetry")
def _gpu_telemetry(ctx: SamplerContext) -> Sampler | None:
    engine = engine_class(ctx.engine)
    if engine.twin:  # the twin serves the telemetry its performance model implies
        from grid.telemetry.modelled import ModelledReader, modelled_topology

        reader: Any = ModelledReader(ctx.base_url, ctx.api_key)
        try:
            topo = modelled_topology(reader.fetch())
        except (OSError, ValueError) as err:
            say_once("gpu_telemetry:sim", f"modelled GPU telemetry not recorded: the twin did not answer ({err})")
            return None
        return GpuTelemetrySampler(ctx, reader, topo)
    if getattr(ctx.hardware, "vendor", None) == "cpu":
        say_once("gpu_telemetry:cpu", f"GPU telemetry not recorded: hardware {ctx.hardware.name} serves on the host "
                                      "CPU (no GPU, no NVML)")
        return None
    host = urlparse(ctx.base_url).hostname or ""
    if engine.external and host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        say_once("gpu_telemetry:remote", f"GPU telemetry not recorded: the server at {ctx.base_url} is not on this "
                                         "node, so this node's NVML would not describe it")
        return None
    from grid.telemetry.nvml import NvmlReader, NvmlUnavailable
    from grid.telemetry.topology import node_topology_json

    try:
        reader = NvmlReader()
    except NvmlUnavailable as err:
        say_once("gpu_telemetry:nvml", f"GPU telemetry not recorded: {err}")
        return None
    return GpuTelemetrySampler(ctx, reader, node_topology_json())


class GpuTelemetrySampler(PeriodicSampler):
    """Every GPU of the node (NVML), or the twin's modelled equivalent; see grid/telemetry."""

    table = "gpu_telemetry"
    columns = GPU_TELEMETRY_COLUMNS

    def __init__(self, ctx: SamplerContext, reader: Any, topology_json: str | None) -> None:
        super().__init__(ctx)
        self.reader, self.topology_json = reader, topology_json

    def read(self) -> list[dict[str, Any]]:
        return self.reader.read()

    def read_window(self, snapshots: list[dict[str, Any]], start_s: float) -> list[dict[str, Any]]:
        from grid.telemetry.modelled import rows_from_snapshots

        out: list[dict[str, Any]] = []
        prev, decode = None, None
        for s in snapshots:
            snap = s["telemetry"]
            decode = snap.get("decode") or decode
            if prev is not None:
                out += [{**row, "t_s": float(s["vt"]) - start_s} for row in rows_from_snapshots(prev, snap, decode)]
            prev = snap
        return out

    def start(self, point_index: int) -> None:
        if hasattr(self.reader, "reset"):
            self.reader.reset()  # modelled: the first read of a load point is its baseline
        super().start(point_index)

    def summarize(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        from grid.telemetry.summary import summarize_gpu_rows

        return {**summarize_gpu_rows(samples), "gpu_topology_json": self.topology_json}
