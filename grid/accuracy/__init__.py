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
