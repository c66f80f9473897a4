"""How SGLang's released server behaves, per release: named features with the releases they hold for, each read off
the released server or its wheel (pure facts, with sources). The twin and the tests ask :func:`holds` instead of
comparing version numbers where they use the fact.

A feature's ``since``/``until`` are the releases it was measured or read in; where the releases between two measured
ones were not checked, ``source`` says so and the boundary is the last measured release.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.versions import ReleaseTuple, release_tuple


@dataclass(frozen=True)
class Feature:
    """A behaviour of SGLang's server from release ``since`` to ``until`` (inclusive; None: still), and its
    ``source``."""

    name: str
    since: str
    until: str | None
    what: str
    source: str

    def holds(self, version: ReleaseTuple) -> bool:
        return release_tuple(self.since) <= version[:3] and (self.until is None
                                                             or version[:3] <= release_tuple(self.until))


FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("caches_last_output_token", "0.5.9", "0.5.9",
            "a finished request leaves its prompt and every generated token in the radix cache, the last one included "
            "(later releases leave all but the last, whose KV was never computed)",
            "measured on a CPU host: a 64-token prompt answered with 32 tokens is found as 96 cached tokens of the "
            "next turn on 0.5.9 and 95 on 0.5.23 (srt/mem_cache/radix_cache.py cache_finished_req inserts the "
            "request's committed KV, kv_committed_len); 0.5.10-0.5.22 not measured, taken as 0.5.23"),
)}


def holds(name: str, version: ReleaseTuple) -> bool:
    """Whether feature ``name`` holds for SGLang ``version``. Raises ``KeyError`` naming the known features."""
    try:
        feature = FEATURES[name]
    except KeyError:
        raise KeyError(f"no release feature {name!r}; known: {', '.join(sorted(FEATURES))}") from None
    return feature.holds(version)
