import socket
import sys
import time
from pathlib import Path

import pytest

from grid.server.process import ManagedServer, StartupError, free_port, group_alive, port_is_free
from tests.timing import slack

SCRIPT = str(Path(__file__).parent.parent / "fixtures" / "phased_server.py")


def group_gone(pgid: int) -> bool:
    return not group_alive(pgid)


def test_readiness_phases_and_group_cleanup(tmp_path):
    port = free_port()
    s = ManagedServer([sys.executable, SCRIPT, str(port), "0.4", "0.4"], {}, tmp_path / "s.log", "127.0.0.1", port)
    s.start()
    info = s.wait_ready(timeout_s=30)
    assert info.phases[0] == "refused" and "503" in info.phases and info.phases[-1] == "200"
    assert 0.7 < info.startup_s < 10 * slack() and info.port_open_s is not None and info.port_open_s < info.startup_s
    pgid = s.pgid
    s.stop(grace_s=2)
    assert group_gone(pgid)                 # the sleep grandchild is gone too
    assert port_is_free("127.0.0.1", port)


def test_time_scale_scales_modelled_startup(tmp_path):
    port = free_port()
    s = ManagedServer([sys.executable, SCRIPT, str(port), "0.2", "0.0"], {}, tmp_path / "s.log", "127.0.0.1", port,
                      time_scale=10.0)
    s.start()
    info = s.wait_ready(timeout_s=100)
    s.stop(1)
    assert info.startup_s >= 2.0            # >= 0.2 real seconds x 10


def test_exit_before_ready_is_classified_oom(tmp_path):
    port = free_port()
    s = ManagedServer([sys.executable, SCRIPT, str(port), "0", "0", "0.2"], {}, tmp_path / "s.log", "127.0.0.1", port)
    s.start()
    with pytest.raises(StartupError) as e:
        s.wait_ready(timeout_s=30)
    assert e.value.error_class == "startup_oom" and e.value.exit_code == 1
    assert "CUDA out of memory" in e.value.log_tail
    s.stop(1)


def test_timeout_kills_group(tmp_path):
    port = free_port()
    s = ManagedServer([sys.executable, SCRIPT, str(port), "100", "0"], {}, tmp_path / "s.log", "127.0.0.1", port)
    s.start()
    pgid = s.pgid
    t0 = time.monotonic()
    with pytest.raises(StartupError) as e:
        s.wait_ready(timeout_s=0.5, min_real_s=0)
    assert e.value.error_class == "startup_timeout" and time.monotonic() - t0 < 15 * slack()
    assert group_gone(pgid)


def test_a_process_still_starting_its_interpreter_gets_real_seconds_whatever_its_modelled_timeout(tmp_path):
    # the twin's startup clock runs 200x, so its modelled timeout is 9 real seconds; on a busy host its
    # interpreter had not even opened the port by then and the configuration was charged a startup_timeout
    port = free_port()
    s = ManagedServer([sys.executable, SCRIPT, str(port), "100", "0"], {}, tmp_path / "s.log", "127.0.0.1", port,
                      time_scale=200.0)
    t0 = time.monotonic()
    s.start()
    with pytest.raises(StartupError) as e:
        s.wait_ready(timeout_s=1.0, min_real_s=2.0)  # 5 ms real by the clock scale; silent, port closed
    assert e.value.error_class == "startup_timeout" and time.monotonic() - t0 >= 2.0
    # a process that has written to its log is past its interpreter's start: its modelled timeout holds, from then
    talking = ManagedServer([sys.executable, "-c", "import time; print('Load weight begin', flush=True); "
                             "time.sleep(100)"], {}, tmp_path / "t.log", "127.0.0.1", free_port(), time_scale=200.0)
    talking.start()
    deadline = time.monotonic() + 30 * slack()
    while not talking.log_tail().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(StartupError):
        talking.wait_ready(timeout_s=1.0, min_real_s=60.0)
    assert time.monotonic() - t0 < 10 * slack()


def test_port_in_use_detected_before_launch(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        s = ManagedServer([sys.executable, "-c", "pass"], {}, tmp_path / "s.log", "127.0.0.1", port)
        with pytest.raises(StartupError) as e:
            s.start()
        assert e.value.error_class == "port_in_use" and s.pgid is None


def test_a_startup_timeout_names_the_phase_the_log_shows(tmp_path):
    # a server stuck capturing CUDA graphs was reported as "phases seen: refused" only
    port = free_port()
    script = ("import sys, time; print('[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB'); "
              "print('[2026-12-02 10:00:09 TP0] Load weight end. type=GlmMoeDsaForCausalLM, avail mem=22.10 GB'); "
              "print('[2026-12-02 10:00:10 TP0] KV Cache is allocated. #tokens: 1048576, KV size: 9.50 GB'); "
              "print('[2026-12-02 10:00:11 TP0] Capture cuda graph begin. This can take up to several minutes. "
              "avail mem=12.40 GB', flush=True); time.sleep(100)")
    s = ManagedServer([sys.executable, "-c", script], {}, tmp_path / "s.log", "127.0.0.1", port)
    s.start()
    with pytest.raises(StartupError) as e:
        s.wait_ready(timeout_s=1.5)
    assert e.value.error_class == "startup_timeout"
    assert str(e.value).endswith("HTTP phases seen: refused; the log shows it capturing CUDA graphs ('Capture cuda "
                                 "graph begin. This can take up to several minutes. avail mem=12.40 GB')")


def test_startup_phase_reads_the_last_phase():
    from grid.server.logparse import startup_phase

    assert startup_phase(None) is None and startup_phase("INFO: something else") is None
    assert startup_phase("[x] Load weight begin. avail mem=70 GB\n[x] Load weight end. avail mem=20 GB") == (
        "weights loaded, allocating the KV cache", "Load weight end. avail mem=20 GB")
    assert startup_phase("Capture cuda graph bs [1, 2, 4]\nINFO:     Uvicorn running on http://127.0.0.1:30000")[0] == \
        "HTTP server up, warming up"
    # 0.5.14+ words the capture `Capture target decode CUDA graph ...` (`target verify` with speculative decoding)
    assert startup_phase("[x] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem="
                         "70.00 GB")[0] == "capturing CUDA graphs"
    assert startup_phase("[x] Capture target verify CUDA graph end. bs=[1, 2], elapsed=3.00 s, mem usage=1.00 GB, "
                         "avail mem=69.00 GB.")[0] == "CUDA graphs captured, starting the HTTP server"
