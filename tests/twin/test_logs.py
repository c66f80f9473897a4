"""Log line formats against the verbatim examples in
docs/sources.md#sglang-log-formats-readiness-phases-failure-modes, and parsing them back."""

from __future__ import annotations

import io

from grid.server.logparse import parse_batch_line
from grid.twin import logs

DECODE_0410 = ("[2026-04-05 20:02:51] Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, cuda graph: True, "
               "gen throughput (token/s): 1635.11, #queue-req: 0")
PREFILL_0510 = ("[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, "
                "#running-req: 31, #queue-req: 0, cuda graph: True, input throughput (token/s): 559.53")
DECODE_TP = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, "
             "gen throughput (token/s): 144.95, #queue-req: 0")
PREFILL_HYBRID = ("[2026-08-23 09:09:50 TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
                  "full token usage: 0.01, swa token usage: 0.01, #running-req: 0, #queue-req: 1, #pending-token: 46401, "
                  "cuda graph: False, input throughput (token/s): 8072.80")
PREFILL_OLD = ("[2025-09-03 18:33:18 TP0] Prefill batch. #new-seq: 1, #new-token: 103, #cached-token: 1, token usage: 0.00, "
               "#running-req: 0, #queue-req: 0, ")
CAPACITY = ("[2025-11-30 11:18:05] max_total_num_tokens=2261377, chunked_prefill_size=16384, max_prefill_tokens=16384, "
            "max_running_requests=4096, context_len=128000, available_gpu_mem=37.06 GB")


def _msg(line: str) -> str:
    return logs.parse_line(line)[2]


def test_decode_line_matches_verbatim():
    for ver in ("0.5.9", "0.5.10", "0.5.23"):
        assert logs.decode_line(ver, running_req=32, num_token=11179, token_usage=0.08, cuda_graph=True,
                                gen_throughput=1635.11, queue_req=0) == _msg(DECODE_0410)
    assert logs.decode_line("0.5.9", running_req=5, num_token=20800, token_usage=0.29, cuda_graph=True,
                            gen_throughput=144.95, queue_req=0) == _msg(DECODE_TP)


def test_prefill_line_per_version():
    kw = dict(new_seq=1, new_token=158, cached_token=0, token_usage=0.08, running_req=31, queue_req=0,
              input_throughput=559.53, cuda_graph=True)
    assert logs.prefill_line("0.5.10", **kw) == _msg(PREFILL_0510)
    assert logs.prefill_line("0.5.9", **kw) == (
        "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, #running-req: 31, "
        "#queue-req: 0, input throughput (token/s): 559.53, cuda graph: True")
    line = logs.prefill_line("0.5.23", new_seq=1, new_token=8192, cached_token=0, token_usage=0.01, running_req=0,
                             queue_req=1, pending_token=46401, input_throughput=8072.80, cuda_graph=False)
    # the verbatim 0.5.18 example is a hybrid-SWA model; the dense form differs only in the usage field
    assert line == _msg(PREFILL_HYBRID).replace("full token usage: 0.01, swa token usage: 0.01", "token usage: 0.01")
    assert logs.prefill_line("0.5.11", **kw) == logs.prefill_line("0.5.23", **kw)


def test_parse_batch_lines_verbatim():
    # grid reads server logs with grid.server.logparse; the twin's own lines must parse there too
    d = parse_batch_line(DECODE_TP)
    assert d["kind"] == "decode" and d["prefix"] == "TP0" and d["ts"] == "2026-04-08 14:05:21"
    assert d["running_req"] == 5 and d["token"] == 20800 and d["gen_throughput_tok_per_s"] == 144.95
    assert d["cuda_graph"] is True
    p = parse_batch_line(PREFILL_HYBRID)
    assert p["prefix"] == "TP0 EP0" and p["pending_token"] == 46401 and p["swa_token_usage"] == 0.01
    assert p["input_throughput_tok_per_s"] == 8072.80 and p["cuda_graph"] is False
    o = parse_batch_line(PREFILL_OLD)
    assert o["kind"] == "prefill" and o["new_token"] == 103 and o["cached_token"] == 1
    assert parse_batch_line(CAPACITY) is None


