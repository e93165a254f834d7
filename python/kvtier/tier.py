"""Secondary tiers written in Python, plugged into a `Manager` through the
C vtable (``kvtier_tier_vtable``), exactly as a C or C++ tier is.

Subclass `Tier` and implement `lookup`, `submit_store` and `submit_load`
(and `poll_finished` to report jobs, or report them from any thread with
`Manager.complete_job`); the other methods have do-nothing defaults.  The
manager calls them with its lock held, from whichever thread called the
manager; they must not call the manager back (except `complete_job`).
An exception raised by a method is caught at the boundary: the manager
counts it as a failed callback of the tier (``callback_errors``, its error
log) and the exception is kept in `Tier.errors`.
"""

from __future__ import annotations

import logging
import operator
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._ffi import CONSTANTS, ffi, lib
from ._keys import MAX_KEY_LEN, key_array, key_buffer, key_bytes, keys_bytes
from .errors import Status, encode_str
from .types import EventKind, JobDirection, Locality, LookupResult, Medium, OffloadPolicy

__all__ = ["Tier", "Job", "JobResult", "TierRequest"]

_log = logging.getLogger("kvtier.tier")

_OK = int(Status.OK)
_FAILED = int(Status.TIER)
_COUNTER = CONSTANTS["KVTIER_STAT_COUNTER"]
_GAUGE = CONSTANTS["KVTIER_STAT_GAUGE"]
# A job id kvtier never gives (ids count up from 0): a result that names no
# job goes with it, and the library counts a made-up job.
_NO_JOB = (1 << 64) - 1
# One empty key: a result that cannot be written lists it as the keys that
# arrived, so the library refuses the result (and fails its job).
_INVALID_KEYS = ffi.new("kvtier_key[]", 1)


def _write_result(entry: Any, job_id: int, success: bool, keys: Any, n: int, moved: int, duration: int) -> None:
    entry.id = job_id
    entry.success = success
    entry.succeeded_keys = keys
    entry.succeeded_len = n
    entry.bytes = moved
    entry.duration_ns = duration


@dataclass(frozen=True)
class TierRequest:
    """A request as a tier sees it: the name the engine gave it and its
    string parameters."""

    name: str
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """A transfer handed to a tier: `keys` and their primary `slots`
    (co-indexed).  A STORE job reads the (pinned) slots into the tier; a
    LOAD job writes the tier's blocks into the (write pending) slots.
    Report it exactly once (`Tier.poll_finished` or
    `Manager.complete_job`)."""

    id: int
    direction: JobDirection
    keys: list[bytes]
    slots: list[int]
    request: TierRequest


@dataclass(frozen=True)
class JobResult:
    """A finished job: `success` for the whole job; for a failed load,
    `succeeded_keys` lists the keys that did arrive."""

    id: int
    success: bool = True
    succeeded_keys: Sequence[bytes] | None = None
    bytes: int = 0
    duration_ns: int = 0


class Tier:
    """Base of a secondary tier written in Python.

    Class attributes: `name` (for stats and errors), `medium` and
    `locality` (for request tier filters and events).
    """

    name: str = "python"
    medium: Medium = Medium.ANY
    locality: Locality = Locality.ANY

    def __init__(self) -> None:
        #: Exceptions raised by this tier's methods, caught at the boundary.
        self.errors: list[BaseException] = []

    # Required.
    def lookup(self, key: bytes, request: TierRequest) -> LookupResult:
        """MISS, HIT or RETRY for `key`."""
        raise NotImplementedError

    def submit_store(self, job: Job) -> None:
        """Starts copying the job's slots into the tier."""
        raise NotImplementedError

    def submit_load(self, job: Job) -> None:
        """Starts copying the tier's blocks into the job's slots."""
        raise NotImplementedError

    # Optional.
    def poll_finished(self) -> Iterable[JobResult]:
        """Jobs finished since the last poll."""
        return ()

    def touch(self, keys: Sequence[bytes], request: TierRequest) -> None:
        """Marks `keys` recently used."""

    def on_new_request(self, request: TierRequest) -> OffloadPolicy:
        """A request starts: which of its blocks the tier wants."""
        return OffloadPolicy.BLOCK_LEVEL

    def on_request_finished(self, request: TierRequest) -> None:
        """A request finished: no later call names it."""

    def on_schedule_end(self) -> None:
        """A scheduler step ended."""

    def has_pending_work(self) -> bool:
        """Whether the tier has work outstanding."""
        return False

    def drain(self) -> None:
        """Blocks until none of the tier's copies touches the slots."""

    def stats(self) -> Mapping[str, float | tuple[float, bool]]:
        """The tier's statistics: name -> value (a gauge) or (value,
        is_counter).  Counters are cumulative and never decrease."""
        return {}

    def take_events(self) -> Iterable[tuple[EventKind, bytes]]:
        """The tier's own cache events since the last take."""
        return ()

    def shutdown(self) -> None:
        """Stops the tier: afterwards it no longer touches the slots."""


