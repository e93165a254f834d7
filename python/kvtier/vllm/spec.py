"""kvtier as a vLLM 0.33 offloading spec, loaded by name:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "KvtierOffloadingSpec",
            "spec_module_path": "kvtier.vllm.spec",
            "cpu_bytes_to_use": 68719476736}}'

The scheduler side is `KvtierOffloadingManager` over one kvtier manager;
the worker side is vLLM's own ``CPUOffloadingWorker`` over the same shared
region, mapped through kvtier (`KvtierSharedRegion`), with vLLM's
replicated layout (one copy of a chunk where every worker's bytes are the
same) and canonical layout as vLLM's tiering spec has them.  Extra config keys,
besides vLLM's CPU ones (``cpu_bytes_to_use``, ``eviction_policy``,
``store_threshold``, ``max_tracker_size``):

* ``kvtier_tiers``: kvtier's built-in tiers, in order, e.g.
  ``[{"type": "fs", "directory": "/mnt/nvme/kv"}]`` (options: the fields
  of ``kvtier_fs_options`` / ``kvtier_redis_options``); each is given the
  engine's layout fingerprint (the one a node server is given) unless its
  options name a ``layout_fingerprint`` of their own, so a directory or
  namespace of another model or layout is refused at start;
* ``kvtier_layout_fingerprint``: replaces that derived fingerprint;
* ``secondary_tiers``: vLLM ``SecondaryTierManager`` tiers as vLLM's
  tiering spec names them (``{"type": ...}``), run through kvtier's vtable;
  ``backpressure``, as in vLLM's tiering spec, is the default of each such
  tier's own ``backpressure``, field by field;
* ``kvtier_region_directory``: where the region's files live (default
  ``/dev/shm``);
* ``kvtier_server``: the socket path of a node server ``kvtierd``: the
  scheduler's manager is then the server's (`kvtier.Manager.connect`, with
  the engine's slot size and a fingerprint of its model and layout, or
  ``kvtier_server_fingerprint`` if given), the workers map the server's
  region, and the slot count is the server's (``cpu_bytes_to_use`` is not
  read); tiers, the region's directory, the progress rule and KV cache
  events are the server's and refused here (`kvtier.vllm.server`).

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
from . import server as _server

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
        served = self.extra_config.get("kvtier_server") is not None
        if served:
            _server.refuse_local_options(self.extra_config, events=self.kv_events_config.enable_kv_cache_events)
        cpu_bytes = self.extra_config.get("cpu_bytes_to_use")
        if not cpu_bytes and not served:
            raise ValueError("cpu_bytes_to_use must be specified in kv_connector_extra_config")
        self.secondary_tier_configs = _secondary_tier_configs(self.extra_config)
        # Every worker maps the shared region (as with vLLM's tiering spec, on
        # every platform): where each worker's bytes of a block are the same
        # (vLLM's replicated layout), a chunk holds one copy, which every
        # worker reads and writes as rank 0's.
        self.replicated_layout = bool(getattr(config, "replicated_layout", False))
        world_size = config.parallel.world_size
        self.num_chunks = 0
        self.kv_bytes_per_chunk = 0
        self.cpu_page_size_per_worker = 0
        if config.worker_kv_bytes_per_block > 0 and world_size > 0:
            copies = 1 if self.replicated_layout else world_size
            per_chunk = config.worker_kv_bytes_per_block * copies * self.blocks_per_chunk
            self.cpu_page_size_per_worker = per_chunk // copies
            page = mmap.PAGESIZE
            self.kv_bytes_per_chunk = -(-per_chunk // page) * page
            self.num_chunks = int(cpu_bytes or 0) // self.kv_bytes_per_chunk
        # With a node server: its connection (the scheduler's manager; a
        # worker's only until it mapped the region), and its slot count.
        self._connected: Any = None
        if served:
            self._connected = _server.connect(
                _server.connect_options(
                    self.extra_config, config, self.kv_bytes_per_chunk, replicated=self.replicated_layout
                )
            )
            self.num_chunks = self._connected.server_info.slot_count
        self.cpu_info = v.CPUOffloadingInfo.from_config(config, self.num_chunks, self.kv_bytes_per_chunk)
        # Set by get_worker with vLLM's canonical layout: whether every
        # layer's canonical bytes are parallelism-agnostic.
        self.all_layers_portable: bool | None = None
        self._manager: KvtierOffloadingManager | None = None
        self._worker: Any = None

    def _layout_fingerprint(self) -> str:
        """The fingerprint the built-in tiers' stores are kept under
        (``kvtier_layout_fingerprint`` if given, else the one a node server
        is given, `kvtier.vllm.server.fingerprint`): blocks come back after
        a restart only to an engine of the same model and layout."""
        chosen = self.extra_config.get("kvtier_layout_fingerprint")
        if chosen is None:
            chosen = _server.fingerprint(self.config, replicated=self.replicated_layout)
        return str(chosen)

    def _uses_scheduler_region(self) -> bool:
        return bool(self.extra_config.get("kvtier_tiers") or self.secondary_tier_configs)

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

    def _server_region(self, rank: int) -> KvtierSharedRegion:
        """The node server's region as this worker's (joined, left to the
        server at shutdown); the worker's connection is closed."""
        connected, self._connected = self._connected, None
        try:
            region = _server.server_region(connected.server_info)
        finally:
            connected.close()
        return KvtierSharedRegion(
            engine_id=self.config.engine_id,
            num_chunks=self.num_chunks,
            rank=rank,
            kv_bytes_per_chunk=self.kv_bytes_per_chunk,
            cpu_page_size=self.cpu_page_size_per_worker,
            region=region,
        )

    def _vllm_tiers(self, region: KvtierSharedRegion) -> list[Any]:
        configs = self.secondary_tier_configs
        if not configs:
            return []
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

        view = region.create_kv_memoryview()
        return [SecondaryTierFactory.create_secondary_tier(tier_config, view, self) for tier_config in configs]

    def get_manager(self) -> KvtierOffloadingManager:
        if self._manager is None and self._connected is not None:
            manager = KvtierOffloadingManager(
                self._connected,
                num_chunks=self.num_chunks,
                store_threshold=int(self.extra_config.get("store_threshold", 0)),
                info=self.cpu_info,
                tier_metrics=True,
            )
            manager.release_at_shutdown(self._connected.close)
            self._manager = manager
        if self._manager is None:
            tiers = self.extra_config.get("kvtier_tiers") or []
            region = self._region(None) if self._uses_scheduler_region() else None
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
                layout_fingerprint=self._layout_fingerprint() if tiers else None,
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

            canonical = bool(getattr(self.config, "canonical_layout", False))
            if canonical:
                self.all_layers_portable = _canonical_refs_portable(kv_caches, self.config)
            barrier = None
            if not self._uses_scheduler_region():
                # Only the workers map the region: once all have, the
                # creator removes the name, as vLLM's CPU spec does.
                from vllm.v1.kv_offload.cpu.spec import _all_workers_barrier as barrier
            rank = 0 if self.replicated_layout else self.config.parallel.rank
            region = self._server_region(rank) if self._connected is not None else self._region(rank, barrier)
            try:
                self._worker = CPUOffloadingWorker(
                    kv_caches=kv_caches,
                    blocks_per_chunk=self.blocks_per_chunk,
                    num_cpu_chunks=self.num_chunks,
                    mmap_region=region,
                    canonical_layout=canonical,
                )
            except BaseException:
                # The worker owns the region only once built.
                region.cleanup()
                raise
        return self._worker


