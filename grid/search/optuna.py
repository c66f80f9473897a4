"""``search=optuna``: Optuna's TPE sampler through Ray Tune's search API (``ray.tune.search.optuna.OptunaSearch``),
as a grid search policy (grid/search/policy.py): it proposes values of the swept settings, each proposal is mapped
to its configuration of the sweep, and the measured score is fed back.

* a proposal that is refused before launch (grid/search/knowledge.py) is told to Optuna as a failed trial at once
  and not counted: Optuna learns to avoid it, no server is launched;
* a configuration known to fail here is treated the same way unless ``search.try_known_failures``;
* a proposal already measured is answered with its score without a launch;
* a failed or unscored configuration is a failed Optuna trial (TPE leaves failed trials out of its model).

It stops at ``search.max_launches`` / ``search.max_gpu_hours`` (set one: TPE has no stopping rule of its own) or when
``DUPLICATES_IN_A_ROW`` proposals in a row were all answered without a launch (the space is exhausted in practice).
Needs the ``optuna`` extra (``pip install -e '.[optuna]'``).
"""

from __future__ import annotations

import json

from grid.search import Search, register
from grid.search.policy import DONE, Candidate, Policy

#: Proposals answered without a launch in a row after which the search ends (Optuna keeps re-proposing the best
#: region of a small discrete space).
DUPLICATES_IN_A_ROW = 50
METRIC = "score"


def _key(settings: dict, keys: list[str]) -> str:
    return json.dumps([settings.get(k) for k in keys])


class OptunaPolicy(Policy):
    def __post_init__(self) -> None:
        super().__post_init__()
        from ray import tune
        from ray.tune.search.optuna import OptunaSearch

        settings = [c.settings or {} for c in self.candidates]
        names = sorted({k for s in settings for k in s})
        self.keys = [k for k in names if len({json.dumps(s.get(k)) for s in settings}) > 1]
        values = {k: list({json.dumps(s.get(k)): s.get(k) for s in settings}.values()) for k in self.keys}
        # Optuna's categorical choices must be None, bool, int, float or str; others go by their JSON text
        self.space = {k: tune.choice([json.dumps(v) for v in vs]) for k, vs in values.items()}
        self.by_point = {_key(c.settings or {}, self.keys): c for c in self.candidates}
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial otherwise
        self.searcher = OptunaSearch(space=OptunaSearch.convert_search_space(self.space), metric=METRIC, mode="max" if self.higher_is_better else "min",
                                     seed=self.seed)
        self.asked = 0
        self.quiet = 0  # proposals in a row answered without a launch
        self.pending: dict[str, str] = {}  # config_hash -> optuna trial id

    def _tell(self, trial: str, value: float | None) -> None:
        if value is None:
            self.searcher.on_trial_complete(trial, None, error=True)
        else:
            self.searcher.on_trial_complete(trial, {METRIC: value})

    def next(self) -> str:
        if self.running:
            return "wait"  # TPE proposes from what is measured: one at a time
        busy = self.host_busy()
        if busy is not None:
            return self._skip_unmeasured(busy)
        while self.quiet < DUPLICATES_IN_A_ROW:
            trial = f"grid_{self.asked}"
            self.asked += 1
            point = self.searcher.suggest(trial)
            if point is None:
                raise RuntimeError(f"OptunaSearch proposed no configuration for {trial}")
            c: Candidate | None = self.by_point.get(json.dumps([json.loads(point[k]) for k in self.keys]))
            if c is None or c.refused or (c.known_to_fail and not self.try_known_failures) \
                    or c.config_hash in self.measured or c.config_hash in self.skipped:
                self.quiet += 1
                self._tell(trial, None if c is None else self.measured.get(c.config_hash))
                if c is not None and c.refused and c.config_hash not in self.issued:
                    self.issued.append(c.config_hash)
                    self.measured[c.config_hash] = None
                    return c.config_hash  # recorded as refused, no launch
                continue
            over = self.budget.stops(c)
            if over is not None:
                self._tell(trial, None)
                return self._skip_unmeasured(over)
            self.quiet = 0
            self.budget.spend(c)
            self.running.add(c.config_hash)
            self.issued.append(c.config_hash)
            self.pending[c.config_hash] = trial
            return c.config_hash
        return self._skip_unmeasured(f"{DUPLICATES_IN_A_ROW} proposals in a row were already measured, refused or "
                                     "known to fail")

    def _skip_unmeasured(self, reason: str) -> str:
        for c in self.candidates:
            if c.config_hash not in self.issued and c.config_hash not in self.measured:
                self.skipped.setdefault(c.config_hash, reason)
        self.queue = []
        return DONE

    def record(self, config_hash: str, value: float | None, host_noise: bool = False) -> None:
        super().record(config_hash, value, host_noise)
        trial = self.pending.pop(config_hash, None)
        if trial is not None:
            self._tell(trial, value)


register(Search("optuna", "Optuna TPE through Ray Tune's OptunaSearch", OptunaPolicy,
                requires=("optuna", "pip install -e '.[optuna]' (or choose search=twin_guided)")))
