"""The client against a scripted server: chunk timings and payloads under the test's control."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from grid.loadgen.records import CONTEXT_EXCEEDED, TAIL_CANCELLED, Prompt
from grid.loadgen.runner import LoadPoint, Target, run_load_point
from grid.metrics.loadpoint import summarize
from grid.metrics.request import request_metrics
from grid.storage.schema import request_rows

from .scripted import DONE, Reply, ScriptedServer, chat_event, cmpl_event, gen_event, sse, usage
from tests.timing import slack


try:
    import uvloop
except ImportError:  # optional: the suite then runs on asyncio's loop only
    uvloop = None

_LOOPS = ["asyncio"] + (["uvloop"] if uvloop is not None else [])
_arun = asyncio.run


@pytest.fixture(autouse=True, params=_LOOPS)
def event_loop_kind(request):
    """Every test here runs on asyncio's loop and, when installed, on uvloop (what ``run_load_point_sync`` uses)."""
    global _arun
    _arun = asyncio.run if request.param == "asyncio" else uvloop.run
    yield request.param
    _arun = asyncio.run


def prompts(n: int, output_len: int = 16, text: bool = False) -> list[Prompt]:
    """Prompt i carries i in its ids/text so the server script can tell requests apart."""
    if text:
        return [Prompt(i, 4, output_len, text=f"p{i} hello") for i in range(n)]
    return [Prompt(i, 4, output_len, input_ids=(i, 1, 2, 3)) for i in range(n)]


def pid(body: dict) -> int:
    if "input_ids" in body:
        return body["input_ids"][0]
    if "prompt" in body:
        return body["prompt"][0] if isinstance(body["prompt"], list) else int(body["prompt"].split()[0][1:])
    return int(body["messages"][0]["content"].split()[0][1:])


def run(script, api="generate", point=None, n=1, *, text=False, target_kw=None, output_len=16, **kw):
    point = point or LoadPoint("concurrency", 1, n)

    async def main():
        async with ScriptedServer(script) as srv:
            target = Target(srv.url, api=api, **(target_kw or {}))
            res = await run_load_point(target, point, prompts(max(n, point.num_prompts), output_len, text), **kw)
            return res, srv

    return _arun(main())


# 1 ------------------------------------------------------------------------------------------------------------
def test_ttft_itl_tpot_from_generate_stream():
    def script(i, body):
        return Reply([(0.100, gen_event("a", 1)), (0.150, gen_event("abc", 3)),
                      (0.200, gen_event("abcd", 4, finish={"type": "length"})), (0.200, DONE)])

    res, srv = run(script)
    (rec,) = res.records
    m = request_metrics(rec, res.time_scale)
    assert rec.status == "ok" and rec.output_tokens == 4 and rec.output_tokens_source == "usage"
    assert rec.chunk_tokens == [1, 2, 1] and rec.text == "abcd"
    assert m.ttft_ms == pytest.approx(100, abs=srv.tol_ms) and m.ttft_ms >= 100
    assert m.itl_tokens_ms == pytest.approx([25, 25, 50], abs=srv.tol_ms / 2)
    assert m.chunk_gaps_ms == pytest.approx([50, 50], abs=srv.tol_ms)
    assert m.tpot_ms == pytest.approx(100 / 3, abs=srv.tol_ms / 2)
    assert sum(m.itl_tokens_ms) == pytest.approx(m.e2e_ms - m.ttft_ms)


def test_time_scale_multiplies_durations():
    def script(i, body):
        return Reply([(0.050, gen_event("a", 1)), (0.100, gen_event("ab", 2)), (0.100, DONE)])

    res, srv = run(script, target_kw={"time_scale": 10.0})
    m = request_metrics(res.records[0], res.time_scale)
    assert m.ttft_ms == pytest.approx(500, abs=10 * srv.tol_ms)
    assert m.e2e_ms == pytest.approx(1000, abs=10 * srv.tol_ms)


