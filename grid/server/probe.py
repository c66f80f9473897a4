"""Correctness probe: greedy answers to a few prompts whose answer is known, before any load is spent.

A configuration whose output is empty, repeats one token, is not text, or whose log shows NaN in the logits is
``invalid`` and is never chosen as best (the seed session lost hours to backends that served "!!!!" after a NaN in
decode; docs/sources.md#sglang-log-formats-readiness-phases-failure-modes, NaN row).

The check functions are pure; ``run_probe`` does the HTTP calls (blocking; it runs inside the server actor).
"""

from __future__ import annotations

from collections.abc import Sequence

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from grid.server.net import urlopen
from grid.server.statuses import FAILURE_CLASS, ProbeStatus, TrialErrorClass

# Completion-style prompts (no chat template), as SGLang's own warm-up request: "The capital city of France is".
PROBES: tuple[tuple[str, str], ...] = (
    ("The capital city of France is", "paris"),
    ("Question: What is 2+2? Answer with a number only.\nAnswer:", "4"),
    ("The chemical symbol for gold is", "au"),
)
_NAN = FAILURE_CLASS["nan_output"].pattern()  # its wordings and sources: grid/server/statuses.py
assert _NAN is not None
NAN_LOG: re.Pattern[str] = _NAN


#: Characters of a server's error body kept in a failure message.
ERROR_BODY_CHARS = 500


@dataclass
class ProbeResult:
    ok: bool
    error_class: TrialErrorClass | None = None  # garbage_output | nan_output | empty_output | probe_error
    detail: str = ""
    answers: list[str] = field(default_factory=list)
    skipped: bool = False              # probe.enabled=false: nothing was sent, nothing judged

    @property
    def status(self) -> ProbeStatus:
        """``skipped`` | ``passed`` | ``failed`` (the ``probe_status`` column)."""
        return "skipped" if self.skipped else ("passed" if self.ok else "failed")


def http_error_text(err: urllib.error.HTTPError) -> str:
    """``HTTP 404 Not Found: <the server's error body>``: the status line and the body the server sent with it (its
    ``error.message`` / ``message`` / ``detail`` when the body is JSON, else the text), cut to ``ERROR_BODY_CHARS``."""
    try:
        raw = err.read() or b""
    except (OSError, ValueError):
        raw = b""
    text = raw.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            inner = obj.get("error")
            msg = inner.get("message") if isinstance(inner, dict) else inner
            text = str(msg or obj.get("message") or obj.get("detail") or text)
    except ValueError:
        pass
    head = f"HTTP {err.code} {err.reason}".rstrip()
    return f"{head}: {text[:ERROR_BODY_CHARS]}" if text else head


#: Words and numbers of an answer: runs of letters/digits/underscores, with decimal or thousands parts kept in the
#: number ("4.5", "4,000"), so that "14", "w1234", "4th", "4.5" and "Parisian" are tokens of their own.
_TOKEN = re.compile(r"\w+(?:[.,]\d+)*")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def contains_answer(text: str, expected: str) -> bool:
    """Whether ``expected`` appears in ``text`` as whole words or numbers (case-insensitive). Pure.

    "Paris." and "2+2=4" contain their answers; "w1234", "14", "4.5" and "4th" do not contain "4", nor "Parisian"
    "paris" (a random-weight model answered with words like "w1234", which a substring test took for "4").
    """
    want = _tokens(expected)
    got = _tokens(text)
    return bool(want) and any(got[i:i + len(want)] == want for i in range(len(got) - len(want) + 1))


