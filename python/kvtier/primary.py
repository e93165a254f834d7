"""The primary tier on its own (``kvtier_primary_*``): slots in host
memory with LRU or ARC eviction, written and read by one engine thread.

Every call needs exclusive access (the C handle is not synchronized): use
one `Primary` from one thread at a time.  A `Manager` holds a primary tier
of its own; this class is for engines that manage a primary tier without
secondary tiers, and for tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._calls import PlanBuffers, completion, lookup_answer, positions_array
from ._ffi import ffi, lib
from ._keys import key_array
from .errors import KvtierError, Status, check
from .types import Event, LookupAnswer, StoreCompletion, StorePlan, event_from_c, struct_dict

__all__ = ["Primary"]


class Primary:
    """A primary tier of `capacity` slots (see ``kvtier_primary_new``).

    `policy` is ``"lru"`` or ``"arc"``; a key is stored at its
    `store_threshold`-th offer (0 or 1: at once), offers remembered in a
    table of `admission_table_size` keys; `event_capacity` bounds the event
    buffer (0: no events); `kv_groups` says keys end with a 4-byte
    big-endian KV-group index (vLLM's keys).

    Requests: `request_begin` gives a handle (an int) that the request's
    calls take; `request` does the same as a context manager that finishes
    the request on exit.
    """

    def __init__(
        self,
        capacity: int = 1024,
        *,
        policy: str = "lru",
        store_threshold: int = 0,
        admission_table_size: int = 64000,
        event_capacity: int = 0,
        kv_groups: bool = False,
    ):
        options = ffi.new("kvtier_primary_options *", lib.kvtier_primary_options_default())
        policy_c = ffi.new("char[]", policy.encode())
        options.capacity = capacity
        options.policy = policy_c
        options.store_threshold = store_threshold
        options.admission_table_size = admission_table_size
        options.event_capacity = event_capacity
        options.kv_groups = kv_groups
        out = ffi.new("kvtier_primary **")
        check(lib.kvtier_primary_new(options, out), "kvtier_primary_new")
        self._primary: Any = out[0]
        self.capacity = capacity
        self._answer = ffi.new("kvtier_lookup_answer *")
        self._events = ffi.new("kvtier_event[]", 64)

    @property
    def handle(self) -> Any:
        """The ``kvtier_primary *``; an error once closed."""
        if self._primary is None:
            raise KvtierError(Status.CLOSED, "the primary tier is closed")
        return self._primary

    # -- requests -----------------------------------------------------

    def request_begin(self, name: str) -> int:
        """Starts request `name` (unique among active requests); its handle."""
        out = ffi.new("kvtier_request_handle *")
        check(lib.kvtier_primary_request_begin(self.handle, name.encode(), out), "kvtier_primary_request_begin")
        return int(out[0])

    def request_finished(self, request: int) -> None:
        """Ends `request`, committing its accesses."""
        check(lib.kvtier_primary_request_finished(self.handle, request), "kvtier_primary_request_finished")

    @contextmanager
    def request(self, name: str) -> Iterator[int]:
        """A request's handle for the ``with`` block, finished at its end."""
        handle = self.request_begin(name)
        try:
            yield handle
        finally:
            if self._primary is not None:
                self.request_finished(handle)

    # -- keys ---------------------------------------------------------

    def lookup(self, keys: Sequence[bytes]) -> LookupAnswer:
        """Looks `keys` up in order, stopping at the first not HIT."""
        array = key_array(keys)
        check(lib.kvtier_primary_lookup(self.handle, array.ptr, array.len, self._answer), "kvtier_primary_lookup")
        return lookup_answer(self._answer)

    def prepare_load(self, request: int, keys: Sequence[bytes]) -> list[int]:
        """Pins ready `keys` for a load; their slots, in key order."""
        array = key_array(keys)
        slots = ffi.new("uint32_t[]", max(len(keys), 1))
        check(
            lib.kvtier_primary_prepare_load(self.handle, request, array.ptr, array.len, slots),
            "kvtier_primary_prepare_load",
        )
        return list(ffi.unpack(slots, len(keys)))

    def complete_load(self, request: int, keys: Sequence[bytes]) -> None:
        """Releases the pins `prepare_load` took on `keys` (also after the
        request finished: then only its own)."""
        array = key_array(keys)
        check(lib.kvtier_primary_complete_load(self.handle, request, array.ptr, array.len), "kvtier_primary_complete_load")

    def touch(self, request: int, keys: Sequence[bytes]) -> None:
        """Marks `keys` recently used (the first most recent)."""
        array = key_array(keys)
        check(lib.kvtier_primary_touch(self.handle, request, array.ptr, array.len), "kvtier_primary_touch")

    def set_positions(self, request: int, keys: Sequence[bytes], positions: Sequence[int]) -> None:
        """Gives `keys` their end-token positions for `request`."""
        if len(keys) != len(positions):
            raise KvtierError(Status.INVALID_ARGUMENT, "keys and positions differ in length")
        array = key_array(keys)
        check(
            lib.kvtier_primary_set_positions(self.handle, request, array.ptr, array.len, positions_array(positions)),
            "kvtier_primary_set_positions",
        )

    def prepare_store(self, request: int, keys: Sequence[bytes]) -> StorePlan:
        """Plans storing `keys`: which to write now, where, and what was evicted."""
        array = key_array(keys)
        buffers = PlanBuffers(len(keys))
        check(
            lib.kvtier_primary_prepare_store(self.handle, request, array.ptr, array.len, buffers.plan),
            "kvtier_primary_prepare_store",
        )
        return buffers.read()

    def complete_store(self, request: int, keys: Sequence[bytes], success: bool = True) -> StoreCompletion:
        """Finishes the writes of `keys` that `request` planned."""
        array = key_array(keys)
        result = ffi.new("kvtier_store_completion *")
        check(
            lib.kvtier_primary_complete_store(self.handle, request, array.ptr, array.len, success, result),
            "kvtier_primary_complete_store",
        )
        return completion(result)

    def reset(self) -> None:
        """Forgets every key and frees every slot."""
        check(lib.kvtier_primary_reset(self.handle), "kvtier_primary_reset")

    # -- observing ----------------------------------------------------

    def take_events(self) -> list[Event]:
        """Every queued event, oldest first (copied)."""
        out: list[Event] = []
        written = ffi.new("size_t *")
        more = ffi.new("bool *", True)
        while more[0]:
            check(
                lib.kvtier_primary_take_events(self.handle, self._events, 64, written, more),
                "kvtier_primary_take_events",
            )
            out.extend(event_from_c(self._events[i]) for i in range(written[0]))
        return out

    def read_stats(self) -> dict[str, Any]:
        """The tier's numbers (``kvtier_primary_stats``) by field name."""
        stats = ffi.new("kvtier_primary_stats *")
        stats.struct_size = ffi.sizeof("kvtier_primary_stats")
        check(lib.kvtier_primary_read_stats(self.handle, stats), "kvtier_primary_read_stats")
        return struct_dict(stats[0])

    # -- lifetime -----------------------------------------------------

    def close(self) -> None:
        """Frees the tier (later calls raise)."""
        primary, self._primary = self._primary, None
        if primary is not None:
            lib.kvtier_primary_free(primary)

    def __enter__(self) -> Primary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_primary", None) is not None:
            self.close()
