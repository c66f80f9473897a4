"""Samplers: what is recorded beside the client's own measurements while a load point runs.

A sampler starts when a load point starts and stops when it ends; it returns time-series rows for its own Parquet
table and summary columns for the load-point row. Samplers register by name; measure_trial runs every registered
one whose factory returns an instance for the trial (a factory returns None where it does not apply, e.g. NVML
telemetry on a node without NVIDIA GPUs).

Built in: ``server_log`` (SGLang's Decode/Prefill batch lines from the server log).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from grid.server.logparse import parse_batch_line, peak_gen_throughput
from grid.storage.schema import server_log_rows


@dataclass(frozen=True)
class SamplerContext:
    """What a sampler may need about the trial. ``server`` has the ServerSession interface."""

    server: Any
    base_url: str
    api_key: str | None
    engine: str
    time_scale: float
    config_hash: str
    trial_id: str
    hardware: Any


class Sampler(ABC):
    table: ClassVar[str]   # Parquet table of its rows (grid.storage.parquet.TABLES)

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self, point_index: int) -> None:
        """Begin sampling for load point ``point_index``."""

    @abstractmethod
    def stop(self) -> tuple[list[dict], dict[str, Any]]:
        """End sampling: (rows for ``table``, summary columns for the load-point row)."""


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

    def stop(self) -> tuple[list[dict], dict[str, Any]]:
        text = self.ctx.server.read_log(self.offset)
        lines = [p for p in map(parse_batch_line, text.splitlines()) if p is not None]
        peak, running = peak_gen_throughput(text)
        rows = server_log_rows(lines, config_hash=self.ctx.config_hash, trial_id=self.ctx.trial_id,
                               point_index=self.point_index)
        return rows, {"server_gen_tok_per_s_peak": peak, "server_running_at_peak": running}
