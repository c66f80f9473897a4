"""How far off the twin's figures are, by kind of configuration: the spread of its errors on published measurements.

Every scored row of ``grid/twin/calibration_rows.yaml`` (fitted and held out; rejected rows are left out) is replayed
by :mod:`grid.twin.fidelity`; its relative error ``twin / published - 1`` goes into the cell
(metric, model kind, GPU family) of its run. ``uncertainty(metric, moe=..., gpu=...)`` returns the root-mean-square of
the relative errors of that cell: a relative one-sigma for a figure of that metric on that kind of configuration
(0.25 = the twin has been off by about 25% on such figures). Cells with fewer than ``MIN_ROWS`` rows fall back to the
metric over both model kinds on that GPU family, then to the metric over every row. The spread table is data
(``uncertainty_table.yaml`` next to this module), written by ``python experiments/twin_fidelity.py
--write-uncertainty`` from the same replay that prints docs/twin.md's fidelity table, and checked against a fresh replay
by tests/twin/test_calibration.py; reading it costs nothing at ranking time.

Metrics: ``ttft_ms``, ``tpot_ms``, ``output_tok_per_s``, ``input_tok_per_s`` (grid.twin.fidelity.METRICS).
GPU families: by SM version, ``ampere`` (SM80-86), ``ada`` (SM89), ``hopper`` (SM90), ``blackwell`` (SM100+); a
server spanning several nodes (hardware ``nodes`` > 1, grid/twin/crossnode.py) is its own family, e.g.
``hopper-multinode``, so that rows across nodes do not widen the spread of single-node figures.

For the report and search: a twin-predicted difference between two configurations smaller than
``uncertainty(...)`` of the figure compared is a difference the twin has not shown it can resolve in absolute terms
(errors shared by both configurations cancel in a ranking, so this is a conservative bound; ranking fidelity is
tested separately).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

TABLE_FILE = Path(__file__).with_name("uncertainty_table.yaml")
MIN_ROWS = 2  # a cell needs this many rows to stand on its own (one row is an error, not a spread)
METRICS = ("ttft_ms", "tpot_ms", "output_tok_per_s", "input_tok_per_s")
FAMILIES = ("ampere", "ada", "hopper", "blackwell")
MULTINODE = "-multinode"  # suffix of the family of a server spanning several nodes


def gpu_family(sm_version: int) -> str:
    """'ampere' | 'ada' | 'hopper' | 'blackwell' for an SM version (80 -> ampere, 89 -> ada, 90 -> hopper,
    100/120 -> blackwell). Raises ``ValueError`` below SM80 (no calibration row, no family)."""
    if sm_version >= 100:
        return "blackwell"
    if sm_version >= 90:
        return "hopper"
    if sm_version >= 89:
        return "ada"
    if sm_version >= 80:
        return "ampere"
    raise ValueError(f"sm_version {sm_version}: the twin's uncertainty table covers SM80 and newer ({FAMILIES})")


def hardware_family(hardware) -> str:
    """The family of a ``HardwareSpec``: :func:`gpu_family` of its SM version, with ``-multinode`` when it describes
    several nodes (``nodes`` > 1). Raises ``ValueError`` below SM80."""
    family = gpu_family(hardware.sm_version)
    return family + MULTINODE if int(getattr(hardware, "nodes", 1) or 1) > 1 else family


def spread_table(errors: list[tuple[str, bool, str, float]]) -> dict[str, Any]:
    """Build the table from (metric, moe, family, relative error) tuples: for each cell key
    ``metric/kind/family``, ``metric/*/family`` and ``metric/*/*`` the rows and the RMS relative error (rounded to
    0.001). ``kind`` is 'moe' or 'dense'."""
    cells: dict[str, list[float]] = {}
    for metric, moe, family, err in errors:
        kind = "moe" if moe else "dense"
        for key in (f"{metric}/{kind}/{family}", f"{metric}/*/{family}", f"{metric}/*/*"):
            cells.setdefault(key, []).append(err)
    return {
        key: {"rows": len(errs), "rms_rel_error": round(math.sqrt(sum(e * e for e in errs) / len(errs)), 3)}
        for key, errs in sorted(cells.items())
    }


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return yaml.safe_load(TABLE_FILE.read_text())["cells"]


def uncertainty(metric: str, *, moe: bool, gpu: str | int) -> float:
    """Relative one-sigma of a twin figure of ``metric`` for a dense (``moe=False``) or MoE model on GPU family
    ``gpu`` (a name from ``FAMILIES``, optionally with ``-multinode``, or an SM version): the RMS relative error of the calibration rows of that kind
    (module docstring), falling back to coarser cells when a cell has fewer than ``MIN_ROWS`` rows.

    Raises ``ValueError`` naming the allowed values for an unknown metric or family."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r}: one of {METRICS}")
    family = gpu_family(gpu) if isinstance(gpu, int) else gpu
    if family.removesuffix(MULTINODE) not in FAMILIES:
        raise ValueError(f"gpu {gpu!r}: one of {FAMILIES} (with {MULTINODE!r} across nodes) or an SM version")
    table = _table()
    kind = "moe" if moe else "dense"
    for key in (f"{metric}/{kind}/{family}", f"{metric}/*/{family}", f"{metric}/*/*"):
        cell = table.get(key)
        if cell and cell["rows"] >= MIN_ROWS:
            return float(cell["rms_rel_error"])
    raise ValueError(f"metric {metric!r}: no calibration rows in {TABLE_FILE.name}")
