"""Event JSON goes through orjson with the standard library behind it: the values and the accepted inputs must be
exactly those of ``json.loads``; request bodies must round-trip."""

from __future__ import annotations

import json
import random

import pytest

from grid.loadgen.client import _loads_event, dumps_body


def _std(data: bytes):
    return json.loads(data)


@pytest.mark.parametrize("data", [
    b'{"choices":[{"index":0,"text":" t","finish_reason":null}]}',
    b'{"text":"\\u00e9\\ud83d\\ude00","meta_info":{"completion_tokens":3}}',
    b'{"logprob": NaN, "other": -Infinity}',  # orjson refuses these literals; json takes them
    b'{"lone": "\\ud800"}',  # a lone surrogate escape
    b' {"padded": true} ',
    b'[1, 2, 3]',
    b'"just a string"',
    b'{"a": 1, "a": 2}',  # duplicate keys: the last wins in both
    '{"t": "caf\u00e9"}'.encode(),
])
def test_same_values_as_the_standard_library(data):
    got = _loads_event(data)
    want = _std(data)
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert type(got) is type(want)


@pytest.mark.parametrize("data", [b'{"choices": [', b'{"a": }', b"", b"\xff\xfe{}", b'{"a": 1} trailing'])
def test_invalid_json_raises_value_error_like_the_standard_library(data):
    with pytest.raises(ValueError):
        _std(data)
    with pytest.raises(ValueError):
        _loads_event(data)


def test_integer_beyond_64_bits_reads_as_a_float():
    assert _loads_event(b'{"completion_tokens": 123456789012345678901234567890}') == {
        "completion_tokens": 1.2345678901234568e29}


def test_random_documents_agree():
    rng = random.Random(7)

    def value(depth: int):
        k = rng.randrange(7 if depth < 3 else 4)
        if k == 0:
            return rng.randrange(-10**6, 10**6)
        if k == 1:
            return rng.random() * 10 ** rng.randrange(-5, 5)
        if k == 2:
            return "".join(rng.choice("ab \u00e9\u4e2d\"\\\n\t\U0001f600") for _ in range(rng.randrange(6)))
        if k == 3:
            return rng.choice([None, True, False])
        if k in (4, 5):
            return {f"k{rng.randrange(5)}": value(depth + 1) for _ in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    for _ in range(3000):
        doc = {"choices": [value(0)], "usage": value(0)}
        data = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
        assert _loads_event(data) == _std(data)


def test_request_bodies_round_trip():
    body = {"prompt": [1, 2, 3], "max_tokens": 16, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0.0, "text": "caf\u00e9 \U0001f600", "huge": 2**70}
    assert json.loads(dumps_body(body)) == body
    with pytest.raises((TypeError, ValueError)):
        dumps_body({"x": object()})


def test_a_last_line_without_newline_is_parsed_with_the_last_reads_stamp():
    from grid.loadgen.client import StreamParser, get_endpoint
    from grid.loadgen.records import RequestRecord

    def parse(reads):
        rec = RequestRecord(0, 0, "completions", True, 8, 4)
        rec.http_status, rec.end_perf_ns = 200, 900
        rec.raw_reads = list(reads)
        return StreamParser(get_endpoint("completions"), rec).finish()

    ev = b'data: {"choices":[{"index":0,"text":"%s","finish_reason":null}]}'
    rec = parse([(100, ev % b"a" + b"\n\n"), (200, ev % b"b" + b"\n\ndata: [DO"), (300, b"NE]")])
    assert rec.chunk_perf_ns == [100, 200] and rec.chunk_tokens == [1, 1] and rec.text == "ab"
    assert rec.done_marker and rec.status == "ok" and rec.output_tokens == 2
    cut = parse([(100, ev % b"a" + b"\n\n"), (250, ev % b"b")])  # the stream ends inside an event, no newline
    assert cut.chunk_perf_ns == [100, 250] and cut.text == "ab"
    assert cut.status == "failed" and cut.error_class == "truncated_stream"
