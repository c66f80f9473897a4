"""The two data types the load generator works on: a ``Prompt`` to send and the ``RequestRecord`` it produces.

A record is the *raw timeline* of one request, on one monotonic clock (``time.perf_counter_ns``): when it was
scheduled, when it was sent, when each streamed event arrived and how many generated tokens it carried, when the
stream ended. Every metric (``grid.metrics.request``) is derived from these fields, so any convention can be
recomputed later from the stored rows. ``*_unix_ns`` fields are wall-clock stamps for correlation with server logs
only; never subtract them from ``*_perf_ns`` values.

Status vocabulary: ``status`` is ``ok`` or ``failed``; a failed record carries ``error_class``, one of
``ERROR_CLASSES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Every error class a failed request can carry (``RequestRecord.error_class``), declared once with its meaning: the
#: storage vocabulary (docs/schema.md), the ``requests.error_class`` column's description and the load point's
#: ``failed_<class>`` counts come from it; grid/server/statuses.py ``RequestErrorClass`` lists the same names in
#: this order for the type checker (tests/storage/test_vocabulary_types.py).
REQUEST_ERROR_CLASSES: dict[str, str] = {
    "http_error": "the server answered with an HTTP status other than 200 (`http_status`)",
    "conn_error": "connecting failed, or the connection broke (reset) mid-response",
    "read_timeout": "no bytes for `load.read_timeout_s`",
    "stall_timeout": "no new token for `load.stall_timeout_s` (counted from the send until the first token)",
    "parse_error": "an event (or the body) was not valid JSON of the expected shape",
    "decode_error": "the body was not valid UTF-8 (e.g. a multi-byte character cut off at the end of the stream)",
    "server_error": "the server reported an error inside the stream, or finished with reason abort",
    "context_exceeded": "the server refused the request as longer than its context length (input plus requested "
                        "output), in an HTTP error or inside the stream: the workload's fault, not the server's. "
                        "Wordings (grid/loadgen/records.py `CONTEXT_EXCEEDED`): SGLang "
                        "srt/managers/tokenizer_manager.py, vLLM entrypoints/openai/serving_engine.py and "
                        "v1/engine/processor.py, llama.cpp's server (exceed_context_size_error), the OpenAI API "
                        "(context_length_exceeded)",
    "truncated_stream": "the stream ended with neither a `finish_reason` nor the [DONE] marker",
    "empty_output": "the response carried no generated token",
    "client_error": "an unexpected exception in grid's client (a bug in grid)",
}
ERROR_CLASSES: tuple[str, ...] = tuple(REQUEST_ERROR_CLASSES)

#: How servers refuse a request whose input plus requested output exceeds the context length they serve, as
#: (pattern, example, source). Such a request fails ``context_exceeded`` (HTTP 400, or an error inside a 200
#: stream): the workload does not fit the server, whatever its configuration does.
CONTEXT_EXCEEDED: tuple[tuple[str, str, str], ...] = (
    (r"is longer than the model's context length",
     "The input (6009 tokens) is longer than the model's context length (4096 tokens).",
     "SGLang srt/managers/tokenizer_manager.py _validate_one_request (0.5.9-0.5.23)"),
    (r"Requested token count exceeds the model's maximum context length",
     "Requested token count exceeds the model's maximum context length of 300 tokens. You requested a total of 320 "
     "tokens: 256 tokens from the input messages and 64 tokens for the completion.",
     "SGLang srt/managers/tokenizer_manager.py _validate_one_request (0.5.9-0.5.23)"),
    (r"maximum context length is \d+ tokens",
     "This model's maximum context length is 300 tokens. However, you requested 320 tokens (256 in the messages, 64 "
     "in the completion). Please reduce the length of the messages or completion.",
     "vLLM vllm/entrypoints/openai/serving_engine.py _validate_input; the OpenAI API's own wording"),
    (r"longer than the maximum model length",
     "The decoder prompt (length 6009) is longer than the maximum model length of 4096. Make sure that "
     "`max_model_len` is no smaller than the number of text tokens.",
     "vLLM V1 vllm/v1/engine/processor.py _validate_model_input"),
    (r"exceed_context_size_error|exceeds the available context size",
     '{"error":{"code":400,"message":"request (6009 tokens) exceeds the available context size (4096 tokens), try '
     'increasing it","type":"exceed_context_size_error","n_prompt_tokens":6009,"n_ctx":4096}}',
     "llama.cpp tools/server (ERROR_TYPE_EXCEED_CONTEXT_SIZE)"),
    (r"context_length_exceeded",
     '{"error":{"code":"context_length_exceeded","message":"This model\'s maximum context length is 8192 tokens"}}',
     "the OpenAI API's error code for a request over the context window"),
)
_CONTEXT_EXCEEDED_RE = re.compile("|".join(f"(?:{p})" for p, _, _ in CONTEXT_EXCEEDED))


def exceeds_context(text: str) -> bool:
    """Whether a server's error text (an HTTP error body, or an error inside a stream) says the request does not fit
    its context length (:data:`CONTEXT_EXCEEDED`)."""
    return _CONTEXT_EXCEEDED_RE.search(text) is not None


#: The error message of a steady point's tail request that the runner cancelled when the measured requests had
#: ended (``grid.loadgen.runner``): not a failure; its tokens that arrived inside the window count.
TAIL_CANCELLED = "tail request cancelled: the measured requests had ended"

#: Where ``RequestRecord.output_tokens`` came from.
OUTPUT_TOKEN_SOURCES: tuple[str, ...] = ("usage", "stream_count")


@dataclass(frozen=True)
class Prompt:
    """One request to send.

    Exactly one of ``input_ids`` (token ids) and ``text`` is set. ``input_len`` is the planned prompt length in
    tokens (exact for token ids, an estimate for text; the server's count, when reported, wins in the metrics).
    ``output_len`` is the requested maximum number of generated tokens (``max_new_tokens`` / ``max_tokens``).

    A turn of a multi-turn session (``grid.loadgen.dataset`` kind ``sessions``) has ``session`` (its conversation),
    ``turn`` (0-based) and ``think_s`` (modelled seconds the user waits after the previous answer before sending it);
    ``text`` is then only the new user message, and the runner sends it with ``history``, the earlier (user message,
    answer) pairs of the conversation.
    """

    index: int
    input_len: int
    output_len: int
    input_ids: tuple[int, ...] | None = None
    text: str | None = None
    session: int | None = None
    turn: int = 0
    think_s: float = 0.0
    history: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if (self.input_ids is None) == (self.text is None):
            raise ValueError("Prompt needs exactly one of input_ids and text")
        if self.output_len < 1:
            raise ValueError(f"Prompt.output_len must be >= 1, got {self.output_len}")
        if self.history and self.text is None:
            raise ValueError("a Prompt with history needs text (sessions are sent as text)")

    @property
    def full_text(self) -> str | None:
        """The text a completion API gets: every earlier turn's message and answer, then this message, each on its
        own line (``text`` alone without history)."""
        if not self.history or self.text is None:
            return self.text
        return "".join(f"{user}\n{answer}\n" for user, answer in self.history) + self.text

    def messages(self) -> list[dict[str, str]]:
        """The chat API's messages: the history as user/assistant pairs, then this message. Raises ``ValueError``
        for a token-id prompt."""
        if self.text is None:
            raise ValueError("the chat api needs text prompts (grid.loadgen.dataset.PromptForm builds them for it)")
        out = []
        for user, answer in self.history:
            out += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        return out + [{"role": "user", "content": self.text}]


@dataclass
class RequestRecord:
    """Raw timeline and outcome of one request. Filled by the runner; read by the metric functions.

    Chunk lists hold one entry per streamed ``data:`` event other than ``[DONE]`` (role-only, empty, finish and
    usage-only events included, with 0 tokens), in arrival order. For a non-streamed request the whole body is one
    chunk.
    """

    request_index: int
    prompt_index: int
    api: str
    stream: bool
    max_tokens: int
    planned_input_len: int
    warmup: bool = False
    session: int | None = None  # sessions: the conversation (Prompt.session) and the turn within it
    turn: int = 0
    # --- timeline (perf_counter_ns; unix only for correlation) ---
    scheduled_perf_ns: int | None = None  # when it was due (open loop: t0 + offset; closed loop: worker ready)
    scheduled_offset_ns: int | None = None  # scheduled_perf_ns - window start (real ns)
    slot_wait_ns: int | None = None  # open loop with max_concurrency: real ns spent waiting for a client slot
    send_perf_ns: int | None = None
    send_unix_ns: int | None = None
    end_perf_ns: int | None = None  # the stream ended: [DONE] read, EOF, or the error was raised
    chunk_perf_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    first_token_perf_ns: int | None = None  # first chunk with >= 1 generated token (reasoning counts)
    first_content_perf_ns: int | None = None  # first chunk with >= 1 non-reasoning (content) token
    last_token_perf_ns: int | None = None
    done_marker: bool = False  # the [DONE] event was received
    # --- outcome ---
    http_status: int | None = None
    status: str = "failed"
    error_class: str | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    #: prompt tokens the server reused from its prefix cache (SGLang ``meta_info.cached_tokens``; OpenAI
    #: ``usage.prompt_tokens_details.cached_tokens``); None where the server does not say
    cached_tokens: int | None = None
    input_tokens: int | None = None
    input_tokens_source: str | None = None  # "usage" | "planned"
    output_tokens: int | None = None
    output_tokens_source: str | None = None  # "usage" | "stream_count"
    content_null: bool = False  # tokens were generated but no content (final-answer) text: reasoning only
    text: str = ""
    reasoning_text: str = ""
    # --- transient: raw bytes as read, with their arrival stamps; consumed by the parser ---
    raw_reads: list[tuple[int, bytes]] = field(default_factory=list, repr=False)

    def fail(self, error_class: str, message: str | None = None) -> None:
        """Mark failed with the first error seen (a later error never overwrites an earlier one)."""
        if self.error_class is None:
            self.error_class = error_class
            self.error_message = None if message is None else message[:2000]
        self.status = "failed"
