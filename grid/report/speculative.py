"""Speculative decoding judged per load level: which setting wins at each concurrency, by how much against
speculative decoding off, where the crossover lies, and what to launch (pure: rows in, lines out).

Speculative decoding buys per-request speed at low concurrency and costs throughput at high (docs/twin.md), so one
"best configuration" over the sweep hides the answer. For every concurrency level (and request rate) measured, two
winners are named: by output throughput (``output_tok_per_s``) and by per-request speed (output tok/s per user,
``1000 / tpot_median_ms``), each against the best configuration without speculative decoding. Ties within the measured
spread (grid.report.select ``is_tie``: overlapping 95% intervals with repeats, else the default tie percentage; or a
difference smaller than the share of the points' time the host took) go to the simpler setting: off first, then
fewer draft tokens, fewer steps, smaller top-k.

The recommendation is one setting when one wins (or ties) at every level; otherwise the per-level winners, as a
schedule by batch size where the release switches the step count itself (``--speculative-adaptive``, SGLang
0.5.11+: docs/sources.md#speculative-decoding), else the setting for the levels the user names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grid.metrics.confidence import Interval
from grid.metrics.hostnoise import host_error_pct, host_noise
from grid.releases.flags import SPECULATIVE_MAX_RUNNING_REQUESTS, SPECULATIVE_SETTINGS, is_speculative
from grid.report.select import fmt_delta, fmt_score, is_tie, level_scores

TITLE = "Speculative decoding per load"
#: (column, unit, what) of the two ways a level is judged: throughput, and per-request speed.
METRICS = (("output_tok_per_s", "tok/s", "output throughput"), ("tok_per_s_per_user", "tok/s/user", "per-request speed"))


def judged_per_level(spec: Any) -> bool:
    """Whether ``spec`` (a ``RunSpec``) sweeps speculative decoding: some configuration of its sweep turns it on, so
    the report judges every load level on its own (early stopping's twin-bound rule then skips no level)."""
    sweep = getattr(spec, "sweep", None)
    if sweep is None:
        return False
    if any(is_speculative({"speculative_algorithm": v}) for v in sweep.grid.get("speculative_algorithm", [])):
        return True
    return any(is_speculative({**sweep.base, **c}) for c in sweep.configs) or is_speculative(sweep.base)


def simplicity(settings: Mapping[str, Any]) -> tuple:
    """Sort key, simplest first: off, then fewer draft tokens, fewer steps, smaller top-k (unset counts as 0)."""
    if not is_speculative(settings):
        return (0,)
    return (1, *(int(settings.get(k) or 0) for k in SPECULATIVE_SETTINGS[1:][::-1]))


def setting_text(settings: Mapping[str, Any]) -> str:
    """``off`` or ``NEXTN 3 steps, top-k 1, 4 draft tokens`` (+ ``, max_running_requests 128`` when set)."""
    if not is_speculative(settings):
        return "off"
    parts = [str(settings["speculative_algorithm"])]
    for key, word in (("speculative_num_steps", "steps"), ("speculative_eagle_topk", "top-k"),
                      ("speculative_num_draft_tokens", "draft tokens")):
        if settings.get(key) is not None:
            parts.append(f"top-k {settings[key]}" if word == "top-k" else f"{settings[key]} {word}")
    text = parts[0] + (" " + ", ".join(parts[1:]) if parts[1:] else "")
    if settings.get("max_running_requests") is not None:
        text += f", max_running_requests {settings['max_running_requests']}"
    return text


@dataclass(frozen=True)
class Entry:
    """One configuration at one level: its score (mean over repeats) and spread, its acceptance length."""

    config_hash: str
    settings: Mapping[str, Any]
    value: float
    interval: Interval
    accept_length: float | None
    host_pct: float = 0.0   # how far (%) the host may have moved the value (grid.metrics.hostnoise.host_error_pct)

    @property
    def speculative(self) -> bool:
        return is_speculative(self.settings)


@dataclass(frozen=True)
class LevelPick:
    """The winner at one level by one metric, and the best configuration without speculative decoding there."""

    kind: str
    level: float
    metric: str
    winner: Entry
    off: Entry | None
    why: str          # how the winner was chosen over a faster, more complex setting ("" when it is the fastest)

    @property
    def gain_pct(self) -> float | None:
        """The winner's score against off, in percent (positive: better); None without an off configuration."""
        if self.off is None or not self.off.value:
            return None
        return (self.winner.value / self.off.value - 1.0) * 100.0


def per_user(row: Mapping[str, Any]) -> float | None:
    """Output tok/s one request sees at a load point: 1000 / its median TPOT (ms); None without a TPOT."""
    tpot = row["tpot_median_ms"]
    return 1000.0 / tpot if tpot else None


def accept_length(row: Mapping[str, Any]) -> float | None:
    """The acceptance length a load point measured: the Decode lines' mean, else /metrics' (None without)."""
    return row["server_accept_len_mean"] or row["srv_spec_accept_length_mean"]


def _entries(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Mapping[str, Any]], metric: str
             ) -> dict[tuple[str, float], list[Entry]]:
    by_config: dict[str, list[dict]] = {}
    for r in rows:
        if r["config_hash"] in settings and r["status"] == "ok" and not host_noise(r):
            value = per_user(r) if metric == "tok_per_s_per_user" else r.get(metric)
            if value is not None:
                by_config.setdefault(r["config_hash"], []).append({**r, metric: value})
    out: dict[tuple[str, float], list[Entry]] = {}
    for h, rs in by_config.items():
        for row, iv, reps in level_scores(rs, rs, metric):
            out.setdefault((row["point_kind"] or "concurrency", float(row["point_value"])), []).append(
                Entry(h, settings[h], iv.mean, iv, accept_length(row), host_error_pct(reps)))
    return out


