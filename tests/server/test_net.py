"""Every HTTP request grid makes outside the load generator connects within grid.server.net.CONNECT_TIMEOUT_S, not
within its (long) read timeout: a port whose holder no longer accepts connections must not hold a trial for minutes."""

import ast
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grid.server import net
from tests.timing import slack

GRID = Path(__file__).resolve().parents[2] / "grid"


@pytest.fixture
def unaccepting_port():
    """A listener that never accepts, its accept queue full: the kernel drops further SYNs, so connect() hangs."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fill = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(c)
    time.sleep(0.2)
    yield port
    for c in fill:
        c.close()
    srv.close()


def test_connect_gives_up_after_connect_timeout_not_read_timeout(unaccepting_port, monkeypatch):
    url = f"http://127.0.0.1:{unaccepting_port}/health"
    t0 = time.monotonic()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2.0)  # the standard library waits the whole read timeout
    assert time.monotonic() - t0 >= 1.9
    monkeypatch.setattr(net, "CONNECT_TIMEOUT_S", 0.3)
    t0 = time.monotonic()
    with pytest.raises(urllib.error.URLError, match="timed out"):
        net.urlopen(url, timeout=600.0)
    assert time.monotonic() - t0 < 1.0 * slack()


def test_reads_keep_the_read_timeout():
    """A server that accepts but answers late: the read waits up to the read timeout, not the connect timeout."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        net.urlopen(f"http://127.0.0.1:{srv.getsockname()[1]}/", timeout=0.5)
    assert 0.4 < time.monotonic() - t0 < 2.0 * slack()
    srv.close()


def test_no_plain_urlopen_left_in_grid():
    """Every urllib request in grid goes through grid.server.net.urlopen."""
    offenders = []
    for path in GRID.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "urlopen" and path.name != "net.py":
                offenders.append(f"{path.relative_to(GRID.parent)}:{node.lineno}")
    assert offenders == []