# 2 ------------------------------------------------------------------------------------------------------------
def test_streams_with_only_the_end_marker_fail_empty_output():
    empty = {2, 5, 8}

    def script(i, body):
        if pid(body) in empty:
            return Reply([(0.010, DONE)])
        return Reply([(0.020, gen_event("a", 1)), (0.030, gen_event("ab", 2)), (0.030, DONE)])

    res, srv = run(script, point=LoadPoint("concurrency", 10, 10))
    bad = [r for r in res.records if r.status != "ok"]
    assert sorted(r.prompt_index for r in bad) == sorted(empty)
    for r in bad:
        assert r.error_class == "empty_output"
        assert request_metrics(r).ttft_ms is None
    rows = request_rows(res, config_hash="h", trial_id="t", point_index=0)
    assert [row["ttft_ms"] for row in rows if row["status"] == "failed"] == [None, None, None]
    s = summarize(res)
    assert s["completed"] == 7 and s["failed"] == 3 and s["failed_empty_output"] == 3
    assert s["ttft_mean_ms"] >= 20 and s["ttft_max_ms"] < 20 + 5 * srv.tol_ms  # only the 7 real streams
    assert s["total_output_tokens"] == 14


# 3 ------------------------------------------------------------------------------------------------------------
def test_chat_role_chunk_and_usage_chunk_do_not_count():
    def script(i, body):
        assert body["stream_options"] == {"include_usage": True}
        return Reply([
            (0.005, chat_event({"role": "assistant", "content": ""})),
            (0.300, chat_event({"content": "Hi"})),
            (0.320, chat_event({"content": " there"})),
            (0.330, chat_event({}, finish="stop")),
            (0.400, chat_event(choices=False, usage=usage(5, 2))),
            (0.400, DONE),
        ])

    res, srv = run(script, api="chat", text=True)
    rec = res.records[0]
    m = request_metrics(rec)
    assert rec.status == "ok" and rec.chunk_tokens == [0, 1, 1, 0, 0]
    assert m.ttft_ms == pytest.approx(300, abs=srv.tol_ms) and m.ttft_ms >= 300
    assert m.ttfo_ms == m.ttft_ms
    assert m.e2e_ms == pytest.approx(320, abs=srv.tol_ms)  # the usage chunk at 400 ms does not move the end
    assert rec.output_tokens == 2 and rec.output_tokens_source == "usage" and rec.input_tokens == 5
    assert m.itl_tokens_ms == pytest.approx([20], abs=srv.tol_ms) and rec.finish_reason == "stop"


def test_chat_reasoning_counts_for_ttft_not_ttfo():
    def script(i, body):
        return Reply([
            (0.005, chat_event({"role": "assistant", "content": ""})),
            (0.100, chat_event({"reasoning_content": "hmm"})),
            (0.300, chat_event({"content": "ok"})),
            (0.310, chat_event({}, finish="stop")), (0.310, DONE),
        ])

    res, srv = run(script, api="chat", text=True)
    rec = res.records[0]
    m = request_metrics(rec)
    assert rec.status == "ok" and not rec.content_null
    assert m.ttft_ms == pytest.approx(100, abs=srv.tol_ms)
    assert m.ttfo_ms == pytest.approx(300, abs=srv.tol_ms)
    assert rec.output_tokens == 2 and rec.output_tokens_source == "stream_count"
    assert rec.reasoning_text == "hmm" and rec.text == "ok"


# 4 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_early_stop_usage_in_empty_text_chunk(api):
    def script(i, body):
        assert body.get("max_tokens", body.get("max_completion_tokens")) == 256
        ev = (lambda t: cmpl_event(t)) if api == "completions" else (lambda t: chat_event({"content": t}))
        writes = [(0.010 + 0.002 * k, ev(f"t{k}")) for k in range(40)]
        last = cmpl_event("", finish="stop", usage=usage(4, 40)) if api == "completions" else \
            chat_event({"content": ""}, finish="stop", usage=usage(4, 40))
        return Reply(writes + [(0.100, last), (0.100, DONE)])

    res, _ = run(script, api=api, text=True, output_len=256)
    rec = res.records[0]
    m = request_metrics(rec)
    assert rec.status == "ok" and rec.output_tokens == 40 and rec.output_tokens_source == "usage"
    assert rec.chunk_tokens[-1] == 0 and sum(rec.chunk_tokens) == 40
    tok = [t for t, k in zip(rec.chunk_perf_ns, rec.chunk_tokens) if k]
    assert m.tpot_ms == pytest.approx((tok[-1] - tok[0]) / 39 / 1e6)
    assert len(m.itl_tokens_ms) == 39


