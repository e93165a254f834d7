"""vLLM's per-read metrics from kvtier's cumulative statistics.

kvtier's counters (and histogram buckets) only grow; vLLM's
``get_stats()`` reports what happened since the previous call.  Each read
keeps the previous values and reports the difference: a counter by its
increase, a histogram by observations rebuilt from its bucket counts (each
observation inside its bucket, their sum the exact sum, so the count, the
sum and the buckets are all vLLM's).  Gauges are reported as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _vllm as v

if TYPE_CHECKING:
    from .manager import KvtierOffloadingManager
    from .tiers import VllmTierAdapter

# Upper bounds of the primary tier's allocation-size buckets (the last +Inf).
ALLOCATION_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)


def observations(bucket_counts: list[int], total: int, bounds: tuple[int, ...] = ALLOCATION_BOUNDS) -> list[int]:
    """Integer observations with these per-bucket counts (not cumulative)
    and this sum: each starts at its bucket's smallest value and takes what
    is left of the sum up to its bucket's largest."""
    values: list[int] = []
    limits: list[float] = []
    lower = 0
    for i, count in enumerate(bucket_counts):
        upper: float = bounds[i] if i < len(bounds) else float("inf")
        values.extend([lower + 1] * count)
        limits.extend([upper] * count)
        if i < len(bounds):
            lower = bounds[i]
    rest = total - sum(values)
    for i in range(len(values)):
        if rest <= 0:
            break
        room = limits[i] - values[i]
        step = int(min(room, rest))
        values[i] += step
        rest -= step
    return values


class StatsReader:
    """Turns one kvtier manager's statistics into vLLM stats payloads."""

    def __init__(self, owner: KvtierOffloadingManager, store_threshold: int, tiering: bool):
        self.owner = owner
        self.store_threshold = store_threshold
        self.tiering = tiering
        self._previous: dict[str, float] = {}
        self._pending: list[tuple[str, str, Any, tuple[str, ...]]] = []

    def _delta(self, name: str, value: float) -> float:
        before = self._previous.get(name, 0.0)
        self._previous[name] = value
        return value - before

    def observe_lookup(self, label: str, seconds: float, resolved_later: bool = False) -> None:
        """A lookup a tier answered (not RETRY) in `seconds`; with
        `resolved_later`, the time since its first RETRY."""
        M = v.TieringOffloadingMetrics
        name = M.LOOKUP_ASYNC_DELAY if resolved_later else M.LOOKUP_SYNC_DELAY
        self._pending.append(("h", name, seconds, (label,)))

    # Job observations made by the Python tier adapters.
    def on_job_finished(
        self, tier: VllmTierAdapter, promotion: bool, seconds: float, result: Any, keys: list[bytes], name: str
    ) -> None:
        label = (tier.name,)
        M = v.TieringOffloadingMetrics
        if promotion:
            outcome = "success" if result.success else "failure"
            self._pending.append(("h", M.PROMOTION_LATENCY, seconds, (tier.name, outcome)))
            if not result.success:
                self._pending.append(("c", M.PROMOTION_JOB_FAILURES, 1, label))
        elif not result.success:
            self._pending.append(("c", M.CASCADE_JOB_FAILURES, 1, label))

    def read(self) -> v.OffloadingConnectorStats:
        stats = v.OffloadingConnectorStats()
        m = self.owner._m
        primary = m.read_tier_stats(0)
        usage = primary["usage"].value
        write = primary["write_usage"].value
        read = max(usage - write, 0.0)
        C = v.CPUOffloadingMetrics
        stats.set_gauge(C.CPU_CACHE_USAGE_PERC, usage)
        stats.set_gauge(C.CPU_CACHE_WRITE_USAGE_PERC, write)
        stats.set_gauge(C.CPU_CACHE_READ_USAGE_PERC, read)
        cumulative = [
            primary[f"allocation_size_blocks_bucket_le_{b}"].value for b in ALLOCATION_BOUNDS
        ] + [primary["allocation_size_blocks_bucket_le_inf"].value]
        per_bucket = [int(self._delta(f"alloc{i}", c)) for i, c in enumerate(cumulative)]
        counts = [per_bucket[0]] + [per_bucket[i] - per_bucket[i - 1] for i in range(1, len(per_bucket))]
        total = int(self._delta("alloc_sum", primary["allocation_size_blocks_sum"].value))
        for value in observations(counts, total):
            stats.observe_histogram(C.CPU_ALLOCATION_SIZE, value)
        skipped = self._delta("admission_skips", primary["admission_skips"].value)
        if self.store_threshold >= 2:
            stats.increase_counter(C.STORES_SKIPPED, int(skipped))
        if self.tiering:
            self._read_tiering(stats, write, read)
        return stats

    def _read_tiering(self, stats: v.OffloadingConnectorStats, write: float, read: float) -> None:
        M = v.TieringOffloadingMetrics
        primary_label = ("0:primary",)
        stats.set_gauge(M.PRIMARY_WRITE_USAGE_PERC, write, primary_label)
        stats.set_gauge(M.PRIMARY_READ_USAGE_PERC, read, primary_label)
        own = self.owner._m.read_stats()
        failures = self._delta("allocation_failures", own["allocation_failures"])
        if failures:
            stats.increase_counter(M.PROMOTION_ALLOCATION_FAILURES, int(failures))
        for adapter in self.owner._adapters:
            label = (adapter.name,)
            tier = self.owner._m.read_tier_stats(adapter.index)
            queries = self._delta(f"{adapter.index}.lookups", tier["lookups"].value)
            hits = self._delta(f"{adapter.index}.hits", tier["hits"].value)
            if queries:
                stats.increase_counter(M.CHUNK_QUERIES, int(queries), label)
            if hits:
                stats.increase_counter(M.CHUNK_HITS, int(hits), label)
            tier_stats = adapter.vllm_tier.get_stats()
            if tier_stats is not None:
                stats.aggregate(tier_stats)
        pending, self._pending = self._pending, []
        for kind, name, value, labels in pending:
            if kind == "h":
                stats.observe_histogram(name, value, labels)
            else:
                stats.increase_counter(name, value, labels)
