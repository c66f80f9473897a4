"""One twin trial records server metrics and modelled GPU telemetry in Parquet, diagnoses every load point, and the
report shows it; engine=openai measures a server that is already up (a twin started here) without launching one."""

import pyarrow.parquet as pq
import pytest
from tests.sweep.test_measure import run_one, spec_for

from grid.engines.base import get_engine
from grid.report.render import diagnosis_lines, markdown, short_diagnosis
from grid.report.select import rank
from grid.server.handle import LaunchRequest
from grid.server.session import ServerSession
from grid.storage.parquet import read_table
from grid.sweep.measure import measure_trial
from grid.sweep.space import expand


def test_twin_trial_records_metrics_telemetry_and_diagnosis(tmp_path):
    spec = spec_for(tmp_path, "load.output_len=1024", "load.min_prompts=24")  # long points: 2+ snapshots each
    plan, rows, _ = run_one(spec)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    metrics = read_table(tmp_path, "server_metrics").to_pylist()
    assert len(metrics) >= 4 and {r["point_index"] for r in metrics} == {0, 1}
    assert max(r["running_reqs"] for r in metrics) >= 1 and metrics[0]["max_total_num_tokens"] > 100_000
    gpu = read_table(tmp_path, "gpu_telemetry").to_pylist()
    assert gpu and {r["source"] for r in gpu} == {"modelled"} and {r["gpu_index"] for r in gpu} == {0}
    for row in rows:
        assert row["srv_scrapes"] >= 2 and row["gpu_telemetry_source"] == "modelled"
        assert 0 < row["gpu_sm_util_mean"] <= 1 and row["gpu_power_limit_w"] == 700.0  # H100 SXM TDP
        assert row["bottleneck"] in ("launch/CPU-overhead-bound", "latency-bound", "memory-bandwidth-bound")
        assert "GPU figures modelled by the twin" in row["bottleneck_evidence"]
        assert '"modelled": true' in row["gpu_topology_json"]
    stored = pq.read_table(tmp_path / "parquet" / "load_points" / f"{plan.config_hash}.parquet").to_pylist()
    assert [r["bottleneck"] for r in stored] == [r["bottleneck"] for r in rows]
    verdicts = rank(stored, spec.objective)
    lines = diagnosis_lines(verdicts[0])
    assert len(lines) == 2 and lines[0].startswith("concurrency 1: ")
    assert short_diagnosis(verdicts[0]).startswith(rows[0]["bottleneck"]) or \
        short_diagnosis(verdicts[0]).startswith(rows[1]["bottleneck"])
    md = markdown(verdicts, "t")
    assert "### What limits each load point" in md and "| bottleneck |" in md


def test_a_virtual_clock_trial_samples_the_twin_in_modelled_time(tmp_path):
    """On the virtual clock the samplers read the twin's snapshots of each point's modelled span (every
    VCLOCK_SAMPLE_S from the point's start) instead of polling it in real time: two runs record the same
    server_metrics and gpu_telemetry rows and load-point columns, to the bit."""
    from grid.twin.server import VCLOCK_SAMPLE_S
    from grid.twin.vclock import EPOCH_S

    runs = []
    for name in ("a", "b"):
        spec = spec_for(tmp_path / name, "load.output_len=1024", "load.min_prompts=24")  # > 2 snapshots a point
        assert spec.engine.clock == "virtual"
        _, rows, _ = run_one(spec)
        tables = {t: [{k: v for k, v in r.items() if k not in ("trial_id", "node_id", "node_hostname")}
                      for r in read_table(tmp_path / name, t).to_pylist()] for t in ("server_metrics", "gpu_telemetry")}
        sampled = [{k: v for k, v in r.items() if k.startswith(("srv_", "gpu_"))} for r in rows]
        runs.append((tables, sampled, rows))
    (tables, sampled, rows), (tables_b, sampled_b, _) = runs
    assert tables == tables_b and sampled == sampled_b
    metrics = tables["server_metrics"]
    for row in rows:
        mine = [m for m in metrics if m["point_index"] == row["point_index"]]
        # each phase (the warm-up request's, then the main one) has a snapshot at its start and one every
        # VCLOCK_SAMPLE_S after, at multiples of it from the phase's start (the twin begins each phase at a multiple of
        # EPOCH_S), and one at its end: the warm-up's last request's, the main phase's measured window's
        assert row["srv_scrapes"] == len(mine) >= row["held_s"] // VCLOCK_SAMPLE_S + 2
        on_grid = [m for m in mine if m["t_s"] % EPOCH_S % VCLOCK_SAMPLE_S == 0]
        assert len(mine) - len(on_grid) == 2 and on_grid[0]["t_s"] == 0
        assert mine[-1]["t_s"] == pytest.approx(row["held_s"], abs=EPOCH_S)  # the window's end ends the point
        assert row["srv_running_max"] == row["point_value"]  # every stream's request in the batch at some snapshot
        assert 0 < row["gpu_sm_util_mean"] <= 1 and row["gpu_samples"] >= 1


