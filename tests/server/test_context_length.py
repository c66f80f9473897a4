"""A workload longer than the context the server serves: refused before any load where grid knows the limit (the
served model's /v1/models ``max_model_len``, the model's context length, ``server.context_length``), and a
workload failure (``context_exceeded``, invalid) when the server refuses it anyway, never charged as a broken server.

The external server here answers like vLLM 0.32: ``/v1/models`` with ``max_model_len`` and, for a request whose
input plus ``max_tokens`` exceeds it, HTTP 400 with vLLM's message.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.sweep.test_measure import spec_for

from grid.engines.base import get_engine
from grid.loadgen.dataset import Longest, longest_request
from grid.plan import TrialPlan
from tests.grid_cli import run_grid


def _server(max_model_len: int | None, proxy: bool = False):
    """A vLLM-like server serving ``tiny`` with a 300-token context; ``posts`` counts completion requests.
    ``max_model_len`` is what /v1/models says (None: it says nothing, as some gateways do). ``proxy``: a gateway in
    front of llama.cpp that has already sent 200 OK / text/event-stream and forwards the backend's JSON error as the
    body."""
    posts: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            entry = {"id": "tiny", "object": "model", "owned_by": "vllm", "root": "/models/tiny"}
            if max_model_len is not None:
                entry["max_model_len"] = max_model_len
            routes = {"/v1/models": {"object": "list", "data": [entry]}, "/version": {"version": "0.32.0"},
                      "/health": {}}
            if self.path in routes:
                self._send(200, routes[self.path])
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            posts.append(req)
            n_in = len(str(req.get("prompt", "")).split())  # the text prompts' estimate: about a token a word
            total = n_in + int(req.get("max_tokens") or 16)
            if total > 300 and proxy:
                data = json.dumps({"error": {"code": 400, "message": f"request ({total} tokens) exceeds the "
                                             "available context size (300 tokens), try increasing it",
                                             "type": "exceed_context_size_error", "n_prompt_tokens": n_in,
                                             "n_ctx": 300}}).encode() + b"\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if total > 300:
                self._send(400, {"object": "error", "type": "BadRequestError", "code": 400, "param": None,
                                 "message": f"This model's maximum context length is 300 tokens. However, you "
                                            f"requested {total} tokens ({n_in} in the messages, "
                                            f"{int(req.get('max_tokens') or 16)} in the completion). Please reduce "
                                            "the length of the messages or completion."})
                return
            self._send(200, {"choices": [{"index": 0, "text": " 4", "finish_reason": "length"}],
                             "usage": {"prompt_tokens": n_in, "completion_tokens": 1, "total_tokens": n_in + 1}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, posts


@pytest.fixture
def served_300():
    server, posts = _server(300)
    yield f"http://127.0.0.1:{server.server_address[1]}", posts
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_300():
    server, posts = _server(None)
    yield f"http://127.0.0.1:{server.server_address[1]}", posts
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy_300():
    server, posts = _server(None, proxy=True)
    yield f"http://127.0.0.1:{server.server_address[1]}", posts
    server.shutdown()
    server.server_close()


def _plan(spec, settings=None) -> TrialPlan:
    return TrialPlan(0, settings or {}, spec.load, "x", "0" * 12)


@pytest.mark.unit
def test_the_longest_request_is_known_for_random_workloads_and_traces(tmp_path):
    assert longest_request("random", 256, 64) == Longest(320, "load.input_len (256) + load.output_len (64)")
    assert longest_request("random_ids", 10, 5) == Longest(15, "load.input_len (10) + load.output_len (5)")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 20}\n'
                     '{"timestamp": 5, "input_length": 900, "output_length": 50}\n')
    assert longest_request("trace", 1, 1, str(trace)) == Longest(
        950, "the longest request of load.dataset_path (900 input + 50 output tokens)", "it",
        "the lengths in load.dataset_path")
    assert longest_request("sharegpt", 256, 64, "x.json") is None  # the data decide, and their lengths are estimates


@pytest.mark.unit
def test_a_conversations_last_turn_carries_its_history(tmp_path):
    # generated: 3 turns of 256 + 64; the third turn's prompt is 2 x (256 + 64) + 256, and it asks for 64 more
    longest = longest_request("sessions", 256, 64, None, turns=3)
    assert longest is not None and longest.tokens == 960 and "load.sessions.turns (3)" in longest.what
    assert longest.which == "that turn of every conversation" and "load.sessions.turns" in longest.lower
    conv = tmp_path / "s.jsonl"
    conv.write_text('{"session_id": "a", "input_length": 100, "output_length": 20}\n'
                    '{"session_id": "b", "input_length": 400, "output_length": 10}\n'
                    '{"session_id": "a", "input_length": 300, "output_length": 40, "delay_ms": 5}\n')
    longest = longest_request("sessions", 1, 1, str(conv))
    assert longest is not None and longest.tokens == 100 + 20 + 300 + 40  # a's second turn (b's only one: 410)
    assert longest.what == "the last turn of conversation 'a' of load.dataset_path (2 turns), with its history"
    conv.write_text('{"session_id": "a", "text": "hello there", "output_length": 20}\n')
    assert longest_request("sessions", 1, 1, str(conv)) is None  # a text turn's length is an estimate


@pytest.mark.unit
def test_conversations_that_outgrow_the_context_are_refused_before_launch(tmp_path):
    spec = spec_for(tmp_path, "load.dataset=sessions", "load.sessions.turns=4", "load.input_len=256",
                    "load.output_len=64")
    engine = get_engine(spec)
    assert engine.refuse(_plan(spec, {"context_length": 1280})) is None  # 4 x 320: the last turn just fits
    assert engine.refuse(_plan(spec, {"context_length": 1279})) == (
        "the workload does not fit the context: the last turn of a conversation of load.sessions.turns (4), with its "
        "history: 4 x (load.input_len (256) + load.output_len (64)) = 1280 tokens, above server.context_length "
        "(1279); the server would refuse that turn of every conversation (HTTP 400) before any token. Lower "
        "load.input_len, load.output_len or load.sessions.turns, or raise server.context_length (the model serves "
        f"{spec.model.context_length} tokens)")


@pytest.mark.unit
def test_a_launched_server_refuses_by_the_models_context_or_its_own_setting(tmp_path):
    spec = spec_for(tmp_path, "load.input_len=256", "load.output_len=64")
    engine = get_engine(spec)
    assert engine.context_refusal(_plan(spec)) is None  # GLM-5 serves 202752 tokens
    why = engine.refuse(_plan(spec, {"context_length": 300}))
    assert why == ("the workload does not fit the context: load.input_len (256) + load.output_len (64) = 320 tokens "
                   "per request, above server.context_length (300); the server would refuse every request (HTTP "
                   f"400) before any token. Lower load.input_len or load.output_len, or raise server.context_length "
                   f"(the model serves {spec.model.context_length} tokens)")
    assert engine.refuse(_plan(spec, {"context_length": 320})) is None  # input + output == context: SGLang accepts
    huge = spec_for(tmp_path, f"load.input_len={spec.model.context_length}", "load.output_len=1")
    why = get_engine(huge).refuse(_plan(huge))
    assert why is not None and f"above the model's context length ({spec.model.context_length} tokens" in why


@pytest.mark.unit
def test_an_external_server_refuses_by_its_max_model_len_before_any_request(tmp_path, served_300):
    url, posts = served_300
    spec = spec_for(tmp_path, "engine=openai", f"engine.base_url={url}", "engine.api=completions",
                    "load.input_len=256", "load.output_len=64")
    why = get_engine(spec).refuse(_plan(spec))
    assert why == ("the workload does not fit the context: load.input_len (256) + load.output_len (64) = 320 tokens "
                   f"per request, above the 300-token context the server at {url} serves 'tiny' with (/v1/models "
                   "max_model_len); the server would refuse every request (HTTP 400) before any token. Lower "
                   "load.input_len or load.output_len, or restart the server with a longer context (vLLM "
                   "--max-model-len, SGLang --context-length)")
    fits = spec_for(tmp_path, "engine=openai", f"engine.base_url={url}", "load.input_len=200", "load.output_len=64")
    assert get_engine(fits).refuse(_plan(fits)) is None
    assert posts == []


def _grid_run(tmp_path: Path, url: str) -> subprocess.CompletedProcess:
    """The whole app against the server: it must finish and write its report (exit 0), whatever it found."""
    out = run_grid("engine=openai", f"engine.base_url={url}", "engine.api=completions", "load.input_len=256",
                   "load.output_len=64", "load.concurrency=[2]", "load.min_prompts=4", "probe.enabled=false",
                   "accuracy.enabled=false", "ray.dashboard=false", run_dir=tmp_path, timeout_s=300)
    assert (tmp_path / "report.html").is_file() and (tmp_path / "report.md").is_file()
    return out


def _rows(tmp_path: Path) -> list[dict]:
    return pq.read_table(tmp_path / "parquet" / "load_points").to_pylist()


def test_the_run_refuses_the_workload_before_sending_anything(tmp_path, served_300):
    """The issue's case: /v1/models says max_model_len 300, the load asks for 256 + 64: no request is sent, the
    configuration is recorded refused with the keys and the limit, and the report says why."""
    url, posts = served_300
    out = _grid_run(tmp_path, url)
    assert posts == [], out.stdout[-2000:]
    (row,) = {r["config_hash"]: r for r in _rows(tmp_path)}.values()
    assert (row["trial_status"], row["trial_error_class"]) == ("invalid", "refused")
    assert "load.input_len (256) + load.output_len (64) = 320 tokens" in row["trial_error_message"]
    assert "max_model_len" in row["trial_error_message"]
    assert "load.input_len (256) + load.output_len (64)" in out.stdout


def test_a_refusal_the_server_makes_anyway_is_the_workloads_not_a_broken_server(tmp_path, silent_300):
    """A server that does not say its context length refuses every request with HTTP 400: the requests are
    context_exceeded, the trial invalid/context_exceeded (not failed, not server_broken), with the server's words."""
    url, posts = silent_300
    out = _grid_run(tmp_path, url)
    assert posts, out.stdout[-2000:]
    rows = _rows(tmp_path)
    assert {(r["trial_status"], r["trial_error_class"]) for r in rows} == {("invalid", "context_exceeded")}, rows
    assert all(r["failed_context_exceeded"] == r["failed"] > 0 for r in rows if r["status"] == "failed")
    assert "maximum context length is 300 tokens" in rows[0]["trial_error_message"]
    requests = pq.read_table(tmp_path / "parquet" / "requests").to_pylist()
    assert {(r["status"], r["error_class"], r["http_status"]) for r in requests} == {("failed", "context_exceeded",
                                                                                      400)}


def test_an_error_body_in_a_200_stream_is_the_requests_cause_not_a_dead_server(tmp_path, proxy_300):
    """A gateway that already sent 200 / text/event-stream forwards llama.cpp's context error as the body: every
    request fails context_exceeded with the server's words, and the trial is the workload's (invalid), not
    server_broken (the check request after a failed point is not sent for a workload failure)."""
    url, posts = proxy_300
    out = _grid_run(tmp_path, url)
    assert posts, out.stdout[-2000:]
    rows = _rows(tmp_path)
    assert {(r["trial_status"], r["trial_error_class"]) for r in rows} == {("invalid", "context_exceeded")}, rows
    requests = pq.read_table(tmp_path / "parquet" / "requests").to_pylist()
    assert {(r["error_class"], r["http_status"]) for r in requests} == {("context_exceeded", 200)}
    assert "exceeds the available context size (300 tokens)" in requests[0]["error_message"]
