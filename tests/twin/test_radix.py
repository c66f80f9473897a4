"""The twin's radix cache (grid/twin/radix.py): exact hits, LRU eviction, and the multi-turn hit rate against
concurrency."""

import pytest

from grid.twin.radix import RadixCache, session_hit_rate, session_tokens


def test_longest_cached_prefix_and_whole_leaf_lru_eviction():
    cache = RadixCache(5)
    assert cache.match([1, 2, 3]) == 0
    cache.insert([1, 2, 3, 4])
    assert cache.match([1, 2, 9]) == 2 and cache.size == 4   # the match splits the edge [1 2 3 4] after 2
    cache.insert([7, 8])                         # 6 tokens > 5: the least recently used leaf, [3 4], goes whole
    assert cache.size == 4 and cache.match([1, 2, 3, 4]) == 2 and cache.match([7, 8]) == 2
    assert cache.hit_rate == (0 + 2 + 2 + 2) / (3 + 3 + 4 + 2)


def test_a_parent_left_without_children_is_evicted_in_turn():
    cache = RadixCache(100)
    cache.insert([1, 2, 3, 4])
    cache.insert([1, 2, 5, 6])                   # [1 2] -> {[3 4], [5 6]}
    assert cache.size == 6
    assert cache.evict(5) == 6 and cache.size == 0   # [3 4], then [5 6], then the parent [1 2] itself


def test_a_locked_prefix_is_never_evicted():
    cache = RadixCache(3)
    cache.insert([1, 2, 3])
    cache.lock([1, 2, 3])
    cache.insert([4, 5])                         # over the capacity, but only [4, 5] itself is unlocked
    assert cache.size == 3 and cache.match([1, 2, 3]) == 3 and cache.match([4, 5]) == 0
    cache.lock([1, 2, 3], -1)
    assert cache.evict(2) == 3 and cache.size == 0


def test_a_lock_survives_a_split():
    cache = RadixCache(4)
    cache.insert([1, 2, 3, 4])
    cache.lock([1, 2, 3, 4])
    assert cache.match([1, 2, 7]) == 2           # splits the locked edge: both halves stay held
    assert cache.evict(4) == 0 and cache.size == 4
    cache.lock([1, 2, 3, 4], -1)
    assert cache.evict(1) == 2 and cache.match([1, 2, 3]) == 2


def test_a_turn_carries_the_whole_history():
    prompt, answer = session_tokens(0, 2, user_tokens=3, answer_tokens=2)
    assert len(prompt) == 2 * (3 + 2) + 3 and len(answer) == 2
    earlier, earlier_answer = session_tokens(0, 1, 3, 2)
    assert prompt[:len(earlier) + 2] == earlier + earlier_answer
    assert not set(prompt) & set(session_tokens(1, 2, 3, 2)[0])   # sessions share nothing


@pytest.mark.parametrize("concurrency, expected", [
    # fits (5 sessions x 80 tokens = the pool): every history is found, 120 of 160 prompt tokens per session
    (1, 0.75), (5, 0.75),
    # 6 sessions: turns 0-2 hit 0 + 20 + 40 per session (360); at turn 3 the pool overflows and LRU drops the
    # histories that come next: sessions 0-5 find 60, 60, 60, 40, 20, 0 (240); (360 + 240) / 960
    (6, 0.625),
    (8, 0.296875), (16, 0.0390625),
])
def test_the_hit_rate_collapses_once_the_sessions_outgrow_the_pool(concurrency, expected):
    assert session_hit_rate(concurrency, turns=4, user_tokens=10, answer_tokens=10,
                            capacity_tokens=400) == expected


def test_without_a_pool_nothing_is_found():
    assert session_hit_rate(4, 4, 10, 10, capacity_tokens=0) == 0.0
    with pytest.raises(ValueError, match="must be >= 1"):
        session_hit_rate(0, 4, 10, 10, 400)


def test_holding_a_prefix_is_not_an_access():
    # SGLang's lock references leave last_access_time alone: a prefix held and released after another was cached
    # is still the least recently used one, and goes first
    cache = RadixCache(4)
    cache.insert([1, 2])
    cache.insert([3, 4])
    cache.lock([1, 2])
    cache.lock([1, 2], -1)
    cache.insert([5, 6])
    assert cache.match([1, 2]) == 0 and cache.match([3, 4]) == 2
