"""What ``python -m grid.run`` does once the config is composed: validate, sweep, report. Returns an exit status.

Exit status (README, "Exit status"):

* 0: every planned configuration has a verdict (ok, invalid or failed), or a dry run;
* 2: refused input (a configuration error, an engine that cannot run, a Ray cluster at ``ray.address`` that cannot be
  joined, or no node of the sweep's hardware), before anything ran;
* 3: a planned configuration has no verdict, or only an infrastructure one (``skipped``: env_dirty, port_in_use,
  actor_lost, node_lost); running the same command again runs it; also when the local Ray cluster does not start;
* 130: interrupted (Ctrl-C); completed configurations are kept.

1 is never returned for a condition grid handles (it is Python's status for an unhandled exception).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, cast

from rich.console import Console

from grid.compose import command_line_load_wins, load_run_spec
from grid.config.schema import ConfigError, RunSpec
from grid.engines.base import EngineUnavailable
from grid.storage.rows import JudgedPointRow, LoadPointRow


EXIT_OK, EXIT_REFUSED, EXIT_UNDECIDED, EXIT_INTERRUPTED = 0, 2, 3, 130
RUN_LOG = "run.log"  # in the run directory: everything grid printed, without colour codes (Hydra's job log file)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Tee(io.TextIOBase):
    """The console's file: writes go to the terminal as they are and to ``run.log`` without ANSI colour codes."""

    def __init__(self, term: IO[str], log: IO[str]) -> None:
        self.term, self.log = term, log

    def write(self, text: str) -> int:
        self.term.write(text)
        self.log.write(_ANSI.sub("", text))
        return len(text)

    def flush(self) -> None:
        self.term.flush()
        self.log.flush()

    def isatty(self) -> bool:
        return self.term.isatty()

    def fileno(self) -> int:
        return self.term.fileno()
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
    from grid.accuracy import speculative_mismatches
    from grid.experiments import run_experiment
    from grid.report import build
    from grid.report.render import incomplete_note, metrics_names_note
    from grid.search.calibration import report_note as calibration_note
    from grid.search.summary import cost_note
    from grid.search.summary import write as write_summary_json
    from grid.report.select import behind_note, rank, rejudge, unmeasured_note
    from grid.storage.summary import read_record
    from grid.storage.parquet import read_points, read_table
    from grid.sweep.space import expand

    plans = expand(spec)
    wanted = {p.config_hash for p in plans}
    stored = read_points(spec.run_dir, wanted)
    requests = [r for r in read_table(spec.run_dir, "requests", list(REQUEST_COLUMNS)).to_pylist()
                if r["config_hash"] in wanted]
    rows = rejudge(stored, requests, spec.objective.slo)
    mismatches = speculative_mismatches([r for r in read_table(spec.run_dir, "accuracy").to_pylist()
                                         if r["config_hash"] in wanted], {p.config_hash: p.settings for p in plans})
    verdicts = rank(rows, spec.objective, spec.accuracy.max_drop if spec.accuracy.enabled else None,
                    {h: m.reason() for h, m in mismatches.items()})
    searched = read_record(spec.run_dir)
    left_out = set(searched.get("skipped", {})) & wanted - {r["config_hash"] for r in rows}
    # a skipped configuration (an infrastructure fault) runs again on resume: it counts as not yet recorded
    note = incomplete_note(len(wanted - left_out),
                           len({r["config_hash"] for r in rows if r["trial_status"] != "skipped"}))
    notes = [n for n in (behind_note(stored), metrics_names_note(rows),
                         early_stop_note(stored, spec.hardware.total_gpus), calibration_note(spec.run_dir)) if n] \
        + search_notes(searched, left_out)
    skipped_probe = sorted({r["label"] or r["config_hash"] for r in stored if r["probe_status"] == "skipped"})
    if skipped_probe:
        notes.append(f"The correctness probe was skipped (probe.enabled=false) for {len(skipped_probe)} "
                     f"configuration{'s' if len(skipped_probe) != 1 else ''} ({', '.join(skipped_probe)}): their "
                     "answers were not checked, so a configuration serving garbage is ranked as if it were correct.")
    run_dir = Path(spec.run_dir)
    headline = [n for n in (note, unmeasured_note(stored, spec.objective)) if n]
    summary = run_summary(spec, rows, verdicts, plans, searched, left_out)
    cost = cost_note(summary)
    written = build.write(spec, build.assemble(spec, verdicts, rows, plans, notes + ([cost] if cost else []),
                                               headline, searched), rows, console)
    written.append(write_summary_json(spec.run_dir, summary).name)
    if spec.experiment:
        out = run_experiment(spec, rows, console)
        console.print(f"Experiment output: {out}")
    console.print(f"\nRun directory: {run_dir.resolve()} ({', '.join(written)}, "
                  "parquet/requests, parquet/load_points, logs/)")
    return verdicts


