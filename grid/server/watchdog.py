"""Supervisor that ties a server's process group to the life of the process that launched it.

``python -m grid.server.watchdog --owner PID --state FILE -- CMD...`` forks twice (so the caller's direct child exits at
once and Ray's "kill the worker's direct children" cleanup cannot SIGKILL the supervisor and orphan the server), starts
a new session (the supervisor's pid is the process group id), starts CMD in that group and then waits for whichever
comes first:

* CMD exits: its exit status (``Popen.returncode``: negative for a signal) is written to ``FILE.exit``;
* the owner process disappears (a crashed Ray actor, a driver killed with SIGKILL, ``ray.kill``).

Either way it then SIGTERMs the whole group, waits up to ``--grace`` seconds and SIGKILLs the group (itself
included), so no TP worker, detokenizer or port holder of the server outlives it. SIGTERM sent to the group by
``ManagedServer.stop`` reaches CMD; the supervisor ignores it and escalates as above.

``FILE`` receives ``{"pgid": ..., "pid": <CMD pid>}`` (written atomically) as soon as CMD has started.
Owner and CMD are watched with ``os.pidfd_open`` (Linux >= 5.3; no pid-reuse race), else by polling every 0.2 s.

Source: docs/sources.md#ray-process-cleanup (what Ray does and does not clean up; the layering grid uses).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def supervise(owner: int, state: str, cmd: list[str], grace_s: float) -> None:
    """Run in the (already detached, session-leading) supervisor: start ``cmd``, wait, reap the group."""
    owner_fd = _pidfd(owner)
    if owner_fd is None and not pid_alive(owner):
        os._exit(3)
    child = subprocess.Popen(cmd)  # inherits our process group and stdout/stderr (the log file)
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _write_json(state, {"pgid": os.getpgrp(), "pid": child.pid})
    child_fd = _pidfd(child.pid)
    while child.poll() is None:
        if owner_fd is not None and child_fd is not None:
            ready, _, _ = select.select([owner_fd, child_fd], [], [], 5.0)
            if owner_fd in ready:
                break
        else:
            time.sleep(0.2)
            if not pid_alive(owner):
                break
    code = child.poll()
    if code is not None:
        _write_json(state + ".exit", {"exit_code": code})
    try:
        os.killpg(0, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if code is None and child.poll() is not None:
        _write_json(state + ".exit", {"exit_code": child.returncode})
    os.killpg(0, signal.SIGKILL)  # the rest of the group, and ourselves


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit("usage: python -m grid.server.watchdog --owner PID --state FILE [--grace S] -- CMD...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="grid.server.watchdog")
    parser.add_argument("--owner", type=int, required=True, help="pid whose death ends the server")
    parser.add_argument("--state", required=True, help="file that receives the pgid (and FILE.exit the exit code)")
    parser.add_argument("--grace", type=float, default=10.0, help="SIGTERM to SIGKILL, seconds")
    args = parser.parse_args(argv[:split])
    cmd = argv[split + 1:]
    if not cmd:
        raise SystemExit("grid.server.watchdog: no command after --")
    if os.fork() > 0:  # the launcher's direct child returns at once
        os._exit(0)
    os.setsid()
    supervise(args.owner, args.state, cmd, args.grace)


if __name__ == "__main__":
    main()
