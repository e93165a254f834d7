"""Cases of our own for the CPU manager, through the public manager
interface only, run by ``run.py`` beside vLLM 0.33's
``cpu/test_manager.py`` against both sides.

Each case restates an item of vLLM's file that also reads the manager's
private state (its policy's ``t1``/``t2``, ghost lists, counters): what
that state decides is asked here through what the manager answers,
chiefly which keys a later store evicts.  Under ARC with no ghost hit the
target size of the recency list is 0, so a store evicts the oldest key
seen once (``t1``) before any key seen again (``t2``): "evicted first"
tells the two lists apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

_NO_REQUEST = ReqContext(req_id="")


def _manager(num_chunks: int = 4, policy: str = "lru", threshold: int = 0, tracker: int = 64_000):
    return CPUOffloadingManager(
        num_chunks=num_chunks,
        cache_policy=policy,
        cache_policy_module_path=None,
        enable_events=True,
        store_threshold=threshold,
        max_tracker_size=tracker,
    )


def _k(n: int):
    return make_offload_key(str(n).encode(), 0)


def _ks(*ns: int) -> list:
    return [_k(n) for n in ns]


def _store(manager, keys, ctx: ReqContext = _NO_REQUEST) -> list:
    """Stores `keys` (prepare and complete); the keys it evicted."""
    output = manager.prepare_store(keys, ctx)
    assert output is not None
    manager.complete_store(output.keys_to_store, ctx)
    return list(output.evicted_keys)


def _load(manager, keys, ctx: ReqContext = _NO_REQUEST) -> None:
    manager.prepare_load(keys, ctx)
    manager.complete_load(keys, ctx)


def _hits(manager, keys) -> bool:
    return all(manager.lookup(key, _NO_REQUEST) is LookupResult.HIT for key in keys)


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_store_that_cannot_evict_enough_evicts_nothing(policy):
    """Three of four keys pinned by a load: a store needing two evictions is
    refused and leaves every key in place; one needing one evicts the free
    key only."""
    manager = _manager(4, policy)
    keys = _ks(1, 2, 3, 4)
    _store(manager, keys)
    manager.prepare_load(keys[1:], _NO_REQUEST)
    assert manager.prepare_store(_ks(5, 6), _NO_REQUEST) is None
    assert _hits(manager, keys)
    assert _store(manager, _ks(5)) == keys[:1]
    manager.complete_load(keys[1:], _NO_REQUEST)


def test_lru_key_loaded_many_times_is_still_evicted():
    """A key pinned and released 128 times stays one evictable key."""
    manager = _manager(1, "lru")
    _store(manager, _ks(1))
    for _ in range(128):
        _load(manager, _ks(1))
    assert _store(manager, _ks(2)) == _ks(1)
    assert _hits(manager, _ks(2))


def test_arc_reset_forgets_the_classification_of_earlier_requests():
    """A request that stored a key before a reset and loads it after: the
    load is a reuse (the key is kept over a key seen once), not the
    request's own insertion."""
    manager = _manager(2, "arc")
    key, other, fresh = _ks(1, 2, 3)
    resumed = ReqContext(req_id="resumed")
    _store(manager, [key], resumed)
    manager.reset_cache()

    replacement = ReqContext(req_id="replacement")
    _store(manager, [key], replacement)
    manager.on_request_finished(replacement)
    _load(manager, [key], resumed)
    manager.on_request_finished(resumed)

    writer = ReqContext(req_id="writer")
    _store(manager, [other], writer)
    manager.on_request_finished(writer)
    assert _store(manager, [fresh]) == [other]


