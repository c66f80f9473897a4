"""Pure parts of the fault handling: runtime-error patterns, the poll-line filter of stored
log tails, the verdict after a load point, which request failures come from the server, and the timeout notes."""

import pytest

from grid.loadgen.records import RequestRecord
from grid.report.select import rank
from grid.server.logparse import RUNTIME_ERRORS, runtime_error, strip_poll_lines
from grid.server.session import ServerSession
from grid.sweep.measure import broken_verdict, server_failures
from grid.sweep.notes import timeout_fired_text, timeout_run_note

pytestmark = pytest.mark.faults


# item 2: the real messages, each with its class ------------------------------------------------------------------------
@pytest.mark.parametrize("line, cls", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB "
     "of which 1.06 GiB is free.", "runtime_oom"),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB", "runtime_oom"),
    ("RuntimeError: Decode out of memory. Try to lower your batch size.", "runtime_oom"),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled "
     "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5", "nccl_error"),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", "nccl_error"),
    ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600060 milliseconds", "nccl_error"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
    ("[2026-01-01 10:00:00 TP0] Detected errors during sampling! NaN in the logits.", "nan_output"),
    ("[2026-01-01 10:00:00 TP0] NaN detected in sampler: next_token_logits; values were sanitized before sampling. "
     "This usually indicates numerical overflow (e.g. fp16 activations) or an upstream bug producing NaN. Logged once; "
     "further occurrences are silent.", "nan_output"),  # 0.5.14+ with SGLANG_SANITIZE_NAN_LOGITS set
    ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", "nan_output"),
    # the same failures in other vendors' words (grid/server/statuses.py names each source)
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 432.00 MiB. GPU 0 has a total capacity of 15.92 "
     "GiB of which 7.12 GiB is free.", "runtime_oom"),
    ("HIP out of memory. Tried to allocate 20.00 MiB", "runtime_oom"),
    ("RuntimeError: NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity; 10.24 GiB "
     "already allocated; 10.24 GiB current active; 19.52 MiB free; 10.65 GiB reserved in total by PyTorch)",
     "runtime_oom"),
    ("[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
     "internal error - please report this issue to the NCCL developers, NCCL version 2.20.5", "nccl_error"),
    ("RuntimeError: HIP error: an illegal memory access was encountered", "cuda_error"),
    ("torch.AcceleratorError: HIP error: an illegal memory access was encountered", "cuda_error"),
    ("HIP error: an illegal memory access was encountered, hipErrorIllegalAddress", "cuda_error"),
    ("Search for `hipErrorIllegalAddress' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html",
     "cuda_error"),
    (":0:rocdevice.cpp            :2984: 159730272363 us: [pid:403868 tid:0x7f37b81ff640] Callback: Queue "
     "0x7ef728200000 aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access "
     "memory beyond the largest legal address. code: 0x29", "cuda_error"),
    (":0:rocdevice.cpp:2993: 89216349659 us: Callback: Queue 0x76f0b0600000 aborting with error : "
     "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016", "cuda_error"),
    ("Memory access fault by GPU node-1 (Agent handle: 0x1f829860) on address 0x7a8a4be00000. Reason: Page not "
     "present or supervisor privilege.", "cuda_error"),
])
def test_runtime_error_classes(line, cls):
    text = f"[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 8, #token: 900\n{line}\n"
    assert runtime_error(text) == (cls, runtime_error(line)[1])
    assert runtime_error(text)[0] == cls


def test_other_vendors_words_are_not_claimed_by_their_lookalikes():
    """An HSA status that is not a hardware fault, a HIP/NPU line that is not an error, and the NPU words at start."""
    from grid.server.statuses import STARTUP_LOG_CLASSES, log_class

    assert runtime_error("Callback: Queue 0x7f aborting with error : HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime "
                         "failed to allocate the necessary resources.") is None
    assert runtime_error("HIP version  : 6.2.41134-\nRCCL version : 2.21.5-main:a29a210+\n") is None
    assert runtime_error("[2026-01-01 10:00:00] Using NPU memory fraction 0.9, HIP_VISIBLE_DEVICES=0") is None
    for oom in ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.31 GiB.",
                "RuntimeError: NPU out of memory. Tried to allocate 260.00 MiB (NPU 0; 28.50 GiB total capacity)"):
        assert log_class(oom, STARTUP_LOG_CLASSES) == "startup_oom"


