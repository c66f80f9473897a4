"""Failures grouped by cause instead of one row of symptoms per configuration (pure).

Configurations that failed or were invalid are grouped by (trial status, error class, normalised message): the
server's own error headline when its log has one, else grid's message, with quoted text, numbers and addresses
masked so that ``probe 0: '!!!!'`` and ``probe 1: 'ёё'`` read the same. Each group then gets

* its *pattern*: the values of the settings the sweep varies that lead to this failure wherever they occur (every
  configuration with ``dsa_decode_backend=flashmla_kv`` is in the group), read off the recorded configurations; and
* its *known causes*: the entries of a table of known failure modes (``grid/twin/failures.py``, each with its source)
  that a ``causes_for`` function (given by the caller) finds for every configuration of the group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grid.report.select import Verdict
from grid.server.logparse import error_headline


@dataclass(frozen=True)
class Cause:
    """A known failure mode: what goes wrong and where that is documented."""

    id: str
    description: str
    source: str


@dataclass
class FailureGroup:
    status: str                          # invalid | failed
    error_class: str
    message: str                         # normalised message shared by the group (the grouping key)
    verdicts: list[Verdict]
    pattern: list[tuple[str, list[Any]]] = field(default_factory=list)  # (setting, values always failing this way)
    uncovered: list[str] = field(default_factory=list)  # labels the pattern does not explain
    causes: list[Cause] = field(default_factory=list)   # known modes found for every configuration of the group

    @property
    def labels(self) -> list[str]:
        return [v.label for v in self.verdicts]

    @property
    def log_tail(self) -> str:
        """The first non-empty server log tail of the group ("" when none was recorded)."""
        return next((v.rows[0]["log_tail"] or "" for v in self.verdicts if v.rows and v.rows[0]["log_tail"]),
                    "")

    def pattern_text(self) -> str:
        """``every configuration with dsa_prefill_backend in {flashmla_kv, flashmla_sparse} or dsa_decode_backend=
        flashmla_kv``; "" when no varied setting value explains the group."""
        if not self.pattern:
            return ""
        parts = [f"{k}={_v(vals[0])}" if len(vals) == 1 else f"{k} in {{{', '.join(_v(x) for x in vals)}}}"
                 for k, vals in self.pattern]
        text = "every configuration with " + " or ".join(parts)
        if self.uncovered:
            text += f" (and {', '.join(self.uncovered)})"
        return text

    @property
    def example(self) -> str:
        """One real message of the group (its first configuration's, unmasked); the normalised one when none."""
        return next((m for v in self.verdicts if v.rows and (m := failure_message(v.rows[0]))), self.message)

    def headline(self) -> str:
        """``invalid garbage_output: probe 0: '!!!!' — 12 configurations``: one real message of the group
        (:attr:`example`; numbers and quoted text are masked only to group)."""
        n = len(self.verdicts)
        return (f"{self.status} {self.error_class}: {self.example} — {n} configuration{'s' if n != 1 else ''}")


def _v(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _quoted(match: re.Match) -> str:
    """A quoted ASCII identifier (a module or backend name: 'aiter') stays; other quoted text is masked."""
    return match.group(0) if _IDENTIFIER.fullmatch(match.group(0)[1:-1]) else "'…'"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_MASKS = (
    (re.compile(r"'[^']*'|\"[^\"]*\""), _quoted),        # quoted text (generated garbage, paths, values)
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),            # addresses
    (re.compile(r"(?<![\w.])\d+(\.\d+)?(?!\w)"), "N"),     # counts, sizes, ports (not names: fa3, sm_120)
)


def normalize_message(text: str) -> str:
    """``text`` with quoted text (except ASCII identifiers such as module names), hex addresses and free-standing
    numbers masked and whitespace collapsed (for grouping)."""
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def failure_message(row: Mapping[str, Any]) -> str:
    """What a failed trial says: the server log's error headline (``ModuleNotFoundError: No module named 'aiter'``),
    else grid's ``trial_error_message``, else "" (``grid.server.logparse.error_headline``)."""
    return error_headline(row["log_tail"]) or row["trial_error_message"] or ""


def settings_of(v: Verdict) -> dict[str, Any]:
    """The configuration's settings (``config_json`` of its first row; {} when not recorded)."""
    text = v.rows[0]["config_json"] if v.rows else None
    return json.loads(text) if text else {}


def varied_settings(verdicts: Iterable[Verdict]) -> dict[str, dict[str, Any]]:
    """Settings whose value differs between the recorded configurations: ``{setting: {config_hash: value}}`` (a
    setting a configuration does not set counts as the value None)."""
    configs = {v.config_hash: settings_of(v) for v in verdicts}
    keys = sorted({k for s in configs.values() for k in s})
    out = {}
    for k in keys:
        values = {h: s.get(k) for h, s in configs.items()}
        if len({json.dumps(x, sort_keys=True) for x in values.values()}) > 1:
            out[k] = values
    return out


def _value_sets(varied: dict[str, dict[str, Any]]) -> list[tuple[str, str, set[str]]]:
    """(setting, value as JSON, config hashes having it) for every value of every varied setting."""
    out = []
    for key, by_hash in varied.items():
        values: dict[str, set[str]] = {}
        for h, value in by_hash.items():
            values.setdefault(json.dumps(value, sort_keys=True), set()).add(h)
        out += [(key, text, hashes) for text, hashes in sorted(values.items())]
    return out


def _patterns(members: dict[Any, set[str]], varied: dict[str, dict[str, Any]]) -> dict[Any, list[tuple[str, str]]]:
    """Each group's pattern values (setting, value as JSON): see :func:`group_failures`."""
    values = _value_sets(varied)
    claimed: dict[tuple[str, str], Any] = {}
    covered: dict[Any, set[str]] = {g: set() for g in members}
    while True:
        offers: dict[tuple[str, str], list[tuple[int, Any, set[str]]]] = {}
        for g, m in members.items():
            allowed = m.union(*(c for k, c in covered.items() if k != g))
            for key, text, hashes in values:
                if (key, text) not in claimed and hashes <= allowed and hashes & m:
                    offers.setdefault((key, text), []).append((len(hashes & m), g, hashes & m))
        if not offers:
            return {g: [v for v, owner in claimed.items() if owner == g] for g in members}
        winners = []
        for value, bids in offers.items():
            _, g, mine = max(bids, key=lambda bid: bid[0])   # the group holding most configurations with it
            winners.append((value, g, mine))
        admitted = False
        # most newly explained configurations first: a value whose configurations of the group another value of it
        # already explains adds nothing but the failures of other groups (aiter pairs with flashmla_auto)
        for value, g, mine in sorted(winners, key=lambda w: (-len(w[2] - covered[w[1]]), w[0])):
            if not mine - covered[g]:
                continue
            claimed[value] = g
            covered[g] |= mine
            admitted = True
        if not admitted:
            return {g: [v for v, owner in claimed.items() if owner == g] for g in members}


def group_failures(verdicts: list[Verdict],
                   causes_for: Callable[[Verdict], list[Cause]] | None = None) -> list[FailureGroup]:
    """Failed and invalid verdicts grouped by cause, largest group first (then by status, class, message).

    ``causes_for``: the known failure modes that apply to one configuration (e.g. the twin's table evaluated for its
    settings); a group lists those found for every one of its configurations.

    A group's pattern is each value of a setting the sweep varies such that every configuration with it (among all
    ``verdicts``) is in the group, or in another group whose own pattern explains it: a pair that crashed at startup
    because of its decode backend never got to show the garbage its prefill backend gives elsewhere. Values that hold
    outright are found first; then, round by round, values whose other configurations earlier rounds explained. A
    value belongs to one group only (the first round that admits it; within a round, the group holding most
    configurations with it), so explanations that only lean on each other are never admitted. A value is admitted
    only when it explains a configuration of its group that no admitted value explains yet (within a round, values
    explaining most new configurations first): a backend whose every other configuration failed for other reasons
    (or was never run) is not a pattern of a group whose members with it another value already explains.
    """
    groups: dict[tuple[str, str, str], list[Verdict]] = {}
    for v in verdicts:
        if v.outcome not in ("failed", "invalid") or not v.rows:
            continue
        row = v.rows[0]
        key = (row["trial_status"] or v.outcome, row["trial_error_class"] or "unknown",
               normalize_message(failure_message(row)))
        groups.setdefault(key, []).append(v)
    varied = varied_settings(verdicts)
    labels = {v.config_hash: v.label for v in verdicts}
    members = {key: {v.config_hash for v in vs} for key, vs in groups.items()}
    patterns = _patterns(members, varied)
    out = []
    for key, vs in groups.items():
        g = FailureGroup(*key, vs)
        by_setting: dict[str, list[Any]] = {}
        for setting, text in sorted(patterns[key]):
            by_setting.setdefault(setting, []).append(json.loads(text))
        g.pattern = list(by_setting.items())
        explained = {h for h in members[key]
                     if any(json.dumps(varied[k][h], sort_keys=True) == t for k, t in patterns[key])}
        g.uncovered = sorted(labels[h] for h in members[key] - explained) if g.pattern else []
        if causes_for is not None:
            per_config = [causes_for(v) for v in vs]
            g.causes = [c for c in per_config[0] if all(c in other for other in per_config[1:])]
        out.append(g)
    out.sort(key=lambda g: (-len(g.verdicts), g.status, g.error_class, g.message))
    return out


def markdown_lines(groups: list[FailureGroup]) -> list[str]:
    """The report's "Why configurations failed" section: one bullet per group with pattern, causes and sources."""
    if not groups:
        return []
    lines = ["## Why configurations failed (grouped by cause)", ""]
    for g in groups:
        lines.append(f"- **{g.headline()}**")
        if g.pattern_text():
            lines.append(f"  - pattern: {g.pattern_text()}")
        for c in g.causes:
            lines.append(f"  - known cause `{c.id}`: {c.description} (source: {c.source})")
        lines.append(f"  - configurations: {', '.join(f'`{x}`' for x in g.labels)}")
    return lines + [""]
