"""A small sweep through Ray Tune and the server actor against the twin, end to end, as a user runs it."""

import itertools

import pandas as pd
import pytest

from tests.grid_cli import run_grid
pytestmark = pytest.mark.integration

SWEEP = [
    "+sweep=nsa_backends",
    "~sweep.load",
    "sweep.grid.dsa_prefill_backend=[trtllm,fa3]",
    "sweep.grid.dsa_decode_backend=[trtllm,flashmla_kv]",
    "load.concurrency=[1,4]",
    "load.input_len=64",
    "load.output_len=32",
    "ray.dashboard=false",
    "search=exhaustive",  # every configuration, the known failure (flashmla_kv on SM120) included
    "load.min_prompts=8",  # the pipeline, not tails (tests/config/test_tails.py): 8 requests per point
]


def grid_run(args, run_dir):
    return run_grid(*args, run_dir=run_dir)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sweep")
    out = grid_run(SWEEP, run_dir)
    return run_dir, out.stdout


def test_every_configuration_recorded_with_verdict(sweep):
    run_dir, stdout = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    assert lp.config_hash.nunique() == 4 and len(lp) == 8
    by_label = lp.groupby("label").first()
    assert by_label.loc["prefill=trtllm decode=trtllm", "trial_status"] == "ok"
    fa3 = lp[lp.label.str.contains("prefill=fa3")]
    # fa3 needs SM90: refused before launch with the reason and its source, no server started
    assert set(fa3.trial_status) == {"invalid"} and set(fa3.status) == {"not_run"}
    assert set(fa3.trial_error_class) == {"refused"} and fa3.startup_s.isna().all()
    # recorded by the driver before the sweep, without a Ray Tune trial (a trial costs about 5 s)
    trial_dirs = {d.name for d in (run_dir / "tune").glob("*/*") if d.is_dir()}
    assert trial_dirs == set(lp.config_hash) - set(fa3.config_hash) and len(trial_dirs) == 2
    assert fa3.node_hostname.isna().all() and "Recorded 2 configuration(s) refused before launch" in stdout
    kv = by_label.loc["prefill=trtllm decode=flashmla_kv"]
    assert kv.trial_status == "invalid" and kv.trial_error_class in ("nan_output", "garbage_output")
    assert "Best configuration: prefill=trtllm decode=trtllm" in stdout


def test_printed_tables_equal_parquet(sweep, printed):
    run_dir, stdout = sweep
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    assert printed.best_label(stdout) == "prefill=trtllm decode=trtllm"
    verdicts = {label: r["outcome"] for r in printed.parse_table(stdout, "All configurations", "left").records()
                for label in r["configuration"].split("; ")}   # configurations refused for one reason share a row
    assert verdicts == lp.groupby("label").trial_status.first().map(
        {"ok": "best", "failed": "failed", "invalid": "invalid"}).to_dict()   # one ok configuration: the best
    best = lp[(lp.label == "prefill=trtllm decode=trtllm")].sort_values("point_index")
    table = printed.parse_table(stdout, "Load points of the best configuration", "right")
    assert table.title == f"Load points of the best configuration ({best.config_hash.iloc[0]})"
    cells = table.records()
    assert [c["level"] for c in cells] == ["1", "4"] and [c["status"] for c in cells] == list(best.status)
    for c, (_, row) in zip(cells, best.iterrows()):
        for header, key, div in (("out tok/s", "output_tok_per_s", 1), ("total tok/s", "total_tok_per_s", 1),
                                 ("TTFT p50 ms", "ttft_median_ms", 1), ("TTFT p99 ms", "ttft_p99_ms", 1),
                                 ("TPOT p50 ms", "tpot_median_ms", 1), ("TPOT p99 ms", "tpot_p99_ms", 1),
                                 ("E2E p50 s", "e2e_median_ms", 1000), ("mean conc.", "concurrency_mean", 1)):
            assert printed.close_to_printed(c[header], row[key] / div), (header, c[header], row[key])
    report = (run_dir / "report.md").read_text()
    lines = report.splitlines()
    top = next(i for i, ln in enumerate(lines) if ln.startswith("| level |"))
    names = [c.strip() for c in lines[top].split("|")[1:-1]]
    md = [dict(zip(names, (c.strip() for c in ln.split("|")[1:-1])))
          for ln in itertools.takewhile(lambda ln: ln.startswith("|"), lines[top + 2:])]
    assert len(md) == len(best)
    for r, (_, row) in zip(md, best.iterrows()):
        assert printed.close_to_printed(r["out tok/s"], row.output_tok_per_s)
        assert printed.close_to_printed(r["req/s"], row.requests_per_s)
        assert printed.close_to_printed(r["TTFT p99 ms"], row.ttft_p99_ms)


def test_the_run_directory_holds_the_resolved_config(sweep):
    run_dir, _ = sweep
    hydra_dir = run_dir / ".hydra"
    assert sorted(p.name for p in hydra_dir.iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    import yaml

    assert yaml.safe_load((hydra_dir / "overrides.yaml").read_text()) == SWEEP  # as Hydra writes it: hydra.* apart
    config = yaml.safe_load((hydra_dir / "config.yaml").read_text())
    assert config["sweep"]["name"] == "nsa_backends" and config["load"]["concurrency"] == [1, 4]
    assert config["sweep"]["grid"]["dsa_prefill_backend"] == ["trtllm", "fa3"]


def test_requests_table_has_every_request(sweep):
    run_dir, _ = sweep
    rq = pd.read_parquet(run_dir / "parquet" / "requests")
    lp = pd.read_parquet(run_dir / "parquet" / "load_points")
    ran = lp[lp.status != "not_run"]
    assert len(rq) == int(ran.num_prompts.sum())
    assert (rq.output_tokens == 32).all() and (rq.ttft_ms > 0).all()


def test_rerun_resumes_without_running_anything(sweep, printed):
    run_dir, _ = sweep
    out = grid_run(SWEEP, run_dir)
    plan = printed.plan_line(out.stdout)
    assert (plan["name"], plan["configurations"], plan["recorded"], plan["to_run"]) == ("nsa_backends", 4, 4, 0)
    # the estimate counts only what is left to run
    assert "0 launches left (4 recorded)" in " ".join(out.stdout.split())
    assert "0.00 GPU-hours for the launches left" in " ".join(out.stdout.split())
    assert printed.best_label(out.stdout) == "prefill=trtllm decode=trtllm"
