"""Bad input is refused before anything launches; odd values pass through to the server exactly; secrets are
redacted; a damaged Parquet file is set aside on resume."""

import pyarrow as pa
import pytest

from grid.engines.base import get_engine
from grid.storage.parquet import read_table, recorded_hashes, set_aside_corrupt, write_trial
from grid.storage.schema import load_point_row
from grid.sweep.space import expand

from tests.sweep.faults.faultkit import make_spec
from tests.grid_cli import run_grid

pytestmark = pytest.mark.faults


def grid_run(*args, run_dir, expect=0):
    return run_grid(*args, run_dir=run_dir, expect=expect, timeout_s=120)


def test_empty_search_space_exits_2_before_launch(tmp_path):
    out = grid_run("+sweep=mem_fraction", "~sweep.grid", run_dir=tmp_path, expect=2)
    assert "sweep.mem_fraction: empty search space (set sweep.grid, sweep.configs or sweep.deployments)" in out.stdout
    assert not (tmp_path / "parquet").exists() and not (tmp_path / "logs").exists()


def test_comma_without_quotes_is_not_a_sweep(tmp_path):
    out = grid_run("+sweep=mem_fraction", "engine.api_key=a,b", "dry_run=true", run_dir=tmp_path, expect=2)
    # refused before anything runs (exit 2), on stdout as every refusal of grid.run
    assert "Configuration error: Ambiguous value for argument 'engine.api_key=a,b'" in out.stdout


def test_commas_equals_and_json_pass_through_exactly(tmp_path):
    secret = 'k,1=2{"x": [1, 2]}'
    value = '{"rope_scaling": {"type": "yarn", "factor": 4.0}, "a=b": "c,d"}'
    spec = make_spec(tmp_path, f"engine.api_key='{secret}'", f"+engine.env.SGLANG_EXTRA='{value}'")
    assert spec.engine.api_key == secret and spec.engine.env["SGLANG_EXTRA"] == value
    plan = expand(spec)[0]
    launch = get_engine(spec).launch_plan(plan, 30000)
    i = launch.argv.index("--api-key")
    assert launch.argv[i + 1] == secret and launch.env["SGLANG_EXTRA"] == value   # one argv item, unchanged
    assert secret not in launch.command and "--api-key '***'" in launch.command
    assert len(expand(spec)) == 1                                                     # not a two-value sweep


def test_api_key_reaches_server_and_client_and_is_redacted(tmp_path, trial):
    secret = "sk-grid-test-123"
    spec = make_spec(tmp_path, f"engine.api_key={secret}", "load.concurrency=[1]", "load.output_len=16")
    plan, rows, session = trial(spec)
    assert rows[0]["trial_status"] == "ok" and rows[0]["status"] == "ok"    # the client authenticated
    table = read_table(tmp_path, "load_points").to_pylist()
    assert all(secret not in str(v) for row in table for v in row.values())
    assert "--api-key '***'" in table[0]["command"]
    assert session.log_tail() == "" or secret not in session.log_tail()


def test_servers_bind_localhost_by_default(tmp_path):
    spec = make_spec(tmp_path)
    argv = get_engine(spec).launch_plan(expand(spec)[0], 30000).argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    from grid.cluster.local import ray_init_args  # the Ray side: tests/cluster/test_cluster_network.py

    init = ray_init_args(spec.ray, "grid", "grid_node")
    assert init.kwargs["dashboard_host"] == "127.0.0.1" and init.kwargs["_node_ip_address"] == "127.0.0.1"


def _rows(h):
    return [load_point_row({}, schema_version=1, run_name="r", trial_id="t", config_hash=h, config_json="{}",
                           label=h, command="c", engine="sim", engine_version="0.5.9", model="m", hardware="h",
                           trial_status="ok", point_index=0, point_kind="concurrency", point_value=1.0,
                           num_prompts=1, status="ok", finished_unix_ns=1)]


def test_corrupt_parquet_is_set_aside_and_rest_kept(tmp_path):
    for h in ("aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"):
        write_trial(tmp_path, h, {"load_points": _rows(h)})
    lp = tmp_path / "parquet" / "load_points"
    data = (lp / "bbbbbbbbbbbb.parquet").read_bytes()
    (lp / "bbbbbbbbbbbb.parquet").write_bytes(data[: len(data) // 2])            # truncated
    (tmp_path / "parquet" / "requests" / "cccccccccccc.parquet").write_bytes(b"not parquet")  # corrupt sibling
    (lp / ".aaaaaaaaaaaa.parquet.0123.tmp").write_bytes(b"torn")                # left by a killed writer
    assert set(recorded_hashes(tmp_path)) == {"aaaaaaaaaaaa", "cccccccccccc"}
    notes = set_aside_corrupt(tmp_path)
    assert any("load_points/bbbbbbbbbbbb.parquet: unreadable" in n for n in notes)
    assert any("requests/cccccccccccc.parquet: unreadable" in n for n in notes)
    assert recorded_hashes(tmp_path) == {"aaaaaaaaaaaa": "ok"}               # b and c will be run again
    assert read_table(tmp_path, "load_points").column("config_hash").to_pylist() == ["aaaaaaaaaaaa"]
    assert not list(lp.glob(".*.tmp"))
    aside = sorted(p.name.split(".")[0] for p in (tmp_path / "parquet" / "_corrupt").rglob("*.parquet"))
    assert aside == ["bbbbbbbbbbbb", "cccccccccccc", "cccccccccccc"]
    assert isinstance(read_table(tmp_path, "requests"), pa.Table)
