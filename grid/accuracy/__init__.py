"""The accuracy guard: a configuration that is faster because it computes differently (an fp8 KV cache, a
quantization, speculative decoding, another attention or MoE kernel) must not win if it answers worse.

``prompts.yaml`` (shipped with grid) holds prompts with one checkable answer each. They are sent greedily
(temperature 0) to every configuration that computes differently from the sweep's base and to the configurations
that compute like it (the baseline); :func:`score` counts exact matches (:func:`matches`). The report gates on the
difference (grid/report/select.py: a configuration whose accuracy is below the baseline's by more than
``accuracy.max_drop`` cannot win). Pure functions here; the HTTP calls are in :func:`ask`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from grid.releases import flags

PROMPTS_PATH = Path(__file__).with_name("prompts.yaml")

#: Settings that change what the server computes (not only how fast): a different value may change the answers.
#: Declared once, on each setting's entry (grid/releases/flags.py ``Setting.numeric``).
NUMERIC_SETTINGS = flags.NUMERIC_SETTINGS


@dataclass(frozen=True)
class Item:
    id: str
    kind: str
    prompt: str
    answer: str


@lru_cache(maxsize=1)
def prompts() -> tuple[Item, ...]:
    """The shipped prompts (``prompts.yaml``). Raises ``ValueError`` for a malformed file or a duplicate id."""
    items = tuple(Item(**row) for row in yaml.safe_load(PROMPTS_PATH.read_text()))
    if len({i.id for i in items}) != len(items):
        raise ValueError(f"{PROMPTS_PATH.name}: duplicate ids")
    return items


def answer_for(prompt: str) -> str | None:
    """The expected answer of a shipped prompt (exact prompt text), None for any other text."""
    return {i.prompt: i.answer for i in prompts()}.get(prompt)


def matches(reply: str, answer: str) -> bool:
    """Whether ``reply`` gives ``answer``: its first non-empty line, stripped, starts with the answer
    (case-insensitive) and the answer is not the prefix of a longer word or number ("43" does not match "430")."""
    line = next((ln.strip() for ln in reply.splitlines() if ln.strip()), "")
    if not line.lower().startswith(answer.lower()):
        return False
    rest = line[len(answer):]
    return not rest or not re.match(r"\w", rest)


def score(replies: Sequence[str], items: Sequence[Item] | None = None) -> float:
    """Exact-match fraction (0..1) of ``replies`` against ``items`` (default: the shipped prompts), in order."""
    items = prompts() if items is None else items
    if len(replies) != len(items):
        raise ValueError(f"{len(replies)} replies for {len(items)} prompts")
    return sum(matches(r, i.answer) for r, i in zip(replies, items)) / len(items)


def computes_differently(settings: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """The settings of a configuration that change its numerics relative to the sweep's ``base`` (sorted; [] for a
    configuration that computes like the base: a baseline)."""
    return sorted(k for k in NUMERIC_SETTINGS if settings.get(k) != base.get(k) and k in settings)


def ask(base_url: str, items: Sequence[Item], api: str = "generate", model: str = "default",
        api_key: str | None = None, timeout_s: float = 120.0, max_new_tokens: int = 16) -> list[str]:
    """Send every prompt greedily through the run's ``api`` (``generate``, ``completions`` or ``chat``: the same
    requests as the correctness probe, grid.server.probe ``ask_greedy``) and return the replies, in order. Raises
    ``OSError`` on an HTTP failure."""
    from grid.server.probe import ask_greedy

    return ask_greedy(base_url, api, model, [i.prompt for i in items], api_key, timeout_s, max_new_tokens)


#: SGLang's speculative decoding is lossless under greedy sampling: the target model verifies every drafted token, so
#: the tokens must be those of the same configuration without it (sgl-project/sglang docs, "Speculative Decoding";
#: EAGLE, Li et al. 2024, §3). The speculative settings: grid.releases.flags ``SPECULATIVE_SETTINGS``.
SPECULATIVE_SETTINGS = flags.SPECULATIVE_SETTINGS


@dataclass(frozen=True)
class Mismatch:
    """A speculative configuration's greedy reply that differs from its plain twin's: the prompt, the character at
    which they first differ (0-based) and both replies from a little before it."""

    config_hash: str
    plain_hash: str
    prompt_id: str
    position: int
    speculative: str
    plain: str

    def reason(self) -> str:
        """One line for the report (``less_accurate``)."""
        return (f"answers differ from the same configuration without speculative decoding ({self.plain_hash}) under "
                f"greedy sampling: prompt {self.prompt_id}, first difference at character {self.position} "
                f"({self.speculative!r} vs {self.plain!r})")


def plain_partner(settings: Mapping[str, Any], others: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The config hash in ``others`` (hash -> settings) that computes like ``settings`` with speculative decoding
    off: the same value of every setting that changes numerics (:data:`NUMERIC_SETTINGS`) other than the
    speculative ones, and no ``speculative_algorithm``; None when the sweep has none (or ``settings`` are not
    speculative)."""
    if not flags.is_speculative(settings):
        return None
    keys = NUMERIC_SETTINGS - set(SPECULATIVE_SETTINGS)
    for h, s in sorted(others.items()):
        if not flags.is_speculative(s) and all(s.get(k) == settings.get(k) for k in keys):
            return h
    return None


def first_difference(a: str, b: str) -> int | None:
    """The first character index at which ``a`` and ``b`` differ (the shorter one's length when one is a prefix of
    the other); None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def speculative_mismatches(rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Mapping[str, Any]]
                           ) -> dict[str, Mismatch]:
    """The correctness gate of speculative decoding (pure): per speculative configuration whose plain partner
    (:func:`plain_partner`) answered the same prompts, its first reply that differs from the partner's, prompt by
    prompt in ``accuracy`` table order. ``rows``: ``accuracy`` table rows (``config_hash``, ``prompt_id``,
    ``reply``: the greedy reply's first 200 characters); ``settings``: config hash -> settings."""
    replies: dict[str, dict[str, str]] = {}
    for r in rows:
        replies.setdefault(r["config_hash"], {})[r["prompt_id"]] = r.get("reply") or ""
    out: dict[str, Mismatch] = {}
    for h, s in settings.items():
        plain = plain_partner(s, settings)
        if plain is None or h not in replies or plain not in replies:
            continue
        for pid, reply in replies[h].items():
            other = replies[plain].get(pid)
            pos = None if other is None else first_difference(reply, other)
            if pos is not None and other is not None:
                lo = max(0, pos - 10)
                out[h] = Mismatch(h, plain, pid, pos, reply[lo:pos + 20], other[lo:pos + 20])
                break
    return out
