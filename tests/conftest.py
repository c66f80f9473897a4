"""Shared test helpers: parsing what ``python -m grid.run`` prints (rich tables), so that tests compare printed
values cell by cell instead of searching for substrings anywhere in stdout."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

_RULE = re.compile(r"^\s*─[─\s]*$")


@dataclass
class PrintedTable:
    title: str
    header: list[str]            # one name per column (stacked header lines joined with a space)
    rows: list[list[str]]        # cells as printed, stripped; a cell folded over several lines is joined with " "

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.header, row)) for row in self.rows]


def parse_table(text: str, title: str, justify: str) -> PrintedTable:
    """The rich table whose title line starts with ``title``. ``justify``: ``right`` when every column is
    right-justified (column bounds from where the last header line's words end) or ``left`` (from where they
    start). Raises ``AssertionError`` when the table is not found or a line does not fit its columns."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith(title)), None)
    assert start is not None, f"no table titled {title!r} in the output"
    i = start + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    head = []
    while i < len(lines) and not _RULE.match(lines[i]):
        head.append(lines[i])
        i += 1
    assert head and i < len(lines), f"table {title!r}: no header rule"
    body = []
    for ln in lines[i + 1:]:
        if not ln.strip():
            break
        body.append(ln)
    # a column's header is the run of positions that are not blank on some header line (a stacked header covers
    # the space inside "p50 ms" with the "TTFT" above it); cells extend from there away from their justification
    width = max(len(h) for h in head)
    filled = "".join("x" if any(p < len(h) and h[p] != " " for h in head) else " " for p in range(width))
    runs = [(m.start(), m.end()) for m in re.finditer(r"x+", filled)]
    if justify == "right":
        ends = [b for _, b in runs]
        spans = list(zip([0, *ends[:-1]], ends))
    else:
        starts = [a for a, _ in runs]
        spans = list(zip(starts, [*starts[1:], None]))

    def cells(line: str) -> list[str]:
        if justify == "right":  # nothing may stick out past the last column
            assert not line[spans[-1][1]:].strip(), f"table {title!r}: {line!r} does not fit its columns"
        return [line[a:b].strip() for a, b in spans]

    header = [" ".join(c for c in col if c) for col in zip(*(cells(h) for h in head))]
    rows: list[list[str]] = []
    for ln in body:
        c = cells(ln)
        if c[0] or not rows:
            rows.append(c)
        else:  # a folded cell continues on this line
            rows[-1] = [" ".join(x for x in (a, b) if x) for a, b in zip(rows[-1], c)]
    return PrintedTable(lines[start].strip(), header, rows)


def best_label(text: str) -> str | None:
    """The label on the ``Best configuration: LABEL  (reason)`` line, None when no configuration qualified."""
    m = re.search(r"^Best configuration: (.+?)  \(", text, re.MULTILINE)
    return m.group(1) if m else None


_PLAN = re.compile(r"(?P<name>[\w.-]+): (?P<configurations>\d+) configurations on (?P<engine>\w+) "
                   r"\(SGLang (?P<version>[^)]+)\), (?P<model>.+?) on (?P<hardware>\S+); "
                   r"(?P<recorded>\d+) already recorded, (?P<to_run>\d+) to run\b")


def plan_line(text: str) -> dict[str, str | int]:
    """The fields of the driver's plan line (``NAME: N configurations on ENGINE (SGLang V), MODEL on HW; R already
    recorded, T to run``), however the console wrapped it; counts as ints."""
    found = _PLAN.findall(" ".join(text.split()))
    assert len(found) == 1, f"expected one plan line, found {len(found)}"
    out: dict[str, str | int] = dict(zip(_PLAN.groupindex, found[0]))
    for key in ("configurations", "recorded", "to_run"):
        out[key] = int(out[key])
    return out


def close_to_printed(printed: str, value: float | None) -> bool:
    """Whether ``printed`` (a number shown with some decimals, or "-") shows ``value``: within half a unit of its
    last digit (None for "-")."""
    if printed == "-":
        return value is None
    if value is None:
        return False
    decimals = len(printed.partition(".")[2])
    return abs(float(printed) - value) <= 0.5 * 10 ** -decimals * (1 + 1e-9) + 1e-12


class Printed:
    parse_table = staticmethod(parse_table)
    best_label = staticmethod(best_label)
    plan_line = staticmethod(plan_line)
    close_to_printed = staticmethod(close_to_printed)


@pytest.fixture
def printed() -> type[Printed]:
    """Parsers of grid's console output (see the module docstring)."""
    return Printed


_COSTLY = ("integration", "faults", "real_server", "real_sglang")


def pytest_collection_modifyitems(config, items):
    """Every test without a costlier marker is a ``unit`` test, so ``-m unit`` selects the fast, in-process ones.
    The directory says which package a test covers (tests/<package>/ mirrors grid/<package>/); the marker says
    what it costs.

    On a loaded host the per-test timeout (pyproject ``timeout``, pytest-timeout) is stretched by the load per core
    (tests/timing.py ``slack``): every process a test starts slows by about that factor (the twin's numbers do not:
    its virtual clock is the host's neither way). A test's own ``timeout`` marker is kept."""
    from tests.timing import slack

    base, k = float(config.getini("timeout") or 0), slack()
    for item in items:
        if not any(item.get_closest_marker(m) for m in _COSTLY):
            item.add_marker(pytest.mark.unit)
        if base and k > 1 and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(base * k))
