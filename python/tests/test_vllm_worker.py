"""The worker side of kvtier's vLLM spec, through vLLM 0.33's own CPU worker.

`KvtierOffloadingSpec.get_worker` builds vLLM's ``CPUOffloadingWorker``
over kvtier's shared region: these tests build it from a real
``OffloadingConfig`` and check that the region's views are those of vLLM's
own region, that bytes the worker stores land in the region slots kvtier's
manager names for them (and the other way for loads), and that
``kvtier_tiers`` configures the manager (an fs tier here, whose copy serves a
key the primary tier evicted).  And the region file's lifetime across engine
processes: an engine that shuts down or exits leaves no file, and one killed
with SIGKILL leaves one that the next engine's start removes.

Needs torch and vLLM 0.33 (``make test-vllm-connector`` makes that
environment in build/vllm-torch-venv and runs this file there); skipped
without them.  Without a GPU, vLLM's worker stops where it builds its copy
handlers (``gpu_tensor.is_cuda``) and where a transfer starts (streams,
events, the batched copy kernel).  The tests stand in for the device only:
the "GPU" caches are CPU tensors that answer ``is_cuda``, streams and
events do nothing, and vLLM's ``swap_blocks_batch`` copies the (source,
destination, size) descriptors vLLM computed with memmove.  The spec's
sizing, the region's views and vLLM's descriptors from chunk and block ids
are the real code.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM's CPU platform: no pinned memory
torch = pytest.importorskip("torch")
gpu_worker = pytest.importorskip("vllm.v1.kv_offload.cpu.gpu_worker")

from vllm import _custom_ops  # noqa: E402
from vllm.v1.kv_offload import base  # noqa: E402
from vllm.v1.kv_offload.config import (  # noqa: E402
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion  # noqa: E402
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec  # noqa: E402

import kvtier  # noqa: E402
from kvtier.vllm.region import KvtierSharedRegion  # noqa: E402
from kvtier.vllm.region import region_name as file_name  # noqa: E402
from kvtier.vllm.spec import KvtierOffloadingSpec  # noqa: E402

if gpu_worker.PIN_MEMORY:
    pytest.skip("vLLM's platform pins memory here (a GPU is present)", allow_module_level=True)

GPU_BLOCKS = 8
LAYERS = 2
LAYER_BYTES = 2048  # one layer's bytes of one block, per worker
WORLD = 2
CHUNKS = 4


class _DeviceTensor(torch.Tensor):
    """A CPU tensor standing in for a GPU cache: it answers ``is_cuda``."""

    @property
    def is_cuda(self) -> bool:
        return True


class _Event:
    def __init__(self, enable_timing: bool = False):
        pass

    def record(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other) -> float:
        return 0.0


class _Stream:
    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass


class _Platform:
    """What vLLM's worker asks of the platform for a transfer."""

    Stream = _Stream

    @staticmethod
    def current_stream():
        return _Stream()

    @staticmethod
    def stream(stream):
        return contextlib.nullcontext()

    @staticmethod
    def is_xpu() -> bool:
        return False

    @staticmethod
    def is_rocm() -> bool:
        return False


def _memmove(src_ptrs, dst_ptrs, sizes, is_src_access_order_any: bool = False) -> None:
    for src, dst, size in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        ctypes.memmove(dst, src, size)


@pytest.fixture
def device(monkeypatch):
    """The device stand-ins (see the module's doc)."""
    monkeypatch.setattr(gpu_worker, "current_platform", _Platform)
    monkeypatch.setattr(torch, "Event", _Event)
    monkeypatch.setattr(_custom_ops, "swap_blocks_batch", _memmove)


def config(engine_id: str, extra: dict, *, rank: int = 1, blocks_per_chunk: int = 1,
           replicated: bool = False) -> OffloadingConfig:
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0", "l1"), group_id=0),),
        worker_kv_bytes_per_block=LAYERS * LAYER_BYTES,
        enable_kv_cache_events=False,
        extra_config=extra,
        engine_id=engine_id,
        model=OffloadingModelConfig(name="test-model", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=blocks_per_chunk),
        parallel=OffloadingParallelConfig(
            rank=rank, world_size=WORLD, tp_size=WORLD, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
        replicated_layout=replicated,
    )


