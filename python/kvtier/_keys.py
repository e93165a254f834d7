"""Keys (Python ``bytes``) as the C API's ``kvtier_key`` arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._ffi import ffi

MAX_KEY_LEN = 64


class KeyArray:
    """A ``kvtier_key[]`` over Python ``bytes`` objects, valid while it lives.

    The keys' bytes are read in place (cffi passes a pointer into each
    ``bytes`` object), so building one costs a pointer and a length per key.
    """

    __slots__ = ("ptr", "len", "_keep")

    def __init__(self, keys: Sequence[bytes]):
        n = len(keys)
        self.len = n
        if n == 0:
            self.ptr = ffi.NULL
            self._keep: Any = None
            return
        array = ffi.new("kvtier_key[]", n)
        keep = []
        for i, key in enumerate(keys):
            data = ffi.from_buffer(key)
            keep.append(data)
            entry = array[i]
            entry.data = data
            entry.len = len(key)
        self.ptr = array
        self._keep = keep


def key_array(keys: Sequence[bytes]) -> KeyArray:
    """The keys as a ``kvtier_key[]`` (kept alive by the returned object)."""
    return KeyArray(keys)


def key_bytes(c_key: Any) -> bytes:
    """A copy of a ``kvtier_key`` (or ``kvtier_key *``) as ``bytes``."""
    return bytes(ffi.buffer(c_key.data, c_key.len))


def key_buf_bytes(c_key_buf: Any) -> bytes:
    """A copy of a ``kvtier_key_buf`` as ``bytes``."""
    return bytes(ffi.buffer(c_key_buf.bytes, c_key_buf.len))
