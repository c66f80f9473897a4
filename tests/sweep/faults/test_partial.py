"""The fault suite: a server that breaks partway through a load point, runtime errors in
its log during load, and timeouts shorter than the time to first token. Each fault is injected into the twin through
GRID_TWIN_FAULTS (grid/twin/faults.py); each test checks the statuses, classes, which points ran and what is stored.

"After N requests" counts every generation request the twin finished after it became ready: grid's correctness probe
(``len(PROBES)``), then each load point's warm-up request (``load.warmup_requests`` = 1) and its measured requests.
"""

import pyarrow.parquet as pq
import pytest

from grid.report.select import rank, rejudge
from grid.server.probe import PROBES
from grid.storage.parquet import read_table
from grid.sweep.notes import first_wave_ttft_s, plan_notes
from grid.sweep.space import expand

from tests.sweep.faults.faultkit import make_spec

pytestmark = pytest.mark.faults

PROBE = len(PROBES)
WARMUP = 1


def stored(spec, plan):
    return pq.read_table(f"{spec.run_dir}/parquet/load_points/{plan.config_hash}.parquet").to_pylist()


def requests_of(spec, point_index):
    rows = read_table(spec.run_dir, "requests").to_pylist()
    return sorted((r for r in rows if r["point_index"] == point_index), key=lambda r: r["request_index"])


# 1: the scheduler stops partway through load point 1 ----------------------------------------------------------------
def test_hang_mid_point_ends_trial_as_server_hang(tmp_path, trial):
    # points: concurrency 1, 2, 3 with 4 requests each; the scheduler dies after the 2nd measured request of point 1
    after = PROBE + (WARMUP + 4) + (WARMUP + 2)
    spec = make_spec(tmp_path, faults=[{"kind": "hang_after_requests", "after_requests": after}])
    plan, rows, session = trial(spec)
    assert [r["status"] for r in rows] == ["ok", "partial", "not_run"]
    assert (rows[1]["completed"], rows[1]["failed"], rows[1]["failed_stall_timeout"]) == (2, 2, 2)
    assert [r["status"] for r in requests_of(spec, 1)] == ["ok", "ok", "failed", "failed"]
    assert {(r["trial_status"], r["trial_error_class"]) for r in rows} == {("failed", "server_hang")}
    assert rows[0]["trial_error_message"] == (
        "no token progress during load point 1 while the server process was alive (stall_timeout_s=20 fired for 2 "
        "of 4 requests: no token for 20 s); a check request afterwards got no token within 20 s either (health "
        "endpoints are not trusted for this)")
    assert [r["status"] for r in stored(spec, plan)] == ["ok", "partial", "not_run"]
    assert rows[2]["error_class"] == "server_hang" and rows[2]["output_tok_per_s"] is None


def test_single_point_with_resets_is_never_ok(tmp_path, trial):
    # one load point: before the check, a partial point on a server that resets every connection read as trial ok
    after = PROBE + WARMUP + 2
    spec = make_spec(tmp_path, "load.concurrency=[1]", faults=[{"kind": "reset_after_requests",
                                                                "after_requests": after}])
    plan, rows, session = trial(spec)
    assert [r["status"] for r in rows] == ["partial"]
    assert (rows[0]["completed"], rows[0]["failed"], rows[0]["failed_conn_error"]) == (2, 2, 2)
    assert (rows[0]["trial_status"], rows[0]["trial_error_class"]) == ("failed", "server_broken")
    message = rows[0]["trial_error_message"]
    assert message.startswith("the server process lives but stopped serving during load point 0 (2 of 4 requests "
                              "failed (conn_error 2)); a check request afterwards failed with conn_error: ")
    verdicts = rank(stored(spec, plan), spec.objective)
    assert [(v.outcome, v.score) for v in verdicts] == [("failed", None)]
    assert verdicts[0].reason.startswith("server_broken: the server process lives but stopped serving")


def test_429_under_load_on_a_healthy_server_stays_partial(tmp_path, trial):
    # one admitted request at a time: of 4 requests from 2 workers, the first is served; while it runs, the other
    # worker's three requests are refused with 429 at once. The check request afterwards is served: healthy.
    # the verdict's reason is checked, not the numbers (faultkit.BASE: a loaded host's noise does not replace it)
    spec = make_spec(tmp_path, "load.concurrency=[2]", "load.output_len=2048", "objective.slo.e2e_ms=1e9",
                     faults=[{"kind": "overload_status", "max_running": 1, "status": 429}])
    plan, rows, session = trial(spec)
    row = rows[0]
    assert (row["status"], row["error_class"]) == ("partial", "http_error")
    assert (row["completed"], row["failed"], row["failed_http_error"]) == (1, 3, 3)
    assert {r["http_status"] for r in requests_of(spec, 0) if r["status"] == "failed"} == {429}
    assert (row["trial_status"], row["trial_error_class"], row["trial_error_message"]) == ("ok", None, None)
    assert row["slo_attainment"] == 0.25      # the refused requests count against goodput
    assert row["goodput_req_per_s"] == pytest.approx(1 / row["duration_s"])
    requests = read_table(spec.run_dir, "requests").to_pylist()
    verdicts = rank(rejudge(stored(spec, plan), requests, spec.objective.slo), spec.objective)
    assert [v.outcome for v in verdicts] == ["no_eligible_point"]
    assert verdicts[0].reason == "no eligible load point: concurrency 2: partial (http_error)"


