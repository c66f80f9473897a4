"""A node lost mid-sweep: its trial is recorded ``skipped`` / ``node_lost`` and runs again on another node.

When a node's raylet dies (the machine rebooted, the pod was evicted, ``ray stop`` on it), everything Ray ran there
dies with it: the trial's own Tune actor, the node's ServerActor and, through its watchdog
(grid/server/watchdog.py), the server's process group. Tune reports the trial as errored; nothing of it was written
(a trial writes its Parquet files when it ends). :class:`NodeLossCallback` (in the driver) tells a lost node from a
trial that failed for another reason by the trial's running marker (grid/status.py: the node it ran on) and
``ray.nodes()`` (that node is no longer alive), and records the configuration ``skipped`` with class ``node_lost``
(never charged to it). The driver then runs the lost configurations again on the nodes left
(grid/sweep/driver.py, ``NODE_LOST_ROUNDS``); their new files replace the ``skipped`` record. One still ``skipped``
runs again when the same command runs again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ray import tune

from grid.cluster.node import node_columns
from grid.server.statuses import status_of
from grid.storage.parquet import write_trial
from grid.storage.rows import LoadPointRow
from grid.storage.schema import load_point_row


#: Real seconds to wait for the cluster to mark a node dead after a trial on it died. The trial's actor is found
#: dead as soon as its connection breaks; the GCS marks the node dead after its health checks fail (Ray 2.60
#: defaults: health_check_period_ms 3000 x health_check_failure_threshold 5, src/ray/common/ray_config_def.h).
NODE_DEATH_WAIT_S = 40.0


def node_alive(node_id: str | None, wait_s: float = 0.0) -> bool:
    """Whether the Ray node ``node_id`` is alive in the connected cluster (unknown ids count as lost); with
    ``wait_s``, True only if it is still alive after that many seconds (polled every half second)."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        alive = any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.5)


def node_lost_rows(spec, plan, marker: dict, message: str) -> list[LoadPointRow]:
    """The load-point rows of a configuration whose node was lost: every point ``not_run``, trial ``skipped`` /
    ``node_lost``, with the node it ran on. Pure."""
    from grid.plan import load_points

    base = dict(run_name=spec.name, trial_id=marker.get("trial_id"), config_hash=plan.config_hash,
                config_json=plan.config_json, label=plan.label, engine=spec.engine.kind, model=spec.model.name,
                hardware=spec.hardware.name, trial_status=status_of("node_lost"), trial_error_class="node_lost",
                trial_error_message=message, input_len=plan.load.input_len, output_len=plan.load.output_len,
                dataset=plan.load.dataset, **node_columns(marker))
    return [load_point_row({}, **base, point_index=i, point_kind=p.kind, point_value=p.value,
                           num_prompts=p.num_prompts, max_concurrency=p.max_concurrency, status="not_run",
                           error_class="node_lost", finished_unix_ns=time.time_ns())
            for i, p in enumerate(load_points(plan))]


class NodeLossCallback(tune.Callback):
    """Records the trials whose node was lost (``lost``: config hashes, in order) as ``skipped`` / ``node_lost``."""

    def __init__(self, spec, plans: dict, console) -> None:
        self.spec, self.plans, self.console = spec, plans, console
        self.lost: list[str] = []

    def __getstate__(self) -> dict:  # Tune pickles callbacks with the experiment; a console holds locks
        return {**self.__dict__, "console": None}

    def on_trial_error(self, iteration, trials, trial, **info):
        plan = self.plans.get(trial.config.get("config_hash"))
        if plan is None:
            return
        path = Path(self.spec.run_dir) / "status" / "running" / f"{plan.config_hash}.json"
        try:
            marker = json.loads(path.read_text())
        except (OSError, ValueError):
            return  # the trial did not get as far as its node: not a node loss
        if node_alive(marker.get("node_id"), NODE_DEATH_WAIT_S):
            return  # a trial that failed on a live node: Tune's own error report stands
        host = marker.get("node_hostname") or "?"
        message = (f"node {host} ({(marker.get('node_id') or '')[:12]}) left the Ray cluster while this "
                   "configuration was measured; its server went with it")
        write_trial(self.spec.run_dir, plan.config_hash,
                    {"load_points": node_lost_rows(self.spec, plan, marker, message)})
        path.unlink(missing_ok=True)
        self.lost.append(plan.config_hash)
        if self.console is not None:
            self.console.print(f"   [yellow]skipped (node_lost)[/] {plan.label}: {message}; it runs again on "
                               "another node", highlight=False, soft_wrap=True)
