"""Seeded prompt sets. The same arguments (seed included) give the same prompts for every server configuration.

* ``random_prompts``: random lengths and random token ids (bench_serving ``random-ids``), or random words when
  ``as_text`` (no tokenizer needed; one common English word is about one token, so ``input_len`` is an estimate
  and the server's ``prompt_tokens`` is what the metrics use).
* ``sharegpt_prompts``: a local ShareGPT-format JSON file (nothing is downloaded).
* ``trace_requests``: a local JSONL arrival trace (one request per line: ``timestamp`` in ms, ``input_length`` and
  ``output_length`` in tokens: the format of the Mooncake traces, kvcache-ai/Mooncake ``FAST25-release/traces``,
  which SGLang's bench_serving replays as ``--dataset-name mooncake``); the timestamps drive the arrivals of a
  ``trace`` load point, the lengths size random prompts.
* ``session_file`` / ``generated_sessions`` / ``session_prompts``: multi-turn conversations (a JSONL file, one turn
  per line: :data:`SESSION_KEYS`; or generated), each turn a prompt with its ``session``, ``turn`` and think time; the
  runner sends a turn after the previous answer, with the history (grid/loadgen/runner.py).
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

Datasets a run can name (``load.dataset``) are registered by kind in :data:`DATASETS`; :func:`check_dataset` validates
a file at the entry point and :func:`build_dataset` makes the prompts (and a trace's arrival offsets).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
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
    "sharegpt": frozenset({"text"}),
    "trace": frozenset({"token_ids", "text"}),
    "sessions": frozenset({"text"}),  # each turn carries the history as text (the answers are text)
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
               source: str = "", ids_trusted: bool = True) -> PromptForm:
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


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file, the entry and the key."""


def _file_key(path: str | Path) -> tuple[str, float, int]:
    p = Path(path)
    try:
        st = p.stat()
    except OSError as err:
        raise DatasetError(f"{path}: cannot be read ({err.strerror or err})") from None
    return str(p.resolve()), st.st_mtime, st.st_size


