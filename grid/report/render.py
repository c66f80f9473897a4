"""Render the verdicts: a console table (rich), ``report.md`` and a throughput/latency plot in the run directory.

Every number shown is read from the load-point rows given (the load-points Parquet table, with the SLO-dependent
values re-judged for the current objective by grid.report.select.rejudge); nothing is recomputed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from grid.config.schema import DEFAULT_TAIL_PERCENTILE, requests_for_tail
from grid.plan import level_name
from grid.report.pareto import draw_series, level_gaps, level_series
from grid.report.select import Verdict
from grid.storage.rows import JudgedPointRow
from grid.storage.schema import point_value

POINT_COLUMNS = (
    ("level", "point_value", "{:g}"),
    ("repeat", "repeat_index", "{}"),
    ("status", "status", "{}"),
    ("out tok/s", "output_tok_per_s", "{:.1f}"),
    ("total tok/s", "total_tok_per_s", "{:.1f}"),
    ("req/s", "requests_per_s", "{:.3f}"),
    ("TTFT p50 ms", "ttft_median_ms", "{:.0f}"),
    ("TTFT p99 ms", "ttft_p99_ms", "{:.0f}"),
    ("TPOT p50 ms", "tpot_median_ms", "{:.1f}"),
    ("TPOT p99 ms", "tpot_p99_ms", "{:.1f}"),
    ("E2E p50 s", "e2e_median_ms", "{:.1f}"),
    ("mean conc", "concurrency_mean", "{:.1f}"),
)
# The console table stacks each header over two lines so that it fits an 80-column terminal.
CONSOLE_HEADERS = {"point_value": "level", "status": "status", "output_tok_per_s": "out\ntok/s",
                   "total_tok_per_s": "total\ntok/s", "ttft_median_ms": "TTFT\np50 ms", "ttft_p99_ms": "TTFT\np99 ms",
                   "tpot_median_ms": "TPOT\np50 ms", "tpot_p99_ms": "TPOT\np99 ms", "e2e_median_ms": "E2E\np50 s",
                   "concurrency_mean": "mean\nconc."}  # req/s only in report.md


def fmt(row: Mapping[str, Any], key: str, pattern: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    if key == "e2e_median_ms":
        value = value / 1000.0
    return pattern.format(value)


def diagnosis_lines(v: Verdict) -> list[str]:
    """One line per diagnosed load level and distinct diagnosis: level, verdict, evidence (grid/diagnosis/rules.py;
    stored columns). Repeats of a level (``load.repeats``) that read the same share one line, which says which
    repeats it stands for (``concurrency 64 (repeats 0, 1, 2): ...``); a level measured once reads as before."""
    texts: dict[tuple[Any, Any], dict[str, list[Any]]] = {}
    for r in v.rows:
        if r["bottleneck"]:
            text = f"{r['bottleneck']} — {r.get('bottleneck_evidence') or ''}"
            texts.setdefault((r["point_kind"], r["point_value"]), {}).setdefault(text, []).append(
                r["repeat_index"] or 0)
    out = []
    for (kind, value), by_text in texts.items():
        measured = sum(len(reps) for reps in by_text.values())
        for text, reps in by_text.items():
            which = "" if measured == 1 else \
                f" (repeat{'s' if len(reps) > 1 else ''} {', '.join(str(x) for x in sorted(reps))})"
            out.append(f"{kind} {value:g}{which}: {text}")
    return out


def short_diagnosis(v: Verdict) -> str:
    """The verdict at the configuration's scored load point (else its highest diagnosed one), e.g.
    ``launch/CPU-overhead-bound at 32 (SM 94%, memory bandwidth 16%)``; "-" when none was diagnosed."""
    rows = [r for r in v.rows if r["bottleneck"]]
    if not rows:
        return "-"
    best = v.best_point["point_index"] if v.best_point else None
    row = next((r for r in rows if r["point_index"] == best), rows[-1])
    return f"{row['bottleneck']} at {row['point_value']:g}"


def points_table(v: Verdict, title: str) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    repeated = any(r["repeat_index"] for r in v.rows)   # the repeat column only where a level ran again
    columns = [(key, pat) for _, key, pat in POINT_COLUMNS
               if key in CONSOLE_HEADERS or (key == "repeat_index" and repeated)]
    for key, _ in columns:
        t.add_column(CONSOLE_HEADERS.get(key, "rep"), justify="right", no_wrap=True)
    for row in v.rows:
        t.add_row(*(fmt(row, key, pat) for key, pat in columns))
    return t


def sample_note(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """A caution when some load point's tail rests on too few completed requests (None otherwise): the p99 the report
    shows, and the SLOs' percentile (the rows' ``slo_percentile``) when higher, each need ``requests_for_tail(p)``
    completed requests (grid.config.schema: 101 at p99) before the maximum drops out of them."""
    counts = [r["completed"] for r in rows if r["completed"]]
    slo = [float(r["slo_percentile"]) for r in rows if r["slo_percentile"]]
    percentile = max([DEFAULT_TAIL_PERCENTILE, *(p for p in slo if p < 100)])
    need = requests_for_tail(percentile)
    if not counts or min(counts) >= need:
        return None
    span = f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
    return (f"Percentiles rest on {span} completed request{'s' if max(counts) != 1 else ''} per load point; p"
            f"{percentile:g} needs at least {need} not to be the slowest request. For tighter tails set "
            f"load.min_prompts={need} (null gives {requests_for_tail(DEFAULT_TAIL_PERCENTILE)}, enough for "
            f"p{DEFAULT_TAIL_PERCENTILE:g}) or raise load.prompts_per_stream.")


def where_ran(v: Verdict) -> str:
    """Where the configuration was measured: ``host (node id prefix)``, with the GPU count when NVML named them
    (load_points ``node_hostname``, ``node_id``, ``gpu_uuids``); ``-`` for rows recorded before nodes were."""
    if not v.rows:
        return "-"
    row = v.rows[0]
    host, node_id, gpus = row["node_hostname"], row["node_id"], row["gpu_uuids"]
    if not host and not node_id:
        return "-"
    text = f"{host or '?'}" + (f" ({node_id[:8]})" if node_id else "")
    return text + (f", {len(gpus)} GPU" if gpus is not None and len(gpus) else "")


def verdict_table(verdicts: list[Verdict]) -> Table:
    """Every verdict; failed and invalid configurations that share a reason share a row (labels joined by ``; ``)."""
    t = Table(title="All configurations", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("#", "configuration", "outcome", "why", "node"):
        t.add_column(name, overflow="fold")
    colors = {"best": "green", "lost": "white", "no_eligible_point": "yellow", "less_accurate": "yellow", "invalid": "yellow", "failed": "red", "skipped": "magenta"}
    for i, g in enumerate(verdict_groups(verdicts), 1):
        limit = short_diagnosis(g.first)
        why = g.reason + (f"; limited by: {limit}" if limit != "-" else "")
        t.add_row(str(i), "; ".join(g.labels), f"[{colors[g.outcome]}]{g.outcome}[/]", why, where_ran(g.first))
    return t


def incomplete_note(planned: int, recorded: int) -> str | None:
    """The warning for a sweep with configurations still to run (counts of configurations), None when complete."""
    missing = planned - recorded
    if missing <= 0:
        return None
    among = (f"the best below is among the {recorded} recorded" if recorded
             else "nothing is recorded yet")
    return (f"Incomplete: {missing} of {planned} configuration{'s' if planned != 1 else ''} "
            f"{'have' if missing != 1 else 'has'} no result yet (interrupted?); run the same command again to run "
            f"{'them' if missing != 1 else 'it'} — {among}.")


def metrics_names_note(rows: Sequence[JudgedPointRow]) -> str | None:
    """A note when some configuration's /metrics answered without any expected gauge (``srv_gauges_found`` = 0 on
    every scraped load point), so its ``srv_*`` columns are null for a reason the user can act on; None otherwise."""
    found: dict[str, int] = {}
    for r in rows:
        if r["srv_scrapes"] and r["srv_gauges_found"] is not None:
            found[r["config_hash"]] = max(found.get(r["config_hash"], 0), r["srv_gauges_found"])
    blind = sorted(h for h, n in found.items() if n == 0)
    if not blind:
        return None
    return (f"Server metrics: /metrics answered but named none of the expected gauges for {len(blind)} of "
            f"{len(found)} configuration{'s' if len(found) != 1 else ''} ({', '.join(blind[:5])}"
            f"{', ...' if len(blind) > 5 else ''}); their srv_* columns are null and the diagnosis cannot use server "
            "metrics (names read: grid/server/metrics_scrape.py SGLANG_PREFIXES; run.log lists the names served).")


def deploy_command(command: str) -> str:
    """The stored launch command without its ``--port`` (a free port picked for that trial; SGLang's own default
    applies without it), for users to copy. The Parquet row keeps the command exactly as run."""
    try:
        argv = shlex.split(command)
    except ValueError:  # not shell syntax: show it as stored
        return command
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--port":
            skip = True
            continue
        if not arg.startswith("--port="):
            out.append(arg)
    return shlex.join(out)


@dataclass(frozen=True)
class VerdictGroup:
    """Verdicts shown as one row: a scored configuration alone, or every failed or invalid configuration that shares
    one reason (a long refusal is given once per group, not once per configuration)."""

    labels: tuple[str, ...]
    outcome: str
    reason: str
    first: Verdict


def verdict_groups(verdicts: list[Verdict]) -> list[VerdictGroup]:
    """``verdicts`` in their order, those that did not run load (``failed``, ``invalid``, ``skipped``) merged by outcome and
    reason at the place of the first of them. Pure."""
    groups: list[VerdictGroup] = []
    merged: dict[tuple[str, str], int] = {}
    for v in verdicts:
        key = (v.outcome, v.reason)
        if v.outcome in ("failed", "invalid", "skipped") and key in merged:
            g = groups[merged[key]]
            groups[merged[key]] = VerdictGroup((*g.labels, v.label), g.outcome, g.reason, g.first)
            continue
        if v.outcome in ("failed", "invalid", "skipped"):
            merged[key] = len(groups)
        groups.append(VerdictGroup((v.label,), v.outcome, v.reason, v))
    return groups


#: The columns of the table of every configuration x load level: (header, load-point column, format).
LEVEL_COLUMNS = (("out tok/s", "output_tok_per_s", "{:.1f}"), ("TTFT p99 ms", "ttft_p99_ms", "{:.0f}"),
                 ("TPOT p99 ms", "tpot_p99_ms", "{:.1f}"))


def level_rows(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """One row per configuration and load level that was measured or planned (``label``, ``outcome``, ``level``,
    ``status``, and each of :data:`LEVEL_COLUMNS` as the mean over the level's ok repeats, None without one); the
    status is the repeats' status when they agree, else ``2/3 ok``. Configurations in verdict order, levels
    ascending. Configurations that ran no load point (refused, failed at start) have no rows. Pure."""
    out: list[dict[str, Any]] = []
    for v in verdicts:
        levels: dict[tuple[Any, Any], list[JudgedPointRow]] = {}
        for r in v.rows:
            if r["point_value"] is not None:
                levels.setdefault((r["point_kind"], r["point_value"]), []).append(r)
        if all(r["status"] == "not_run" for reps in levels.values() for r in reps):
            continue
        for (kind, value), reps in sorted(levels.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            ok = [r for r in reps if r["status"] == "ok"]
            statuses = {r["status"] for r in reps}
            status = statuses.pop() if len(statuses) == 1 else f"{len(ok)}/{len(reps)} ok"
            row: dict[str, Any] = {"label": v.label, "outcome": v.outcome, "status": status,
                                   "level": level_name({"point_kind": kind, "point_value": value})}
            for _, key, _ in LEVEL_COLUMNS:
                vals = [v for v in (point_value(r, key) for r in ok) if v is not None]
                row[key] = sum(vals) / len(vals) if vals else None
            out.append(row)
    return out


def no_winner_text(verdicts: list[Verdict]) -> str:
    """``No configuration qualified: 6 invalid (every configuration refused before launch: nothing ran).``: the count
    per outcome when no configuration won, so a run whose configurations were all refused says so before the table
    of reasons."""
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.outcome] = counts.get(v.outcome, 0) + 1
    refused = sum(1 for v in verdicts if v.rows and v.rows[0]["trial_error_class"] == "refused")
    text = "No configuration qualified"
    if counts:
        text += ": " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        if refused and refused == len(verdicts):
            text += " (every configuration refused before launch: nothing ran)"
        elif refused:
            text += f" ({refused} refused before launch)"
    return text + "."


def print_report(verdicts: list[Verdict], console, notes: list[str] | tuple[str, ...] = (),
                 command: str | None = None, lead: list[str] | tuple[str, ...] = (),
                 headline: list[str] | tuple[str, ...] = ()) -> None:
    """Print the answer first (after the ``headline`` lines that qualify it, e.g. :func:`incomplete_note`): the best
    configuration, its command (default: the stored one without ``--port``),
    its ``lead`` over the runner-up and the sweep's base (grid.report.lead), its load points and diagnosis; then the
    caveats (``notes``) in one list, then every verdict."""
    best = next((v for v in verdicts if v.outcome == "best"), None)
    console.print()
    for line in headline:
        console.print(f"[bold yellow]{line}[/]", highlight=False, soft_wrap=True)
    if best is None:
        console.print(f"[bold red]{no_winner_text(verdicts)}[/]", highlight=False)
    else:
        console.print(f"[bold green]Best configuration:[/] {best.label}  ({best.reason})")
        console.print(f"  {command or deploy_command(best.rows[0]['command'] or '')}", markup=False, soft_wrap=True)
        for line in lead:
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        console.print(points_table(best, f"Load points of the best configuration ({best.config_hash})"))
        caution = sample_note(best.rows)
        if caution:
            console.print(f"  {caution}", markup=False, highlight=False, soft_wrap=True)
        lines = diagnosis_lines(best)
        if lines:
            console.print("[bold]What limits each load point[/] (grid/diagnosis/rules.py):")
            for line in lines:
                console.print(f"  {line}", markup=False, soft_wrap=True)
    if notes:
        console.print("[bold yellow]Caveats:[/]")
        for note in notes:
            console.print(f"[yellow]- {note}[/]", highlight=False, soft_wrap=True)
    console.print(verdict_table(verdicts))


def markdown(verdicts: list[Verdict], title: str, notes: list[str] | tuple[str, ...] = (), *,
             measured: list[str] | tuple[str, ...] = (), command: str | None = None,
             sections: list[str] | tuple[str, ...] = (), lead: list[str] | tuple[str, ...] = (),
             headline: list[str] | tuple[str, ...] = ()) -> str:
    """``report.md``, the answer first: the best configuration with ``command`` (default: the stored command without
    ``--port``), its ``lead`` (grid.report.lead) and load points; then the caveats (``notes``) in one list, what was
    ``measured`` (bullets), every verdict, then ``sections`` (markdown lines, e.g. the Pareto fronts and the failures
    grouped by cause). ``headline``: what qualifies the answer, in bold above it."""
    lines = [f"# {title}", ""]
    for line in headline:
        lines += [f"**{line}**", ""]
    best = next((v for v in verdicts if v.outcome == "best"), None)
    if best:
        lines += [f"**Best:** `{best.label}` — {best.reason}", ""]
        launch = command or deploy_command(best.rows[0]["command"] or "")
        if launch:  # an external server's row has no command: grid did not launch it
            lines += ["```", launch, "```", ""]
        if lead:
            lines += [f"- {line}" for line in lead] + [""]
        lines += ["| " + " | ".join(n for n, _, _ in POINT_COLUMNS) + " |",
                  "|" + "---|" * len(POINT_COLUMNS)]
        for row in best.rows:
            lines.append("| " + " | ".join(fmt(row, k, p) for _, k, p in POINT_COLUMNS) + " |")
        lines.append("")
        diag = diagnosis_lines(best)
        if diag:
            lines += ["### What limits each load point", ""] + [f"- {d}" for d in diag] + [""]
    else:
        lines += [f"**{no_winner_text(verdicts)}**", ""]
    if notes:
        lines += ["## Caveats", ""] + [f"- {note}" for note in notes] + [""]
    if measured:
        lines += ["## What was measured", ""] + [f"- {m}" for m in measured] + [""]
    lines += ["## Every configuration", "", "| # | configuration | outcome | why | bottleneck | node |",
              "|---|---|---|---|---|---|"]
    for i, g in enumerate(verdict_groups(verdicts), 1):
        names = "; ".join(f"`{label}`" for label in g.labels)
        lines.append(f"| {i} | {names} | {g.outcome} | {g.reason.replace('|', '/')} | "
                     f"{short_diagnosis(g.first).replace('|', '/')} | {where_ran(g.first)} |")
    lines += ["", *sections]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(verdicts: list[Verdict], path: Path) -> Path | None:
    """Output tok/s and median TPOT against load level for every configuration that ran load: per configuration the
    mean over the repeats of each level, by ascending level, with min..max bars where repeats differ."""
    ran = [v for v in verdicts if any(r["output_tok_per_s"] is not None for r in v.rows)]
    if not ran:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for v in ran:   # one line per configuration through its levels' means over repeats (bars: min..max)
        style = dict(lw=2.5) if v.outcome == "best" else dict(lw=1, alpha=0.8)
        draw_series(ax1, level_series(v.rows, "output_tok_per_s"), level_gaps(v.rows, "output_tok_per_s"),
                    label=v.label, **style)
        draw_series(ax2, level_series(v.rows, "tpot_median_ms"), level_gaps(v.rows, "tpot_median_ms"),
                    label=v.label, **style)
    ax1.set(xlabel="load level (concurrency or req/s)", ylabel="output tok/s", title="Throughput")
    ax2.set(xlabel="load level (concurrency or req/s)", ylabel="median TPOT (ms)", title="Per-token latency")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
