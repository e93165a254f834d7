"""vLLM's per-read metrics from kvtier's cumulative statistics.

kvtier's counters (and histogram buckets) only grow; vLLM's
``get_stats()`` reports what happened since the previous call.  Each read
keeps the previous values and reports the difference: a counter by its
increase, a histogram by observations rebuilt from its bucket counts (each
observation inside its bucket, their sum the exact sum, so the count, the
sum and the buckets are all vLLM's).  Gauges are reported as they are.

vLLM's tiering families come from the manager's counters for each
secondary tier (vLLM tiers and built-in ones alike, labelled
``<index>:<type>``) and for the primary tier (``0:primary``); lookup
delays and promotion latencies are timed by this layer, so built-in
tiers (whose lookups and jobs run inside kvtier) have none.
docs/vllm.md maps every family.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, Protocol

from . import _vllm as v


class MeteredTier(Protocol):
    """What the reader takes from a tier adapter (``VllmTierAdapter``)."""

    @property
    def name(self) -> str: ...

    @property
    def vllm_tier(self) -> Any: ...


class MeteredOwner(Protocol):
    """What the reader takes from its manager (``KvtierOffloadingManager``),
    declared here so that this module does not import the manager's."""

    @property
    def _m(self) -> Any: ...

    @property
    def _tier_labels(self) -> Sequence[str]: ...

    @property
    def _adapters(self) -> Sequence[MeteredTier]: ...

    @property
    def _num_chunks(self) -> int: ...

