"""Endpoint kinds: how to build a request body and how to turn a response into the raw record.

Each kind is a small class registered by name (``ENDPOINTS``; ``get_endpoint(name)``):

* ``generate``: SGLang native ``POST /generate`` (``input_ids`` or ``text``). The streamed ``text`` is cumulative
  (a delta is also accepted); tokens per event are the increase of the running ``meta_info.completion_tokens``.
* ``completions``: ``POST /v1/completions``; ``choices[0].text`` is a delta.
* ``chat``: ``POST /v1/chat/completions``; ``delta.content`` and ``delta.reasoning_content`` (or ``reasoning``)
  are deltas; reasoning tokens count as generated tokens (TTFT) but not as content (TTFO).

Token counts per event on the OpenAI endpoints: when the first event with a non-empty delta carries ``usage``
(``stream_options.continuous_usage_stats``), every event's tokens are the increase of ``usage.completion_tokens``;
otherwise an event with a non-empty text/reasoning/tool-call delta counts as 1 token and any other event as 0 (a
usage total on the finish event is then only the final report). A usage-only
event (``choices: []``) never carries tokens. The request's ``output_tokens`` is the last server-reported count
(``usage.completion_tokens`` / ``meta_info.completion_tokens``, source ``usage``) when it is >= 1, else the sum of
the per-event counts (source ``stream_count``); never the requested maximum.

Parsing is separated from reading: the runner stamps each read with ``perf_counter_ns`` and keeps the raw bytes
(``RequestRecord.raw_reads``); ``StreamParser`` consumes them later (at the end of the request, or earlier from the
stall watchdog). An event's arrival time is the stamp of the read that completed its first ``data:`` line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from grid.loadgen import vclock
from grid.loadgen.records import Prompt, RequestRecord, exceeds_context

_json_decode = json.JSONDecoder().decode


@dataclass(slots=True)
class EventInfo:
    """What one parsed event (or a non-streamed body) contributes."""

    tokens: int = 0
    content_tokens: bool = False  # the event carries >= 1 non-reasoning token
    text: str = ""
    reasoning: str = ""
    usage_prompt: int | None = None
    usage_completion: int | None = None
    cached_tokens: int | None = None  # prompt tokens the server found in its prefix cache
    finish_reason: str | None = None
    error: str | None = None  # a server-reported error (error class server_error)
    content_null: bool = False  # non-streamed: content was null/empty


_SURROGATE = re.compile("[\ud800-\udfff]")


def join_text(parts: list[str]) -> str:
    """The text of a stream's events, joined. A character outside the BMP that a server split into two UTF-16
    surrogate halves across events (JSON ``"\\ud83d"`` then ``"\\ude00"``, as JavaScript servers and gateways send)
    is rejoined; a lone half becomes U+FFFD, so no text a server sends can make the record unstorable (Arrow and
    UTF-8 refuse surrogates)."""
    text = "".join(parts)
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class ParseError(ValueError):
    """An event or body had invalid JSON or an unexpected shape."""


def _server_error(obj: dict) -> str | None:
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    if obj.get("object") == "error":
        return str(obj.get("message", obj))
    return None


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"token count is not a number: {value!r}")
    return int(value)


def _loads_event(data: bytes) -> Any:
    """One event's JSON. orjson first (about 4x faster than the standard library on a typical 150-byte event); what
    it refuses (NaN/Infinity literals, lone surrogates) goes to the standard library, so the accepted inputs and the
    values are those of ``json.loads``, except that orjson reads an integer beyond 64 bits as a float. Raises
    ``ValueError`` for invalid JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if data.startswith(b"{"):  # json.loads(bytes) would detect UTF-8 and decode the same way
        return _json_decode(data.decode("utf-8", "surrogatepass"))
    return json.loads(data)


