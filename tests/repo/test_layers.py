"""grid's package layers (pyproject.toml ``[tool.importlinter]``) hold, and docs/architecture.md lists the same ones.

``lint-imports`` builds the import graph of grid (grimp, every import statement, also those inside functions) and
checks each contract: the packages depend one way (a package imports only from the layers below it, packages on one
line do not import each other, every package is in a layer), Hydra/OmegaConf only at the entry point, Ray only in
the cluster, the sweep and the search's Tune adapters. No import is exempted.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.timing import slack

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_import_contract_is_kept():
    # in a child process: lint-imports configures logging (logging.config.dictConfig), which would silence the
    # loggers of the modules other tests already imported
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300 * slack())
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    kept = re.findall(r"^(.+) KEPT$", out, re.MULTILINE)
    assert kept == [c["name"] for c in _contracts()], out


def test_the_layers_contract_is_exhaustive_and_exempts_nothing():
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    assert layers["containers"] == ["grid"]
    assert layers["exhaustive"] is True
    assert "ignore_imports" not in layers and "unmatched_ignore_imports_alerting" not in layers
    assert all("ignore_imports" not in c for c in _contracts())


def test_architecture_doc_lists_the_layers_of_pyproject():
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"^## Layers\n.*?```text\n(.*?)```", doc, re.MULTILINE | re.DOTALL)
    assert block, "docs/architecture.md has no '## Layers' section with a ```text block"
    listed = [re.split(r"\s{2,}", line.strip())[0] for line in block.group(1).splitlines() if line.strip()]
    assert listed == [" | ".join(f"grid.{p.strip()}" for p in layer.split("|")) for layer in layers["layers"]]