def search_notes(searched: dict, left_out: set[str]) -> list[str]:
    """The report's notes on the search (``search.json``): configurations known to fail here, grouped by the
    failure-table row with its source, and those the search did not launch, grouped by why."""
    groups: dict[str, list[str]] = {}
    for entry in searched.get("known_to_fail", {}).values():
        groups.setdefault(entry["text"], []).append(entry["label"])
    notes = [f"{text}: {len(labels)} configuration{'s' if len(labels) != 1 else ''} ({', '.join(sorted(labels))})"
             for text, labels in groups.items()]
    why: dict[str, list[str]] = {}
    for h in left_out:
        entry = searched["skipped"][h]
        why.setdefault(entry["reason"], []).append(entry["label"] or h)
    notes += [f"not launched by the {searched.get('search')} search ({len(labels)} configuration"
              f"{'s' if len(labels) != 1 else ''}: {', '.join(sorted(labels))}): {reason}"
              for reason, labels in why.items()]
    return notes


def early_stop_note(rows: Sequence[LoadPointRow], gpu_count: int) -> str | None:
    """The report's note on early stopping across load levels (grid/search/levels.py): how many load points it
    skipped, of how many configurations, by rule, and the GPU-seconds saved (the twin's forecast durations times
    ``gpu_count``); None when it skipped nothing. Pure."""
    from grid.search.levels import EARLY_STOP_SLO, EARLY_STOP_TWIN

    stopped = [r for r in rows if r["status"] == "not_run" and r["error_class"] in (EARLY_STOP_SLO,
                                                                                              EARLY_STOP_TWIN)]
    if not stopped:
        return None
    by = {c: sum(r["error_class"] == c for r in stopped) for c in (EARLY_STOP_SLO, EARLY_STOP_TWIN)}
    saved = sum(r["forecast_duration_s"] or 0.0 for r in stopped) * gpu_count
    configs = len({r["config_hash"] for r in stopped})
    rules = "; ".join(text for text in (
        f"{by[EARLY_STOP_SLO]} after a lower level missed the SLOs" if by[EARLY_STOP_SLO] else "",
        f"{by[EARLY_STOP_TWIN]} where the twin's upper bound was below the best measured score"
        if by[EARLY_STOP_TWIN] else "") if text)
    return (f"Early stopping (search.early_stop) did not run {len(stopped)} load point{'s' if len(stopped) != 1 else ''}"
            f" of {configs} configuration{'s' if configs != 1 else ''} ({rules}), saving about {saved:.0f} GPU-seconds "
            "by the twin's forecast; each is recorded not_run with its reason (search.early_stop=false measures "
            "every level)")


