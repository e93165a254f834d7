"""Python callbacks the library calls: log records (process-wide), and a
manager's events and request reports (`Manager.set_event_callback`,
`Manager.set_request_report_callback`).

The rule for exceptions, the same for all three: an exception a callback
raises is caught where C called it and never reaches the library; the
callback stays installed; the exception is logged (Python's ``logging``,
logger ``kvtier.callbacks``, with its traceback) and kept, the latest 64
of them: in `Manager.callback_errors` for a manager's callbacks, in
`log_callback_errors` for the log callback.  It is not raised from the
manager call that ran the callback: that call's work is done by then, and
its answer (a store plan, a lookup) must reach the caller, or slots would
stay pinned or write-pending with nobody knowing.

Every installed callback, and the C trampoline around it, is kept alive
as long as the library may call it: until it is replaced or removed, and
a manager's until the manager is freed.
"""

from __future__ import annotations

import atexit
import enum
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._ffi import ffi, lib
from .errors import check
from .types import Event, event_from_c

__all__ = [
    "LogLevel",
    "RequestReport",
    "set_log_callback",
    "log_to_logging",
    "log_callback_errors",
]

_log = logging.getLogger("kvtier.callbacks")
_KEPT_ERRORS = 64


class LogLevel(enum.IntEnum):
    """Severity of a log record (``KVTIER_LOG_LEVEL_*``)."""

    OFF = lib.KVTIER_LOG_LEVEL_OFF
    ERROR = lib.KVTIER_LOG_LEVEL_ERROR
    WARN = lib.KVTIER_LOG_LEVEL_WARN
    INFO = lib.KVTIER_LOG_LEVEL_INFO
    DEBUG = lib.KVTIER_LOG_LEVEL_DEBUG
    TRACE = lib.KVTIER_LOG_LEVEL_TRACE


@dataclass(frozen=True)
class RequestReport:
    """What happened to one finished request (``kvtier_request_report``;
    docs/observability.md, "Per-request reports").  `tier_hits` and
    `tier_served` have an entry per tier, the primary tier first."""

    request: int
    name: str
    lookups: int = 0
    tier_hits: list[int] = field(default_factory=list)
    loaded: int = 0
    stored: int = 0
    promoted: int = 0
    failed: int = 0
    promotion_wait_ns: int = 0
    asked: int = 0
    tier_served: list[int] = field(default_factory=list)
    recomputed: int = 0
    steps_waited: int = 0


_REPORT_FIELDS = dict(ffi.typeof("kvtier_request_report").fields)


def report_from_c(c_report: Any) -> RequestReport:
    """A copy of a ``kvtier_request_report *``, reading only the fields
    inside its ``struct_size`` (the growth rule; the others keep their
    defaults)."""
    size = c_report.struct_size

    def present(name: str) -> bool:
        f = _REPORT_FIELDS[name]
        return f.offset + ffi.sizeof(f.type) <= size

    count = c_report.tier_count if present("tier_count") else 0
    values: dict[str, Any] = {}
    for name in RequestReport.__dataclass_fields__:
        if not present(name):
            continue
        value = getattr(c_report, name)
        if name == "name":
            value = ffi.string(value).decode("utf-8", "replace") if value != ffi.NULL else ""
        elif name in ("tier_hits", "tier_served"):
            value = ffi.unpack(value, count) if count and value != ffi.NULL else []
        values[name] = value
    values.setdefault("request", 0)
    values.setdefault("name", "")
    return RequestReport(**values)


def _kept(errors: deque[BaseException], what: str, error: BaseException) -> None:
    errors.append(error)
    _log.error("%s raised %r", what, error, exc_info=error)