def pick(entries: Sequence[Entry], unit: str) -> tuple[Entry, str]:
    """The winner among ``entries`` (higher is better): the simplest setting tied with the fastest (see the module
    docstring), and why it beat the fastest ("" when it is the fastest). Raises ``ValueError`` for no entries."""
    if not entries:
        raise ValueError("no entries")
    fastest = max(entries, key=lambda e: (e.value, [-x for x in simplicity(e.settings)]))
    for e in sorted(entries, key=lambda e: simplicity(e.settings)):
        if e is fastest:
            return e, ""
        delta = (e.value / fastest.value - 1.0) * 100.0 if fastest.value else 0.0
        tied, why = is_tie(e.interval, fastest.interval, delta, unit, max(e.host_pct, fastest.host_pct))
        if tied:
            return e, (f"{setting_text(fastest.settings)} scored {fmt_score(fastest.value)} {unit} "
                       f"({fmt_delta(-delta)}), {why}: the simpler {setting_text(e.settings)} wins")
    return fastest, ""


def level_picks(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, list[LevelPick]]:
    """Per metric of :data:`METRICS`, the :class:`LevelPick` of every level some configuration measured, in level
    order. ``rows``: ``load_points`` rows; ``settings``: config hash -> its settings (configurations not in it, and
    rows that are not ``ok`` or are host noise, are left out)."""
    out: dict[str, list[LevelPick]] = {}
    for metric, unit, _ in METRICS:
        picks = []
        for (kind, level), entries in sorted(_entries(rows, settings, metric).items()):
            winner, why = pick(entries, unit)
            offs = [e for e in entries if not e.speculative]
            off = max(offs, key=lambda e: e.value) if offs else None
            picks.append(LevelPick(kind, level, metric, winner, off, why))
        out[metric] = picks
    return out


def crossover(picks: Sequence[LevelPick]) -> str | None:
    """Where the winner changes from a speculative setting to off, or back (``between concurrency 16 and 64``);
    None when it never changes."""
    for a, b in zip(picks, picks[1:]):
        if a.winner.speculative != b.winner.speculative:
            word = "concurrency" if a.kind == "concurrency" else "request rate"
            to = "off" if not b.winner.speculative else setting_text(b.winner.settings)
            return f"between {word} {a.level:g} and {b.level:g} (from {setting_text(a.winner.settings)} to {to})"
    return None


def _level(p: LevelPick) -> str:
    return f"{'c' if p.kind == 'concurrency' else 'rate '}{p.level:g}"


def recommendation(picks: Sequence[LevelPick], version: tuple[int, ...] | None, what: str) -> str:
    """One line: the setting to launch for ``what`` (e.g. "output throughput") given the per-level ``picks``."""
    if not picks:
        return f"For {what}: nothing measured."
    winners = {p.winner.config_hash for p in picks}
    if len(winners) == 1:
        return f"For {what}: {setting_text(picks[0].winner.settings)} at every level measured."
    schedule = "; ".join(f"{_level(p)}: {setting_text(p.winner.settings)}" for p in picks)
    if version is not None and adaptive(version):
        how = ("this release can switch the step count by batch size itself (--speculative-adaptive); give it this "
               "schedule")
    else:
        how = ("this release runs one setting for every batch size: launch the one for the load you serve, or "
               "SGLang 0.5.11+ to switch by batch size (--speculative-adaptive)")
    return f"For {what}: it depends on the load ({schedule}); {how}."


