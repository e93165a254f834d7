"""Pin sets and block drops from Python: a held block survives evictions,
the bound and bad names raise with nothing changed, and a drop selects
blocks by key prefix and tiers by layout fingerprint."""

import pytest

import kvtier
from kvtier import Status

CONFIG = {
    "block_bytes": 32,
    "primary": {"capacity": 8},
    "pinning": {"max_share": 0.25},
    "layout_fingerprint": "model-a",
}


def store(m, ks):
    h, _ = m.request_begin("s")
    m.prepare_store(h, ks)
    m.complete_store(h, ks)
    m.request_finished(h)


def resident(m, k):
    h, _ = m.request_begin("probe")
    hit = m.lookup(h, [k]).hits == 1
    m.request_finished(h)
    return hit


def test_a_pin_set_holds_its_blocks_until_unpinned():
    with kvtier.Manager.from_json(CONFIG) as m:
        store(m, [b"a%d" % i for i in range(8)])
        assert m.pin_set("system", [b"a0", b"a1", b"zz"]) == kvtier.PinOutcome(2, 1)
        assert m.pin_sets() == [kvtier.PinSet("system", 0, 2, 64)]
        store(m, [b"b%d" % i for i in range(6)])
        assert resident(m, b"a0") and resident(m, b"a1")
        assert m.unpin_set("system") == 2
        assert m.pin_sets() == []


def test_the_bound_and_bad_names_raise_and_change_nothing():
    with kvtier.Manager.from_json(CONFIG) as m:
        store(m, [b"a0", b"a1", b"a2"])
        m.pin_set("one", [b"a0", b"a1"])
        with pytest.raises(kvtier.KvtierError) as info:
            m.pin_set("two", [b"a2"])
        assert info.value.status == Status.NO_SPACE and "pinning.max_share" in info.value.message
        with pytest.raises(kvtier.KvtierError) as info:
            m.pin_set("", [b"a2"])
        assert info.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(kvtier.KvtierError) as info:
            m.unpin_set("nope")
        assert info.value.status == Status.NOT_FOUND
        assert m.pin_sets() == [kvtier.PinSet("one", 0, 2, 64)]


def test_drop_blocks_by_prefix_and_fingerprint():
    with kvtier.Manager.from_json(CONFIG) as m:
        store(m, [b"a0", b"a1", b"b0"])
        m.pin_set("keep", [b"a1"])
        assert m.drop_blocks(b"a", fingerprint="other") == kvtier.DropReport(0, 0, 0)
        assert m.drop_blocks(b"a", fingerprint="model-a") == kvtier.DropReport(1, 1, 0)
        assert not resident(m, b"a0") and resident(m, b"b0")
        assert m.drop_blocks() == kvtier.DropReport(1, 1, 0)
