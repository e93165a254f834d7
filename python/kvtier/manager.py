"""The tiering manager (``kvtier_manager_*``): a primary tier in host
memory with secondary tiers below it (files, Redis, or tiers written in
Python, `kvtier.Tier`), internally synchronized.

A request begins with a name (`Manager.request_begin`) and gets a handle,
an int that every later call of the request takes.  Keys are ``bytes``.
"""

from __future__ import annotations

import json as _json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from ._calls import completion, lookup_answer, read_plan, take_events
from ._ffi import CONSTANTS, ffi, lib
from ._keys import key_array
from ._handle import Handle
from ._scratch import acquire, release
from .errors import KvtierError, Status, check, check_completion, encode_str
from .types import (
    Event,
    EventKind,
    Locality,
    LookupAnswer,
    Medium,
    OffloadPolicy,
    PromotionAnswer,
    RequestState,
    StoreCompletion,
    StorePlan,
    struct_dict,
)

if TYPE_CHECKING:
    from .region import Region
    from .tier import Tier

__all__ = ["Manager", "TierStat", "TierMatcher"]


class TierStat(NamedTuple):
    """One statistic of a tier: its value, and whether it is a counter
    (cumulative, never decreasing) or a gauge (a current value)."""

    value: float
    counter: bool


class TierMatcher(NamedTuple):
    """One matcher of a request's tier filter (``ANY`` matches anything)."""

    medium: Medium = Medium.ANY
    locality: Locality = Locality.ANY


