"""A dry run or a refused command into an existing results folder leaves its resolved config (.hydra/config.yaml)
alone; a run that goes ahead writes it (tests/sweep/test_sweep_ray.py)."""

from tests.grid_cli import run_grid


def test_dry_run_keeps_the_resolved_config(tmp_path):
    saved = tmp_path / ".hydra" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text("name: the measured run\n")
    out = run_grid("+sweep=cuda_graph", "dry_run=true", run_dir=tmp_path, timeout_s=300)
    assert "--disable-cuda-graph" in out.stdout
    assert saved.read_text() == "name: the measured run\n"
    assert sorted(p.name for p in saved.parent.iterdir()) == ["config.yaml"]


def test_a_refused_run_keeps_the_resolved_config(tmp_path):
    saved = tmp_path / ".hydra" / "config.yaml"
    saved.parent.mkdir()
    saved.write_text("name: the measured run\n")
    for refused in (["objective.kind=nope"], ["engine=sglang"]):    # refused by the config check / by the engine
        run_grid(*refused, run_dir=tmp_path, expect=2, timeout_s=300)
        assert saved.read_text() == "name: the measured run\n"
        assert sorted(p.name for p in saved.parent.iterdir()) == ["config.yaml"]
