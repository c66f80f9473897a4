"""The fault suite: every server fault injected through the twin gets a trial status and an error class,
keeps the load points already measured, marks the rest not_run, stores the server log tail and leaves no process of
the server's group behind."""

import os
import signal
import socket
import time

import pyarrow.parquet as pq
import pytest

from grid.report.select import rank
from grid.server.process import group_alive, http_status, port_is_free
from grid.storage.parquet import read_table, recorded_hashes

from tests.sweep.faults.faultkit import make_spec
from tests.timing import slack

pytestmark = pytest.mark.faults


def stored_rows(spec, plan):
    return pq.read_table(f"{spec.run_dir}/parquet/load_points/{plan.config_hash}.parquet").to_pylist()


def assert_no_leftovers(session):
    assert session.groups, "no server was launched"
    for pgid in session.groups:
        assert not group_alive(pgid), f"process group {pgid} survived"
    assert session.dirty is None


# 1 -----------------------------------------------------------------------------------------------------------------
def test_health_503_until_ready_no_load_before(tmp_path, trial):
    faults = [{"kind": "health_503_until_s", "open_at_s": 5, "until_s": 60}]
    spec = make_spec(tmp_path, "load.concurrency=[1]", "load.output_len=16", faults=faults)
    plan, rows, session = trial(spec)
    launch = session.launches[0]
    assert launch.status == "ok" and launch.phases == ["refused", "503", "200"]
    # grid's clock starts before the twin's imports (~0.5 real s = ~10 modelled s at x20): that host latency, scaled,
    # is the margin above the fault's 5 s and 60 s, and it stretches with the host's load (31.7 s at 5-8x load)
    host_s = 25 * slack()
    assert launch.port_open_s < 5 + host_s and 60 <= launch.startup_s < 60 + host_s
    assert [r["status"] for r in rows] == ["ok"] and rows[0]["trial_status"] == "ok"
    # the stored startup is the twin's own modelled one (its /server_info): the fault holds readiness until 60 s,
    # later than its modelled phases; the launcher's clock above adds the host's latency, scaled
    assert stored_rows(spec, plan)[0]["startup_s"] == 60.0
    log = (tmp_path / "logs" / f"{plan.config_hash}.log").read_text().splitlines()
    ready = next(i for i, line in enumerate(log) if "fired up and ready to roll" in line)
    sent = [i for i, line in enumerate(log) if '"POST /generate' in line and "127.0.0.1:0" not in line]
    assert sent and min(sent) > ready          # probe and load only after ready (the warm-up is the server's own)
    assert_no_leftovers(session)


# 2 -----------------------------------------------------------------------------------------------------------------
def test_scheduler_dies_mid_load_is_server_hang(tmp_path, trial):
    # point 0 takes ~19 modelled s (2 prompts x 1024 tokens, one at a time), point 1 about as long (4 prompts, 2 at a
    # time); the scheduler dies 30 modelled s after ready, inside point 1, on the twin's virtual clock (the probe and
    # the warm-up take their modelled time, not the host's)
    faults = [{"kind": "scheduler_dies_after_s", "after_s": 30}]
    spec = make_spec(tmp_path, "load.min_prompts=2", "load.output_len=1024",
                     "load.stall_timeout_s=10", faults=faults)
    health = {}

    def on_point(row):  # called after the point, before the verdict stops the server
        if row["point_index"] == 1:
            server = session.server
            health.update(health=http_status(server.host, server.port, "/health"),
                          # 503 once no token came back for 20 modelled s (SGLANG_HEALTH_CHECK_TIMEOUT): 10 real s at x2
                          generate=http_status(server.host, server.port, "/health_generate", timeout_s=20 * slack()))

    from tests.sweep.faults.faultkit import RecordingSession

    session = RecordingSession(clean_wait_s=5)
    plan, rows, _ = trial(spec, session=session, on_point=on_point)
    # the trap: the front end still says healthy; only token progress (and /health_generate) tell the truth
    assert health == {"health": 200, "generate": 503}
    assert rows[0]["status"] == "ok" and rows[0]["output_tok_per_s"] > 0        # measured before the hang: kept
    assert rows[1]["status"] == "failed" and rows[1]["error_class"] == "stall_timeout"
    assert rows[2]["status"] == "not_run" and rows[2]["output_tok_per_s"] is None
    assert {r["trial_status"] for r in rows} == {"failed"}
    assert {r["trial_error_class"] for r in rows} == {"server_hang"}
    assert "no token progress during load point 1" in rows[0]["trial_error_message"]
    assert "Decode batch" in rows[0]["log_tail"]
    assert "Traceback" not in rows[0]["log_tail"]     # the process never exited: only token progress told
    assert [r["status"] for r in stored_rows(spec, plan)] == ["ok", "failed", "not_run"]
    assert_no_leftovers(session)


