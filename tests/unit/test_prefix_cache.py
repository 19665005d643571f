"""The prefix cache: block-chained lookup, LRU eviction by bytes (literal orders on tiny sizes)."""

import pytest

from decide.runtime import mx
from decide.scoring.prefix_cache import PrefixCache


def kv(length: int, layers: int = 2, width: int = 1) -> list:
    """Per-layer K/V of `length` tokens; 4 bytes × width per token per tensor."""
    return [
        (mx.full((1, 1, length, width), float(i)), mx.full((1, 1, length, width), float(-i))) for i in range(layers)
    ]


def entry_lengths(cache: PrefixCache) -> list[int]:
    return [e.length for e in cache.entries.values()]


def test_miss_then_hit_of_the_longest_block_aligned_prefix():
    cache = PrefixCache("m", budget_bytes=10_000, block=4)
    assert cache.lookup(list(range(12))).length == 0
    assert cache.store(list(range(8)), kv(8))
    hit = cache.lookup(list(range(11)))  # blocks [0:4], [4:8] match; [8:11] is not a whole block
    assert hit.length == 8
    assert [k.shape[2] for k, _ in hit.kv] == [8, 8]


def test_partial_hit_slices_the_entry():
    cache = PrefixCache("m", budget_bytes=10_000, block=4)
    cache.store(list(range(12)), kv(12))
    hit = cache.lookup([0, 1, 2, 3, 4, 5, 6, 7, 99, 99, 99, 99])
    assert hit.length == 8
    assert hit.kv[0][0].shape == (1, 1, 8, 1)


def test_a_different_first_block_or_namespace_misses():
    cache = PrefixCache("m", budget_bytes=10_000, block=4)
    cache.store(list(range(8)), kv(8))
    assert cache.lookup([9, 1, 2, 3, 4, 5, 6, 7]).length == 0
    other = PrefixCache("other-model", budget_bytes=10_000, block=4)
    assert other.block_keys(range(8)) != cache.block_keys(range(8))


def test_eviction_is_least_recently_used_first():
    # each entry of 4 tokens: 2 layers × 2 tensors × 4 tokens × 4 bytes = 64 bytes; room for 3
    cache = PrefixCache("m", budget_bytes=200, block=4)
    a, b, c, d = ([x] * 4 for x in (1, 2, 3, 4))
    for t in (a, b, c):
        cache.store(t, kv(4))
    assert cache.nbytes == 192
    cache.lookup(a)  # a becomes the most recent
    cache.store(d, kv(4))  # evicts b, the least recent
    assert [cache.lookup(t).length for t in (a, b, c, d)] == [4, 0, 4, 4]
    assert entry_lengths(cache) == [4, 4, 4]


def test_an_entry_bigger_than_the_budget_is_not_stored():
    cache = PrefixCache("m", budget_bytes=100, block=4)
    assert not cache.store(list(range(8)), kv(8))  # 128 bytes
    assert cache.nbytes == 0 and not cache.entries


def test_a_shorter_prefix_is_served_by_a_longer_entry_until_it_is_evicted():
    cache = PrefixCache("m", budget_bytes=200, block=4)
    short, long_, x, y, z = list(range(4)), list(range(8)), [7] * 4, [8] * 4, [9] * 4
    cache.store(short, kv(4))  # 64 bytes
    cache.store(long_, kv(8))  # 128 bytes; order: short, long
    cache.store(x, kv(4))  # evicts short; order: long, x
    assert cache.lookup(short).length == 4  # found through the long entry; order: x, long
    cache.store(y, kv(4))  # evicts x; order: long, y
    assert cache.lookup(x).length == 0
    cache.store(z, kv(4))  # evicts long; order: y, z
    assert cache.lookup(short).length == 0
    assert entry_lengths(cache) == [4, 4]


def test_only_whole_blocks_are_stored():
    cache = PrefixCache("m", budget_bytes=1000, block=4)
    with pytest.raises(AssertionError):
        cache.store([1, 2, 3], kv(3))