def test_openai_engine_measures_a_running_twin_without_launching(tmp_path):
    twin_spec = spec_for(tmp_path / "twin")
    engine = get_engine(twin_spec)
    engine.prepare(twin_spec.run_dir)
    session = ServerSession()
    port, _ = session.pick_port(0)
    plan = engine.launch_plan(expand(twin_spec)[0], port)
    (tmp_path / "twin" / "logs").mkdir(parents=True, exist_ok=True)
    up = session.launch(LaunchRequest(argv=plan.argv, env=plan.env, port=port,
                                      log_path=str(tmp_path / "twin" / "logs" / "t.log"), time_scale=plan.time_scale,
                                      startup_time_scale=plan.startup_time_scale, startup_timeout_s=600,
                                      api="generate", model=twin_spec.model.name, api_key=None))
    assert up.status == "ok", up
    try:
        spec = spec_for(tmp_path / "ext", "engine=openai", f"engine.base_url=http://127.0.0.1:{port}",
                        "engine.api=completions")
        ext = get_engine(spec)
        assert ext.version() == "0.5.9"  # from the twin's /server_info
        trial = expand(spec)[0]
        rows = measure_trial(spec, ext, trial, ext.server(), trial_id="ext")
        assert [r["status"] for r in rows] == ["ok", "ok"] and rows[0]["engine"] == "openai"
        assert rows[0]["command"] == "" and rows[0]["kv_capacity_tokens"] > 100_000
        assert session.alive()  # the trial did not stop a server that is not its own
        assert read_table(tmp_path / "ext", "requests").num_rows == rows[0]["num_prompts"] + rows[1]["num_prompts"]
        assert read_table(tmp_path / "ext", "server_metrics").num_rows >= 2
        assert read_table(tmp_path / "ext", "gpu_telemetry").num_rows == 0  # not the twin engine: no model to ask
    finally:
        session.stop(5)


def test_openai_engine_reports_an_unreachable_server(tmp_path):
    from grid.server.external import ExternalServer

    spec = spec_for(tmp_path, "engine=openai", "engine.base_url=http://127.0.0.1:9", "engine.startup_timeout_s=1")
    ext = get_engine(spec)
    rows = measure_trial(spec, ext, expand(spec)[0], ExternalServer("http://127.0.0.1:9", None, 1.0),
                         trial_id="x")
    # not the configuration's doing: the server is not grid's (skipped, not charged; it runs again on resume)
    assert rows[0]["trial_status"] == "skipped" and rows[0]["trial_error_class"] == "external_unreachable"


def test_a_short_open_loop_point_is_bracketed_by_the_twins_snapshots(tmp_path):
    """An open-loop point shorter than VCLOCK_SAMPLE_S still gets the snapshots at its start and at its last request's
    end (as the polls bracket a point on the wall clock), so its GPU telemetry covers the whole point; the gauges'
    summary leaves both out (they are an idle server's)."""
    from grid.twin.server import VCLOCK_SAMPLE_S

    spec = spec_for(tmp_path, "load.concurrency=[]", "load.request_rate=[4.0]", "load.num_prompts=8")
    _, rows, _ = run_one(spec)
    (row,) = rows
    assert row["status"] == "ok" and row["held_s"] < VCLOCK_SAMPLE_S
    metrics = [m for m in read_table(tmp_path, "server_metrics").to_pylist() if m["point_index"] == 0]
    # the warm-up phase's start and end, then the main phase's: together the time the point held the server
    t = [m["t_s"] for m in metrics]
    assert len(t) == row["srv_scrapes"] == 4 and t[3] > t[2] > t[1] > t[0] == 0
    assert (t[1] - t[0]) + (t[3] - t[2]) == pytest.approx(row["held_s"], abs=1e-6)
    assert row["srv_running_mean"] is None
    gpu = read_table(tmp_path, "gpu_telemetry").to_pylist()
    assert row["gpu_samples"] >= 1 and 0 < row["gpu_sm_util_mean"] <= 1 and gpu
