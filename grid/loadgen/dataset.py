"""Seeded prompt sets. The same arguments (seed included) give the same prompts for every server configuration.

* ``random_prompts``: random lengths and random token ids (bench_serving ``random-ids``), or random words when
  ``as_text`` (no tokenizer needed; one common English word is about one token, so ``input_len`` is an estimate
  and the server's ``prompt_tokens`` is what the metrics use).
* ``sharegpt_prompts``: a local ShareGPT-format JSON file (nothing is downloaded).
* ``shared_prefix_prompts``: groups of prompts that share a long prefix (bench_serving
  ``generated-shared-prefix``), for prefix-cache behaviour.

``PromptForm`` picks the form per run: token ids where the API takes them and ids can be trusted (inside the
tokenizer's vocabulary, or ``model.vocab_size``), else text (the chat API takes only text messages). With a
tokenizer, text prompts are random in-vocabulary token ids decoded to text and their planned length is the length
of that text re-encoded (exact up to the chat template); without one they are random common words (an estimate).
``DATASET_FORMS`` says which forms each ``load.dataset`` yields, so that a dataset that cannot serve an API is
refused before launch (grid/config/schema.py).

Lengths follow bench_serving's ``--random-range-ratio``: each length is uniform in ``[max(int(L*ratio), 1), L]``
inclusive, so ratio 1.0 gives fixed lengths and ratio 0.0 lengths in ``[1, L]``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grid.loadgen.records import Prompt

# Short, common English words: each is a single token in the usual BPE vocabularies (with its leading space).
_WORDS = (
    "the of and to in is was for on that with as by at from his her an are which this be or had not were but "
    "have one all their they has been who its new more can time year would when after first also two people "
    "other into over only most some made then could many may about them these such should any between city "
    "state world water place house school point group number part home light night hand river music story"
).split()


#: ``load.dataset`` -> the prompt forms it can yield ("token_ids", "text"); an API takes the forms its endpoint lists
#: (``grid.loadgen.client.Endpoint.accepts``).
DATASET_FORMS: dict[str, frozenset[str]] = {
    "random": frozenset({"token_ids", "text"}),
    "random_ids": frozenset({"token_ids"}),
}


def _lengths(rng: np.random.Generator, num: int, length: int, range_ratio: float) -> np.ndarray:
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"range_ratio must be in [0, 1], got {range_ratio}")
    low = max(int(length * range_ratio), 1)
    return rng.integers(low, length + 1, size=num)


def random_prompts(
    num: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    vocab_size: int,
    seed: int,
    as_text: bool = False,
) -> list[Prompt]:
    """``num`` prompts with random input/output lengths and random token ids in ``[0, vocab_size)`` (or words)."""
    if num < 0:
        raise ValueError(f"num must be >= 0, got {num}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    rng = np.random.default_rng(seed)
    in_lens = _lengths(rng, num, input_len, range_ratio)
    out_lens = _lengths(rng, num, output_len, range_ratio)
    prompts = []
    for i in range(num):
        n = int(in_lens[i])
        if as_text:
            words = rng.integers(0, len(_WORDS), size=n)
            prompts.append(Prompt(i, n, int(out_lens[i]), text=" ".join(_WORDS[w] for w in words)))
        else:
            ids = rng.integers(0, vocab_size, size=n)
            prompts.append(Prompt(i, n, int(out_lens[i]), input_ids=tuple(int(t) for t in ids)))
    return prompts


def vocab_ids(tokenizer: Any) -> np.ndarray:
    """The ids a random prompt may use: every id of ``tokenizer`` (``len(tokenizer)``, added tokens included) except
    its special tokens (BOS/EOS/pad/unk/...), as sorted int64."""
    special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []) or [])
    ids = np.arange(len(tokenizer), dtype=np.int64)
    return ids[~np.isin(ids, sorted(special))] if special else ids


def tokenizer_prompts(num: int, input_len: int, output_len: int, range_ratio: float, tokenizer: Any, seed: int,
                      as_text: bool) -> list[Prompt]:
    """``random_prompts`` with ids drawn from ``tokenizer``'s non-special vocabulary (``vocab_ids``). As text: the
    ids decoded, with the re-encoded length (no special tokens) as ``input_len``. Raises ``ValueError`` for a
    tokenizer without ordinary tokens."""
    allowed = vocab_ids(tokenizer)
    if len(allowed) == 0:
        raise ValueError("the tokenizer has no ordinary (non-special) tokens")
    rng = np.random.default_rng(seed)
    in_lens = _lengths(rng, num, input_len, range_ratio)
    out_lens = _lengths(rng, num, output_len, range_ratio)
    prompts = []
    for i in range(num):
        ids = [int(t) for t in allowed[rng.integers(0, len(allowed), size=int(in_lens[i]))]]
        if as_text:
            text = tokenizer.decode(ids)
            n = len(tokenizer.encode(text, add_special_tokens=False)) or int(in_lens[i])
            prompts.append(Prompt(i, n, int(out_lens[i]), text=text))
        else:
            prompts.append(Prompt(i, len(ids), int(out_lens[i]), input_ids=tuple(ids)))
    return prompts


@dataclass(frozen=True)
class PromptForm:
    """How a run's random prompts are built: ``text`` or token ids; from ``tokenizer`` (a transformers tokenizer)
    when there is one, else ids in ``[0, vocab_size)`` or common words. ``source`` names where the tokenizer came
    from (for notes); ``exact_lengths`` is False when prompt lengths are estimates (words without a tokenizer)."""

    vocab_size: int
    text: bool = False
    tokenizer: Any = None
    source: str = ""

    @property
    def exact_lengths(self) -> bool:
        return self.tokenizer is not None or not self.text

    @classmethod
    def choose(cls, dataset: str, api_takes: frozenset[str], vocab_size: int, tokenizer: Any = None,
               source: str = "", ids_trusted: bool = True) -> "PromptForm":
        """The form for ``load.dataset`` on an API that takes ``api_takes``: token ids when both allow them and the
        ids are known to lie in the server's vocabulary (a tokenizer, or ``ids_trusted``: ``vocab_size`` is the
        served model's), else text. Raises ``ValueError`` when the dataset yields no form the API takes (the config
        check refuses that earlier). Pure."""
        forms = DATASET_FORMS[dataset] & api_takes
        if not forms:
            raise ValueError(f"dataset {dataset!r} yields {sorted(DATASET_FORMS[dataset])}, the API takes "
                             f"{sorted(api_takes)}")
        ids = "token_ids" in forms and (tokenizer is not None or ids_trusted or "text" not in forms)
        return cls(vocab_size, text=not ids, tokenizer=tokenizer, source=source)

    def random(self, num: int, input_len: int, output_len: int, range_ratio: float, seed: int) -> list[Prompt]:
        """``num`` seeded prompts (same arguments, same prompts)."""
        if self.tokenizer is not None:
            return tokenizer_prompts(num, input_len, output_len, range_ratio, self.tokenizer, seed, self.text)
        return random_prompts(num, input_len, output_len, range_ratio, self.vocab_size, seed, as_text=self.text)


def _estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: about 4 characters per token (used only for filtering and planned lengths)."""
    return max(1, math.ceil(len(text) / 4))


