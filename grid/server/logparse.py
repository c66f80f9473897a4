"""Parse SGLang scheduler log lines ("Prefill batch", "Decode batch") of every 0.5.x format into dicts (pure).

Formats (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes):
``Decode batch. #running-req: 1, ...,`` (<=0.5.2, period and a
trailing ", "), ``Decode batch, #running-req: ...`` (0.5.5+), optional ``[N]`` iteration marker, hybrid-pool keys.
Keys are normalised: ``#running-req`` -> ``running_req``, ``gen throughput (token/s)`` -> ``gen_throughput_tok_per_s``.
"""

from __future__ import annotations

import re

from grid.server.statuses import FAILURE_CLASS, FAILURE_CLASSES, TrialErrorClass

_LINE = re.compile(r"^\[(?P<ts>[0-9-]+ [0-9:.]+)(?P<prefix>[^\]]*)\]\s+(?P<kind>Prefill|Decode) batch"
                   r"(?: \[\d+\])?[.,]\s*(?P<body>.*)$")
_RENAME = {
    "gen throughput (token/s)": "gen_throughput_tok_per_s",
    "input throughput (token/s)": "input_throughput_tok_per_s",
}


def _key(raw: str) -> str:
    raw = raw.strip()
    if raw in _RENAME:
        return _RENAME[raw]
    return raw.lstrip("#").replace("-", "_").replace(" ", "_")


def _value(raw: str):
    raw = raw.strip()
    if raw in ("True", "False"):
        return raw == "True"
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw


def parse_batch_line(line: str) -> dict | None:
    """``{"kind": "decode"|"prefill", "ts": str, "running_req": 32, ...}`` or None for other lines."""
    m = _LINE.match(line.strip())
    if not m:
        return None
    out: dict = {"kind": m["kind"].lower(), "ts": m["ts"], "prefix": m["prefix"].strip()}
    for part in m["body"].strip().rstrip(",").split(", "):
        if ":" not in part:
            continue
        k, v = part.rsplit(":", 1)
        out[_key(k)] = _value(v)
    return out


def decode_stats(text: str) -> list[dict]:
    """Every parsed "Decode batch" line in ``text``, in order."""
    rows = [parse_batch_line(line) for line in text.splitlines()]
    return [r for r in rows if r is not None and r["kind"] == "decode"]


def peak_gen_throughput(text: str) -> tuple[float | None, int | None]:
    """Highest logged gen throughput (tok/s) and the running-request count on that line; (None, None) if none."""
    best: tuple[float | None, int | None] = (None, None)
    for row in decode_stats(text):
        g = row.get("gen_throughput_tok_per_s")
        if isinstance(g, (int, float)) and (best[0] is None or g > best[0]):
            best = (float(g), row.get("running_req"))
    return best