# 5 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("with_usage", [True, False])
def test_usage_chunk_with_empty_choices_or_no_usage(api, with_usage):
    def script(i, body):
        ev = (lambda t: cmpl_event(t)) if api == "completions" else (lambda t: chat_event({"content": t}))
        writes = [(0.005 + 0.002 * k, ev("x")) for k in range(12)]
        fin = cmpl_event("", finish="length") if api == "completions" else chat_event({}, finish="length")
        writes.append((0.040, fin))
        if with_usage:
            writes.append((0.041, sse({"id": "c", "choices": [], "usage": usage(4, 12)})))
        return Reply(writes + [(0.042, DONE)])

    res, _ = run(script, api=api, text=True, output_len=999)
    rec = res.records[0]
    assert rec.status == "ok" and rec.output_tokens == 12
    assert rec.output_tokens_source == ("usage" if with_usage else "stream_count")
    assert rec.input_tokens_source == ("usage" if with_usage else "planned")
    s = summarize(res)
    assert s["total_output_tokens"] == 12 and s["output_tok_per_s"] > 0


# 6 ------------------------------------------------------------------------------------------------------------
def test_non_streaming_chat_content_null_with_reasoning():
    body = json.dumps({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "reasoning_content": "think",
                                             "tool_calls": None}, "finish_reason": "length"}],
        "usage": usage(7, 32),
    }).encode()

    res, srv = run(lambda i, b: Reply(body=body, body_delay_s=0.05), api="chat", text=True,
                   target_kw={"stream": False})
    rec = res.records[0]
    m = request_metrics(rec)
    assert srv.requests[0]["stream"] is False and "stream_options" not in srv.requests[0]
    assert rec.status == "ok" and rec.output_tokens == 32 and rec.output_tokens_source == "usage"
    assert rec.content_null and rec.text == "" and rec.reasoning_text == "think"
    assert m.ttft_ms is None and m.tpot_ms is None  # not measured without a stream
    assert m.e2e_ms == pytest.approx(50, abs=srv.tol_ms)


# 7 ------------------------------------------------------------------------------------------------------------
def _three_tokens():
    return [(0.010, gen_event("a", 1)), (0.020, gen_event("ab", 2)), (0.030, gen_event("abc", 3))]


def test_one_silent_stream_of_64_fails_with_read_timeout():
    def script(i, body):
        if pid(body) == 17:
            return Reply(_three_tokens(), hang_after_s=3.0)
        return Reply(_three_tokens() + [(0.030, DONE)])

    t = time.monotonic()
    res, _ = run(script, point=LoadPoint("concurrency", 64, 64), read_timeout_s=0.5)
    assert time.monotonic() - t < 2.5 * slack()
    bad = [r for r in res.records if r.status != "ok"]
    assert [(r.prompt_index, r.error_class) for r in bad] == [(17, "read_timeout")]
    lasted = (bad[0].end_perf_ns - bad[0].last_token_perf_ns) / 1e9
    assert 0.5 <= lasted < 0.5 + 0.5 * slack()
    s = summarize(res)
    assert s["completed"] == 63 and s["failed_read_timeout"] == 1 and s["stalled"] is False
    assert request_metrics(bad[0]).ttft_ms is not None  # measured before the failure, kept


