"""What ``python -m grid.run`` does once the config is composed: validate, sweep, report. Returns an exit code."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rich.console import Console

from grid.config.schema import ConfigError, RunSpec, load_run_spec
from grid.engines.base import EngineUnavailable


PIPED_WIDTH = 160  # console columns when stdout is not a terminal and COLUMNS is unset

# The requests columns the report needs to judge the SLOs (grid.report.select.rejudge).
REQUEST_COLUMNS = ("config_hash", "point_index", "status", "ttft_ms", "tpot_ms", "e2e_ms")


def report(spec: RunSpec, console: Console) -> list:
    """Rank every recorded configuration, print the verdicts, write report.md and plots. Returns the verdicts.

    Every recorded load point is judged against the current objective's SLOs from its stored requests (a resumed
    sweep may have measured it under other SLOs); nothing stored is rewritten. A sweep with planned configurations
    not yet recorded (an interrupted run) is reported as incomplete.
    """
    from grid.experiments import run_experiment
    from grid.report.render import incomplete_note, markdown, plot, print_report
    from grid.report.select import rank, rejudge
    from grid.storage.parquet import read_table
    from grid.sweep.space import expand

    wanted = {p.config_hash for p in expand(spec)}
    stored = [r for r in read_table(spec.run_dir, "load_points").to_pylist() if r["config_hash"] in wanted]
    requests = [r for r in read_table(spec.run_dir, "requests", list(REQUEST_COLUMNS)).to_pylist()
                if r["config_hash"] in wanted]
    rows = rejudge(stored, requests, spec.objective.slo)
    verdicts = rank(rows, spec.objective)
    # a skipped configuration (an infrastructure fault) runs again on resume: it counts as not yet recorded
    note = incomplete_note(len(wanted), len({r["config_hash"] for r in rows if r["trial_status"] != "skipped"}))
    notes = [note] if note else []
    skipped_probe = sorted({r["label"] or r["config_hash"] for r in stored if r.get("probe_status") == "skipped"})
    if skipped_probe:
        notes.append(f"The correctness probe was skipped (probe.enabled=false) for {len(skipped_probe)} "
                     f"configuration{'s' if len(skipped_probe) != 1 else ''} ({', '.join(skipped_probe)}): their "
                     "answers were not checked, so a configuration serving garbage is ranked as if it were correct.")
    print_report(verdicts, console, notes)
    run_dir = Path(spec.run_dir)
    (run_dir / "report.md").write_text(markdown(verdicts, f"grid: {spec.name}", notes))
    png = plot(verdicts, run_dir / "throughput.png")
    if spec.experiment:
        out = run_experiment(spec, rows, console)
        console.print(f"Experiment output: {out}")
    console.print(f"\nRun directory: {run_dir.resolve()} (report.md{', throughput.png' if png else ''}, "
                  "parquet/requests, parquet/load_points, logs/)")
    return verdicts


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
        return 2
    from grid.sweep import driver

    try:
        driver.run(spec, console)
    except (ConfigError, EngineUnavailable) as err:
        console.print("[bold red]Cannot run:[/]", end=" ")
        console.print(str(err), markup=False, highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted; completed trials are saved. Run the same command to resume.[/]")
        return 130
    if not spec.dry_run:
        report(spec, console)
    return 0
