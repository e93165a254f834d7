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
    memory = memory_of(72 * 100)
    for stride, length in ((65, 12), (72, 64), (12, 12)):
        places = [(stride * i, length) for i in range(100)]
        array = key_array(memory, places)
        for n in (1, 3, 16, 31, 32, 33, 64, 65, 100):  # around the keys read per struct call
            assert _keys.keys_bytes(array, n) == expected(places[:n]), (stride, length, n)


def test_evenly_laid_out_keys_of_several_lengths():
    memory = memory_of(65 * 20)
    places = [(65 * i, n) for i, n in enumerate((12, 64, 1, 33) * 5)]
    assert _keys.keys_bytes(key_array(memory, places), 20) == expected(places)


def test_keys_laid_out_any_other_way_are_read_one_by_one():
    memory = memory_of(20000)
    for places in (
        [(65 * i + (i == 9), 12) for i in range(20)],  # one uneven step
        [(65 * (19 - i), 12) for i in range(20)],  # backwards
        [(0, 12)] * 20,  # the same key each time
        [(4100 * (i % 4), 8) for i in range(20)],  # more than a page apart
        [(5 * i, 12) for i in range(3)],  # a few keys
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
