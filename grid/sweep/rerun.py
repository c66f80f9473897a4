"""Which recorded configurations a resumed run measures again, and keeping their earlier results.

A run resumes from its Parquet files: a configuration with a recorded load-points file is not run again. Three things
make it run again, each without touching the others:

* ``rerun.status`` / ``rerun.error_class`` / ``rerun.label`` (glob) / ``rerun.config_hash`` (prefix): the user's
  choice; ``retry_failed=true`` is ``rerun.status=[failed]``;
* the probe setting changed: with ``probe.enabled=false`` a configuration the probe had marked invalid
  (``probe_status`` ``failed``) runs again, since the probe that judged it is now off;
* the objective changed: a configuration with load points early stopping skipped under another objective (kind or
  SLOs: ``early_stop_objective``) runs again, since nothing says those points could not count now;
* the host was too busy: a configuration with a load point the load generator's loop ran late on
  (``client_lag_pct`` above grid.metrics.hostnoise.HOST_NOISE_MAX_PCT; ``twin_behind_pct`` in earlier rows) runs
  again;
* a ``skipped`` configuration (its machinery was lost, grid/server/infra.py) always runs again.

The earlier files of a configuration that runs again (every Parquet table's file and its server log) are moved to
``parquet/_superseded/<stamp>/`` and ``logs/_superseded/<stamp>/``: nothing completed is lost, and the report reads
only the new results. :func:`selected` is pure; :func:`set_aside` moves files.
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from grid.config.schema import ConfigError, RunSpec
from grid.metrics.hostnoise import host_noise
from grid.report.select import objective_key
from grid.server.statuses import TRIAL_CLASSES, TrialStatus

#: The load-point columns the selection reads (the first row of each configuration's file; ``early_stop_objective``
#: from every row: the objectives early stopping judged its skipped points by).
COLUMNS = ["config_hash", "label", "trial_status", "trial_error_class", "probe_status", "early_stop_objective",
           "status", "twin_behind_pct", "client_lag_pct", "host_noise_max_pct"]
SUPERSEDED = "_superseded"


def check(spec: RunSpec) -> None:
    """Raise ``ConfigError`` naming the key and the allowed values for a ``rerun.*`` value that can never match."""
    r = spec.rerun
    statuses = typing.get_args(TrialStatus)
    for value in r.status:
        if value not in statuses:
            raise ConfigError(f"rerun.status: {value!r} is not a trial status; allowed: {', '.join(statuses)}")
    for value in r.error_class:
        if value not in TRIAL_CLASSES:
            raise ConfigError(f"rerun.error_class: {value!r} is not a trial error class; allowed: "
                              f"{', '.join(sorted(TRIAL_CLASSES))}")
    for value in r.config_hash:
        if not re.fullmatch(r"[0-9a-f]{4,}", value):
            raise ConfigError(f"rerun.config_hash: {value!r} is not a config hash or a prefix of one (4 or more "
                              "lower-case hex digits, as printed in the report)")


def selected(spec: RunSpec, recorded: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """config_hash -> why it runs again, for the ``recorded`` configurations (one row of :data:`COLUMNS` each, with
    ``early_stop_objectives``: the set over its rows) that match a ``rerun`` selector, ``retry_failed``, a probe now
    off, points skipped under another objective, or are ``skipped``. Pure."""
    r = spec.rerun
    statuses = {*r.status, *(("failed",) if spec.retry_failed else ())}
    out: dict[str, str] = {}
    for row in recorded:
        h, status, cls = row["config_hash"], row.get("trial_status"), row.get("trial_error_class")
        label = row.get("label") or ""
        if status == "skipped":
            why = "skipped (its machinery was lost)"
        elif status in statuses:
            why = f"rerun.status={status}" if status in r.status else "retry_failed=true"
        elif cls and cls in r.error_class:
            why = f"rerun.error_class={cls}"
        elif (pattern := next((p for p in r.label if fnmatch.fnmatchcase(label, p)), None)) is not None:
            why = f"rerun.label={pattern}"
        elif (prefix := next((p for p in r.config_hash if h.startswith(p)), None)) is not None:
            why = f"rerun.config_hash={prefix}"
        elif not spec.probe.enabled and status == "invalid" and row.get("probe_status") == "failed":
            why = "the probe that marked it invalid is now off (probe.enabled=false)"
        elif row.get("host_noise"):
            why = "host noise: the host was too busy while measuring it"
        elif stale := sorted(o for o in row.get("early_stop_objectives", ()) if o != objective_key(spec.objective)):
            why = f"early stopping skipped load points under another objective ({'; '.join(stale)})"
        else:
            continue
        out[h] = why
    return out


def recorded_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """The first load-point row (:data:`COLUMNS`) of every configuration recorded in ``run_dir``."""
    from grid.storage.parquet import read_table

    seen: dict[str, dict[str, Any]] = {}
    for row in read_table(run_dir, "load_points", COLUMNS).to_pylist():
        first = seen.setdefault(row["config_hash"], {**row, "early_stop_objectives": set(), "host_noise": False})
        if row.get("early_stop_objective"):
            first["early_stop_objectives"].add(row["early_stop_objective"])
        first["host_noise"] = first["host_noise"] or (row.get("status") in ("ok", "partial") and host_noise(row))
    return list(seen.values())


def set_aside(run_dir: str | Path, hashes: Iterable[str]) -> int:
    """Move the files of ``hashes`` (every table's ``<hash>.parquet``, ``logs/<hash>.log``) under ``_superseded/
    <stamp>/``; the load-points file last, so an interrupted move leaves the configuration recorded or re-run, never
    half. Returns how many files were moved."""
    root = Path(run_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = 0
    parquet = root / "parquet"
    tables = sorted((p for p in parquet.iterdir() if p.is_dir() and not p.name.startswith("_")),
                    key=lambda p: p.name == "load_points") if parquet.is_dir() else []
    for h in hashes:
        for table in tables:
            moved += _move(table / f"{h}.parquet", parquet / SUPERSEDED / stamp / table.name)
        moved += _move(root / "logs" / f"{h}.log", root / "logs" / SUPERSEDED / stamp)
    return moved


def _move(src: Path, dest_dir: Path) -> int:
    if not src.exists():
        return 0
    dest_dir.mkdir(parents=True, exist_ok=True)
    os.replace(src, dest_dir / src.name)
    return 1