def test_stall_watchdog_catches_keepalive_without_tokens():
    def script(i, body):
        if pid(body) == 3:  # bytes keep flowing (SSE comments, repeated events), tokens do not
            pings = [(0.030 + 0.05 * k, b": ping\n\n" if k % 2 else gen_event("abc", 3)) for k in range(40)]
            return Reply(_three_tokens() + pings)
        return Reply(_three_tokens() + [(0.030, DONE)])

    res, _ = run(script, point=LoadPoint("concurrency", 8, 8), read_timeout_s=5.0, stall_timeout_s=0.4)
    bad = [r for r in res.records if r.status != "ok"]
    assert [(r.prompt_index, r.error_class) for r in bad] == [(3, "stall_timeout")]
    assert 0.4 <= (bad[0].end_perf_ns - bad[0].last_token_perf_ns) / 1e9 < 0.4 + 0.4
    assert res.stalled
    s = summarize(res)
    assert s["stalled"] is True and s["completed"] == 7


# 8 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad_line", [b'data: {"text": "ab\n\n', b'data: {"text": 5, "meta_info": {}}\n\n',
                                      b"data: [1, 2]\n\n"])
def test_truncated_json_line_is_parse_error(bad_line):
    def script(i, body):
        if pid(body) == 1:
            return Reply([(0.010, gen_event("a", 1)), (0.020, bad_line), (0.030, gen_event("abc", 3)), (0.030, DONE)])
        return Reply(_three_tokens() + [(0.030, DONE)])

    res, _ = run(script, point=LoadPoint("concurrency", 3, 3))
    assert [(r.prompt_index, r.status, r.error_class) for r in res.records] == [
        (0, "ok", None), (1, "failed", "parse_error"), (2, "ok", None)]
    rows = request_rows(res, config_hash="h", trial_id="t", point_index=0)
    assert len(rows) == 3 and rows[1]["error_class"] == "parse_error" and rows[1]["error_message"]
    assert summarize(res)["failed_parse_error"] == 1


# other faults ----------------------------------------------------------------------------------------------------
def test_http_error_truncated_stream_and_server_error():
    def script(i, body):
        k = pid(body)
        if k == 0:
            return Reply(status=500, body=b'{"error": {"message": "boom"}}')
        if k == 1:
            return Reply(_three_tokens())  # no [DONE]
        if k == 2:
            return Reply(_three_tokens() + [(0.04, sse({"error": {"message": "oom"}})), (0.04, DONE)])
        if k == 3:
            return Reply(_three_tokens() + [(0.04, gen_event("abc", 3, finish={"type": "abort", "message": "x"})),
                                            (0.04, DONE)])
        return Reply(_three_tokens() + [(0.030, DONE)])

    res, _ = run(script, point=LoadPoint("concurrency", 5, 5))
    got = [(r.status, r.error_class) for r in res.records]
    assert got == [("failed", "http_error"), ("failed", "truncated_stream"), ("failed", "server_error"),
                   ("failed", "server_error"), ("ok", None)]
    assert res.records[0].http_status == 500 and "boom" in res.records[0].error_message
    s = summarize(res)
    assert s["failed"] == 4 and json.loads(s["error_counts_json"]) == {
        "http_error": 1, "server_error": 2, "truncated_stream": 1}


def test_connection_refused_is_conn_error_and_counted():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = _arun(run_load_point(Target(f"http://127.0.0.1:{port}"), LoadPoint("concurrency", 2, 4), prompts(4)))
    assert [r.error_class for r in res.records] == ["conn_error"] * 4
    s = summarize(res)
    assert s["failed_conn_error"] == 4 and s["requests_per_s"] is None and s["ttft_p99_ms"] is None
    assert len(request_rows(res, config_hash="h", trial_id="t", point_index=0)) == 4


def test_api_key_sent_as_bearer_and_not_in_repr():
    def script(i, body):
        return Reply(_three_tokens() + [(0.03, DONE)])

    res, srv = run(script, target_kw={"api_key": "sekrit"})
    assert srv.headers[0]["Authorization"] == "Bearer sekrit"
    assert "sekrit" not in repr(Target("http://x", api_key="sekrit"))


def test_generate_payload_and_text_prompts():
    def script(i, body):
        return Reply(_three_tokens() + [(0.03, DONE)])

    _, srv = run(script, n=1)
    body = srv.requests[0]
    assert body["input_ids"] == [0, 1, 2, 3] and body["stream"] is True
    assert body["sampling_params"] == {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True}
    _, srv = run(script, n=1, text=True)
    assert srv.requests[0]["text"] == "p0 hello" and "input_ids" not in srv.requests[0]