# 3 -----------------------------------------------------------------------------------------------------------------
def test_cuda_graph_oom_at_startup(tmp_path, trial):
    # Llama 3.1 8B on one H100 captures its CUDA graphs from about 8.5 to 11 modelled s (GLM-5 on 8 GPUs: ~40 s)
    spec = make_spec(tmp_path, faults=[{"kind": "startup_oom_at_s", "at_s": 9, "exit_code": 1}])
    plan, rows, session = trial(spec)
    assert [r["status"] for r in rows] == ["not_run"] * 3
    assert rows[0]["trial_status"] == "failed" and rows[0]["trial_error_class"] == "startup_oom"
    assert "exited with code 1" in rows[0]["trial_error_message"]
    assert "CUDA out of memory" in rows[0]["trial_error_message"]  # the server's own words, not only the exit code
    assert "CUDA out of memory" in rows[0]["log_tail"] and rows[0]["startup_s"] is None
    assert session.launches[0].exit_code == 1
    assert_no_leftovers(session)


def test_never_ready_is_startup_timeout(tmp_path, trial):
    spec = make_spec(tmp_path, "engine.startup_timeout_s=40", faults=[{"kind": "startup_hang", "at_s": 2}])
    plan, rows, session = trial(spec)
    assert rows[0]["trial_status"] == "failed" and rows[0]["trial_error_class"] == "startup_timeout"
    assert "not ready after 40 s" in rows[0]["trial_error_message"]
    assert [r["status"] for r in rows] == ["not_run"] * 3 and rows[0]["log_tail"]
    assert_no_leftovers(session)


# 4 -----------------------------------------------------------------------------------------------------------------
def test_exit_during_load_is_server_crash(tmp_path, trial):
    # modelled load: point 0 (concurrency 1) 15.4 s, point 1 (concurrency 2) 7.9 s: 20 s falls in point 1
    spec = make_spec(tmp_path, faults=[{"kind": "exit_after_load_s", "after_s": 20, "exit_code": 1}])
    plan, rows, session = trial(spec)
    assert rows[0]["status"] == "ok" and rows[0]["completed"] == rows[0]["num_prompts"]
    assert rows[1]["status"] in ("failed", "partial") and rows[1]["failed"] >= 1
    assert rows[2]["status"] == "not_run"
    assert {r["trial_error_class"] for r in rows} == {"server_crash"}
    assert "server exited with code 1 during load point 1" in rows[0]["trial_error_message"]
    assert "Received sigquit" in rows[0]["log_tail"]
    requests = read_table(tmp_path, "requests").to_pylist()
    assert {r["point_index"] for r in requests} == {0, 1}       # every request sent is stored, none of point 2
    assert_no_leftovers(session)


# 5 -----------------------------------------------------------------------------------------------------------------
def test_repeated_token_is_invalid_and_never_best(tmp_path, trial):
    bad = make_spec(tmp_path / "bad", "load.concurrency=[1]", "load.output_len=16",
                    faults=[{"kind": "repeat_token", "token": " the"}])
    good = make_spec(tmp_path / "good", "load.concurrency=[1]", "load.output_len=16", "+server.chunked_prefill_size=4096")
    _, bad_rows, bad_session = trial(bad)
    _, good_rows, _ = trial(good)
    assert bad_rows[0]["trial_status"] == "invalid" and bad_rows[0]["trial_error_class"] == "garbage_output"
    assert bad_rows[0]["status"] == "not_run" and "the the the" in bad_rows[0]["trial_error_message"]
    assert good_rows[0]["trial_status"] == "ok"
    # even with a higher throughput number forged onto it, the invalid configuration is never chosen
    forged = [{**r, "output_tok_per_s": 1e9, "status": "ok"} for r in bad_rows]
    verdicts = rank(forged + good_rows, good.objective)
    assert verdicts[0].outcome == "best" and verdicts[0].config_hash == good_rows[0]["config_hash"]
    assert {v.outcome for v in verdicts if v.config_hash == bad_rows[0]["config_hash"]} == {"invalid"}
    assert_no_leftovers(bad_session)


# 6 -----------------------------------------------------------------------------------------------------------------
def test_sigkill_launcher_children_keep_port(tmp_path, trial):
    pid_file = tmp_path / "holder.pid"
    spec = make_spec(tmp_path, faults=[{"kind": "port_holder_child", "pid_file": str(pid_file)}])
    killed = {}

    def kill_launcher(row):
        if row["point_index"] == 0:
            server = session.server
            holder = int(pid_file.read_text())
            assert os.getpgid(holder) == server.pgid      # the child is in the server's group and holds the port
            killed.update(pid=server.pid, holder=holder, port=server.port)
            os.kill(server.pid, signal.SIGKILL)

    from tests.sweep.faults.faultkit import RecordingSession

    session = RecordingSession(clean_wait_s=5)
    plan, rows, _ = trial(spec, session=session, on_point=kill_launcher)
    assert rows[0]["status"] == "ok" and rows[2]["status"] == "not_run"
    assert {r["trial_error_class"] for r in rows} == {"server_crash"}
    assert "code -9" in rows[0]["trial_error_message"]
    assert port_is_free("127.0.0.1", killed["port"])
    assert not _live(killed["holder"])              # the port holder went with its group
    assert_no_leftovers(session)


