"""Ray Tune's search API over a grid search policy: ``PolicySearcher`` (a ``ray.tune.search.Searcher``) suggests the
configuration the policy picks next, waits while the policy needs a running result, ends the experiment when the
policy is done, and feeds each finished trial's measured score back (``value_of(config_hash)``, read from the
trial's Parquet rows) with whether its every point was host noise (``noisy(config_hash)``), then calls
``measured(config_hash)`` (the driver recalibrates the twin there, grid/search/calibration.py)."""

from __future__ import annotations

from typing import Callable

from ray.tune.search import Searcher

from grid.search.policy import DONE, WAIT, Policy


class PolicySearcher(Searcher):
    def __init__(self, policy: Policy, value_of: Callable[[str], float | None],
                 noisy: Callable[[str], bool] = lambda h: False,
                 measured: Callable[[str], None] | None = None):
        super().__init__()
        self.policy = policy
        self.value_of = value_of
        self.noisy = noisy
        self.measured = measured
        self._trials: dict[str, str] = {}

    def __getstate__(self) -> dict:
        """What Tune pickles of the searcher with its experiment state: all but the ``measured`` callback (it holds
        the driver's console; the driver works with the searcher itself, never with the pickled copy)."""
        return {**self.__dict__, "measured": None}

    def suggest(self, trial_id: str):
        h = self.policy.next()
        if h == DONE:
            return Searcher.FINISHED
        if h == WAIT:
            return None
        self._trials[trial_id] = h
        return {"config_hash": h}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        h = self._trials.pop(trial_id, None)
        if h is not None:
            refused = self.policy.by_hash[h].refused
            self.policy.record(h, None if refused else self.value_of(h), not refused and self.noisy(h))
            if not refused and self.measured is not None:
                self.measured(h)

    def save(self, checkpoint_path: str) -> None:
        """Tune's periodic snapshot of the searcher: what the policy measured, skipped and issued (a log only: grid
        resumes from its Parquet tables, driver.py, and rebuilds the policy from them)."""
        import json

        p = self.policy
        with open(checkpoint_path, "w") as fh:
            json.dump({"measured": p.measured, "skipped": p.skipped, "issued": p.issued}, fh)

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: a resumed run rebuilds the policy from the run directory (driver.plan_search)."""
