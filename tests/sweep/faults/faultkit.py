"""Helpers for the fault suite (its conftest.py hands ``run_trial`` to tests as the ``trial`` fixture): one trial against the twin without Ray, with faults injected via GRID_TWIN_FAULTS."""

import json


from grid.compose import compose_spec
from grid.engines.base import get_engine
from grid.server.handle import LaunchResult
from grid.server.session import ServerSession
from grid.sweep.measure import measure_trial
from grid.sweep.space import expand


# Small and fast: Llama 3.1 8B on one H100 on the twin's virtual clock; a start-up fault's own timeline runs at x20
# (60 modelled s = 3 real s).
BASE = ["model=llama3_1_8b", "hardware=h100_x1", "load.concurrency=[1,2,3]", "load.min_prompts=4",
        "load.input_len=32", "load.output_len=512", "engine.startup_time_scale=20",
        "load.stall_timeout_s=20", "engine.stop_grace_s=3",
        # the fault timelines below are laid out in modelled seconds for closed loops whose workers start at once
        "load.closed_loop_start=together"]


def make_spec(run_dir, *overrides, faults=None):
    extra = [f"+engine.env.GRID_TWIN_FAULTS='{json.dumps(faults)}'"] if faults else []
    return compose_spec([*BASE, *overrides, *extra], run_dir)


class RecordingSession(ServerSession):
    """A ServerSession that keeps what launch returned and the last server's group, for the assertions."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.launches: list[LaunchResult] = []
        self.groups: list[int] = []

    def launch(self, request):
        result = super().launch(request)
        self.launches.append(result)
        pgid = None if self.server is None else (self.server.pgid or self.server.last_pgid)
        if pgid and pgid not in self.groups:
            self.groups.append(pgid)
        return result


def run_trial(spec, session=None, on_point=None):
    engine = get_engine(spec)
    engine.prepare(spec.run_dir)
    plan = expand(spec)[0]
    session = session or RecordingSession(clean_wait_s=5)
    rows = measure_trial(spec, engine, plan, session, trial_id="t0", on_point=on_point)
    return plan, rows, session

