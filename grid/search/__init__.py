"""Search strategies: which configurations of a sweep are launched, and in which order. Registered by ``kind``
(``search.kind``, conf/search/). Each strategy is pure (grid/search/policy.py: exhaustive, twin_guided, twin_ranked;
grid/search/residuals.py: twin_guided's model of the twin's error); Ray Tune runs what it picks through its search API
(grid/search/tune.py), or its own searcher (grid/search/optuna.py). Method and benchmark: docs/search.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Search:
    """A registered search: ``kind`` (the config name), one line for the plan, and ``policy(plan_context) ->`` an
    object with ``next()`` and ``record(config_hash, value)`` (grid/search/policy.py); ``requires``: the module it
    imports that grid's own dependencies do not install, and how to install it (checked before anything launches)."""

    kind: str
    describe: str
    policy: Callable
    requires: tuple[str, str] | None = None


SEARCHES: dict[str, Search] = {}


def register(search: Search) -> Search:
    SEARCHES[search.kind] = search
    return search


from grid.search import policy as _policy  # noqa: E402  (registers exhaustive, twin_ranked and twin_guided)
from grid.search import optuna as _optuna  # noqa: E402  (registers optuna; imports optuna and Ray Tune when used)

__all__ = ["SEARCHES", "Search", "register", "_policy", "_optuna"]
