"""The worker side's region as vLLM's CPU worker uses it, without torch:
bytes a worker writes in its view of a slot are what the scheduler
side's mapping of that slot holds."""

import numpy as np

import kvtier
from kvtier.vllm.region import KvtierSharedRegion


def test_worker_view_bytes_reach_the_schedulers_slot(tmp_path, region_name):
    page = 4096
    workers, chunks = 2, 3
    scheduler = kvtier.Region(region_name, chunks, 2 * page, worker_bytes=page, directory=str(tmp_path))
    worker = KvtierSharedRegion(
        "unused", chunks, 1, 2 * page, page, region=kvtier.Region(
            region_name, chunks, 2 * page, worker_bytes=page, directory=str(tmp_path), open="join"
        )
    )
    view = worker.create_next_worker_view(16)
    assert view.shape == (chunks, 16)
    view[2, :] = np.arange(16, dtype=np.int8)
    assert bytes(scheduler.slot(2)[page : page + 16]) == bytes(range(16))
    memory = worker.create_kv_memoryview()
    assert memory.shape == (chunks, workers * page)
    worker.cleanup()
    scheduler.close()
