"""Managers in the node server kvtierd (`Manager.connect`), against a real
server process: shared blocks, the layout check, a dead server, the calls
a connected manager does not take, and hostile arguments."""

from __future__ import annotations

import numpy as np
import pytest

import kvtier
from kvtier import DisconnectedError, KvtierError, Status

from conftest import keys
from server_util import BLOCK_BYTES, SLOTS, Server

FINGERPRINT = "model-a/bf16/block16"


@pytest.fixture
def server(region_name):
    s = Server(region_name, fingerprint=FINGERPRINT)
    try:
        yield s
    finally:
        s.stop()


def connect(server: Server, **options) -> kvtier.Manager:
    return kvtier.Manager.connect(server.path, fingerprint=FINGERPRINT, **options)


def test_a_block_stored_through_one_engine_loads_through_another(server):
    k = keys(3)
    blocks = [np.full(BLOCK_BYTES, i + 1, dtype=np.uint8) for i in range(3)]
    blocks[2][::7] = 0xA5
    with connect(server, name="a", block_bytes=BLOCK_BYTES) as a, connect(server, name="b") as b:
        info_a, info_b = a.server_info, b.server_info
        assert isinstance(info_a, kvtier.ServerInfo)
        # kvtierd names its region after the configuration's and its pid.
        assert info_a.region_name == f"{server.name}-{server.proc.pid}"
        assert info_a.region_directory == str(server.directory)
        assert (info_a.slot_count, info_a.slot_bytes, info_a.capacity) == (SLOTS, BLOCK_BYTES, SLOTS)
        assert info_a.slot_stride >= BLOCK_BYTES and info_a.fingerprint == FINGERPRINT
        assert info_a.protocol >= 1 and info_a.client_id != info_b.client_id
        assert a.capacity == SLOTS
        memory = a.slot_memory()
        assert (memory.stride, memory.slot_bytes, memory.slot_count) == (info_a.slot_stride, BLOCK_BYTES, SLOTS)

        handle, _ = a.request_begin("writer")
        plan = a.prepare_store(handle, k)
        assert plan.store_indices == [0, 1, 2]
        for slot, block in zip(plan.slots, blocks):
            np.frombuffer(a.slot(slot), dtype=np.uint8)[:] = block
        assert a.complete_store(handle, k).ready == 3
        a.request_finished(handle)

        reader, _ = b.request_begin("reader")
        answer = b.lookup(reader, k + keys(1, 100))
        assert answer.hits == 3
        slots = b.prepare_load(reader, k)
        for slot, block in zip(slots, blocks):
            loaded = np.frombuffer(b.slot(slot), dtype=np.uint8).copy()
            assert np.array_equal(loaded, block)
        b.complete_load(reader, k)
        # Requests are each engine's own.
        with pytest.raises(KvtierError) as info:
            a.lookup(reader, k)
        assert info.value.status == Status.UNKNOWN_REQUEST
        b.request_finished(reader)
        assert b.read_stats()["primary_hits"] >= 3


def test_a_layout_other_than_the_servers_is_refused(server):
    with pytest.raises(KvtierError) as info:
        kvtier.Manager.connect(server.path, fingerprint="model-b")
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "fingerprint" in info.value.message
    with pytest.raises(KvtierError) as info:
        connect(server, block_bytes=2 * BLOCK_BYTES)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "block" in info.value.message


def test_a_killed_server_disconnects_every_later_call(server):
    m = connect(server)
    handle, _ = m.request_begin("r")
    server.kill()
    for _ in range(2):
        with pytest.raises(DisconnectedError) as info:
            m.lookup(handle, keys(1))
        assert info.value.status == Status.DISCONNECTED
        assert isinstance(info.value, KvtierError)
    m.close()


def test_no_server_at_the_path_is_disconnected(tmp_path):
    with pytest.raises(DisconnectedError):
        kvtier.Manager.connect(tmp_path / "absent.sock")


def test_tiers_events_and_resets_are_the_servers(server, tmp_path):
    with connect(server) as m:
        refused = [
            lambda: m.add_fs_tier(tmp_path),
            lambda: m.add_redis_tier(),
            lambda: m.add_tier(kvtier.Tier()),
            lambda: m.complete_job(1, 1),
            m.take_events,
            m.events_queued,
            m.wake_fd,
            lambda: m.set_event_callback(print),
            lambda: m.set_request_report_callback(print),
            m.reset_cache,
            m.reset_flushed,
            m.readiness,
        ]
        assert m.metrics_address is None, "the server's configuration owns its endpoint"
        for call in refused:
            with pytest.raises(KvtierError) as info:
                call()
            assert info.value.status == Status.UNSUPPORTED
            assert "connected to kvtierd" in info.value.message
        # Still usable afterwards.
        handle, _ = m.request_begin("after")
        m.request_finished(handle)


def test_a_local_manager_has_no_server_info():
    with kvtier.Manager(4) as m:
        assert m.server_info is None


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"path": 5}, TypeError, "path: expected a str"),
        ({"path": b"/tmp/x.sock"}, TypeError, "path: expected a str"),
        ({"path": "/tmp/a\0b"}, ValueError, "NUL"),
        ({"block_bytes": 1 << 64}, OverflowError, "block_bytes"),
        ({"slot_stride": -1}, OverflowError, "slot_stride"),
        ({"spin_us": 1 << 32}, OverflowError, "spin_us"),
        ({"call_timeout_ms": "10"}, TypeError, "call_timeout_ms"),
        ({"call_timeout_ms": True}, TypeError, "call_timeout_ms"),
        ({"fingerprint": 3}, TypeError, "fingerprint"),
        ({"name": "a\0b"}, ValueError, "name"),
    ],
)
def test_hostile_connect_arguments_are_refused_before_connecting(tmp_path, arguments, error, words):
    arguments = {"path": str(tmp_path / "absent.sock"), **arguments}
    with pytest.raises(error, match=words):
        kvtier.Manager.connect(**arguments)


def test_a_zero_call_timeout_is_an_invalid_argument(tmp_path):
    with pytest.raises(KvtierError) as info:
        kvtier.Manager.connect(tmp_path / "absent.sock", call_timeout_ms=0)
    assert info.value.status == Status.INVALID_ARGUMENT
