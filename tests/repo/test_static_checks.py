"""The linter and the type checker pass on the repository, so that the README's test command covers them.

``ruff check`` (rules in pyproject.toml, [tool.ruff]) over the whole repository, and ``mypy`` over grid
([tool.mypy]: the trial boundary modules strict, the rest at default strictness). Both come with the ``dev`` extra;
mypy keeps its cache in .mypy_cache, so a run after the first checks only what changed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.timing import slack

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed: pip install -e '.[dev]'")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600 * slack())


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert done.returncode == 0, f"ruff check failed:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing():
    done = _run("mypy")
    assert done.returncode == 0, f"mypy failed:\n{done.stdout}{done.stderr}"
    assert done.stdout.startswith("Success: no issues found in "), done.stdout
