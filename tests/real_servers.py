"""What a test against a real server does when that server cannot run here: skip and say why on a developer's
machine; fail where real servers are required (``GRID_REQUIRE_REAL_SERVERS=1``, as .ci/run sets it), so that a broken
setup cannot turn the real-server tests into silent skips and a green run."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

#: Set to 1 where every real-server test must run (.ci/run).
REQUIRE = "GRID_REQUIRE_REAL_SERVERS"


def required() -> bool:
    """Whether real-server tests must run here (``GRID_REQUIRE_REAL_SERVERS=1``)."""
    return os.environ.get(REQUIRE) == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it where real servers are required."""
    if required():
        pytest.fail(f"{reason} ({REQUIRE}=1: a real-server test that cannot run is a failure)", pytrace=False)
    pytest.skip(reason)