def adaptive(version: tuple[int, ...]) -> bool:
    """Whether SGLang ``version`` can switch the speculative step count by batch size itself: its catalog (read from
    the released wheel) has ``--speculative-adaptive`` (0.5.11+). A release outside the catalog: the newest catalogued one not newer than it."""
    from grid.releases import catalog

    return catalog.release(version).option("speculative_adaptive") is not None


def cap_note(picks: Sequence[LevelPick], settings: Mapping[str, Mapping[str, Any]]) -> str | None:
    """A note when a speculative configuration that leaves ``max_running_requests`` unset was measured above SGLang's
    48-request cap: its throughput there is the cap's, not speculation's."""
    capped = sorted({h for h, s in settings.items() if is_speculative(s) and s.get("max_running_requests") is None})
    above = [p for p in picks if p.kind == "concurrency" and p.level > SPECULATIVE_MAX_RUNNING_REQUESTS]
    if not capped or not above:
        return None
    levels = ", ".join(f"{p.level:g}" for p in above)
    return (f"At concurrency {levels} the speculative configurations that leave max_running_requests unset ran at "
            f"most {SPECULATIVE_MAX_RUNNING_REQUESTS} requests at once (SGLang's cap with speculative decoding): their throughput "
            "there is the cap's, not speculation's; set max_running_requests to lift it.")


HEADER = ("level", "off: tok/s, tok/s/user", "best for throughput", "vs off", "best per request", "vs off",
          "accept len")


def table_rows(picks: dict[str, list[LevelPick]]) -> list[tuple[str, ...]]:
    """The cells of :data:`HEADER`, one row per level."""
    by_level: dict[tuple[str, float], dict[str, LevelPick]] = {}
    for metric, ps in picks.items():
        for p in ps:
            by_level.setdefault((p.kind, p.level), {})[metric] = p
    out: list[tuple[str, ...]] = []
    for _, ms in sorted(by_level.items()):
        tp, pu = ms.get("output_tok_per_s"), ms.get("tok_per_s_per_user")
        any_pick = tp or pu
        assert any_pick is not None
        off = (f"{fmt_score(tp.off.value) if tp and tp.off else '-'}, "
               f"{fmt_score(pu.off.value) if pu and pu.off else '-'}")

        def won(p: LevelPick | None, unit: str) -> tuple[str, str]:
            if p is None:
                return "-", "-"
            gain = p.gain_pct
            return (f"{setting_text(p.winner.settings)} ({fmt_score(p.winner.value)} {unit})",
                    "-" if gain is None or not p.winner.speculative else fmt_delta(gain))

        accept = tp.winner.accept_length if tp else None
        out.append((_level(any_pick), off, *won(tp, "tok/s"), *won(pu, "tok/s/user"),
                    f"{accept:.2f}" if accept else "-"))
    return out


@dataclass(frozen=True)
class Section:
    """The report's section: one table row per level (cells of :data:`HEADER`) and the bullets below it."""

    rows: list[tuple[str, ...]]
    bullets: list[str]


def section(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Mapping[str, Any]],
            version: tuple[int, ...] | None) -> Section | None:
    """The section for ``load_points`` ``rows`` of the configurations in ``settings`` (config hash -> settings) on
    release ``version``; None when no configuration runs speculative decoding or nothing was measured."""
    if not any(is_speculative(s) for s in settings.values()):
        return None
    picks = level_picks(rows, settings)
    if not any(picks.values()):
        return None
    bullets = []
    for metric, _, what in METRICS:
        ps = picks[metric]
        cross = crossover(ps)
        bullets.append(recommendation(ps, version, what) + (f" The winner changes {cross}." if cross else ""))
        bullets += [f"{_level(p)}, {what}: {p.why}" for p in ps if p.why]
    note = cap_note(picks["output_tok_per_s"], settings)
    return Section(table_rows(picks), bullets + ([note] if note else []))


def markdown(sec: Section | None) -> list[str]:
    """``sec`` as markdown lines ([] for None)."""
    if sec is None:
        return []
    out = [f"## {TITLE}", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(r) + " |" for r in sec.rows]
    return [*out, "", *[f"- {b}" for b in sec.bullets], ""]


def lines(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Mapping[str, Any]],
          version: tuple[int, ...] | None) -> list[str]:
    """The section as markdown, or [] (:func:`section`)."""
    return markdown(section(rows, settings, version))
