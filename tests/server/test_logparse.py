from grid.server.logparse import decode_stats, parse_batch_line, peak_gen_throughput

# Verbatim lines from sgl-project/sglang#22166, #22331 and #10053
# (docs/sources.md#sglang-log-formats-readiness-phases-failure-modes)
V10 = ("[2026-04-05 20:02:51] Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, cuda graph: True, "
       "gen throughput (token/s): 1635.11, #queue-req: 0")
TP = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, "
      "gen throughput (token/s): 144.95, #queue-req: 0")
OLD = ("[2025-09-03 18:33:19 TP0] Decode batch. #running-req: 1, #token: 137, token usage: 0.00, cuda graph: True, "
       "gen throughput (token/s): 1.06, #queue-req: 0, ")
PREFILL = ("[2026-08-23 09:09:50 TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
           "full token usage: 0.01, swa token usage: 0.01, #running-req: 0, #queue-req: 1, #pending-token: 46401, "
           "cuda graph: False, input throughput (token/s): 8072.80")


def test_decode_line_fields():
    row = parse_batch_line(V10)
    assert row["kind"] == "decode" and row["running_req"] == 32 and row["token"] == 11179
    assert row["token_usage"] == 0.08 and row["cuda_graph"] is True
    assert row["gen_throughput_tok_per_s"] == 1635.11 and row["queue_req"] == 0
    assert parse_batch_line(TP)["prefix"] == "TP0"


def test_old_period_format_with_trailing_separator():
    row = parse_batch_line(OLD)
    assert row["running_req"] == 1 and row["gen_throughput_tok_per_s"] == 1.06 and row["queue_req"] == 0


def test_prefill_hybrid_line():
    row = parse_batch_line(PREFILL)
    assert row["kind"] == "prefill" and row["new_token"] == 8192 and row["pending_token"] == 46401
    assert row["full_token_usage"] == 0.01 and row["input_throughput_tok_per_s"] == 8072.80


def test_peak():
    text = "\n".join([TP, "noise", V10, PREFILL])
    assert len(decode_stats(text)) == 2
    assert peak_gen_throughput(text) == (1635.11, 32)
    assert peak_gen_throughput("nothing") == (None, None)


def test_error_headline_is_the_last_error_line_without_prefix():
    from grid.server.logparse import error_headline

    tail = ("[2026-02-20 10:00:00 TP0] Load weight begin\n"
            "[2026-02-20 10:00:01 TP0] server_args=ServerArgs(enable_nan_detection=False, error=1)\n"
            "[2026-02-20 10:00:02 TP0] ModuleNotFoundError: No module named 'aiter'\n"
            "[2026-02-20 10:00:02] Received sigquit from a child process. It usually means the child failed.\n")
    assert error_headline(tail) == "ModuleNotFoundError: No module named 'aiter'"
    assert error_headline("[t] server_args=ServerArgs(error=1)") == ""
    assert error_headline(None) == "" and error_headline("") == ""
    assert len(error_headline("RuntimeError: " + "x" * 500)) == 160


def test_the_port_a_failed_start_names():
    from grid.server.logparse import taken_port
    from grid.server.session import port_note

    dist = ("[2026-03-01 10:00:02] torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 18103, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in "
            "use")
    http = "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use"
    assert taken_port(dist) == (18103, "torch.distributed's port")
    assert taken_port(http) == (30000, "the HTTP port")
    assert taken_port(http + "\n" + dist) == (18103, "torch.distributed's port")  # the last one the log names
    assert taken_port("RuntimeError: something else") is None and taken_port(None) is None
    assert port_note(30000, 30001, http) == "port_in_use: 30000 taken at launch; retried on 30001"
    assert port_note(30000, 30001, None) == "port_in_use: 30000 taken at launch; retried on 30001"
    assert port_note(39157, 40001, dist) == ("port_in_use: torch.distributed's port 18103 taken at launch (the log "
                                             "names it; the HTTP port was 39157); retried with the HTTP port 40001")
