"""``report.html``: one self-contained page (no script, no network: plots are PNGs embedded as base64 data URIs)
with what was measured, the verdicts, and five plots drawn with matplotlib from the load-point rows:

1. throughput vs load level per configuration (closed-loop concurrency and open-loop rate each on their own axes),
2. latency percentiles (TTFT and TPOT at p50 and p99) vs load level,
3. the Pareto fronts of throughput vs each latency percentile, with the objective's pick marked,
4. a timeline of the sweep: each configuration's launch (start, readiness, correctness probe) and load points, from
   the ``launch_unix_ns``/``ready_unix_ns``/``started_unix_ns``/``finished_unix_ns`` columns,
5. failures grouped by cause, with each group's server log tail.

Every number comes from the rows given (already re-judged for the current objective); nothing is recomputed here.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grid.report.explain import FailureGroup
from grid.report.pareto import LATENCY_METRICS, THROUGHPUT_UNITS, Front, draw_series, level_gaps, level_series
from grid.report.render import (LEVEL_COLUMNS, POINT_COLUMNS, fmt, level_rows, no_winner_text, short_diagnosis,
                                verdict_groups)
from grid.plan import level_name
from grid.report.select import Verdict

KIND_AXIS = {"concurrency": "concurrency (requests in flight)", "rate": "request rate (req/s, modelled)"}
LOG_TAIL_LINES = 40  # lines of a failure group's server log shown in the page


@dataclass
class HtmlReport:
    """What the page shows; built by grid.app.report from the verdicts and the report's other sections."""

    title: str
    verdicts: list[Verdict]
    measured: Sequence[str] = ()
    notes: Sequence[str] = ()
    command: str | None = None
    fronts: Sequence[Front] = ()
    failures: Sequence[FailureGroup] = ()
    extra: Sequence[str] = field(default_factory=tuple)   # further plain-text paragraphs (e.g. re-judge note)
    lead: Sequence[str] = ()   # the best's lead over the runner-up and the sweep's base (grid.report.lead)
    headline: Sequence[str] = ()   # what qualifies the answer itself (an incomplete sweep), above it
    searched: Mapping[str, Any] = field(default_factory=dict)   # search.json: the twin's forecasts and intervals
    objective_kind: str = ""
    speculative: Any = None   # grid.report.speculative.Section: speculative decoding judged per load level


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    """The figure as a base64 PNG data URI (the figure is closed)."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _measured(v: Verdict, kind: str, key: str) -> list[Mapping[str, Any]]:
    return [r for r in v.rows if r["point_kind"] == kind and r.get(key) is not None and r["status"] == "ok"]


def _style(v: Verdict) -> dict:
    return dict(lw=2.5, zorder=3) if v.outcome == "best" else dict(lw=1, alpha=0.75)


def _legend(ax, n: int) -> None:
    if n:
        ax.legend(fontsize=6, ncol=1 if n <= 12 else 2, loc="best")


def throughput_figure(verdicts: list[Verdict], y: str = "output_tok_per_s") -> str | None:
    """Throughput (``y``) vs load level per configuration, one panel per load kind; None when nothing was measured."""
    kinds = [k for k in KIND_AXIS if any(_measured(v, k, y) for v in verdicts)]
    if not kinds:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(kinds), figsize=(7 * len(kinds), 4.5), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        n = 0
        for v in verdicts:
            pts = level_series(v.rows, y, kind)   # means over repeats by ascending level, bars min..max
            if pts:
                n += 1
                draw_series(ax, pts, level_gaps(v.rows, y, kind), label=v.label, **_style(v))
        ax.set(xlabel=KIND_AXIS[kind], ylabel=THROUGHPUT_UNITS.get(y, y), title=f"Throughput vs {kind}")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        _legend(ax, n)
    return _png(fig)


def latency_figure(verdicts: list[Verdict]) -> str | None:
    """TTFT and TPOT at p50 and p99 (modelled ms) vs load level per configuration (2 x 2 panels)."""
    if not any(r["tpot_median_ms"] is not None or r["ttft_median_ms"] is not None
               for v in verdicts for r in v.rows):
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    for ax, (key, name) in zip(axes.flat, LATENCY_METRICS.items()):
        n = 0
        for v in verdicts:
            for kind in KIND_AXIS:
                pts = level_series(v.rows, key, kind)
                if pts:
                    n += 1
                    draw_series(ax, pts, level_gaps(v.rows, key, kind),
                                label=v.label if kind == "concurrency" else f"{v.label} (rate)", **_style(v))
        ax.set(xlabel="load level (concurrency or req/s)", ylabel=f"{name} (ms)", title=f"{name} vs load")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        if key == "tpot_median_ms":
            _legend(ax, n)
    return _png(fig)


def pareto_figure(fronts: Sequence[Front]) -> str | None:
    """Every candidate load point (grey), each front (line) and the objective's pick (star), one panel per latency."""
    if not any(f.points for f in fronts):
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    for ax, f in zip(axes.flat, fronts):
        ax.scatter([p[f.x] for p in f.points], [p[f.y] for p in f.points], s=14, color="0.65", label="load points")
        ax.plot([p[f.x] for p in f.front], [p[f.y] for p in f.front], "o-", color="tab:red", label="Pareto front",
                drawstyle="steps-pre")  # more throughput than a front point costs the next point's latency
        for p in f.front:
            ax.annotate(f"{p['label']} @{p['point_value']:g}", (p[f.x], p[f.y]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
        if f.chosen is not None and f.chosen.get(f.x) is not None and f.chosen.get(f.y) is not None:
            ax.scatter([f.chosen[f.x]], [f.chosen[f.y]], marker="*", s=180, color="tab:green", zorder=4,
                       label=f"objective's pick ({'on' if f.chosen_on_front else 'off'} the front)")
        name = LATENCY_METRICS.get(f.y, f.y)
        ax.set(xlabel=THROUGHPUT_UNITS.get(f.x, f.x), ylabel=f"{name} (ms)", title=f"{name} vs throughput")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _png(fig)


@dataclass(frozen=True)
class Span:
    """One bar of the timeline: ``label`` (configuration), what (launch | load point | failed), real seconds since
    the sweep's first recorded event."""

    label: str
    what: str
    start_s: float
    end_s: float
    text: str = ""


def timeline_spans(verdicts: list[Verdict]) -> list[Span]:
    """Bars of the sweep's timeline (pure): per configuration its launch (``launch_unix_ns`` to ``ready_unix_ns``:
    start, readiness and correctness probe) and each load point (``started_unix_ns`` to ``finished_unix_ns``).
    A load point recorded without ``started_unix_ns`` (an older run) starts ``duration_s / time_scale`` real
    seconds before it finished. Times are real seconds since the earliest event, in row order."""
    raw: list[tuple[str, str, int, int, str]] = []
    for v in verdicts:
        if not v.rows:
            continue
        first = v.rows[0]
        if first["launch_unix_ns"] and first["ready_unix_ns"]:
            what = "launch" if first["trial_status"] == "ok" else "failed"
            raw.append((v.label, what, first["launch_unix_ns"], first["ready_unix_ns"],
                        first["trial_error_class"] or ""))
        for r in v.rows:
            end = r["finished_unix_ns"]
            if r["status"] == "not_run" or not end:
                continue
            start = r["started_unix_ns"]
            if start is None and r["duration_s"] is not None:
                start = end - int(r["duration_s"] / (r["time_scale"] or 1.0) * 1e9)
            if start is not None:
                raw.append((v.label, "load point", start, end, level_name(r)))
    if not raw:
        return []
    t0 = min(s for _, _, s, _, _ in raw)
    return [Span(label, what, (s - t0) / 1e9, (e - t0) / 1e9, text) for label, what, s, e, text in raw]


TIMELINE_COLORS = {"launch": "tab:gray", "load point": "tab:blue", "failed": "tab:red"}


def timeline_figure(verdicts: list[Verdict]) -> str | None:
    spans = timeline_spans(verdicts)
    if not spans:
        return None
    plt = _pyplot()
    labels = list(dict.fromkeys(s.label for s in sorted(spans, key=lambda s: s.start_s)))  # in launch order
    fig, ax = plt.subplots(figsize=(13, max(2.5, 0.32 * len(labels) + 1.2)))
    for i, label in enumerate(labels):
        for what, color in TIMELINE_COLORS.items():
            bars = [(s.start_s, max(s.end_s - s.start_s, 1e-3)) for s in spans if s.label == label and s.what == what]
            if bars:
                ax.broken_barh(bars, (i - 0.35, 0.7), facecolors=color, edgecolors="white", linewidth=0.5)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="real seconds since the sweep's first launch",
           title="Sweep timeline: launch + probe (grey), load points (blue), launch or probe failed (red)")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def _e(text: Any) -> str:
    return html.escape(str(text))


def _code_spans(text: str) -> str:
    """``text`` escaped, its markdown code spans (`` `label` ``) as <code> elements."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th{background:#f0f0f0}pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}
pre.cmd{white-space:pre-wrap}img{max-width:100%;border:1px solid #ddd;margin:6px 0}.note{background:#fff6d5;padding:6px}
.best{color:#060;font-weight:bold}.failed{color:#a00}.invalid{color:#a60}.skipped{color:#808}"""


def _forecasts_html(rep: HtmlReport) -> list[str]:
    """The twin's forecasts with their intervals (grid/report/forecasts.py), or nothing when none was recorded."""
    from grid.report import forecasts
    from grid.report.select import OBJECTIVES

    rows = forecasts.forecast_rows(rep.searched, rep.objective_kind) if rep.objective_kind else []
    if not rows:
        return []
    unit = OBJECTIVES[rep.objective_kind].unit
    out = [f"<h2>{_e(forecasts.TITLE)}</h2><p>{_e(forecasts.summary(rows, bool(rep.searched.get('calibrated'))))}"
           "</p><table id='forecasts'><tr>" + "".join(f"<th>{_e(h)}</th>" for h in forecasts.HEADER) + "</tr>"]
    for r in rows:
        c = forecasts.cells(r, unit)
        out.append(f"<tr><td><code>{_e(c[0])}</code></td>" + "".join(f"<td>{_e(x)}</td>" for x in c[1:]) + "</tr>")
    return out + ["</table>"]


def _speculative_html(rep: HtmlReport) -> list[str]:
    """Speculative decoding per load level (grid/report/speculative.py), or nothing without it."""
    from grid.report import speculative

    sec = rep.speculative
    if sec is None:
        return []
    out = [f"<h2 id='speculative'>{_e(speculative.TITLE)}</h2><table id='speculative-levels'><tr>"
           + "".join(f"<th>{_e(h)}</th>" for h in speculative.HEADER) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in sec.rows]
    return [*out, "</table><ul>", *[f"<li>{_e(b)}</li>" for b in sec.bullets], "</ul>"]


def render_html(rep: HtmlReport) -> str:
    """The page as one string (UTF-8, no external resources). It leads with the answer: the best configuration, its
    launch command, its lead over the runner-up and the sweep's base; then the caveats in one list, what was
    measured, every configuration x load level, the plots, every verdict (failures that share a reason once) and
    the failures grouped by cause."""
    out = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(rep.title)}</title>"
           f"<style>{STYLE}</style></head><body><h1>{_e(rep.title)}</h1>"]
    out += [f"<p class='note'><b>{_e(line)}</b></p>" for line in rep.headline]
    best = next((v for v in rep.verdicts if v.outcome == "best"), None)
    if best:
        out.append(f"<h2 id='best'>Best: <code>{_e(best.label)}</code></h2><p>{_e(best.reason)}</p>")
        if rep.command:
            out.append(f"<pre class='cmd'>{_e(rep.command)}</pre>")
        if rep.lead:
            out.append("<ul id='lead'>" + "".join(f"<li>{_code_spans(x)}</li>" for x in rep.lead) + "</ul>")
        out.append("<table><tr>" + "".join(f"<th>{_e(n)}</th>" for n, _, _ in POINT_COLUMNS) + "</tr>")
        for row in best.rows:
            out.append("<tr>" + "".join(f"<td>{_e(fmt(row, k, p))}</td>" for _, k, p in POINT_COLUMNS) + "</tr>")
        out.append("</table>")
    else:
        out.append(f"<h2 id='best'>{_e(no_winner_text(rep.verdicts))}</h2>")
    if rep.notes:
        out.append("<h2>Caveats</h2><ul id='caveats' class='note'>"
                   + "".join(f"<li>{_e(n)}</li>" for n in rep.notes) + "</ul>")
    if rep.measured:
        out.append("<h2>What was measured</h2><ul>" + "".join(f"<li>{_e(m)}</li>" for m in rep.measured) + "</ul>")
    out += [f"<p>{_e(x)}</p>" for x in rep.extra]
    levels = level_rows(rep.verdicts)
    if levels:
        out.append("<h2>Every configuration x load level</h2><table id='levels'><tr><th>configuration</th>"
                   "<th>outcome</th><th>level</th><th>status</th>"
                   + "".join(f"<th>{_e(n)}</th>" for n, _, _ in LEVEL_COLUMNS) + "</tr>")
        for r in levels:
            out.append(f"<tr><td><code>{_e(r['label'])}</code></td><td class='{_e(r['outcome'])}'>{_e(r['outcome'])}"
                       f"</td><td>{_e(r['level'])}</td><td>{_e(r['status'])}</td>"
                       + "".join(f"<td>{_e(fmt(r, k, p))}</td>" for _, k, p in LEVEL_COLUMNS) + "</tr>")
        out.append("</table>")
    plots = (("Throughput vs load", throughput_figure(rep.verdicts)),
             ("Latency percentiles vs load", latency_figure(rep.verdicts)),
             ("Pareto fronts", pareto_figure(rep.fronts)),
             ("Timeline of the sweep", timeline_figure(rep.verdicts)))
    for title, uri in plots:
        if uri:
            out.append(f"<h2>{_e(title)}</h2><img alt='{_e(title)}' src='{uri}'>")
    if rep.fronts:
        out.append("<ul>" + "".join(f"<li>{_e(f.describe())}</li>" for f in rep.fronts) + "</ul>")
    out.append("<h2>Every configuration</h2><table id='verdicts'><tr><th>#</th><th>configuration</th><th>outcome</th>"
               "<th>why</th><th>bottleneck</th></tr>")
    for i, grp in enumerate(verdict_groups(list(rep.verdicts)), 1):
        names = "<br>".join(f"<code>{_e(label)}</code>" for label in grp.labels)
        count = f" ({len(grp.labels)})" if len(grp.labels) > 1 else ""
        out.append(f"<tr><td>{i}</td><td>{names}</td><td class='{grp.outcome}'>{_e(grp.outcome)}{count}"
                   f"</td><td>{_e(grp.reason)}</td><td>{_e(short_diagnosis(grp.first))}</td></tr>")
    out.append("</table>")
    out += _speculative_html(rep)
    out += _forecasts_html(rep)
    if rep.failures:
        out.append("<h2>Why configurations failed (grouped by cause)</h2>")
        for g in rep.failures:
            out.append(f"<h3 class='{_e(g.status)}'>{_e(g.headline())}</h3><ul>")
            if g.pattern_text():
                out.append(f"<li>pattern: {_e(g.pattern_text())}</li>")
            out += [f"<li>known cause <code>{_e(c.id)}</code>: {_e(c.description)} (source: {_e(c.source)})</li>"
                    for c in g.causes]
            out.append(f"<li>configurations: {_e(', '.join(g.labels))}</li></ul>")
            tail = "\n".join(g.log_tail.splitlines()[-LOG_TAIL_LINES:])
            if tail:
                out.append(f"<details><summary>server log tail ({_e(g.labels[0])})</summary><pre>{_e(tail)}</pre>"
                           "</details>")
    out.append("</body></html>")
    return "\n".join(out)