def sharegpt_prompts(
    path: str | Path,
    num: int,
    seed: int,
    *,
    output_len: int | None = None,
    max_input_len: int | None = None,
    max_output_len: int = 2048,
) -> list[Prompt]:
    """Prompts from a local ShareGPT-format JSON file: a list of ``{"conversations": [{"from", "value"}, ...]}``.

    The first human turn is the prompt; the following assistant turn sets the output length (estimated at 4
    characters per token) unless ``output_len`` is given. Conversations with fewer than two turns, or with prompts
    shorter than 4 estimated tokens (as bench_serving does) or longer than ``max_input_len``, are skipped. The
    remaining ones are shuffled with ``seed`` and the first ``num`` taken; fewer than ``num`` is an error.
    """
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of conversations")
    candidates: list[tuple[str, int]] = []
    for entry in data:
        turns = entry.get("conversations") or entry.get("conversation") or [] if isinstance(entry, dict) else []
        if len(turns) < 2:
            continue
        prompt, reply = str(turns[0].get("value", "")), str(turns[1].get("value", ""))
        in_len = _estimate_tokens(prompt)
        if in_len < 4 or (max_input_len is not None and in_len > max_input_len):
            continue
        out_len = output_len if output_len is not None else min(_estimate_tokens(reply), max_output_len)
        candidates.append((prompt, out_len))
    order = np.random.default_rng(seed).permutation(len(candidates))
    if len(order) < num:
        raise ValueError(f"{path}: only {len(order)} usable conversations, {num} requested")
    return [
        Prompt(i, _estimate_tokens(candidates[j][0]), candidates[j][1], text=candidates[j][0])
        for i, j in enumerate(order[:num])
    ]


def shared_prefix_prompts(
    num_groups: int,
    prompts_per_group: int,
    prefix_len: int,
    suffix_len: int,
    output_len: int,
    vocab_size: int,
    seed: int,
    as_text: bool = False,
) -> list[Prompt]:
    """``num_groups * prompts_per_group`` prompts; prompts of a group share a ``prefix_len``-token prefix and differ
    in a ``suffix_len``-token question. The order is shuffled with ``seed`` so groups interleave."""
    rng = np.random.default_rng(seed)
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    high = len(_WORDS) if as_text else vocab_size
    for _ in range(num_groups):
        prefix = rng.integers(0, high, size=prefix_len)
        for _ in range(prompts_per_group):
            pieces.append((prefix, rng.integers(0, high, size=suffix_len)))
    order = rng.permutation(len(pieces))
    prompts = []
    for i, j in enumerate(order):
        toks = np.concatenate(pieces[j])
        n = prefix_len + suffix_len
        if as_text:
            prompts.append(Prompt(i, n, output_len, text=" ".join(_WORDS[int(w)] for w in toks)))
        else:
            prompts.append(Prompt(i, n, output_len, input_ids=tuple(int(t) for t in toks)))
    return prompts