# vLLM's label of the primary tier in the tiering families.
PRIMARY_LABEL = "0:primary"
# kvtier's back-pressure average (ns per byte) in vLLM's unit (s per MiB).
NS_PER_BYTE_TO_S_PER_MIB = (1 << 20) * 1e-9

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

    def __init__(self, owner: MeteredOwner, store_threshold: int, tiering: bool):
        self.owner = owner
        self.store_threshold = store_threshold
        self.tiering = tiering
        self._previous: dict[str, float] = {}
        self._pending: list[tuple[str, str, Any, tuple[str, ...]]] = []
        #: The primary tier's lookup delays (seconds) since the last read,
        #: appended by the manager's lookup: one double each.
        self.primary_delays = array("d")
        self._orphaned: dict[int, tuple[int, ...]] = {}

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
        self, tier: MeteredTier, promotion: bool, seconds: float, result: Any, keys: list[bytes], name: str
    ) -> None:
        # Failures are the manager's counters (`_read_tier`); the latency
        # is measured here, from submission to the poll that returned it.
        if promotion:
            outcome = "success" if result.success else "failure"
            self._pending.append(("h", v.TieringOffloadingMetrics.PROMOTION_LATENCY, seconds, (tier.name, outcome)))

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
            self._read_tiering(stats)
        return stats

    def _read_tiering(self, stats: v.OffloadingConnectorStats) -> None:
        M = v.TieringOffloadingMetrics
        m = self.owner._m
        own = m.read_stats()
        failures = self._delta("allocation_failures", own["allocation_failures"])
        if failures:
            stats.increase_counter(M.PROMOTION_ALLOCATION_FAILURES, int(failures))
        # The primary tier's answers, as vLLM's tier "0:primary": the
        # lookups it answered HIT or MISS (not HIT_PENDING), and its hits.
        primary = (PRIMARY_LABEL,)
        asked = self._delta("0.lookups", own["lookups"]) - self._delta("0.pending", own["primary_hit_pending"])
        hits = self._delta("0.hits", own["primary_hits"])
        if asked:
            stats.increase_counter(M.CHUNK_QUERIES, int(asked), primary)
        if hits:
            stats.increase_counter(M.CHUNK_HITS, int(hits), primary)
        idle = own["jobs_in_flight"] == 0
        for index, label in enumerate(self.owner._tier_labels, start=1):
            self._read_tier(stats, index, (label,), m.read_tier_stats(index), idle)
        for adapter in self.owner._adapters:
            tier_stats = adapter.vllm_tier.get_stats()
            if tier_stats is not None:
                stats.aggregate(tier_stats)
        delays, self.primary_delays = self.primary_delays, array("d")
        for seconds in delays:
            stats.observe_histogram(M.LOOKUP_SYNC_DELAY, seconds, primary)
        pending, self._pending = self._pending, []
        for kind, name, value, labels in pending:
            if kind == "h":
                stats.observe_histogram(name, value, labels)
            else:
                stats.increase_counter(name, value, labels)

    def _read_tier(
        self, stats: v.OffloadingConnectorStats, index: int, label: tuple[str, ...], tier: dict[str, Any], idle: bool
    ) -> None:
        """Secondary tier `index`'s families from the manager's counters
        for it (every tier: vLLM tiers and kvtier's built-in ones)."""
        M = v.TieringOffloadingMetrics

        def delta(name: str) -> float:
            return self._delta(f"{index}.{name}", tier[name].value)

        for metric, value in (
            (M.CHUNK_QUERIES, delta("lookups") - delta("retries")),
            (M.CHUNK_HITS, delta("hits")),
            (M.READ_BYTES, delta("bytes_loaded")),
            (M.WRITE_BYTES, delta("bytes_stored")),
            (M.PROMOTION_JOB_FAILURES, delta("promotion_failures")),
            (M.CASCADE_JOB_FAILURES, delta("cascade_failures")),
            (M.BACKPRESSURE_STORES_DROPPED, delta("dropped_cascade_jobs")),
            (M.BACKPRESSURE_BLOCKS_DROPPED, delta("dropped_cascade_blocks")),
        ):
            if value:
                stats.increase_counter(metric, int(value), label)
        for metric, value in (
            (M.READ_TIME, delta("load_duration_seconds_sum")),
            (M.WRITE_TIME, delta("store_duration_seconds_sum")),
        ):
            if value:
                stats.increase_counter(metric, value, label)
        ema = tier.get("store_latency_ema")
        if ema is not None:
            # kvtier's average is in nanoseconds per byte; vLLM's in s/MiB.
            stats.set_gauge(M.BACKPRESSURE_STORE_LATENCY_EMA, ema.value * NS_PER_BYTE_TO_S_PER_MIB, label)
        promotions, promoted, cascades, cascaded = self._in_flight(index, tier, idle)
        chunks = self.owner._num_chunks
        stats.set_gauge(M.ACTIVE_PROMOTION_JOBS, promotions, label)
        stats.set_gauge(M.ACTIVE_CASCADE_JOBS, cascades, label)
        stats.set_gauge(M.PRIMARY_WRITE_USAGE_PERC, promoted / chunks if chunks > 0 else 0.0, label)
        stats.set_gauge(M.PRIMARY_READ_USAGE_PERC, cascaded / chunks if chunks > 0 else 0.0, label)

    def _in_flight(self, index: int, tier: dict[str, Any], idle: bool) -> tuple[int, int, int, int]:
        """Tier `index`'s promotion jobs, their blocks, cascade jobs and
        their blocks, submitted and not finished: those submitted less
        those finished (each finished job is one observation of the tier's
        duration histogram, its blocks the size histogram's sum).  A job a
        cache reset orphaned finishes unrecorded; the difference it leaves
        is taken off once the manager has no job in flight."""
        raw = tuple(
            int(tier[submitted].value - tier[finished].value)
            for submitted, finished in (
                ("promotion_jobs", "load_duration_seconds_count"),
                ("promotion_blocks", "load_size_blocks_sum"),
                ("cascade_jobs", "store_duration_seconds_count"),
                ("cascade_blocks", "store_size_blocks_sum"),
            )
        )
        if idle:
            self._orphaned[index] = raw
        base = self._orphaned.get(index, (0, 0, 0, 0))
        promotions, promoted, cascades, cascaded = (max(r - b, 0) for r, b in zip(raw, base))
        return promotions, promoted, cascades, cascaded
