"""The report's table of the twin's forecasts: every configuration the search could launch, the twin's score for it
as the sweep last calibrated it, the score expected once the twin's error learned from the measured configurations
is applied, its 95% interval, and the measured score where it ran (``search.json`` ``forecasts``, written by
grid/sweep/driver.py from grid/search/intervals.py). Configurations the search left out show what it expected of
them; measured ones show whether the interval held."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grid.report.select import OBJECTIVES, fmt_score

TITLE = "The twin's forecasts (95% interval)"


def forecast_rows(searched: Mapping[str, Any], objective_kind: str) -> list[dict[str, Any]]:
    """One row per configuration of ``searched["forecasts"]`` (label, forecast, expected, low, high, measured),
    best expected first; [] when the search recorded none, or scored another objective than ``objective_kind`` (a
    re-judged report: the forecasts are of the objective the sweep ran under)."""
    if searched.get("objective") != objective_kind:
        return []
    higher = OBJECTIVES[objective_kind].higher_is_better
    rows = [{"config_hash": h, **entry} for h, entry in (searched.get("forecasts") or {}).items()]
    return sorted(rows, key=lambda r: (-r["expected"] if higher else r["expected"], r["label"] or ""))


def cells(row: Mapping[str, Any], unit: str) -> list[str]:
    """[configuration, twin, expected (interval), measured, held] as text."""
    m = row.get("measured")
    held = "" if m is None else ("yes" if row["low"] <= m <= row["high"] else "no")
    return [row["label"] or row["config_hash"], f"{fmt_score(row['forecast'])} {unit}",
            f"{fmt_score(row['expected'])} ({fmt_score(row['low'])} .. {fmt_score(row['high'])})",
            "not run" if m is None else f"{fmt_score(m)} {unit}", held]


HEADER = ("configuration", "twin (calibrated)", "expected (95% interval)", "measured", "in the interval")


def summary(rows: Sequence[Mapping[str, Any]], calibrated: bool) -> str:
    """One line above the table: what the columns are, and how many measured scores the intervals held."""
    measured = [r for r in rows if r.get("measured") is not None]
    held = sum(1 for r in measured if r["low"] <= r["measured"] <= r["high"])
    twin = "the twin calibrated on this sweep's measurements" if calibrated else "the twin's spec-sheet model"
    return (f"Twin: {twin}; expected: with the error the measured configurations showed (grid/search/intervals.py); "
            f"{held} of {len(measured)} measured scores lie in their interval")


def markdown_lines(searched: Mapping[str, Any], objective_kind: str) -> list[str]:
    rows = forecast_rows(searched, objective_kind)
    if not rows:
        return []
    unit = OBJECTIVES[objective_kind].unit
    out = [f"## {TITLE}", "", summary(rows, bool(searched.get("calibrated"))), "",
           "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in cells(r, unit)) + " |" for r in rows]
    return out + [""]
