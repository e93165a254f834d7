"""Whatever a caller passes, a wrong value is a clear TypeError (or
OverflowError for an integer out of its C range) naming the call and the
parameter; never a crash, never cffi's own wording."""

from __future__ import annotations

import array

import numpy as np
import pytest

import kvtier
from kvtier import KvtierError

from conftest import keys

# What cffi says on its own; no message may read like this.
CFFI_WORDS = ("an integer is required", "int too big to convert", "can't convert negative", "does not fit", "cdata")

WRONG_SCALARS = [None, 1.5, "3", b"3", [1], (1,), {1: 2}, np.float64(1.0), np.array([1, 2]), object()]


def clear(error: BaseException) -> str:
    text = str(error)
    assert not any(w in text for w in CFFI_WORDS), text
    return text


@pytest.fixture
def manager():
    with kvtier.Manager(8, block_bytes=64) as m:
        yield m


@pytest.mark.parametrize("request_handle", WRONG_SCALARS, ids=repr)
def test_a_request_handle_of_the_wrong_type(manager, request_handle):
    for call in (
        lambda: manager.lookup(request_handle, keys(1)),
        lambda: manager.prepare_store(request_handle, keys(1)),
        lambda: manager.complete_store(request_handle, keys(1)),
        lambda: manager.prepare_load(request_handle, keys(1)),
        lambda: manager.touch(request_handle, keys(1)),
        lambda: manager.request_finished(request_handle),
        lambda: manager.request_state(request_handle),
        lambda: manager.set_positions(request_handle, keys(1), [1]),
    ):
        with pytest.raises(TypeError) as info:
            call()
        assert ": request: expected an int, got " in clear(info.value)


@pytest.mark.parametrize("request_handle", [-1, 2**64, 2**70, -(2**70)])
def test_a_request_handle_out_of_range(manager, request_handle):
    with pytest.raises(OverflowError) as info:
        manager.lookup(request_handle, keys(1))
    assert clear(info.value) == (
        f"kvtier_manager_lookup: request: {request_handle} is out of range 0..18446744073709551615 (uint64_t)"
    )


def test_numpy_integers_are_handles(manager):
    h, _ = manager.request_begin("r")
    assert manager.lookup(np.uint64(h), keys(1)).hits == 0


@pytest.mark.parametrize("success", [None, "yes", 2, 0.5, [True]], ids=repr)
def test_success_must_be_a_bool(manager, success):
    h, _ = manager.request_begin("r")
    manager.prepare_store(h, keys(1))
    with pytest.raises(TypeError) as info:
        manager.complete_store(h, keys(1), success)
    assert "kvtier_manager_complete_store: success: expected a bool" in clear(info.value)
    assert manager.complete_store(h, keys(1), np.bool_(True)).ready == 1


@pytest.mark.parametrize("tier", WRONG_SCALARS + [-1, 2**64], ids=repr)
def test_a_tier_index(manager, tier):
    with pytest.raises((TypeError, OverflowError)) as info:
        manager.read_tier_stats(tier)
    assert "kvtier_manager_read_tier_stats: tier: " in clear(info.value)


@pytest.mark.parametrize(
    "positions, message",
    [
        ([1.5], r"positions\[0\]: expected an int, got float"),
        ([None], r"positions\[0\]: expected an int, got NoneType"),
        ([-1], r"positions\[0\]: -1 is out of range"),
        ([2**64], r"positions\[0\]: 18446744073709551616 is out of range"),
        (np.array([1.5]), r"positions\[0\]: expected an int, got numpy.float64"),
        (5, r"positions: expected a sequence of ints, got int"),
        ("1", r"positions: expected a sequence of ints, got str"),
    ],
    ids=repr,
)
def test_positions(manager, positions, message):
    h, _ = manager.request_begin("r")
    with pytest.raises((TypeError, OverflowError), match=message) as info:
        manager.set_positions(h, keys(1), positions)
    clear(info.value)
    with kvtier.Primary(4) as p:
        p.request_begin("r")
        with pytest.raises((TypeError, OverflowError), match=message):
            p.set_positions(1, keys(1), positions)
    manager.set_positions(h, keys(2), np.array([3, 4], dtype=np.uint64))


KEY_CASES = [
    (None, "keys: expected a sequence of keys, got NoneType"),
    (12, "keys: expected a sequence of keys, got int"),
    (2**70, "keys: expected a sequence of keys, got int"),
    ("abc", "keys: expected a sequence of keys, got one str"),
    (b"abc", "keys: expected a sequence of keys, got one bytes"),
    ([None], "key 0: expected a bytes-like object .* got NoneType"),
    ([1.5], "key 0: .* got float"),
    (["abc"], "key 0: .* got str \\(encode a str first\\)"),
    ([2**70], "key 0: .* got int"),
    ([b"ok", [1, 2]], "key 1: .* got list"),
    ([[b"a"]], "key 0: .* got list"),
    ([np.uint64(7)], "key 0: .* got uint64 \\(a scalar"),
    ([np.array(5, dtype=np.uint8)], "key 0: .* got ndarray \\(a scalar"),
    ([np.array([b"x", 1], dtype=object)], "key 0: .* got ndarray holding Python objects"),
    ([np.zeros((2, 2), dtype=np.uint8)[:, 0]], "key 0: .* not C-contiguous"),
    ([memoryview(b"abcd")[::2]], "key 0: .* not C-contiguous"),
]


