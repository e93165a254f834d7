"""The vLLM spec's ``kvtier_server`` wiring (`kvtier.vllm.server`), against
a real kvtierd and without vLLM: the scheduler's connection with the
engine's layout and fingerprint, a worker's view of the server's region
(bytes it writes are the slot's for every engine), a mismatched engine
refused, the options that belong to the server refused, and the server's
region left in place by the worker's clean-up."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kvtier import KvtierError, Status
from kvtier.vllm import server as vs
from kvtier.vllm.region import KvtierSharedRegion

from conftest import keys
from server_util import Server

PAGE = 4096
WORLD = 2
CHUNK = WORLD * PAGE  # kv_bytes_per_chunk: one page per worker
SLOTS = 8


def engine_config(dtype: str = "bfloat16") -> SimpleNamespace:
    """The fields of vLLM's OffloadingConfig the wiring reads."""
    return SimpleNamespace(
        engine_id="e1",
        model=SimpleNamespace(name="meta-llama/Llama-3.1-8B", dtype=dtype),
        groups=(SimpleNamespace(tokens_per_block=16),),
        cache=SimpleNamespace(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=SimpleNamespace(tp_size=2, pp_size=1, world_size=WORLD, rank=1),
        worker_kv_bytes_per_block=PAGE,
    )


@pytest.fixture
def server(region_name):
    fp = vs.fingerprint(engine_config(), replicated=False)
    s = Server(region_name, fingerprint=fp, slots=SLOTS, block_bytes=CHUNK)
    s.fingerprint = fp
    try:
        yield s
    finally:
        s.stop()


def options(server: Server, config: SimpleNamespace, **extra) -> dict:
    return vs.connect_options({"kvtier_server": str(server.path), **extra}, config, CHUNK, replicated=False)


def test_the_fingerprint_names_model_dtype_and_layout():
    fp = vs.fingerprint(engine_config(), replicated=False)
    for part in ("model=meta-llama/Llama-3.1-8B", "dtype=bfloat16", "tokens_per_block=16", "tp=2",
                 "world=2", "layout=per-worker", "kv_bytes_per_block=4096"):
        assert part in fp
    assert vs.fingerprint(engine_config(), replicated=True) != fp


def test_a_worker_writes_the_slot_the_servers_manager_plans(server):
    # The server's region lives in the server's directory, not /dev/shm.
    server_files = sorted(p.name for p in server.directory.iterdir() if p.name.startswith(server.name))
    assert server_files
    scheduler = vs.connect(options(server, engine_config()))
    info = scheduler.server_info
    assert (info.fingerprint, info.slot_bytes, info.slot_count) == (server.fingerprint, CHUNK, SLOTS)
    assert scheduler.server_info.region_directory == str(server.directory)
    worker = KvtierSharedRegion("e1", SLOTS, 1, CHUNK, PAGE, region=vs.server_region(info))
    handle, _ = scheduler.request_begin("r")
    k = keys(1)
    (slot,) = scheduler.prepare_store(handle, k).slots
    view = worker.create_next_worker_view(PAGE)
    view[slot, :] = np.arange(PAGE, dtype=np.int64).astype(np.int8)
    scheduler.complete_store(handle, k)
    scheduler.request_finished(handle)
    # Another engine of the same layout loads it from the same slot.
    other = vs.connect(options(server, engine_config()))
    reader, _ = other.request_begin("r")
    assert other.lookup(reader, k).hits == 1
    assert other.prepare_load(reader, k) == [slot]
    expected = np.arange(PAGE, dtype=np.int64).astype(np.int8).tobytes()
    assert bytes(other.slot(slot)[PAGE : 2 * PAGE]) == expected
    other.complete_load(reader, k)
    other.request_finished(reader)
    del view
    worker.cleanup()
    other.close()
    scheduler.close()
    # The worker's clean-up leaves the server's region to the server.
    assert sorted(p.name for p in server.directory.iterdir() if p.name.startswith(server.name)) == server_files


def test_an_engine_of_another_dtype_is_refused(server):
    with pytest.raises(KvtierError) as info:
        vs.connect(options(server, engine_config(dtype="float16")))
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "fingerprint" in info.value.message


def test_an_explicit_fingerprint_replaces_the_derived_one(server):
    chosen = options(server, engine_config(dtype="float16"), kvtier_server_fingerprint=server.fingerprint)
    assert chosen["fingerprint"] == server.fingerprint
    vs.connect(chosen).close()


@pytest.mark.parametrize("key", ["kvtier_tiers", "secondary_tiers", "kvtier_region_directory", "kvtier_progress"])
def test_the_servers_own_options_are_refused(key):
    with pytest.raises(ValueError, match=key):
        vs.refuse_local_options({"kvtier_server": "/x", key: [{"type": "fs"}]}, events=False)
    with pytest.raises(ValueError, match="events"):
        vs.refuse_local_options({"kvtier_server": "/x"}, events=True)
    vs.refuse_local_options({"kvtier_server": "/x"}, events=False)


def test_a_missing_socket_path_is_a_value_error():
    with pytest.raises(ValueError, match="kvtier_server"):
        vs.connect_options({"kvtier_server": 5}, engine_config(), CHUNK, replicated=False)
