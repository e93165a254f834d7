"""Keys as the C API's ``kvtier_key`` arrays.

A key is any bytes-like object: ``bytes``, ``bytearray``, a C-contiguous
``memoryview``, ``array.array`` or numpy array.  Its key is its bytes, all
``memoryview(key).nbytes`` of them, whatever the size of its items (an
``array('I', [1, 2])`` is an 8-byte key).  Anything else (``str``, ``int``,
``None``, a buffer that is not C-contiguous, a scalar such as
``numpy.uint64(7)``, an array of Python objects, an object without the
buffer protocol) is a ``TypeError`` naming what was given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._ffi import ffi

MAX_KEY_LEN = 64

_PLAIN = (bytes, bytearray)


def _not_a_key(key: Any, what: str, why: str = "") -> TypeError:
    return TypeError(
        f"{what}: expected a bytes-like object (bytes, bytearray, a C-contiguous buffer), "
        f"got {type(key).__name__}{why}"
    )


def key_buffer(key: Any, what: str = "key") -> tuple[Any, int]:
    """`key`'s bytes as a ``char[]`` (valid while it lives) and their
    number; a ``TypeError`` naming `what` unless `key` is bytes-like and
    C-contiguous."""
    if type(key) in _PLAIN:
        return ffi.from_buffer(key), len(key)
    if isinstance(key, str):
        raise _not_a_key(key, what, " (encode a str first)")
    try:
        view = memoryview(key)
    except TypeError:
        raise _not_a_key(key, what) from None
    if not view.c_contiguous:
        raise _not_a_key(key, what, " that is not C-contiguous")
    if view.ndim == 0:
        raise _not_a_key(key, what, " (a scalar, not a byte string: pass its bytes, e.g. x.tobytes())")
    if "O" in view.format:
        raise _not_a_key(key, what, " holding Python objects (its bytes would be their addresses)")
    flat = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    return ffi.from_buffer(flat), view.nbytes


def key_list(keys: Any, what: str = "keys") -> list[Any]:
    """`keys` as a list, a ``TypeError`` if it is not an iterable of keys
    (a ``str`` or a single bytes-like key included)."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what}: expected a sequence of keys, got one {type(keys).__name__} (a single key? pass [key])")
    if isinstance(keys, list):
        return keys
    try:
        return list(keys)
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of keys, got {type(keys).__name__}") from None


class KeyArray:
    """A ``kvtier_key[]`` over bytes-like keys, valid while it lives.

    The keys' bytes are read in place (cffi passes a pointer into each
    buffer), so building one costs a pointer and a length per key.
    """

    __slots__ = ("ptr", "len", "_keep")

    def __init__(self, keys: Iterable[Any]):
        keys = key_list(keys)
        n = len(keys)
        self.len = n
        if n == 0:
            self.ptr = ffi.NULL
            self._keep: Any = None
            return
        array = ffi.new("kvtier_key[]", n)
        keep = []
        for i, key in enumerate(keys):
            data, length = key_buffer(key, f"key {i}")
            keep.append(data)
            entry = array[i]
            entry.data = data
            entry.len = length
        self.ptr = array
        self._keep = keep


def key_array(keys: Iterable[Any]) -> KeyArray:
    """The keys as a ``kvtier_key[]`` (kept alive by the returned object)."""
    return KeyArray(keys)


def key_bytes(c_key: Any) -> bytes:
    """A copy of a ``kvtier_key`` (or ``kvtier_key *``) as ``bytes``."""
    return bytes(ffi.buffer(c_key.data, c_key.len))


def keys_bytes(c_keys: Any, n: int) -> list[bytes]:
    """Copies of the first `n` entries of a ``kvtier_key *`` as ``bytes``."""
    if not n:
        return []
    buffer = ffi.buffer
    return [buffer(k.data, k.len)[:] for k in c_keys[0:n]]


def key_buf_bytes(c_key_buf: Any) -> bytes:
    """A copy of a ``kvtier_key_buf`` as ``bytes``."""
    return bytes(ffi.buffer(c_key_buf.bytes, c_key_buf.len))