@pytest.mark.parametrize("given, message", KEY_CASES, ids=repr)
def test_wrong_keys(manager, given, message):
    h, _ = manager.request_begin("r")
    calls = [
        lambda: manager.lookup(h, given),
        lambda: manager.lookup_per_key(h, given),
        lambda: manager.prepare_store(h, given),
        lambda: manager.complete_store(h, given),
        lambda: manager.prepare_load(h, given),
        lambda: manager.complete_load(h, given),
        lambda: manager.touch(h, given),
    ]
    with kvtier.Primary(4) as p:
        ph = p.request_begin("r")
        calls += [lambda: p.lookup(given), lambda: p.prepare_store(ph, given), lambda: p.touch(ph, given)]
        for call in calls:
            with pytest.raises(TypeError, match=message) as info:
                call()
            clear(info.value)
    # The manager answers on.
    assert manager.lookup(h, keys(1)).hits == 0


def test_keys_of_any_item_size_are_their_bytes(manager):
    h, _ = manager.request_begin("r")
    k = array.array("I", [1, 2, 3])
    manager.prepare_store(h, [k])
    manager.complete_store(h, [bytes(k)])
    assert manager.lookup(h, [np.array([1, 2, 3], dtype=np.uint32)]).hits == 1


def test_tier_options(manager, tmp_path):
    with pytest.raises(TypeError, match=r"add_fs_tier: unknown option 'read_thread' \(the options are: .*read_threads"):
        manager.add_fs_tier(str(tmp_path), read_thread=2)
    with pytest.raises(TypeError, match="add_fs_tier: unknown option 'struct_size'"):
        manager.add_fs_tier(str(tmp_path), struct_size=8)
    with pytest.raises(TypeError, match="add_fs_tier: read_threads: expected an int, got str"):
        manager.add_fs_tier(str(tmp_path), read_threads="2")
    with pytest.raises(OverflowError, match="add_fs_tier: capacity_bytes: -1 is out of range"):
        manager.add_fs_tier(str(tmp_path), capacity_bytes=-1)
    with pytest.raises(TypeError, match="add_fs_tier: direct_io: expected a bool"):
        manager.add_fs_tier(str(tmp_path), direct_io="no")
    with pytest.raises(TypeError, match="directory: expected a str"):
        manager.add_fs_tier(None)
    with pytest.raises(TypeError, match="add_redis_tier: unknown option 'host'"):
        manager.add_redis_tier(host="localhost")
    with pytest.raises(TypeError, match="add_redis_tier: db: expected an int, got float"):
        manager.add_redis_tier(db=1.0)
    # After all that, the tier is added.
    assert manager.add_fs_tier(str(tmp_path), read_threads=1, write_threads=1) == 1


def test_request_parameters(manager):
    with pytest.raises(TypeError, match="params: expected a mapping"):
        manager.request_begin("r", params=[("a", "b")])
    with pytest.raises(TypeError, match="tier_filter: expected a sequence"):
        manager.request_begin("r", tier_filter=5)
    with pytest.raises(TypeError, match=r"tier_filter\[0\]: expected a TierMatcher"):
        manager.request_begin("r", tier_filter=[5])
    with pytest.raises(TypeError, match=r"tier_filter\[0\]: medium: expected an int, got str"):
        manager.request_begin("r", tier_filter=[("cpu", kvtier.Locality.ANY)])
    with pytest.raises(TypeError, match="name: expected a str, got int"):
        manager.request_begin(5)
    h, _ = manager.request_begin("r", tier_filter=[(kvtier.Medium.CPU, kvtier.Locality.LOCAL)])
    assert h


def test_job_results(manager):
    with pytest.raises(TypeError, match="complete_job: id: expected an int, got str"):
        manager.complete_job(1, "job")
    with pytest.raises(OverflowError, match="complete_job: bytes: -5 is out of range"):
        manager.complete_job(1, 0, bytes_moved=-5)
    with pytest.raises((TypeError, OverflowError)) as info:
        manager.complete_job("tier", 0)
    assert "kvtier_manager_complete_job: tier: expected an int, got str" == clear(info.value)
    # A real call with a job nobody gave: the library's answer.
    with pytest.raises(KvtierError):
        manager.complete_job(1, 0)


def test_primary_and_region_options(tmp_path, region_name):
    with pytest.raises(TypeError, match="Primary: capacity: expected an int, got str"):
        kvtier.Primary("many")
    with pytest.raises(OverflowError, match="Primary: capacity: -1 is out of range"):
        kvtier.Primary(-1)
    with pytest.raises(TypeError, match="Primary: kv_groups: expected a bool"):
        kvtier.Primary(4, kv_groups="yes")
    with pytest.raises(TypeError, match="Region: slot_count: expected an int, got NoneType"):
        kvtier.Region(region_name, None, 4096, directory=str(tmp_path))
    with pytest.raises(ValueError, match="open: expected one of 'create_or_join', 'create', 'join', got 'attach'"):
        kvtier.Region(region_name, 4, 4096, directory=str(tmp_path), open="attach")
    with pytest.raises(ValueError, match="prefault: expected one of"):
        kvtier.Region(region_name, 4, 4096, directory=str(tmp_path), prefault=["touch"])
    with kvtier.Region(region_name, 4, 4096, directory=str(tmp_path)) as region:
        with pytest.raises(TypeError, match="kvtier_region_set_lent_slots: count: expected an int"):
            region.set_lent_slots("all")
        with pytest.raises(TypeError, match="kvtier_region_worker_view: worker: expected an int"):
            region.worker_view(None, 0, 1)
