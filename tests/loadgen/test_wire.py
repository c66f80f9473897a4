"""What real servers send on the wire: SSE line ends, a stream without
[DONE], a multi-byte character cut off at the end, a rate with a cap on requests in flight, user datasets."""

from __future__ import annotations

import asyncio
import json

import pytest

from grid.loadgen.client import StreamParser, get_endpoint
from grid.loadgen.dataset import DatasetArgs, DatasetError, build_dataset, check_dataset, trace_requests
from grid.loadgen.records import Prompt, RequestRecord
from grid.loadgen.runner import LoadPoint, Target, run_load_point
from grid.metrics.loadpoint import summarize
from grid.metrics.request import request_metrics
from grid.storage.schema import request_rows

from .scripted import DONE, Reply, ScriptedServer, cmpl_event, usage

# A stream seen from a real server: one event, then [DONE]; each line ended by CR and events by CR CR.
EVENT = (b'data: {"choices":[{"index":0,"text":" a","finish_reason":"length"}],'
         b'"usage":{"prompt_tokens":8,"completion_tokens":1}}')
ISSUE_STREAM = EVENT + b"\r\r" + b"data: [DONE]\r\r"


def parse(reads, api="completions", stream=True):
    rec = RequestRecord(0, 0, api, stream, 8, 8)
    rec.http_status, rec.send_perf_ns, rec.end_perf_ns = 200, 1, 10_000
    rec.raw_reads = list(reads)
    return StreamParser(get_endpoint(api), rec).finish()


def splits(data: bytes):
    """Every way to cut ``data`` into two reads, and into three (stamps 100, 200, 300)."""
    for i in range(1, len(data)):
        yield [(100, data[:i]), (200, data[i:])]
    for i in range(1, len(data) - 1, 7):
        for j in range(i + 1, len(data)):
            yield [(100, data[:i]), (200, data[i:j]), (300, data[j:])]


def test_issue_stream_with_lone_cr_line_ends_is_ok():
    rec = parse([(100, ISSUE_STREAM)])
    assert (rec.status, rec.error_class) == ("ok", None)
    assert rec.chunk_perf_ns == [100] and rec.chunk_tokens == [1] and rec.text == " a"
    assert rec.output_tokens == 1 and rec.input_tokens == 8 and rec.done_marker is True
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_end_at_every_read_boundary_gives_one_event(eol):
    """LF, CRLF and CR (SSE), cut anywhere, CRLF split between two reads included: one event, never an extra one."""
    two = (cmpl_event(" a") + cmpl_event(" b", finish="length", usage=usage(8, 2)) + DONE).replace(b"\n", eol)
    for reads in splits(two):
        rec = parse(reads)
        assert (rec.status, rec.error_class, rec.text, rec.output_tokens) == ("ok", None, " a b", 2), reads
        assert rec.chunk_tokens == [1, 1] and rec.done_marker, reads
        assert len(rec.chunk_perf_ns) == 2


def test_crlf_split_between_reads_keeps_the_first_reads_stamp():
    first = cmpl_event(" a").replace(b"\n", b"\r\n")  # b'data: {...}\r\n\r\n'
    cut = len(first) - 1  # the last LF opens the next read
    rec = parse([(100, first[:cut]), (200, first[cut:] + (cmpl_event(" b", finish="stop") + DONE).replace(b"\n", b"\r\n"))])
    assert rec.status == "ok" and rec.chunk_perf_ns == [100, 200] and rec.chunk_tokens == [1, 1]


def test_mixed_line_ends_in_one_stream():
    data = cmpl_event(" a").replace(b"\n", b"\r") + cmpl_event(" b").replace(b"\n", b"\r\n") + \
        cmpl_event(" c", finish="stop") + b"data: [DONE]\r\n\r"
    rec = parse([(100, data)])
    assert rec.status == "ok" and rec.text == " a b c" and rec.chunk_tokens == [1, 1, 1] and rec.done_marker


def test_finish_reason_without_done_is_ok_and_recorded():
    rec = parse([(100, cmpl_event(" a")), (200, cmpl_event(" b", finish="length", usage=usage(8, 2)))])
    assert (rec.status, rec.error_class, rec.output_tokens, rec.done_marker) == ("ok", None, 2, False)
    generate = parse([(100, b'data: {"text":"ab","meta_info":{"completion_tokens":2,"prompt_tokens":8,'
                            b'"finish_reason":{"type":"length"}}}\n\n')], api="generate")
    assert (generate.status, generate.done_marker, generate.output_tokens) == ("ok", False, 2)


def test_neither_finish_reason_nor_done_is_truncated():
    rec = parse([(100, cmpl_event(" a")), (200, cmpl_event(" b"))])
    assert (rec.status, rec.error_class, rec.done_marker) == ("failed", "truncated_stream", False)
    assert "neither a finish_reason nor data: [DONE]" in rec.error_message


