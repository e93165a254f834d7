"""Secondary tiers written in Python, behind the C vtable."""

import kvtier
from kvtier import JobDirection, JobResult, LookupResult, OffloadPolicy

from conftest import keys


class MemoryTier(kvtier.Tier):
    """Keeps the keys it was asked to store; finishes every job at the next poll."""

    name = "memory"

    def __init__(self):
        super().__init__()
        self.stored: set[bytes] = set()
        self.jobs = []
        self.done: list[JobResult] = []

    def lookup(self, key, request):
        return LookupResult.HIT if key in self.stored else LookupResult.MISS

    def submit_store(self, job):
        self.jobs.append(job)
        self.stored.update(job.keys)
        self.done.append(JobResult(job.id))

    def submit_load(self, job):
        self.jobs.append(job)
        self.done.append(JobResult(job.id, bytes=4096 * len(job.keys)))

    def poll_finished(self):
        done, self.done = self.done, []
        return done

    def stats(self):
        return {"stored": len(self.stored), "jobs": (len(self.jobs), True)}


def test_cascade_and_promotion_through_a_python_tier():
    k = keys(2)
    tier = MemoryTier()
    with kvtier.Manager(2, promotion_answer="hit_pending", kv_groups=True) as m:
        assert m.add_tier(tier) == 1
        h, _ = m.request_begin("writer")
        m.prepare_store(h, k)
        m.complete_store(h, k)
        assert tier.stored == set(k)
        [cascade] = tier.jobs
        assert cascade.direction == JobDirection.STORE and cascade.request.name == "writer"
        m.schedule_end()
        m.schedule_end()
        m.reset_cache()
        m.reset_flushed()
        assert m.lookup(h, k[:1]).stop == LookupResult.HIT_PENDING  # promotion staged
        m.schedule_end()  # submitted
        m.schedule_end()  # finished
        assert tier.jobs[-1].direction == JobDirection.LOAD
        assert m.lookup(h, k[:1]).hits == 1
        stats = m.read_tier_stats(1)
        assert stats["promotion_jobs"].value == 1 and stats["stored"].value == 2
        assert stats["jobs"] == kvtier.TierStat(2.0, True)
        # Loaded, then counted once the request is let go: served by the tier.
        m.prepare_load(h, k[:1])
        m.complete_load(h, k[:1])
        m.request_finished(h)
        assert m.read_tier_stats(1)["request_blocks_served"] == kvtier.TierStat(1.0, True)
        assert m.read_stats()["request_blocks_served_primary"] == 0


class FailingTier(MemoryTier):
    def on_new_request(self, request):
        raise RuntimeError("boom")


def test_an_exception_in_a_tier_is_a_callback_error():
    tier = FailingTier()
    with kvtier.Manager(2) as m:
        m.add_tier(tier)
        _, policy = m.request_begin("r")
        assert policy == OffloadPolicy.BLOCK_LEVEL
        assert isinstance(tier.errors[0], RuntimeError)
        assert m.read_tier_stats(1)["callback_errors"].value == 1


def test_a_touch_copies_keys_only_for_a_tier_with_its_own_touch(monkeypatch):
    from kvtier import tier as tier_module

    copies = []
    keys_bytes = tier_module.keys_bytes
    monkeypatch.setattr(tier_module, "keys_bytes", lambda c_keys, n: copies.append(n) or keys_bytes(c_keys, n))
    k = keys(2)
    tier = MemoryTier()
    with kvtier.Manager(4) as m:
        m.add_tier(tier)
        h, _ = m.request_begin("r")
        m.prepare_store(h, k)
        m.complete_store(h, k)
        copies.clear()
        m.prepare_load(h, k)
        m.touch(h, k)  # Tier's no-op: nothing to copy
        assert copies == []
        touched = []
        tier.touch = lambda keys_, request: touched.append((list(keys_), request.name))  # replaced later
        m.touch(h, k)
        m.complete_load(h, k)
        assert touched == [(k, "r")] and copies == [2]
        assert tier.errors == [] and m.read_tier_stats(1)["callback_errors"].value == 0


class RecordingTier(MemoryTier):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_new_request(self, request):
        self.seen.append(request)
        return OffloadPolicy.BLOCK_LEVEL


def test_callbacks_see_each_requests_own_name_and_parameters():
    tier = RecordingTier()
    with kvtier.Manager(4) as m:
        m.add_tier(tier)
        names = [f"r{i}" for i in range(4200)]  # more than the adapter keeps by name
        for name in names:
            h, _ = m.request_begin(name)
            m.request_finished(h)
        h, _ = m.request_begin("r7", params={"k": "v"})
        m.request_finished(h)
        h, _ = m.request_begin("r7")
        m.request_finished(h)
    assert [r.name for r in tier.seen] == names + ["r7", "r7"]
    assert [dict(r.params) for r in tier.seen[-3:]] == [{}, {"k": "v"}, {}]
    assert tier.seen[-1] == kvtier.TierRequest("r7")
