"""A C handle that several Python threads share, with the lifetime rules
that keep the interpreter safe: no call runs on a freed handle, and no
memory handed out as a buffer is unmapped while the buffer lives."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ._args import explain
from ._ffi import ffi
from .errors import KvtierError, Status

__all__ = ["Handle"]


class Handle:
    """Owns a C handle: `enter` gives it to a call (``CLOSED`` once
    closing began) and `leave` ends the call; `close` frees it once no call
    is inside (at once, or when the last call leaves: a call may close its
    own object from a callback).  Buffers from `export` keep this object,
    and so the handle, alive; the handle is freed when this object is
    collected if nobody closed it.  Calls on the handle may overlap (the
    C object is internally synchronized) unless `exclusive`, which makes
    them take turns."""

    __slots__ = ("_ptr", "_free", "_what", "_lock", "_idle", "_active", "_closing", "_exports", "_turn")

    def __init__(self, ptr: Any, free: Callable[[Any], Any], what: str, *, exclusive: bool = False):
        self._ptr = ptr
        self._free = free
        self._what = what
        self._lock = threading.RLock()  # buffer finalizers may run under it
        self._idle = threading.Condition(self._lock)
        self._active = 0
        self._closing = False
        self._exports = 0
        self._turn = threading.Lock() if exclusive else None

    @property
    def closed(self) -> bool:
        return self._closing

    def raw(self) -> Any:
        """The C handle, for callers that manage its lifetime themselves."""
        if self._closing:
            raise self._closed_error()
        return self._ptr

    def _closed_error(self) -> KvtierError:
        return KvtierError(Status.CLOSED, f"the {self._what} is closed")

    def enter(self) -> Any:
        """The handle for one call (`leave` must follow); ``CLOSED`` once
        closing began."""
        with self._lock:
            if self._closing:
                raise self._closed_error()
            self._active += 1
        if self._turn is not None:
            self._turn.acquire()
        return self._ptr

    def leave(self) -> None:
        if self._turn is not None:
            self._turn.release()
        with self._lock:
            self._active -= 1
            # Only a closing handle has waiters (`take`) or a deferred free.
            if self._active or not self._closing:
                return
            self._idle.notify_all()
            if self._ptr is None:
                return
            ptr, self._ptr = self._ptr, None
        self._free(ptr)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(handle, *args)`` inside `enter` / `leave`, written out here
        (the calls made once per key come this way; the lock's acquire and
        release called directly cost half of a ``with`` block)."""
        lock = self._lock
        lock.acquire()
        if self._closing:
            lock.release()
            raise self._closed_error()
        self._active += 1
        ptr = self._ptr
        lock.release()
        turn = self._turn
        if turn is not None:
            turn.acquire()
        try:
            return fn(ptr, *args)
        except (TypeError, OverflowError) as e:
            # cffi refused an argument: say which, in the header's words.
            raise explain(fn, (ptr, *args), e) from None
        finally:
            if turn is not None:
                turn.release()
            lock.acquire()
            self._active -= 1
            last_out = not self._active and self._closing
            lock.release()
            if last_out:
                self._last_out()

    def _last_out(self) -> None:
        """The last call of a closing handle left: wakes `take`, and frees
        the handle unless `take` has it."""
        with self._lock:
            if self._active or not self._closing:
                return
            self._idle.notify_all()
            if self._ptr is None:
                return
            ptr, self._ptr = self._ptr, None
        self._free(ptr)

    def close(self, busy: Callable[[int], Exception] | None = None) -> None:
        """Frees the handle now, or when the last call inside leaves.
        With `busy`, buffers still exported raise ``busy(count)`` and
        nothing changes."""
        with self._lock:
            if self._closing:
                return
            if busy is not None and self._exports:
                raise busy(self._exports)
            self._closing = True
            if self._active:
                return
            ptr, self._ptr = self._ptr, None
        if ptr is not None:
            self._free(ptr)

    def take(self, busy: Callable[[int], Exception] | None = None) -> Any:
        """Closes without freeing, once the calls inside have left: the
        handle for the caller to release, or None if already closed.
        With `busy`, buffers still exported raise ``busy(count)`` and
        nothing changes."""
        with self._lock:
            if self._closing:
                return None
            if busy is not None and self._exports:
                raise busy(self._exports)
            self._closing = True
            while self._active:
                self._idle.wait()
            ptr, self._ptr = self._ptr, None
            return ptr

    def export(self, address: Any, size: int) -> memoryview:
        """`size` writable bytes at `address` as a memoryview that keeps this
        object alive, counted until every view of it is gone."""
        with self._lock:
            if self._closing:
                raise self._closed_error()
            self._exports += 1
        owner = ffi.gc(ffi.cast("char *", address), self._unexport)
        return memoryview(ffi.buffer(owner, size))

    def _unexport(self, _owner: Any) -> None:
        with self._lock:
            self._exports -= 1

    @property
    def exports(self) -> int:
        """Buffers from `export` still alive."""
        return self._exports

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            self._ptr = None
            self._free(ptr)