def test_continuous_usage_counts_tokens_per_event():
    def script(i, body):
        return Reply([
            (0.010, cmpl_event("ab", usage=usage(4, 2))),  # two tokens in one event (e.g. speculative decoding)
            (0.030, cmpl_event("c", usage=usage(4, 3))),
            (0.050, cmpl_event("de", finish="stop", usage=usage(4, 5))),
            (0.051, sse({"choices": [], "usage": usage(4, 5)})), (0.051, DONE)])

    res, srv = run(script, api="completions")
    rec = res.records[0]
    m = request_metrics(rec)
    assert rec.chunk_tokens == [2, 1, 2, 0] and rec.output_tokens == 5
    assert m.itl_tokens_ms[0] == 0.0 and len(m.itl_tokens_ms) == 4
    assert m.itl_tokens_ms[1] == pytest.approx(20, abs=srv.tol_ms)
    assert m.itl_tokens_ms[2] == m.itl_tokens_ms[3] == pytest.approx(10, abs=srv.tol_ms)


# load shapes -----------------------------------------------------------------------------------------------------
def test_closed_loop_holds_exactly_the_concurrency_with_warmup_excluded():
    live = {"now": 0, "peak": 0}

    def script(i, body):
        return Reply([(0.0, b""), (0.050, gen_event("a", 1)), (0.100, gen_event("ab", 2)), (0.100, DONE)])

    async def main():
        async with ScriptedServer(script) as srv:
            point = LoadPoint("concurrency", 4, 12, warmup_requests=3)
            return await run_load_point(Target(srv.url), point, prompts(15)), srv

    # ScriptedServer binds _handle when it starts, so wrap the class method to count requests in flight
    orig_handle = ScriptedServer._handle

    async def counting(self, request):
        live["now"] += 1
        live["peak"] = max(live["peak"], live["now"])
        try:
            return await orig_handle(self, request)
        finally:
            live["now"] -= 1

    ScriptedServer._handle = counting
    try:
        res, srv = _arun(main())
    finally:
        ScriptedServer._handle = orig_handle
    assert len(srv.requests) == 15 and len(res.records) == 12 and len(res.warmup_records) == 3
    assert live["peak"] == 4
    assert [r.prompt_index for r in res.warmup_records] == [12, 13, 14]
    assert sorted(r.prompt_index for r in res.records) == list(range(12))
    assert all(r.send_perf_ns >= res.window_start_perf_ns for r in res.records)
    assert all(w.end_perf_ns <= res.window_start_perf_ns for w in res.warmup_records)
    s = summarize(res)
    assert s["concurrency_peak"] == 4 and s["completed"] == 12
    assert s["concurrency_mean"] == pytest.approx(4, rel=0.15)
    assert s["duration_s"] == pytest.approx(0.3, abs=0.05)
    assert s["requests_per_s"] == pytest.approx(12 / s["duration_s"])


def test_open_loop_sends_on_absolute_deadlines():
    def script(i, body):
        return Reply([(0.005, gen_event("a", 1)), (0.005, DONE)])

    point = LoadPoint("rate", 40.0, 10, arrival="constant")
    res, srv = run(script, point=point, target_kw={"time_scale": 2.0})
    offsets = [r.scheduled_offset_ns for r in res.records]
    assert offsets == [i * 12_500_000 for i in range(10)]  # 40 req/s modelled = 80 req/s real at time_scale 2
    for r in res.records:
        lag = r.send_perf_ns - r.scheduled_perf_ns
        assert 0 <= lag < (2 + srv.tol_ms) * 1e6
    assert res.records[0].scheduled_perf_ns == res.window_start_perf_ns
    s = summarize(res)
    # the client's lateness is bounded by its loop's stalls, as each send's lag above
    assert s["completed"] == 10 and s["client_queue_max_ms"] < 2 + srv.tol_ms


