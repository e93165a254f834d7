"""Keys copied out of the library's arrays (`kvtier._keys`): each is its
own bytes, however the array lays them out."""

from __future__ import annotations

from kvtier import _keys
from kvtier._ffi import ffi


def key_array(memory, places):
    """A ``kvtier_key[]`` of (offset into `memory`, length) entries."""
    array = ffi.new("kvtier_key[]", len(places))
    for entry, (offset, length) in zip(array, places):
        entry.data = memory + offset
        entry.len = length
    return array


def memory_of(size):
    memory = ffi.new("uint8_t[]", size)
    for i in range(size):
        memory[i] = i % 251
    return memory


def expected(places):
    return [bytes(i % 251 for i in range(offset, offset + length)) for offset, length in places]


def test_evenly_laid_out_keys_of_one_length():
    memory = memory_of(65 * 40)
    places = [(65 * i, 12) for i in range(40)]
    assert _keys.keys_bytes(key_array(memory, places), 40) == expected(places)
    assert _keys.keys_bytes(key_array(memory, places), 3) == expected(places[:3])


def test_evenly_laid_out_keys_of_several_lengths():
    memory = memory_of(65 * 5)
    places = [(65 * i, n) for i, n in enumerate((12, 64, 1, 33, 12))]
    assert _keys.keys_bytes(key_array(memory, places), 5) == expected(places)


def test_keys_laid_out_any_other_way_are_read_one_by_one():
    memory = memory_of(20000)
    for places in (
        [(0, 12), (100, 12), (130, 12)],  # uneven steps
        [(200, 12), (100, 12), (0, 12)],  # backwards
        [(0, 12), (0, 12)],  # the same key twice
        [(0, 8), (8000, 8), (16000, 8)],  # more than a page apart
        [(5, 12)],
    ):
        assert _keys.keys_bytes(key_array(memory, places), len(places)) == expected(places), places
    assert _keys.keys_bytes(ffi.NULL, 0) == []


def test_owned_key_copies():
    bufs = ffi.new("kvtier_key_buf[]", 4)
    keys = [b"a" * 12, b"b", b"c" * 64, b"d" * 12]
    for buf, key in zip(bufs, keys):
        buf.len = len(key)
        buf.bytes[0 : len(key)] = list(key)
    assert _keys.key_bufs_bytes(bufs, 4) == keys
    assert _keys.key_bufs_bytes(bufs, 2) == keys[:2]
    assert _keys.key_bufs_bytes(bufs, 0) == []
