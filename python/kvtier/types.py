"""Values the C API passes in and out: its enumerations as Python enums and
its answer structs as small immutable records."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ._ffi import CONSTANTS, ffi
from ._keys import keys_bytes

__all__ = [
    "LookupResult",
    "MissReason",
    "LookupAnswer",
    "StorePlan",
    "StoreCompletion",
    "EventKind",
    "Medium",
    "Locality",
    "Event",
    "OffloadPolicy",
    "JobDirection",
    "PromotionAnswer",
    "RequestState",
]


class LookupResult(enum.IntEnum):
    """How one key looked up (``KVTIER_LOOKUP_*``)."""

    MISS = CONSTANTS["KVTIER_LOOKUP_MISS"]
    HIT = CONSTANTS["KVTIER_LOOKUP_HIT"]
    HIT_PENDING = CONSTANTS["KVTIER_LOOKUP_HIT_PENDING"]
    RETRY = CONSTANTS["KVTIER_LOOKUP_RETRY"]


class MissReason(enum.IntEnum):
    """Why a lookup answered MISS, or why its prefix ends early
    (``KVTIER_MISS_*``)."""

    NONE = CONSTANTS["KVTIER_MISS_NONE"]
    ABSENT = CONSTANTS["KVTIER_MISS_ABSENT"]
    NO_ROOM = CONSTANTS["KVTIER_MISS_NO_ROOM"]
    TIMED_OUT = CONSTANTS["KVTIER_MISS_TIMED_OUT"]


class EventKind(enum.IntEnum):
    """What happened to an event's keys (``KVTIER_EVENT_*``)."""

    STORED = CONSTANTS["KVTIER_EVENT_STORED"]
    REMOVED = CONSTANTS["KVTIER_EVENT_REMOVED"]
    CLEARED = CONSTANTS["KVTIER_EVENT_CLEARED"]


class Medium(enum.IntEnum):
    """Where a tier keeps blocks (``KVTIER_MEDIUM_*``)."""

    ANY = CONSTANTS["KVTIER_MEDIUM_ANY"]
    CPU = CONSTANTS["KVTIER_MEDIUM_CPU"]
    STORAGE = CONSTANTS["KVTIER_MEDIUM_STORAGE"]


class Locality(enum.IntEnum):
    """How far a tier is (``KVTIER_LOCALITY_*``)."""

    ANY = CONSTANTS["KVTIER_LOCALITY_ANY"]
    LOCAL = CONSTANTS["KVTIER_LOCALITY_LOCAL"]
    REMOTE = CONSTANTS["KVTIER_LOCALITY_REMOTE"]


class RequestState(enum.IntEnum):
    """Where a request handle stands (``KVTIER_REQUEST_STATE_*``): never
    issued by the object asked (a mistyped handle), active, finished but
    kept by its stores in flight (``FINISHING``), finished with only pins
    its loads took still held (``LOADS_PINNED``: only ``complete_load`` of
    those takes it), or ``GONE``."""

    NEVER_ISSUED = CONSTANTS["KVTIER_REQUEST_STATE_NEVER_ISSUED"]
    ACTIVE = CONSTANTS["KVTIER_REQUEST_STATE_ACTIVE"]
    FINISHING = CONSTANTS["KVTIER_REQUEST_STATE_FINISHING"]
    LOADS_PINNED = CONSTANTS["KVTIER_REQUEST_STATE_LOADS_PINNED"]
    GONE = CONSTANTS["KVTIER_REQUEST_STATE_GONE"]


class OffloadPolicy(enum.IntEnum):
    """Which blocks of a request cascade to a tier (``KVTIER_OFFLOAD_*``)."""

    BLOCK_LEVEL = CONSTANTS["KVTIER_OFFLOAD_BLOCK_LEVEL"]
    REQUEST_LEVEL = CONSTANTS["KVTIER_OFFLOAD_REQUEST_LEVEL"]


class JobDirection(enum.IntEnum):
    """Which way a tier job copies (``KVTIER_JOB_*``)."""

    STORE = CONSTANTS["KVTIER_JOB_STORE"]
    LOAD = CONSTANTS["KVTIER_JOB_LOAD"]


class PromotionAnswer(enum.IntEnum):
    """What a lookup that starts a promotion answers (``KVTIER_PROMOTION_ANSWER_*``)."""

    RETRY = CONSTANTS["KVTIER_PROMOTION_ANSWER_RETRY"]
    HIT_PENDING = CONSTANTS["KVTIER_PROMOTION_ANSWER_HIT_PENDING"]


@dataclass(frozen=True)
class LookupAnswer:
    """A batched lookup's answer: `hits` leading keys are ready now,
    `pending` more are on their way before `end`, where the prefix ends
    (`reason` says why, when it ends before the last key).  `stop` is how
    key `hits` answered (HIT when every key is a hit).  Nothing to wait
    for exactly when `pending` is 0: load `hits` keys, compute the rest."""

    hits: int
    stop: LookupResult
    reason: MissReason = MissReason.NONE
    pending: int = 0
    end: int = 0

    @property
    def settled(self) -> bool:
        """Whether nothing is on its way (`pending` is 0)."""
        return self.pending == 0


@dataclass(frozen=True)
class StorePlan:
    """What a ``prepare_store`` planned: the positions (in the keys passed)
    and slots of the keys to write now, and the keys evicted to make room.
    A refused store has `refused` set and nothing else."""

    store_indices: list[int]
    slots: list[int]
    evicted: list[bytes]
    refused: bool = False


@dataclass(frozen=True)
class StoreCompletion:
    """What a ``complete_store`` did with the keys it was given."""

    ready: int = 0
    dropped: int = 0
    ignored: int = 0
    foreign: int = 0
    already_ready: int = 0


@dataclass(frozen=True)
class Event:
    """Consecutive cache events of one tier and kind (tier 0 is the primary)."""

    tier: int
    kind: EventKind
    medium: Medium
    locality: Locality
    keys: list[bytes] = field(default_factory=list)


def event_from_c(c_event: Any) -> Event:
    """A copy of one ``kvtier_event``."""
    n = c_event.len
    keys = keys_bytes(c_event.keys, n)
    return Event(
        tier=c_event.tier,
        kind=EventKind(c_event.kind),
        medium=Medium(c_event.medium),
        locality=Locality(c_event.locality),
        keys=keys,
    )


def struct_dict(c_struct: Any) -> dict[str, Any]:
    """The fields of a filled stats struct, ``struct_size`` left out;
    fixed-size arrays as lists."""
    out: dict[str, Any] = {}
    for name, f in ffi.typeof(c_struct).item.fields if ffi.typeof(c_struct).kind == "pointer" else ffi.typeof(c_struct).fields:
        if name == "struct_size":
            continue
        value = getattr(c_struct, name)
        if f.type.kind == "array":
            value = list(value)
        out[name] = value
    return out
