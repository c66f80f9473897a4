"""What ``python -m grid.run`` does once the config is composed: validate, sweep, report. Returns an exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from grid.config.schema import ConfigError, RunSpec, load_run_spec
from grid.engines.base import EngineUnavailable


def report(spec: RunSpec, console: Console) -> list:
    """Rank every recorded configuration, print the verdicts, write report.md and plots. Returns the verdicts."""
    from grid.experiments import run_experiment
    from grid.report.render import markdown, plot, print_report
    from grid.report.select import rank
    from grid.storage.parquet import read_table
    from grid.sweep.space import expand

    wanted = {p.config_hash for p in expand(spec)}
    rows = [r for r in read_table(spec.run_dir, "load_points").to_pylist() if r["config_hash"] in wanted]
    verdicts = rank(rows, spec.objective)
    print_report(verdicts, console)
    run_dir = Path(spec.run_dir)
    (run_dir / "report.md").write_text(markdown(verdicts, f"grid: {spec.name}"))
    png = plot(verdicts, run_dir / "throughput.png")
    if spec.experiment:
        out = run_experiment(spec, rows, console)
        console.print(f"Experiment output: {out}")
    console.print(f"\nRun directory: {run_dir.resolve()} (report.md{', throughput.png' if png else ''}, "
                  "parquet/requests, parquet/load_points, logs/)")
    return verdicts


def main(cfg: dict[str, Any], console: Console | None = None) -> int:
    console = console or Console()
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
