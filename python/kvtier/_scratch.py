"""Reusable C buffers for the calls made once per key or per step.

A `Scratch` holds what one call passes to the C API and reads back: a
``kvtier_key[]`` over one packed byte array, and the answer structs and
output arrays the calls fill (a call on one key takes a `OneKey`).
`acquire` hands one out to a single caller, who gives it back with
`release` once the call's answer is read (in a ``finally``): a scratch is
never shared, never used after its release, and a call made inside a
call (a tier callback calling the manager, another thread) takes another
one.  Building a ``kvtier_key[]`` per call costs a cffi object and a
pointer per key; filling a scratch costs one ``bytes.join`` and one copy.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ._ffi import ffi
from ._keys import MAX_KEY_LEN, KeyArray, key_list

_KEEP_CAPACITY = 4096  # larger scratches are dropped after their call
_KEEP_COUNT = 32  # idle scratches kept


class Scratch:
    """The buffers of one call (see the module's documentation)."""

    __slots__ = (
        "answer",
        "handle",
        "policy",
        "completion",
        "plan",
        "capacity",
        "key_len",
        "data",
        "view",
        "keys",
        "u32",
        "u64",
        "_indices",
        "_evicted",
    )

    def __init__(self) -> None:
        self.answer = ffi.new("kvtier_lookup_answer *")
        self.handle = ffi.new("kvtier_request_handle *")
        self.policy = ffi.new("kvtier_offload_policy *")
        self.completion = ffi.new("kvtier_store_completion *")
        self.plan = ffi.new("kvtier_store_plan *")
        self.capacity = 0
        self.key_len = 0
        self.data = self.view = self.keys = self.u32 = self.u64 = None
        self._indices = self._evicted = None

    def reserve(self, n: int) -> None:
        """Room for `n` entries in every array."""
        if n <= self.capacity:
            return
        capacity = max(16, self.capacity)
        while capacity < n:
            capacity *= 2
        self.capacity = capacity
        self.data = ffi.new("uint8_t[]", capacity * MAX_KEY_LEN)
        self.view = memoryview(ffi.buffer(self.data))
        self.keys = ffi.new("kvtier_key[]", capacity)
        self.key_len = 0
        self.u32 = ffi.new("uint32_t[]", capacity)
        self.u64 = ffi.new("uint64_t[]", capacity)
        self._indices = ffi.new("size_t[]", capacity)
        self._evicted = ffi.new("kvtier_key_buf[]", capacity)
        plan = self.plan
        plan.store_indices = self._indices
        plan.slots = self.u32
        plan.evicted = self._evicted

    def _lay_out(self, key_len: int) -> None:
        # Entry i covers bytes [i * key_len, (i + 1) * key_len) of `data`.
        keys, data = self.keys, self.data
        for i in range(self.capacity):
            entry = keys[i]
            entry.data = data + i * key_len
            entry.len = key_len
        self.key_len = key_len

    def key_array(self, keys: Any) -> tuple[Any, int, Any]:
        """`keys` as a ``kvtier_key[]``: the pointer, the count, and what
        keeps it alive (None: this scratch).  Keys that are all bytes of
        one length are copied into this scratch in one go; any other keys
        are read in place (`KeyArray`, and its errors); every array has
        room for the keys either way.

        "All bytes of one length": ``b"".join`` takes every key (each has
        the buffer protocol), each key's ``len`` is the first key's, and
        the joined bytes are exactly that length per key.  A buffer's
        ``len`` is at most its size in bytes (items of one byte or more,
        a first dimension of one or more), so the sizes add up only if
        every key's ``len`` is its size: each key is its own bytes, as
        `KeyArray` would read them."""
        if type(keys) is not list:
            keys = key_list(keys)
        n = len(keys)
        if n > self.capacity or not self.capacity:
            self.reserve(max(n, 1))
        if n:
            try:
                key_len = len(keys[0])
                joined = b"".join(keys)
                packed = 0 < key_len <= MAX_KEY_LEN and len(joined) == n * key_len
                if packed and n > 1:
                    packed = set(map(len, keys)) == {key_len}
            except Exception:  # noqa: BLE001 - a key KeyArray reads, or refuses
                packed = False
            if packed:
                if key_len != self.key_len:
                    self._lay_out(key_len)
                self.view[: n * key_len] = joined
                return self.keys, n, None
        array = KeyArray(keys)
        return array.ptr, array.len, array


# Idle scratches; deque.pop and deque.append are atomic, so a scratch
# popped is the popping thread's alone (and, unlike a list's, they free and
# allocate nothing when the pool runs empty and fills again).
_idle: deque[Scratch] = deque()


class OneKey:
    """The buffers of a call on one key (a lookup): a ``kvtier_key *``
    over `MAX_KEY_LEN` bytes and a ``kvtier_lookup_answer *``.  Taken
    from `one_keys` with ``pop`` (empty: a new one) and given back with
    ``append`` once the answer is read; as a `Scratch`, never shared.

    `set` copies a key in: ``view[:n] = key`` is a single copy (a third
    of a ``memmove`` call), and ``key.len`` is written only when the
    length changes (most callers' keys all have one length)."""

    __slots__ = ("key", "data", "view", "len", "answer")

    def __init__(self) -> None:
        self.data = ffi.new("uint8_t[]", MAX_KEY_LEN)
        self.view = memoryview(ffi.buffer(self.data))
        self.key = ffi.new("kvtier_key *")
        self.key.data = self.data
        self.len = 0
        self.answer = ffi.new("kvtier_lookup_answer *")

    def set(self, key: bytes) -> Any:
        """The ``kvtier_key *`` holding `key` (``bytes`` of 1 to
        `MAX_KEY_LEN` bytes: the caller checks)."""
        n = len(key)
        self.view[:n] = key
        if n != self.len:
            self.key.len = self.len = n
        return self.key


# Idle one-key buffers (as `_idle`); at most as many as calls ever overlapped.
one_keys: deque[OneKey] = deque()


def acquire() -> Scratch:
    """A scratch for one call, the caller's alone until `release`."""
    try:
        return _idle.pop()
    except IndexError:
        return Scratch()


def release(scratch: Scratch) -> None:
    """Gives back a scratch once its call's answer is read."""
    if scratch.capacity <= _KEEP_CAPACITY and len(_idle) < _KEEP_COUNT:
        _idle.append(scratch)