class TestArcThroughEvictions:
    """vLLM's TestARCPolicy cases, their lists read through evictions."""

    def test_stores_then_lookups(self):
        manager = _manager(4, "arc")
        output = manager.prepare_store(_ks(1, 2), _NO_REQUEST)
        assert output is not None
        assert output.keys_to_store == _ks(1, 2)
        assert output.evicted_keys == []
        assert list(output.store_spec.chunk_ids) == [0, 1]
        assert [manager.lookup(k, _NO_REQUEST) for k in _ks(1, 2)] == [LookupResult.HIT_PENDING] * 2
        assert list(manager.take_events()) == []
        manager.complete_store(_ks(1, 2), _NO_REQUEST)
        [event] = list(manager.take_events())
        assert not event.removed and set(event.keys) == set(_ks(1, 2))
        assert [manager.lookup(k, _NO_REQUEST) for k in _ks(1, 2, 3)] == [
            LookupResult.HIT,
            LookupResult.HIT,
            LookupResult.MISS,
        ]
        # Stored once, both are recency entries: after 3 and 4 fill the
        # cache and 3 is touched, 1 then 2 go before the touched key.
        _store(manager, _ks(3, 4))
        manager.touch(_ks(3), _NO_REQUEST)
        assert _store(manager, _ks(5)) == _ks(1)
        assert _store(manager, _ks(6)) == _ks(2)
        assert _hits(manager, _ks(3))

    def test_second_access_outlives_later_single_accesses(self):
        """A touched key moves to the frequency list: keys stored after it
        and seen once are evicted before it (LRU would evict it)."""
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2, 3, 4))
        manager.touch(_ks(1), _NO_REQUEST)
        evicted = []
        for n in (5, 6, 7, 8):
            evicted += _store(manager, _ks(n))
        assert evicted == _ks(2, 3, 4, 5)
        assert _hits(manager, _ks(1))

    def test_pinned_keys_block_a_store_until_loaded(self):
        manager = _manager(4, "arc")
        output = manager.prepare_store(_ks(1, 2, 3, 4), _NO_REQUEST)
        assert output is not None and list(output.store_spec.chunk_ids) == [0, 1, 2, 3]
        manager.complete_store(_ks(1, 2, 3, 4), _NO_REQUEST)
        load = manager.prepare_load(_ks(2, 3), _NO_REQUEST)
        assert np.array_equal(load.chunk_ids, np.array([1, 2], dtype=np.int64))
        assert manager.prepare_store(_ks(5, 6, 7), _NO_REQUEST) is None
        manager.complete_load(_ks(2, 3), _NO_REQUEST)
        output = manager.prepare_store(_ks(5, 6, 7), _NO_REQUEST)
        assert output is not None
        assert len(output.evicted_keys) == 3

    def test_ghost_hits_raise_the_recency_target(self):
        """Two ghost hits raise the target above the recency list's size: a
        store then evicts from the frequency list (without them, the one
        recency key would go)."""
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2, 3, 4))
        assert _store(manager, _ks(5)) == _ks(1)
        assert _store(manager, _ks(6)) == _ks(2)
        manager.touch(_ks(1, 2), _NO_REQUEST)  # ghost hits
        for n in (5, 6, 4):  # recency list: 3; frequency list: 5, 6, 4
            manager.touch(_ks(n), _NO_REQUEST)
        assert _store(manager, _ks(7)) == _ks(5)

    def test_without_ghost_hits_recency_keys_go_first(self):
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2, 3, 4))
        manager.touch(_ks(3, 4), _NO_REQUEST)
        assert _store(manager, _ks(5)) == _ks(1)
        assert _store(manager, _ks(6)) == _ks(2)
        assert _store(manager, _ks(7)) == _ks(5)
        assert _hits(manager, _ks(3, 4, 6, 7))

    @pytest.mark.parametrize(
        ("pinned", "protected", "new_keys", "expected_evicted"),
        [
            ([], [], [7, 8, 9], [6, 5, 3]),
            ([], [], [7, 8, 9, 10], [6, 5, 3, 4]),
            ([5, 6], [], [7, 8], [3, 4]),
            ([], [5, 6], [7, 8], [3, 4]),
            ([5, 6], [3], [7], [4]),
            ([5, 6], [3], [7, 8], None),
        ],
    )
    def test_store_reclaims_recency_keys_when_frequency_keys_cannot_go(
        self, pinned, protected, new_keys, expected_evicted
    ):
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2, 3, 4))
        _store(manager, _ks(5, 6))
        manager.touch(_ks(1, 2), _NO_REQUEST)
        manager.touch(_ks(1), _NO_REQUEST)
        manager.touch(_ks(5, 6), _NO_REQUEST)
        manager.prepare_load(_ks(*pinned), _NO_REQUEST)
        output = manager.prepare_store(_ks(*protected, *new_keys), _NO_REQUEST)
        if expected_evicted is None:
            assert output is None
            assert _hits(manager, _ks(3, 4, 5, 6))
        else:
            assert output is not None
            assert output.keys_to_store == _ks(*new_keys)
            assert output.evicted_keys == _ks(*expected_evicted)
            manager.complete_store(_ks(*new_keys), _NO_REQUEST)
            assert _hits(manager, _ks(*new_keys))
        assert _hits(manager, _ks(*pinned, *protected))
        manager.complete_load(_ks(*pinned), _NO_REQUEST)

    def test_touch_reorders_and_promotes(self):
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2, 3, 4))
        manager.touch(_ks(3, 4), _NO_REQUEST)
        manager.touch(_ks(1, 3, 4), _NO_REQUEST)
        output = manager.prepare_store(_ks(5), _NO_REQUEST)
        assert output is not None
        assert output.keys_to_store == _ks(5)
        assert output.evicted_keys == _ks(2)
        assert list(output.store_spec.chunk_ids) == [1]
        manager.complete_store(_ks(5), _NO_REQUEST)
        # A touch takes a request's keys tail first: the frequency list is
        # 4, 3, 1 (oldest first).  The recency key 5 goes, then 4.
        assert _store(manager, _ks(6)) == _ks(5)
        manager.touch(_ks(6), _NO_REQUEST)
        assert _store(manager, _ks(7)) == _ks(4)

    def test_failed_store_leaves_no_entry(self):
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2, 3, 4))
        output = manager.prepare_store(_ks(5), _NO_REQUEST)
        assert output is not None and output.evicted_keys == _ks(1)
        manager.complete_store(_ks(5), _NO_REQUEST, success=False)
        assert manager.lookup(_k(5), _NO_REQUEST) is LookupResult.MISS
        assert manager.lookup(_k(1), _NO_REQUEST) is LookupResult.MISS
        # The freed chunk takes a new key without evicting.
        assert _store(manager, _ks(6)) == []

    def test_mixed_sequence(self):
        manager = _manager(4, "arc")
        _store(manager, _ks(1, 2))
        assert _store(manager, _ks(3, 4, 5)) == _ks(1)
        manager.touch(_ks(2, 3), _NO_REQUEST)
        assert _store(manager, _ks(6)) == _ks(4)
        assert _hits(manager, _ks(2, 3))
        assert len(list(manager.take_events())) > 0


