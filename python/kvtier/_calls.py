"""Shared pieces of the primary tier's and the manager's wrappers: the
answer structs they fill, read into Python records, and the manager's
events taken in batches."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ._ffi import ffi, lib
from ._keys import key_bufs_bytes, keys_bytes
from .errors import check
from .types import LookupAnswer, LookupResult, MissReason, StoreCompletion, StorePlan

_RESULTS = {int(r): r for r in LookupResult}
_REASONS = {int(r): r for r in MissReason}


def lookup_answer(c_answer: Any) -> LookupAnswer:
    """A ``kvtier_lookup_answer`` as a `LookupAnswer`."""
    return LookupAnswer(
        c_answer.hits,
        _RESULTS[c_answer.stop],
        _REASONS[c_answer.reason],
        pending=c_answer.pending,
        end=c_answer.end,
    )


class PlanBuffers:
    """The arrays a ``kvtier_store_plan`` points at, for `n` keys."""

    __slots__ = ("plan", "_indices", "_slots", "_evicted")

    def __init__(self, n: int):
        self.plan = ffi.new("kvtier_store_plan *")
        if n:
            self._indices = ffi.new("size_t[]", n)
            self._slots = ffi.new("uint32_t[]", n)
            self._evicted = ffi.new("kvtier_key_buf[]", n)
            self.plan.store_indices = self._indices
            self.plan.slots = self._slots
            self.plan.evicted = self._evicted

    def read(self) -> StorePlan:
        return read_plan(self.plan)


def read_plan(plan: Any) -> StorePlan:
    """A filled ``kvtier_store_plan *`` as a `StorePlan`."""
    if plan.refused:
        return StorePlan([], [], [], refused=True)
    n_store, n_evicted = plan.store_count, plan.evicted_count
    return StorePlan(
        store_indices=ffi.unpack(plan.store_indices, n_store),
        slots=ffi.unpack(plan.slots, n_store),
        evicted=key_bufs_bytes(plan.evicted, n_evicted),
    )


def completion(c_result: Any) -> StoreCompletion:
    """A ``kvtier_store_completion`` as a `StoreCompletion`."""
    return StoreCompletion(
        c_result.ready, c_result.dropped, c_result.ignored, c_result.foreign, c_result.already_ready
    )


def positions_array(positions: Sequence[int]) -> Any:
    """Token positions as a ``uint64_t[]``."""
    return ffi.new("uint64_t[]", list(positions))


EVENT_BATCH = 64  # events read per call


class EventBuffers:
    """What one take of a manager's events passes to the C API: the
    events array, the key buffer their keys live in until its next take,
    and the two outputs.  Pooled as the scratches are (`_event_buffers`):
    a take has its own until it returns, its keys copied out by then."""

    __slots__ = ("events", "keys", "written", "more")

    def __init__(self) -> None:
        self.events = ffi.new("kvtier_event[]", EVENT_BATCH)
        made = ffi.new("kvtier_event_buffer **")
        check(lib.kvtier_event_buffer_new(made), "kvtier_event_buffer_new")
        self.keys = ffi.gc(made[0], lib.kvtier_event_buffer_free)
        self.written = ffi.new("size_t *")
        self.more = ffi.new("bool *")


_event_buffers: deque[EventBuffers] = deque()


def take_events(call: Callable[..., Any]) -> list[tuple[int, int, int, int, list[bytes]]]:
    """Every queued event of a manager, oldest first, as ``(tier, kind,
    medium, locality, keys)`` (copies); `call` is the manager's guarded
    call (`Handle.call`)."""
    try:
        buffers = _event_buffers.pop()
    except IndexError:
        buffers = EventBuffers()
    try:
        out = []
        events, written, more = buffers.events, buffers.written, buffers.more
        more[0] = True
        while more[0]:
            check(
                call(lib.kvtier_manager_take_events, buffers.keys, events, EVENT_BATCH, written, more),
                "kvtier_manager_take_events",
            )
            for e in events[0 : written[0]]:
                out.append((e.tier, e.kind, e.medium, e.locality, keys_bytes(e.keys, e.len)))
        return out
    finally:
        _event_buffers.append(buffers)
