"""Shared pieces of the primary tier's and the manager's wrappers: the
answer structs they fill, read into Python records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._ffi import ffi
from ._keys import key_buf_bytes as _key_buf
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
        evicted=[_key_buf(e) for e in plan.evicted[0:n_evicted]] if n_evicted else [],
    )


def completion(c_result: Any) -> StoreCompletion:
    """A ``kvtier_store_completion`` as a `StoreCompletion`."""
    return StoreCompletion(
        c_result.ready, c_result.dropped, c_result.ignored, c_result.foreign, c_result.already_ready
    )


def positions_array(positions: Sequence[int]) -> Any:
    """Token positions as a ``uint64_t[]``."""
    return ffi.new("uint64_t[]", list(positions))
