"""SGLang's radix cache (prefix caching) in the twin: which prompt tokens are found cached, and what eviction does when
the working set outgrows the KV pool (pure: no clocks, no I/O).

SGLang keeps the KV of finished requests in a radix tree keyed by token ids (``python/sglang/srt/mem_cache/
radix_cache.py``): a new request reuses the KV of its longest cached prefix (``#cached-token`` in the Prefill batch
line, ``cached_tokens`` in the response's ``meta_info``), and when the pool needs room it evicts leaves whose KV no
running request holds, least recently used first (``evict``: a heap of leaves by ``last_access_time``). ``--disable-
radix-cache`` turns it off: nothing is ever found. Multi-turn conversations hit it hard: each turn carries the whole
history, so everything but the new user message and the previous answer's tail is cached, until the sessions
together hold more tokens than the pool and LRU eviction starts dropping exactly the histories that come back next
(round-robin access is LRU's worst case), and the hit rate collapses.

:class:`RadixCache` is a token-level model of that tree (a trie over token ids; a node per token keeps the model
simple and exact, the cost is memory per cached token, fine for the twin's working sets).
:func:`session_hit_rate` runs the multi-turn pattern through it: the hit rate against concurrency, tested with exact
values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class _Node:
    parent: _Node | None
    token: int
    children: dict[int, _Node] = field(default_factory=dict)
    last_access: int = 0
    locks: int = 0


class RadixCache:
    """Cached token prefixes within ``capacity_tokens`` (the KV pool's size in tokens), evicted least recently used
    first, leaf by leaf, never a token a running request holds (:meth:`lock`). Raises ``ValueError`` for a negative
    capacity."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 0:
            raise ValueError(f"capacity_tokens must be >= 0, got {capacity_tokens}")
        self.capacity = capacity_tokens
        self.root = _Node(None, -1)
        self.size = 0          # cached tokens (nodes below the root)
        self.clock = 0         # logical time of the last access
        self.hit_tokens = 0    # tokens found cached over every match
        self.query_tokens = 0  # tokens asked for over every match

    def _walk(self, tokens: Sequence[int]) -> list[_Node]:
        node, path = self.root, []
        for t in tokens:
            node = node.children.get(t)  # type: ignore[assignment]
            if node is None:
                break
            path.append(node)
        return path

    def match(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of ``tokens`` are cached (their KV is reused); counts toward :attr:`hit_rate` and
        refreshes their last access."""
        path = self._walk(tokens)
        self.clock += 1
        for n in path:
            n.last_access = self.clock
        self.hit_tokens += len(path)
        self.query_tokens += len(tokens)
        return len(path)

    def insert(self, tokens: Sequence[int]) -> None:
        """Cache ``tokens`` (a finished request's prompt and output), then evict down to the capacity."""
        self.clock += 1
        node = self.root
        for t in tokens:
            child = node.children.get(t)
            if child is None:
                child = node.children[t] = _Node(node, t)
                self.size += 1
            child.last_access = self.clock
            node = child
        self.evict(self.size - self.capacity)

    def lock(self, tokens: Sequence[int], delta: int = 1) -> None:
        """Hold (``delta`` 1) or release (-1) the cached prefix of ``tokens`` for a running request."""
        for n in self._walk(tokens):
            n.locks += delta

    def evict(self, tokens: int) -> int:
        """Drop at least ``tokens`` cached tokens, oldest unlocked leaves first; returns how many were dropped (fewer
        when the rest is locked)."""
        dropped = 0
        while dropped < tokens:
            leaves = [n for n in self._nodes() if not n.children and n.locks == 0]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: n.last_access)
            while victim is not self.root and not victim.children and victim.locks == 0 and dropped < tokens:
                parent = victim.parent
                assert parent is not None
                del parent.children[victim.token]
                self.size -= 1
                dropped += 1
                victim = parent
        return dropped

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    @property
    def hit_rate(self) -> float:
        """Cached share of every token asked for so far (SGLang's ``sglang:cache_hit_rate``); 0 before any match."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


def session_tokens(session: int, turn: int, user_tokens: int, answer_tokens: int) -> tuple[list[int], list[int]]:
    """(prompt, answer) token ids of turn ``turn`` (0-based) of conversation ``session``: the prompt is the whole
    history (every earlier user message and answer) plus this turn's user message; ids are unique per session, so
    sessions share nothing."""
    def block(kind: int, t: int, n: int) -> list[int]:
        return [((session * 1000 + t) * 2 + kind) * 100_000 + i for i in range(n)]

    history: list[int] = []
    for t in range(turn):
        history += block(0, t, user_tokens) + block(1, t, answer_tokens)
    return history + block(0, turn, user_tokens), block(1, turn, answer_tokens)


def session_hit_rate(concurrency: int, turns: int, user_tokens: int, answer_tokens: int, capacity_tokens: int) -> float:
    """The radix cache's hit rate over ``concurrency`` conversations of ``turns`` turns each, served in lock step
    (every session's turn ``t`` before any session's turn ``t + 1``, as a closed loop of ``concurrency`` users
    does), each turn's prompt matched and then prompt + answer cached, in a pool of ``capacity_tokens``. Raises
    ``ValueError`` for a non-positive count."""
    if min(concurrency, turns, user_tokens, answer_tokens) < 1:
        raise ValueError("concurrency, turns, user_tokens and answer_tokens must be >= 1")
    cache = RadixCache(capacity_tokens)
    for t in range(turns):
        for s in range(concurrency):
            prompt, answer = session_tokens(s, t, user_tokens, answer_tokens)
            cache.match(prompt)
            cache.insert(prompt + answer)
    return cache.hit_rate
