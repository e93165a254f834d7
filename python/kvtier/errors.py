"""kvtier's status codes and the exception every failed call raises."""

from __future__ import annotations

import enum
from typing import Callable

from ._ffi import ffi, lib

__all__ = ["Status", "KvtierError", "KeysIgnoredError", "DisconnectedError", "check", "error_for"]


class Status(enum.IntEnum):
    """The C API's ``kvtier_status`` values (``KVTIER_STATUS_<NAME>``)."""

    OK = 0
    NULL_ARGUMENT = 1
    INVALID_ARGUMENT = 2
    INVALID_KEY = 3
    KEY_STATE = 4
    UNKNOWN_REQUEST = 5
    DUPLICATE_REQUEST = 6
    UNKNOWN_JOB = 7
    IO = 8
    NOT_FOUND = 9
    ALREADY_EXISTS = 10
    TIMEOUT = 11
    NO_SPACE = 12
    PEER_FAILED = 13
    TIER = 14
    REENTRANT = 15
    CLOSED = 16
    UNSUPPORTED = 17
    BUFFER_TOO_SMALL = 18
    POISONED = 19
    PANIC = 20
    OUT_OF_MEMORY = 21
    KEYS_IGNORED = 22
    DISCONNECTED = 23


class KvtierError(Exception):
    """A kvtier call failed: ``status`` says how, ``message`` what happened
    (the library's ``kvtier_last_error_message``)."""

    def __init__(self, status: int, message: str, call: str = ""):
        try:
            self.status: Status | int = Status(status)
            name = self.status.name
        except ValueError:
            self.status = status
            name = f"status {status}"
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{name}: {message}" if message else f"{where}{name}")


class KeysIgnoredError(KvtierError):
    """A store completion named keys it did not act on (another request's
    or a promotion's, ready, or absent keys), or its request had no store
    in flight (``Status.KEYS_IGNORED``).  The request's own keys named were
    completed all the same: ``completion`` (a `StoreCompletion`) says what
    happened to every key named."""

    def __init__(self, message: str, call: str, completion: object):
        super().__init__(Status.KEYS_IGNORED, message, call)
        self.completion = completion


class DisconnectedError(KvtierError):
    """The node server of a manager made by `Manager.connect` is gone
    (closed the connection, died, or did not answer within the call
    timeout): ``Status.DISCONNECTED``, from that call and every later one
    on the manager.  Close it and connect again."""

    def __init__(self, message: str, call: str = ""):
        super().__init__(Status.DISCONNECTED, message, call)


def error_for(status: int, message: str, call: str = "") -> KvtierError:
    """The exception of a failed call: `DisconnectedError` for
    ``Status.DISCONNECTED``, else `KvtierError`."""
    if status == Status.DISCONNECTED:
        return DisconnectedError(message, call)
    return KvtierError(status, message, call)


def last_message() -> str:
    """This thread's `kvtier_last_error_message`."""
    return ffi.string(lib.kvtier_last_error_message()).decode("utf-8", "replace")


def check(status: int, call: str = "") -> None:
    """Raises `KvtierError` unless `status` is ``KVTIER_STATUS_OK``."""
    if status:
        raise error_for(status, last_message(), call)


def check_completion(status: int, call: str, completion: Callable[[], object]) -> None:
    """`check` of a ``complete_store``: ``Status.KEYS_IGNORED`` raises
    `KeysIgnoredError` carrying ``completion()`` (the report the call
    wrote)."""
    if status == Status.KEYS_IGNORED:
        raise KeysIgnoredError(last_message(), call, completion())
    check(status, call)


def encode_str(value: object, what: str) -> bytes:
    """`value` (a ``str``) as UTF-8, for a C string: a ``TypeError`` naming
    `what` for anything else, a ``ValueError`` for a string with a NUL
    character (C would read only the part before it: ``"lru\\0x"`` would
    pass as ``"lru"``)."""
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, got {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{what}: {value!r} holds a NUL character, which a C string cannot carry")
    return value.encode()