def test_runtime_error_earliest_line_wins_and_ignores_ordinary_lines():
    text = ("[2026-01-01 10:00:00] server_args=ServerArgs(enable_nan_detection=False, dist_init_addr=None)\n"
            "[2026-01-01 10:00:01] Init torch distributed begin.\n"
            "[2026-01-01 10:00:02 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n"
            "[2026-01-01 10:00:03 TP1] NCCL error: unhandled cuda error\n")
    assert runtime_error(text) == ("runtime_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                  "1.00 GiB.")
    assert runtime_error("[2026-01-01 10:00:00] Decode batch, #running-req: 1\nINFO:     ready\n") is None
    assert runtime_error(None) is None
    assert all(source for _, _, source in RUNTIME_ERRORS)   # every pattern names where its message comes from


def test_poll_lines_are_left_out_of_a_tail():
    text = ("[2026-01-01 10:00:00] INFO:     127.0.0.1:5000 - \"GET /metrics HTTP/1.1\" 200 OK\n"
            "INFO:     127.0.0.1:5001 - \"GET /health_generate HTTP/1.1\" 503 Service Unavailable\n"
            "[2026-01-01 10:00:00] INFO:     127.0.0.1:5002 - \"GET /grid/telemetry?x=1 HTTP/1.1\" 200 OK\n"
            "[2026-01-01 10:00:00] INFO:     127.0.0.1:5003 - \"GET /server_info HTTP/1.1\" 200 OK\n"
            "[2026-01-01 10:00:00] INFO:     127.0.0.1:5004 - \"POST /generate HTTP/1.1\" 200 OK\n"
            "[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 1\n"
            "[2026-01-01 10:00:00] INFO:     127.0.0.1:5005 - \"GET /metricsfoo HTTP/1.1\" 404 Not Found\n")
    assert strip_poll_lines(text) == (
        "[2026-01-01 10:00:00] INFO:     127.0.0.1:5004 - \"POST /generate HTTP/1.1\" 200 OK\n"
        "[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 1\n"
        "[2026-01-01 10:00:00] INFO:     127.0.0.1:5005 - \"GET /metricsfoo HTTP/1.1\" 404 Not Found\n")


def test_session_log_tail_shows_the_servers_own_lines(tmp_path):
    # 300 metrics scrapes (25 kB) after the OOM: a plain 4000-byte tail would hold nothing else
    own = "[2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" \
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    scrape = "[2026-01-01 10:00:01] INFO:     127.0.0.1:40000 - \"GET /metrics HTTP/1.1\" 200 OK\n"
    log = tmp_path / "s.log"
    log.write_text("early line\n" * 50 + own + scrape * 300)

    class FakeServer:
        log_path = log

        def log_tail(self, max_bytes):
            return log.read_bytes()[-max_bytes:].decode()

    session = ServerSession()
    session.server = FakeServer()
    tail = session.log_tail(4000)
    assert tail.endswith(own) and "GET /metrics" not in tail and len(tail) <= 4000
    assert tail.startswith("early line\n")     # whole lines only
    log.write_text("early line\n" * 50 + own + scrape * 400)   # 34 kB of scrapes: more than a first 32 kB read
    assert session.log_tail(4000).endswith(own)


# item 1: which failures are the server's, and the verdict after a point ----------------------------------------------
def _rec(status="failed", error_class=None, http_status=None, ttft_ns=None):
    r = RequestRecord(request_index=0, prompt_index=0, api="generate", stream=True, max_tokens=4, planned_input_len=4)
    r.status, r.error_class, r.http_status = status, error_class, http_status
    r.send_perf_ns = 1_000_000
    if ttft_ns is not None:
        r.first_token_perf_ns = r.send_perf_ns + ttft_ns
    return r


def test_server_failures():
    records = [_rec("ok"), _rec(error_class="stall_timeout"), _rec(error_class="read_timeout"),
               _rec(error_class="conn_error"), _rec(error_class="truncated_stream"), _rec(error_class="server_error"),
               _rec(error_class="http_error", http_status=503), _rec(error_class="http_error", http_status=429),
               _rec(error_class="http_error", http_status=400), _rec(error_class="parse_error"),
               _rec(error_class="client_error"), _rec(error_class="empty_output")]
    assert [(r.error_class, r.http_status) for r in server_failures(records)] == [
        ("stall_timeout", None), ("read_timeout", None), ("conn_error", None), ("truncated_stream", None),
        ("server_error", None), ("http_error", 503), ("http_error", 429)]


def test_broken_verdicts():
    failed = [_rec(error_class="conn_error")] * 3
    oom = ("runtime_oom", "torch.OutOfMemoryError: CUDA out of memory.")
    ok_check, hang_check = _rec("ok", ttft_ns=1000), _rec(error_class="stall_timeout")
    reset_check = _rec(error_class="conn_error")
    reset_check.error_message = "ClientOSError: [Errno 104] Connection reset by peer"
    kw = dict(failed=failed, total=8, fired=None)
    assert broken_verdict(2, alive=False, exit_code=-9, check=None, runtime=None, **kw) == (
        "server_crash", "server exited with code -9 during load point 2")
    assert broken_verdict(2, alive=False, exit_code=1, check=hang_check, runtime=oom, **kw) == (
        "runtime_oom", "server exited with code 1 during load point 2: torch.OutOfMemoryError: CUDA out of memory.")
    assert broken_verdict(2, alive=True, exit_code=None, check=ok_check, runtime=None, **kw) is None  # overloaded
    assert broken_verdict(2, alive=True, exit_code=None, check=None, runtime=None, **kw) is None
    assert broken_verdict(2, alive=True, exit_code=None, check=reset_check, runtime=None, **kw) == (
        "server_broken", "the server process lives but stopped serving during load point 2 (3 of 8 requests failed "
                         "(conn_error 3)); a check request afterwards failed with conn_error: ClientOSError: [Errno "
                         "104] Connection reset by peer")
    assert broken_verdict(2, alive=True, exit_code=None, check=hang_check, runtime=None,
                          **{**kw, "fired": "stall_timeout_s=5 fired for 8 of 8 requests: no token for 5 s"}) == (
        "server_hang", "no token progress during load point 2 while the server process was alive (stall_timeout_s=5 "
                       "fired for 8 of 8 requests: no token for 5 s); a check request afterwards got no token within "
                       "20 s either (health endpoints are not trusted for this)")
    cls, message = broken_verdict(2, alive=True, exit_code=None, check=hang_check, runtime=oom, **kw)
    assert cls == "runtime_oom" and message.startswith("torch.OutOfMemoryError: CUDA out of memory. logged during "
                                                       "load point 2; no token progress")
    nan = ("nan_output", "Detected errors during sampling! NaN in the logits.")
    assert broken_verdict(0, alive=True, exit_code=None, check=ok_check, runtime=nan, failed=[], total=4,
                          fired=None) == (
        "nan_output", "the server logged 'Detected errors during sampling! NaN in the logits.' during load point 0: "
                      "its output is garbage from there on")


def test_a_configuration_with_any_broken_row_never_ranks():
    from grid.config.schema import ObjectiveSpec

    from grid.storage.schema import judged_point_row

    good = judged_point_row({}, config_hash="a", label="a", point_index=0, point_kind="concurrency", point_value=1.0,
                            status="ok", trial_status="ok", output_tok_per_s=100.0)
    broken = [{**good, "config_hash": "b", "label": "b", "output_tok_per_s": 1e6},
              {**good, "config_hash": "b", "label": "b", "point_index": 1, "status": "partial",
               "trial_status": "failed", "trial_error_class": "server_hang", "trial_error_message": "no token"}]
    verdicts = rank([good, *broken], ObjectiveSpec())
    assert [(v.config_hash, v.outcome) for v in verdicts] == [("a", "best"), ("b", "failed")]
    assert verdicts[1].reason == "server_hang: no token"


# item 5: timeout notes -------------------------------------------------------------------------------------------------
def test_timeout_texts():
    assert timeout_fired_text({"stall_timeout": 3, "read_timeout": 1, "conn_error": 2}, 8, 5.0, 600.0) == (
        "stall_timeout_s=5 fired for 3 of 8 requests: no token for 5 s; read_timeout_s=600 fired for 1 of 8 "
        "requests: no bytes for 600 s")
    assert timeout_fired_text({"conn_error": 2}, 8, 5.0, 600.0) is None
    assert timeout_run_note("concurrency 8", "stall_timeout_s=5 fired for 3 of 8 requests: no token for 5 s", 120.0,
                            None, 5.0, 600.0) == (
        "at concurrency 8 stall_timeout_s=5 fired for 3 of 8 requests: no token for 5 s, while the server was healthy "
        "(a check request right after got its first token in 0.12 s): requests under this load wait longer than the "
        "timeout for a token; raise the timeout")
    assert timeout_run_note("concurrency 8", None, None, 4500.0, 5.0, 600.0) == (
        "at concurrency 8 a request waited 4.5 s for a token, 90% of load.stall_timeout_s=5: higher levels will "
        "likely fail with that timeout; raise it")
    assert timeout_run_note("concurrency 8", None, None, 3000.0, 5.0, 600.0) is None
    assert timeout_run_note("concurrency 8", None, None, 500_000.0, None, 600.0) == (
        "at concurrency 8 a request waited 500 s for a token, 83% of load.read_timeout_s=600: higher levels will "
        "likely fail with that timeout; raise it")


def test_every_status_and_class_is_documented():
    from grid.loadgen.records import ERROR_CLASSES
    from grid.storage.vocabulary import VOCABULARY

    listed: dict[str, set[str]] = {}
    for column, value, meaning in VOCABULARY:
        assert meaning, (column, value)
        listed.setdefault(column, set()).add(value)
    assert listed["requests.error_class"] == set(ERROR_CLASSES)
    assert listed["load_points.status"] == {"ok", "partial", "failed", "not_run"}
    assert listed["load_points.trial_status"] == {"ok", "failed", "invalid", "skipped"}
    produced = {cls for cls, _, _ in RUNTIME_ERRORS} | {"server_crash", "server_hang", "server_broken", "refused",
                                                         "startup_exit", "startup_oom", "startup_timeout",
                                                         "port_in_use", "env_dirty", "garbage_output", "empty_output",
                                                         "nan_output", "probe_error", "all_points_failed"}
    assert produced <= listed["load_points.trial_error_class"]
    from grid.search.levels import EARLY_STOP_CLASSES

    assert listed["load_points.error_class"] == set(EARLY_STOP_CLASSES)   # a skipped point's class


def test_every_infrastructure_class_is_in_the_vocabulary():
    from grid.server.infra import INFRA_CLASSES
    from grid.storage.vocabulary import VOCABULARY

    listed = {value for column, value, _ in VOCABULARY if column == "load_points.trial_error_class"}
    assert set(INFRA_CLASSES) <= listed
