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


def test_metrics_address_and_the_probes_beside_metrics():
    import urllib.error
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with kvtier.Manager(4) as m:
        assert m.metrics_address is None
        assert m.readiness() == []
    config = {"primary": {"capacity": 4}, "metrics": {"listen": "127.0.0.1:0"}}
    with kvtier.Manager.from_json(config) as m:
        address = m.metrics_address
        assert address is not None and address.startswith("127.0.0.1:")
        assert not address.endswith(":0"), "port 0 is reported as the port picked"
        for path, body in (("/healthz", b"ok\n"), ("/readyz", b"ready\n")):
            with direct.open(f"http://{address}{path}", timeout=30) as r:
                assert (r.status, r.read()) == (200, body)
        m.shutdown()
        assert m.readiness() == ["manager: shut down"]
        with pytest.raises(urllib.error.HTTPError) as info:
            direct.open(f"http://{address}/readyz", timeout=30)
        assert info.value.code == 503
        assert info.value.read() == b"not ready:\nmanager: shut down\n"


def test_a_completion_that_leaves_keys_alone_raises_with_the_report():
    k = keys(3)
    with kvtier.Manager(8) as m:
        a, _ = m.request_begin("a")
        b, _ = m.request_begin("b")
        m.prepare_store(a, k[:1])
        m.prepare_store(b, k[1:])
        with pytest.raises(kvtier.KeysIgnoredError) as info:
            m.complete_store(b, k)  # k[0] is a's to complete
        e = info.value
        assert isinstance(e, kvtier.KvtierError) and e.status == Status.KEYS_IGNORED
        assert (e.completion.ready, e.completion.foreign) == (2, 1)
        assert "not write pending for request handle 2" in e.message
        assert m.complete_store(a, k[:1]).ready == 1
        with pytest.raises(kvtier.KeysIgnoredError) as info:
            m.complete_store(a, k[:1])  # nothing in flight any more
        assert info.value.completion == kvtier.StoreCompletion(0, 0, 0, 0, 0)


def test_request_state_tells_where_a_handle_stands():
    k = keys(2)
    with kvtier.Manager(8) as m:
        assert m.request_state(0) == kvtier.RequestState.NEVER_ISSUED
        h, _ = m.request_begin("r")
        assert m.request_state(h) == kvtier.RequestState.ACTIVE
        m.prepare_store(h, k)
        m.complete_store(h, k[:1])
        m.prepare_load(h, k[:1])
        m.request_finished(h)
        assert m.request_state(h) == kvtier.RequestState.FINISHING
        m.complete_store(h, k[1:])
        assert m.request_state(h) == kvtier.RequestState.LOADS_PINNED
        m.complete_load(h, k[:1])
        assert m.request_state(h) == kvtier.RequestState.GONE
        with pytest.raises(kvtier.KvtierError) as info:
            m.touch(h, k)
        assert info.value.message == f"unknown request: request handle {h} finished and was let go"
        assert m.request_state(h + 1) == kvtier.RequestState.NEVER_ISSUED


def test_events_queued_counts_what_take_events_hands_out():
    k = keys(3)
    with kvtier.Manager(8, event_capacity=64) as m:
        h, _ = m.request_begin("r")
        assert m.events_queued() == (0, 0)
        m.prepare_store(h, k)
        m.complete_store(h, k)
        assert m.events_queued() == (1, 3)
        [event] = m.take_events()
        assert event.keys == k
        assert m.events_queued() == (0, 0)
