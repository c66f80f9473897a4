"""Tokens and text the twin produces.

Tokenizer: the twin has no real vocabulary. A text is split into pieces by the regex ``\\w+|[^\\w\\s]`` (a word, or one
punctuation character); one piece is one token. Chat requests are rendered as ``<|role|>\\n{content}\\n`` per message
plus ``<|assistant|>\\n``, so each message costs its pieces + 2 tokens and the generation prompt 1 more.

Answers (:func:`make_completion`):

* Probe prompts get the greedy answer a real model gives (matched on keywords, case-insensitive, in the last user
  message / prompt), then the model stops (EOS):

  ===========================================  =========
  prompt contains                              answer
  ===========================================  =========
  ``A + B`` / ``A - B`` / ``A * B`` (integers)  the value ("What is 2+2?" -> ``4``)
  ``capital`` and ``france``                   ``Paris``
  ``capital`` and ``germany``                  ``Berlin``
  ``capital`` and ``japan``                    ``Tokyo``
  ``capital`` and ``italy``                    ``Rome``
  ``color`` / ``colour`` and ``sky``            ``Blue``
  ``say`` / ``reply with`` ... ``hello``        ``Hello``
  a prompt of grid's accuracy guard            its answer (grid/accuracy/prompts.yaml: a healthy model knows them)
  ===========================================  =========

  A configuration whose known failure modes garble its output (grid/twin/failures.py, ``nan_output``) answers the
  accuracy prompts with garbage like everything else.

  For a raw continuation (``/generate``, ``/v1/completions``) the answer gets a leading space when the prompt does not
  end in whitespace ("The capital city of France is" -> " Paris").
* Anything else: deterministic pseudo-text drawn from a fixed word list, one word = one token, seeded by the prompt
  (temperature 0) or by the request (temperature > 0, unless ``sampling_seed`` is given). Without ``ignore_eos`` it
  stops at a seeded natural length (32..511 tokens; "length" if ``max_new_tokens`` is smaller).
* With ``ignore_eos`` the text goes on after the answer with pseudo-text until ``max_new_tokens``.
* Garbage (``nan_output`` failure, ``repeat_token`` fault): the same piece repeated (``"!"`` -> ``"!!!!"``), never EOS.
* Reasoning (chat with a ``--reasoning-parser`` on a thinking model): the first :data:`REASONING` pieces are the
  reasoning, then ``</think>`` (one token without text), then the answer.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

_PIECE_RE = re.compile(r"\w+|[^\w\s]")

WORDS = (
    "the of and to in is was for on that with as by at from it an be this are which or his had not but were "
    "have one they their all has been when there who more its can also new first after two time other some into "
    "would these people over system only may such most used many then three between years could about well than "
    "under city state part work during through school world while since where found known later both each made "
    "number group water form early large around called music film history model data light power small design "
    "river north south west east family government public early line field order level point area value energy "
    "network process market program language science theory method result example course season station report "
    "building company service country center result average structure species village island church region").split()
WORD_PIECES = tuple(" " + w for w in WORDS)
NUM_WORDS = len(WORD_PIECES)
TOKEN_ID_BASE = 1000  # token id of WORD_PIECES[i] is TOKEN_ID_BASE + i
REASONING = ("Let", " me", " answer", ".")


def count_tokens(text: str) -> int:
    return len(_PIECE_RE.findall(text))


def chat_prompt_tokens(messages: list[dict]) -> int:
    n = 1
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        n += count_tokens(str(content or "")) + 2
    return n


def last_user_text(messages: list[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            return str(c or "")
    return ""


_ARITH = re.compile(r"(-?\d+)\s*([+\-*x×])\s*(-?\d+)")
_KEYWORD_ANSWERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("capital", "france"), "Paris"),
    (("capital", "germany"), "Berlin"),
    (("capital", "japan"), "Tokyo"),
    (("capital", "italy"), "Rome"),
    (("sky", "color"), "Blue"),
    (("sky", "colour"), "Blue"),
    (("say", "hello"), "Hello"),
    (("reply with", "hello"), "Hello"),
)


def probe_answer(prompt: str) -> str | None:
    """The greedy answer to a known probe prompt, or None."""
    from grid.accuracy import answer_for

    known = answer_for(prompt)
    if known is not None:
        return known
    low = prompt.lower()
    m = _ARITH.search(prompt)
    if m:
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    for keys, ans in _KEYWORD_ANSWERS:
        if all(k in low for k in keys):
            return ans
    return None


def seed_of(*parts: object) -> int:
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


@dataclass
class Completion:
    """The token stream of one request. ``piece(i)``/``token_id(i)`` are O(1); ``eos_after`` is the natural length
    (None: runs to max_new_tokens); ``reasoning`` the number of leading reasoning tokens (the last is ``</think>``)."""

    head: tuple[str, ...]  # reasoning pieces (+ "" for </think>) + answer pieces
    seed: int
    eos_after: int | None
    reasoning: int = 0
    repeat: str | None = None
    eos_id: int = 2
    diverge_at: int | None = None  # from this token on, other tokens than the healthy stream (a planted fault)

    def _diverged(self, i: int) -> bool:
        return self.diverge_at is not None and i >= self.diverge_at

    def piece(self, i: int) -> str:
        if self.repeat is not None:
            return self.repeat
        if self._diverged(i):
            return WORD_PIECES[(self.seed + i * 7919 + 1) % NUM_WORDS]
        if i < len(self.head):
            return self.head[i]
        return WORD_PIECES[(self.seed + i * 7919) % NUM_WORDS]

    def token_id(self, i: int) -> int:
        if self.repeat is not None:
            return 0
        if self._diverged(i):
            return TOKEN_ID_BASE + (self.seed + i * 7919 + 1) % NUM_WORDS
        if i < len(self.head):
            return TOKEN_ID_BASE + NUM_WORDS + (zlib.crc32(self.head[i].encode()) % 50000)
        return TOKEN_ID_BASE + (self.seed + i * 7919) % NUM_WORDS

    def text(self, start: int, end: int) -> str:
        return "".join(self.piece(i) for i in range(start, end))


def make_completion(prompt: str, *, max_new_tokens: int, ignore_eos: bool, temperature: float, rid: str,
                    sampling_seed: int | None = None, raw: bool = True, reasoning: bool = False,
                    garbage: str | None = None, diverge_at: int | None = None) -> Completion:
    """Build the deterministic token stream for one request (see the module docstring); ``diverge_at``: the token
    from which it differs from the healthy stream (a planted fault, grid/twin/faults.py ``speculative_divergence``)."""
    if garbage is not None:
        return Completion(head=(), seed=0, eos_after=None, repeat=garbage)
    if temperature and temperature > 0 and sampling_seed is None:
        seed = seed_of(prompt, rid)
    else:
        seed = seed_of(prompt, sampling_seed or 0)
    ans = probe_answer(prompt)
    head: tuple[str, ...] = ()
    n_reason = 0
    if reasoning:
        head = REASONING + ("",)  # "" = the </think> token
        n_reason = len(head)
    if ans is not None:
        pieces = tuple(_PIECE_RE.findall(ans))
        if raw and pieces and prompt and not prompt[-1].isspace():
            pieces = (" " + pieces[0],) + pieces[1:]
        head += pieces
        natural = len(head)
    else:
        if not raw:  # a chat answer starts a sentence: no leading space
            head += (WORDS[seed % NUM_WORDS].capitalize(),)
        natural = n_reason + 32 + seed % 480
    eos_after = None if ignore_eos else natural
    return Completion(head=head, seed=seed, eos_after=eos_after, reasoning=n_reason, diverge_at=diverge_at)
