"""The manager (kvtier_manager_*), its events, stats and metrics."""

import pytest

import kvtier
from kvtier import EventKind, LookupResult, MissReason, OffloadPolicy, Status

from conftest import keys


def test_store_then_load_through_the_manager():
    k = keys(3)
    with kvtier.Manager(8, event_capacity=64, kv_groups=True) as m:
        handle, policy = m.request_begin("req")
        assert policy == OffloadPolicy.BLOCK_LEVEL
        plan = m.prepare_store(handle, k)
        assert plan.store_indices == [0, 1, 2]
        assert m.complete_store(handle, k).ready == 3
        answer = m.lookup(handle, k + keys(1, 9))
        assert (answer.hits, answer.stop, answer.reason) == (3, LookupResult.MISS, MissReason.ABSENT)
        assert m.prepare_load(handle, k) == plan.slots
        m.complete_load(handle, k)
        m.request_finished(handle)
        assert [e.kind for e in m.take_events()] == [EventKind.STORED]
        stats = m.read_stats()
        assert stats["lookups"] == 4 and stats["primary_hits"] == 3
        # Counted once for the finished request: 4 asked, 3 loaded, 1 computed.
        per_request = [
            stats[n]
            for n in (
                "requests_finished",
                "request_blocks_asked",
                "request_blocks_served_primary",
                "request_blocks_recomputed",
                "request_wait_steps",
            )
        ]
        assert per_request == [1, 4, 3, 1, 0]
        primary = m.read_tier_stats(0)
        assert primary["stores_completed"] == kvtier.TierStat(3.0, True)
        text = m.metrics_prometheus().splitlines()
        assert "kvtier_manager_lookups_total 4" in text
        assert 'kvtier_manager_request_blocks_served_total{tier="primary"} 3' in text
        assert m.take_errors() == []


def test_duplicate_and_finished_requests():
    with kvtier.Manager(4) as m:
        handle, _ = m.request_begin("a")
        with pytest.raises(kvtier.KvtierError) as info:
            m.request_begin("a")
        assert info.value.status == Status.DUPLICATE_REQUEST
        m.request_finished(handle)
        with pytest.raises(kvtier.KvtierError) as info:
            m.lookup(handle, keys(1))
        assert info.value.status == Status.UNKNOWN_REQUEST


def test_from_json():
    with kvtier.Manager.from_json({"primary": {"capacity": 16, "policy": "arc"}}) as m:
        assert m.read_tier_stats(0)["capacity"].value == 16