_live: set[TierAdapter] = set()  # adapters the library still holds
_NO_TOUCH = Tier.touch
_KEEP_REQUESTS = 4096
_DIRECTIONS = {int(d): d for d in JobDirection}


class TierAdapter:
    """A `Tier` behind a ``kvtier_tier_vtable`` (one per registration)."""

    def __init__(self, tier: Tier):
        self.tier = tier
        self.index = 0
        self._handle = ffi.new_handle(self)
        self._name = ffi.new("char[]", encode_str(tier.name, "tier name"))
        self._finished: deque[JobResult] = deque()
        self._events: deque[tuple[EventKind, bytes]] = deque()
        self._keep: list[Any] = []  # results' key arrays, valid until the next callback
        self._requests: dict[bytes, TierRequest] = {}  # requests without parameters, by name
        vtable = ffi.new("kvtier_tier_vtable *", lib.kvtier_tier_vtable_default())
        vtable.user_data = self._handle
        vtable.name = self._name
        vtable.medium = int(tier.medium)
        vtable.locality = int(tier.locality)
        fields = dict(ffi.typeof("kvtier_tier_vtable").fields)
        self._callbacks = []
        for entry in (
            "lookup",
            "submit_store",
            "submit_load",
            "poll_finished",
            "touch",
            "on_new_request",
            "on_request_finished",
            "on_schedule_end",
            "has_pending_work",
            "drain",
            "stats",
            "shutdown",
            "destroy",
            "take_events",
        ):
            method = getattr(self, "_" + entry)
            error = None if entry == "destroy" else _FAILED
            callback = ffi.callback(fields[entry].type, method, error=error)
            self._callbacks.append(callback)
            setattr(vtable, entry, callback)
        self.vtable = vtable
        _live.add(self)

    def release(self) -> None:
        """Forgets the adapter (after `destroy`, or a failed registration)."""
        _live.discard(self)

    # -- helpers ------------------------------------------------------

    def _failed(self, what: str, error: BaseException) -> int:
        self.tier.errors.append(error)
        _log.warning("tier %s: %s raised %r", self.tier.name, what, error)
        return _FAILED

    def _request(self, c_request: Any) -> TierRequest:
        """The request of a callback.  One without parameters is only its
        name: the same `TierRequest` serves every callback naming it (kept
        by name, at most `_KEEP_REQUESTS` of them)."""
        raw = ffi.buffer(c_request.id, c_request.id_len)[:]
        if not c_request.params_len:
            request = self._requests.get(raw)
            if request is None:
                if len(self._requests) >= _KEEP_REQUESTS:
                    self._requests.clear()
                request = self._requests[raw] = TierRequest(raw.decode("utf-8", "replace"))
            return request
        params = {
            ffi.string(c_request.params[i].key).decode(): ffi.string(c_request.params[i].value).decode()
            for i in range(c_request.params_len)
        }
        return TierRequest(raw.decode("utf-8", "replace"), params)

    def _job(self, c_job: Any) -> Job:
        n = c_job.len
        direction = _DIRECTIONS.get(c_job.direction)
        return Job(
            id=int(c_job.id),
            direction=direction if direction is not None else JobDirection(c_job.direction),
            keys=keys_bytes(c_job.keys, n),
            slots=ffi.unpack(c_job.slots, n) if n else [],
            request=self._request(c_job.request),
        )

    # -- the callbacks ------------------------------------------------

    def _lookup(self, _ud: Any, key: Any, request: Any, answer: Any) -> int:
        try:
            answer[0] = int(self.tier.lookup(key_bytes(key), self._request(request)))
            return _OK
        except BaseException as e:
            return self._failed("lookup", e)

    def _submit_store(self, _ud: Any, job: Any) -> int:
        try:
            self.tier.submit_store(self._job(job))
            return _OK
        except BaseException as e:
            return self._failed("submit_store", e)

    def _submit_load(self, _ud: Any, job: Any) -> int:
        try:
            self.tier.submit_load(self._job(job))
            return _OK
        except BaseException as e:
            return self._failed("submit_load", e)

    def _poll_finished(self, _ud: Any, out: Any, capacity: int, written: Any) -> int:
        try:
            self._keep = []
            if not self._finished:
                self._finished.extend(self.tier.poll_finished())
            n = 0
            while self._finished and n < capacity:
                self._result(out[n], self._finished.popleft())
                n += 1
            written[0] = n
            return _OK
        except BaseException as e:
            written[0] = 0
            return self._failed("poll_finished", e)

    def _result(self, entry: Any, result: Any) -> None:
        """Writes `result` to `entry`.  One that cannot be written as it is
        still reaches the library, which counts it as the tier's bug: with
        an id that is no job's (a made-up job: ``tier_bugs``) when its id is
        not a job id, else as a failed job whose list of arrived keys holds
        one empty key (an invalid result: ``callback_errors``)."""
        try:
            job_id = operator.index(result.id)
        except BaseException as e:
            job_id = e
        if not isinstance(job_id, int) or not 0 <= job_id < _NO_JOB:
            self._failed("poll_finished", TypeError(f"a job result {result!r} without a job id"))
            _write_result(entry, _NO_JOB, False, ffi.NULL, 0, 0, 0)
            return
        try:
            keys = None
            if result.succeeded_keys is not None:
                keys = key_array(result.succeeded_keys)
            moved, duration = int(result.bytes or 0), int(result.duration_ns or 0)
            if not (0 <= moved < 1 << 64 and 0 <= duration < 1 << 64):
                raise ValueError(f"bytes {moved} or duration_ns {duration} out of range 0..2**64")
            success = bool(result.success)
        except BaseException as e:
            self._failed("poll_finished", e)
            self._keep.append(_INVALID_KEYS)
            _write_result(entry, job_id, False, _INVALID_KEYS, 1, 0, 0)
            return
        if keys is not None:
            self._keep.append(keys)
            _write_result(entry, job_id, success, keys.ptr, keys.len, moved, duration)
        else:
            _write_result(entry, job_id, success, ffi.NULL, 0, moved, duration)

    def _touch(self, _ud: Any, keys: Any, n: int, request: Any) -> int:
        try:
            touch = self.tier.touch
            # `Tier`'s own no-op (asked at each call: a tier may change its
            # method later) needs no copy of the keys.
            if getattr(touch, "__func__", None) is not _NO_TOUCH:
                touch(keys_bytes(keys, n), self._request(request))
            return _OK
        except BaseException as e:
            return self._failed("touch", e)

    def _on_new_request(self, _ud: Any, request: Any, policy: Any) -> int:
        try:
            policy[0] = int(self.tier.on_new_request(self._request(request)))
            return _OK
        except BaseException as e:
            return self._failed("on_new_request", e)

    def _on_request_finished(self, _ud: Any, request: Any) -> int:
        try:
            self.tier.on_request_finished(self._request(request))
            return _OK
        except BaseException as e:
            return self._failed("on_request_finished", e)

    def _on_schedule_end(self, _ud: Any) -> int:
        try:
            self.tier.on_schedule_end()
            return _OK
        except BaseException as e:
            return self._failed("on_schedule_end", e)

    def _has_pending_work(self, _ud: Any, pending: Any) -> int:
        try:
            pending[0] = bool(self.tier.has_pending_work()) or bool(self._finished)
            return _OK
        except BaseException as e:
            return self._failed("has_pending_work", e)

    def _drain(self, _ud: Any) -> int:
        try:
            self.tier.drain()
            return _OK
        except BaseException as e:
            return self._failed("drain", e)

    def _stats(self, _ud: Any, out: Any, capacity: int, written: Any) -> int:
        try:
            stats = list(self.tier.stats().items())[:capacity]
            for i, (name, value) in enumerate(stats):
                value, counter = value if isinstance(value, tuple) else (value, False)
                encoded = encode_str(name, "stat name")[: ffi.sizeof(out[i].name) - 1]
                out[i].name = encoded
                out[i].kind = _COUNTER if counter else _GAUGE
                out[i].value = float(value)
            written[0] = len(stats)
            return _OK
        except BaseException as e:
            written[0] = 0
            return self._failed("stats", e)

    def _shutdown(self, _ud: Any) -> int:
        try:
            self.tier.shutdown()
            return _OK
        except BaseException as e:
            return self._failed("shutdown", e)

    def _destroy(self, _ud: Any) -> None:
        self.release()

    def _take_events(self, _ud: Any, out: Any, capacity: int, written: Any) -> int:
        try:
            if not self._events:
                self._events.extend(self.tier.take_events())
            n = 0
            while self._events and n < capacity:
                self._event(out[n], self._events.popleft())
                n += 1
            written[0] = n
            return _OK
        except BaseException as e:
            written[0] = 0
            return self._failed("take_events", e)

    def _event(self, entry: Any, event: Any) -> None:
        """Writes `event` to `entry`, never past its 64 key bytes: a key of
        another length goes with its length and at most 64 of its bytes (the
        library refuses it: ``events_rejected``); a key that is not
        bytes-like goes as an empty key (refused alike) and a kind that is
        no number as -1 (an unknown kind: ``callback_errors``)."""
        try:
            kind, key = event
        except BaseException as e:
            self._failed("take_events", TypeError(f"an event {event!r}, not a (kind, key) pair: {e}"))
            kind, key = -1, b""
        try:
            entry.kind = int(kind)
        except BaseException as e:
            self._failed("take_events", e)
            entry.kind = -1
        try:
            data, length = key_buffer(key, "event key")
        except TypeError as e:
            self._failed("take_events", e)
            data, length = b"", 0
        entry.key.len = length
        ffi.memmove(entry.key.bytes, data, min(length, MAX_KEY_LEN))
