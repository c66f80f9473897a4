"""A minimal HTTP/1.1 client on the asyncio transport, for timing streamed responses.

The protocol callback (``_Conn.data_received``) stamps ``time.perf_counter_ns()`` first, then removes the
``Transfer-Encoding: chunked`` framing of that read (a fast path for the usual read that holds exactly one whole
chunk, i.e. one SSE event) and appends ``(stamp, payload bytes)`` to the exchange's payload list. It wakes the
request's task only while the response head is being read and when the body is complete (last chunk, counted
``Content-Length``, or ``connection_lost`` for a body delimited by the close), so the task sleeps through a stream.
The head (status line, headers) is parsed by the task (``Exchange.pump``); body bytes that came with the head keep
the stamp of their read. No parsing of the payload (SSE, JSON) happens here.

Errors are aiohttp's exception classes, so callers classify them as before: a malformed response or a broken
connection is an ``aiohttp.ClientPayloadError`` / ``aiohttp.ServerDisconnectedError``; connect failures are the
``OSError`` from the socket; a silent connection raises ``asyncio.TimeoutError``.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_mod
import time
import zlib
from typing import Any
from urllib.parse import urlsplit

import aiohttp

_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = 0, 1, 2, 3, 4
# chunked de-framing states
_C_SIZE, _C_DATA, _C_CRLF, _C_TRAILER = 0, 1, 2, 3
_MAX_HEAD = 1 << 16
_MAX_LINE = 1 << 12


class _Conn(asyncio.Protocol):
    """One keep-alive connection; ``ex`` is the exchange that owns it (``None`` when idle)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.ex: Exchange | None = None  # the exchange that owns the connection (None when idle)
        self.waiter: asyncio.Future | None = None
        self.last_rx_ns = 0
        self.closed = False
        self.exc: BaseException | None = None
        self.broken = False  # bytes arrived while idle: the connection is out of step, never reuse it

    # -- asyncio callbacks --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        self.last_rx_ns = t
        ex = self.ex
        if ex is None:
            self.broken = True
            return
        if ex.mode == _CHUNKED and ex._cstate == _C_SIZE and not ex._cbuf:
            # fast path: the read is exactly one whole chunk (the usual case for one SSE event per write)
            nl = data.find(b"\r\n", 0, 18)
            if nl > 0:
                try:
                    size = int(data[:nl], 16)
                except ValueError:
                    size = 0
                end = nl + 2 + size
                if size > 0 and end + 2 == len(data) and data.endswith(b"\r\n"):
                    if ex._decomp is None:
                        ex.payload.append((t, data[nl + 2:end]))
                        return
        if ex.mode == _HEAD:
            ex.raw.append((t, data))
        else:
            try:
                ex._feed(t, data)
            except Exception as exc:  # a malformed response: the task raises it
                ex.error = exc
            if not (ex.done or ex.error is not None):
                return
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.exc = exc
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    # -- helpers --
    def usable(self) -> bool:
        return not (self.closed or self.broken or self.transport is None or self.transport.is_closing())

    def close(self) -> None:
        self.ex = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Exchange:
    """One request/response on a connection. ``pump()`` turns the connection's raw reads into ``payload``."""

    def __init__(self, conn: _Conn, payload: list[tuple[int, bytes]]) -> None:
        self.conn = conn
        self.raw: list[tuple[int, bytes]] = []  # reads of the response head (and what came with it)
        self.error: BaseException | None = None
        conn.ex = self
        self.payload = payload  # (stamp, decoded body bytes) appended as they are de-framed
        self._i = 0  # raw reads consumed
        self._head = b""
        self._head_ts = 0
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.mode = _HEAD
        self.done = False
        self.extra = False  # bytes after the end of the response
        self._left = 0
        self._cstate = _C_SIZE
        self._cbuf = b""
        self._decomp: Any = None  # a zlib decompressor while the body is gzip or deflate encoded

    # -- head --
    def _parse_head(self, ts: int, data: bytes) -> bytes | None:
        """Feed head bytes; return the body bytes that followed the head once it is complete, else None."""
        buf = self._head + data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise aiohttp.ClientPayloadError("response head too large")
                self._head = buf
                return None
            head, rest = buf[:end], buf[end + 4:]
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise aiohttp.ClientPayloadError(f"bad status line: {lines[0][:200]!r}")
            status = int(parts[1])
            if 100 <= status < 200 and status != 101:  # interim response (100 Continue): skip it
                buf = rest
                continue
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise aiohttp.ClientPayloadError(f"bad header line: {line[:200]!r}")
                key = name.strip().lower()
                value = value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
            self.status, self.headers = status, headers
            version = parts[0]
            conn_hdr = headers.get("connection", "").lower()
            te = headers.get("transfer-encoding", "").lower()
            if status in (204, 304):
                self.mode, self.done = _DONE, True
            elif "chunked" in te:
                self.mode = _CHUNKED
            elif "content-length" in headers:
                try:
                    self._left = int(headers["content-length"])
                except ValueError:
                    raise aiohttp.ClientPayloadError("bad Content-Length") from None
                if self._left < 0:
                    raise aiohttp.ClientPayloadError("bad Content-Length")
                self.mode = _LENGTH
                if self._left == 0:
                    self.mode, self.done = _DONE, True
            else:
                self.mode = _CLOSE
            self.keep_alive = self.mode != _CLOSE and (
                "close" not in conn_hdr if version != "HTTP/1.0" else "keep-alive" in conn_hdr)
            enc = headers.get("content-encoding", "identity").strip().lower()
            if enc in ("gzip", "x-gzip"):
                self._decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif enc == "deflate":
                self._decomp = zlib.decompressobj()
            self._head = b""
            self._head_ts = ts
            return rest

    # -- body --
    def _emit(self, ts: int, data: bytes) -> None:
        if self._decomp is not None:
            data = self._decomp.decompress(data)
        if data:
            self.payload.append((ts, data))

    def _feed_chunked(self, ts: int, data: bytes) -> None:
        if self._cbuf:
            data, self._cbuf = self._cbuf + data, b""
        pos, n = 0, len(data)
        parts = []
        while pos < n:
            st = self._cstate
            if st == _C_DATA:
                take = min(self._left, n - pos)
                parts.append(data[pos:pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._cstate = _C_CRLF
            elif st == _C_CRLF:
                if n - pos < 2:
                    self._cbuf = data[pos:]
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise aiohttp.ClientPayloadError("chunk not followed by CRLF")
                pos += 2
                self._cstate = _C_SIZE
            else:  # a size line or a trailer line
                nl = data.find(b"\r\n", pos)
                if nl < 0:
                    if n - pos > _MAX_LINE:
                        raise aiohttp.ClientPayloadError("chunk size line too long")
                    self._cbuf = data[pos:]
                    break
                line = data[pos:nl]
                pos = nl + 2
                if st == _C_SIZE:
                    try:
                        size = int(line.split(b";", 1)[0].strip(), 16)
                    except ValueError:
                        raise aiohttp.ClientPayloadError(f"bad chunk size {line[:40]!r}") from None
                    if size < 0:
                        raise aiohttp.ClientPayloadError("bad chunk size")
                    if size:
                        self._left, self._cstate = size, _C_DATA
                    else:
                        self._cstate = _C_TRAILER
                elif not line:  # the empty line after the last chunk (and trailers): the body is complete
                    self.done = True
                    self.extra = pos < n
                    break
        if parts:
            self._emit(ts, parts[0] if len(parts) == 1 else b"".join(parts))

    def _feed(self, ts: int, data: bytes) -> None:
        if not data or self.done:
            if data:
                self.extra = True
            return
        mode = self.mode
        if mode == _CHUNKED:
            self._feed_chunked(ts, data)
        elif mode == _LENGTH:
            if len(data) >= self._left:
                if len(data) > self._left:
                    self.extra = True
                    data = data[:self._left]
                self._left = 0
                self.done = True
            else:
                self._left -= len(data)
            self._emit(ts, data)
        else:  # _CLOSE
            self._emit(ts, data)

    def pump(self) -> None:
        """Parse the response head once it has arrived and de-frame the body bytes that came with it; later body
        reads are de-framed by the protocol callback itself. Raises a malformed response or a broken connection."""
        if self.error is not None:
            raise self.error
        raw = self.raw
        while self._i < len(raw) and self.mode == _HEAD:
            ts, data = raw[self._i]
            self._i += 1
            rest = self._parse_head(ts, data)
            if rest is not None:
                later = raw[self._i:]
                self._i = len(raw)
                self._feed(ts, rest)
                for ts2, data2 in later:
                    self._feed(ts2, data2)
        if not self.done and self.conn.closed:
            if self.mode == _CLOSE:
                if self._decomp is not None:
                    tail = self._decomp.flush()
                    if tail:
                        self.payload.append((self.conn.last_rx_ns, tail))
                self.done = True
            else:
                exc = self.conn.exc
                msg = "the server closed the connection" + ("" if self.status is None else " mid-response")
                if exc is not None:
                    msg += f" ({type(exc).__name__}: {exc})"
                raise aiohttp.ServerDisconnectedError(msg) if self.status is None else \
                    aiohttp.ClientPayloadError(msg)

    @property
    def head_ts(self) -> int:
        return self._head_ts

    def reusable(self) -> bool:
        return self.done and self.keep_alive and not self.extra and self.conn.usable()


class Pool:
    """Keep-alive connections to one origin. ``acquire`` reuses an idle connection or opens a new one."""

    def __init__(self, url: str, connect_timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme in {url!r}")
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl_mod.create_default_context() if parts.scheme == "https" else None
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Conn] = []
        self._prefix: dict[tuple, bytes] = {}
        self._all: set[_Conn] = set()

    def request_bytes(self, headers: dict[str, str], body: bytes) -> bytes:
        """``POST`` of ``body`` with ``headers`` (the head up to Content-Length is built once per header set)."""
        key = tuple(headers.items())
        prefix = self._prefix.get(key)
        if prefix is None:
            lines = [f"POST {self.target} HTTP/1.1", f"Host: {self.host_header}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            prefix = self._prefix[key] = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        return b"%s%d\r\n\r\n%s" % (prefix, len(body), body)

    async def acquire(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            self._drop(conn)
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl), self.connect_timeout_s)
        self._all.add(conn)
        return conn

    async def prewarm(self, n: int) -> None:
        """Open up to ``n`` idle connections ahead of the load (failures are left to the requests themselves)."""
        loop = asyncio.get_running_loop()
        need = n - len(self._idle)
        if need <= 0:
            return
        got = await asyncio.gather(*(asyncio.wait_for(
            loop.create_connection(_Conn, self.host, self.port, ssl=self.ssl), self.connect_timeout_s)
            for _ in range(need)), return_exceptions=True)
        for item in got:
            if isinstance(item, tuple):
                self._all.add(item[1])
                self._idle.append(item[1])

    def release(self, conn: _Conn, reuse: bool) -> None:
        conn.ex = None
        conn.waiter = None
        if reuse and conn.usable():
            self._idle.append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        conn.close()
        self._all.discard(conn)

    def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
