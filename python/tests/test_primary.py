"""The primary tier on its own (kvtier_primary_*)."""

import pytest

import kvtier
from kvtier import EventKind, LookupResult, MissReason, Status

from conftest import keys


def test_store_complete_lookup_load():
    k = keys(3)
    with kvtier.Primary(4, event_capacity=16) as primary, primary.request("r") as r:
        plan = primary.prepare_store(r, k)
        assert plan.store_indices == [0, 1, 2] and plan.slots == [0, 1, 2] and not plan.refused
        assert primary.lookup(k).stop == LookupResult.HIT_PENDING
        done = primary.complete_store(r, k)
        assert done.ready == 3
        answer = primary.lookup(k + keys(1, 10))
        assert (answer.hits, answer.stop, answer.reason) == (3, LookupResult.MISS, MissReason.ABSENT)
        assert primary.prepare_load(r, k[1:]) == [1, 2]
        stats = primary.read_stats()
        assert stats["pinned"] == 2 and stats["stores_completed"] == 3
        primary.complete_load(r, k[1:])
        [event] = primary.take_events()
        assert event.kind == EventKind.STORED and event.keys == k and event.tier == 0


def test_refused_store_and_eviction():
    k = keys(4)
    with kvtier.Primary(2, event_capacity=16) as primary, primary.request("r") as r:
        primary.prepare_store(r, k[:2])
        assert primary.prepare_store(r, k[2:]).refused  # both slots write pending
        primary.complete_store(r, k[:2])
        plan = primary.prepare_store(r, k[2:3])
        assert plan.evicted == [k[0]] and plan.slots == [0]


def test_unknown_request_is_an_error():
    with kvtier.Primary(2) as primary:
        with pytest.raises(kvtier.KvtierError) as info:
            primary.prepare_store(12345, keys(1))
        assert info.value.status == Status.UNKNOWN_REQUEST


def test_closed_handle_raises():
    primary = kvtier.Primary(2)
    primary.close()
    with pytest.raises(kvtier.KvtierError) as info:
        primary.lookup(keys(1))
    assert info.value.status == Status.CLOSED


def test_a_completion_that_leaves_keys_alone_raises_with_the_report():
    k = keys(2)
    with kvtier.Primary(4) as primary:
        with primary.request("r") as r:
            primary.prepare_store(r, k[:1])
            with pytest.raises(kvtier.KeysIgnoredError) as info:
                primary.complete_store(r, k)  # k[1] was never planned
            assert info.value.status == Status.KEYS_IGNORED
            assert (info.value.completion.ready, info.value.completion.ignored) == (1, 1)
            assert primary.request_state(r) == kvtier.RequestState.ACTIVE
        assert primary.request_state(r) == kvtier.RequestState.GONE
        assert primary.request_state(r + 1) == kvtier.RequestState.NEVER_ISSUED
