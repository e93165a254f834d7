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

import functools
import struct
from array import array
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


# Reading many keys at once: a ``kvtier_key[]`` (and a ``kvtier_key_buf[]``)
# read as machine words, when a word is a pointer and a size_t.
_WORD = next((code for code in "QL" if array(code).itemsize == ffi.sizeof("void *")), "")
_WORDS = bool(_WORD) and ffi.sizeof("size_t") == ffi.sizeof("void *") == ffi.sizeof("kvtier_key") // 2
_KEY_SIZE = ffi.sizeof("kvtier_key")
_BUF_SIZE = ffi.sizeof("kvtier_key_buf")
_BUF_BYTES = ffi.offsetof("kvtier_key_buf", "bytes")
_BUF_WORDS = (
    _BUF_SIZE // ffi.sizeof("size_t")
    if _WORDS and _BUF_SIZE % ffi.sizeof("size_t") == 0 and ffi.offsetof("kvtier_key_buf", "len") == 0
    else 0
)
# The smallest page of the platforms kvtier runs on: memory between keys
# less than this apart lies in pages that hold keys, so it can be read.
_PAGE = 4096
# Fewer keys are copied one by one: reading the layout costs about as
# much as a dozen keys' copies.
_SPAN_KEYS = 16


_CHUNK = 32  # keys read by one struct call


@functools.lru_cache(maxsize=128)
def _unpacker(n: int, stride: int, length: int) -> struct.Struct:
    """Reads `n` keys of `length` bytes, `stride` bytes apart (the last
    followed by its padding too), in one call."""
    return struct.Struct(f"{length}s{stride - length}x" * n)


def _unpack(span: bytes, n: int, stride: int, length: int) -> list[bytes]:
    """The `n` keys of `span` (``n * stride`` bytes), `_CHUNK` at a time:
    a few formats serve every count."""
    keys: list[bytes] = []
    whole = n - n % _CHUNK
    if whole:
        chunk = _unpacker(_CHUNK, stride, length)
        for offset in range(0, whole * stride, _CHUNK * stride):
            keys.extend(chunk.unpack_from(span, offset))
    if n > whole:
        keys.extend(_unpacker(n - whole, stride, length).unpack_from(span, whole * stride))
    return keys


def keys_bytes(c_keys: Any, n: int) -> list[bytes]:
    """Copies of the first `n` entries of a ``kvtier_key *`` as ``bytes``.

    Keys the library lays out evenly (a job's or an event batch's keys
    are one array of its own keys) are copied with one read of the span
    they cover: their pointers and lengths are read as words, and their
    starts must be less than a page apart, so every page of the span holds
    a key and can be read.  Any other layout, and a few keys, are read key
    by key."""
    if not n:
        return []
    if n >= _SPAN_KEYS and _WORDS:
        words = array(_WORD)
        words.frombytes(ffi.buffer(c_keys, n * _KEY_SIZE))
        starts, lengths = words[0::2], words[1::2]
        first = starts[0]
        stride = starts[1] - first
        if 0 < stride < _PAGE and starts.tolist() == list(range(first, first + n * stride, stride)):
            offsets = range(0, n * stride, stride)
            length = lengths[0]
            start = c_keys[0].data  # at `first`
            if length <= stride and lengths.count(length) == n:
                # The last key's padding is not the library's to read: zeros.
                span = ffi.buffer(start, (n - 1) * stride + length)[:] + bytes(stride - length)
                return _unpack(span, n, stride, length)
            span = ffi.buffer(start, max(map(int.__add__, offsets, lengths)))[:]
            return [span[o : o + k] for o, k in zip(offsets, lengths)]
    buffer = ffi.buffer
    return [buffer(k.data, k.len)[:] for k in c_keys[0:n]]


def key_bufs_bytes(c_key_bufs: Any, n: int) -> list[bytes]:
    """Copies of the first `n` entries of a ``kvtier_key_buf *`` as
    ``bytes`` (one read of the array, then each key's bytes)."""
    if not n:
        return []
    raw = ffi.buffer(c_key_bufs, n * _BUF_SIZE)[:]
    if _BUF_WORDS:
        lengths = memoryview(raw).cast(_WORD)[0 : n * _BUF_WORDS : _BUF_WORDS]
        return [raw[o : o + k] for o, k in zip(range(_BUF_BYTES, n * _BUF_SIZE, _BUF_SIZE), lengths)]
    return [key_buf_bytes(b) for b in c_key_bufs[0:n]]


def key_buf_bytes(c_key_buf: Any) -> bytes:
    """A copy of a ``kvtier_key_buf`` as ``bytes``."""
    return bytes(ffi.buffer(c_key_buf.bytes, c_key_buf.len))
