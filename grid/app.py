"""What ``python -m grid.run`` does once the config is composed: validate, sweep, report. Returns an exit status.

Exit status (README, "Exit status"):

* 0: every planned configuration has a verdict (ok, invalid or failed), or a dry run;
* 2: refused input (a configuration error, an engine that cannot run, a Ray cluster at ``ray.address`` that cannot be
  joined), before anything ran;
* 3: a planned configuration has no verdict, or only an infrastructure one (``skipped``: env_dirty, port_in_use,
  actor_lost); running the same command again runs it; also when the local Ray cluster does not start;
* 130: interrupted (Ctrl-C); completed configurations are kept.

1 is never returned for a condition grid handles (it is Python's status for an unhandled exception).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rich.console import Console

from grid.config.schema import ConfigError, RunSpec, load_run_spec
from grid.engines.base import EngineUnavailable


EXIT_OK, EXIT_REFUSED, EXIT_UNDECIDED, EXIT_INTERRUPTED = 0, 2, 3, 130
PIPED_WIDTH = 160  # console columns when stdout is not a terminal and COLUMNS is unset

# The requests columns the report needs to judge the SLOs (grid.report.select.rejudge).
REQUEST_COLUMNS = ("config_hash", "point_index", "status", "ttft_ms", "tpot_ms", "e2e_ms")


def report(spec: RunSpec, console: Console) -> list:
    """Rank every recorded configuration, print the verdicts, write report.md, report.html, plots and the re-judged
    SLO table (grid/report/build.py). Returns the verdicts.

    Every recorded load point is judged against the current objective's SLOs from its stored requests (a resumed
    sweep may have measured it under other SLOs); nothing stored is rewritten. A sweep with planned configurations
    not yet recorded (an interrupted run) is reported as incomplete.
    """
    from grid.experiments import run_experiment
    from grid.report import build
    from grid.report.render import incomplete_note, metrics_names_note
    from grid.report.select import rank, rejudge
    from grid.storage.parquet import read_table
    from grid.sweep.space import expand

    plans = expand(spec)
    wanted = {p.config_hash for p in plans}
    stored = [r for r in read_table(spec.run_dir, "load_points").to_pylist() if r["config_hash"] in wanted]
    requests = [r for r in read_table(spec.run_dir, "requests", list(REQUEST_COLUMNS)).to_pylist()
                if r["config_hash"] in wanted]
    rows = rejudge(stored, requests, spec.objective.slo)
    verdicts = rank(rows, spec.objective, spec.accuracy.max_drop if spec.accuracy.enabled else None)
    # a skipped configuration (an infrastructure fault) runs again on resume: it counts as not yet recorded
    note = incomplete_note(len(wanted), len({r["config_hash"] for r in rows if r["trial_status"] != "skipped"}))
    notes = [n for n in (note, metrics_names_note(rows)) if n]
    run_dir = Path(spec.run_dir)
    written = build.write(spec, build.assemble(spec, verdicts, rows, plans, notes), rows, console)
    if spec.experiment:
        out = run_experiment(spec, rows, console)
        console.print(f"Experiment output: {out}")
    console.print(f"\nRun directory: {run_dir.resolve()} ({', '.join(written)}, "
                  "parquet/requests, parquet/load_points, logs/)")
    return verdicts


def undecided(planned: list[str], trial_status: dict[str, str]) -> list[str]:
    """The planned configuration hashes without a verdict: not recorded, or recorded only as ``skipped`` (an
    infrastructure failure, grid/server/infra.py). ``trial_status``: recorded hash -> trial_status."""
    return [h for h in planned if trial_status.get(h, "skipped") == "skipped"]


def exit_status(spec: RunSpec) -> int:
    """EXIT_UNDECIDED when a planned configuration of ``spec`` has no verdict in the run directory, else EXIT_OK."""
    from grid.storage.parquet import recorded_hashes
    from grid.sweep.space import expand

    return EXIT_UNDECIDED if undecided([p.config_hash for p in expand(spec)], recorded_hashes(spec.run_dir)) \
        else EXIT_OK


def main(cfg: dict[str, Any], console: Console | None = None) -> int:
    if console is None:
        console = Console()
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = PIPED_WIDTH  # piped or logged: keep table rows on one line instead of rich's 80 columns
    try:
        spec = load_run_spec(cfg)
    except ConfigError as err:
        console.print("[bold red]Configuration error:[/]", end=" ")
        console.print(str(err), markup=False, highlight=False, soft_wrap=True)
        return EXIT_REFUSED
    from grid.cluster.local import RayStartError
    from grid.sweep import driver

    try:
        driver.run(spec, console)
    except (ConfigError, EngineUnavailable) as err:
        console.print("[bold red]Cannot run:[/]", end=" ")
        console.print(str(err), markup=False, highlight=False, soft_wrap=True)
        return EXIT_REFUSED
    except RayStartError as err:
        console.print("[bold red]Cannot run:[/]", end=" ")
        console.print(str(err), markup=False, highlight=False, soft_wrap=True)
        return EXIT_REFUSED if err.setting else EXIT_UNDECIDED
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted; completed trials are saved. Run the same command to resume.[/]")
        return EXIT_INTERRUPTED
    if spec.dry_run:
        return EXIT_OK
    report(spec, console)
    return exit_status(spec)
