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

from ._args import explain_items, fill, int_list
from ._calls import PlanBuffers, completion, lookup_answer, positions_array
from ._ffi import ffi, lib
from ._keys import key_array
from ._handle import Handle
from .errors import KvtierError, Status, check, check_completion, encode_str
from .types import Event, LookupAnswer, RequestState, StoreCompletion, StorePlan, event_from_c, struct_dict

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
        policy_c = ffi.new("char[]", encode_str(policy, "policy"))
        options.policy = policy_c
        fill(
            options,
            {
                "capacity": capacity,
                "store_threshold": store_threshold,
                "admission_table_size": admission_table_size,
                "event_capacity": event_capacity,
                "kv_groups": kv_groups,
            },
            "Primary",
        )
        out = ffi.new("kvtier_primary **")
        check(lib.kvtier_primary_new(options, out), "kvtier_primary_new")
        # The C handle is not synchronized: calls from several threads
        # take turns, and `close` waits for the call inside.
        self._h = Handle(out[0], lib.kvtier_primary_free, "primary tier", exclusive=True)
        self._call = self._h.call
        self.capacity = capacity

    @property
    def handle(self) -> Any:
        """The ``kvtier_primary *``; an error once closed.  A call made with
        it directly takes no turn with this object's calls."""
        return self._h.raw()

    # -- requests -----------------------------------------------------

    def request_begin(self, name: str) -> int:
        """Starts request `name` (unique among active requests); its handle."""
        out = ffi.new("kvtier_request_handle *")
        check(self._call(lib.kvtier_primary_request_begin, encode_str(name, "name"), out), "kvtier_primary_request_begin")
        return int(out[0])

    def request_finished(self, request: int) -> None:
        """Ends `request`, committing its accesses."""
        check(self._call(lib.kvtier_primary_request_finished, request), "kvtier_primary_request_finished")

    @contextmanager
    def request(self, name: str) -> Iterator[int]:
        """A request's handle for the ``with`` block, finished at its end."""
        handle = self.request_begin(name)
        try:
            yield handle
        finally:
            if not self._h.closed:
                self.request_finished(handle)

    # -- keys ---------------------------------------------------------

    def lookup(self, keys: Sequence[bytes]) -> LookupAnswer:
        """Looks `keys` up in order, stopping at the first not HIT."""
        array = key_array(keys)
        answer = ffi.new("kvtier_lookup_answer *")
        check(self._call(lib.kvtier_primary_lookup, array.ptr, array.len, answer), "kvtier_primary_lookup")
        return lookup_answer(answer)

    def prepare_load(self, request: int, keys: Sequence[bytes]) -> list[int]:
        """Pins ready `keys` for a load; their slots, in key order."""
        array = key_array(keys)
        slots = ffi.new("uint32_t[]", max(array.len, 1))
        check(
            self._call(lib.kvtier_primary_prepare_load, request, array.ptr, array.len, slots),
            "kvtier_primary_prepare_load",
        )
        return list(ffi.unpack(slots, array.len))

    def complete_load(self, request: int, keys: Sequence[bytes]) -> None:
        """Releases the pins `prepare_load` took on `keys` (also after the
        request finished: then only its own)."""
        array = key_array(keys)
        check(self._call(lib.kvtier_primary_complete_load, request, array.ptr, array.len), "kvtier_primary_complete_load")

    def touch(self, request: int, keys: Sequence[bytes]) -> None:
        """Marks `keys` recently used (the first most recent)."""
        array = key_array(keys)
        check(self._call(lib.kvtier_primary_touch, request, array.ptr, array.len), "kvtier_primary_touch")

    def set_positions(self, request: int, keys: Sequence[bytes], positions: Sequence[int]) -> None:
        """Gives `keys` their end-token positions for `request`."""
        array = key_array(keys)
        positions = int_list(positions, "positions")
        if array.len != len(positions):
            raise KvtierError(Status.INVALID_ARGUMENT, "keys and positions differ in length")
        try:
            c_positions = positions_array(positions)
        except (TypeError, OverflowError) as e:
            raise explain_items(positions, "uint64_t", "positions", e) from None
        check(
            self._call(lib.kvtier_primary_set_positions, request, array.ptr, array.len, c_positions),
            "kvtier_primary_set_positions",
        )

    def prepare_store(self, request: int, keys: Sequence[bytes]) -> StorePlan:
        """Plans storing `keys`: which to write now, where, and what was evicted."""
        array = key_array(keys)
        buffers = PlanBuffers(array.len)
        check(
            self._call(lib.kvtier_primary_prepare_store, request, array.ptr, array.len, buffers.plan),
            "kvtier_primary_prepare_store",
        )
        return buffers.read()

    def request_state(self, request: int) -> RequestState:
        """Where handle `request` stands (`RequestState`); changes nothing."""
        out = ffi.new("kvtier_request_state *")
        check(self._call(lib.kvtier_primary_request_state, request, out), "kvtier_primary_request_state")
        return RequestState(out[0])

    def complete_store(self, request: int, keys: Sequence[bytes], success: bool = True) -> StoreCompletion:
        """Finishes the writes of `keys` that `request` planned.  Raises
        `KeysIgnoredError` (carrying the completion) when a key named was not
        the request's to complete."""
        array = key_array(keys)
        result = ffi.new("kvtier_store_completion *")
        status = self._call(lib.kvtier_primary_complete_store, request, array.ptr, array.len, success, result)
        check_completion(status, "kvtier_primary_complete_store", lambda: completion(result))
        return completion(result)

    def reset(self) -> None:
        """Forgets every key and frees every slot."""
        check(self._call(lib.kvtier_primary_reset), "kvtier_primary_reset")

    # -- observing ----------------------------------------------------

    def take_events(self) -> list[Event]:
        """Every queued event, oldest first (copied)."""
        out: list[Event] = []
        events = ffi.new("kvtier_event[]", 64)
        written = ffi.new("size_t *")
        more = ffi.new("bool *", True)
        while more[0]:
            check(
                self._call(lib.kvtier_primary_take_events, events, 64, written, more),
                "kvtier_primary_take_events",
            )
            out.extend(event_from_c(events[i]) for i in range(written[0]))
        return out

    def read_stats(self) -> dict[str, Any]:
        """The tier's numbers (``kvtier_primary_stats``) by field name."""
        stats = ffi.new("kvtier_primary_stats *")
        stats.struct_size = ffi.sizeof("kvtier_primary_stats")
        check(self._call(lib.kvtier_primary_read_stats, stats), "kvtier_primary_read_stats")
        return struct_dict(stats[0])

    # -- lifetime -----------------------------------------------------

    def close(self) -> None:
        """Frees the tier once the call inside (another thread's) returns;
        later calls raise ``CLOSED``."""
        self._h.close()

    def __enter__(self) -> Primary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
