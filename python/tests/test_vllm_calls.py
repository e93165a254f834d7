"""The vLLM layer's calls made once per key or per step, on their fast
paths: a lookup's key is its own bytes whatever came before, keys that
are not ``bytes`` take the general path, a closed manager answers
``CLOSED``, and a touch copies keys only for a vLLM tier with a touch of
its own.

Needs the unpacked vLLM 0.33 wheel (``make test-vllm`` fetches it into
build/vllm; or ``VLLM_ROOT``); skipped without.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import unpacked_vllm_wheel

REPO = Path(__file__).resolve().parents[2]
VLLM_ROOT = unpacked_vllm_wheel()
sys.path.insert(0, str(REPO / "tools" / "vllm_tests"))
import vllm_stubs  # noqa: E402

from conftest import keys  # noqa: E402

import kvtier  # noqa: E402

# Imported under the stand-ins and forgotten after this file's tests (as
# in test_vllm_metrics.py).
_UNDER_STUBS = ("torch", "vllm", "kvtier.vllm.spec", "kvtier.vllm.manager", "kvtier.vllm.metrics",
                "kvtier.vllm.tiers", "kvtier.vllm.compat", "kvtier.vllm._vllm")


def _under_stubs(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _UNDER_STUBS)


@pytest.fixture(scope="module", autouse=True)
def vllm():
    vllm_stubs.install(str(VLLM_ROOT))
    from vllm.v1.kv_offload import base
    from vllm.v1.kv_offload.tiering import base as tiering_base

    from kvtier.vllm.manager import KvtierOffloadingManager

    globals().update(
        base=base,
        tiering_base=tiering_base,
        KvtierOffloadingManager=KvtierOffloadingManager,
    )
    yield
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, vllm_stubs._Finder)]
    vllm_stubs._installed = None
    for name in [n for n in sys.modules if _under_stubs(n)]:
        del sys.modules[name]
        # ``from kvtier.vllm import manager`` would still find the old one.
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            vars(sys.modules[parent]).pop(child, None)


def stored(manager, ctx, keys_):
    out = manager.prepare_store(keys_, ctx)
    manager.complete_store(out.keys_to_store, ctx)


@pytest.mark.parametrize("tiering", [False, True], ids=["untimed", "timed"])
def test_each_lookup_asks_for_its_own_keys_bytes_and_length(tiering):
    manager = KvtierOffloadingManager.create(8, tiering=tiering)
    ctx = base.ReqContext(req_id="a")
    [short] = keys(1)
    stored(manager, ctx, [short, b"L" * 20])
    HIT, MISS = base.LookupResult.HIT, base.LookupResult.MISS
    # A longer key that starts with the short one, then the short one,
    # then a longer one again: each is looked up with its own length.
    asked = [short + b"x" * 8, short, b"L" * 20, b"L" * 19, short, b"M" * 12]
    assert [manager.lookup(k, ctx) for k in asked] == [MISS, HIT, HIT, MISS, HIT, MISS]
    manager.shutdown()


@pytest.mark.parametrize("tiering", [False, True], ids=["untimed", "timed"])
def test_keys_other_than_bytes_take_the_general_path(tiering):
    manager = KvtierOffloadingManager.create(8, tiering=tiering)
    ctx = base.ReqContext(req_id="a")
    [key] = keys(1)
    stored(manager, ctx, [key])
    assert manager.lookup(bytearray(key), ctx) is base.LookupResult.HIT
    assert manager.lookup(memoryview(key), ctx) is base.LookupResult.HIT
    with pytest.raises(TypeError):
        manager.lookup("not bytes", ctx)
    for bad in (b"", b"k" * 65):
        with pytest.raises(kvtier.KvtierError) as info:
            manager.lookup(bad, ctx)
        assert info.value.status == kvtier.Status.INVALID_KEY
    assert manager.lookup(key, ctx) is base.LookupResult.HIT
    manager.shutdown()


@pytest.mark.parametrize("tiering", [False, True], ids=["untimed", "timed"])
def test_a_lookup_on_a_closed_manager_answers_closed(tiering):
    manager = KvtierOffloadingManager.create(8, tiering=tiering)
    ctx = base.ReqContext(req_id="a")
    manager.on_new_request(ctx)
    manager._m.close()
    with pytest.raises(kvtier.KvtierError) as info:
        manager.lookup(keys(1)[0], ctx)
    assert info.value.status == kvtier.Status.CLOSED


def mem_tier():
    """A vLLM secondary tier holding what it is given (vLLM's no-op touch)."""

    class Mem(tiering_base.SecondaryTierManager):
        def __init__(self):
            super().__init__(SimpleNamespace(), memoryview(bytearray(8)), "mem")
            self.keys, self.pending, self.touched = set(), [], []

        def lookup(self, key, req_context):
            return base.LookupResult.HIT if key in self.keys else base.LookupResult.MISS

        def submit_store(self, job):
            self.keys.update(job.keys)
            self.pending.append(job.job_id)

        def submit_load(self, job):
            self.pending.append(job.job_id)

        def get_finished_jobs(self):
            done, self.pending = self.pending, []
            return [tiering_base.JobResult(job_id=j, success=True) for j in done]

        def on_new_request(self, req_context):
            return base.RequestOffloadingContext()

        def drain_jobs(self):
            pass

    return Mem()


def test_a_vllm_tiers_touch_gets_keys_when_it_has_one_even_if_given_later(monkeypatch):
    from kvtier import tier as tier_module

    copies = []
    keys_bytes = tier_module.keys_bytes
    monkeypatch.setattr(tier_module, "keys_bytes", lambda c_keys, n: copies.append(n) or keys_bytes(c_keys, n))
    tier = mem_tier()
    manager = KvtierOffloadingManager.create(8, vllm_tiers=[tier])
    ctx = base.ReqContext(req_id="a")
    manager.on_new_request(ctx)
    hits = keys(2)
    stored(manager, ctx, hits)
    manager.prepare_load(hits, ctx)
    copies.clear()
    manager.touch(hits, ctx)  # vLLM's no-op touch: no keys copied for it
    assert copies == [] and tier.touched == []
    monkeypatch.setattr(tier, "touch", lambda keys_, req_context: tier.touched.append((list(keys_), req_context)))
    manager.touch(hits, ctx)
    assert tier.touched == [(hits, ctx)] and copies == [2]
    manager.complete_load(hits, ctx)
    assert manager._adapters[0].errors == []
    manager.shutdown()


def test_lookups_racing_a_close_answer_or_raise_closed():
    import threading

    for _ in range(10):
        manager = KvtierOffloadingManager.create(64, tiering=True)
        ctxs = [base.ReqContext(req_id=f"t{t}") for t in range(3)]
        for ctx in ctxs:
            manager.on_new_request(ctx)
        go = threading.Event()
        errors = []

        def work(ctx, t):
            go.wait()
            try:
                for key in keys(2000, start=t * 10000):
                    answer = manager.lookup(key, ctx)
                    if answer is not base.LookupResult.MISS:
                        errors.append(answer)
            except kvtier.KvtierError as e:
                errors.append(e.status)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        pool = [threading.Thread(target=work, args=(ctx, t)) for t, ctx in enumerate(ctxs)]
        for thread in pool:
            thread.start()
        go.set()
        manager._m.close()
        for thread in pool:
            thread.join()
        assert set(errors) <= {kvtier.Status.CLOSED}
        assert not manager._h.inside and manager._h.ptr is None
