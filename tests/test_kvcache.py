"""The K/V cache: what it returns equals concatenating every appended step, and it grows geometrically,
so decoding N tokens reallocates O(log N) times instead of copying the whole cache every step."""

import numpy as np

from blockcli.block import KVCache


def test_cache_returns_every_key_and_value_appended_in_order():
    rng = np.random.default_rng(0)
    cache = KVCache()
    ks, vs = [], []
    for width in (3, 1, 1, 5, 1, 20, 1):
        k, v = rng.standard_normal((2, 2, width, 4)), rng.standard_normal((2, 2, width, 4))
        ks.append(k)
        vs.append(v)
        got_k, got_v = cache.append(k, v)
        assert np.array_equal(got_k, np.concatenate(ks, axis=2))
        assert np.array_equal(got_v, np.concatenate(vs, axis=2))
        assert cache.length == got_k.shape[2]


def test_cache_grows_geometrically():
    cache = KVCache()
    previous, reallocations = None, 0
    for _ in range(1000):
        cache.append(np.zeros((1, 2, 1, 8)), np.zeros((1, 2, 1, 8)))
        if cache._k is not previous:  # `previous` stays referenced, so a new buffer is a new object
            reallocations += 1
            previous = cache._k
    # capacities 16, 32, 64, ..., 1024: 7 buffers for 1000 tokens (one per doubling), not 1000
    assert reallocations == 7
    assert cache.k.shape == (1, 2, 1000, 8)


def test_empty_cache_has_no_keys():
    cache = KVCache()
    assert cache.length == 0 and cache.k is None and cache.v is None
