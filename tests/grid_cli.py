"""``python -m grid.run`` as a user types it, for the tests that run the whole app: one place that builds the command
and checks its exit status, so that no such test can pass while grid crashed (exit 1) before its report.

``run_grid`` asserts the exit status it is told to expect (0: the run finished and wrote its report; 2: grid
refused the command, before anything launched; 130: interrupted) and shows the end of the output when it differs.
Tests that must watch or kill the driver while it runs start ``grid_argv(...)`` with ``subprocess.Popen`` and assert
the status themselves; tests/repo/test_grid_cli.py checks that no other test builds the command on its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.timing import slack

ROOT = Path(__file__).resolve().parents[1]


def grid_argv(*args: str, run_dir: Path | str) -> list[str]:
    """The command line: ``python -m grid.run ARGS... hydra.run.dir=RUN_DIR``."""
    return [sys.executable, "-m", "grid.run", *args, f"hydra.run.dir={run_dir}"]


def grid_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with a wide terminal (rich wraps the progress lines at 80 columns otherwise, which
    splits the phrases tests look for) and ``extra`` on top."""
    return {**os.environ, "COLUMNS": "200", **(extra or {})}


def run_grid(*args: str, run_dir: Path | str, expect: int = 0, timeout_s: float = 600,
             env: Mapping[str, str] | None = None, python: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m grid.run ARGS...`` in the repository root and assert that it exits with ``expect``.
    ``timeout_s``: real seconds on a quiet host (stretched by ``tests.timing.slack``); ``env``: variables added to
    this process's environment; ``python``: another interpreter than this one. Returns the finished process (text
    stdout and stderr)."""
    argv = grid_argv(*args, run_dir=run_dir)
    if python:
        argv[0] = python
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s * slack(),
                         env=grid_env(env))
    assert out.returncode == expect, (f"grid.run exited {out.returncode}, expected {expect}\n--- stdout\n"
                                      f"{out.stdout[-4000:]}\n--- stderr\n{out.stderr[-4000:]}")
    return out
