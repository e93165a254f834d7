"""kvtier's managers under vLLM 0.33's own constructors.

``CPUOffloadingManager``, ``CPUPrimaryTierOffloadingManager`` and
``TieringOffloadingManager`` here take the arguments vLLM's classes of the
same names take, and build one kvtier manager each, so code (and vLLM's
own unit tests) written against vLLM's managers runs on kvtier's:

* ``CPUOffloadingManager(num_chunks, cache_policy, ...)``: a kvtier manager
  with no secondary tier;
* ``CPUPrimaryTierOffloadingManager(num_chunks, mmap_region, ...)``: the
  same, with the region's memory view for secondary tiers; once handed to
  a ``TieringOffloadingManager`` it answers from that manager's primary
  tier (its lookups ask no secondary tier);
* ``TieringOffloadingManager(primary_tier, secondary_tiers)``: one kvtier
  manager with the primary tier's options and every vLLM
  ``SecondaryTierManager`` running unchanged behind the C vtable.

A custom cache policy module (``cache_policy_module_path``) is not
supported: kvtier's policies are ``"lru"`` and ``"arc"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .manager import KvtierOffloadingManager

__all__ = ["CPUOffloadingManager", "CPUPrimaryTierOffloadingManager", "TieringOffloadingManager"]


def _policy(cache_policy: str, module_path: str | None) -> str:
    if module_path is not None:
        raise NotImplementedError("kvtier: custom cache policy modules are not supported (use 'lru' or 'arc')")
    return cache_policy


class CPUOffloadingManager(KvtierOffloadingManager):
    """vLLM's ``CPUOffloadingManager`` constructor over a kvtier manager."""

    def __init__(
        self,
        num_chunks: int,
        cache_policy: str = "lru",
        cache_policy_module_path: str | None = None,
        enable_events: bool = False,
        store_threshold: int = 1,
        max_tracker_size: int = 64_000,
        info: Any = None,
    ):
        self._setup(
            num_chunks,
            cache_policy=_policy(cache_policy, cache_policy_module_path),
            enable_events=enable_events,
            store_threshold=store_threshold,
            max_tracker_size=max_tracker_size,
            info=info,
        )
        self._options = dict(
            num_chunks=num_chunks,
            cache_policy=cache_policy,
            enable_events=enable_events,
            store_threshold=store_threshold,
            max_tracker_size=max_tracker_size,
            info=info,
        )


class CPUPrimaryTierOffloadingManager(CPUOffloadingManager):
    """vLLM's ``CPUPrimaryTierOffloadingManager`` constructor over kvtier."""

    def __init__(
        self,
        num_chunks: int,
        mmap_region: Any = None,
        cache_policy: str = "lru",
        cache_policy_module_path: str | None = None,
        enable_events: bool = False,
        info: Any = None,
    ):
        super().__init__(
            num_chunks=num_chunks,
            cache_policy=cache_policy,
            cache_policy_module_path=cache_policy_module_path,
            enable_events=enable_events,
            info=info,
        )
        self._mmap_region = mmap_region
        self._kv_memoryview = mmap_region.create_kv_memoryview() if mmap_region is not None else None
        self._bound: KvtierOffloadingManager | None = None

    def get_kv_memoryview(self) -> memoryview | None:
        """The region's memory view (rows of slots) for secondary tiers."""
        return self._kv_memoryview

    def _bind(self, tiering: KvtierOffloadingManager) -> None:
        """Answers from `tiering`'s kvtier manager from now on."""
        self._bound = tiering
        self._m.close()
        for name in (
            "on_new_request",
            "prepare_load",
            "touch",
            "complete_load",
            "prepare_store",
            "complete_store",
            "on_request_finished",
            "reset_cache",
            "take_events",
            "get_stats",
        ):
            setattr(self, name, getattr(tiering, name))
        self.lookup = lambda key, req_context: tiering._primary_lookup(key)  # type: ignore[method-assign]

    def shutdown(self) -> None:
        if self._bound is None:
            super().shutdown()
        if self._mmap_region is not None and hasattr(self._mmap_region, "cleanup"):
            self._mmap_region.cleanup()


class TieringOffloadingManager(KvtierOffloadingManager):
    """vLLM's ``TieringOffloadingManager`` constructor over one kvtier
    manager: `primary_tier`'s options, `secondary_tiers` through the vtable."""

    def __init__(
        self,
        primary_tier: CPUPrimaryTierOffloadingManager,
        secondary_tiers: Sequence[Any] | None = None,
        tier_poll_interval_s: float = 0.0,
    ):
        options = primary_tier._options
        self._setup(
            options["num_chunks"],
            cache_policy=options["cache_policy"],
            enable_events=options["enable_events"],
            store_threshold=options["store_threshold"],
            max_tracker_size=options["max_tracker_size"],
            info=options["info"],
            vllm_tiers=list(secondary_tiers or []),
            tiering=True,
        )
        self.primary_tier = primary_tier
        self.secondary_tiers = list(secondary_tiers or [])
        primary_tier._bind(self)
