"""The client must not be the bottleneck: 256 concurrent streams, arrival stamps within a few ms of the server's
write stamps (server in its own process; both on the same monotonic clock)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from grid.loadgen.records import Prompt
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync
from grid.metrics.loadpoint import summarize

CONCURRENCY, EVENTS, GAP_S = 256, 20, 0.05


@pytest.fixture
def server(tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("stream_server.py")), str(port_file),
                             str(EVENTS), str(GAP_S)])
    try:
        deadline = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "stream server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        proc.terminate()
        proc.wait(10)


def _client_delays_ms(server) -> tuple[np.ndarray, object]:
    """Arrival stamp minus the server's write stamp of every token event of one 256-stream load point (ms)."""
    prompts = [Prompt(i, 4, EVENTS, input_ids=(i, 1, 2, 3)) for i in range(CONCURRENCY)]
    res = run_load_point_sync(Target(server, api="completions"), LoadPoint("concurrency", CONCURRENCY, CONCURRENCY),
                              prompts, read_timeout_s=30)
    assert [r.status for r in res.records].count("ok") == CONCURRENCY
    delays = []
    for r in res.records:
        stamps = [int(x) for x in r.text.split("|") if x]
        arrivals = [t for t, k in zip(r.chunk_perf_ns, r.chunk_tokens) if k]
        assert len(stamps) == len(arrivals) == EVENTS and r.output_tokens == EVENTS
        delays += [(a - s) / 1e6 for a, s in zip(arrivals, stamps)]
    return np.array(delays), res


# Measured by this test: p50 0.02 ms, p99 ~2.7 ms on an otherwise idle 2-core machine; p50 0.02-3 ms and p99 13-40 ms
# at load averages of 9-17 on 2 cores (other test suites running), and once p50 31 ms, p99 488 ms right after the Ray
# tests of a full run on such a machine. A stamp path that waits for the next read delays every event by about an
# inter-event gap (GAP_S = 50 ms), on any machine and in every attempt: the median bound (half a gap) catches it.
# The p99 bound (5 gaps) catches a path that loses seconds. Up to 3 attempts, so that a burst of load from other
# processes does not fail the test; a broken stamp path fails all three.
P50_MAX_MS, P99_MAX_MS, ATTEMPTS = GAP_S * 1000 / 2, GAP_S * 1000 * 5, 3


@pytest.mark.skipif(sys.platform != "linux", reason="needs a system-wide CLOCK_MONOTONIC perf_counter")
def test_256_streams_small_client_error(server):
    seen = []
    for _ in range(ATTEMPTS):
        d, res = _client_delays_ms(server)
        assert (d > 0).all()
        p50, p99 = float(np.percentile(d, 50)), float(np.percentile(d, 99))
        seen.append((round(p50, 2), round(p99, 2)))
        print(f"client delay over {d.size} events (ms): p50 {p50:.2f} p99 {p99:.2f} max {d.max():.2f} "
              f"on {os.cpu_count()} cpus")
        if p50 < P50_MAX_MS and p99 < P99_MAX_MS:
            break
    assert p50 < P50_MAX_MS and p99 < P99_MAX_MS, f"client delay (p50, p99) ms per attempt: {seen}"
    s = summarize(res)
    assert s["concurrency_peak"] == CONCURRENCY and s["completed"] == CONCURRENCY


def test_connections_stamp_socket_deliveries():
    """Reads are stamped and de-framed in the protocol callback: the request task is woken for the head and the end
    only, and each event keeps the stamp of the read that carried it."""
    import asyncio

    from grid.loadgen.http import Exchange, _Conn

    async def main():
        conn = _Conn()
        payload: list = []
        ex = Exchange(conn, payload)
        wakes = 0

        def arm():
            fut = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda _: None)
            conn.waiter = fut
            return fut

        fut = arm()
        conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        wakes += fut.done()
        ex.pump()
        fut = arm()
        for k in range(10):
            conn.data_received(b"9\r\ndata: %d\n\n\r\n" % k)
        wakes += fut.done()
        conn.data_received(b"0\r\n\r\n")
        wakes += fut.done()
        return wakes, payload, ex.done

    wakes, payload, done = asyncio.run(main())
    assert wakes == 2 and done
    assert [d for _, d in payload] == [b"data: %d\n\n" % k for k in range(10)]
    assert [t for t, _ in payload] == sorted({t for t, _ in payload})  # one stamp per read, in order


def test_sync_entry_point_never_formats_the_records(server, monkeypatch):
    """``run_load_point_sync`` returns the result without ``repr`` of it: CPython 3.11's ``asyncio.Runner.run``
    formats its main task (and so the task's result) when it restores the SIGINT handler, which for a load point's
    records would cost a ``repr`` of every request."""
    from grid.loadgen.records import RequestRecord

    formatted = []  # counted, not raised: reprlib swallows exceptions from __repr__
    monkeypatch.setattr(RequestRecord, "__repr__", lambda self: formatted.append(self) or "RequestRecord(...)")
    prompts = [Prompt(i, 4, EVENTS, input_ids=(i, 1, 2, 3)) for i in range(4)]
    res = run_load_point_sync(Target(server, api="completions"), LoadPoint("concurrency", 4, 4), prompts,
                              read_timeout_s=30)
    assert [r.status for r in res.records] == ["ok"] * 4
    assert [r.output_tokens for r in res.records] == [EVENTS] * 4
    assert formatted == []
