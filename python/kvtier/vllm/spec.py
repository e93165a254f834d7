"""kvtier as a vLLM 0.33 offloading spec, loaded by name:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "KvtierOffloadingSpec",
            "spec_module_path": "kvtier.vllm.spec",
            "cpu_bytes_to_use": 68719476736}}'

The scheduler side is `KvtierOffloadingManager` over one kvtier manager;
the worker side is vLLM's own ``CPUOffloadingWorker`` over the same shared
region, mapped through kvtier (`KvtierSharedRegion`).  Extra config keys,
besides vLLM's CPU ones (``cpu_bytes_to_use``, ``eviction_policy``,
``store_threshold``, ``max_tracker_size``):

* ``kvtier_tiers``: kvtier's built-in tiers, in order, e.g.
  ``[{"type": "fs", "directory": "/mnt/nvme/kv"}]`` (options: the fields
  of ``kvtier_fs_options`` / ``kvtier_redis_options``);
* ``secondary_tiers``: vLLM ``SecondaryTierManager`` tiers as vLLM's
  tiering spec names them (``{"type": ...}``), run through kvtier's vtable;
* ``kvtier_region_directory``: where the region's files live (default
  ``/dev/shm``).

The region's file (``vllm_kvtier_<engine_id>``) outlives no engine: its
name is removed once every process has mapped it (see
`KvtierSharedRegion`), at shutdown, or at the interpreter's exit; files
that killed engines left are removed by the next spec to map a region in
that directory (`reclaim_stale_regions`; a sweep that fails, for a
directory it cannot list, is logged and the start goes on).
"""

from __future__ import annotations

import logging
import mmap
from typing import Any

from vllm.v1.kv_offload.base import OffloadingSpec
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

from ..errors import KvtierError
from . import _vllm as v
from .manager import KvtierOffloadingManager
from .reclaim import reclaim_stale_regions
from .region import KvtierSharedRegion

__all__ = ["KvtierOffloadingSpec"]

_log = logging.getLogger(__name__)


class KvtierOffloadingSpec(CPUOffloadingSpec):
    """vLLM's ``OffloadingSpec`` for kvtier.

    A ``CPUOffloadingSpec``: the worker side is vLLM's CPU worker over a
    CPU region, so vLLM's connector publishes the CPU spec's legacy
    transfer families (``vllm:kv_offload_total_bytes``, ``_total_time``,
    ``_size``) for it, which it does for ``CPUOffloadingSpec`` subclasses
    only.  Nothing of the CPU spec's own construction runs: the region,
    its sizing, the manager and the worker are kvtier's.
    """

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, Any]:
        """Every family vLLM's CPU spec and tiering spec define: the CPU
        families, and the tiering families with or without secondary tiers
        (the manager reports the primary tier's lookups under them)."""
        from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

        return dict(TieringOffloadingSpec.build_metric_definitions(extra_config))

    @classmethod
    def config_info_keys(cls, extra_config: dict[str, Any]) -> tuple[str, ...]:
        keys = v.CPUOffloadingInfo.config_info_keys()
        if extra_config.get("kvtier_tiers") or extra_config.get("secondary_tiers"):
            keys = keys + ("tier",)
        return keys

    def __init__(self, config: Any):
        # The base spec's own fields only; the CPU spec's sizing is not kvtier's.
        OffloadingSpec.__init__(self, config)
        self.eviction_policy = self.extra_config.get("eviction_policy", "lru")
        self.cache_policy_module_path = self.extra_config.get("cache_policy_module_path")
        cpu_bytes = self.extra_config.get("cpu_bytes_to_use")
        if not cpu_bytes:
            raise ValueError("cpu_bytes_to_use must be specified in kv_connector_extra_config")
        world_size = config.parallel.world_size
        self.num_chunks = 0
        self.kv_bytes_per_chunk = 0
        self.cpu_page_size_per_worker = 0
        if config.worker_kv_bytes_per_block > 0 and world_size > 0:
            per_chunk = config.worker_kv_bytes_per_block * world_size * self.blocks_per_chunk
            self.cpu_page_size_per_worker = per_chunk // world_size
            page = mmap.PAGESIZE
            self.kv_bytes_per_chunk = -(-per_chunk // page) * page
            self.num_chunks = int(cpu_bytes) // self.kv_bytes_per_chunk
        self.cpu_info = v.CPUOffloadingInfo.from_config(config, self.num_chunks, self.kv_bytes_per_chunk)
        self._manager: KvtierOffloadingManager | None = None
        self._worker: Any = None

    def _uses_scheduler_region(self) -> bool:
        return bool(self.extra_config.get("kvtier_tiers") or self.extra_config.get("secondary_tiers"))

    def _region(self, rank: int | None, barrier: Any = None) -> KvtierSharedRegion:
        directory = self.extra_config.get("kvtier_region_directory")
        try:
            reclaim_stale_regions(directory)
        except KvtierError as e:
            _log.warning("kvtier: crashed engines' regions were not swept: %s", e)
        return KvtierSharedRegion(
            engine_id=self.config.engine_id,
            num_chunks=self.num_chunks,
            rank=rank,
            kv_bytes_per_chunk=self.kv_bytes_per_chunk,
            cpu_page_size=self.cpu_page_size_per_worker,
            directory=directory,
            barrier=barrier,
        )

    def _vllm_tiers(self, region: KvtierSharedRegion) -> list[Any]:
        configs = self.extra_config.get("secondary_tiers") or []
        if not configs:
            return []
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        view = region.create_kv_memoryview()
        return [SecondaryTierFactory.create_secondary_tier(tier_config, view, self) for tier_config in configs]

    def get_manager(self) -> KvtierOffloadingManager:
        if self._manager is None:
            tiers = self.extra_config.get("kvtier_tiers") or []
            vllm_tier_configs = self.extra_config.get("secondary_tiers") or []
            region = self._region(None) if (tiers or vllm_tier_configs) else None
            manager = KvtierOffloadingManager.create(
                self.num_chunks,
                cache_policy=self.eviction_policy,
                enable_events=self.kv_events_config.enable_kv_cache_events,
                store_threshold=int(self.extra_config.get("store_threshold", 0)),
                max_tracker_size=int(self.extra_config.get("max_tracker_size", 64_000)),
                info=self.cpu_info,
                vllm_tiers=self._vllm_tiers(region) if region is not None else [],
                builtin_tiers=tiers,
                region=region.region if region is not None else None,
                progress=self.extra_config.get("kvtier_progress"),
                tier_metrics=True,
            )
            if region is not None:
                # vLLM builds the scheduler after every worker registered
                # its caches (and so mapped the region): no one needs the
                # name any more.
                region.unlink_if_joined()
                manager.release_at_shutdown(region.cleanup)
            self._manager = manager
        return self._manager

    def get_worker(self, kv_caches: Any) -> Any:
        if self._worker is None:
            from vllm.v1.kv_offload.cpu.gpu_worker import CPUOffloadingWorker

            barrier = None
            if not self._uses_scheduler_region():
                # Only the workers map the region: once all have, the
                # creator removes the name, as vLLM's CPU spec does.
                from vllm.v1.kv_offload.cpu.spec import _all_workers_barrier as barrier
            region = self._region(self.config.parallel.rank, barrier)
            self._worker = CPUOffloadingWorker(
                kv_caches=kv_caches,
                blocks_per_chunk=self.blocks_per_chunk,
                num_cpu_chunks=self.num_chunks,
                mmap_region=region,
            )
        return self._worker