def test_roundtrip_generated_lines():
    for ver in ("0.5.9", "0.5.10", "0.5.11", "0.5.23"):
        line = "[2026-01-01 00:00:00 TP0] " + logs.prefill_line(
            ver, new_seq=3, new_token=4096, cached_token=128, token_usage=0.42, running_req=7, queue_req=2,
            input_throughput=12345.678, cuda_graph=False, pending_token=99)
        d = parse_batch_line(line)
        assert (d["new_seq"], d["new_token"], d["cached_token"], d["token_usage"]) == (3, 4096, 128, 0.42)
        assert d["input_throughput_tok_per_s"] == 12345.68
        assert ("pending_token" in d) == (ver in ("0.5.11", "0.5.23"))


def test_capacity_and_kv_lines():
    line = logs.capacity_line(max_total_num_tokens=2261377, chunked_prefill_size=16384, max_prefill_tokens=16384,
                              max_running_requests=4096, context_len=128000, available_gpu_mem=37.06)
    assert line == _msg(CAPACITY)
    assert logs.parse_capacity_line(CAPACITY)["max_total_num_tokens"] == 2261377
    kv = logs.kv_cache_line("0.5.23", tokens=1106304, kv_gb=50.64, mla=False, kv_cache_dtype="auto")
    assert kv == "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1106304, K size: 25.32 GB, V size: 25.32 GB"
    assert logs.kv_cache_line("0.5.9", tokens=5, kv_gb=1.0, mla=True, kv_cache_dtype="auto") == (
        "KV Cache is allocated. #tokens: 5, KV size: 1.00 GB")
    assert logs.KV_RE.search(kv).group("tokens") == "1106304"


def test_startup_wording_per_version():
    assert logs.graph_begin_lines("0.5.9", avail=11.82, bs=[1, 2])[0] == (
        "Capture cuda graph begin. This can take up to several minutes. avail mem=11.82 GB")
    assert logs.graph_end_line("0.5.9", elapsed=5.37, usage=1.44, avail=38.05, bs=[1]) == (
        "Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.")
    assert logs.graph_begin_lines("0.5.14", avail=3.0, bs=[1, 2]) == [
        "Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2], avail mem=3.00 GB"]
    assert logs.graph_end_line("0.5.21", elapsed=5.37, usage=1.44, avail=38.05, bs=[1, 2]) == (
        "Capture target decode CUDA graph end. elapsed=5.37 s, mem usage=1.44 GB, avail mem=38.05 GB.")
    assert logs.graph_begin_lines("0.5.23", avail=3.0, bs=[1]) == [
        "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=3.00 GB"]
    assert logs.graph_end_line("0.5.23", elapsed=5.37, usage=1.44, avail=38.05, bs=[1, 2]) == (
        "Capture target decode CUDA graph end. bs=[1, 2], elapsed=5.37 s, mem usage=1.44 GB, avail mem=38.05 GB.")
    assert logs.load_weight_end_line("0.5.9", elapsed=6.21, arch="Qwen3ForCausalLM", avail=76.05, usage=2.33) == (
        "Load weight end. elapsed=6.21 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=76.05 GB, "
        "mem usage=2.33 GB.")


def test_prefixes_and_writer():
    assert logs.rank_prefix(tp_size=1) == ""
    assert logs.rank_prefix(tp_size=8, ep_size=8) == " TP0 EP0"
    assert logs.rank_prefix(tp_size=4, dp_attention=True, ep_size=4) == " DP0 TP0 EP0"
    err, out = io.StringIO(), io.StringIO()
    w = logs.LogWriter(lambda: 1_700_000_000.5, sched_prefix=" TP0", err=err, out=out, level="info")
    w.sched("hello")
    w.info("world")
    w.access(logs.access_line("127.0.0.1:40052", "POST", "/v1/chat/completions", 200, "OK"))
    w.info("hidden", level="debug")
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and " TP0] hello" in lines[0] and lines[1].endswith("] world")
    assert logs.parse_line(lines[0])[1] == "TP0"
    assert out.getvalue().rstrip().endswith('] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