class Manager:
    """A tiering manager (see ``kvtier_manager_new``).

    Primary tier: `capacity` slots, `policy` ``"lru"`` or ``"arc"``,
    `store_threshold` / `admission_table_size` (admission at the n-th
    offer), `kv_groups` (keys end with a 4-byte big-endian KV-group
    index).  `event_capacity` bounds each tier's event queue (0: no
    events).  `promotion_answer` is what a lookup that starts a promotion
    answers (``"retry"``, or ``"hit_pending"`` as vLLM 0.33).
    `block_bytes` is the block size for back-pressure per byte.
    `progress_hold`, `progress_wait_steps` and `progress_wait_ms` keep
    waiting requests moving (holds on, 16 steps, no time bound by default;
    ``False, 0, 0`` follows vLLM 0.33: see `lookup`).
    `region`, if given, is the slot memory the built-in tiers copy through.

    Use it as a context manager, or call `close`.
    """

    def __init__(
        self,
        capacity: int = 1024,
        *,
        policy: str = "lru",
        store_threshold: int = 0,
        admission_table_size: int = 64000,
        event_capacity: int = 0,
        promotion_answer: str = "retry",
        block_bytes: int = 0,
        error_log_capacity: int = 64,
        kv_groups: bool = False,
        progress_hold: bool = True,
        progress_wait_steps: int = 16,
        progress_wait_ms: int = 0,
        region: Region | None = None,
    ):
        options = ffi.new("kvtier_manager_options *", lib.kvtier_manager_options_default())
        policy_c = ffi.new("char[]", encode_str(policy, "policy"))
        options.capacity = capacity
        options.policy = policy_c
        options.store_threshold = store_threshold
        options.admission_table_size = admission_table_size
        options.event_capacity = event_capacity
        if promotion_answer not in ("retry", "hit_pending"):
            raise ValueError(f"promotion_answer: expected 'retry' or 'hit_pending', got {promotion_answer!r}")
        options.promotion_answer = PromotionAnswer[promotion_answer.upper()]
        options.block_bytes = block_bytes
        options.error_log_capacity = error_log_capacity
        options.kv_groups = kv_groups
        options.progress_hold = progress_hold
        options.progress_wait_steps = progress_wait_steps
        options.progress_wait_ms = progress_wait_ms
        out = ffi.new("kvtier_manager **")
        region_c = region.handle if region is not None else ffi.NULL
        check(lib.kvtier_manager_new(options, region_c, out), "kvtier_manager_new")
        self._init(out[0], capacity)
        self._region = region

    @classmethod
    def from_json(cls, config: str | Mapping[str, Any]) -> Manager:
        """A manager built from a JSON configuration (a string, or a mapping
        dumped to JSON), as ``kvtier_manager_new_from_json``."""
        text = config if isinstance(config, str) else _json.dumps(config)
        data = text.encode()
        out = ffi.new("kvtier_manager **")
        check(lib.kvtier_manager_new_from_json(data, len(data), out), "kvtier_manager_new_from_json")
        self = cls.__new__(cls)
        primary = {} if isinstance(config, str) else dict(config.get("primary", {}))
        self._init(out[0], int(primary.get("capacity", 0)))
        self._region = None
        return self

    def _init(self, handle: Any, capacity: int) -> None:
        # Every call enters the handle and leaves it; `close` frees it once
        # no call is inside, so a close racing other threads' calls (or
        # made from a tier callback) never frees it under them.
        self._h = Handle(handle, lib.kvtier_manager_free, "manager")
        self._call = self._h.call
        self.capacity = capacity
        self._tiers: list[Any] = []  # Python tiers' adapters, kept alive here too

    @property
    def handle(self) -> Any:
        """The ``kvtier_manager *``; an error once closed.  A call made
        with it directly is not protected from a concurrent `close`."""
        return self._h.raw()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._h.closed

    # -- tiers --------------------------------------------------------

    def add_tier(
        self,
        tier: Tier,
        *,
        backpressure: bool = False,
        events: bool = True,
        **backpressure_options: Any,
    ) -> int:
        """Adds a secondary tier written in Python (see `kvtier.Tier`),
        through the C vtable; its tier index (1 for the first).
        `backpressure_options` are fields of ``kvtier_tier_options``
        (``alpha``, ``high_ns_per_byte``, ``low_ns_per_byte``, ``warmup``,
        ``max_consecutive_failures``, ``policy``)."""
        from .tier import Tier, TierAdapter

        if not isinstance(tier, Tier):
            raise TypeError(f"tier: expected a kvtier.Tier, got {type(tier).__name__}")

        options = ffi.new("kvtier_tier_options *", lib.kvtier_tier_options_default())
        options.backpressure = backpressure
        options.events = events
        for name, value in backpressure_options.items():
            setattr(options, name, value)
        adapter = TierAdapter(tier, self)
        index = ffi.new("size_t *")
        try:
            check(self._call(lib.kvtier_manager_add_tier, adapter.vtable, options, index), "kvtier_manager_add_tier")
        except BaseException:
            adapter.release()
            raise
        adapter.index = int(index[0])
        self._tiers.append(adapter)
        return adapter.index

    def add_fs_tier(self, directory: str, **options: Any) -> int:
        """Adds the file-system tier over the manager's slot memory, in
        `directory`; `options` are fields of ``kvtier_fs_options``
        (``capacity_bytes``, ``read_threads``, ``direct_io``, ...,
        ``locality`` a `Locality`).  Its tier index."""
        c_options = ffi.new("kvtier_fs_options *", lib.kvtier_fs_options_default())
        directory_c = ffi.new("char[]", encode_str(str(directory), "directory"))
        c_options.directory = directory_c
        for name, value in options.items():
            setattr(c_options, name, value)
        index = ffi.new("size_t *")
        check(self._call(lib.kvtier_manager_add_fs_tier, c_options, index), "kvtier_manager_add_fs_tier")
        return int(index[0])

    def add_redis_tier(self, **options: Any) -> int:
        """Adds the redis tier; `options` are fields of
        ``kvtier_redis_options`` (strings as ``str``).  Its tier index."""
        c_options = ffi.new("kvtier_redis_options *", lib.kvtier_redis_options_default())
        keep = []
        for name, value in options.items():
            if isinstance(value, str):
                keep.append(ffi.new("char[]", encode_str(value, name)))
                value = keep[-1]
            setattr(c_options, name, value)
        index = ffi.new("size_t *")
        check(self._call(lib.kvtier_manager_add_redis_tier, c_options, index), "kvtier_manager_add_redis_tier")
        return int(index[0])

    # -- requests -----------------------------------------------------

    def request_begin(
        self,
        name: str,
        *,
        params: Mapping[str, str] | None = None,
        tier_filter: Sequence[TierMatcher] | None = None,
    ) -> tuple[int, OffloadPolicy]:
        """Starts request `name` (unique among active requests): its handle,
        and the offload policy the tiers asked for.  `params` are strings
        tiers may read; `tier_filter`, if given, limits the tiers its
        lookups ask (an empty filter asks none)."""
        handle = ffi.new("kvtier_request_handle *")
        policy = ffi.new("kvtier_offload_policy *")
        c_params = ffi.NULL
        keep: list[Any] = []
        if params or tier_filter is not None:
            c_params = ffi.new("kvtier_request_params *", lib.kvtier_request_params_default())
            if params:
                entries = ffi.new("kvtier_param[]", len(params))
                for i, (key, value) in enumerate(params.items()):
                    keep.append(ffi.new("char[]", encode_str(str(key), "params key")))
                    entries[i].key = keep[-1]
                    keep.append(ffi.new("char[]", encode_str(str(value), f"params[{key!r}]")))
                    entries[i].value = keep[-1]
                keep.append(entries)
                c_params.params = entries
                c_params.params_len = len(params)
            if tier_filter is not None:
                c_params.filter_set = True
                if tier_filter:
                    matchers = ffi.new("kvtier_tier_matcher[]", len(tier_filter))
                    for i, m in enumerate(tier_filter):
                        matchers[i].medium = m.medium
                        matchers[i].locality = m.locality
                    keep.append(matchers)
                    c_params.filter = matchers
                    c_params.filter_len = len(tier_filter)
        check(
            self._call(lib.kvtier_manager_request_begin, encode_str(name, "name"), c_params, handle, policy),
            "kvtier_manager_request_begin",
        )
        return int(handle[0]), OffloadPolicy(policy[0])

    def request_finished(self, request: int) -> None:
        """Marks `request` finished (its stores in flight still complete,
        and its loads in flight still release their pins)."""
        check(self._call(lib.kvtier_manager_request_finished, request), "kvtier_manager_request_finished")

    @contextmanager
    def request(self, name: str, **kwargs: Any) -> Iterator[int]:
        """A request's handle for the ``with`` block, finished at its end."""
        handle, _policy = self.request_begin(name, **kwargs)
        try:
            yield handle
        finally:
            if not self._h.closed:
                self.request_finished(handle)

    # -- keys ---------------------------------------------------------

    def lookup(self, request: int, keys: Sequence[bytes]) -> LookupAnswer:
        """Looks `keys` up for `request` as a prefix and starts, in one call,
        the promotions of every key of it the secondary tiers hold
        (``kvtier_manager_lookup``).  While the answer's `pending` is above
        0, call again next step (after `schedule_end`); then load its `hits`
        keys and compute the rest."""
        return self._lookup(lib.kvtier_manager_lookup, "kvtier_manager_lookup", request, keys)

    def lookup_per_key(self, request: int, keys: Sequence[bytes]) -> LookupAnswer:
        """vLLM 0.33's per-key answers: looks `keys` up one at a time, in
        order, and stops at the first that is not HIT
        (``kvtier_manager_lookup_per_key``)."""
        return self._lookup(lib.kvtier_manager_lookup_per_key, "kvtier_manager_lookup_per_key", request, keys)

    def _lookup(self, fn: Any, name: str, request: int, keys: Sequence[bytes]) -> LookupAnswer:
        scratch = acquire()  # this call's own buffers: threads share the manager
        try:
            ptr, n, _keep = scratch.key_array(keys)
            check(self._call(fn, request, ptr, n, scratch.answer), name)
            return lookup_answer(scratch.answer)
        finally:
            release(scratch)

    def prepare_load(self, request: int, keys: Sequence[bytes]) -> list[int]:
        """Pins ready `keys` for a load to the GPU; their slots, in key order."""
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            slots = scratch.u32
            check(self._call(lib.kvtier_manager_prepare_load, request, ptr, n, slots), "kvtier_manager_prepare_load")
            return ffi.unpack(slots, n)
        finally:
            release(scratch)

    def _keys_call(self, fn: Any, name: str, request: int, keys: Sequence[bytes]) -> None:
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            check(self._call(fn, request, ptr, n), name)
        finally:
            release(scratch)

    def complete_load(self, request: int, keys: Sequence[bytes]) -> None:
        """Unpins `keys` after their load finished."""
        self._keys_call(lib.kvtier_manager_complete_load, "kvtier_manager_complete_load", request, keys)

    def touch(self, request: int, keys: Sequence[bytes]) -> None:
        """Marks `keys` recently used in every tier."""
        self._keys_call(lib.kvtier_manager_touch, "kvtier_manager_touch", request, keys)

    def set_positions(self, request: int, keys: Sequence[bytes], positions: Sequence[int]) -> None:
        """Gives `keys` of `request` their end-token positions."""
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            positions = list(positions)
            if n != len(positions):
                raise KvtierError(Status.INVALID_ARGUMENT, "keys and positions differ in length")
            c_positions = scratch.u64
            c_positions[0:n] = positions
            check(
                self._call(lib.kvtier_manager_set_positions, request, ptr, n, c_positions),
                "kvtier_manager_set_positions",
            )
        finally:
            release(scratch)

    def prepare_store(self, request: int, keys: Sequence[bytes]) -> StorePlan:
        """Plans a store of `keys` into the primary tier."""
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            plan = scratch.plan
            check(self._call(lib.kvtier_manager_prepare_store, request, ptr, n, plan), "kvtier_manager_prepare_store")
            return read_plan(plan)
        finally:
            release(scratch)

    def request_state(self, request: int) -> RequestState:
        """Where handle `request` stands (`RequestState`); changes nothing."""
        out = ffi.new("kvtier_request_state *")
        check(self._call(lib.kvtier_manager_request_state, request, out), "kvtier_manager_request_state")
        return RequestState(out[0])

    def complete_store(self, request: int, keys: Sequence[bytes], success: bool = True) -> StoreCompletion:
        """Finishes (part of) `request`'s store of `keys`.  Raises
        `KeysIgnoredError` (carrying the completion) when a key named was not
        the request's to complete, or it had no store in flight."""
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            result = scratch.completion
            status = self._call(lib.kvtier_manager_complete_store, request, ptr, n, success, result)
            check_completion(status, "kvtier_manager_complete_store", lambda: completion(result))
            return completion(result)
        finally:
            release(scratch)

    # -- steps --------------------------------------------------------

    def schedule_end(self) -> None:
        """Ends a scheduler step (submits staged promotions, polls tiers)."""
        check(self._call(lib.kvtier_manager_schedule_end), "kvtier_manager_schedule_end")

    def has_pending_work(self) -> bool:
        """Whether jobs, parked keys or staged promotions are outstanding."""
        out = ffi.new("bool *")
        check(self._call(lib.kvtier_manager_has_pending_work, out), "kvtier_manager_has_pending_work")
        return bool(out[0])

    def reset_cache(self) -> None:
        """Drains every tier and empties the primary tier."""
        check(self._call(lib.kvtier_manager_reset_cache), "kvtier_manager_reset_cache")

    def reset_flushed(self) -> None:
        """Ends the promotion hold that follows `reset_cache`."""
        check(self._call(lib.kvtier_manager_reset_flushed), "kvtier_manager_reset_flushed")

    def complete_job(
        self,
        tier: int,
        job_id: int,
        success: bool = True,
        *,
        succeeded_keys: Sequence[bytes] | None = None,
        bytes_moved: int = 0,
        duration_ns: int = 0,
    ) -> None:
        """Reports a finished job of Python tier `tier` from any thread."""
        result = ffi.new("kvtier_job_result *")
        result.id = job_id
        result.success = success
        keys = key_array(succeeded_keys or ())
        result.succeeded_keys = keys.ptr
        result.succeeded_len = keys.len
        result.bytes = bytes_moved
        result.duration_ns = duration_ns
        check(self._call(lib.kvtier_manager_complete_job, tier, result), "kvtier_manager_complete_job")

    # -- observing ----------------------------------------------------

    def take_events(self) -> list[Event]:
        """Every queued event of every tier, oldest first (copied)."""
        return [
            Event(tier, EventKind(kind), Medium(medium), Locality(locality), keys)
            for tier, kind, medium, locality, keys in take_events(self._call)
        ]

    def events_queued(self) -> tuple[int, int]:
        """How many events (batches of one tier and kind) wait to be taken,
        and how many keys they hold (``kvtier_manager_events_queued``)."""
        events = ffi.new("size_t *")
        keys = ffi.new("size_t *")
        check(self._call(lib.kvtier_manager_events_queued, events, keys), "kvtier_manager_events_queued")
        return int(events[0]), int(keys[0])

    def read_stats(self) -> dict[str, Any]:
        """The manager's own numbers (``kvtier_manager_stats``) by name."""
        stats = ffi.new("kvtier_manager_stats *")
        stats.struct_size = ffi.sizeof("kvtier_manager_stats")
        check(self._call(lib.kvtier_manager_read_stats, stats), "kvtier_manager_read_stats")
        return struct_dict(stats[0])

    def read_tier_stats(self, tier: int) -> dict[str, TierStat]:
        """Tier `tier`'s statistics (0 the primary tier) by name."""
        written = ffi.new("size_t *")
        capacity = 64
        while True:
            out = ffi.new("kvtier_tier_stat[]", capacity)
            status = self._call(lib.kvtier_manager_read_tier_stats, tier, out, capacity, written)
            if status == Status.BUFFER_TOO_SMALL:
                capacity = int(written[0])
                continue
            check(status, "kvtier_manager_read_tier_stats")
            counter = CONSTANTS["KVTIER_STAT_COUNTER"]
            return {
                ffi.string(out[i].name).decode(): TierStat(out[i].value, out[i].kind == counter)
                for i in range(written[0])
            }

    def metrics_prometheus(self) -> str:
        """Every statistic in the Prometheus text format."""
        written = ffi.new("size_t *")
        capacity = 1 << 14
        while True:
            text = ffi.new("char[]", capacity)
            status = self._call(lib.kvtier_manager_metrics_prometheus, text, capacity, written)
            if status == Status.BUFFER_TOO_SMALL:
                capacity = int(written[0]) + 1024
                continue
            check(status, "kvtier_manager_metrics_prometheus")
            return ffi.string(text).decode()

    def take_errors(self) -> list[str]:
        """Every message of the manager's error log (tier misbehaviour), oldest first."""
        out: list[str] = []
        written = ffi.new("size_t *")
        capacity = 512
        while True:
            text = ffi.new("char[]", capacity)
            status = self._call(lib.kvtier_manager_take_error, text, capacity, written)
            if status == Status.BUFFER_TOO_SMALL:
                capacity = int(written[0])
                continue
            check(status, "kvtier_manager_take_error")
            if written[0] == 0:
                return out
            out.append(ffi.string(text).decode("utf-8", "replace"))

    def slot_memory(self) -> tuple[int, int, int, int]:
        """(base address, stride, usable bytes per slot, slot count) of the
        manager's slot memory."""
        base = ffi.new("void **")
        stride = ffi.new("size_t *")
        slot_bytes = ffi.new("size_t *")
        count = ffi.new("uint32_t *")
        check(self._call(lib.kvtier_manager_slot_memory, base, stride, slot_bytes, count), "kvtier_manager_slot_memory")
        return int(ffi.cast("uintptr_t", base[0])), int(stride[0]), int(slot_bytes[0]), int(count[0])

    def wake_fd(self) -> int:
        """The descriptor that becomes readable when a tier finishes a job."""
        fd = ffi.new("int *")
        check(self._call(lib.kvtier_manager_wake_fd, fd), "kvtier_manager_wake_fd")
        return int(fd[0])

    # -- lifetime -----------------------------------------------------

    def shutdown(self) -> None:
        """Shuts every secondary tier down; later calls fail with CLOSED."""
        check(self._call(lib.kvtier_manager_shutdown), "kvtier_manager_shutdown")

    def close(self) -> None:
        """Frees the manager (shutting its tiers down first if needed):
        at once, or, while other calls are inside it (other threads, or the
        tier callback that closes it), when the last of them returns.
        Later calls raise ``CLOSED``."""
        self._h.close()

    def __enter__(self) -> Manager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
