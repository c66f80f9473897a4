"""Experiments: post-processing registered by ``kind`` that turns a run's load points into a comparison artefact.

``seed_replay`` (``+experiment=seed_session``) compares the twin with the seed session's own measurements
(docs/sources.md#the-seed-session) and writes ``seed_vs_twin.csv`` with columns
``condition, metric, unit, seed, twin``.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from rich.table import Table

from grid.config.schema import RunSpec
from grid.storage.rows import JudgedPointRow

EXPERIMENTS: dict[str, Callable[[RunSpec, Sequence[JudgedPointRow], Any], Path]] = {}


def register(kind: str):
    def deco(fn):
        EXPERIMENTS[kind] = fn
        return fn
    return deco


def run_experiment(spec: RunSpec, rows: Sequence[JudgedPointRow], console) -> Path:
    kind = (spec.experiment or {}).get("kind")
    if kind not in EXPERIMENTS:
        raise ValueError(f"experiment.kind={kind!r}; allowed: {', '.join(sorted(EXPERIMENTS))}")
    return EXPERIMENTS[kind](spec, rows, console)


def twin_value(rows: list[dict], condition: str, metric: str, scale: float = 1.0) -> float | None:
    """The metric of the condition's (first measured) load point; None when it was not measured."""
    for row in sorted(rows, key=lambda r: r["point_index"]):
        if row["label"] == condition and row.get(metric) is not None:
            return float(row[metric]) * scale
    return None


def log_value_near(log_rows: list[dict], hashes: set[str], running: int) -> float | None:
    """Gen throughput on the Decode-batch log line whose #running-req is nearest ``running`` (first such line).

    For figures a person read off a live server log ("~200 tok/s with 22 running"): a snapshot, not a peak.
    """
    lines = [r for r in log_rows if r["config_hash"] in hashes and r["kind"] == "decode"
             and r.get("gen_throughput_tok_per_s") is not None and r.get("running_req") is not None]
    lines.sort(key=lambda r: (r["point_index"], r["line_index"]))
    best = min(lines, key=lambda r: abs(r["running_req"] - running), default=None)
    return None if best is None else float(best["gen_throughput_tok_per_s"])


def compare(rows: list[dict], expected: list[dict], log_rows: Sequence[dict] = ()) -> list[dict]:
    """One output row per expected value: condition, metric, unit, seed, twin (pure)."""
    out = []
    for e in expected:
        if "at_running" in e:
            hashes = {r["config_hash"] for r in rows if r["label"] == e["condition"]}
            twin = log_value_near(list(log_rows), hashes, int(e["at_running"]))
        else:
            twin = twin_value(rows, e["condition"], e["metric"], float(e.get("scale", 1.0)))
        out.append({"condition": e["condition"], "metric": e.get("name", e["metric"]), "unit": e.get("unit", ""),
                    "seed": float(e["seed"]), "twin": None if twin is None else round(twin, 3)})
    return out


@register("seed_replay")
def seed_replay(spec: RunSpec, rows: list[dict], console) -> Path:
    from grid.storage.parquet import read_table

    log_rows = read_table(spec.run_dir, "server_log").to_pylist()
    table = compare(rows, (spec.experiment or {}).get("expected", []), log_rows)
    path = Path(spec.run_dir) / "seed_vs_twin.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["condition", "metric", "unit", "seed", "twin"])
        w.writeheader()
        w.writerows(table)
    t = Table(title="Seed session vs twin", title_justify="left")
    for col in ("condition", "metric", "unit", "seed", "twin", "error"):
        t.add_column(col, justify="right" if col in ("seed", "twin", "error") else "left")
    for r in table:
        err = "-" if r["twin"] is None else f"{(r['twin'] - r['seed']) / r['seed'] * 100:+.1f}%"
        t.add_row(r["condition"], r["metric"], r["unit"], f"{r['seed']:g}",
                  "-" if r["twin"] is None else f"{r['twin']:g}", err)
    console.print(t)
    return path
