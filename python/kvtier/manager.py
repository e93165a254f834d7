"""The tiering manager (``kvtier_manager_*``): a primary tier in host
memory with secondary tiers below it (files, Redis, or tiers written in
Python, `kvtier.Tier`), internally synchronized.

A request begins with a name (`Manager.request_begin`) and gets a handle,
an int that every later call of the request takes.  Keys are ``bytes``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _config
from ._calls import completion, lookup_answer, read_plan
from ._ffi import ffi, lib
from ._keys import key_array
from ._args import explain_items, fill, int_list, slot_index
from ._handle import Handle
from ._scratch import acquire, release
from ._observe import ManagerObserving, TierStat
from ._pins import DropReport, ManagerPins, PinOutcome, PinSet
from . import _server
from ._server import ServerInfo
from .callbacks import ManagerCallbacks
from .errors import KvtierError, Status, check, check_completion, encode_str
from .types import (
    Locality,
    LookupAnswer,
    Medium,
    OffloadPolicy,
    RequestState,
    StoreCompletion,
    StorePlan,
)

if TYPE_CHECKING:
    from .region import Region
    from .tier import Tier

__all__ = ["DropReport", "Manager", "PinOutcome", "PinSet", "ServerInfo", "SlotMemory", "TierStat", "TierMatcher"]


class TierMatcher(NamedTuple):
    """One matcher of a request's tier filter (``ANY`` matches anything)."""

    medium: Medium = Medium.ANY
    locality: Locality = Locality.ANY


class SlotMemory(NamedTuple):
    """Where a manager's slots are: slot ``i`` is `slot_bytes` bytes at
    ``base + i * stride`` (`Manager.slot` gives it as a buffer)."""

    base: int
    stride: int
    slot_bytes: int
    slot_count: int