def _live(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_escaped_port_holder_marks_node_env_dirty(tmp_path, trial):
    pid_file = tmp_path / "holder.pid"
    spec = make_spec(tmp_path / "a", "load.concurrency=[1]", "load.output_len=16",
                     faults=[{"kind": "port_holder_child", "pid_file": str(pid_file), "escape": True}])
    from tests.sweep.faults.faultkit import RecordingSession

    session = RecordingSession(clean_wait_s=1)
    try:
        plan, rows, _ = trial(spec, session=session)
        assert rows[0]["trial_status"] == "ok"        # the verdict of the trial itself stands
        assert "env_dirty after stop" in rows[0]["trial_error_message"] and "still held" in session.dirty
        # the dirty node is not used: the next configuration is skipped (infra, not charged), nothing launched
        nxt = make_spec(tmp_path / "b", "load.concurrency=[1]", "load.output_len=16")
        plan2, rows2, _ = trial(nxt, session=session)
        assert rows2[0]["trial_status"] == "skipped" and rows2[0]["trial_error_class"] == "env_dirty"
        assert rows2[0]["status"] == "not_run" and len(session.groups) == 1
        assert recorded_hashes(tmp_path / "b") == {plan2.config_hash: "skipped"}
    finally:
        holder = int(pid_file.read_text())
        os.kill(holder, signal.SIGKILL)
    # once clean again, the node is used
    time.sleep(0.2)
    plan3, rows3, _ = trial(make_spec(tmp_path / "c", "load.concurrency=[1]", "load.output_len=16"), session=session)
    assert rows3[0]["trial_status"] == "ok" and session.dirty is None


# 7 -----------------------------------------------------------------------------------------------------------------
def test_leftover_listener_on_port_uses_free_port(tmp_path, trial):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        spec = make_spec(tmp_path, "load.concurrency=[1]", "load.output_len=16", f"engine.port={port}")
        plan, rows, session = trial(spec)
        used = session.launches[0].port
        assert used != port and rows[0]["trial_status"] == "ok"          # never charged to the configuration
        assert f"port_in_use: {port} held by another process" in rows[0]["trial_error_message"]
        assert f"--port {used}" in rows[0]["command"]
    assert_no_leftovers(session)


def test_an_internal_port_taken_at_start_is_named_in_the_retry_note(tmp_path):
    """torch.distributed's port (SGLang's internal rendezvous) taken at start: the twin prints torch's
    DistNetworkError and exits; the launch is retried on other HTTP ports (SGLang derives its internal ports from
    it), never charged (skipped / port_in_use), and each note names the port the log names, not grid's HTTP port."""
    from grid.engines.base import get_engine
    from grid.server.handle import LaunchRequest
    from grid.server.session import PORT_RETRIES, ServerSession
    from grid.sweep.space import expand

    line = ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
            "port: 18103, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use")
    spec = make_spec(tmp_path, "load.concurrency=[1]",
                     faults=[{"kind": "startup_crash", "at_s": 5, "exit_code": 1, "log_lines": [line]}])
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    session = ServerSession(clean_wait_s=5)
    lp = engine.launch_plan(expand(spec)[0], 0)
    port = lp.port
    result = session.launch(LaunchRequest(argv=lp.argv, env=lp.env, port=port, log_path=f"{tmp_path}/s.log",
                                          time_scale=50, startup_time_scale=20, startup_timeout_s=600,
                                          api="generate", model="m", api_key=None))
    session.stop(3)
    assert (result.status, result.error_class) == ("skipped", "port_in_use")
    assert len(result.infra_retries) == PORT_RETRIES
    first = result.infra_retries[0]
    assert first.startswith(f"port_in_use: torch.distributed's port 18103 taken at launch (the log names it; the HTTP "
                            f"port was {port}); retried with the HTTP port "), first
    assert all("18103" in note for note in result.infra_retries)


def test_port_taken_between_check_and_launch_is_retried(tmp_path):
    from grid.engines.base import get_engine
    from grid.server.handle import LaunchRequest
    from grid.server.session import ServerSession
    from grid.sweep.space import expand

    spec = make_spec(tmp_path, "load.concurrency=[1]")
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    session = ServerSession(clean_wait_s=5)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        lp = engine.launch_plan(expand(spec)[0], port)   # as if the port was free when picked
        result = session.launch(LaunchRequest(argv=lp.argv, env=lp.env, port=port, log_path=f"{tmp_path}/s.log",
                                              time_scale=50, startup_time_scale=20, startup_timeout_s=600,
                                              api="generate", model="m", api_key=None))
        session.stop(3)
    assert result.status == "ok" and result.port != port
    assert result.infra_retries == [f"port_in_use: {port} taken at launch; retried on {result.port}"]
