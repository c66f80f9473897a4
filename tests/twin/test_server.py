"""The twin as a process: readiness phases, HTTP API, logs, metrics, auth, faults, SIGTERM
(docs/sources.md#sglang-http-api-and-bench_serving,
docs/sources.md#sglang-log-formats-readiness-phases-failure-modes)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grid.config.specs import HardwareSpec, ModelSpec
from grid.server.logparse import parse_batch_line
from grid.twin import logs

from ._specs import hardware

pytest.importorskip("grid.twin.perf")
pytest.importorskip("grid.twin.scheduler")

LLAMA_8B = ModelSpec(name="llama3_1_8b", architecture="LlamaForCausalLM", model_type="llama", num_layers=32,
                     hidden_size=4096, num_attention_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                     vocab_size=128256, context_length=131072, total_params_b=8.03, active_params_b=8.03)
H100_X1 = HardwareSpec(name="h100_x1", gpu="NVIDIA H100 80GB HBM3", gpu_count=1, sm_version=90, memory_gb=80,
                       memory_bandwidth_gbps=3350, tflops={"bf16": 989, "fp8": 1979}, tdp_w=700,
                       interconnect="nvlink", allreduce_latency_us=7, allreduce_bus_gbps=370)
KEY = "sk-test"
AUTH = {"Authorization": f"Bearer {KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TwinProc:
    def __init__(self, tmp: Path, args: list[str], *, scale: float, version: str = "0.5.9",
                 faults: list | None = None, hw=None, env: dict | None = None) -> None:
        mdir = tmp / "model"
        mdir.mkdir(exist_ok=True)
        (mdir / "config.json").write_text(json.dumps(LLAMA_8B.to_hf_config()))
        self.port = free_port()
        self.log_path = tmp / f"twin-{self.port}.log"
        extra = env or {}
        env = dict(os.environ, GRID_TWIN_HARDWARE=(hw or H100_X1).model_dump_json(), GRID_TWIN_TIME_SCALE=str(scale),
                   GRID_TWIN_VERSION=version)
        if faults:
            env["GRID_TWIN_FAULTS"] = json.dumps(faults)
        env.update(extra)
        self.fh = open(self.log_path, "w")  # noqa: SIM115 (closed when the twin is stopped)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grid.twin", "--model-path", str(mdir), "--port", str(self.port), *args],
            stdout=self.fh, stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        return self.log_path.read_text()

    def status(self, path: str = "/health_generate") -> int | str:
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", path)
            return c.getresponse().status
        except ConnectionRefusedError:
            return "refused"

    def wait_ready(self, timeout: float = 15.0) -> list:
        """Poll /health_generate; return the de-duplicated sequence of states seen."""
        seen: list = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.status()
            if not seen or seen[-1] != st:
                seen.append(st)
            if st == 200 or self.proc.poll() is not None:
                return seen
            time.sleep(0.01)
        return seen

    def request(self, method: str, path: str, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Content-Type": "application/json", **(headers or {})}
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
        return r.status, r.read()

    def sse(self, path: str, body: dict, headers=None) -> list:
        """Events of an SSE stream: parsed JSON objects, and the string "[DONE]"."""
        status, raw = self.request("POST", path, body, headers)
        assert status == 200, raw
        out = []
        for line in raw.decode().split("\n\n"):
            if line.startswith("data: "):
                data = line[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
        return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.fh.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    t = TwinProc(tmp_path_factory.mktemp("twin"),
                 ["--enable-metrics", "--api-key", KEY, "--decode-log-interval", "10", "--served-model-name", "llama"],
                 scale=5.0)
    t.seen = t.wait_ready()
    yield t
    t.stop()


def test_readiness_sequence(twin):
    assert twin.seen[0] == "refused" and twin.seen[-1] == 200, twin.seen
    assert 503 in twin.seen and twin.seen.index(503) < twin.seen.index(200), twin.seen
    text = twin.log()
    order = ["server_args=ServerArgs(", "Load weight begin.", "Load weight end.", "KV Cache is allocated. #tokens: ",
             "Memory pool end.", "Capture cuda graph begin.", "Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24",
             "Capture cuda graph end.", "max_total_num_tokens=", "INFO:     Started server process",
             "INFO:     Uvicorn running on http://127.0.0.1:", "Prefill batch, #new-seq: 1", logs.READY_LINE]
    pos = [text.index(s) for s in order]
    assert pos == sorted(pos)
    cap = logs.parse_capacity_line(text)
    assert cap["max_total_num_tokens"] > 100_000 and cap["context_len"] == 131072
    first = text.splitlines()[0]
    ts, ranks, msg = logs.parse_line(first)
    assert ts is not None and ranks == "" and msg.startswith("server_args=ServerArgs(model_path=")


def test_auth(twin):
    assert twin.request("GET", "/v1/models")[0] == 401
    status, body = twin.request("POST", "/generate", {"text": "hi"})
    assert status == 401 and json.loads(body) == {"error": "Unauthorized"}
    assert twin.status("/health") == 200 and twin.status("/metrics") == 200
    status, body = twin.request("GET", "/v1/models", headers=AUTH)
    data = json.loads(body)["data"][0]
    assert status == 200 and data["id"] == "llama" and data["max_model_len"] == 131072


def test_generate_stream_cumulative(twin):
    ev = twin.sse("/generate", {"text": "Tell me about rivers.", "stream": True,
                                "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}},
                  AUTH)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    toks = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert toks == sorted(toks) and toks[-1] == 12
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative
    assert len(texts[-1].split()) == 12
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 12} and last["e2e_latency"] > 0
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert "e2e_latency" not in chunks[0]["meta_info"] or len(chunks) == 1
    # temperature 0 is deterministic
    ev2 = twin.sse("/generate", {"text": "Tell me about rivers.", "stream": True,
                                 "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}},
                   AUTH)
    assert ev2[-2]["text"] == texts[-1]


def test_stream_interval_sends_the_first_token_at_once(twin):
    # SGLang sends at token 1, k + 1, 2k + 1, ... and at the end (grid.twin.api.stream_due); before, the twin held
    # the first chunk until k tokens were out, which delayed the client's TTFT by k - 1 decode steps
    for path, body in (("/generate", {"text": "Tell me about rivers.", "stream": True, "sampling_params": {
                           "max_new_tokens": 12, "temperature": 0, "ignore_eos": True, "stream_interval": 5}}),
                       ("/v1/completions", {"model": "m", "prompt": "Tell me about rivers.", "max_tokens": 12,
                                            "ignore_eos": True, "stream": True, "stream_interval": 5,
                                            "stream_options": {"include_usage": True}})):
        chunks = twin.sse(path, body, AUTH)[:-1]
        if path == "/generate":
            toks = [c["meta_info"]["completion_tokens"] for c in chunks]
        else:
            texts = [c["choices"][0]["text"] for c in chunks if c.get("choices")]
            toks = [len(" ".join(texts[:i + 1]).split()) for i in range(len(texts))]
        assert toks[0] < 5 and toks[-1] == 12, (path, toks)
        assert len(toks) <= 4, (path, toks)  # 1, 6, 11 and the last: never one chunk per token


def test_stream_due_follows_sglang():
    from grid.twin.api import stream_due

    assert [n for n in range(1, 13) if stream_due(n - 1, n, 5, n == 12)] == [1, 6, 11, 12]
    assert [n for n in range(1, 5) if stream_due(n - 1, n, 1, False)] == [1, 2, 3, 4]
    assert stream_due(2, 7, 5, False) and not stream_due(1, 5, 5, False)  # a boundary passed between wake-ups counts
    assert stream_due(3, 3, 5, True) and not stream_due(3, 3, 1, False)


def test_generate_probe_and_input_ids(twin):
    status, body = twin.request("POST", "/generate", {"text": "What is 2+2? Answer with a number only.",
                                                      "sampling_params": {"max_new_tokens": 16, "temperature": 0}},
                                AUTH)
    out = json.loads(body)
    assert status == 200 and out["text"].strip() == "4"
    assert out["meta_info"]["finish_reason"]["type"] == "stop" and out["meta_info"]["completion_tokens"] == 1
    status, body = twin.request("POST", "/generate", {"input_ids": list(range(50)),
                                                      "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}},
                                AUTH)
    out = json.loads(body)
    assert out["meta_info"]["prompt_tokens"] == 50 and len(out["output_ids"]) == 5
    status, body = twin.request("POST", "/generate", {"input_ids": [1] * 131072}, AUTH)
    assert status == 400 and "longer than the model's context length" in json.loads(body)["error"]["message"]


def test_chat_stream_order_and_usage(twin):
    req = {"model": "m", "messages": [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
           "max_tokens": 8, "temperature": 0, "stream": True}
    ev = twin.sse("/v1/chat/completions", req, AUTH)
    assert ev[-1] == "[DONE]"
    first, *mid, fin = ev[:-1]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"]["content"] for c in mid) == "Paris"
    assert fin["choices"][0]["delta"] == {} and fin["choices"][0]["finish_reason"] == "stop"
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" and c.get("usage") is None
               for c in ev[:-1])
    ev = twin.sse("/v1/chat/completions", {**req, "stream_options": {"include_usage": True}, "ignore_eos": True,
                                           "messages": [{"role": "user", "content": "Write a story."}]}, AUTH)
    usage = ev[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 8
    assert ev[-3]["choices"][0]["finish_reason"] == "length"
    status, body = twin.request("POST", "/v1/chat/completions", {**req, "stream": False}, AUTH)
    msg = json.loads(body)
    assert msg["choices"][0]["message"]["content"] == "Paris" and msg["usage"]["completion_tokens"] == 1
    status, body = twin.request("POST", "/v1/chat/completions", req, {**AUTH, "Content-Type": "text/plain"})
    assert status == 400 and b"Unsupported Media Type" in body


def test_completions_stream(twin):
    ev = twin.sse("/v1/completions", {"model": "m", "prompt": "Once upon a time", "max_tokens": 6, "stream": True,
                                      "ignore_eos": True, "stream_options": {"include_usage": True}}, AUTH)
    assert ev[-1] == "[DONE]"
    usage = ev[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    content = ev[:-2]
    assert content[-1]["choices"][0]["finish_reason"] == "length" and content[-1]["choices"][0]["text"]
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    status, body = twin.request("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "ignore_eos": True},
                                AUTH)
    out = json.loads(body)
    assert out["object"] == "text_completion" and out["usage"]["completion_tokens"] == 3


def test_decode_log_server_info_and_metrics(twin):
    twin.sse("/generate", {"text": "Go on.", "stream": True,
                           "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}, AUTH)
    decode = [parse_batch_line(line) for line in twin.log().splitlines() if "Decode batch" in line]
    assert decode and decode[-1]["gen_throughput_tok_per_s"] > 0 and decode[-1]["running_req"] >= 1
    status, body = twin.request("GET", "/server_info", headers=AUTH)
    info = json.loads(body)
    assert info["version"] == "0.5.9" and info["time_scale"] == 5.0 and info["tp_size"] == 1
    assert info["max_total_num_tokens"] > 0 and info["chunked_prefill_size"] > 0 and info["api_key"] == "***"
    st = info["internal_states"][0]
    assert st["memory_usage"]["token_capacity"] == info["max_total_num_tokens"] and st["last_gen_throughput"] > 0
    assert json.loads(twin.request("GET", "/get_server_info", headers=AUTH)[1])["version"] == "0.5.9"
    mi = json.loads(twin.request("GET", "/model_info", headers=AUTH)[1])
    assert mi["architectures"] == ["LlamaForCausalLM"]
    status, body = twin.request("GET", "/metrics")
    text = body.decode()
    for name in ("sglang:num_running_reqs{", "sglang:num_queue_reqs{", "sglang:token_usage{", "sglang:gen_throughput{",
                 "sglang:cache_hit_rate{", "sglang:max_total_num_tokens{", "sglang:generation_tokens_total{",
                 "sglang:time_to_first_token_seconds_bucket{", "sglang:inter_token_latency_seconds_count{",
                 "sglang:e2e_request_latency_seconds_sum{"):
        assert name in text, name
    gen = [line for line in text.splitlines() if line.startswith("sglang:generation_tokens_total")]
    assert float(gen[0].split()[-1]) >= 40
    assert twin.request("POST", "/flush_cache", headers=AUTH)[1].startswith(b"Cache flushed.")


def test_reasoning_sigterm_and_no_metrics(tmp_path):
    t = TwinProc(tmp_path, ["--skip-server-warmup", "--reasoning-parser", "glm45"], scale=50.0)
    try:
        assert t.wait_ready()[-1] == 200
        assert t.request("GET", "/metrics")[0] == 404  # not mounted without --enable-metrics
        chat = {"messages": [{"role": "user", "content": "What is 2+2? Answer with a number only."}], "max_tokens": 64}
        msg = json.loads(t.request("POST", "/v1/chat/completions", chat)[1])["choices"][0]["message"]
        assert msg["reasoning_content"] == "Let me answer." and msg["content"] == "4"
        msg = json.loads(t.request("POST", "/v1/chat/completions", {**chat, "max_tokens": 2})[1])["choices"][0]
        # docs/sources.md#sglang-log-formats-readiness-phases-failure-modes
        assert msg["message"]["content"] is None and msg["finish_reason"] == "length"
        off = {**chat, "chat_template_kwargs": {"enable_thinking": False}}
        msg = json.loads(t.request("POST", "/v1/chat/completions", off)[1])["choices"][0]["message"]
        assert msg["content"] == "4" and msg["reasoning_content"] is None
        ev = t.sse("/v1/chat/completions", {**chat, "stream": True})
        deltas = [e["choices"][0]["delta"] for e in ev[1:-2]]
        assert deltas[0].get("reasoning_content") and deltas[-1] == {"content": "4"}
        t0 = time.time()
        t.proc.send_signal(signal.SIGTERM)
        assert t.proc.wait(5) == 0 and time.time() - t0 < 3
        assert "SIGTERM received" in t.log() and "Finished server process" in t.log()
    finally:
        t.stop()


def test_launch_check_exits_1(tmp_path):
    t = TwinProc(tmp_path, ["--enable-two-batch-overlap"], scale=50.0)
    assert t.proc.wait(20) == 1
    t.stop()
    assert "ValueError: When enabling two batch overlap, moe_a2a_backend cannot be 'none'." in t.log()


def test_twin_serves_tp_across_described_nodes_speculative_and_pipeline(tmp_path):
    (tmp_path / "nodes").mkdir()
    t = TwinProc(tmp_path / "nodes", ["--tp-size", "2", "--nnodes", "2"], scale=50.0)
    assert t.proc.wait(20) == 1
    t.stop()
    assert "ValueError: the twin cannot model --nnodes 2 here: the hardware description" in t.log()
    # on a hardware file describing two nodes, TP over both is served (grid/twin/crossnode.py); so are speculative
    # decoding on the default hardware, and pipeline parallelism on two GPUs (one would be refused: shape_needs_gpus)
    for name, args, hw in (
            ("ib", ["--tp-size", "16", "--nnodes", "2"], {"hw": hardware("h100_x16_ib")}),
            ("spec", ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk",
                      "1", "--speculative-num-draft-tokens", "4"], {}),
            ("pp", ["--pp-size", "2", "--disable-overlap-schedule"], {"hw": hardware("a100_x2")})):
        (tmp_path / name).mkdir()
        t = TwinProc(tmp_path / name, args, scale=50.0, **hw)
        try:
            assert t.wait_ready(20)[-1] == 200, t.log()
            status, body = t.request("POST", "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 8}})
            assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 8
        finally:
            t.stop()


def test_failure_mode_from_table_exits_before_bind(tmp_path):
    # --mem-fraction-static 0.1 leaves no KV pool after 16 GB of weights: failures.py row kv_pool_not_enough_memory
    t = TwinProc(tmp_path, ["--mem-fraction-static", "0.1"], scale=50.0)
    seen = t.wait_ready(10)
    assert t.proc.wait(10) == 1 and set(seen) == {"refused"}
    t.stop()
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." in t.log()
    assert "Load weight end." in t.log() and "Uvicorn running" not in t.log()


def test_faults_startup_oom_and_repeat_token(tmp_path):
    t = TwinProc(tmp_path, [], scale=50.0, faults=[{"kind": "startup_oom_at_s", "at_s": 6.0, "exit_code": 3}])
    seen = t.wait_ready(10)
    assert t.proc.wait(10) == 3 and set(seen) == {"refused"}
    t.stop()
    assert "CUDA out of memory" in t.log() and "Load weight begin" in t.log() and "max_total_num_tokens" not in t.log()
    t = TwinProc(tmp_path, [], scale=50.0, version="0.5.23",
                 faults=[{"kind": "repeat_token", "token": "!"}, {"kind": "health_503_until_s", "until_s": 25.0}])
    try:
        seen = t.wait_ready()
        assert seen[-1] == 200 and 503 in seen
        status, body = t.request("POST", "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 4}})
        assert json.loads(body)["text"] == "!!!!"
        assert t.status("/ready") == 200
        text = t.log()
        assert "KV Cache is allocated. dtype: torch.bfloat16, #tokens:" in text
        assert "Capture target decode CUDA graph end. bs=[" in text
        prefill = [parse_batch_line(x) for x in text.splitlines() if "Prefill batch" in x]
        assert prefill and "pending_token" in prefill[-1]
    finally:
        t.stop()


@pytest.mark.parametrize("version, args, env, line, count", [
    ("0.5.12", ["--enable-nan-detection"], {}, logs.NAN_LINE, None),  # with every Decode batch line
    ("0.5.12", [], {}, None, 0),
    ("0.5.23", [], {logs.NAN_SANITIZE_ENV: "1"}, logs.NAN_SANITIZED_LINE, 1),  # once per process
    ("0.5.23", [], {}, None, 0),
])
def test_a_nan_fault_logs_what_the_release_logs(tmp_path, version, args, env, line, count):
    """NaN in the logits is logged per release (grid/releases/features.py nan_detection_flag, nan_sanitize_warning):
    0.5.9-0.5.12 only with --enable-nan-detection, 0.5.14+ only with SGLANG_SANITIZE_NAN_LOGITS set; the output is
    garbage either way."""
    t = TwinProc(tmp_path, ["--decode-log-interval", "2", *args], scale=50.0, version=version,
                 faults=[{"kind": "nan_output"}], env=env)
    try:
        assert t.wait_ready()[-1] == 200
        for _ in range(2):
            status, body = t.request("POST", "/generate", {"text": "hello", "sampling_params": {
                "max_new_tokens": 12, "ignore_eos": True}})
            assert status == 200 and set(json.loads(body)["text"]) == {"!"}
        text = t.log()
    finally:
        t.stop()
    nan = [x for x in text.splitlines() if "NaN" in x]
    decode = [x for x in text.splitlines() if "Decode batch" in x]
    assert len(decode) >= 2
    assert all(x.endswith(line) for x in nan) if line else nan == []
    assert len(nan) == (len(decode) if count is None else count)


def test_faults_scheduler_dies_and_exit_after_load(tmp_path):
    t = TwinProc(tmp_path, [], scale=50.0, faults=[{"kind": "scheduler_dies_after_s", "after_s": 0}])
    try:
        assert t.wait_ready()[-1] == 200
        c = http.client.HTTPConnection("127.0.0.1", t.port, timeout=1.0)
        c.request("POST", "/generate", body=json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}),
                  headers={"Content-Type": "application/json"})
        with pytest.raises(TimeoutError):
            c.getresponse()  # no token ever comes
        assert t.status("/health") == 200
        assert t.status("/health_generate") == 503  # the 1-token probe times out after 20 modelled s
        assert "Health check failed." in t.log()
    finally:
        t.stop()
    t = TwinProc(tmp_path, [], scale=50.0, faults=[{"kind": "exit_after_load_s", "after_s": 1.0, "exit_code": 7}])
    assert t.wait_ready()[-1] == 200
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        t.request("POST", "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}})
    assert t.proc.wait(10) == 7
    t.stop()
