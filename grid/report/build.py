"""Assemble and write the report of a run directory: console output, ``report.md``, ``report.html``,
``throughput.png`` and the re-judged SLO table (``parquet/rejudged/rejudged.parquet``).

Called by grid.app.report once the load points are re-judged and ranked. The SLO-dependent values the report shows
(goodput, attainment, SLO percentiles) are those of the *current* objective, recomputed from the stored requests;
``parquet/load_points`` keeps the values of the SLOs each point was measured under, so the report writes the values
it used beside them, and says so, instead of rewriting the measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from grid.config.schema import RunSpec
from grid.metrics.loadpoint import SLO_COLUMNS, SLO_LATENCY_KEYS
from grid.report import context, explain, forecasts, relevance
from grid.report import speculative as spec_report
from grid.report.html import HtmlReport, render_html
from grid.report.lead import lead_lines, sweep_base
from grid.report.pareto import fronts as pareto_fronts
from grid.report.render import markdown, plot, print_report
from grid.report.select import OBJECTIVES, Verdict, slo_text
from grid.storage.rows import JudgedPointRow
from grid.storage.schema import point_value

REJUDGED_PATH = Path("parquet") / "rejudged" / "rejudged.parquet"


def rejudged_rows(rows: Sequence[JudgedPointRow], objective_kind: str) -> list[dict]:
    """The rows of ``REJUDGED_SCHEMA``: per load point its key and the SLO values the report judged it by."""
    keys = ("config_hash", "point_index", *SLO_COLUMNS, *SLO_LATENCY_KEYS.values(), "slo_unjudged")
    return [{**{k: point_value(r, k) for k in keys}, "objective_kind": objective_kind} for r in rows]


def write_rejudged(run_dir: str | Path, rows: Sequence[JudgedPointRow], objective_kind: str) -> Path:
    from grid.storage.parquet import write_atomic
    from grid.storage.schema import REJUDGED_SCHEMA

    path = Path(run_dir) / REJUDGED_PATH
    write_atomic(pa.Table.from_pylist(rejudged_rows(rows, objective_kind), schema=REJUDGED_SCHEMA), path)
    return path


def rejudge_note(spec: RunSpec) -> str:
    slo = slo_text(spec.objective.slo)
    return ("SLO values in this report (goodput, SLO attainment, latency at the SLO percentile) are re-judged for "
            f"this objective ({spec.objective.kind}, {'SLOs ' + slo if slo else 'no SLOs'}) from the stored requests "
            f"and written to {REJUDGED_PATH.as_posix()}; the same columns in parquet/load_points keep the SLOs each "
            "point was measured under.")


def accuracy_notes(spec: RunSpec, rows: Sequence[JudgedPointRow]) -> list[str]:
    """What the accuracy guard measured (grid/accuracy), or [] when it did not run."""
    from grid.accuracy import prompts
    from grid.report.select import accuracy_gate

    baseline, source, gated = accuracy_gate(rows, spec.accuracy.max_drop)
    if baseline is None:
        return []
    shares = {r["config_hash"]: r["accuracy_exact_match"] for r in rows if r["accuracy_exact_match"] is not None}
    low, high = min(shares.values()) * 100, max(shares.values()) * 100
    span = f"{low:.0f}%" if low == high else f"{low:.0f}-{high:.0f}%"
    gate = (f"{len(gated)} more than {spec.accuracy.max_drop * 100:g} points below it (less_accurate: cannot win)"
            if gated else f"none more than {spec.accuracy.max_drop * 100:g} points below it")
    return [f"Accuracy guard: {len(shares)} configuration{'s' if len(shares) != 1 else ''} answered grid's "
            f"{len(prompts())} accuracy prompts greedily (parquet/accuracy); exact match {span}, baseline "
            f"{baseline * 100:.0f}% ({source}); {gate}"
            + ("" if spec.accuracy.enabled else " (the gate is off: accuracy.enabled=false)")]


DEPLOY_DIR = context.DEPLOY_DIR


@dataclass
class Report:
    verdicts: list[Verdict]
    measured: list[str]
    notes: list[str]
    command: str | None
    fronts: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    lead: list[str] = field(default_factory=list)   # the best's lead over the runner-up and the sweep's base
    headline: list[str] = field(default_factory=list)  # what qualifies the answer itself (an incomplete sweep)
    searched: dict = field(default_factory=dict)  # search.json: the twin's forecasts with their intervals
    speculative: spec_report.Section | None = None  # speculative decoding judged per load level
    deploy: dict[str, str] = field(default_factory=dict)  # the best's deployment files (grid/report/deploy.py)


def assemble(spec: RunSpec, verdicts: list[Verdict], rows: Sequence[JudgedPointRow], plans: list, notes: list[str],
             headline: list[str] | None = None, searched: dict | None = None) -> Report:
    """Everything the report says, from the ranked ``verdicts`` and re-judged ``rows`` (see module docstring).
    ``notes``: caveats (listed after the answer); ``headline``: what qualifies the answer itself (shown above it);
    ``searched``: the search's record (``search.json``: the twin's forecasts, grid/report/forecasts.py)."""
    best = next((v for v in verdicts if v.outcome == "best"), None)
    contenders = {v.config_hash for v in verdicts if v.outcome in ("best", "lost")}  # not less accurate, not failed
    deployment = next((p.deployment for p in plans if best is not None and p.config_hash == best.config_hash), None)
    server = context.measured_identity(rows)
    base = sweep_base(plans, server) if server is not None and plans else None
    return Report(
        verdicts=verdicts,
        measured=context.measured_lines(spec, rows, plans),
        notes=context.base_warnings(spec, explain.settings_of(best) if best else None,
                                    plans[0].load if plans else None)
        + relevance.notes(verdicts, relevance.swept_values(p.settings for p in plans)) + accuracy_notes(spec, rows)
        + context.twin_spread_note(spec, verdicts) + notes,
        command=context.real_command(spec, best, deployment) if best else None,
        fronts=pareto_fronts(rows, spec.objective.kind, best.best_point if best else None),
        failures=explain.group_failures(verdicts, lambda v: context.known_causes(spec, v)),
        lead=lead_lines(verdicts, OBJECTIVES[spec.objective.kind], base) + topology_lines(spec, verdicts, plans,
                                                                                        deployment),
        headline=list(headline or []),
        searched=dict(searched or {}),
        speculative=spec_report.section(rows, {p.config_hash: p.settings for p in plans if p.config_hash in contenders},
                                        server.sglang_release if server is not None else None),
        deploy=context.deployment_files(spec, best, deployment) if best else {},
    )


def topology_lines(spec: RunSpec, verdicts: list[Verdict], plans: list, deployment) -> list[str]:
    """What the sweep's deployments decided: the best deployment's servers (with several, where their commands
    are), and with disaggregated ones among them the best aggregated and the best disaggregated deployment as
    measured, and what disaggregation gains or loses (grid/report/disaggregation.py ``pd_verdict``)."""
    from grid.report.disaggregation import pd_verdict

    out = []
    if deployment is not None and deployment.servers > 1:
        out.append(f"Deployment: {deployment.label()}, {deployment.servers} servers on {deployment.gpus} GPUs behind "
                   f"SGLang's router ({deployment.router_policy}); {DEPLOY_DIR}/launch.sh starts each on its node")
        best = next((v for v in verdicts if v.outcome == "best"), None)
        served = servers_line(best.best_point) if best is not None and best.best_point is not None else None
        if served:
            out.append(served)
    obj = OBJECTIVES[spec.objective.kind]
    scores = {v.config_hash: v.score for v in verdicts if v.outcome in ("best", "lost")}
    measured = [p for p in plans if any(v.config_hash == p.config_hash and v.rows for v in verdicts)]
    line = pd_verdict(measured, scores, obj.higher_is_better, obj.unit, source="measured")
    return out + ([line] if line else [])


def servers_line(row: JudgedPointRow) -> str | None:
    """``Requests per server at its best load point (warm-up included): aggregated 0 on node-a 8, aggregated 1 on
    node-b 8``: what each server of a deployment grid launched finished during the point
    (``deployment_servers_json``), so an uneven router shows; None where the row does not say (one server, the
    twin). Pure."""
    import json

    text = row["deployment_servers_json"]
    if not text:
        return None
    parts = [f"{s['server']} on {s['node'] or '?'} {'?' if s['requests'] is None else s['requests']}"
             for s in json.loads(text)]
    return "Requests per server at its best load point (warm-up included): " + ", ".join(parts)


def write(spec: RunSpec, rep: Report, rows: Sequence[JudgedPointRow], console) -> list[str]:
    """Print the report and write its files into ``spec.run_dir``. Returns the names of the files written."""
    run_dir = Path(spec.run_dir)
    title = f"grid: {spec.name}"
    print_report(rep.verdicts, console, rep.notes, rep.command, rep.lead, rep.headline)
    for g in rep.failures:
        console.print(f"  {g.headline()}" + (f"; {g.pattern_text()}" if g.pattern_text() else ""),
                      markup=False, highlight=False, soft_wrap=True)
    if rep.speculative is not None:
        console.print(f"{spec_report.TITLE}:", markup=False, highlight=False)
        for b in rep.speculative.bullets:
            console.print(f"  {b}", markup=False, highlight=False, soft_wrap=True)
    write_rejudged(run_dir, rows, spec.objective.kind)
    deploy_lines = ([f"## Deploy it ({DEPLOY_DIR}/)", "", f"`{DEPLOY_DIR}/` holds the best configuration's launch "
                     "script and its LeaderWorkerSet, RoleBasedGroup and KubeRay RayJob manifests (the RayJob reruns "
                     "this sweep on real SGLang servers): " + ", ".join(f"`{n}`" for n in rep.deploy) + ".", ""]
                    if rep.deploy else [])
    sections = [*deploy_lines, *spec_report.markdown(rep.speculative), "## Pareto fronts (throughput vs latency, every configuration and load level)", "",
                *[f"- {f.describe()}" for f in rep.fronts], "", *explain.markdown_lines(rep.failures),
                *forecasts.markdown_lines(rep.searched, spec.objective.kind), rejudge_note(spec)]
    (run_dir / "report.md").write_text(markdown(rep.verdicts, title, rep.notes, measured=rep.measured,
                                                command=rep.command, sections=sections, lead=rep.lead,
                                                headline=rep.headline))
    page = HtmlReport(title, rep.verdicts, rep.measured, rep.notes, rep.command, rep.fronts, rep.failures,
                      (rejudge_note(spec),), rep.lead, rep.headline, rep.searched, spec.objective.kind,
                      rep.speculative)
    (run_dir / "report.html").write_text(render_html(page), encoding="utf-8")
    written = ["report.md", "report.html", REJUDGED_PATH.as_posix()]
    if rep.deploy:
        folder = run_dir / DEPLOY_DIR
        folder.mkdir(exist_ok=True)
        for name, text in rep.deploy.items():
            (folder / name).write_text(text)
        (folder / "launch.sh").chmod(0o755)
        written += [f"{DEPLOY_DIR}/{name}" for name in rep.deploy]
    if plot(rep.verdicts, run_dir / "throughput.png"):
        written.append("throughput.png")
    return written