def judge_answer(text: str, expected: str) -> str | None:
    """Why ``text`` is not a sane answer (an error class), or None when it is. Pure.

    ``empty_output``: only whitespace. ``garbage_output``: a control character or U+FFFD (bytes that are not
    text), or at least 4 pieces (words or punctuation marks) of which at most one in 8 is distinct (one token
    repeated: the "!!!!" of a NaN in decode). ``wrong_answer``: ``expected`` is not among its words and numbers.
    """
    stripped = text.strip()
    if not stripped:
        return "empty_output"
    if any(ord(c) < 32 and c not in "\n\t\r" for c in stripped) or "\ufffd" in stripped:
        return "garbage_output"
    pieces = re.findall(r"\w+|[^\w\s]", stripped)
    if len(pieces) >= 4 and len(set(pieces)) <= max(1, len(pieces) // 8):
        return "garbage_output"
    if not contains_answer(stripped, expected):
        return "wrong_answer"
    return None


def judge(answers: list[str], log_tail: str = "") -> ProbeResult:
    """Verdict over all probe answers plus the server log. Pure."""
    if NAN_LOG.search(log_tail):
        return ProbeResult(False, "nan_output", "server log reports NaN in the logits", answers)
    verdicts = [judge_answer(a, exp) for a, (_, exp) in zip(answers, PROBES)]
    bad = [v for v in verdicts if v is not None]
    for cls in ("garbage_output", "empty_output"):
        if cls in bad:
            i = verdicts.index(cls)
            return ProbeResult(False, cls, f"probe {i}: {answers[i][:80]!r}", answers)
    if len(bad) == len(verdicts):
        return ProbeResult(False, "garbage_output", f"no probe answered correctly: {[a[:40] for a in answers]}",
                           answers)
    return ProbeResult(True, None, "", answers)


def _post(url: str, body: dict, api_key: str | None, timeout_s: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def run_probe(base_url: str, api: str, model: str, api_key: str | None = None, timeout_s: float = 120.0,
              max_tokens: int = 16) -> list[str]:
    """Send every probe greedily (temperature 0) and return the generated texts. Raises ``OSError`` on failure."""
    return ask_greedy(base_url, api, model, [prompt for prompt, _ in PROBES], api_key, timeout_s, max_tokens)


def ask_greedy(base_url: str, api: str, model: str, prompts: Sequence[str], api_key: str | None = None,
               timeout_s: float = 120.0, max_tokens: int = 16) -> list[str]:
    """Send each of ``prompts`` greedily (temperature 0) through ``api`` (``generate``: SGLang's native
    ``/generate``; ``completions``; ``chat``, thinking off and a larger budget so a reasoning model can finish) and
    return the generated texts, in order. Raises ``OSError`` on an HTTP failure."""
    answers = []
    for prompt in prompts:
        if api == "generate":
            out = _post(f"{base_url}/generate", {"text": prompt, "sampling_params": {
                "temperature": 0, "max_new_tokens": max_tokens}}, api_key, timeout_s)
            answers.append(str(out.get("text", "")))
        elif api == "completions":
            out = _post(f"{base_url}/v1/completions", {"model": model, "prompt": prompt, "temperature": 0,
                                                        "max_tokens": max_tokens}, api_key, timeout_s)
            answers.append(str((out.get("choices") or [{}])[0].get("text") or ""))
        else:
            out = _post(f"{base_url}/v1/chat/completions", {
                "model": model, "temperature": 0, "max_tokens": max_tokens * 16,
                "messages": [{"role": "user", "content": prompt}],
                "chat_template_kwargs": {"enable_thinking": False}}, api_key, timeout_s)
            msg = (out.get("choices") or [{}])[0].get("message") or {}
            answers.append(str(msg.get("content") or msg.get("reasoning_content") or ""))
    return answers


def probe(base_url: str, api: str, model: str, api_key: str | None, log_tail_fn, timeout_s: float = 120.0,
          enabled: bool = True) -> ProbeResult:
    """Run the probe and judge it; HTTP failures become ``probe_error`` with the server's error body. With
    ``enabled`` False (``probe.enabled=false``) nothing is sent and the result is ok and ``skipped``."""
    if not enabled:
        return ProbeResult(True, None, "probe skipped (probe.enabled=false)", skipped=True)
    try:
        answers = run_probe(base_url, api, model, api_key, timeout_s)
    except urllib.error.HTTPError as err:
        return ProbeResult(False, "probe_error", f"probe request failed: {http_error_text(err)}")
    except (OSError, urllib.error.URLError, ValueError) as err:
        return ProbeResult(False, "probe_error", f"probe request failed: {err}")
    return judge(answers, log_tail_fn())
