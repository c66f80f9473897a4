"""A dry run or a refused command into an existing results folder leaves its resolved config (.hydra/config.yaml)
alone; a run that goes ahead writes it (tests/sweep/test_sweep_ray.py)."""

import subprocess
import sys
from tests.timing import slack


def grid_run(run_dir, *overrides):
    return subprocess.run([sys.executable, "-m", "grid.run", *overrides, f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=300 * slack())


def test_dry_run_keeps_the_resolved_config(tmp_path):
    saved = tmp_path / ".hydra" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text("name: the measured run\n")
    out = grid_run(tmp_path, "+sweep=cuda_graph", "dry_run=true")
    assert out.returncode == 0, out.stderr
    assert "--disable-cuda-graph" in out.stdout
    assert saved.read_text() == "name: the measured run\n"
    assert sorted(p.name for p in saved.parent.iterdir()) == ["config.yaml"]


def test_a_refused_run_keeps_the_resolved_config(tmp_path):
    saved = tmp_path / ".hydra" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text("name: the measured run\n")
    for refused in (["objective.kind=nope"], ["engine=sglang"]):    # refused by the config check / by the engine
        out = grid_run(tmp_path, *refused)
        assert out.returncode == 2, out.stdout + out.stderr
        assert saved.read_text() == "name: the measured run\n"
        assert sorted(p.name for p in saved.parent.iterdir()) == ["config.yaml"]