def test_multibyte_character_cut_at_the_end_is_a_decode_error():
    cut = "é".encode()[:1]  # the first byte of a two-byte character
    rec = parse([(100, cmpl_event(" a")), (200, b'data: {"choices":[{"index":0,"text":"' + cut)])
    assert (rec.status, rec.error_class) == ("failed", "decode_error")
    assert "cut off at the end" in rec.error_message and "byte 31 of 32" in rec.error_message
    three = "語".encode()  # a three-byte character cut after two bytes, inside an otherwise whole event
    mid = parse([(100, b'data: {"choices":[{"index":0,"text":"' + three[:2] + b'","finish_reason":"stop"}]}\n\n')])
    assert (mid.status, mid.error_class) == ("failed", "decode_error") and "invalid UTF-8" in mid.error_message
    body = parse([(100, b'{"choices":[{"index":0,"text":"' + three[:2])], stream=False)
    assert (body.status, body.error_class) == ("failed", "decode_error")
    bad_json = parse([(100, b'data: {"choices": [\n\n')])  # valid UTF-8, invalid JSON: still a parse error
    assert bad_json.error_class == "parse_error"


def test_scripted_server_cr_stream_and_no_done_end_to_end():
    """Over HTTP (chunked): the issue's stream with the CR of each line end and the next byte in separate writes."""
    def script(i, body):
        if body["prompt"][0] == 0:
            half = ISSUE_STREAM.index(b"\r") + 1
            return Reply([(0.01, ISSUE_STREAM[:half]), (0.02, ISSUE_STREAM[half:])])
        return Reply([(0.01, cmpl_event(" a")), (0.02, cmpl_event(" b", finish="stop", usage=usage(4, 2)))])

    async def main():
        async with ScriptedServer(script) as srv:
            prompts = [Prompt(i, 4, 4, input_ids=(i, 1, 2, 3)) for i in range(2)]
            return await run_load_point(Target(srv.url, api="completions"), LoadPoint("concurrency", 2, 2), prompts)

    res = asyncio.run(main())
    assert [(r.status, r.error_class, r.done_marker, r.output_tokens) for r in res.records] == [
        ("ok", None, True, 1), ("ok", None, False, 2)]
    rows = request_rows(res, config_hash="h", trial_id="t", point_index=0)
    assert [r["done_marker"] for r in rows] == [True, False]


def test_rate_with_max_concurrency_waits_for_slots():
    """40 req/s for 6 requests (every 25 ms), at most 2 in flight, each lasting ~100 ms: requests 2.. wait for a slot;
    the wait is stored per request and summarised; TTFT counts from the actual send."""
    def script(i, body):
        return Reply([(0.050, cmpl_event(" a")), (0.100, cmpl_event(" b", finish="stop", usage=usage(4, 2)))])

    async def main():
        async with ScriptedServer(script) as srv:
            prompts = [Prompt(i, 4, 4, input_ids=(i, 1, 2, 3)) for i in range(6)]
            point = LoadPoint("rate", 40.0, 6, arrival="constant", max_concurrency=2)
            return await run_load_point(Target(srv.url, api="completions"), point, prompts), srv

    res, srv = asyncio.run(main())
    recs = res.records
    assert all(r.status == "ok" for r in recs)
    waits = [request_metrics(r).slot_wait_ms for r in recs]
    assert waits[0] < 10 and waits[1] < 10  # two free slots
    # request k >= 2 gets the slot of request k-2 (~100 ms after that one was sent): due at 25 k ms
    for k in range(2, 6):
        assert recs[k].send_perf_ns >= recs[k - 2].end_perf_ns
        assert 40 < waits[k] < 400
    # never more than 2 in flight on the client
    spans = [(r.send_perf_ns, r.end_perf_ns) for r in recs]
    for s, _ in spans:
        assert sum(1 for a, b in spans if a <= s < b) <= 2
    for r in recs:
        m = request_metrics(r)
        assert m.ttft_ms == pytest.approx((r.first_token_perf_ns - r.send_perf_ns) / 1e6)
        assert m.client_queue_ms >= m.slot_wait_ms
    s = summarize(res)
    assert s["slot_wait_max_ms"] == pytest.approx(max(waits)) and s["slot_wait_mean_ms"] == pytest.approx(
        sum(waits) / 6)
    rows = request_rows(res, config_hash="h", trial_id="t", point_index=0)
    assert [r["slot_wait_ms"] for r in rows] == pytest.approx(waits)
    uncapped = request_metrics(RequestRecord(0, 0, "completions", True, 4, 4, scheduled_perf_ns=5, send_perf_ns=6,
                                             end_perf_ns=7))
    assert request_metrics(RequestRecord(0, 0, "completions", True, 4, 4, scheduled_perf_ns=0, send_perf_ns=4_000_000,
                                         end_perf_ns=5_000_000, slot_wait_ns=3_000_000), 2.0).slot_wait_ms == 6.0
    assert uncapped.slot_wait_ms is None