_ERR_LINE = re.compile(r"(\w*Error\b|error:|Exception\b|\bNaN\b|Unsupported|out of memory|refuse)")
_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def error_headline(log_tail: str | None) -> str:
    """The most telling line of a server log tail: the last one that names an error, without its ``[time ...]``
    prefix, at most 160 characters ("" when none does). The ``server_args=...`` dump is never chosen."""
    lines = [_PREFIX.sub("", ln.strip()) for ln in (log_tail or "").splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line.startswith("server_args=") and _ERR_LINE.search(line):
            return line[:160]
    return ""


# -- runtime errors in the server's log --------------------------------------------------------------------------------
#: The classes a server's log decides during load (``FailureClass.classifier == "runtime_log"``), in the order a line
#: is tried against them (grid/server/statuses.py FAILURE_CLASSES holds their wordings and sources).
RUNTIME_CLASSES: tuple[TrialErrorClass, ...] = tuple(c.name for c in FAILURE_CLASSES if c.classifier == "runtime_log")
#: (error class, pattern, source) of every wording of :data:`RUNTIME_CLASSES`. Matched against the log the server
#: writes while a load point runs (and the tail of a failed trial); the earliest matching line names the class, since
#: the first error is the cause and later ones (an NCCL error on the other ranks after one rank's OOM, the SIGQUIT
#: line) are its consequences.
RUNTIME_ERRORS: tuple[tuple[TrialErrorClass, re.Pattern[str], str], ...] = tuple(
    (name, w.regex, w.source) for name in RUNTIME_CLASSES for w in FAILURE_CLASS[name].wordings)
#: The runtime classes after which the configuration's output is wrong rather than its server broken: their trial
#: status is ``invalid``.
OUTPUT_ERROR_CLASSES = frozenset(name for name in RUNTIME_CLASSES if FAILURE_CLASS[name].status == "invalid")


def runtime_error(text: str | None) -> tuple[TrialErrorClass, str] | None:
    """``(error class, line)`` of the earliest line of ``text`` that matches a :data:`RUNTIME_ERRORS` pattern (the
    line without its ``[time ...]`` prefix, at most 200 characters), or None. The ``server_args=...`` dump is never
    matched (it names flags such as ``enable_nan_detection``). Pure."""
    for raw in (text or "").splitlines():
        line = _PREFIX.sub("", raw.strip())
        if not line or line.startswith("server_args="):
            continue
        for cls, pattern, _ in RUNTIME_ERRORS:
            if pattern.search(line):
                return cls, line[:200]
    return None


# grid's own polls of a server: readiness (/health_generate, /health, /ready), /server_info after launch, /metrics and
# the twin's /grid/telemetry during load points. Uvicorn logs each as an access line ('INFO:     127.0.0.1:PORT -
# "GET /metrics HTTP/1.1" 200 OK'; SGLang adds its '[time]' prefix), which would crowd the server's own lines out of a
# stored log tail.
POLL_PATHS = ("/metrics", "/health", "/health_generate", "/ready", "/server_info", "/get_server_info", "/model_info",
              "/get_model_info", "/v1/models", "/grid/telemetry")
_POLL_LINE = re.compile(r'^(?:\[[^\]]*\]\s*)?INFO:\s+\S+ - "GET (?:' + "|".join(re.escape(p) for p in POLL_PATHS)
                        + r')(?:\?\S*)? HTTP/[0-9.]+" \d{3}')


#: Where a start that failed on a taken port names the port: uvicorn's bind error (SGLang's HTTP server) and
#: torch.distributed's rendezvous store (SGLang's internal NCCL / distributed-init port, which SGLang derives from
#: its HTTP port), as (pattern with the port as group 1, what that port is). Sources: uvicorn's bind error
#: (sgl-project/sglang#9799); torch/csrc/distributed/c10d/socket.cpp "The server socket has failed to listen on any
#: local network address. port: N, useIpv6: 0, code: -98, name: EADDRINUSE".
_PORT_NAMED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"bind on address \('[^']*', (\d+)\)"), "the HTTP port"),
    (re.compile(r"DistNetworkError.*?\bport: (\d+)\b.*?EADDRINUSE"), "torch.distributed's port"),
)


def taken_port(log_text: str | None) -> tuple[int, str] | None:
    """The port a start that failed with ``port_in_use`` says was taken, and what it is (``"the HTTP port"``,
    ``"torch.distributed's port"``), from the log's last such line; None when the log names none. Pure."""
    found: tuple[int, int, str] | None = None
    for pattern, what in _PORT_NAMED:
        for m in pattern.finditer(log_text or ""):
            if found is None or m.start() > found[0]:
                found = (m.start(), int(m.group(1)), what)
    return None if found is None else (found[1], found[2])


def strip_poll_lines(text: str) -> str:
    """``text`` without the uvicorn access-log lines of GET requests to :data:`POLL_PATHS` (grid's own polls). Pure."""
    return "".join(line for line in text.splitlines(keepends=True) if not _POLL_LINE.match(line))


#: SGLang's start-up phases as its log shows them, in the order a start goes through them: (pattern, phase). The
#: wordings are SGLang's own (model_runner.py, cuda_graph_runner.py, http_server.py; the twin writes the same lines,
#: grid/twin/logs.py; docs/sources.md#sglang-log-formats-readiness-phases-failure-modes).
STARTUP_PHASES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), name) for p, name in (
    (r"Load weight begin", "loading the weights"),
    (r"Load weight end", "weights loaded, allocating the KV cache"),
    (r"KV Cache is allocated|Memory pool end", "KV cache allocated"),
    # `Capture cuda graph begin` to 0.5.13, `Capture target decode CUDA graph begin` (or `target verify`, `draft ...`
    # with speculative decoding) from 0.5.14 (grid/releases/features.py target_decode_cuda_graph_lines)
    (r"Capture (?:(?:target|draft) (?:decode|verify) )?(?i:cuda graph) begin|Capture cuda graph bs",
     "capturing CUDA graphs"),
    (r"Capture (?:(?:target|draft) (?:decode|verify) )?(?i:cuda graph) end",
     "CUDA graphs captured, starting the HTTP server"),
    (r"Uvicorn running on|Application startup complete", "HTTP server up, warming up"),
    (r"The server is fired up and ready to roll", "ready"),
))


def startup_phase(log_text: str | None) -> tuple[str, str] | None:
    """(phase, the log line that shows it) of the last start-up phase ``log_text`` reaches (:data:`STARTUP_PHASES`),
    or None when it shows none."""
    found = None
    for line in (log_text or "").splitlines():
        for pattern, name in STARTUP_PHASES:
            if pattern.search(line):
                found = (name, _PREFIX.sub("", line).strip()[:160])
    return found