class ManagerCallbacks:
    """A manager's event and report callbacks and what they raised; the
    manager's handle keeps this object (so the trampolines) alive until
    the manager is freed."""

    def __init__(self) -> None:
        #: The latest exceptions its callbacks raised, oldest first.
        self.errors: deque[BaseException] = deque(maxlen=_KEPT_ERRORS)
        self.event: Any = None
        self.report: Any = None
        self._retired: list[Any] = []

    def retire(self, old: Any) -> None:
        """Keeps a replaced trampoline a little longer (the previous one)."""
        if old is not None:
            self._retired = [old]

    def event_trampoline(self, callback: Callable[[Event], Any]) -> Any:
        errors = self.errors

        def deliver(_user_data: Any, c_event: Any) -> None:
            try:
                callback(event_from_c(c_event[0]))
            except BaseException as e:  # never unwinds into kvtier
                _kept(errors, "the event callback", e)

        return ffi.callback("kvtier_event_fn", deliver)

    def report_trampoline(self, callback: Callable[[RequestReport], Any]) -> Any:
        errors = self.errors

        def deliver(_user_data: Any, c_report: Any) -> None:
            try:
                callback(report_from_c(c_report))
            except BaseException as e:  # never unwinds into kvtier
                _kept(errors, "the request report callback", e)

        return ffi.callback("kvtier_request_report_fn", deliver)


# -- the log callback (process-wide) ----------------------------------

#: The latest exceptions the log callback raised, oldest first.
log_callback_errors: deque[BaseException] = deque(maxlen=_KEPT_ERRORS)
_log_lock = threading.Lock()
_log_current: Any = None
_log_previous: Any = None  # may still run on another thread for a moment


def set_log_callback(
    callback: Callable[[LogLevel, str, str], Any] | None, max_level: int | str = LogLevel.WARN
) -> None:
    """Routes kvtier's log records at `max_level` or more severe to
    ``callback(level, target, message)`` (`level` a `LogLevel`, `target`
    the kvtier module, such as ``"kvtier::tiering"``); None (or
    ``LogLevel.OFF``) removes it.  Process-wide, replacing any previous
    callback.  It may be called from any thread that does kvtier work,
    the tiers' I/O threads included, and concurrently: it must be
    thread-safe and must not call kvtier.  Fails with ``UNSUPPORTED`` if
    the process already routes Rust's ``log`` records elsewhere."""
    global _log_current, _log_previous
    if callback is not None and not callable(callback):
        raise TypeError(f"callback: expected a callable or None, got {type(callback).__name__}")
    try:
        level = LogLevel[max_level.upper()] if isinstance(max_level, str) else LogLevel(max_level)
    except (KeyError, ValueError):
        raise ValueError(f"max_level: expected a LogLevel (or its name), got {max_level!r}") from None
    with _log_lock:
        if callback is None or level == LogLevel.OFF:
            check(lib.kvtier_set_log_callback(ffi.NULL, ffi.NULL, LogLevel.OFF), "kvtier_set_log_callback")
            _log_previous, _log_current = _log_current, None
            return

        levels = {int(v): v for v in LogLevel}

        def deliver(_user_data: Any, c_level: int, c_target: Any, c_message: Any) -> None:
            try:
                callback(
                    levels.get(c_level, c_level),
                    ffi.string(c_target).decode("utf-8", "replace"),
                    ffi.string(c_message).decode("utf-8", "replace"),
                )
            except BaseException as e:  # never unwinds into kvtier
                _kept(log_callback_errors, "the log callback", e)

        trampoline = ffi.callback("kvtier_log_fn", deliver)
        check(lib.kvtier_set_log_callback(trampoline, ffi.NULL, level), "kvtier_set_log_callback")
        _log_previous, _log_current = _log_current, trampoline


_TO_LOGGING = {
    LogLevel.ERROR: logging.ERROR,
    LogLevel.WARN: logging.WARNING,
    LogLevel.INFO: logging.INFO,
    LogLevel.DEBUG: logging.DEBUG,
    LogLevel.TRACE: logging.DEBUG - 5,
}


def log_to_logging(max_level: int | str = LogLevel.WARN) -> None:
    """Routes kvtier's log records into Python's ``logging``: a record of
    target ``kvtier::tiering`` goes to logger ``kvtier.tiering``, at the
    matching level (TRACE as 5)."""

    def forward(level: LogLevel, target: str, message: str) -> None:
        logging.getLogger(target.replace("::", ".")).log(_TO_LOGGING.get(level, logging.INFO), "%s", message)

    set_log_callback(forward, max_level)


@atexit.register
def _remove_log_callback() -> None:
    # The tiers' threads may log while the interpreter shuts down.
    if _log_current is not None:
        lib.kvtier_set_log_callback(ffi.NULL, ffi.NULL, LogLevel.OFF)
