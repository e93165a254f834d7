"""What a manager tells: its events (taken, or delivered to a callback),
request reports, statistics, Prometheus text, error log and wake-up
descriptor.  `ManagerObserving` is a base of `Manager`, which gives it
``_call`` (calls on the handle) and ``_callbacks``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from ._calls import take_events
from ._ffi import CONSTANTS, ffi, lib
from .callbacks import ManagerCallbacks, RequestReport
from .errors import Status, check
from .types import Event, EventKind, Locality, Medium, struct_dict

__all__ = ["ManagerObserving", "TierStat"]

class TierStat(NamedTuple):
    """One statistic of a tier: its value, and whether it is a counter
    (cumulative, never decreasing) or a gauge (a current value)."""

    value: float
    counter: bool


class ManagerObserving:
    """The observing calls of `Manager`."""

    _call: Callable[..., Any]
    _callbacks: ManagerCallbacks
    _local_only: Callable[[str], None]

    def take_events(self) -> list[Event]:
        """Every queued event of every tier, oldest first (copied)."""
        self._local_only("take_events")
        return [
            Event(tier, EventKind(kind), Medium(medium), Locality(locality), keys)
            for tier, kind, medium, locality, keys in take_events(self._call)
        ]

    def events_queued(self) -> tuple[int, int]:
        """How many events (batches of one tier and kind) wait to be taken,
        and how many keys they hold (``kvtier_manager_events_queued``)."""
        self._local_only("events_queued")
        events = ffi.new("size_t *")
        keys = ffi.new("size_t *")
        check(self._call(lib.kvtier_manager_events_queued, events, keys), "kvtier_manager_events_queued")
        return int(events[0]), int(keys[0])

    def set_event_callback(self, callback: Callable[[Event], Any] | None, *, also_queue: bool = False) -> None:
        """Calls ``callback(event)`` with each `Event` as it happens, at the
        end of the manager call that caused it, on that call's thread;
        None removes it.  With `also_queue` events still queue for
        `take_events` too; without, events queued earlier are delivered
        now.  The callback runs with the manager's lock held: a manager
        call made from it fails (``REENTRANT``).  An exception it raises is
        kept in `callback_errors` (see `kvtier.callbacks`)."""
        self._set_callback("event", callback, also_queue)

    def set_request_report_callback(self, callback: Callable[[RequestReport], Any] | None) -> None:
        """Calls ``callback(report)`` with a `RequestReport` for each request
        the manager lets go from now on (after `request_finished`, once its
        stores and promotions are done); None removes it.  As the event
        callback: the manager's lock held, exceptions kept in
        `callback_errors`."""
        self._set_callback("report", callback, False)

    def _set_callback(self, kind: str, callback: Any, also_queue: bool) -> None:
        self._local_only("set_event_callback" if kind == "event" else "set_request_report_callback")
        if callback is not None and not callable(callback):
            raise TypeError(f"callback: expected a callable or None, got {type(callback).__name__}")
        callbacks = self._callbacks
        if callback is None:
            trampoline = ffi.NULL
        elif kind == "event":
            trampoline = callbacks.event_trampoline(callback)
        else:
            trampoline = callbacks.report_trampoline(callback)
        if kind == "event":
            check(
                self._call(lib.kvtier_manager_set_event_callback, trampoline, ffi.NULL, also_queue),
                "kvtier_manager_set_event_callback",
            )
        else:
            check(
                self._call(lib.kvtier_manager_set_request_report_callback, trampoline, ffi.NULL),
                "kvtier_manager_set_request_report_callback",
            )
        callbacks.retire(getattr(callbacks, kind))
        setattr(callbacks, kind, trampoline if callback is not None else None)

    @property
    def callback_errors(self) -> deque[BaseException]:
        """The latest exceptions (up to 64, oldest first) the event and
        report callbacks raised; clear it at will."""
        return self._callbacks.errors

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
        return self._text(lib.kvtier_manager_metrics_prometheus, "kvtier_manager_metrics_prometheus", 1 << 14, 1024)

    @property
    def metrics_address(self) -> str | None:
        """Where the ``/metrics`` endpoint (with ``/healthz`` and
        ``/readyz``) listens, as ``"127.0.0.1:40123"`` or ``"[::1]:40123"``
        (the port picked for port 0); None for a manager without one
        (none configured, or connected to kvtierd)."""
        written = ffi.new("size_t *")
        text = ffi.new("char[]", 64)
        status = self._call(lib.kvtier_manager_metrics_address, text, 64, written)
        if status == Status.NOT_FOUND:
            return None
        check(status, "kvtier_manager_metrics_address")
        return ffi.string(text).decode()

    def readiness(self) -> list[str]:
        """Why the manager or one of its tiers cannot be used now, one
        reason each (``"tier 1 (redis): circuit breaker open ..."``); empty
        when it is ready.  What ``/readyz`` serves.  ``UNSUPPORTED`` on a
        connected manager."""
        return self._text(lib.kvtier_manager_readiness, "kvtier_manager_readiness", 256, 256).splitlines()

    def _text(self, fn: Any, name: str, capacity: int, slack: int) -> str:
        """The text C call `fn` writes under the buffer idiom, asked again
        with the size it needs plus `slack` (the text may grow between
        calls) while the buffer is too small."""
        written = ffi.new("size_t *")
        while True:
            text = ffi.new("char[]", capacity)
            status = self._call(fn, text, capacity, written)
            if status == Status.BUFFER_TOO_SMALL:
                capacity = int(written[0]) + slack
                continue
            check(status, name)
            return ffi.string(text).decode("utf-8", "replace")

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

    def wake_fd(self) -> int:
        """The descriptor that becomes readable when a tier finishes a job."""
        self._local_only("wake_fd")
        fd = ffi.new("int *")
        check(self._call(lib.kvtier_manager_wake_fd, fd), "kvtier_manager_wake_fd")
        return int(fd[0])

