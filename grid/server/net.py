"""HTTP requests with a connect timeout of their own.

``urllib.request.urlopen(..., timeout=T)`` uses ``T`` for the TCP connect too, and grid's read timeouts are long (a
correctness probe against a real server may wait 600 s for an answer). A port held by a process that no longer
accepts (a leftover whose accept queue is full: the kernel drops the SYNs) then holds the caller in ``connect`` for the
whole read timeout. :func:`urlopen` connects within ``CONNECT_TIMEOUT_S`` (or ``timeout``, when shorter) and keeps
``timeout`` for every read. The load generator's own client has its connect timeout in grid/loadgen/http.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.request

CONNECT_TIMEOUT_S = 10.0  # a server on this machine or the cluster's network accepts in well under a second


def _create_connection(address, timeout=None, source_address=None, *args, **kwargs):
    """``socket.create_connection`` that connects within ``CONNECT_TIMEOUT_S`` and then reads with ``timeout``."""
    limit = CONNECT_TIMEOUT_S if not isinstance(timeout, (int, float)) else min(timeout, CONNECT_TIMEOUT_S)
    sock = socket.create_connection(address, limit, source_address, *args, **kwargs)
    sock.settimeout(timeout if isinstance(timeout, (int, float)) else None)
    return sock


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _create_connection  # what HTTPConnection.connect calls (CPython http/client.py)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _create_connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_HTTPSConnection, req, context=self._context)


_OPENER = urllib.request.build_opener(_HTTPHandler, _HTTPSHandler)


def urlopen(request, timeout: float, data: bytes | None = None):
    """``urllib.request.urlopen(request, data, timeout)`` whose TCP connect gives up after ``CONNECT_TIMEOUT_S``
    (``timeout`` when shorter). Raises what urlopen raises (``URLError`` wrapping ``TimeoutError`` for a connect that
    timed out, ``HTTPError``, ``TimeoutError`` for a read)."""
    return _OPENER.open(request, data, timeout)


def get_json(url: str, api_key: str | None = None, timeout: float = 10.0):
    """The JSON body of ``GET url`` (``api_key`` sent as ``Authorization: Bearer``), through :func:`urlopen`. Raises
    ``OSError`` when nothing answers or the status is an error (``HTTPError``), ``ValueError`` for a body that is not
    JSON."""
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())
