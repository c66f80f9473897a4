"""Leftover process groups (issue 11 item 4): every group a run starts is recorded in the run directory with its
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