# 2: runtime errors in the log during load ----------------------------------------------------------------------------
def test_cuda_oom_logged_during_load_is_runtime_oom_not_hang(tmp_path, trial):
    after = PROBE + (WARMUP + 4) + (WARMUP + 2)
    spec = make_spec(tmp_path, faults=[{"kind": "runtime_error_after_requests", "after_requests": after,
                                        "error": "runtime_oom", "then": "hang"}])
    plan, rows, session = trial(spec)
    assert [r["status"] for r in rows] == ["ok", "partial", "not_run"]
    assert {(r["trial_status"], r["trial_error_class"]) for r in rows} == {("failed", "runtime_oom")}
    message = rows[0]["trial_error_message"]
    assert message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                              "total capacity of 74.51 GiB of which 1.06 GiB is free.")
    assert ("logged during load point 1; no token progress during load point 1 while the server process was alive "
            "(stall_timeout_s=20 fired for 2 of 4 requests: no token for 20 s)") in message
    tail = rows[0]["log_tail"]
    assert "Scheduler hit an exception" in tail and "torch.OutOfMemoryError" in tail
    # the server's own lines, not grid's polls (the metrics sampler scraped /metrics during every point)
    assert "Decode batch" in tail
    assert '"GET /metrics' not in tail and '"GET /health' not in tail and '"GET /grid/telemetry' not in tail
    log = (tmp_path / "logs" / f"{plan.config_hash}.log").read_text()
    assert '"GET /metrics HTTP/1.1" 200' in log      # they were there, and were left out of the stored tail


def test_nccl_error_then_exit_is_nccl_error(tmp_path, trial):
    after = PROBE + WARMUP + 2
    spec = make_spec(tmp_path, "load.concurrency=[1,2]", faults=[{"kind": "runtime_error_after_requests",
                                                                  "after_requests": after, "error": "nccl_error",
                                                                  "then": "exit", "exit_code": 1}])
    plan, rows, session = trial(spec)
    assert [r["status"] for r in rows] == ["partial", "not_run"]
    assert rows[0]["completed"] == 2 and rows[0]["failed"] == 2
    assert {(r["trial_status"], r["trial_error_class"]) for r in rows} == {("failed", "nccl_error")}
    assert rows[0]["trial_error_message"] == (
        "server exited with code 1 during load point 0: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.21.5")
    assert "Received sigquit" in rows[0]["log_tail"]


# 5: timeouts that contradict the measurement -------------------------------------------------------------------------
def test_stall_timeout_below_ttft_is_said_before_and_after(tmp_path, trial):
    # 8192-token prompts need ~0.3 modelled s to the first token on one H100 (2 x 8B x 8192 = 131 TFLOP at about half
    # of the 989 TFLOP/s dense BF16 peak, plus attention and the front end); stall_timeout 0.2 s is shorter. The clock
    # runs at x1 so that the 0.1 s between the timeout and the first token is 0.1 real s: at x10 (10 ms) the point
    # read partial, not failed, on a host loaded to 5-8x (a late event loop is the likely cause)
    spec = make_spec(tmp_path, "load.concurrency=[1]", "load.input_len=8192", "load.output_len=16",
                     "load.stall_timeout_s=0.2")
    plans = expand(spec)
    ttft_s = first_wave_ttft_s(spec, plans[0], "0.5.9", 1)
    assert 0.25 < ttft_s < 0.45
    assert plan_notes(spec, plans, "0.5.9")[-1] == (
        "load.stall_timeout_s=0.2 is shorter than the time to first token the twin models for concurrency 1 (base: "
        f"{ttft_s:.1f} s for the last of the first wave of 8192-token prompts): those requests will fail with stall_timeout "
        "and the trial would read as a hung server; raise load.stall_timeout_s to at least 1")
    plan, rows, session = trial(spec)
    row = rows[0]
    assert (row["status"], row["error_class"], row["failed_stall_timeout"]) == ("failed", "stall_timeout", 4)
    # the server answered the check request: not a hang; the verdict names the timeout that fired
    assert (row["trial_status"], row["trial_error_class"]) == ("failed", "stall_timeout")
    message = row["trial_error_message"]
    assert message.startswith("every load point failed; point 0: 4 of 4 requests failed, stall_timeout_s=0.2 fired "
                              "for 4 of 4 requests: no token for 0.2 s; at concurrency 1 stall_timeout_s=0.2 fired "
                              "for 4 of 4 requests: no token for 0.2 s, while the server was healthy (a check "
                              "request right after got its first token in ")
    assert message.endswith("requests under this load wait longer than the timeout for a token; raise the timeout")
    assert "server_hang" not in message
