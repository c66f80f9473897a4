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

:class:`RadixCache` is that tree: edges carry runs of tokens, a match that ends inside an edge splits it, eviction
pops whole leaves from a heap by last access. The twin's server matches each prompt on arrival, holds the matched
prefix while the request runs and caches prompt and output when it finishes (SGLang's ``cache_finished_req``).
:func:`session_hit_rate` runs the multi-turn pattern through it: the hit rate against concurrency, tested with exact
values.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence


class _Node:
    __slots__ = ("parent", "key", "children", "last_access", "locks")

    def __init__(self, parent: _Node | None, key: tuple, last_access: int = 0) -> None:
        self.parent = parent
        self.key = key  # the tokens on the edge from the parent
        self.children: dict[Hashable, _Node] = {}
        self.last_access = last_access
        self.locks = 0


class RadixCache:
    """Cached token prefixes within ``capacity_tokens`` (the KV pool's size in tokens), evicted least recently used
    first, a whole leaf at a time as SGLang does (``evict`` frees ``len(leaf.value)`` tokens), never a token a running
    request holds (:meth:`lock`). Tokens are any hashable values (ids, or the twin's text pieces). Raises
    ``ValueError`` for a negative capacity."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 0:
            raise ValueError(f"capacity_tokens must be >= 0, got {capacity_tokens}")
        self.capacity = capacity_tokens
        self.root = _Node(None, ())
        self.size = 0          # cached tokens
        self.clock = 0         # logical time of the last access
        self.hit_tokens = 0    # tokens found cached over every match
        self.query_tokens = 0  # tokens asked for over every match

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node``'s edge after ``at`` tokens; returns the new upper part (SGLang ``_split_node``)."""
        parent = node.parent
        assert parent is not None
        upper = _Node(parent, node.key[:at], node.last_access)
        upper.locks = node.locks
        parent.children[upper.key[0]] = upper
        node.key = node.key[at:]
        node.parent = upper
        upper.children[node.key[0]] = node
        return upper

    def _walk(self, tokens: Sequence[Hashable], touch: bool = True) -> tuple[list[_Node], int]:
        """The nodes of the longest cached prefix of ``tokens`` (the last one split where the prefix ends) and its
        length; with ``touch`` every node on it counts as accessed now."""
        if touch:
            self.clock += 1
        node, path, i, n = self.root, [], 0, len(tokens)
        while i < n:
            child = node.children.get(tokens[i])
            if child is None:
                break
            key = child.key
            k = 1
            while k < len(key) and i + k < n and key[k] == tokens[i + k]:
                k += 1
            if k < len(key):
                child = self._split(child, k)
            if touch:
                child.last_access = self.clock
            path.append(child)
            i += k
            node = child
        return path, i

    def match(self, tokens: Sequence[Hashable]) -> int:
        """How many leading tokens of ``tokens`` are cached (their KV is reused); counts toward :attr:`hit_rate` and
        refreshes their last access."""
        _, hit = self._walk(tokens)
        self.hit_tokens += hit
        self.query_tokens += len(tokens)
        return hit

    def insert(self, tokens: Sequence[Hashable]) -> None:
        """Cache ``tokens`` (a finished request's prompt and output), then evict down to the capacity."""
        path, i = self._walk(tokens)
        if i < len(tokens):
            parent = path[-1] if path else self.root
            leaf = _Node(parent, tuple(tokens[i:]), self.clock)
            parent.children[leaf.key[0]] = leaf
            self.size += len(leaf.key)
        self.evict(self.size - self.capacity)

    def lock(self, tokens: Sequence[Hashable], delta: int = 1) -> None:
        """Hold (``delta`` 1) or release (-1) the cached prefix of ``tokens`` for a running request (SGLang
        ``inc_lock_ref`` / ``dec_lock_ref``): a held node is never evicted. Its last access stays as it was: only a
        match or an insert counts as an access (SGLang's lock-reference walk leaves ``last_access_time`` alone)."""
        path, _ = self._walk(tokens, touch=False)
        for node in path:
            node.locks += delta

    def evict(self, tokens: int) -> int:
        """Drop at least ``tokens`` cached tokens, least recently used unlocked leaves first (a parent left without
        children becomes a leaf in turn); returns how many were dropped (fewer when the rest is locked)."""
        if tokens <= 0:
            return 0
        heap = [(n.last_access, id(n), n) for n in self._nodes() if not n.children and n.locks == 0]
        heapq.heapify(heap)
        dropped = 0
        while dropped < tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            self.size -= len(leaf.key)
            dropped += len(leaf.key)
            if parent is not self.root and not parent.children and parent.locks == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return dropped

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def flush(self) -> None:
        """Drop everything (SGLang's ``/flush_cache``); the hit counters stay."""
        self.root = _Node(None, ())
        self.size = 0

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
