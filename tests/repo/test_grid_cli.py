"""Every test that runs the whole app builds ``python -m grid.run`` through tests/grid_cli.py, whose ``run_grid``
asserts the exit status; a test that starts the driver itself (``grid_argv`` with ``subprocess.Popen``, to watch or
kill it) asserts the status it ends with. A test that wrote its own command line once passed while grid crashed
before its report (exit 1) because it never looked at the status."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: ``"-m", "grid.run"`` (or ``'grid.run'``) in an argument list: a command line built by hand
OWN_COMMAND = re.compile(r"""["']-m["']\s*,\s*["']grid\.run["']""")


def test_no_test_builds_its_own_grid_run_command():
    own = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("*.py"))
           if p.name not in ("grid_cli.py", "test_grid_cli.py") and OWN_COMMAND.search(p.read_text())]
    assert own == [], f"use tests.grid_cli.run_grid (or grid_argv) in {own}"


def test_every_driver_started_by_hand_has_its_exit_status_checked():
    for path in sorted((ROOT / "tests").rglob("*.py")):
        text = path.read_text()
        if "grid_argv(" in text and path.name not in ("grid_cli.py", "test_grid_cli.py"):
            assert re.search(r"\.returncode == (-signal\.SIGKILL|\d+)", text), \
                f"{path.relative_to(ROOT)} starts grid.run with grid_argv but never checks its exit status"
