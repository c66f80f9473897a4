"""Atomic Parquet files per trial, and reading them back as one table.

Layout under the run directory::

    parquet/requests/<config_hash>.parquet      one row per request (grid.storage.schema.REQUESTS_SCHEMA)
    parquet/server_log/<config_hash>.parquet    one row per scheduler log line during load (SERVER_LOG_SCHEMA)
    parquet/load_points/<config_hash>.parquet   one row per load point (LOAD_POINTS_SCHEMA); written last: its
                                                presence marks the trial as recorded

Each file is written to a temporary name in the same folder, fsynced, then renamed over the final name, so a
reader (or a resumed run) never sees a torn file. Every file uses the fixed schema, so a trial whose load points
all failed still appends. A trial is stored in one file per table named by its configuration hash, so running it
again replaces its files: nothing is ever stored twice.

A file damaged anyway (a disk fault, a copy cut short, a hand edit) is found by :func:`set_aside_corrupt` on resume:
it and the load-points file of the same trial move to ``parquet/_corrupt/`` (so the trial counts as not recorded
and is run again) and the rest of the run directory is kept. Temporary files left by a killed writer are removed.
(ray_hydra.md §6.2.)
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from grid.storage.schema import (ACCURACY_SCHEMA, GPU_TELEMETRY_SCHEMA, LOAD_POINTS_SCHEMA, REQUESTS_SCHEMA,
                                 SERVER_LOG_SCHEMA, SERVER_METRICS_SCHEMA)
from grid.storage.rows import LoadPointRow

#: Every table a trial writes, in writing order: ``load_points`` last, since its file marks the trial as recorded.
TABLES = {"requests": REQUESTS_SCHEMA, "server_log": SERVER_LOG_SCHEMA, "accuracy": ACCURACY_SCHEMA,
          "server_metrics": SERVER_METRICS_SCHEMA, "gpu_telemetry": GPU_TELEMETRY_SCHEMA,
          "load_points": LOAD_POINTS_SCHEMA}


def table_dir(run_dir: str | Path, table: str) -> Path:
    return Path(run_dir) / "parquet" / table


def write_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_trial(run_dir: str | Path, config_hash: str, tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Write one trial's rows, one file per table (every registered table, empty ones too); the load-points file
    goes last and marks the trial as recorded. Raises ``KeyError`` for a table that is not registered."""
    unknown = set(tables) - set(TABLES)
    if unknown:
        raise KeyError(f"unregistered tables: {sorted(unknown)}; known: {list(TABLES)}")
    for name, schema in TABLES.items():
        write_atomic(_arrow_table(tables.get(name, []), schema), table_dir(run_dir, name) / f"{config_hash}.parquet")


def _arrow_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """``rows`` as a table of ``schema``. Text Arrow cannot store (UTF-16 surrogates a server sent, which UTF-8
    refuses) is stored with each surrogate pair rejoined and each lone half as U+FFFD: no text a server sends can
    keep a trial from being recorded."""
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except UnicodeEncodeError:
        return pa.Table.from_pylist([{k: _scrub(v) for k, v in r.items()} for r in rows], schema=schema)


def _scrub(value):
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _readable(path: Path) -> bool:
    try:
        pq.read_table(path)
    except Exception:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for damaged files
        return False
    return True


def set_aside_corrupt(run_dir: str | Path) -> list[str]:
    """Move every unreadable Parquet file (and the load-points file of its trial, so the trial is re-run) to
    ``parquet/_corrupt/<table>/``; delete temporary files of interrupted writes. Returns one line per file set
    aside, ``"<table>/<name>: <what>"``."""
    root = Path(run_dir) / "parquet"
    if not root.is_dir():
        return []
    notes: list[str] = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for tmp in root.glob("*/.*.tmp"):
        tmp.unlink(missing_ok=True)
    bad_hashes: set[str] = set()
    for table_path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for f in sorted(table_path.glob("*.parquet")):
            if not _readable(f):
                bad_hashes.add(f.stem)
                notes.append(f"{table_path.name}/{f.name}: unreadable (corrupt or truncated)")
                _move_aside(f, root, stamp)
    for h in sorted(bad_hashes):
        lp = table_dir(run_dir, "load_points") / f"{h}.parquet"
        if lp.exists():
            notes.append(f"load_points/{lp.name}: trial set aside with its damaged files, to be run again")
            _move_aside(lp, root, stamp)
    return notes