def test_reuse_filter_counts_offers_not_lookups():
    """store_threshold 2 over a tracker of 3 keys."""
    manager = _manager(4, "lru", threshold=2, tracker=3)
    assert manager.lookup(_k(1), _NO_REQUEST) is LookupResult.MISS
    assert manager.lookup(_k(2), _NO_REQUEST) is LookupResult.MISS
    first = manager.prepare_store(_ks(1, 2), _NO_REQUEST)
    assert first is not None and first.keys_to_store == []
    second = manager.prepare_store(_ks(1, 2), _NO_REQUEST)
    assert second is not None and second.keys_to_store == _ks(1, 2)
    manager.complete_store(_ks(1, 2), _NO_REQUEST)
    third = manager.prepare_store(_ks(3, 4), _NO_REQUEST)
    assert third is not None and third.keys_to_store == []
    # 1 left the tracker for 3 and 4: a new offer counts once again.
    again = manager.prepare_store(_ks(1), _NO_REQUEST)
    assert again is not None and again.keys_to_store == []
    # 3 is still tracked: its second offer admits it.
    admitted = manager.prepare_store(_ks(3), _NO_REQUEST)
    assert admitted is not None and admitted.keys_to_store == _ks(3)


def test_reuse_below_the_threshold_refreshes_a_resident_key():
    manager = _manager(2, "lru", threshold=2, tracker=2)
    head, tail, noise_1, noise_2, newcomer = _ks(0, 1, 2, 3, 4)
    seed = ReqContext(req_id="seed")
    assert manager.prepare_store([head, tail], seed).keys_to_store == []
    assert _store(manager, [head, tail], seed) == []
    manager.on_request_finished(seed)
    assert manager.prepare_store([noise_1, noise_2], ReqContext(req_id="noise")).keys_to_store == []
    reuse = ReqContext(req_id="reuse")
    assert manager.prepare_store([tail], reuse).keys_to_store == []
    manager.on_request_finished(reuse)
    late = ReqContext(req_id="late")
    assert manager.prepare_store([newcomer], late).keys_to_store == []
    output = manager.prepare_store([newcomer], late)
    assert output is not None and output.evicted_keys == [head]


