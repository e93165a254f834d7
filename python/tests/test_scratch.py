"""The reused C buffers of the manager's key calls (`kvtier._scratch`)."""

from array import array

import pytest

import kvtier
from kvtier import _scratch


def test_keys_of_different_lengths_in_one_call_keep_their_own_bytes():
    # Lengths 12, 11, 13 add up to three 12-byte keys: a packed copy that
    # cut them at 12 bytes would store other keys.
    stored = [b"a" * 12, b"b" * 11, b"c" * 13]
    with kvtier.Manager(8) as m, m.request("r") as r:
        plan = m.prepare_store(r, stored)
        assert plan.store_indices == [0, 1, 2]
        m.complete_store(r, stored)
        for key in stored:
            assert m.lookup(r, [key]).hits == 1, key
        assert m.lookup(r, [b"a" * 12, b"b" * 12, b"c" * 12]).hits == 1


def test_bytes_and_other_buffers_mixed_in_one_call_are_the_same_keys():
    key = bytes(range(12))
    with kvtier.Manager(8) as m, m.request("r") as r:
        m.prepare_store(r, [b"x" * 12, array("I", [0x03020100, 0x07060504, 0x0B0A0908])])
        m.complete_store(r, [b"x" * 12, bytearray(key)])
        assert m.lookup(r, [b"x" * 12, memoryview(key)]).hits == 2


def test_a_call_made_while_a_scratch_is_held_gets_another_one():
    held = _scratch.acquire()
    try:
        other = _scratch.acquire()
        assert other is not held
        _scratch.release(other)
    finally:
        _scratch.release(held)


def test_a_key_length_change_lays_the_packed_keys_out_again():
    with kvtier.Manager(16) as m, m.request("r") as r:
        short = [bytes([i]) * 8 for i in range(3)]
        long = [bytes([i]) * 20 for i in range(3)]
        short_again = [bytes([i + 3]) * 8 for i in range(3)]
        for batch in (short, long, short_again):
            assert m.prepare_store(r, batch).store_indices == [0, 1, 2]
            m.complete_store(r, batch)
        assert m.lookup(r, short + long + short_again).hits == 9


def test_one_key_buffers_hold_each_keys_own_bytes_and_length():
    from kvtier._ffi import ffi

    buffers = _scratch.OneKey()
    for key in (b"a" * 12, b"b" * 20, b"c" * 12, b"d" * 64, b"e"):
        c_key = buffers.set(key)
        assert c_key.len == len(key)
        assert ffi.buffer(c_key.data, c_key.len)[:] == key


def test_keys_whose_len_is_not_their_size_are_their_own_bytes():
    # An array('H') of 12 items has len 12 but 24 bytes: beside 12-byte
    # keys it must still be a 24-byte key, not packed as 12 of its bytes.
    wide = array("H", range(12))
    with kvtier.Manager(8) as m, m.request("r") as r:
        batch = [b"a" * 12, wide, bytearray(b"b" * 12)]
        assert m.prepare_store(r, batch).store_indices == [0, 1, 2]
        m.complete_store(r, batch)
        assert m.lookup(r, [b"a" * 12, bytes(wide), b"b" * 12]).hits == 3
        assert m.lookup(r, [bytes(wide)[:12]]).hits == 0


def test_keys_that_cannot_be_packed_keep_their_errors():
    with kvtier.Manager(8) as m, m.request("r") as r:
        for bad in ([b"a" * 12, "text"], [b"a" * 12, memoryview(b"b" * 24)[::2]], [b"a" * 12, 7]):
            with pytest.raises(TypeError, match="key 1"):
                m.touch(r, bad)