def kv_caches(*, device: bool = True) -> tuple[base.CanonicalKVCaches, list]:
    """Two layers' caches (one group), filled with distinct bytes."""
    generator = torch.Generator().manual_seed(7)
    tensors = []
    for _ in range(LAYERS):
        t = torch.randint(-128, 128, (GPU_BLOCKS, LAYER_BYTES), dtype=torch.int8, generator=generator)
        tensors.append(t.as_subclass(_DeviceTensor) if device else t)
    caches = base.CanonicalKVCaches(
        tensors=[base.CanonicalKVCacheTensor(tensor=t, page_size_bytes=LAYER_BYTES) for t in tensors],
        group_data_refs=[[base.CanonicalKVCacheRef(tensor_idx=i, page_size_bytes=LAYER_BYTES)
                          for i in range(LAYERS)]],
    )
    return caches, tensors


def extra(tmp_path, **more) -> dict:
    (tmp_path / "shm").mkdir(exist_ok=True)
    return {"cpu_bytes_to_use": CHUNKS * WORLD * LAYERS * LAYER_BYTES,
            "kvtier_region_directory": str(tmp_path / "shm"), **more}


def keys(n: int, start: int = 0) -> list[bytes]:
    return [base.make_offload_key((start + i).to_bytes(8, "big"), 0) for i in range(n)]


def gpu_spec(blocks: list[int]) -> base.GPULoadStoreSpec:
    return base.GPULoadStoreSpec(blocks, group_sizes=(len(blocks),), block_indices=(0,))


def drain(manager, end) -> None:
    """Runs scheduler steps until the manager's tier jobs are done."""
    manager.on_schedule_end(end)
    for _ in range(1000):  # the fs tier works on its own threads
        if not manager.has_pending_work():
            return
        time.sleep(0.01)
        manager.on_schedule_end(end)
    raise AssertionError("the manager's tier jobs did not finish")