def test_open_loop_behind_schedule_records_client_queue():
    """rate=inf: everything is due at t0; sends go out as fast as the loop allows and the lateness is recorded."""
    def script(i, body):
        return Reply([(0.005, gen_event("a", 1)), (0.005, DONE)])

    res, _ = run(script, point=LoadPoint("rate", float("inf"), 50))
    assert all(r.scheduled_offset_ns == 0 for r in res.records)
    queue = [request_metrics(r).client_queue_ms for r in res.records]
    assert all(q >= 0 for q in queue) and max(queue) > 0


def test_events_in_one_write_share_a_stamp_and_callback_sees_every_request():
    def script(i, body):
        both = gen_event("a", 1) + gen_event("ab", 2)
        return Reply([(0.020, both), (0.040, gen_event("abc", 3)), (0.040, DONE)])

    seen = []
    res, srv = run(script, point=LoadPoint("concurrency", 2, 4, warmup_requests=1), n=5, on_request_done=seen.append)
    assert len(seen) == 5 and sum(r.warmup for r in seen) == 1 and all(r.status == "ok" for r in seen)
    m = request_metrics(res.records[0])
    assert m.chunk_gaps_ms[0] == 0.0 and m.itl_tokens_ms[0] == 0.0  # same arrival: a true 0 gap at the client
    assert m.chunk_gaps_ms[1] == pytest.approx(20, abs=srv.tol_ms)


def test_open_loop_with_poisson_schedule_and_warmup():
    def script(i, body):
        return Reply([(0.002, gen_event("a", 1)), (0.004, gen_event("ab", 2)), (0.004, DONE)])

    from grid.loadgen.arrivals import offsets_to_ns, send_offsets

    point = LoadPoint("rate", 100.0, 20, arrival="poisson", seed=11, warmup_requests=2)
    res, srv = run(script, point=point)
    assert len(srv.requests) == 22 and len(res.records) == 20
    assert [r.scheduled_offset_ns for r in res.records] == offsets_to_ns(send_offsets(20, 100.0, "poisson", seed=11))
    assert summarize(res)["completed"] == 20


def _refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _sync_loop_type() -> type:
    from grid.loadgen.runner import run_load_point_sync

    seen: list[type] = []
    res = run_load_point_sync(Target(_refused_url()), LoadPoint("concurrency", 1, 2), prompts(2),
                              on_request_done=lambda rec: seen.append(type(asyncio.get_running_loop())))
    assert [r.error_class for r in res.records] == ["conn_error"] * 2
    assert len(set(seen)) == 1
    return seen[0]


def test_sync_runner_uses_uvloop_when_importable(event_loop_kind):
    if event_loop_kind != "asyncio":
        pytest.skip("checks the loop choice of run_load_point_sync itself; once is enough")
    if uvloop is None:
        pytest.skip("uvloop not installed")
    assert issubclass(_sync_loop_type(), uvloop.Loop)


def test_sync_runner_falls_back_to_asyncio_without_uvloop(event_loop_kind, monkeypatch):
    if event_loop_kind != "asyncio":
        pytest.skip("checks the loop choice of run_load_point_sync itself; once is enough")
    import sys

    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    loop_type = _sync_loop_type()
    assert issubclass(loop_type, asyncio.BaseEventLoop) and "uvloop" not in loop_type.__module__


def tokens_at_50ms(i, body):
    """A reply of as many tokens as the request asks for (max_new_tokens), one every 50 ms."""
    n = body["sampling_params"]["max_new_tokens"]
    return Reply([(0.0, b"")] + [(0.050 * (k + 1), gen_event("a" * (k + 1), k + 1)) for k in range(n)]
                 + [(0.050 * n, DONE)])


