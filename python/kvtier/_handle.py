"""A C handle that several Python threads share, with the lifetime rules
that keep the interpreter safe: no call runs on a freed handle, and no
memory handed out as a buffer is unmapped while the buffer lives.

The calls made once per key pass a guard that takes no lock: under the
GIL, the deque `Handle.inside` counts the calls inside the handle (its
``append`` and ``pop`` are single steps no other thread can split, and
unlike a list's they free and allocate nothing at the empty end), and
every Python step is seen by all threads in one order.  A call appends
before it reads `Handle.closing`; `close` sets ``closing`` before it reads
the count (under its lock, which only the closers take).  So of a call
and a close, at least one sees the other: either the close sees the call
inside and leaves the free to the last call out, or the call sees the
close and gives the handle back untouched.  A call that reads ``closing``
false therefore holds a handle no one frees until it has popped its
entry.  Without a GIL (a free-threaded build) and for handles whose calls
take turns, every call takes the lock instead (`Handle.fast` is false).
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ._args import explain
from ._ffi import ffi
from .errors import KvtierError, Status

__all__ = ["Handle", "GIL"]

# Whether this interpreter runs with the GIL: a free-threaded build can
# only turn it on at run time (importing a module that needs it), never off.
GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


class Handle:
    """Owns a C handle: a call passes the guard (`call`, or `enter` and
    `leave`) and gets ``CLOSED`` once closing began; `close` frees the
    handle once no call is inside (at once, or when the last call leaves:
    a call may close its own object from a callback).  Buffers from
    `export` keep this object, and so the handle, alive; the handle is
    freed when this object is collected if nobody closed it.  Calls on the
    handle may overlap (the C object is internally synchronized) unless
    `exclusive`, which makes them take turns.

    A hot path may pass the guard inline, exactly as `call` does when
    `fast`: ``inside.append(None)``, then ``closing`` checked (true:
    ``inside.pop()``, `left`, ``CLOSED``), then the call on ``ptr`` in a
    ``try`` whose ``finally`` pops and, if ``closing``, calls `left`."""

    __slots__ = ("ptr", "inside", "closing", "fast", "_free", "_what", "_lock", "_idle", "_taking", "_exports", "_turn")

    def __init__(self, ptr: Any, free: Callable[[Any], Any], what: str, *, exclusive: bool = False):
        self.ptr = ptr
        self._free = free
        self._what = what
        self._lock = threading.RLock()  # buffer finalizers may run under it
        self._idle = threading.Condition(self._lock)
        self.inside: deque[None] = deque()  # one entry per call inside the handle
        self.closing = False
        self._taking = False  # `take` waits for the calls inside: the handle is its
        self._exports = 0
        self._turn = threading.Lock() if exclusive else None
        self.fast = GIL and not exclusive

    @property
    def closed(self) -> bool:
        return self.closing

    def raw(self) -> Any:
        """The C handle, for callers that manage its lifetime themselves."""
        if self.closing:
            raise self.closed_error()
        return self.ptr

    def closed_error(self) -> KvtierError:
        return KvtierError(Status.CLOSED, f"the {self._what} is closed")

    def enter(self) -> Any:
        """The handle for one call (`leave` must follow); ``CLOSED`` once
        closing began."""
        if self.fast:
            self.inside.append(None)
            if self.closing:
                self.inside.pop()
                self.left()
                raise self.closed_error()
            return self.ptr
        with self._lock:
            if self.closing:
                raise self.closed_error()
            self.inside.append(None)
        if self._turn is not None:
            self._turn.acquire()
        return self.ptr

    def leave(self) -> None:
        if self._turn is not None:
            self._turn.release()
        if self.fast:
            self.inside.pop()
            if self.closing:
                self.left()
            return
        with self._lock:
            self.inside.pop()
            last_out = not self.inside and self.closing
        if last_out:
            self.left()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(handle, *args)`` inside the guard."""
        if self.fast:
            inside = self.inside
            inside.append(None)
            if self.closing:
                inside.pop()
                self.left()
                raise self.closed_error()
            ptr = self.ptr
            try:
                return fn(ptr, *args)
            except (TypeError, OverflowError) as e:
                raise explain(fn, (ptr, *args), e) from None
            finally:
                inside.pop()
                if self.closing:
                    self.left()
        ptr = self.enter()
        try:
            return fn(ptr, *args)
        except (TypeError, OverflowError) as e:
            # cffi refused an argument: say which, in the header's words.
            raise explain(fn, (ptr, *args), e) from None
        finally:
            self.leave()

    def left(self) -> None:
        """A call left a closing handle: if it was the last inside, wakes
        `take`, and frees the handle unless `take` waits for it."""
        with self._lock:
            if self.inside or not self.closing:
                return
            self._idle.notify_all()
            if self.ptr is None or self._taking:
                return
            ptr, self.ptr = self.ptr, None
        self._free(ptr)

    def close(self, busy: Callable[[int], Exception] | None = None) -> None:
        """Frees the handle now, or when the last call inside leaves.
        With `busy`, buffers still exported raise ``busy(count)`` and
        nothing changes."""
        with self._lock:
            if self.closing:
                return
            if busy is not None and self._exports:
                raise busy(self._exports)
            self.closing = True
            if self.inside:
                return
            ptr, self.ptr = self.ptr, None
        if ptr is not None:
            self._free(ptr)

    def take(self, busy: Callable[[int], Exception] | None = None) -> Any:
        """Closes without freeing, once the calls inside have left: the
        handle for the caller to release, or None if already closed.
        With `busy`, buffers still exported raise ``busy(count)`` and
        nothing changes."""
        with self._lock:
            if self.closing:
                return None
            if busy is not None and self._exports:
                raise busy(self._exports)
            self.closing = True
            self._taking = True
            while self.inside:
                self._idle.wait()
            ptr, self.ptr = self.ptr, None
            return ptr

    def export(self, address: Any, size: int) -> memoryview:
        """`size` writable bytes at `address` as a memoryview that keeps this
        object alive, counted until every view of it is gone."""
        with self._lock:
            if self.closing:
                raise self.closed_error()
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
        ptr = getattr(self, "ptr", None)
        if ptr is not None:
            self.ptr = None
            self._free(ptr)