@pytest.mark.parametrize("replicated", [False, True])
@pytest.mark.parametrize("blocks_per_chunk", [1, 2])
def test_sizing_is_vllms_tiering_specs(tmp_path, region_name, blocks_per_chunk, replicated):
    cfg = config(region_name, extra(tmp_path), blocks_per_chunk=blocks_per_chunk, replicated=replicated)
    ours, theirs = KvtierOffloadingSpec(cfg), TieringOffloadingSpec(cfg)
    for field in ("num_chunks", "kv_bytes_per_chunk", "cpu_page_size_per_worker", "replicated_layout"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.cpu_info == theirs.cpu_info


@pytest.mark.parametrize("rank", [0, 1])
def test_region_views_are_those_of_vllms_own_region(tmp_path, region_name, rank):
    spec = KvtierOffloadingSpec(config(region_name, extra(tmp_path), rank=rank, blocks_per_chunk=2))
    sizes = (spec.num_chunks, rank, spec.kv_bytes_per_chunk, spec.cpu_page_size_per_worker)
    ours = KvtierSharedRegion(region_name, *sizes, directory=str(tmp_path))
    theirs = SharedOffloadRegion(f"kvtier-test-{region_name}", *sizes)
    try:
        for page in (2 * LAYER_BYTES, 2 * LAYER_BYTES):  # the worker's two layers, in order
            a, b = ours.create_next_worker_view(page), theirs.create_next_worker_view(page)
            assert (a.shape, a.stride(), a.dtype) == (b.shape, b.stride(), b.dtype)
            assert a.data_ptr() - ours.base_tensor.data_ptr() == b.data_ptr() - theirs.base_tensor.data_ptr()
        assert list(ours.iter_worker_slot_ranges()) == list(theirs.iter_worker_slot_ranges())
        assert ours.total_size_bytes == theirs.total_size_bytes
    finally:
        ours.cleanup()
        theirs.cleanup()


def test_a_worker_vllm_cannot_build_releases_the_region(tmp_path, region_name):
    # Without a GPU (and without the stand-ins) vLLM's worker stops at its
    # handlers' `gpu_tensor.is_cuda`, after it made its views of the region.
    spec = KvtierOffloadingSpec(config(region_name, extra(tmp_path, kvtier_tiers=[
        {"type": "fs", "directory": str(tmp_path / "fs")}])))
    caches, _ = kv_caches(device=False)
    with pytest.raises(AssertionError) as failure:
        spec.get_worker(caches)
    # Released by the spec, not by the collection of what the failure's
    # traceback (alive here) still holds.
    assert failure.traceback
    assert not (tmp_path / "shm" / file_name(region_name)).exists()


@pytest.fixture
def engine(tmp_path, region_name, device):
    """Worker rank 1's spec and worker, the scheduler's spec and manager
    (with an fs tier), and a third mapping of the region to read it by."""
    cfg_extra = extra(tmp_path, kvtier_tiers=[{"type": "fs", "directory": str(tmp_path / "fs")}])
    worker_spec = KvtierOffloadingSpec(config(region_name, cfg_extra, rank=1))
    caches, gpu = kv_caches()
    worker = worker_spec.get_worker(caches)
    region = kvtier.Region(file_name(region_name), worker_spec.num_chunks, worker_spec.kv_bytes_per_chunk,
                           worker_bytes=worker_spec.cpu_page_size_per_worker,
                           directory=str(tmp_path / "shm"), open="join")
    scheduler_spec = KvtierOffloadingSpec(config(region_name, cfg_extra, rank=0))
    manager = scheduler_spec.get_manager()
    ctx = base.ReqContext(req_id="r")
    manager.on_new_request(ctx)
    yield worker_spec, worker, gpu, region, manager, ctx
    manager.on_request_finished(ctx)
    worker.shutdown()
    manager.shutdown()
    region.close()


def worker_bytes(region, slot: int, layer: int, spec) -> bytes:
    """Worker rank 1's bytes of one layer in a region slot, at vLLM's offsets."""
    start = 1 * spec.cpu_page_size_per_worker + layer * LAYER_BYTES
    return bytes(region.slot(slot)[start : start + LAYER_BYTES])


def test_get_worker_builds_vllms_cpu_worker(engine):
    spec, worker, _gpu, _region, manager, _ctx = engine
    assert isinstance(worker, gpu_worker.CPUOffloadingWorker)
    assert spec.get_worker(None) is worker
    assert [info["tier"] for info in manager.config_info()] == ["0:primary", "1:fs"]


def test_stored_blocks_land_in_the_slots_the_manager_names(engine):
    spec, worker, gpu, region, manager, ctx = engine
    stored = keys(3)
    output = manager.prepare_store(stored, ctx)
    slots = output.store_spec.block_ids.tolist()
    assert sorted(slots) == sorted(set(slots)) and len(slots) == 3
    blocks = [5, 1, 6]
    assert worker.submit_store(1, gpu_spec(blocks), output.store_spec)
    [result] = worker.get_finished()
    assert (result.job_id, result.success, result.transfer_size) == (1, True, 3 * LAYERS * LAYER_BYTES)
    for block, slot in zip(blocks, slots):
        for layer in range(LAYERS):
            assert worker_bytes(region, slot, layer, spec) == gpu[layer][block].numpy().tobytes()
    # Worker rank 0's area of those rows is not this worker's to write.
    assert all(not any(region.slot(slot)[: spec.cpu_page_size_per_worker]) for slot in slots)
    manager.complete_store(output.keys_to_store, ctx)


def test_loaded_blocks_come_from_the_slots_the_manager_names(engine):
    spec, worker, gpu, region, manager, ctx = engine
    stored = keys(2)
    output = manager.prepare_store(stored, ctx)
    manager.complete_store(output.keys_to_store, ctx)
    # Bytes written into the slots as a peer worker process would.
    written = {}
    for slot in output.store_spec.block_ids.tolist():
        for layer in range(LAYERS):
            data = os.urandom(LAYER_BYTES)
            start = spec.cpu_page_size_per_worker + layer * LAYER_BYTES
            region.slot(slot)[start : start + LAYER_BYTES] = data
            written[slot, layer] = data
    load = manager.prepare_load(stored, ctx)
    blocks = [2, 7]
    assert worker.submit_load(2, load, gpu_spec(blocks))
    assert [r.job_id for r in worker.get_finished()] == [2]
    for block, slot in zip(blocks, load.block_ids.tolist()):
        for layer in range(LAYERS):
            assert gpu[layer][block].numpy().tobytes() == written[slot, layer]
    manager.complete_load(stored, ctx)


def test_the_fs_tier_serves_a_key_the_primary_tier_evicted(engine):
    spec, worker, gpu, region, manager, ctx = engine
    end = base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
    [key] = keys(1)
    output = manager.prepare_store([key], ctx)
    assert worker.submit_store(1, gpu_spec([3]), output.store_spec)
    worker.get_finished()
    original = [gpu[layer][3].numpy().tobytes() for layer in range(LAYERS)]
    manager.complete_store([key], ctx)
    drain(manager, end)  # the fs tier has the key's copy
    # Fill the primary tier with other keys: the key leaves it.
    others = keys(spec.num_chunks, start=100)
    filler = manager.prepare_store(others, ctx)
    assert filler.evicted_keys == [key]
    manager.complete_store(filler.keys_to_store, ctx)
    drain(manager, end)
    for layer in range(LAYERS):
        gpu[layer][3] = 0
    # The lookup promotes the key from the fs tier into a primary slot.
    assert manager.lookup(key, ctx) == base.LookupResult.HIT_PENDING
    for _ in range(10):
        drain(manager, end)
        if manager.lookup(key, ctx) == base.LookupResult.HIT:
            break
    assert manager.lookup(key, ctx) == base.LookupResult.HIT
    load = manager.prepare_load([key], ctx)
    assert worker.submit_load(4, load, gpu_spec([3]))
    assert [r.job_id for r in worker.get_finished()] == [4]
    assert [gpu[layer][3].numpy().tobytes() for layer in range(LAYERS)] == original
    manager.complete_load([key], ctx)


# The region file's lifetime across engine processes: vLLM's real config and
# kvtier's spec in a child process, as an engine's scheduler builds them.
_ENGINE = """
import sys, time
sys.path.insert(0, {tests!r})
import pathlib, test_vllm_worker as w
spec = w.KvtierOffloadingSpec(w.config({engine!r}, w.extra(pathlib.Path({tmp!r}), kvtier_tiers=[
    {{"type": "fs", "directory": {fs!r}}}]), rank=0))
manager = spec.get_manager()
print("ready", flush=True)
{then}
"""


def start_engine(tmp_path, engine_id: str, then: str):
    import subprocess
    import sys

    code = _ENGINE.format(tests=os.path.dirname(__file__), engine=engine_id, tmp=str(tmp_path),
                          fs=str(tmp_path / "fs"), then=then)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_an_engine_that_shuts_down_or_exits_leaves_no_region_file(tmp_path):
    shutdown = start_engine(tmp_path, "clean", "manager.shutdown()")
    exits = start_engine(tmp_path, "exits", "sys.exit(0)")
    assert (shutdown.wait(), exits.wait()) == (0, 0)
    assert list((tmp_path / "shm").iterdir()) == []


def test_a_killed_engines_region_is_reclaimed_by_the_next_engines_start(tmp_path):
    import signal

    killed = start_engine(tmp_path, "killed", "time.sleep(600)")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    left = tmp_path / "shm" / file_name("killed")
    assert left.exists()
    spec = KvtierOffloadingSpec(config("next", extra(tmp_path, kvtier_tiers=[
        {"type": "fs", "directory": str(tmp_path / "fs")}]), rank=0))
    manager = spec.get_manager()
    assert [p.name for p in (tmp_path / "shm").iterdir()] == [file_name("next")]
    manager.shutdown()
    assert list((tmp_path / "shm").iterdir()) == []
