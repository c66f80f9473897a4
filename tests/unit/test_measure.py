"""One trial end to end without Ray: the twin launched by a ServerSession, load points, Parquet files."""

import socket

import pyarrow.parquet as pq

from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.server.session import ServerSession
from grid.storage.parquet import read_table, recorded_hashes
from grid.sweep.measure import measure_trial
from grid.sweep.space import expand



def spec_for(tmp_path, *overrides):
    return compose_spec(["model=llama3_1_8b", "hardware=h100_x1", "load.concurrency=[1,4]", "load.input_len=32",
                         "load.output_len=16", "engine.time_scale=10", *overrides], tmp_path)


def run_one(spec):
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    plan = expand(spec)[0]
    reported = []
    rows = measure_trial(spec, engine, plan, ServerSession(), trial_id="t0", on_point=reported.append)
    return plan, rows, reported


def test_working_trial_records_every_table(tmp_path):
    spec = spec_for(tmp_path)
    plan, rows, reported = run_one(spec)
    assert [r["status"] for r in rows] == ["ok", "ok"] and len(reported) == 2
    assert rows[0]["trial_status"] == "ok" and rows[0]["kv_capacity_tokens"] > 100_000
    assert rows[1]["output_tok_per_s"] > rows[0]["output_tok_per_s"] > 0
    assert rows[0]["startup_s"] > 0 and "--model-path" in rows[0]["command"]
    assert recorded_hashes(tmp_path) == {plan.config_hash: "ok"}
    requests = read_table(tmp_path, "requests")
    assert requests.num_rows == rows[0]["num_prompts"] + rows[1]["num_prompts"]
    assert set(requests.column("output_tokens").to_pylist()) == {16}
    log = read_table(tmp_path, "server_log").to_pylist()
    assert {r["kind"] for r in log} >= {"prefill"}
    assert not list((tmp_path / "parquet" / "load_points").glob(".*tmp"))
    # every row of every table names its node: outside Ray no node id, this host; the twin has no NVML GPUs
    host = socket.gethostname()
    assert {(r["node_id"], r["node_hostname"], r["gpu_uuids"]) for r in rows} == {(None, host, None)}
    for table in ("requests", "server_log", "server_metrics", "gpu_telemetry"):
        t = read_table(tmp_path, table)
        assert t.num_rows > 0, table
        assert set(t.column("node_hostname").to_pylist()) == {host}, table


def test_node_columns_come_from_the_given_node(tmp_path):
    spec = spec_for(tmp_path, "load.concurrency=[1]")
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    node = {"node_id": "ab" * 28, "node_hostname": "gpu-node-7", "gpu_uuids": ["GPU-1111", "GPU-2222"]}
    rows = measure_trial(spec, engine, expand(spec)[0], ServerSession(), trial_id="t1", node=node)
    assert rows[0]["node_id"] == "ab" * 28 and rows[0]["gpu_uuids"] == ["GPU-1111", "GPU-2222"]
    stored = read_table(tmp_path, "load_points").to_pylist()
    assert stored[0]["gpu_uuids"] == ["GPU-1111", "GPU-2222"] and stored[0]["node_hostname"] == "gpu-node-7"
    assert set(read_table(tmp_path, "requests").column("node_id").to_pylist()) == {"ab" * 28}


def test_failed_start_records_not_run_points(tmp_path):
    spec = spec_for(tmp_path, "server.mem_fraction_static=0.1")
    plan, rows, reported = run_one(spec)
    assert reported == []
    assert [r["status"] for r in rows] == ["not_run", "not_run"]
    assert rows[0]["trial_status"] == "failed" and rows[0]["trial_error_class"] in ("startup_exit", "startup_oom")
    assert rows[0]["log_tail"] and rows[0]["output_tok_per_s"] is None
    t = pq.read_table(tmp_path / "parquet" / "load_points" / f"{plan.config_hash}.parquet")
    assert t.num_rows == 2


def test_every_point_failing_fails_the_trial_with_the_requests_error(tmp_path):
    # prompts longer than Llama 3.1's 131072-token context: the server answers HTTP 400 to every request
    spec = spec_for(tmp_path, "load.input_len=140000", "load.concurrency=[1]", "load.min_prompts=2",
                    "load.warmup_requests=0")
    plan, rows, reported = run_one(spec)
    assert [r["status"] for r in rows] == ["failed"] and rows[0]["error_class"] == "http_error"
    assert rows[0]["trial_status"] == "failed" and rows[0]["trial_error_class"] == "http_error"
    msg = rows[0]["trial_error_message"]
    assert msg.startswith("every load point failed; point 0: 2 of 2 requests failed, first http_error: HTTP 400")
    assert "context length" in msg


def test_repeats_measure_every_level_again_with_its_own_repeat_index(tmp_path):
    from grid.plan import load_points

    spec = spec_for(tmp_path, "load.repeats=2", "load.concurrency=[1,2]", "load.min_prompts=2")
    plan = expand(spec)[0]
    assert [(p.value, p.seed) for p in load_points(plan)] == [(1.0, 1000), (2.0, 1001), (1.0, 1002), (2.0, 1003)]
    assert plan.config_hash != expand(spec_for(tmp_path, "load.concurrency=[1,2]", "load.min_prompts=2"))[0].config_hash
    assert expand(spec_for(tmp_path, "load.repeats=1"))[0].config_hash == expand(spec_for(tmp_path))[0].config_hash
    plan, rows, _ = run_one(spec)
    assert [(r["point_index"], r["repeat_index"], r["point_value"], r["status"]) for r in rows] == [
        (0, 0, 1.0, "ok"), (1, 0, 2.0, "ok"), (2, 1, 1.0, "ok"), (3, 1, 2.0, "ok")]
    requests = read_table(tmp_path, "requests").to_pylist()
    assert sorted({(r["point_index"], r["repeat_index"]) for r in requests}) == [(0, 0), (1, 0), (2, 1), (3, 1)]


def test_a_sweep_varying_the_numerics_runs_the_accuracy_prompts(tmp_path):
    from grid.sweep.measure import accuracy_role

    spec = spec_for(tmp_path, "+sweep=mem_fraction", "~sweep.load", "~sweep.grid.mem_fraction_static",
                    "+sweep.grid.kv_cache_dtype=[bfloat16,fp8_e4m3]", "load.concurrency=[1]")
    plans = expand(spec)
    assert [accuracy_role(spec, p) for p in plans] == ["baseline", "differs: kv_cache_dtype"]
    assert accuracy_role(spec_for(tmp_path, "+sweep=mem_fraction"), expand(spec_for(
        tmp_path, "+sweep=mem_fraction"))[0]) is None                    # mem_fraction changes no numerics
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    rows = measure_trial(spec, engine, plans[1], ServerSession(), trial_id="t1")
    assert (rows[0]["accuracy_exact_match"], rows[0]["accuracy_role"]) == (1.0, "differs: kv_cache_dtype")
    acc = read_table(tmp_path, "accuracy").to_pylist()
    assert len(acc) == 20 and all(r["correct"] for r in acc) and acc[0]["prompt_id"] == "add_1"
