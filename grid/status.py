"""``python -m grid.status RUN_DIR``: where a sweep stands, read from its run directory alone (no Ray needed).

What it reads:

* ``status/plan.json``: every configuration of the sweep (hash, label), the driver's host and pid and the time it
  started, written by the driver before the first trial (:func:`write_plan`);
* ``status/running/<config_hash>.json``: one per trial measuring now, with its node (Ray node id, host name) and
  start time, written by the trial when it starts and removed when it ends (:func:`mark_running`);
* ``parquet/load_points/<config_hash>.parquet``: the configurations recorded, with their verdict and node;
* ``search.json``: the configurations the search chose not to launch and why (grid/search/measured.py
  ``read_record``; e.g. known to fail here once another configuration measured a score).

It prints done / running / left / not launched in all and per node, and says the run is complete when nothing is
left to run (the configurations the search held back are not left: running the command again does not launch them). A configuration marked running while the driver that ran it is
gone (its pid no longer lives on this host) is shown as ``interrupted``: it runs again when the same command runs
again. Exit status 0, or 2 when RUN_DIR holds no sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.server.watchdog import pid_alive

STATUS_DIR = "status"


def _status_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / STATUS_DIR


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def write_plan(run_dir: str | Path, plans: list, run_id: str, hardware: str) -> None:
    """Record the sweep's configurations (``TrialPlan``s) and this driver (host, pid) for the status command; the
    markers of trials an earlier driver left behind are removed."""
    _write_json(_status_dir(run_dir) / "plan.json", {
        "run_id": run_id, "hardware": hardware, "driver_host": socket.gethostname(), "driver_pid": os.getpid(),
        "started_unix_s": time.time(), "configs": [{"config_hash": p.config_hash, "label": p.label} for p in plans]})
    for stale in (_status_dir(run_dir) / "running").glob("*.json"):
        stale.unlink(missing_ok=True)


def mark_running(run_dir: str | Path, plan, node: dict, trial_id: str) -> None:
    """Record that ``plan`` (a TrialPlan) is being measured on ``node`` (grid.cluster.node.local_node)."""
    _write_json(_status_dir(run_dir) / "running" / f"{plan.config_hash}.json", {
        "config_hash": plan.config_hash, "label": plan.label, "trial_id": trial_id,
        "node_id": node.get("node_id"), "node_hostname": node.get("node_hostname"), "started_unix_s": time.time()})


def clear_running(run_dir: str | Path, plan) -> None:
    (_status_dir(run_dir) / "running" / f"{plan.config_hash}.json").unlink(missing_ok=True)


@dataclass
class NodeStatus:
    done: int = 0
    running: list[str] = field(default_factory=list)  # labels


@dataclass
class SweepStatus:
    total: int
    done: dict[str, str]                    # config_hash -> trial_status
    running: list[dict[str, Any]]           # the running markers
    left: list[str]                         # labels of configurations neither done, running nor held back
    driver_alive: bool | None               # None: the driver ran on another host
    nodes: dict[str, NodeStatus]            # host name (node id prefix) -> what ran there
    labels: dict[str, str]
    not_launched: dict[str, str] = field(default_factory=dict)  # label -> why the search did not launch it


def _node_key(hostname: str | None, node_id: str | None) -> str:
    return f"{hostname or '?'} ({(node_id or '-')[:12]})"


def read_status(run_dir: str | Path) -> SweepStatus:
    """The sweep's state from ``run_dir``. Raises ``FileNotFoundError`` when there is no ``status/plan.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    plan = json.loads((_status_dir(run_dir) / "plan.json").read_text())
    labels = {c["config_hash"]: c["label"] for c in plan["configs"]}
    done: dict[str, str] = {}
    nodes: dict[str, NodeStatus] = {}
    for f in sorted((Path(run_dir) / "parquet" / "load_points").glob("*.parquet")):
        try:
            table = pq.read_table(f, columns=None)
        except (OSError, pa.ArrowInvalid):
            continue
        rows = table.to_pylist()
        if not rows or rows[0].get("config_hash") not in labels:
            continue
        done[rows[0]["config_hash"]] = rows[0].get("trial_status") or "?"
        nodes.setdefault(_node_key(rows[0].get("node_hostname"), rows[0].get("node_id")), NodeStatus()).done += 1
    running = []
    for f in sorted((_status_dir(run_dir) / "running").glob("*.json")):
        try:
            mark = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if mark.get("config_hash") in labels:
            running.append(mark)
            key = _node_key(mark.get("node_hostname"), mark.get("node_id"))
            nodes.setdefault(key, NodeStatus()).running.append(mark.get("label", mark["config_hash"]))
    driver_alive = pid_alive(plan["driver_pid"]) if plan.get("driver_host") == socket.gethostname() else None
    from grid.storage.summary import read_record

    busy = {m["config_hash"] for m in running} | {h for h, s in done.items() if s != "skipped"}
    held = {h: str(why.get("reason") or "?") for h, why in read_record(str(run_dir)).get("skipped", {}).items()
            if h in labels and h not in busy and isinstance(why, dict)}
    left = [labels[h] for h in labels if h not in busy and h not in held]
    return SweepStatus(len(labels), done, running, left, driver_alive, nodes, labels,
                       {labels[h]: why for h, why in held.items()})


def render(status: SweepStatus) -> str:
    """The status as text: a summary line, then one line per node, the running configurations and what is left."""
    finished = {h: s for h, s in status.done.items() if s != "skipped"}
    # markers left by a driver that is gone: those trials were cut short and run again when the command runs again
    run_word = "running" if status.driver_alive is not False or not status.running else "interrupted (driver gone)"
    held = f", {len(status.not_launched)} not launched by the search" if status.not_launched else ""
    complete = "; complete: nothing left to run" if not status.left and not status.running else ""
    lines = [f"{len(finished)} done, {len(status.running)} {run_word}, {len(status.left)} left{held} "
             f"of {status.total} configurations{complete}"]
    counts: dict[str, int] = {}
    for s in finished.values():
        counts[s] = counts.get(s, 0) + 1
    if counts:
        lines.append("  done: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for key, node in sorted(status.nodes.items()):
        now = f"; {run_word}: {', '.join(node.running)}" if node.running else ""
        lines.append(f"  node {key}: {node.done} done{now}")
    reasons: dict[str, int] = {}
    for why in status.not_launched.values():
        reasons[why] = reasons.get(why, 0) + 1
    for why, n in sorted(reasons.items()):
        lines.append(f"  not launched by the search: {n} ({why})")
    for label in status.left:
        lines.append(f"  left: {label}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grid.status", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="the sweep's run directory (hydra.run.dir; outputs/<name> by default)")
    args = parser.parse_args(argv)
    try:
        status = read_status(args.run_dir)
    except FileNotFoundError:
        print(f"{args.run_dir}: no sweep here (no {STATUS_DIR}/plan.json; it is written when a sweep starts)",
              file=sys.stderr)
        return 2
    print(render(status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
