"""One request through each prefill-decode pair before load (grid/server/pairs.py), against scripted pairs that
keep SGLang's protocol: the prefill server registers each request's bootstrap room, the decode server answers once
the room its body names has been prefilled at the bootstrap address its body names (the KV "arrived"), else fails as
a transfer that never completes. (SGLang's prefill-decode mode cannot run on this CPU machine, docs/topology.md; the
request's fields are the ones a released decode server was seen to accept and to refuse without.)"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grid.server.pairs import PAIR_PROMPT, PairServer, check_pairs, pair_body
from grid.server.process import free_port

ROOMS: dict[tuple[str, int, int], str] = {}  # (bootstrap host, bootstrap port, room) -> the prefill server's name


def _server(role: str, name: str, bootstrap_port: int | None = None, broken: bool = False) -> tuple[str, list]:
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            key = (body.get("bootstrap_host"), body.get("bootstrap_port"), body.get("bootstrap_room"))
            if role == "prefill" and not broken and body.get("bootstrap_port") == bootstrap_port:
                ROOMS[key] = name
                status, out = 200, {"text": "", "meta_info": {"id": "p"}}
            elif role == "prefill":
                status, out = 500, {"error": {"message": "KVTransferError: transfer aborted"}}
            else:
                deadline = time.monotonic() + 2
                while key not in ROOMS and time.monotonic() < deadline:
                    time.sleep(0.01)
                status, out = (200, {"text": " Paris"}) if key in ROOMS else \
                    (500, {"error": {"message": "Decode handshake failed: KVTransferError"}})
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", seen


def test_the_pair_body_is_the_routers():
    body = pair_body(PairServer("prefill 0", "http://10.0.0.7:30001", 8998), 12345)
    assert body == {"text": PAIR_PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0},
                    "bootstrap_host": "10.0.0.7", "bootstrap_port": 8998, "bootstrap_room": 12345}
    with pytest.raises(ValueError, match="prefill 1: a prefill server needs its bootstrap port"):
        pair_body(PairServer("prefill 1", "http://p:1"), 1)


def test_every_pair_gets_one_request_with_its_own_room():
    p0, seen_p0 = _server("prefill", "prefill 0", 9001)
    p1, seen_p1 = _server("prefill", "prefill 1", 9002)
    d0, seen_d0 = _server("decode", "decode 2")
    prefill = [PairServer("prefill 0", p0, 9001), PairServer("prefill 1", p1, 9002)]
    assert check_pairs(prefill, [PairServer("decode 2", d0)], seed=7) == []
    assert len(seen_p0) == len(seen_p1) == 1 and len(seen_d0) == 2
    assert [b["bootstrap_port"] for b in seen_d0] == [9001, 9002]  # each pair names its own prefill server
    assert seen_d0[0] == seen_p0[0] and seen_d0[1] == seen_p1[0]  # both halves carry the same body
    assert seen_d0[0]["bootstrap_room"] != seen_d0[1]["bootstrap_room"]


def test_a_pair_whose_transfer_fails_is_named_with_both_sides_words():
    good, _ = _server("prefill", "prefill 0", 9011)
    bad, _ = _server("prefill", "prefill 1", 9012, broken=True)
    d0, _ = _server("decode", "decode 2")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens
    failed = check_pairs([PairServer("prefill 0", good, 9011), PairServer("prefill 1", bad, 9012)],
                         [PairServer("decode 2", d0), PairServer("decode 3", dead)], timeout_s=10, seed=1)
    assert failed[0].startswith("prefill 0 -> decode 3: decode: no answer (URLError"), failed
    assert failed[1:] == [
        'prefill 1 -> decode 2: decode: HTTP 500: {"error": {"message": "Decode handshake failed: KVTransferError"}}; '
        'prefill: HTTP 500: {"error": {"message": "KVTransferError: transfer aborted"}}',
        failed[2]]
    assert failed[2].startswith("prefill 1 -> decode 3: decode: no answer (URLError") and \
        failed[2].endswith('prefill: HTTP 500: {"error": {"message": "KVTransferError: transfer aborted"}}')
    assert len(failed) == 3  # prefill 0 -> decode 2 served its request
