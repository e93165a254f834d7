"""A manager's keyword arguments follow the JSON configuration's rules:
they are that document, read by the library's parser."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import kvtier
from kvtier import KvtierError, Status
from kvtier._config import document

from conftest import keys


def test_block_bytes_gives_slot_memory_an_fs_tier_copies_through(tmp_path):
    # Before, Manager(block_bytes=...) had no slot memory and refused this.
    with kvtier.Manager(8, block_bytes=4096) as m:
        assert m.add_fs_tier(str(tmp_path / "a"), read_threads=1, write_threads=1) == 1
        assert m.slot_memory().slot_count == 8
    fs = {"type": "fs", "options": {"directory": str(tmp_path / "b"), "read_threads": 1, "write_threads": 1}}
    with kvtier.Manager(8, block_bytes=4096, tiers=[fs]) as m:
        k = keys(1)
        with m.request("r") as r:
            plan = m.prepare_store(r, k)
            m.slot(plan.slots[0])[:4] = b"blk!"
            m.complete_store(r, k)
        while m.has_pending_work():
            m.schedule_end()
        assert m.read_tier_stats(1)["blocks"].value == 1


def test_without_block_bytes_an_fs_tier_is_refused_the_same_both_ways(tmp_path):
    fs = [{"type": "fs", "options": {"directory": str(tmp_path)}}]
    with pytest.raises(KvtierError) as by_keywords:
        kvtier.Manager(8, tiers=fs)
    with pytest.raises(KvtierError) as by_json:
        kvtier.Manager.from_json({"primary": {"capacity": 8}, "tiers": fs})
    assert str(by_keywords.value) == str(by_json.value)
    assert "tiers[0]" in by_keywords.value.message and "block_bytes" in by_keywords.value.message


@pytest.mark.parametrize(
    "options",
    [
        {"policy": "fifo"},
        {"capacity": -1},
        {"capacity": "many"},
        {"capacity": True},
        {"capacity": 1.5},
        {"capacity": 2**70},
        {"event_capacity": 2**70},
        {"promotion_answer": "sometimes"},
        {"capacity": 8, "capacity_bytes": 4096},
        {"capacity_bytes": 4096},
        {"progress_hold": "yes"},
        {"block_bytes": 4096, "region": {"directory": "/tmp"}},
        {"tiers": [{"type": "tape"}]},
        {"metrics": {"listen": "not an address"}},
    ],
    ids=repr,
)
def test_a_bad_option_fails_as_its_json_does(options):
    with pytest.raises(KvtierError) as by_keywords:
        kvtier.Manager(**options)
    with pytest.raises(KvtierError) as by_json:
        kvtier.Manager.from_json(document(options))
    assert by_keywords.value.status == Status.INVALID_ARGUMENT
    assert str(by_keywords.value) == str(by_json.value)
    assert by_keywords.value.message.startswith("invalid argument: configuration: ")


def test_the_keywords_are_the_documents_fields():
    assert document(
        {
            "capacity": 8,
            "policy": "arc",
            "kv_groups": True,
            "block_bytes": 64,
            "progress_hold": False,
            "progress_wait_steps": 0,
            "event_capacity": None,
        }
    ) == {
        "block_bytes": 64,
        "primary": {"capacity": 8, "policy": "arc", "kv_groups": True},
        "progress": {"hold": False, "wait_steps": 0},
    }


def test_defaults_are_the_librarys():
    with kvtier.Manager() as a, kvtier.Manager.from_json("{}") as b:
        assert a.capacity == b.capacity == 1024
        assert a.read_tier_stats(0) == b.read_tier_stats(0)


def test_values_python_can_write_as_json_are_taken():
    with kvtier.Manager(np.int64(8), block_bytes=np.uint32(4096), policy="arc", kv_groups=np.bool_(False)) as m:
        assert m.capacity == 8 and m.slot_memory().slot_bytes == 4096
    with kvtier.Manager(capacity_bytes=8192, block_bytes=4096) as m:
        assert m.capacity == 2


def test_values_without_a_json_form_are_a_type_error_naming_where(tmp_path):
    with pytest.raises(TypeError, match=r"^primary\.capacity: expected a JSON value .* got object$"):
        kvtier.Manager(object())
    with pytest.raises(TypeError, match=r"^tiers\[0\]\.options\.directory: .* got bytes$"):
        kvtier.Manager(block_bytes=4096, tiers=[{"type": "fs", "options": {"directory": b"/tmp/x"}}])
    with pytest.raises(TypeError, match=r"keys of a JSON object are str"):
        kvtier.Manager(tiers=[{1: "fs"}])
    with pytest.raises(ValueError, match=r"^primary\.capacity: nan has no JSON form"):
        kvtier.Manager(math.nan)
    with pytest.raises(TypeError, match="region: expected a kvtier.Region or a mapping"):
        kvtier.Manager(region="shm")
    with pytest.raises(TypeError, match="config: expected a JSON document"):
        kvtier.Manager.from_json(42)
    # A path is a string in JSON.
    with kvtier.Manager(4, block_bytes=4096, tiers=[{"type": "fs", "options": {"directory": Path(tmp_path)}}]) as m:
        assert m.read_tier_stats(1)["blocks"].value == 0


def test_a_document_that_is_not_utf8_is_refused():
    with pytest.raises(KvtierError, match="not UTF-8"):
        kvtier.Manager.from_json(b'{"primary": {"policy": "\xff"}}')
    with pytest.raises(KvtierError, match="not UTF-8"):
        kvtier.Manager.from_json('{"primary": {"policy": "\ud800"}}')


def test_a_region_object_gives_its_slots(tmp_path, region_name):
    with kvtier.Region(region_name, 8, 4096, directory=str(tmp_path)) as region:
        with kvtier.Manager(4, region=region, tiers=[{"type": "fs", "options": {"directory": str(tmp_path / "fs")}}]) as m:
            memory = m.slot_memory()
            assert (memory.base, memory.slot_count) == (region.base_address, 8)
            m.slot(7)[:3] = b"abc"
            assert bytes(region.slot(7)[:3]) == b"abc"
        with kvtier.Manager.from_json({"primary": {"capacity": 8}}, region=region) as m:
            assert m.slot_memory().base == region.base_address
        # Fewer slots than the capacity, or a second region: refused.
        with pytest.raises(KvtierError, match="configuration"):
            kvtier.Manager(16, region=region)
        with pytest.raises(KvtierError, match="the document names a region"):
            kvtier.Manager.from_json({"block_bytes": 4096, "region": {"name": "x"}}, region=region)
        with pytest.raises(TypeError, match="region: expected a kvtier.Region"):
            kvtier.Manager.from_json({}, region={"name": "x"})


def test_a_json_region_is_created_by_the_manager(tmp_path, region_name):
    region = {"name": region_name, "directory": str(tmp_path)}
    with kvtier.Manager(4, block_bytes=4096, region=region) as m:
        assert m.slot_memory().slot_count == 4
        assert any(p.name.startswith(region_name) for p in tmp_path.iterdir())