def run_summary(spec: RunSpec, rows: Sequence[JudgedPointRow], verdicts: list, plans: list, searched: dict,
                left_out: set[str]) -> dict:
    """What ``summary.json`` holds (grid/search/summary.py): startups that never finished are costed with the twin's
    modelled startup, and each launch's pre-run estimate is the twin's forecast the plan summed."""
    from grid.search import summary
    from grid.search.forecastability import no_forecast
    from grid.search.predict import forecast

    launched = {r["config_hash"] for r in rows if r["trial_error_class"] != "refused"}
    unready = {r["config_hash"] for r in rows if r["startup_s"] is None and r["trial_error_class"] != "refused"}
    modelled, estimated = {}, {}
    for p in plans:
        blocked = no_forecast(spec, [p.load], calibrated=True)  # the plan's estimate is the spec-sheet twin's
        if p.config_hash in launched and (blocked is None or blocked.cause == "load"):
            f = forecast(spec, p, spec.version)
            if p.config_hash in unready:
                modelled[p.config_hash] = f.startup_s if f else 0.0
            if f is not None and blocked is None:  # the plan gave no estimate for a load it cannot replay
                estimated[p.config_hash] = f.gpu_s
    refused = len({r["config_hash"] for r in rows if r["trial_error_class"] == "refused"})
    return summary.summarize(
        rows, verdicts, objective=spec.objective.kind, search=spec.search.kind, gpu_count=spec.hardware.total_gpus,
        configurations=len(plans), refused=refused, known_to_fail=len(searched.get("known_to_fail", {})),
        not_run=len(left_out), modelled_startup_s=modelled, estimated_s=estimated)



def undecided(planned: list[str], trial_status: dict[str, str]) -> list[str]:
    """The planned configuration hashes without a verdict: not recorded, or recorded only as ``skipped`` (an
    infrastructure failure, grid/server/infra.py). ``trial_status``: recorded hash -> trial_status."""
    return [h for h in planned if trial_status.get(h, "skipped") == "skipped"]


def exit_status(spec: RunSpec) -> int:
    """EXIT_UNDECIDED when a planned configuration of ``spec`` has no verdict in the run directory, else EXIT_OK."""
    from grid.storage.summary import read_record
    from grid.storage.parquet import recorded_hashes
    from grid.sweep.space import expand

    left_out = set(read_record(spec.run_dir).get("skipped", {}))  # the search chose not to launch them
    planned = [p.config_hash for p in expand(spec) if p.config_hash not in left_out]
    return EXIT_UNDECIDED if undecided(planned, recorded_hashes(spec.run_dir)) else EXIT_OK


def main(cfg: dict[str, Any], console: Console | None = None, overrides: Sequence[str] = (),
         accepted: Callable[[], None] | None = None) -> int:
    """Run the composed config ``cfg``; ``overrides`` are the command line's Hydra overrides as typed (a run-level
    ``load.X`` among them wins over the sweep's own ``load.X``: grid.compose ``command_line_load_wins``). Returns
    the exit status. ``accepted`` is called once nothing refuses the run (grid.sweep.driver ``run``)."""
    if console is None:
        console = Console()
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = PIPED_WIDTH  # piped or logged: keep table rows on one line instead of rich's 80 columns
    cfg, load_notes = command_line_load_wins(cfg, overrides)
    try:
        spec: RunSpec | None = load_run_spec(cfg)
        refused = None
    except ConfigError as err:
        spec, refused = None, err
    if spec is not None:
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    # a refused config is logged only where its run directory exists (Hydra made it): none is made for it
    run_dir = Path(spec.run_dir) if spec is not None else Path(str(cfg.get("run_dir") or ""))
    logged = spec is not None or (bool(cfg.get("run_dir")) and run_dir.is_dir())
    term = console.file
    with open(run_dir / RUN_LOG, "a", encoding="utf-8") if logged else contextlib.nullcontext() as log:
        if log is not None:
            console.file = cast(IO[str], _Tee(term, log))
        try:
            for note in load_notes:
                console.print(f"Note: {note}", markup=False, highlight=False, soft_wrap=True)
            if spec is None:
                console.print("[bold red]Configuration error:[/]", end=" ")
                console.print(str(refused), markup=False, highlight=False, soft_wrap=True)
                return EXIT_REFUSED
            return _run(spec, console, accepted)
        finally:
            console.file = term


def _run(spec: RunSpec, console: Console, accepted: Callable[[], None] | None = None) -> int:
    from grid.cluster.local import RayStartError
    from grid.sweep import driver

    try:
        driver.run(spec, console, accepted)
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