class Manager(ManagerObserving, ManagerPins):
    """A tiering manager: a primary tier of `capacity` slots, and secondary
    tiers below it.

    The keyword arguments are the fields of the JSON configuration
    (docs/configuration.md), and are read as exactly that document by the
    library's parser (``Manager(**options)`` is
    ``Manager.from_json(document)``): the same defaults (an argument left
    None is the library's default), the same rules, the same errors
    (`KvtierError`, ``INVALID_ARGUMENT``, naming the field's path).  The
    primary tier's (``"primary"``): `capacity` slots or `capacity_bytes`,
    `policy` ``"lru"`` or ``"arc"``, `store_threshold` and
    `admission_table_size` (admission at the n-th offer), `event_capacity`
    (each tier's event queue; 0: no events), `kv_groups` (keys end with a
    4-byte big-endian KV-group index).  The manager's: `block_bytes` (the
    size of a block, and of a slot: with it and no `region` the manager
    has private slot memory, which the built-in tiers need),
    `promotion_answer` (``"retry"``, or ``"hit_pending"`` as vLLM 0.33),
    `error_log_capacity`, and the progress rule as `progress_hold`,
    `progress_wait_steps`, `progress_wait_ms` (``"progress"``).  `tiers`,
    built-in secondary tiers (``[{"type": "fs", "options": {"directory":
    ...}}]``); `metrics`, ``{"listen": "IP:port"}`` for a ``/metrics``
    endpoint.

    `region` is a `Region` whose slots are the manager's slot memory (as
    ``kvtier_manager_new`` takes it: at least `capacity` slots), or a
    mapping, the JSON ``"region"`` (created or joined by the manager, of
    `capacity` slots of `block_bytes`).

    `Manager.connect` gives a manager in the node server ``kvtierd``
    instead, shared with every engine connected to it.

    Use it as a context manager, or call `close`.
    """

    def __init__(
        self,
        capacity: int | None = None,
        *,
        policy: str | None = None,
        store_threshold: int | None = None,
        admission_table_size: int | None = None,
        event_capacity: int | None = None,
        kv_groups: bool | None = None,
        capacity_bytes: int | None = None,
        promotion_answer: str | None = None,
        block_bytes: int | None = None,
        error_log_capacity: int | None = None,
        progress_hold: bool | None = None,
        progress_wait_steps: int | None = None,
        progress_wait_ms: int | None = None,
        tiers: Sequence[Mapping[str, Any]] | None = None,
        metrics: Mapping[str, Any] | None = None,
        region: Region | Mapping[str, Any] | None = None,
    ):
        from .region import Region

        options = {
            "capacity": capacity,
            "policy": policy,
            "store_threshold": store_threshold,
            "admission_table_size": admission_table_size,
            "event_capacity": event_capacity,
            "kv_groups": kv_groups,
            "capacity_bytes": capacity_bytes,
            "promotion_answer": promotion_answer,
            "block_bytes": block_bytes,
            "error_log_capacity": error_log_capacity,
            "progress_hold": progress_hold,
            "progress_wait_steps": progress_wait_steps,
            "progress_wait_ms": progress_wait_ms,
            "tiers": tiers,
            "metrics": metrics,
            "region": region,
        }

        slots = None
        if isinstance(region, Region):
            slots, options["region"] = region, None
        elif region is not None and not isinstance(region, Mapping):
            raise TypeError(
                f"region: expected a kvtier.Region or a mapping (the JSON region), got {type(region).__name__}"
            )
        self._build(_config.encode(_config.document(options)), slots)

    @classmethod
    def from_json(cls, config: str | bytes | Mapping[str, Any], *, region: Region | None = None) -> Manager:
        """A manager built from a JSON configuration (a string, or a mapping
        dumped to JSON), as ``kvtier_manager_new_from_json``; over
        `region`'s slots if given (the document then names no region)."""
        from .region import Region

        if region is not None and not isinstance(region, Region):
            raise TypeError(f"region: expected a kvtier.Region, got {type(region).__name__}")
        self = cls.__new__(cls)
        self._build(_config.encode(config), region)
        return self

    def _build(self, document: bytes, region: Region | None) -> None:
        out = ffi.new("kvtier_manager **")
        region_c = region.handle if region is not None else ffi.NULL
        check(
            lib.kvtier_manager_new_from_json_with_region(document, len(document), region_c, out),
            "kvtier_manager_new_from_json_with_region",
        )
        self._adopt(out[0], region, None)

    @classmethod
    def connect(
        cls,
        path: str | os.PathLike[str],
        *,
        block_bytes: int = 0,
        slot_stride: int = 0,
        fingerprint: str = "",
        name: str = "",
        call_timeout_ms: int = 10000,
        spin_us: int = 50,
    ) -> Manager:
        """A manager in the node server ``kvtierd`` listening on the Unix
        socket `path` (``kvtier_manager_connect``; docs/python.md, "The
        node server").  Blocks are shared with every engine connected to
        the server; requests are this manager's.  The server's region is
        mapped here: `slot` gives its slots.  `block_bytes` and
        `slot_stride` (0: whatever the server has) and `fingerprint` (the
        server's ``server.fingerprint``) must match the server's, or the
        connection is refused (``INVALID_ARGUMENT``, naming the
        difference); `name` shows in the server's logs and metrics;
        `call_timeout_ms` bounds the wait for one answer; `spin_us` is how
        long a call polls before it sleeps.  No server at `path`, a server
        that died or one that did not answer in time:
        `DisconnectedError`, from then on for every call.  Tiers, events,
        callbacks, the wake-up descriptor and resets are the server's:
        those methods raise ``UNSUPPORTED``.  `server_info` says what it
        is connected to."""
        ptr = _server.connect(
            path,
            block_bytes=block_bytes,
            slot_stride=slot_stride,
            fingerprint=fingerprint,
            name=name,
            call_timeout_ms=call_timeout_ms,
            spin_us=spin_us,
        )
        try:
            info = _server.server_info(ptr)
        except BaseException:
            lib.kvtier_manager_free(ptr)
            raise
        self = cls.__new__(cls)
        self._adopt(ptr, None, info)
        return self

    def _adopt(self, ptr: Any, region: Region | None, server: ServerInfo | None) -> None:
        # Every call enters the handle and leaves it; `close` frees it once
        # no call is inside, so a close racing other threads' calls (or
        # made from a tier callback) never frees it under them.  The free
        # keeps the callbacks' trampolines alive until the manager is gone.
        callbacks = ManagerCallbacks()
        self._callbacks = callbacks
        self._h = Handle(ptr, lambda ptr, _keep=callbacks: lib.kvtier_manager_free(ptr), "manager")
        self._call = self._h.call
        self._region = region  # the caller's Region object lives as long
        self._tiers: list[Any] = []  # Python tiers' adapters, kept alive here too
        self._server = server
        #: Number of primary slots.
        self.capacity = server.capacity if server is not None else int(self.read_tier_stats(0)["capacity"].value)

    @property
    def server_info(self) -> ServerInfo | None:
        """What a manager made by `connect` is connected to (`ServerInfo`,
        as read at connect); None for a local manager."""
        return self._server

    def _local_only(self, what: str) -> None:
        """Raises ``UNSUPPORTED`` on a connected manager, for `what`."""
        if self._server is not None:
            raise _server.not_connected(what)

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
        self._local_only("add_tier")
        from .tier import Tier, TierAdapter

        if not isinstance(tier, Tier):
            raise TypeError(f"tier: expected a kvtier.Tier, got {type(tier).__name__}")

        options = ffi.new("kvtier_tier_options *", lib.kvtier_tier_options_default())
        fill(options, {"backpressure": backpressure, "events": events, **backpressure_options}, "add_tier")
        adapter = TierAdapter(tier)
        index = ffi.new("size_t *")
        try:
            check(self._call(lib.kvtier_manager_add_tier, adapter.vtable, options, index), "kvtier_manager_add_tier")
        except BaseException:
            adapter.release()
            raise
        adapter.index = int(index[0])
        self._tiers.append(adapter)
        return adapter.index

    def add_fs_tier(self, directory: str | os.PathLike[str], **options: Any) -> int:
        """Adds the file-system tier over the manager's slot memory, in
        `directory`; `options` are fields of ``kvtier_fs_options``
        (``capacity_bytes``, ``read_threads``, ``direct_io``, ...,
        ``locality`` a `Locality`, ``layout_fingerprint`` a ``str``).  Its
        tier index."""
        self._local_only("add_fs_tier")
        c_options = ffi.new("kvtier_fs_options *", lib.kvtier_fs_options_default())
        if isinstance(directory, os.PathLike):
            directory = os.fspath(directory)
        directory_c = ffi.new("char[]", encode_str(directory, "directory"))
        c_options.directory = directory_c
        keep: list[Any] = []
        fill(c_options, options, "add_fs_tier", skip=("struct_size", "directory"), keep=keep)
        index = ffi.new("size_t *")
        check(self._call(lib.kvtier_manager_add_fs_tier, c_options, index), "kvtier_manager_add_fs_tier")
        return int(index[0])

    def add_redis_tier(self, **options: Any) -> int:
        """Adds the redis tier; `options` are fields of
        ``kvtier_redis_options`` (strings as ``str``).  Its tier index."""
        self._local_only("add_redis_tier")
        c_options = ffi.new("kvtier_redis_options *", lib.kvtier_redis_options_default())
        keep: list[Any] = []
        fill(c_options, options, "add_redis_tier", keep=keep)
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
        if params is not None and not isinstance(params, Mapping):
            raise TypeError(f"params: expected a mapping of str to str, got {type(params).__name__}")
        if tier_filter is not None and not isinstance(tier_filter, Sequence):
            raise TypeError(f"tier_filter: expected a sequence of TierMatcher, got {type(tier_filter).__name__}")
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
                        try:
                            medium, locality = m
                        except (TypeError, ValueError):
                            raise TypeError(
                                f"tier_filter[{i}]: expected a TierMatcher (medium, locality), got {type(m).__name__}"
                            ) from None
                        fill(matchers + i, {"medium": medium, "locality": locality}, f"tier_filter[{i}]")
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
            positions = int_list(positions, "positions")
            if n != len(positions):
                raise KvtierError(Status.INVALID_ARGUMENT, "keys and positions differ in length")
            c_positions = scratch.u64
            try:
                c_positions[0:n] = positions
            except (TypeError, OverflowError) as e:
                raise explain_items(positions, "uint64_t", "positions", e) from None
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
        self._local_only("reset_cache")
        check(self._call(lib.kvtier_manager_reset_cache), "kvtier_manager_reset_cache")

    def reset_flushed(self) -> None:
        """Ends the promotion hold that follows `reset_cache`."""
        self._local_only("reset_flushed")
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
        self._local_only("complete_job")
        result = ffi.new("kvtier_job_result *")
        fill(
            result,
            {"id": job_id, "success": success, "bytes": bytes_moved, "duration_ns": duration_ns},
            "complete_job",
        )
        keys = key_array(succeeded_keys if succeeded_keys is not None else ())
        result.succeeded_keys = keys.ptr
        result.succeeded_len = keys.len
        check(self._call(lib.kvtier_manager_complete_job, tier, result), "kvtier_manager_complete_job")

    # -- slots --------------------------------------------------------

    def slot_memory(self) -> SlotMemory:
        """Where the manager's slots are (`SlotMemory`: base address,
        stride, usable bytes per slot, slot count); ``NOT_FOUND`` for a
        manager without slot memory (no region, no `block_bytes`)."""
        base = ffi.new("void **")
        stride = ffi.new("size_t *")
        slot_bytes = ffi.new("size_t *")
        count = ffi.new("uint32_t *")
        check(self._call(lib.kvtier_manager_slot_memory, base, stride, slot_bytes, count), "kvtier_manager_slot_memory")
        return SlotMemory(int(ffi.cast("uintptr_t", base[0])), int(stride[0]), int(slot_bytes[0]), int(count[0]))

    def slot(self, slot: int) -> memoryview:
        """Slot `slot`'s bytes (its `slot_bytes`), as a writable buffer: where
        a block is copied before `complete_store` and read after
        `prepare_load`.  The view keeps the slot memory mapped: while one
        lives, `close` raises ``BufferError`` (drop it first).  A slot
        number that is no int is a ``TypeError``, one outside
        ``0..slot_count - 1`` an ``IndexError``; a manager without slot
        memory raises `KvtierError` (``NOT_FOUND``)."""
        memory = self.slot_memory()
        index = slot_index(slot, memory.slot_count)
        return self._h.export(memory.base + index * memory.stride, memory.slot_bytes)

    # -- lifetime -----------------------------------------------------

    def shutdown(self) -> None:
        """Shuts every secondary tier down; later calls fail with CLOSED."""
        check(self._call(lib.kvtier_manager_shutdown), "kvtier_manager_shutdown")

    def close(self) -> None:
        """Frees the manager (shutting its tiers down first if needed):
        at once, or, while other calls are inside it (other threads, or the
        tier callback that closes it), when the last of them returns.
        Later calls raise ``CLOSED``.  While buffers from `slot` are alive
        it raises ``BufferError`` and frees nothing."""

        def busy(count: int) -> BufferError:
            return BufferError(f"manager: {count} slot buffers taken from it are still alive")

        self._h.close(busy)

    def __enter__(self) -> Manager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
