"""The whole app, ``python -m grid.run engine=openai`` to report.html, against servers that are not SGLang: one that
says it is vLLM 0.32.0 (``/v1/models`` owned_by ``vllm``, ``/version``) and one that says nothing about itself.

Such a run once measured every load point and then crashed before the report, treating the server's version as an
SGLang release (``ValueError: not an SGLang version: 'vllm 0.32.0'``, exit 1). Here the run must exit 0, write the
report and summary, and say which server it measured without claiming an SGLang release for it. The real vLLM
server is run the same way in tests/server/test_vllm_cpu.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from grid.storage.schema import IDENTITY_COLUMNS
from tests.grid_cli import ROOT, run_grid

pytestmark = pytest.mark.integration
SERVER = ROOT / "tests" / "fixtures" / "openai_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["vllm", "nothing"])
def server(request, tmp_path):
    """(what the server says about itself, its base URL): a real HTTP server in its own process."""
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--says", request.param],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the scripted server did not start: {(tmp_path / 'server.log').read_text()}") from None
            time.sleep(0.1)
    yield request.param, url
    proc.terminate()
    proc.wait(10)
    log.close()


def _run(run_dir: Path, url: str):
    return run_grid("engine=openai", f"engine.base_url={url}", "engine.api=completions", "model.name=tiny",
                    "load.input_len=32", "load.output_len=16", "load.concurrency=[1,4]", "load.min_prompts=8",
                    "probe.enabled=false", "accuracy.enabled=false", "ray.dashboard=false", run_dir=run_dir,
                    timeout_s=300)


def test_the_whole_app_reports_on_a_server_that_is_not_sglang(tmp_path, server):
    says, url = server
    run_dir = tmp_path / "run"
    out = _run(run_dir, url)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    for name in ("report.md", "report.html", "summary.json", "throughput.png"):
        assert (run_dir / name).is_file(), name
    identity = {"vllm": "vllm 0.32.0", "nothing": "a server that does not say what it is"}[says]
    label = {"vllm": "vllm 0.32.0", "nothing": "external"}[says]
    rows = pq.read_table(run_dir / "parquet" / "load_points").to_pylist()
    assert {r["engine_version"] for r in rows} == {label}
    assert [(r["point_value"], r["status"], r["num_prompts"]) for r in rows] == [(1, "ok", 8), (4, "ok", 8)]
    assert all(r["output_tok_per_s"] > 0 for r in rows)
    # the columns the typed row declares never null are filled in every row the pipeline wrote
    assert all(r[c] is not None for r in rows for c in IDENTITY_COLUMNS)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_label"] == "base" and summary["launches"] == 1
    md = (run_dir / "report.md").read_text()
    assert f"- Engine: an already running OpenAI-compatible server (measured); {identity} (engine=openai)" in md
    assert "SGLang release " not in md  # no SGLang release is claimed for it
    assert f"No sweep base to compare with: the server measured ({identity}) is not an SGLang release" in md
    assert f"- Hardware: not known to grid: the server at {url} runs where it was started" in md
    assert "```\n\n```" not in md  # no empty launch command: grid did not launch this server
    # no deployment files either: grid has no SGLang command for a server it did not launch
    assert not (run_dir / "deploy").exists() and "## Deploy it" not in md
    html = (run_dir / "report.html").read_text()
    assert identity in html and "base" in html