def _secondary_tier_configs(extra_config: Any) -> list[dict[str, Any]]:
    """``secondary_tiers`` as vLLM's tiering spec resolves them: a tier's
    ``backpressure`` is the top-level ``backpressure`` overlaid field by
    field with the tier's own (a tier with neither stays without).  The
    tiers are copies: the caller's configuration is not changed."""
    configs = extra_config.get("secondary_tiers") or []
    if not isinstance(configs, list):
        raise ValueError("secondary_tiers must be a list of tier configurations")
    defaults = extra_config.get("backpressure")
    resolved = []
    for tier in configs:
        tier = dict(tier)
        merged: dict[str, Any] = {}
        for source in (defaults, tier.get("backpressure")):
            if source:
                merged.update(source)
        if merged or "backpressure" in tier:
            tier["backpressure"] = merged
        resolved.append(tier)
    return resolved


def _canonical_refs_portable(kv_caches: Any, config: Any) -> bool:
    """vLLM's canonical layout asks every layer for a canonical mapping:
    whether all are parallelism-agnostic.  Raises, as vLLM's tiering spec
    does, where a layer has none, or where the storage is shared across
    topologies and a layer's bytes are not portable."""
    refs = [ref for group in kv_caches.group_data_refs for ref in group]
    if any(ref.mapping is None for ref in refs):
        raise RuntimeError(
            "canonical_layout was requested but the KV cache layout could not be "
            "certified for canonical offload; remove canonical_layout from "
            "kv_connector_extra_config"
        )
    portable = all(ref.mapping.parallelism_agnostic for ref in refs)
    if config.parallel.is_parallelism_agnostic and not portable:
        raise RuntimeError(
            "canonical_layout could not certify every layer as parallelism-agnostic, "
            "but the storage is shared across topologies; remove canonical_layout "
            "from kv_connector_extra_config"
        )
    return portable