def dumps_body(body: dict) -> bytes:
    """A request body as compact JSON bytes (orjson; the standard library for what orjson refuses, e.g. integers
    beyond 64 bits). Raises ``TypeError``/``ValueError`` for a body that is not JSON-serialisable."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body, allow_nan=False).encode()


class Endpoint:
    """Base endpoint kind. Subclasses set ``name`` and ``path`` and implement the three hooks."""

    name: ClassVar[str]
    path: ClassVar[str]
    #: prompt forms the API takes: "token_ids" and/or "text" (checked against the dataset before launch)
    accepts: ClassVar[frozenset[str]] = frozenset({"token_ids", "text"})

    def __init__(self, model: str = "default", ignore_eos: bool = True, extra_body: dict | None = None) -> None:
        self.model = model
        self.ignore_eos = ignore_eos
        self.extra_body = dict(extra_body or {})

    def payload(self, prompt: Prompt, stream: bool) -> dict:
        raise NotImplementedError

    def new_state(self) -> dict:
        return {}

    def parse_event(self, obj: dict, state: dict) -> EventInfo:
        raise NotImplementedError

    def parse_body(self, obj: dict) -> EventInfo:
        raise NotImplementedError


ENDPOINTS: dict[str, type[Endpoint]] = {}


def register_endpoint(cls: type[Endpoint]) -> type[Endpoint]:
    ENDPOINTS[cls.name] = cls
    return cls


def get_endpoint(name: str, **kwargs: Any) -> Endpoint:
    try:
        return ENDPOINTS[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown api {name!r}; known: {sorted(ENDPOINTS)}") from None


@register_endpoint
class GenerateEndpoint(Endpoint):
    name = "generate"
    path = "/generate"

    def payload(self, prompt: Prompt, stream: bool) -> dict:
        body: dict[str, Any] = {
            "sampling_params": {"max_new_tokens": prompt.output_len, "temperature": 0.0, "ignore_eos": self.ignore_eos},
            "stream": stream,
        }
        if prompt.input_ids is not None:
            body["input_ids"] = list(prompt.input_ids)
        else:
            body["text"] = prompt.full_text
        body.update(self.extra_body)
        return body

    def new_state(self) -> dict:
        return {"text": "", "completion": 0}

    def _common(self, obj: dict) -> tuple[EventInfo, dict]:
        info = EventInfo()
        info.error = _server_error(obj)
        meta = obj.get("meta_info") or {}
        if not isinstance(meta, dict):
            raise ParseError("meta_info is not an object")
        finish = meta.get("finish_reason")
        if isinstance(finish, dict):
            info.finish_reason = str(finish.get("type"))
            if finish.get("type") == "abort" and info.error is None:
                info.error = f"finish_reason abort: {finish.get('message')}"
        elif finish is not None:
            info.finish_reason = str(finish)
        info.usage_prompt = _int_or_none(meta.get("prompt_tokens"))
        info.usage_completion = _int_or_none(meta.get("completion_tokens"))
        info.cached_tokens = _int_or_none(meta.get("cached_tokens"))
        return info, meta

    def parse_event(self, obj: dict, state: dict) -> EventInfo:
        info, _ = self._common(obj)
        text = obj.get("text", "")
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise ParseError("text is not a string")
        prev = state["text"]
        delta = text[len(prev):] if text.startswith(prev) else text  # cumulative (default) or incremental output
        state["text"] = text if text.startswith(prev) else prev + text
        info.text = delta
        if info.usage_completion is not None:
            info.tokens = max(0, info.usage_completion - state["completion"])
            state["completion"] = max(state["completion"], info.usage_completion)
        else:
            info.tokens = 1 if delta else 0
        info.content_tokens = info.tokens > 0
        return info

    def parse_body(self, obj: dict) -> EventInfo:
        info, _ = self._common(obj)
        text = obj.get("text") or ""
        info.text = str(text)
        info.tokens = info.usage_completion or 0
        info.content_tokens = info.tokens > 0
        return info


def _usage(obj: dict, info: EventInfo) -> None:
    usage = obj.get("usage")
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise ParseError("usage is not an object")
    info.usage_prompt = _int_or_none(usage.get("prompt_tokens"))
    info.usage_completion = _int_or_none(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):  # SGLang with --enable-cache-report, vLLM, the OpenAI API
        info.cached_tokens = _int_or_none(details.get("cached_tokens"))


class _OpenAIEndpoint(Endpoint):
    def new_state(self) -> dict:
        return {"completion": 0, "continuous": None}

    def _choice(self, obj: dict) -> dict | None:
        choices = obj.get("choices")
        if choices is None:
            return None
        if not isinstance(choices, list):
            raise ParseError("choices is not a list")
        if not choices:
            return None
        if not isinstance(choices[0], dict):
            raise ParseError("choices[0] is not an object")
        return choices[0]

    def _delta(self, choice: dict) -> tuple[str, str, bool]:
        """(content delta, reasoning delta, other non-empty delta such as tool calls)."""
        raise NotImplementedError

    def parse_event(self, obj: dict, state: dict) -> EventInfo:
        info = EventInfo()
        info.error = _server_error(obj)
        _usage(obj, info)
        choice = self._choice(obj)
        if choice is None:  # usage-only (or empty) event: never carries tokens
            return info
        if choice.get("finish_reason") is not None:
            info.finish_reason = str(choice["finish_reason"])
            if info.finish_reason == "abort" and info.error is None:
                info.error = "finish_reason abort"
        content, reasoning, other = self._delta(choice)
        info.text, info.reasoning = content, reasoning
        nonempty = bool(content or reasoning or other)
        if nonempty and state["continuous"] is None:
            # continuous usage (usage on every event) is decided by the first event with a delta
            state["continuous"] = info.usage_completion is not None
        if state["continuous"] and info.usage_completion is not None:  # exact tokens per event
            info.tokens = max(0, info.usage_completion - state["completion"])
            state["completion"] = max(state["completion"], info.usage_completion)
        else:  # a usage total on a late event (e.g. the finish event) is a report, not this event's tokens
            info.tokens = 1 if nonempty else 0
        info.content_tokens = info.tokens > 0 and bool(content or other)
        return info

    def parse_body(self, obj: dict) -> EventInfo:
        info = EventInfo()
        info.error = _server_error(obj)
        _usage(obj, info)
        choice = self._choice(obj)
        if choice is not None:
            if choice.get("finish_reason") is not None:
                info.finish_reason = str(choice["finish_reason"])
            content, reasoning, other = self._full(choice)
            info.text, info.reasoning = content, reasoning
            info.content_null = not (content or other)
        info.tokens = info.usage_completion or 0
        info.content_tokens = info.tokens > 0 and not info.content_null
        return info

    def _full(self, choice: dict) -> tuple[str, str, bool]:
        raise NotImplementedError


def _str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ParseError(f"{what} is not a string")
    return value


@register_endpoint
class CompletionsEndpoint(_OpenAIEndpoint):
    name = "completions"
    path = "/v1/completions"

    def payload(self, prompt: Prompt, stream: bool) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt.input_ids) if prompt.input_ids is not None else prompt.full_text,
            "max_tokens": prompt.output_len,
            "temperature": 0.0,
            "ignore_eos": self.ignore_eos,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    def _delta(self, choice: dict) -> tuple[str, str, bool]:
        return _str(choice.get("text"), "choices[0].text"), "", False

    _full = _delta


@register_endpoint
class ChatEndpoint(_OpenAIEndpoint):
    name = "chat"
    path = "/v1/chat/completions"
    accepts = frozenset({"text"})

    def payload(self, prompt: Prompt, stream: bool) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": prompt.messages(),
            "max_completion_tokens": prompt.output_len,
            "temperature": 0.0,
            "ignore_eos": self.ignore_eos,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    @staticmethod
    def _parts(msg: Any, what: str) -> tuple[str, str, bool]:
        if msg is None:
            return "", "", False
        if not isinstance(msg, dict):
            raise ParseError(f"{what} is not an object")
        content = _str(msg.get("content"), f"{what}.content")
        reasoning = _str(msg.get("reasoning_content"), f"{what}.reasoning_content") or _str(
            msg.get("reasoning"), f"{what}.reasoning"
        )
        return content, reasoning, bool(msg.get("tool_calls"))

    def _delta(self, choice: dict) -> tuple[str, str, bool]:
        return self._parts(choice.get("delta"), "delta")

    def _full(self, choice: dict) -> tuple[str, str, bool]:
        return self._parts(choice.get("message"), "message")


class StreamParser:
    """Incremental SSE parser over ``(perf_ns, bytes)`` reads; fills the parsed fields of a ``RequestRecord``.

    ``consume()`` parses reads not yet seen (callable any number of times); ``finish()`` flushes the last
    partial event and settles status, token counts and error class. After the first parse error or server error,
    later events are ignored.
    """

    def __init__(self, endpoint: Endpoint, record: RequestRecord, virtual: bool = False) -> None:
        self.endpoint = endpoint
        self.rec = record
        # virtual clock (grid/loadgen/vclock.py): an event's time is the twin's "grid_vt" (modelled s, as ns), not
        # its read stamp; an event without one keeps the last event's time
        self.virtual = virtual
        self._vt_ns: int | None = None
        self.state = endpoint.new_state()
        self._consumed = 0
        self._buf = b""
        self._cr_end = False  # the last read ended with CR: an LF starting the next read belongs to it
        self._event_ts: int | None = None
        self._event_data: list[bytes] = []
        self._stop = False
        self._server_error: str | None = None
        self._parse_error: str | None = None
        self._decode_error: str | None = None
        self._body_parts: list[bytes] = []
        self._text: list[str] = []
        self._reasoning: list[str] = []

    # -- streaming --
    def consume(self) -> None:
        rec = self.rec
        reads = rec.raw_reads
        start, end = self._consumed, len(reads)
        if start >= end:
            return
        self._consumed = end
        if not rec.stream:
            self._body_parts.extend(data for _, data in reads[start:end])
            return
        buf = self._buf
        cr_end = self._cr_end
        for k in range(start, end):
            ts, data = reads[k]
            if cr_end:  # the last read ended with CR: an LF opening this one is the rest of that CRLF
                cr_end = False
                if data.startswith(b"\n"):
                    data = data[1:]
                    if not data:
                        continue
            if buf:
                data = buf + data
            elif not data:
                continue
            # LF, CRLF and a lone CR all end a line (SSE); bytes.splitlines splits on exactly these three
            lines = data.splitlines()
            last = data[-1]
            if last == 10:  # LF: the read ends at a line end
                buf = b""
            elif last == 13:  # CR: a line end, unless an LF follows in the next read (then it is one CRLF)
                buf = b""
                cr_end = True
            else:
                buf = lines.pop()  # the incomplete line after the last line end
            for line in lines:
                if not line:
                    if self._event_ts is not None:
                        self._dispatch()
                elif line.startswith(b"data:"):
                    payload = line[5:]
                    if payload.startswith(b" "):
                        payload = payload[1:]
                    if self._event_ts is None:
                        self._event_ts = ts
                    self._event_data.append(payload)
                elif line.startswith((b"error:", b"{")) and self._event_ts is None:
                    self._error_line(line)
                # SSE comments (":" keep-alive) and other fields (event:, id:, retry:) are ignored
        self._buf = buf
        self._cr_end = cr_end

    def _error_line(self, line: bytes) -> None:
        """A line of a 200 event stream that is not an event but the server's (or a proxy's) error: an SSE field named
        ``error:``, or a bare JSON object with an ``error`` (a proxy that had sent ``200 OK`` forwarding the
        backend's error body). The request fails with the server's own message (``server_error``)."""
        payload = line[6:].strip() if line.startswith(b"error:") else line
        try:
            obj = _loads_event(payload)
        except ValueError:
            obj = None
        message = _server_error(obj) if isinstance(obj, dict) else None
        if message is None and line.startswith(b"error:"):
            message = payload.decode("utf-8", "replace") or "error field without a message"
        if message is not None and not self._stop:
            self._server_error = message
            self._stop = True

    def _dispatch(self) -> None:
        if self._event_ts is None:
            return
        ts, parts = self._event_ts, self._event_data
        data = parts[0] if len(parts) == 1 else b"\n".join(parts)
        self._event_ts, self._event_data = None, []
        if self._stop:
            return
        if data.strip() == b"[DONE]":
            self.rec.done_marker = True
            self._stop = True
            return
        try:
            obj = _loads_event(data)
            if not isinstance(obj, dict):
                raise ParseError("event is not a JSON object")
            info = self.endpoint.parse_event(obj, self.state)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # JSONDecodeError is a ValueError
            self._bad_data(exc, data, "data")
            self._stop = True
            return
        if self.virtual:
            vt = obj.get(vclock.FIELD)
            if isinstance(vt, (int, float)):
                self._vt_ns = vclock.to_ns(float(vt))
            if self._vt_ns is not None:
                ts = self._vt_ns
        self._apply(ts, info)

    def _apply(self, ts: int, info: EventInfo) -> None:
        rec = self.rec
        rec.chunk_perf_ns.append(ts)
        rec.chunk_tokens.append(info.tokens)
        if info.tokens > 0:
            if rec.first_token_perf_ns is None:
                rec.first_token_perf_ns = ts
            if info.content_tokens and rec.first_content_perf_ns is None:
                rec.first_content_perf_ns = ts
            rec.last_token_perf_ns = ts
        if info.text:
            self._text.append(info.text)
        if info.reasoning:
            self._reasoning.append(info.reasoning)
        if info.usage_prompt is not None:
            rec.usage_prompt_tokens = info.usage_prompt
        if info.usage_completion is not None:
            rec.usage_completion_tokens = info.usage_completion
        if info.cached_tokens is not None:
            rec.cached_tokens = info.cached_tokens
        if info.finish_reason is not None:
            rec.finish_reason = info.finish_reason
        if info.error is not None:
            self._server_error = info.error
            self._stop = True

    # -- end --
    def finish(self) -> RequestRecord:
        """Parse what is left and settle the outcome. Transport errors already on the record take precedence."""
        self.consume()
        rec = self.rec
        if rec.stream:
            if self._buf:  # a last line without a newline ends with the stream: parse it as if one followed
                last_ts = rec.raw_reads[-1][0] if rec.raw_reads else (rec.end_perf_ns or 0)
                rec.raw_reads.append((last_ts, b"\n"))
                self.consume()
            self._dispatch()
        elif rec.error_class is None and rec.http_status == 200:
            self._finish_body()
        rec.text = join_text(self._text)
        rec.reasoning_text = join_text(self._reasoning)
        stream_count = sum(rec.chunk_tokens)
        if rec.usage_completion_tokens is not None and rec.usage_completion_tokens >= 1:
            rec.output_tokens, rec.output_tokens_source = rec.usage_completion_tokens, "usage"
        elif stream_count >= 1 and rec.stream:
            rec.output_tokens, rec.output_tokens_source = stream_count, "stream_count"
        elif not rec.stream and (self._text or self._reasoning):
            rec.output_tokens, rec.output_tokens_source = None, None  # a body without usage: count unknown
        else:
            source = "usage" if rec.usage_completion_tokens == 0 else "stream_count"
            rec.output_tokens, rec.output_tokens_source = 0, source
        if rec.usage_prompt_tokens is not None:
            rec.input_tokens, rec.input_tokens_source = rec.usage_prompt_tokens, "usage"
        else:
            rec.input_tokens, rec.input_tokens_source = rec.planned_input_len, "planned"
        if rec.output_tokens and rec.first_content_perf_ns is None and not rec.text:
            rec.content_null = True
        # outcome, in order of precedence
        if rec.error_class is not None:
            rec.status = "failed"
        elif self._decode_error is not None:
            rec.fail("decode_error", self._decode_error)
        elif self._parse_error is not None:
            rec.fail("parse_error", self._parse_error)
        elif self._server_error is not None:
            rec.fail("context_exceeded" if exceeds_context(self._server_error) else "server_error", self._server_error)
        elif rec.stream and not rec.done_marker and rec.finish_reason is None:
            # a clean end after an event with a finish_reason is complete without [DONE] (several OpenAI-compatible
            # servers omit it; SGLang's bench_serving and vLLM's benchmark client count such requests): only a
            # stream with neither is cut short. done_marker records which it was.
            rec.fail("truncated_stream", "the stream ended with neither a finish_reason nor data: [DONE]")
        elif rec.stream and (rec.first_token_perf_ns is None or not rec.output_tokens):
            rec.fail("empty_output", "the stream carried no generated token")
        elif not rec.stream and rec.output_tokens == 0:
            rec.fail("empty_output", "the response carried no generated token")
        else:
            rec.status = "ok"
        rec.raw_reads = []
        return rec

    def _finish_body(self) -> None:
        rec = self.rec
        data = b"".join(self._body_parts)
        ts = rec.raw_reads[-1][0] if rec.raw_reads else (rec.end_perf_ns or 0)
        try:
            obj = json.loads(data)
            if not isinstance(obj, dict):
                raise ParseError("body is not a JSON object")
            info = self.endpoint.parse_body(obj)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._bad_data(exc, data, "body")
            return
        self._apply(ts, info)

    def _bad_data(self, exc: Exception, data: bytes, what: str) -> None:
        """Record why ``data`` (an event's data or the body) could not be read: bytes that are not UTF-8 are a
        ``decode_error`` (e.g. a multi-byte character cut off at the end of the stream), anything else a
        ``parse_error``. Runs only on the error path, so valid events pay nothing for the distinction."""
        try:
            data.decode("utf-8", "surrogatepass")  # what _loads_event accepts
        except UnicodeDecodeError as bad:
            cut = bad.reason == "unexpected end of data"
            self._decode_error = (f"{'a multi-byte UTF-8 character is cut off at the end' if cut else 'invalid UTF-8'}"
                                  f" (byte {bad.start} of {len(data)}: {data[bad.start:bad.end + 3]!r}); "
                                  f"{what}={data[:200]!r}")
            return
        self._parse_error = f"{type(exc).__name__}: {exc}; {what}={data[:200]!r}"
