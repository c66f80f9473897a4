"""The minimal HTTP/1.1 client (grid.loadgen.http): framing under every split of the bytes into reads."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from grid.loadgen.http import Exchange, _Conn


def _chunked(pieces: list[bytes], ext: bool = False, trailer: bool = False) -> bytes:
    out = b""
    for p in pieces:
        out += f"{len(p):x}".encode() + (b";x=1" if ext else b"") + b"\r\n" + p + b"\r\n"
    return out + b"0\r\n" + (b"X-T: 1\r\n" if trailer else b"") + b"\r\n"


def _run(reads: list[bytes], close: bool = False) -> tuple[Exchange, list[tuple[int, bytes]]]:
    """Feed the reads to a connection as the event loop would, pumping like the request task."""

    async def main():
        conn = _Conn()
        payload: list[tuple[int, bytes]] = []
        ex = Exchange(conn, payload)
        for data in reads:
            conn.data_received(data)
            ex.pump()
        if close:
            conn.connection_lost(None)
        ex.pump()
        return ex, payload

    return asyncio.run(main())


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("seed", range(40))
def test_chunked_body_any_split(seed):
    rnd = random.Random(seed)
    events = [b"data: {\"n\": %d}\n\n" % k + b"\r\n" * rnd.randint(0, 2) for k in range(rnd.randint(1, 12))]
    raw = HEAD_CHUNKED + _chunked(events, ext=rnd.random() < 0.3, trailer=rnd.random() < 0.3)
    cuts = sorted(rnd.sample(range(1, len(raw)), rnd.randint(0, min(20, len(raw) - 1))))
    reads = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    ex, payload = _run(reads)
    assert ex.status == 200 and ex.done and ex.reusable() is False  # no transport in this test
    assert ex.keep_alive and not ex.extra
    assert b"".join(d for _, d in payload) == b"".join(events)
    stamps = [t for t, _ in payload]
    assert stamps == sorted(stamps)


def test_one_chunk_per_read_keeps_each_read_stamp():
    events = [b"data: %d\n\n" % k for k in range(5)]
    reads = [HEAD_CHUNKED] + [_chunked([e])[:-5] for e in events] + [b"0\r\n\r\n"]
    ex, payload = _run(reads)
    assert ex.done and [d for _, d in payload] == events
    assert len({t for t, _ in payload}) == 5


def test_content_length_and_close_delimited_bodies():
    body = b'{"a": 1}'
    ex, payload = _run([b"HTTP/1.1 500 Internal\r\nContent-Length: 8\r\n\r\n" + body[:3], body[3:]])
    assert ex.status == 500 and ex.done and b"".join(d for _, d in payload) == body
    ex, payload = _run([b"HTTP/1.0 200 OK\r\n\r\n" + body[:2], body[2:]], close=True)
    assert ex.done and not ex.keep_alive and b"".join(d for _, d in payload) == body
    ex, payload = _run([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n", body])
    assert ex.status == 200 and ex.done and b"".join(d for _, d in payload) == body


def test_broken_responses_raise_aiohttp_errors():
    with pytest.raises(aiohttp.ClientPayloadError):  # the stream stops mid-body
        _run([HEAD_CHUNKED + b"5\r\nab"], close=True)
    with pytest.raises(aiohttp.ServerDisconnectedError):  # nothing at all came back
        _run([], close=True)
    with pytest.raises(aiohttp.ClientPayloadError):
        _run([HEAD_CHUNKED + b"zz\r\nab\r\n"])
    with pytest.raises(aiohttp.ClientPayloadError):
        _run([b"HTTX 200\r\n\r\n"])