def test_pins_and_failures_bound_what_a_store_can_take():
    """Evictable chunks through the lifecycle, as the most new keys a store
    can take (free chunks plus unpinned ready keys)."""
    manager = _manager(4, "lru")
    assert manager.prepare_store(_ks(1, 2, 3), _NO_REQUEST) is not None
    # Three chunks being written, one free.
    assert manager.prepare_store(_ks(20, 21), _NO_REQUEST) is None
    manager.complete_store(_ks(1, 2, 3), _NO_REQUEST)
    manager.prepare_load(_ks(1), _NO_REQUEST)
    manager.prepare_load(_ks(1), _NO_REQUEST)
    manager.complete_load(_ks(1), _NO_REQUEST)
    # 1 still pinned once: 2, 3 and the free chunk.
    assert manager.prepare_store(_ks(20, 21, 22, 23), _NO_REQUEST) is None
    manager.complete_load(_ks(1), _NO_REQUEST)
    output = manager.prepare_store(_ks(4, 5, 6), _NO_REQUEST)
    assert output is not None and output.evicted_keys == _ks(1, 2)
    manager.complete_store(_ks(4, 5, 6), _NO_REQUEST, success=False)
    assert _hits(manager, _ks(3))
    manager.reset_cache()
    assert manager.lookup(_k(3), _NO_REQUEST) is LookupResult.MISS
    _store(manager, _ks(10, 11, 12))
    manager.prepare_load(_ks(10, 11, 12), _NO_REQUEST)
    assert manager.prepare_store(_ks(14, 15), _NO_REQUEST) is None
    manager.complete_load(_ks(10, 11, 12), _NO_REQUEST)
    output = manager.prepare_store(_ks(14, 15), _NO_REQUEST)
    assert output is not None and output.evicted_keys == _ks(10)
    manager.complete_store(_ks(14, 15), _NO_REQUEST)
    assert _hits(manager, _ks(11, 12, 14, 15))


def _arc_with_prefix_stored_by(seed: ReqContext):
    manager = _manager(5, "arc")
    prefix = _ks(1, 2, 3, 4)
    _store(manager, prefix, seed)
    assert manager.prepare_store(prefix, seed) is not None  # a repeated offer
    _load(manager, prefix, seed)  # an internal read (a cascade)
    manager.on_request_finished(seed)
    return manager, prefix


def test_arc_own_offers_and_reads_are_not_reuse():
    """One request storing, offering again and reading its keys leaves them
    recency keys, tail first: a later key seen once outlives them."""
    manager, prefix = _arc_with_prefix_stored_by(ReqContext(req_id="seed"))
    other = ReqContext(req_id="other")
    _store(manager, _ks(9), other)
    manager.on_request_finished(other)
    assert _store(manager, _ks(10)) == [prefix[3]]
    assert _store(manager, _ks(11)) == [prefix[2]]


def test_arc_another_requests_reads_are_one_reuse():
    """Another request reading the keys (twice) makes them frequency keys:
    a later key seen once goes before them."""
    manager, prefix = _arc_with_prefix_stored_by(ReqContext(req_id="seed"))
    reuse = ReqContext(req_id="reuse")
    _load(manager, prefix, reuse)
    _load(manager, prefix, reuse)
    manager.on_request_finished(reuse)
    other = ReqContext(req_id="other")
    _store(manager, _ks(9), other)
    manager.on_request_finished(other)
    assert _store(manager, _ks(10)) == _ks(9)
    assert _store(manager, _ks(11)) == _ks(10)
    assert _hits(manager, prefix)


def test_arc_key_being_written_is_not_a_frequency_hit():
    """A second request offering a key still being written does not make
    it a frequency key."""
    manager = _manager(2, "arc")
    key, later, fresh = _ks(1, 2, 3)
    writer = ReqContext(req_id="writer")
    assert manager.prepare_store([key], writer) is not None
    observer = ReqContext(req_id="observer")
    output = manager.prepare_store([key], observer)
    assert output is not None and not output.keys_to_store
    manager.on_request_finished(observer)
    assert manager.lookup(key, _NO_REQUEST) is LookupResult.HIT_PENDING
    manager.complete_store([key], writer)
    manager.on_request_finished(writer)
    _store(manager, [later], ReqContext(req_id="later"))
    assert _store(manager, [fresh]) == [key]
