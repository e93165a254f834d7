"""The worker side's view of the shared region, as vLLM's CPU worker uses it.

vLLM 0.33's ``CPUOffloadingWorker`` copies between the GPU and a
``SharedOffloadRegion``; `KvtierSharedRegion` has the same interface over a
`kvtier.Region` instead, so every process (the scheduler's manager and
each worker) maps the one region through kvtier, which locks its backing
files (a file nobody holds is stale and replaced) where vLLM's region code
does not.  The layout is the one vLLM's worker expects: rows of
``kv_bytes_per_chunk``, worker ``w``'s area of each row at
``w * cpu_page_size`` (or, with the replicated layout, one canonical area).

The file's name is needed only until every process has mapped it: with a
`barrier` (the workers' group, when only workers map the region) the
creator removes it as soon as all have passed; `unlink_if_joined` removes
it from the last process to map it (the scheduler, which vLLM builds after
every worker has registered its caches).  `cleanup` removes it from the
creator at shutdown, and so does the interpreter's exit if nobody called
`cleanup`; a killed engine's file is left for `reclaim_stale_regions`.
"""

from __future__ import annotations

import mmap
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import KvtierError, Status
from ..region import Region

__all__ = ["KvtierSharedRegion", "region_name"]


def region_name(engine_id: str) -> str:
    """The region's name for one engine instance."""
    return f"vllm_kvtier_{engine_id}"


class KvtierSharedRegion:
    """``SharedOffloadRegion``'s interface over a kvtier region."""

    BLOCK_SIZE_ALIGNMENT: int = mmap.PAGESIZE

    def __init__(
        self,
        engine_id: str,
        num_chunks: int,
        rank: int | None,
        kv_bytes_per_chunk: int,
        cpu_page_size: int,
        *,
        directory: str | None = None,
        region: Region | None = None,
        barrier: Callable[[], Any] | None = None,
    ):
        self.page_size = mmap.PAGESIZE
        self.num_chunks = num_chunks
        self.rank = rank
        self._row_stride = kv_bytes_per_chunk
        self.total_size_bytes = num_chunks * kv_bytes_per_chunk
        self.cpu_page_size = cpu_page_size
        self.region = region or Region(
            region_name(engine_id),
            num_chunks,
            kv_bytes_per_chunk,
            worker_bytes=cpu_page_size if cpu_page_size < kv_bytes_per_chunk else 0,
            directory=directory,
            barrier=_status_barrier(barrier) if barrier is not None else None,
        )
        # The creator's name goes at the interpreter's exit at the latest
        # (`cleanup` does it earlier); the mapping itself stays valid.
        self._finalizer = weakref.finalize(self, _unlink_if_creator, self.region)
        self._segments = [self.region]
        self.is_pinned = False
        self.pinned_addresses: list[int] = []
        self._views: list[Any] = []
        self._worker_offset = (rank or 0) * cpu_page_size
        self._worker_area_end = self._worker_offset + cpu_page_size
        self._canonical_offset = 0
        self._base: Any = self._tensor(self.region.buffer())

    @staticmethod
    def _tensor(buffer: memoryview) -> Any:
        try:
            import torch
        except ImportError:  # the scheduler and tests without torch: numpy
            import numpy as np

            return np.frombuffer(buffer, dtype=np.int8)
        return torch.frombuffer(buffer, dtype=torch.int8)

    @property
    def base_tensor(self) -> Any:
        if self._base is None:
            raise RuntimeError("Shared offload region has been released.")
        return self._base

    def iter_worker_slot_ranges(self) -> Iterator[tuple[int, int]]:
        """This worker's slots as page-aligned (offset, length) ranges."""
        assert self.rank is not None
        for row in range(self.num_chunks):
            start = row * self._row_stride + self.rank * self.cpu_page_size
            aligned = start - start % self.page_size
            end = -(-(start + self.cpu_page_size) // self.page_size) * self.page_size
            yield aligned, end - aligned

    def _strided(self, offset: int, length: int) -> Any:
        base = self.base_tensor
        if hasattr(base, "as_strided"):
            view = base.as_strided((self.num_chunks, length), (self._row_stride, 1), offset)
        else:
            import numpy as np

            view = np.lib.stride_tricks.as_strided(
                base[offset:], shape=(self.num_chunks, length), strides=(self._row_stride, 1)
            )
        self._views.append(view)
        return view

    def create_next_worker_view(self, tensor_page_size: int) -> Any:
        """The next ``(num_chunks, tensor_page_size)`` view of this worker's area."""
        assert self.rank is not None
        offset = self._worker_offset
        assert offset + tensor_page_size <= self._worker_area_end
        self._worker_offset = offset + tensor_page_size
        return self._strided(offset, tensor_page_size)

    def create_next_canonical_view(self, tensor_page_size: int) -> Any:
        """The next view of the canonical area (shared by every worker)."""
        offset = self._canonical_offset
        assert offset + tensor_page_size <= self._row_stride
        self._canonical_offset = offset + tensor_page_size
        return self._strided(offset, tensor_page_size)

    def create_kv_memoryview(self) -> memoryview:
        """The whole region as a (num_chunks, row stride) memoryview."""
        return self.region.buffer().cast("B", (self.num_chunks, self._row_stride))

    def unlink_if_joined(self) -> bool:
        """Removes the file's name if this process joined the region (it
        is the last to map it); whether it did.  A creator keeps the name
        (others may still have to map it) until `cleanup`."""
        if self.region.role != "joiner":
            return False
        return self.region.unlink()

    def cleanup(self) -> None:
        self._finalizer.detach()
        self._views.clear()
        self._base = None
        # Tensors over the region may outlive it (vLLM may still hold
        # some): then the mapping stays for the rest of the process, so they
        # stay valid, and the rest (names, locks, descriptors) is released.
        self.region.close(keep_mapping_if_viewed=True)


def _status_barrier(barrier: Callable[[], Any]) -> Callable[[int], int]:
    """`barrier` (no arguments) as the region's barrier callback: it runs
    whatever this process's set-up status was, so no peer is left waiting;
    an exception from it fails the set-up with ``PEER_FAILED``."""

    def call(_setup_status: int) -> int:
        barrier()
        return int(Status.OK)

    return call


def _unlink_if_creator(region: Region) -> None:
    try:
        if region.role == "creator":
            region.unlink()
    except KvtierError:  # closed already, or the name is gone
        pass
