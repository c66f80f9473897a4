"""Infrastructure failures (grid/server/infra.py) against the twin, without Ray: the node's server actor is lost
before launch or during a load point. Never charged to the configuration: the trial is `skipped` with class
`actor_lost`, what was measured before the loss is stored, the configuration runs again, and grid.run's exit status
says a configuration has no verdict."""

import pyarrow.parquet as pq
import pytest

from grid.app import EXIT_OK, EXIT_UNDECIDED, exit_status, undecided
from grid.server.infra import InfrastructureLost
from grid.server.process import group_alive
from grid.storage.parquet import read_table
from grid.sweep.driver import plan_run

from tests.sweep.faults.faultkit import RecordingSession, make_spec

pytestmark = pytest.mark.faults


class LosesActor(RecordingSession):
    """A session whose owner (the Ray actor) is lost at the ``at``-th call of ``method``: that call and every later
    one raise InfrastructureLost, as grid.cluster.actor.ActorServer does for a dead actor."""

    def __init__(self, method: str, at: int, **kw):
        super().__init__(**kw)
        self.method, self.at, self.calls, self.lost = method, at, 0, False

    def _check(self, name):
        if name == self.method:
            self.calls += 1
            self.lost = self.lost or self.calls >= self.at
        if self.lost:
            raise InfrastructureLost("actor_lost", "the server actor of node n1 died during alive(): ActorDiedError")

    def launch(self, request):
        self._check("launch")
        return super().launch(request)

    def alive(self):
        self._check("alive")
        return super().alive()


def test_actor_lost_during_a_load_point_keeps_earlier_points(tmp_path, trial):
    spec = make_spec(tmp_path)  # load points: concurrency 1, 2, 3
    session = LosesActor("alive", at=2, clean_wait_s=5)  # alive() after point 0 answers; after point 1 it is lost
    try:
        plan, rows, _ = trial(spec, session)
    finally:
        session.stop(3)  # a real lost actor takes its server's group with it (watchdog); here the test stops it
    assert [r["status"] for r in rows] == ["ok", "not_run", "not_run"]
    assert [r["error_class"] for r in rows] == [None, "actor_lost", "actor_lost"]
    assert {r["trial_status"] for r in rows} == {"skipped"} and {r["trial_error_class"] for r in rows} == {"actor_lost"}
    assert rows[0]["trial_error_message"] == "the server actor of node n1 died during alive(): ActorDiedError"
    assert rows[0]["completed"] == 4 and rows[0]["output_tok_per_s"] > 0  # point 0 kept as measured
    assert rows[1]["completed"] is None and rows[1]["output_tok_per_s"] is None  # point 1 measured the loss
    stored = pq.read_table(tmp_path / "parquet" / "load_points" / f"{plan.config_hash}.parquet").to_pylist()
    assert [(r["status"], r["trial_status"]) for r in stored] == [("ok", "skipped"), ("not_run", "skipped"),
                                                                  ("not_run", "skipped")]
    requests = read_table(tmp_path, "requests").to_pylist()
    assert len(requests) == 4 and {r["point_index"] for r in requests} == {0}  # only point 0's requests
    assert {r["point_index"] for r in read_table(tmp_path, "server_log").to_pylist()} <= {0}
    # never charged to the configuration: it runs again, and the invocation has no verdict for it
    assert [p.config_hash for p in plan_run(spec).todo] == [plan.config_hash]
    assert exit_status(spec) == EXIT_UNDECIDED
    assert not any(group_alive(g) for g in session.groups)


def test_actor_lost_before_launch_launches_nothing(tmp_path, trial):
    spec = make_spec(tmp_path)
    session = LosesActor("launch", at=1, clean_wait_s=5)
    plan, rows, _ = trial(spec, session)
    assert session.launches == [] and session.groups == []
    assert [(r["status"], r["error_class"], r["trial_status"]) for r in rows] == [("not_run", "actor_lost", "skipped")] * 3
    assert read_table(tmp_path, "requests").num_rows == 0
    assert exit_status(spec) == EXIT_UNDECIDED


def test_rerun_after_actor_lost_gives_the_verdict_and_exit_0(tmp_path, trial):
    spec = make_spec(tmp_path)
    session = LosesActor("alive", at=1, clean_wait_s=5)
    try:
        trial(spec, session)
    finally:
        session.stop(3)
    assert exit_status(spec) == EXIT_UNDECIDED
    plan, rows, _ = trial(spec)  # the same configuration again, on a sound node
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"] and {r["trial_status"] for r in rows} == {"ok"}
    assert read_table(tmp_path, "requests").num_rows == 4 + 4 + 6  # the new attempt's requests replace the old
    assert plan_run(spec).todo == [] and exit_status(spec) == EXIT_OK


def test_undecided_counts_missing_and_infrastructure_only():
    planned = ["a", "b", "c", "d", "e"]
    recorded = {"a": "ok", "b": "invalid", "c": "failed", "d": "skipped"}
    assert undecided(planned, recorded) == ["d", "e"]
    assert undecided(["a", "b", "c"], recorded) == []