def test_max_concurrency_only_caps_open_loops():
    with pytest.raises(ValueError, match="max_concurrency caps an open loop"):
        LoadPoint("concurrency", 4, 8, max_concurrency=2)
    with pytest.raises(ValueError, match=">= 1"):
        LoadPoint("rate", 4, 8, max_concurrency=0)


# -- user datasets -----------------------------------------------------------------------------------------------

def _sharegpt(tmp_path, n=3):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": f"tell me about item {i} please"},
                                                   {"from": "gpt", "value": "x" * 40}]} for i in range(n)]))
    return str(path)


def _trace(tmp_path, lines):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return str(path)


def test_sharegpt_dataset_by_kind(tmp_path):
    path = _sharegpt(tmp_path)
    ds = build_dataset("sharegpt", DatasetArgs(5, 1, 1, 1.0, 100, 7, path))
    assert len(ds.prompts) == 3 and ds.offsets_s is None  # fewer than asked: the runner cycles through them
    assert all(p.text.startswith("tell me about item") and p.output_len == 10 and p.input_len == 7
               for p in ds.prompts)
    assert sorted(p.text for p in ds.prompts) == [f"tell me about item {i} please" for i in range(3)]


def test_trace_dataset_lengths_and_arrivals(tmp_path):
    path = _trace(tmp_path, [{"timestamp": 1000, "input_length": 5, "output_length": 2, "hash_ids": [1]},
                             {"timestamp": 1250, "input_length": 3, "output_length": 4},
                             {"timestamp": 1250, "input_length": 1, "output_length": 1}])
    ds = build_dataset("trace", DatasetArgs(3, 1, 1, 1.0, 50, 0, path))
    assert ds.offsets_s == (0.0, 0.25, 0.25)
    assert [(p.input_len, len(p.input_ids), p.output_len) for p in ds.prompts] == [(5, 5, 2), (3, 3, 4), (1, 1, 1)]
    assert [r.offset_ms for r in trace_requests(path)] == [0.0, 250.0, 250.0]


def test_trace_point_replays_timestamps(tmp_path):
    def script(i, body):
        return Reply([(0.005, cmpl_event(" a", finish="stop", usage=usage(4, 1)))])

    offsets = (0.0, 0.1, 0.1, 0.3)

    async def main():
        async with ScriptedServer(script) as srv:
            prompts = [Prompt(i, 4, 4, input_ids=(i, 1, 2, 3)) for i in range(4)]
            point = LoadPoint("trace", 2.0, 4, offsets_s=offsets)  # twice as fast as recorded
            return await run_load_point(Target(srv.url, api="completions"), point, prompts)

    res = asyncio.run(main())
    assert [r.scheduled_offset_ns for r in res.records] == [0, 50_000_000, 50_000_000, 150_000_000]
    assert all(r.status == "ok" for r in res.records)


@pytest.mark.parametrize("lines, message", [
    ([{"timestamp": 0, "input_length": 4}], "line 1: 'output_length' must be a number"),
    ([{"timestamp": 5, "input_length": 4, "output_length": 1}, {"timestamp": 1, "input_length": 4,
                                                                "output_length": 1}], "line 2: 'timestamp' 1 is earlier"),
    ([{"timestamp": 0, "input_length": 0, "output_length": 1}], "line 1: 'input_length' must be a whole number >= 1"),
])
def test_bad_trace_names_line_and_key(tmp_path, lines, message):
    path = _trace(tmp_path, lines)
    with pytest.raises(DatasetError, match=message) as err:
        check_dataset("trace", path)
    assert str(err.value).startswith("load.dataset_path: ")


def test_dataset_checks_name_the_key(tmp_path):
    with pytest.raises(DatasetError, match=r"load.dataset: unknown kind 'alpaca'; allowed: \['random', 'random_ids', 'sessions', "
                                           r"'sharegpt', 'trace'\]"):
        check_dataset("alpaca", None)
    with pytest.raises(DatasetError, match="load.dataset_path: required with load.dataset=sharegpt"):
        check_dataset("sharegpt", None)
    with pytest.raises(DatasetError, match="load.dataset_path: .*nope.json is not a file"):
        check_dataset("sharegpt", str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"conversations": [{"from": "human"}, {"from": "gpt", "value": "y"}]}]')
    with pytest.raises(DatasetError, match=r"entry 0, conversations\[0\] has no string 'value'"):
        check_dataset("sharegpt", str(bad))
    with pytest.raises(DatasetError, match="load.dataset_path: not used by load.dataset=random"):
        check_dataset("random", str(bad))
    check_dataset("sharegpt", _sharegpt(tmp_path))