@functools.lru_cache(maxsize=4)
def _sharegpt_conversations(key: tuple[str, float, int]) -> tuple[tuple[str, str], ...]:
    """(first human turn, following turn) of every conversation with at least two turns; cached per file version."""
    path = key[0]
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as err:
        raise DatasetError(f"{path}: not a JSON file ({err})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise DatasetError(f"{path}: entry {i} is not an object")
        turns = entry.get("conversations", entry.get("conversation"))
        if not isinstance(turns, list):
            raise DatasetError(f"{path}: entry {i} has no 'conversations' list")
        if len(turns) < 2:
            continue
        for j, turn in enumerate(turns[:2]):
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise DatasetError(f"{path}: entry {i}, conversations[{j}] has no string 'value'")
        out.append((turns[0]["value"], turns[1]["value"]))
    return tuple(out)


def _sharegpt_candidates(path: str | Path, output_len: int | None, max_input_len: int | None,
                         max_output_len: int) -> list[tuple[str, int]]:
    candidates: list[tuple[str, int]] = []
    for prompt, reply in _sharegpt_conversations(_file_key(path)):
        in_len = _estimate_tokens(prompt)
        if in_len < 4 or (max_input_len is not None and in_len > max_input_len):
            continue
        out_len = output_len if output_len is not None else min(_estimate_tokens(reply), max_output_len)
        candidates.append((prompt, max(out_len, 1)))
    return candidates


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
    remaining ones are shuffled with ``seed`` and the first ``num`` taken; fewer than ``num`` is an error
    (``DatasetError``, a ``ValueError``, also for a file that is not in this format).
    """
    candidates = _sharegpt_candidates(path, output_len, max_input_len, max_output_len)
    order = np.random.default_rng(seed).permutation(len(candidates))
    if len(order) < num:
        raise DatasetError(f"{path}: only {len(order)} usable conversations, {num} requested")
    return [
        Prompt(i, _estimate_tokens(candidates[j][0]), candidates[j][1], text=candidates[j][0])
        for i, j in enumerate(order[:num])
    ]


@dataclass(frozen=True)
class TraceRequest:
    """One line of an arrival trace: when it arrived (ms from the trace's first request) and its lengths (tokens)."""

    offset_ms: float
    input_len: int
    output_len: int


#: Keys of one trace line (the Mooncake trace format); other keys (e.g. ``hash_ids``) are ignored.
TRACE_KEYS = ("timestamp", "input_length", "output_length")


def _jsonl_objects(path: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file. Raises ``DatasetError`` naming the line that
    is not JSON or not an object."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError as err:
                raise DatasetError(f"{path}: line {lineno} is not JSON ({err})") from None
            if not isinstance(obj, dict):
                raise DatasetError(f"{path}: line {lineno} is not a JSON object")
            yield lineno, obj


@functools.lru_cache(maxsize=4)
def _trace(key: tuple[str, float, int]) -> tuple[TraceRequest, ...]:
    path = key[0]
    out: list[TraceRequest] = []
    first: float | None = None
    prev = -math.inf
    for lineno, obj in _jsonl_objects(path):
        for k in TRACE_KEYS:
            v = obj.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise DatasetError(f"{path}: line {lineno}: '{k}' must be a number, got {v!r} "
                                   f"(each line needs {', '.join(TRACE_KEYS)})")
        ts = float(obj["timestamp"])
        if ts < prev:
            raise DatasetError(f"{path}: line {lineno}: 'timestamp' {obj['timestamp']} is earlier than the line "
                               "before (a trace lists requests in arrival order)")
        for k in ("input_length", "output_length"):
            if obj[k] < 1 or obj[k] != int(obj[k]):
                raise DatasetError(f"{path}: line {lineno}: '{k}' must be a whole number >= 1, got {obj[k]}")
        prev = ts
        first = ts if first is None else first
        out.append(TraceRequest(ts - first, int(obj["input_length"]), int(obj["output_length"])))
    if not out:
        raise DatasetError(f"{path}: the trace has no requests")
    return tuple(out)


def trace_requests(path: str | Path) -> tuple[TraceRequest, ...]:
    """The requests of a JSONL arrival trace, in order, offsets from its first request. Raises ``DatasetError``
    naming the line and key of the first bad line (keys: :data:`TRACE_KEYS`; timestamps in ms, non-decreasing)."""
    return _trace(_file_key(path))


def trace_prompts(path: str | Path, num: int, vocab_size: int, seed: int, as_text: bool = False) -> list[Prompt]:
    """Random prompts with the trace's lengths, request i from line i (the first ``num``; fewer if it is shorter)."""
    reqs = trace_requests(path)[:num]
    rng = np.random.default_rng(seed)
    prompts = []
    for i, r in enumerate(reqs):
        if as_text:
            words = rng.integers(0, len(_WORDS), size=r.input_len)
            prompts.append(Prompt(i, r.input_len, r.output_len, text=" ".join(_WORDS[w] for w in words)))
        else:
            ids = rng.integers(0, vocab_size, size=r.input_len)
            prompts.append(Prompt(i, r.input_len, r.output_len, input_ids=tuple(int(t) for t in ids)))
    return prompts


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


# -- multi-turn sessions -------------------------------------------------------------------------------------------

#: Keys of one line of a sessions file: ``session_id`` (any JSON string or number; a conversation's lines need not be
#: adjacent, their order is the turn order), the new user message as ``text`` or as ``input_length`` (tokens: random
#: words), ``output_length`` (tokens), and optionally ``delay_ms``: the user's think time before sending this turn,
#: counted from the previous answer (AIPerf's multi-turn ``delay``). Other keys are ignored.
SESSION_KEYS = ("session_id", "text | input_length", "output_length", "delay_ms (optional)")


@dataclass(frozen=True)
class SessionTurn:
    """One turn of a recorded conversation: the new user message (``text``, or ``input_len`` random words), the
    answer's length and the think time before it (ms)."""

    session: str
    input_len: int
    output_len: int
    text: str | None = None
    delay_ms: float = 0.0


@functools.lru_cache(maxsize=4)
def _session_file(key: tuple[str, float, int]) -> tuple[tuple[SessionTurn, ...], ...]:
    path = key[0]
    by: dict[str, list[SessionTurn]] = {}
    for lineno, obj in _jsonl_objects(path):
        sid = obj.get("session_id")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)):
            raise DatasetError(f"{path}: line {lineno}: 'session_id' must be a string or an integer, got {sid!r} "
                               f"(each line needs {', '.join(SESSION_KEYS)})")
        text = obj.get("text")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise DatasetError(f"{path}: line {lineno}: 'text' must be a non-empty string, got {text!r}")
        lengths = {}
        for k in ("input_length", "output_length"):
            v = obj.get(k)
            if k == "input_length" and v is None and text is not None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 1 or v != int(v):
                raise DatasetError(f"{path}: line {lineno}: '{k}' must be a whole number >= 1, got {v!r} "
                                   f"(each line needs {', '.join(SESSION_KEYS)})")
            lengths[k] = int(v)
        delay = obj.get("delay_ms", 0)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay < math.inf:
            raise DatasetError(f"{path}: line {lineno}: 'delay_ms' must be a number >= 0, got {delay!r}")
        n_in = lengths.get("input_length") or _estimate_tokens(text or "")
        by.setdefault(str(sid), []).append(SessionTurn(str(sid), n_in, lengths["output_length"], text,
                                                       float(delay)))
    if not by:
        raise DatasetError(f"{path}: the file has no turns (each line needs {', '.join(SESSION_KEYS)})")
    return tuple(tuple(turns) for turns in by.values())


def session_file(path: str | Path) -> tuple[tuple[SessionTurn, ...], ...]:
    """The conversations of a JSONL sessions file (keys: :data:`SESSION_KEYS`), each its turns in file order, in the
    order each first appears. Raises ``DatasetError`` naming the line and key of the first bad line."""
    return _session_file(_file_key(path))


def session_prompts(conversations: Sequence[Sequence[SessionTurn]], num: int, seed: int) -> list[Prompt]:
    """The turns of ``conversations`` as prompts (``session``, ``turn``, ``think_s`` set; ``text`` only the new
    message, random words where the turn gives a length), whole conversations in order until ``num`` turns are
    covered. Pure: same arguments, same prompts."""
    rng = np.random.default_rng(seed)
    prompts: list[Prompt] = []
    for s, turns in enumerate(conversations):
        if len(prompts) >= num:
            break
        for t, turn in enumerate(turns):
            text = turn.text
            if text is None:
                text = " ".join(_WORDS[w] for w in rng.integers(0, len(_WORDS), size=turn.input_len))
            prompts.append(Prompt(len(prompts), turn.input_len, turn.output_len, text=text, session=s, turn=t,
                                  think_s=turn.delay_ms / 1000.0))
    return prompts


def generated_sessions(num_sessions: int, turns: int, input_len: int, output_len: int, think_time_s: float
                       ) -> tuple[tuple[SessionTurn, ...], ...]:
    """``num_sessions`` conversations of ``turns`` turns: each new message ``input_len`` tokens, each answer
    ``output_len``, ``think_time_s`` between an answer and the next message. Raises ``ValueError`` for a count below
    1 or a negative think time."""
    if min(num_sessions, turns, input_len, output_len) < 1:
        raise ValueError("num_sessions, turns, input_len and output_len must be >= 1")
    if not 0 <= think_time_s < math.inf:
        raise ValueError(f"think_time_s must be >= 0, got {think_time_s}")
    return tuple(tuple(SessionTurn(str(s), input_len, output_len, None, think_time_s * 1000.0) for _ in range(turns))
                 for s in range(num_sessions))


# -- datasets by kind --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DatasetArgs:
    """What every dataset kind is built from (``LoadSpec`` fields, the model's vocabulary, the point's seed)."""

    num: int  # prompts wanted (the runner cycles through fewer)
    input_len: int
    output_len: int
    range_ratio: float
    vocab_size: int
    seed: int
    path: str | None = None
    as_text: bool = False
    form: PromptForm | None = None  # the run's prompt form (tokenizer, text or ids); random kinds build through it
    turns: int = 1  # sessions: turns per generated conversation
    think_time_s: float = 0.0  # sessions: think time between an answer and the next message (modelled s)


@dataclass(frozen=True)
class Dataset:
    prompts: list[Prompt]
    offsets_s: tuple[float, ...] | None = None  # recorded arrivals (modelled s from the first), trace kinds only


@dataclass(frozen=True)
class Longest:
    """The longest request of a workload, known before it runs: ``tokens`` (input plus requested output), ``what``
    sets it (the keys and their values), which requests reach it (``which``; None: every request asks for exactly
    ``tokens``) and what to lower (``lower``)."""

    tokens: int
    what: str
    which: str | None = None
    lower: str = "load.input_len or load.output_len"


@dataclass(frozen=True)
class DatasetKind:
    """A registered dataset: ``build`` makes the prompts; ``check(path)`` validates a file (raises DatasetError)."""

    name: str
    build: Callable[[DatasetArgs], Dataset]
    needs_path: bool = False
    check: Callable[[str], object] | None = None
    arrivals: bool = False  # the dataset carries arrival times (trace load points replay them)
    description: str = ""
    #: ``(input_len, output_len, path, turns) -> Longest``: the most tokens one request asks for (input plus
    #: requested output), known before any request; None where the data decide it (ShareGPT's lengths are estimates).
    longest: Callable[[int, int, str | None, int], Longest | None] | None = None
    sessions: bool = False  # multi-turn conversations: turns sent one after another's answer, with the history


DATASETS: dict[str, DatasetKind] = {}


def register_dataset(kind: DatasetKind) -> DatasetKind:
    DATASETS[kind.name] = kind
    return kind


def _build_sharegpt(a: DatasetArgs) -> Dataset:
    assert a.path is not None
    usable = len(_sharegpt_candidates(a.path, None, None, 2048))
    return Dataset(sharegpt_prompts(a.path, min(a.num, usable), a.seed))


def _check_sharegpt(path: str) -> None:
    if not _sharegpt_candidates(path, None, None, 2048):
        raise DatasetError(f"{path}: no usable conversation (two turns, a prompt of >= 4 estimated tokens)")


def _build_trace(a: DatasetArgs) -> Dataset:
    assert a.path is not None
    reqs = trace_requests(a.path)
    as_text = a.form.text if a.form is not None else a.as_text
    return Dataset(trace_prompts(a.path, a.num, a.vocab_size, a.seed, as_text),
                   tuple(r.offset_ms / 1000.0 for r in reqs))


def _build_random(a: DatasetArgs) -> Dataset:
    if a.form is not None:
        return Dataset(a.form.random(a.num, a.input_len, a.output_len, a.range_ratio, a.seed))
    return Dataset(random_prompts(a.num, a.input_len, a.output_len, a.range_ratio, a.vocab_size, a.seed,
                                  as_text=a.as_text))


def _longest_random(input_len: int, output_len: int, path: str | None, turns: int) -> Longest:
    return Longest(input_len + output_len, f"load.input_len ({input_len}) + load.output_len ({output_len})")


def _longest_trace(input_len: int, output_len: int, path: str | None, turns: int) -> Longest | None:
    reqs = trace_requests(path) if path else ()
    if not reqs:
        return None
    r = max(reqs, key=lambda q: q.input_len + q.output_len)
    return Longest(r.input_len + r.output_len,
                   f"the longest request of load.dataset_path ({r.input_len} input + {r.output_len} output tokens)",
                   "it", "the lengths in load.dataset_path")


def _longest_session(input_len: int, output_len: int, path: str | None, turns: int) -> Longest | None:
    """A conversation's last turn carries every earlier message and answer: its prompt is the sum of all but its own
    answer, so it asks for the sum of every message and answer (answers run to ``output_len``: grid sends
    ``ignore_eos``). Chat templates add a few tokens more, so this is a floor on what the server counts. None for a
    file with text turns (their lengths are estimates)."""
    if path is None:
        return Longest(turns * (input_len + output_len),
                       f"the last turn of a conversation of load.sessions.turns ({turns}), with its history: {turns} "
                       f"x (load.input_len ({input_len}) + load.output_len ({output_len}))",
                       "that turn of every conversation", "load.input_len, load.output_len or load.sessions.turns")
    conversations = session_file(path)
    if any(t.text is not None for c in conversations for t in c):
        return None
    tokens, longest = max(((sum(t.input_len + t.output_len for t in c), c) for c in conversations),
                          key=lambda pair: pair[0])
    return Longest(tokens,
                   f"the last turn of conversation {longest[0].session!r} of load.dataset_path ({len(longest)} "
                   "turns), with its history", "it", "the conversations in load.dataset_path")


register_dataset(DatasetKind(
    "random", _build_random,
    description="random token ids of load.input_len/output_len and load.range_ratio, or random text where the API "
                "or the server needs text (chat; an external server whose tokenizer grid cannot load)",
    longest=_longest_random))
register_dataset(DatasetKind(
    "random_ids", _build_random,
    description="random token ids only (exact input lengths; cannot serve engine.api=chat)", longest=_longest_random))
register_dataset(DatasetKind(
    "sharegpt", _build_sharegpt, needs_path=True, check=_check_sharegpt,
    description="a local ShareGPT-format JSON file (text prompts; output lengths from the replies)"))
register_dataset(DatasetKind(
    "trace", _build_trace, needs_path=True, check=trace_requests, arrivals=True,
    description="a local JSONL arrival trace (timestamp ms, input_length, output_length): trace load points replay "
                "its arrivals", longest=_longest_trace))


def _build_sessions(a: DatasetArgs) -> Dataset:
    if a.path:
        conversations = session_file(a.path)
    else:
        conversations = generated_sessions(max(1, -(-a.num // a.turns)), a.turns, a.input_len, a.output_len,
                                           a.think_time_s)
    return Dataset(session_prompts(conversations, a.num, a.seed))


register_dataset(DatasetKind(
    "sessions", _build_sessions, check=session_file, sessions=True, longest=_longest_session,
    description="multi-turn conversations: load.dataset_path a JSONL file (one turn per line: session_id, text or "
                "input_length, output_length, delay_ms), or without one generated from load.sessions (turns, "
                "think_time_s) with messages of load.input_len and answers of load.output_len; each turn is sent "
                "after the previous answer arrived, with the whole history"))


def longest_request(dataset: str, input_len: int, output_len: int, path: str | None = None, turns: int = 1
                    ) -> Longest | None:
    """The most tokens one request of the workload asks for (input plus requested output), with the keys that set
    it, e.g. ``Longest(320, "load.input_len (256) + load.output_len (64)")``; ``turns``: turns per generated
    conversation (sessions). None for a dataset whose lengths only its data decide, or an unknown kind. Raises
    ``DatasetError`` for a trace or sessions file that cannot be read."""
    kind = DATASETS.get(dataset)
    if kind is None or kind.longest is None:
        return None
    return kind.longest(input_len, output_len, path, turns)


def get_dataset(name: str) -> DatasetKind:
    """The registered kind ``name``. Raises ``KeyError`` naming the known kinds."""
    try:
        return DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}") from None


def check_dataset(name: str, path: str | None) -> None:
    """Validate ``load.dataset`` / ``load.dataset_path`` before anything launches. Raises ``DatasetError`` (a
    ``ValueError``) naming the key: an unknown kind, a missing or unreadable path, a file not in the kind's format."""
    if name not in DATASETS:
        raise DatasetError(f"load.dataset: unknown kind {name!r}; allowed: {sorted(DATASETS)}")
    kind = DATASETS[name]
    if kind.needs_path and not path:
        raise DatasetError(f"load.dataset_path: required with load.dataset={name} ({kind.description})")
    if path and kind.check is None:
        raise DatasetError(f"load.dataset_path: not used by load.dataset={name}; set load.dataset to one of "
                           f"{sorted(k for k, v in DATASETS.items() if v.check is not None)} or drop it")
    if path:
        if not os.path.isfile(path):
            raise DatasetError(f"load.dataset_path: {path} is not a file")
        if kind.check is not None:
            try:
                kind.check(path)
            except DatasetError as err:
                raise DatasetError(f"load.dataset_path: {err}") from None


def build_dataset(name: str, args: DatasetArgs) -> Dataset:
    """The prompts (and recorded arrivals) of dataset kind ``name``. Raises ``KeyError`` for an unknown kind and
    ``DatasetError`` for a bad file."""
    return get_dataset(name).build(args)
