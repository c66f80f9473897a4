"""A minimal HTTP/1.1 client on the asyncio transport, for timing streamed responses.

The protocol callback (``_Conn.data_received``) does as little as possible: it stamps ``time.perf_counter_ns()``,
appends ``(stamp, raw bytes)`` to the exchange's list, and wakes the request's task only when the response may
have ended (or while the response head is still being read). Everything else (status line, headers,
``Transfer-Encoding: chunked`` framing, content decoding) is done later by the request's task, in ``Exchange.pump``,
which turns the raw reads into ``(stamp, payload bytes)`` with the stamp of the read that carried the bytes.

End detection for a chunked body without parsing each read: the last 4 bytes of a chunked body are always
``\\r\\n\\r\\n`` (``0\\r\\n`` [trailers] ``\\r\\n``), so a read that ends the body either ends with those 4 bytes or
is shorter than 4 bytes; only such reads wake the task, which then de-chunks (incrementally) to confirm. A
``Content-Length`` body is counted down; a body delimited by the connection close ends with ``connection_lost``.

Errors are aiohttp's exception classes, so callers classify them as before: a malformed response or a broken
connection is an ``aiohttp.ClientPayloadError`` / ``aiohttp.ServerDisconnectedError``; connect failures are the
``OSError`` from the socket; a silent connection raises ``asyncio.TimeoutError``.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_mod
import time
import zlib
from urllib.parse import urlsplit

import aiohttp

_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = 0, 1, 2, 3, 4
# chunked de-framing states
_C_SIZE, _C_DATA, _C_CRLF, _C_TRAILER = 0, 1, 2, 3
_MAX_HEAD = 1 << 16
_MAX_LINE = 1 << 12


class _Conn(asyncio.Protocol):
    """One keep-alive connection. ``reads`` is the current exchange's raw read list (``None`` when idle)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reads: list[tuple[int, bytes]] | None = None
        self.mode = _HEAD
        self.left = 0  # Content-Length bytes still to come (mode _LENGTH)
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
        reads = self.reads
        if reads is None:
            self.broken = True
            return
        reads.append((t, data))
        mode = self.mode
        if mode == _CHUNKED:
            if len(data) >= 4 and not data.endswith(b"\r\n\r\n"):
                return
        elif mode == _LENGTH:
            self.left -= len(data)
            if self.left > 0:
                return
        elif mode == _CLOSE:
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
        self.reads = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Exchange:
    """One request/response on a connection. ``pump()`` turns the connection's raw reads into ``payload``."""

    def __init__(self, conn: _Conn, payload: list[tuple[int, bytes]]) -> None:
        self.conn = conn
        self.raw: list[tuple[int, bytes]] = []
        conn.reads = self.raw
        conn.mode = _HEAD
        conn.left = 0
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
        self._decomp = None

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
        """Process the raw reads that arrived since the last call."""
        raw = self.raw
        while self._i < len(raw) and not self.done:
            ts, data = raw[self._i]
            self._i += 1
            if self.mode == _HEAD:
                rest = self._parse_head(ts, data)
                if rest is None:
                    continue
                conn = self.conn
                # tell the callback how to spot the end from now on
                if self.mode == _LENGTH:
                    # bytes of later reads still to come
                    conn.left = self._left - len(rest) - sum(len(d) for _, d in raw[self._i:])
                conn.mode = self.mode if self.mode != _DONE else _HEAD
                data = rest
            self._feed(ts, data)
        if self.done and self._i < len(raw):
            self.extra = True
        if not self.done and self.conn.closed and self._i >= len(raw):
            if self.mode == _CLOSE:
                if self._decomp is not None:
                    tail = self._decomp.flush()
                    if tail:
                        self.payload.append((self.raw[-1][0] if self.raw else time.perf_counter_ns(), tail))
                self.done = True
            else:
                exc = self.conn.exc
                msg = "the server closed the connection" + ("" if self.status is None else " mid-response")
                if exc is not None:
                    msg += f" ({type(exc).__name__}: {exc})"
                err = aiohttp.ServerDisconnectedError(msg) if self.status is None else \
                    aiohttp.ClientPayloadError(msg)
                raise err

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
        self._all: set[_Conn] = set()

    def request_head(self, headers: dict[str, str], body_len: int) -> bytes:
        lines = [f"POST {self.target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines += [f"Content-Length: {body_len}", "", ""]
        return "\r\n".join(lines).encode("latin-1")

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

    def release(self, conn: _Conn, reuse: bool) -> None:
        conn.reads = None
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
