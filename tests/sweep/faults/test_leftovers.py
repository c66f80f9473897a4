"""Leftover process groups: every group a run starts is recorded in the run directory with its
leader's start time and the run id its processes carry in GRID_RUN_ID; the next invocation ends what is left of an
earlier run's groups, and only processes that match all three."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grid.server.process import (GroupRecord, ManagedServer, ProcessRegistry, RUN_ID_ENV, REGISTRY_ENV, group_members,
                                 process_start_ticks, reap_leftovers)
from tests.timing import slack

pytestmark = pytest.mark.faults


def sleeper(env_extra: dict, pgid: int | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV} | env_extra
    # a new group (pgid None) or the given one; same session, so others may join (setpgid(2))
    return subprocess.Popen(["sleep", "300"], env=env, process_group=pgid or 0)


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def test_leftover_group_is_reported_and_ended_unrelated_process_untouched(tmp_path):
    registry = ProcessRegistry(tmp_path / "processes")
    leader = sleeper({RUN_ID_ENV: "run-old"})                       # the earlier run's server group
    member = sleeper({RUN_ID_ENV: "run-old"}, pgid=leader.pid)       # one more process of it
    stranger = sleeper({}, pgid=leader.pid)                          # same group, no marker: not ours
    other_run = sleeper({RUN_ID_ENV: "run-other"}, pgid=leader.pid)  # same group, another run's marker
    current = sleeper({RUN_ID_ENV: "run-now"})                       # the current run's own group
    procs = [leader, member, stranger, other_run, current]
    try:
        time.sleep(0.2)
        registry.add(GroupRecord(leader.pid, process_start_ticks(leader.pid), "run-old", "sleep 300"))
        registry.add(GroupRecord(current.pid, process_start_ticks(current.pid), "run-now", "sleep 300"))
        notes = reap_leftovers(tmp_path / "processes", current_run_id="run-now", grace_s=2)
        assert notes == [f"ended 2 leftover process(es) {sorted([leader.pid, member.pid])} of group {leader.pid} "
                         "from run run-old (sleep 300)"]
        leader.wait(5), member.wait(5)
        assert (leader.returncode, member.returncode) == (-15, -15)  # SIGTERM was enough
        assert alive(stranger) and alive(other_run) and alive(current)
        assert [r.run_id for r in registry.records()] == ["run-now"]  # the old record is gone, the current kept
        assert reap_leftovers(tmp_path / "processes", current_run_id="run-later") == [
            f"ended 1 leftover process(es) [{current.pid}] of group {current.pid} from run run-now (sleep 300)"]
    finally:
        for p in procs:
            if alive(p):
                p.kill()
            p.wait(5)


def test_recycled_group_id_gets_no_signal(tmp_path):
    """A record whose group id now belongs to processes started later without the marker (pid reuse): no match."""
    registry = ProcessRegistry(tmp_path / "processes")
    proc = sleeper({})
    try:
        registry.add(GroupRecord(proc.pid, 0, "run-old", "server"))
        assert reap_leftovers(tmp_path / "processes", "run-now", grace_s=1) == []
        assert alive(proc) and registry.records() == []
    finally:
        proc.kill()
        proc.wait(5)


def test_managed_server_records_its_group_and_removes_it_on_stop(tmp_path, monkeypatch):
    monkeypatch.setenv(RUN_ID_ENV, "run-x")
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "processes"))
    server = ManagedServer([sys.executable, "-c", "import time; time.sleep(300)"], {}, tmp_path / "s.log",
                           "127.0.0.1", 1)
    server.start()
    try:
        (record,) = ProcessRegistry(tmp_path / "processes").records()
        assert record.pgid == server.pgid and record.run_id == "run-x"
        assert record.start_ticks == process_start_ticks(server.pgid)
        assert Path(f"/proc/{server.pid}/environ").read_bytes().count(b"GRID_RUN_ID=run-x\0") == 1
    finally:
        server.stop(2)
    assert ProcessRegistry(tmp_path / "processes").records() == [] and group_members(record.pgid) == []


# A server whose child leaves the process group (setsid) keeping the listening socket: such a child was
# seen to stall a run for over 400 s, and the next run, carrying the same run id marker, neither found nor ended it.
ESCAPING_SERVER = """
import socket, subprocess, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], pass_fds=[s.fileno()],
                         start_new_session=True)
open(sys.argv[2], "w").write(str(child.pid))
time.sleep(300)
"""


def _escaping_server(tmp_path, run_id: str) -> tuple[ManagedServer, int, int]:
    from grid.server.process import free_port, port_holders

    port = free_port()
    script = tmp_path / "escaping.py"
    script.write_text(ESCAPING_SERVER)
    child_file = tmp_path / "child.pid"
    server = ManagedServer([sys.executable, str(script), str(port), str(child_file)], {RUN_ID_ENV: run_id},
                           tmp_path / "s.log", "127.0.0.1", port)
    server.start()
    deadline = time.monotonic() + 20
    while not (child_file.exists() and child_file.read_text() and port_holders(port)):  # one pid per socket
        assert time.monotonic() < deadline, "the server and its escaped child never both listened"
        time.sleep(0.05)
    child = int(child_file.read_text())
    assert os.getpgid(child) != server.pgid   # it left the group
    return server, port, child


def _gone(pid: int) -> bool:
    import psutil

    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_child_that_left_the_group_holding_the_port_is_found_by_port_and_ended(tmp_path):
    from grid.server.process import port_holders, port_is_free

    server, port, child = _escaping_server(tmp_path, "run-esc")
    try:
        t0 = time.monotonic()
        server.stop(grace_s=2)
        assert time.monotonic() - t0 < 15 * slack()                           # never a stall
        assert _gone(child) and port_is_free("127.0.0.1", port) and port_holders(port) == []
        assert server.escaped == (f"ended 1 process(es) [{child}] of this run that left the server's group and held "
                                  f"port {port}")
    finally:
        if not _gone(child):
            os.kill(child, 9)


def test_a_port_holder_without_the_marker_is_named_never_signalled(tmp_path):
    from grid.server.process import end_escaped_holders, free_port

    port = free_port()
    holder = subprocess.Popen([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                               f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(300)"],
                              env={k: v for k, v in os.environ.items() if k != RUN_ID_ENV})
    try:
        deadline = time.monotonic() + 10
        while (note := end_escaped_holders(port, "run-esc", grace_s=1)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert note.startswith(f"port {port} held by pid {holder.pid} (") and note.endswith("not started by this run")
        assert alive(holder)
    finally:
        holder.kill()
        holder.wait(5)


def test_the_next_run_ends_an_earlier_runs_escaped_child_by_its_marker(tmp_path):
    from grid.server.process import port_is_free

    server, port, child = _escaping_server(tmp_path, "run-gone")
    registry = ProcessRegistry(tmp_path / "processes")
    registry.add(GroupRecord(server.pgid, process_start_ticks(server.pgid), "run-gone", "escaping.py"))
    try:
        os.killpg(server.pgid, 9)                                   # the group dies; the escaped child does not
        deadline = time.monotonic() + 10
        while group_members(server.pgid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not _gone(child) and not port_is_free("127.0.0.1", port)
        notes = reap_leftovers(tmp_path / "processes", current_run_id="run-next", grace_s=2)
        assert notes == [f"ended 1 leftover process(es) [{child}] of group {server.pgid} from run run-gone "
                         "(escaping.py)"]
        assert _gone(child) and port_is_free("127.0.0.1", port)
    finally:
        if not _gone(child):
            os.kill(child, 9)
