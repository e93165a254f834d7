"""Slot views: `Manager.slot(i)` and `Region.slot(i)`, bounds-checked,
writable, and never outliving the memory they show."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import kvtier
from kvtier import KvtierError, Status

from conftest import keys


def test_a_stored_block_is_read_back_through_the_slot_view():
    k = keys(2)
    with kvtier.Manager(4, block_bytes=256) as m, m.request("r") as r:
        plan = m.prepare_store(r, k)
        for i, slot in zip(plan.store_indices, plan.slots):
            view = m.slot(slot)
            assert (len(view), view.readonly) == (256, False)
            view[:] = bytes([i + 1]) * 256
        del view  # a live view would keep the manager from closing
        m.complete_store(r, k)
        slots = m.prepare_load(r, k)
        assert [bytes(m.slot(s)) for s in slots] == [b"\x01" * 256, b"\x02" * 256]
        m.complete_load(r, k)
        # numpy reads and writes through the same buffer.
        array = np.frombuffer(m.slot(slots[0]), dtype=np.uint8)
        array[:2] = [7, 9]
        assert bytes(m.slot(slots[0])[:2]) == b"\x07\x09"
        del array


@pytest.mark.parametrize("slot", [-1, 4, 2**70])
def test_a_slot_outside_the_memory_is_an_index_error(slot):
    with kvtier.Manager(4, block_bytes=64) as m:
        with pytest.raises(IndexError, match=r"there are 4 slots, 0\.\.3"):
            m.slot(slot)


@pytest.mark.parametrize("slot", ["1", 1.0, None, True, [1], np.float32(1)])
def test_a_slot_that_is_no_int_is_a_type_error(slot):
    with kvtier.Manager(4, block_bytes=64) as m:
        with pytest.raises(TypeError, match="slot: expected an int"):
            m.slot(slot)


def test_numpy_integers_are_slot_numbers():
    with kvtier.Manager(4, block_bytes=64) as m:
        assert len(m.slot(np.uint32(3))) == 64


def test_a_manager_without_slot_memory_says_so():
    with kvtier.Manager(4) as m:
        with pytest.raises(KvtierError) as info:
            m.slot(0)
        assert info.value.status == Status.NOT_FOUND
        assert "block_bytes" in info.value.message


def test_close_refuses_while_a_view_lives_then_frees():
    m = kvtier.Manager(4, block_bytes=64)
    view = m.slot(1)
    with pytest.raises(BufferError, match="1 slot buffers"):
        m.close()
    assert not m.closed
    view[0] = 5  # still mapped
    del view
    gc.collect()
    m.close()
    assert m.closed
    with pytest.raises(KvtierError) as info:
        m.slot(0)
    assert info.value.status == Status.CLOSED


def test_a_dropped_manager_is_freed_after_its_last_view():
    m = kvtier.Manager(4, block_bytes=64)
    view = m.slot(0)
    del m
    gc.collect()
    view[:3] = b"abc"  # the memory is still there
    assert bytes(view[:3]) == b"abc"
    del view
    gc.collect()


def test_the_region_slot_has_the_same_rules(tmp_path, region_name):
    with kvtier.Region(region_name, 4, 4096, directory=str(tmp_path)) as region:
        with pytest.raises(IndexError, match="there are 4 slots"):
            region.slot(4)
        with pytest.raises(TypeError, match="slot: expected an int, got str"):
            region.slot("0")
        assert len(region.slot(np.int8(3))) == region.stride