def test_steady_closed_loop_spreads_phases_and_measures_after_the_first_wave():
    # 4 workers, requests of 4 tokens 50 ms apart (200 ms); the first wave (prompts 9..12) asks for 1, 2, 3, 4 tokens,
    # so the workers' first measured requests go out 50 ms apart (at +50, +100, +150, +200 ms), the 8 measured
    # requests keep that spread, and the workers that run out of measured work send tail requests (prompts 13..)
    # until the last measured one ends: workers 0-2 at +450, +500, +550 ms, cancelled when request 7 ends at +600 ms
    point = LoadPoint("concurrency", 4, 8, warmup_requests=1, steady=True)
    assert point.wave_warmup == 4 and LoadPoint("concurrency", 4, 8).wave_warmup == 0
    assert point.tail_prompts == 8 and LoadPoint("concurrency", 4, 8).tail_prompts == 0
    res, srv = run(tokens_at_50ms, point=point, n=21, output_len=4)
    assert len(res.records) == 8 and len(res.warmup_records) == 5 and len(res.tail_records) == 3
    # the client sent 16; a tail cancelled less than a loop stall after it was sent may never have reached the server
    cut = [r for r in res.tail_records if res.window_end_perf_ns - r.send_perf_ns < srv.tol_ms * 1e6]
    assert 16 - len(cut) <= len(srv.requests) <= 16 and res.window_kind == "steady_state"
    assert sorted(r.prompt_index for r in res.warmup_records) == [8, 9, 10, 11, 12]
    wave = sorted((r for r in res.warmup_records if r.prompt_index > 8), key=lambda r: r.prompt_index)
    assert [r.max_tokens for r in wave] == [1, 2, 3, 4] and [r.output_tokens for r in wave] == [1, 2, 3, 4]
    assert sorted(r.prompt_index for r in res.records) == list(range(8))
    assert all(r.output_tokens == 4 for r in res.records)
    assert sorted(r.prompt_index for r in res.tail_records) == [13, 14, 15]
    assert all(r.error_class == "client_error" and r.error_message == TAIL_CANCELLED for r in res.tail_records)
    sends = sorted(r.send_perf_ns for r in res.records)
    assert res.window_start_perf_ns == min(r.scheduled_perf_ns for r in res.records)
    assert res.window_end_perf_ns == max(r.end_perf_ns for r in res.records)
    assert [(b - a) / 1e6 for a, b in zip(sends, sends[1:])] == pytest.approx([50] * 7, abs=3 * srv.tol_ms)
    assert min(r.scheduled_offset_ns for r in res.records) == 0
    tails = sorted(r.send_perf_ns - res.window_start_perf_ns for r in res.tail_records)
    assert [t / 1e6 for t in tails] == pytest.approx([400, 450, 500], abs=3 * srv.tol_ms)
    s = summarize(res)
    # 4 workers busy all through the 550 ms window, a token every 50 ms each: 80 tok/s (+-1 token at each edge)
    assert s["duration_s"] == pytest.approx(0.550, abs=3 * srv.tol_ms / 1e3)
    assert s["concurrency_mean"] == pytest.approx(4, abs=0.2) and s["concurrency_peak"] == 4
    assert s["output_tok_per_s"] == pytest.approx(80, abs=8)
    assert (s["window_kind"], s["warmup_requests_run"], s["tail_requests_run"]) == ("steady_state", 5, 3)


def test_steady_tail_requests_that_fail_are_not_resent():
    # measured request 7 takes 300 ms; every tail request (prompts 13..) is refused with HTTP 503 at once: each worker
    # that runs out of measured work sends one tail request, sees it fail and stops, instead of a hot loop of refusals
    def script(i, body):
        if pid(body) >= 13:
            return Reply(status=503, body=b"overloaded", content_type="text/plain")
        end = 0.300 if pid(body) == 7 else 0.100
        return Reply([(0.0, b""), (end / 2, gen_event("a", 1)), (end, gen_event("ab", 2)), (end, DONE)])

    point = LoadPoint("concurrency", 4, 8, warmup_requests=1, steady=True)
    res, srv = run(script, point=point, n=21)
    assert len(res.records) == 8 and all(r.status == "ok" for r in res.records)
    assert len(res.tail_records) == 3 and all(r.error_class == "http_error" for r in res.tail_records)
    assert len(srv.requests) == 16
    assert summarize(res)["tail_requests_run"] == 3