def _move_aside(f: Path, root: Path, stamp: str) -> None:
    dest = root / "_corrupt" / f.parent.name / f"{f.stem}.{stamp}.parquet"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(f, dest)


def _schema_or_none(path: Path) -> pa.Schema | None:
    try:
        return pq.read_schema(path)
    except Exception:  # noqa: BLE001 - damaged file: see set_aside_corrupt
        return None


def read_table(run_dir: str | Path, table: str, columns: list[str] | None = None) -> pa.Table:
    """Every readable file of ``table`` as one table over the union of their schemas (empty table if none).

    Files written by different grid versions differ in columns: the schema is ``pa.unify_schemas`` over the current
    schema and every file's (types promoted where they differ, e.g. int32 -> int64), so a column missing from some
    files reads as null in their rows and a column only some files have is kept, whatever order the files come in
    (``pd.read_parquet`` on the folder takes the first file's schema and drops the rest). The scan is a
    ``pyarrow.dataset`` over that schema. Unreadable files are skipped (a resume sets them aside, see
    :func:`set_aside_corrupt`). ``columns``: read only these, in this order (a file without one gives nulls).
    Raises ``KeyError`` for a column no schema has; a table that is not registered (:data:`TABLES`) is read from
    its files' schemas alone.
    """
    import pyarrow.dataset as ds

    known = TABLES.get(table)
    files, schemas = [], [] if known is None else [known]
    for f in sorted(table_dir(run_dir, table).glob("*.parquet")):
        schema = _schema_or_none(f)
        if schema is not None:
            files.append(f)
            schemas.append(schema)
    unified = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])
    if known is not None:
        unified = unified.with_metadata(known.metadata)
    if columns is not None:
        missing = [c for c in columns if c not in unified.names]
        if missing:
            raise KeyError(f"{table}: no column {missing}; known: {unified.names}")
        unified = pa.schema([unified.field(c) for c in columns], metadata=unified.metadata)
    if not files:
        return unified.empty_table()
    try:
        return ds.dataset([str(f) for f in files], schema=unified, format="parquet").to_table()
    except Exception:  # noqa: BLE001 - a file whose footer reads but whose data does not: read file by file
        parts = []
        for f in files:
            try:
                parts.append(ds.dataset(str(f), schema=unified, format="parquet").to_table())
            except Exception:  # noqa: BLE001
                continue
        return pa.concat_tables(parts) if parts else unified.empty_table()


def read_results(run_dir: str | Path, table: str = "load_points", columns: list[str] | None = None):
    """A run's ``table`` as a pandas DataFrame, read with :func:`read_table` (schemas of every file unified).
    ``run_dir``: the run directory (the one holding ``parquet/``). Raises ``KeyError`` for an unknown column,
    ``FileNotFoundError`` for a ``run_dir`` that does not exist and ``ValueError`` for a table that is neither
    registered (:data:`TABLES`) nor in the run's ``parquet/`` (e.g. ``rejudged``), naming those there are: a
    misspelt name read as an empty table."""
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"run_dir={str(run_dir)!r}: no such directory")
    if table not in TABLES and not table_dir(run_dir, table).is_dir():
        root = Path(run_dir) / "parquet"
        there = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")} if root.is_dir() else set()
        raise ValueError(f"table={table!r}: unknown table; allowed: {', '.join(sorted(set(TABLES) | there))}")
    return read_table(run_dir, table, columns).to_pandas()


def read_points(run_dir: str | Path, config_hashes: Collection[str] | None = None) -> list[LoadPointRow]:
    """The run's ``load_points`` rows (of ``config_hashes`` only, when given) as typed rows, read with
    :func:`read_table`: every column of the current schema is a key (null in rows written before it existed)."""
    rows = read_table(run_dir, "load_points").to_pylist()
    if config_hashes is not None:
        rows = [r for r in rows if r["config_hash"] in config_hashes]
    return cast(list[LoadPointRow], rows)


def recorded_hashes(run_dir: str | Path) -> dict[str, str]:
    """config_hash -> trial_status for every trial recorded in the run directory."""
    out: dict[str, str] = {}
    for f in table_dir(run_dir, "load_points").glob("*.parquet"):
        try:
            t = pq.read_table(f, columns=["config_hash", "trial_status"])
        except Exception:  # a corrupt file: treat the trial as not recorded (it is re-run)
            continue
        if t.num_rows:
            out[t.column("config_hash")[0].as_py()] = t.column("trial_status")[0].as_py()
    return out