def test_an_emoji_split_into_escaped_surrogate_halves_is_rejoined(tmp_path):
    # "\ud83d" then "\ude00" in two events (JS/UTF-16 servers and gateways); a lone half -> U+FFFD
    from grid.storage.parquet import read_table, write_trial

    def script(i, body):
        halves = ["\ud83d", "\ude00", "!", "\ud83d"] if pid(body) == 0 else ["ok"]
        return Reply([(0.0, b"")] + [(0.01 * k, cmpl_event(t)) for k, t in enumerate(halves, 1)]
                     + [(0.05, cmpl_event("", finish="length", usage=usage(4, len(halves)))), (0.05, DONE)])

    res, _ = run(script, api="completions", n=2, point=LoadPoint("concurrency", 1, 2))
    texts = {r.prompt_index: r.text for r in res.records}
    assert texts == {0: "\U0001F600!\ufffd", 1: "ok"} and all(r.status == "ok" for r in res.records)
    rows = request_rows(res, config_hash="abc", trial_id="t", point_index=0)
    write_trial(tmp_path, "abc", {"requests": rows})
    assert sorted(read_table(tmp_path, "requests").column("text").to_pylist()) == ["ok", "\U0001F600!\ufffd"]


def test_no_text_a_server_sends_keeps_a_trial_from_being_recorded(tmp_path):
    from grid.storage.parquet import read_table, write_trial

    # a lone surrogate anywhere (here an error message) is stored as U+FFFD instead of failing the write
    write_trial(tmp_path, "abc", {"requests": [{"config_hash": "abc", "error_message": "bad \udc80 byte",
                                                "text": "\ud83d\ude00"}]})
    row = read_table(tmp_path, "requests").to_pylist()[0]
    assert (row["error_message"], row["text"]) == ("bad \ufffd byte", "\U0001F600")


@pytest.mark.parametrize("wire", [
    b'{"error":{"code":400,"message":"request (6009 tokens) exceeds the available context size (4096 tokens), try '
    b'increasing it","type":"exceed_context_size_error","n_prompt_tokens":6009,"n_ctx":4096}}\n',
    b'error: {"error":{"code":400,"message":"request (6009 tokens) exceeds the available context size (4096 tokens), '
    b'try increasing it"}}\n\n',
])
def test_a_200_stream_whose_body_is_an_error_fails_with_the_servers_words(wire):
    # a proxy that had sent 200 OK / text/event-stream forwards the backend's JSON error as the body: the request
    # fails with the server's own words, and the class names its cause (the context), not a broken stream or server
    res, _ = run(lambda i, b: Reply([(0.0, b""), (0.01, wire)]), api="completions")
    (rec,) = res.records
    assert (rec.status, rec.error_class) == ("failed", "context_exceeded")
    assert rec.error_message == ("request (6009 tokens) exceeds the available context size (4096 tokens), try "
                                 "increasing it")


def test_an_error_body_about_anything_else_stays_a_server_error():
    wire = b'{"error":{"code":500,"message":"CUDA error: an illegal memory access was encountered"}}\n'
    res, _ = run(lambda i, b: Reply([(0.0, b""), (0.01, wire)]), api="completions")
    (rec,) = res.records
    assert (rec.error_class, rec.error_message) == ("server_error",
                                                    "CUDA error: an illegal memory access was encountered")


@pytest.mark.parametrize("body", [example for _, example, _ in CONTEXT_EXCEEDED])
def test_every_servers_context_refusal_is_a_context_exceeded_request(body):
    """HTTP 400 with each server's words (grid/loadgen/records.py CONTEXT_EXCEEDED): the workload's fault."""
    res, _ = run(lambda i, b: Reply(status=400, body=body.encode()), api="completions")
    (rec,) = res.records
    assert (rec.status, rec.http_status, rec.error_class) == ("failed", 400, "context_exceeded")
    assert body[:100] in rec.error_message


def test_another_400_stays_an_http_error():
    res, _ = run(lambda i, b: Reply(status=400, body=b'{"error":{"message":"temperature must be >= 0"}}'),
                 api="completions")
    (rec,) = res.records
    assert (rec.http_status, rec.error_class) == (400, "http_error")
