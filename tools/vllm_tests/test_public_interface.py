"""Cases of our own, through the public manager interface only, run by
``run.py`` beside vLLM 0.33's test files against both sides (vLLM's
managers and kvtier's): the answers vLLM's managers give are the answers
kvtier's must give.

* ``test_failed_promotion_keeps_only_successful_chunks``: vLLM's item of
  that name (``tiering/test_tiering_offloading.py``) reads the private
  ``_request_load_sources``; here the same case is asked through
  ``get_load_source``, key by key.
* ``test_promotions_across_steps_rank_by_token_position``: a request whose
  promotions span steps, then memory pressure: vLLM's LRU policy ranks a
  promoted key by the token position the connector recorded on the request
  context before the lookup, so the request's keys go tail first, before
  a block stored later by another request.
* the cases after them restate vLLM's other items of that file that read
  the tiering manager's private state (``private_items.py`` names each).
"""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
import torch

from vllm.v1.kv_offload.base import (
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadPolicy,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.tiering.base import JobResult, TieringOffloadingMetrics, TransferJob
from vllm.v1.kv_offload.tiering.example.manager import ExampleSecondaryTierManager
from vllm.v1.kv_offload.tiering.manager import CPUPrimaryTierOffloadingManager, TieringOffloadingManager

from vllm.v1.metrics.cache_hit_source import CacheHitSource


def _region(num_chunks: int, row_bytes: int = 16) -> MagicMock:
    region = MagicMock()
    region.create_kv_memoryview.return_value = memoryview(
        torch.zeros((num_chunks, row_bytes), dtype=torch.int8).numpy()
    )
    return region


def _key(name: str):
    return make_offload_key(name.encode(), 0)


class _Tiered:
    """A tiering manager over a primary tier of `num_chunks` and one
    in-memory secondary tier (vLLM's example tier)."""

    def __init__(self, num_chunks: int, num_tiers: int = 1, enable_events: bool = False):
        region = _region(num_chunks)
        self.primary = CPUPrimaryTierOffloadingManager(
            num_chunks=num_chunks, mmap_region=region, enable_events=enable_events
        )
        self.tiers = [
            ExampleSecondaryTierManager(
                offloading_spec=MagicMock(), primary_kv_view=region.create_kv_memoryview(), tier_type="example"
            )
            for _ in range(num_tiers)
        ]
        self.tier = self.tiers[0]
        self.manager = TieringOffloadingManager(primary_tier=self.primary, secondary_tiers=self.tiers)

    def end_step(self) -> None:
        self.manager.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
        list(self.manager.take_events())

    def store(self, keys, ctx: ReqContext) -> list:
        """One store of `keys` for `ctx`, completed; the keys it evicted."""
        output = self.manager.prepare_store(keys, ctx)
        assert output is not None
        self.manager.complete_store(output.keys_to_store, ctx)
        return list(output.evicted_keys)


@pytest.mark.parametrize(
    "source",
    [CacheHitSource.EXTERNAL_UNSPECIFIED, CacheHitSource.DISK, CacheHitSource.P2P],
)
@pytest.mark.parametrize(
    ("arrived", "primary_after"),
    [
        ((0, 2), [LookupResult.HIT, LookupResult.MISS, LookupResult.HIT]),
        (None, [LookupResult.MISS, LookupResult.MISS, LookupResult.MISS]),
    ],
    ids=["partial", "legacy-full-failure"],
)
def test_failed_promotion_keeps_only_successful_chunks(monkeypatch, source, arrived, primary_after):
    """A promotion that failed, wholly or for some keys: the request's load
    source names the secondary tier for the keys that arrived only; the
    others are answered from the host, as any primary-tier key."""
    monkeypatch.setattr(ExampleSecondaryTierManager, "cache_hit_source", source)
    setup = _Tiered(5)
    ctx = ReqContext(req_id="test")
    chunks = [_key(str(i)) for i in range(3)]
    for chunk in chunks:
        setup.tier.chunks[chunk] = True

    def submit_failing(job: TransferJob) -> None:
        succeeded = None if arrived is None else tuple(chunks[i] for i in arrived)
        setup.tier.completed_jobs.append(JobResult(job_id=job.job_id, success=False, successful_keys=succeeded))

    monkeypatch.setattr(setup.tier, "submit_load", submit_failing)

    setup.manager.on_new_request(ctx)
    for chunk in chunks:
        assert setup.manager.lookup(chunk, ctx) is LookupResult.HIT_PENDING
    setup.end_step()  # the promotion job is submitted (and fails at once)
    setup.end_step()  # its result is applied

    assert [setup.primary.lookup(chunk, ctx) for chunk in chunks] == primary_after
    arrived_keys = set() if arrived is None else {chunks[i] for i in arrived}
    assert [setup.manager.get_load_source(chunk, ctx) for chunk in chunks] == [
        source if chunk in arrived_keys else CacheHitSource.HOST for chunk in chunks
    ]


def test_promotions_across_steps_rank_by_token_position():
    """Step 1: request R's lookup promotes x (position 16); y (position 32)
    is in no tier yet.  Step 2: request W stores b1 (no position); y has
    reached the secondary tier and R's lookup promotes it.  Step 3: a store
    of two new blocks into the full primary tier evicts R's keys tail
    first, y then x (R's rank is older than b1's), not x then b1 (as if
    each promotion were a new use)."""
    setup = _Tiered(3)
    x, y, b1, c1, c2 = (_key(name) for name in ("x", "y", "b1", "c1", "c2"))
    request = ReqContext(req_id="R")
    # The connector records the request's positions before its lookups.
    request.set_offload_key_position(x, 16)
    request.set_offload_key_position(y, 32)
    writer = ReqContext(req_id="W")
    later = ReqContext(req_id="V")

    # Step 1
    setup.tier.chunks[x] = True
    setup.manager.on_new_request(request)
    assert setup.manager.lookup(x, request) is LookupResult.HIT_PENDING
    assert setup.manager.lookup(y, request) is LookupResult.MISS
    setup.end_step()

    # Step 2
    setup.manager.on_new_request(writer)
    assert setup.store([b1], writer) == []
    setup.tier.chunks[y] = True
    assert setup.manager.lookup(x, request) is LookupResult.HIT
    assert setup.manager.lookup(y, request) is LookupResult.HIT_PENDING
    setup.end_step()

    # Step 3
    assert setup.manager.lookup(y, request) is LookupResult.HIT
    setup.manager.on_new_request(later)
    assert setup.store([c1, c2], later) == [y, x]
    assert [setup.primary.lookup(k, later) for k in (x, y, b1, c1, c2)] == [
        LookupResult.MISS,
        LookupResult.MISS,
        LookupResult.HIT,
        LookupResult.HIT,
        LookupResult.HIT,
    ]


# vLLM's items of test_tiering_offloading.py that also read the tiering
# manager's private state, restated: what that state decides is asked
# through the manager's answers, and what the manager asks of a secondary
# tier (the tier is the caller's object, its interface public) through the
# tier's own methods.


@pytest.mark.parametrize("succeeded", [True, False], ids=["success", "failure"])
def test_promotion_result_decides_the_primary_slots(monkeypatch, succeeded):
    """A promotion that succeeded leaves its keys in the primary tier; one
    that failed leaves their slots free, not the keys."""
    setup = _Tiered(5)
    ctx = ReqContext(req_id="test")
    keys = [_key(str(i)) for i in range(2)]
    for key in keys:
        setup.tier.chunks[key] = True
    if not succeeded:

        def submit_failing(job: TransferJob) -> None:
            setup.tier.completed_jobs.append(JobResult(job_id=job.job_id, success=False))

        monkeypatch.setattr(setup.tier, "submit_load", submit_failing)
    setup.manager.on_new_request(ctx)
    assert [setup.manager.lookup(key, ctx) for key in keys] == [LookupResult.HIT_PENDING] * 2
    setup.end_step()
    setup.end_step()
    expected = LookupResult.HIT if succeeded else LookupResult.MISS
    assert [setup.primary.lookup(key, ctx) for key in keys] == [expected] * 2
    if not succeeded:
        other = ReqContext(req_id="other")
        setup.manager.on_new_request(other)
        assert setup.store([_key(f"n{i}") for i in range(5)], other) == []


def test_tier_events_follow_the_primary_tiers(monkeypatch):
    """take_events gives the primary tier's events, then each secondary
    tier's, in the tiers' order."""
    setup = _Tiered(5, num_tiers=2)
    first = OffloadingEvent([_key("2")], Medium.STORAGE, removed=False)
    second = OffloadingEvent([_key("3")], Medium.STORAGE, removed=True)
    for tier, event in zip(setup.tiers, (first, second)):
        monkeypatch.setattr(tier, "take_events", MagicMock(return_value=[event]))
    events = list(setup.manager.take_events())
    assert [(list(e.keys), e.medium, e.removed) for e in events] == [
        ([_key("2")], Medium.STORAGE, False),
        ([_key("3")], Medium.STORAGE, True),
    ]
    for tier in setup.tiers:
        tier.take_events.assert_called_once_with()


def test_tier_events_follow_the_primary_tiers_own_events(monkeypatch):
    """With events on, the primary tier's events come first, then each
    secondary tier's own, unchanged."""
    setup = _Tiered(5, num_tiers=2, enable_events=True)
    ctx = ReqContext(req_id="test")
    setup.manager.on_new_request(ctx)
    output = setup.manager.prepare_store([_key("1")], ctx)
    assert output is not None
    setup.manager.complete_store([_key("1")], ctx, success=True)
    tier_event = OffloadingEvent([_key("9")], Medium.STORAGE, removed=True)
    monkeypatch.setattr(setup.tiers[1], "take_events", MagicMock(return_value=[tier_event]))
    events = list(setup.manager.take_events())
    assert [(list(e.keys), e.medium, e.removed) for e in events] == [
        ([_key("1")], Medium.CPU, False),
        ([_key("9")], Medium.STORAGE, True),
    ]
    assert events[-1] is tier_event


def test_cascade_pins_primary_keys_until_the_tiers_finish():
    """Keys being copied to the secondary tiers cannot be evicted until
    every tier has finished its copy."""
    setup = _Tiered(5, num_tiers=2)
    jobs: list[list] = [[], []]
    for tier, held in zip(setup.tiers, jobs):
        tier.submit_store = held.append  # the copies stay outstanding
    ctx = ReqContext(req_id="test")
    setup.manager.on_new_request(ctx)
    keys = [_key(str(i)) for i in range(3)]
    setup.store(keys, ctx)
    assert [len(held) for held in jobs] == [1, 1]
    newcomers = [_key(f"n{i}") for i in range(3)]  # needs one eviction
    assert setup.manager.prepare_store(newcomers, ctx) is None
    setup.tiers[0].completed_jobs.append(JobResult(job_id=jobs[0][0].job_id, success=True))
    assert setup.manager.prepare_store(newcomers, ctx) is None
    setup.tiers[1].completed_jobs.append(JobResult(job_id=jobs[1][0].job_id, success=True))
    output = setup.manager.prepare_store(newcomers, ctx)
    assert output is not None and len(output.evicted_keys) == 1


@pytest.mark.parametrize(
    "source",
    [CacheHitSource.EXTERNAL_UNSPECIFIED, CacheHitSource.DISK, CacheHitSource.P2P],
)
def test_promotion_serves_its_request_from_the_tier(monkeypatch, source):
    monkeypatch.setattr(ExampleSecondaryTierManager, "cache_hit_source", source)
    setup = _Tiered(5, num_tiers=2)
    ctx = ReqContext(req_id="test")
    keys = [_key(str(i)) for i in range(3)]
    for key in keys:
        setup.tier.chunks[key] = True
    submitted = MagicMock(wraps=setup.tier.submit_load)
    monkeypatch.setattr(setup.tier, "submit_load", submitted)
    setup.manager.on_new_request(ctx)
    assert [setup.manager.lookup(key, ctx) for key in keys] == [LookupResult.HIT_PENDING] * 3
    submitted.assert_not_called()
    setup.end_step()
    assert submitted.call_count == 1
    assert set(submitted.call_args.args[0].keys) == set(keys)
    setup.end_step()
    reduced = setup.manager.get_stats().reduce()
    assert reduced[f"{TieringOffloadingMetrics.PROMOTION_LATENCY}:('1:example', 'success')_count"] == 1
    assert [setup.primary.lookup(key, ctx) for key in keys] == [LookupResult.HIT] * 3
    assert [setup.manager.lookup(key, ctx) for key in keys] == [LookupResult.HIT] * 3
    assert [setup.manager.get_load_source(key, ctx) for key in keys] == [source] * 3
    later = ReqContext(req_id="later")
    setup.manager.on_new_request(later)
    assert [setup.manager.lookup(key, later) for key in keys] == [LookupResult.HIT] * 3
    assert [setup.manager.get_load_source(key, later) for key in keys] == ["host"] * 3


def test_touch_reaches_every_tier_and_renews_the_primary_keys(monkeypatch):
    setup = _Tiered(5, num_tiers=2)
    ctx = ReqContext(req_id="test")
    setup.manager.on_new_request(ctx)
    keys = [_key(str(i)) for i in range(3)]
    setup.store(keys, ctx)
    setup.end_step()
    setup.end_step()
    writer = ReqContext(req_id="writer")
    setup.manager.on_new_request(writer)
    setup.store([_key("w")], writer)
    touches = [MagicMock(wraps=tier.touch) for tier in setup.tiers]
    for tier, touch in zip(setup.tiers, touches):
        monkeypatch.setattr(tier, "touch", touch)
    setup.manager.touch(keys, ctx)
    for touch in touches:
        touch.assert_called_once_with(keys, ctx)
    # The touched keys are newer than w now, the head newest.
    later = ReqContext(req_id="later")
    setup.manager.on_new_request(later)
    evicted = setup.store([_key(f"n{i}") for i in range(5)], later)
    assert evicted == [_key("w"), keys[2], keys[1], keys[0]]


def test_promotions_held_after_a_reset_leave_primary_hits():
    setup = _Tiered(5)
    ctx = ReqContext(req_id="test")
    setup.manager.on_new_request(ctx)
    setup.manager.reset_cache()
    stored, elsewhere = _key("0"), _key("1")
    setup.store([stored], ctx)
    setup.tier.chunks[elsewhere] = True
    assert setup.manager.lookup(stored, ctx) is LookupResult.HIT
    assert setup.manager.lookup(elsewhere, ctx) is LookupResult.MISS


def _record_tier_finishes(monkeypatch, setup, calls: list) -> None:
    for index, tier in enumerate(setup.tiers, start=1):
        original_submit = tier.submit_store

        def submit_store(job, index=index, original_submit=original_submit):
            calls.append((f"submit_store_{index}", job.req_context.req_id))
            return original_submit(job)

        def finished(req_context, index=index):
            calls.append((f"finished_{index}", req_context.req_id))

        monkeypatch.setattr(tier, "submit_store", submit_store)
        monkeypatch.setattr(tier, "on_request_finished", finished)


def test_tiers_hear_of_a_finish_after_its_stores_reach_them(monkeypatch):
    setup = _Tiered(5, num_tiers=2)
    calls: list = []
    _record_tier_finishes(monkeypatch, setup, calls)
    ctx = ReqContext(req_id="delayed")
    keys = [_key(str(i)) for i in range(2)]
    setup.manager.on_new_request(ctx)
    assert setup.manager.prepare_store(keys, ctx) is not None
    setup.manager.on_request_finished(ctx)
    assert calls == []
    setup.manager.complete_store(keys, ctx, success=True)
    assert calls == [
        ("submit_store_1", "delayed"),
        ("submit_store_2", "delayed"),
        ("finished_1", "delayed"),
        ("finished_2", "delayed"),
    ]


def test_reset_forgets_a_requests_pending_store(monkeypatch):
    """A store pending at a reset no longer holds the request's finish."""
    setup = _Tiered(5, num_tiers=2)
    calls: list = []
    _record_tier_finishes(monkeypatch, setup, calls)
    ctx = ReqContext(req_id="resumed")
    setup.manager.on_new_request(ctx)
    assert setup.manager.prepare_store([_key("0"), _key("1")], ctx) is not None
    setup.manager.reset_cache()
    assert calls == []
    resumed = [_key("2"), _key("3")]
    assert setup.manager.prepare_store(resumed, ctx) is not None
    setup.manager.complete_store(resumed, ctx, success=True)
    setup.manager.on_request_finished(ctx)
    assert [c for c in calls if c[0].startswith("finished")] == [("finished_1", "resumed"), ("finished_2", "resumed")]


def test_request_policy_follows_the_tiers(monkeypatch):
    setup = _Tiered(5, num_tiers=2)
    plain = ReqContext(req_id="plain")
    assert setup.manager.on_new_request(plain).policy == OffloadPolicy.CHUNK_LEVEL
    setup.manager.on_request_finished(plain)
    monkeypatch.setattr(
        setup.tier, "on_new_request", lambda req_context: RequestOffloadingContext(policy=OffloadPolicy.REQUEST_LEVEL)
    )
    whole = ReqContext(req_id="whole")
    assert setup.manager.on_new_request(whole).policy == OffloadPolicy.REQUEST_LEVEL
    setup.manager.on_request_finished(whole)


def test_reset_drops_unsubmitted_promotions_and_empties_the_primary(monkeypatch):
    setup = _Tiered(5, num_tiers=2)
    ctx = ReqContext(req_id="test")
    setup.manager.on_new_request(ctx)
    keys = [_key(str(i)) for i in range(3)]
    setup.store(keys, ctx)
    staged = _key("99")
    setup.tier.chunks[staged] = True
    pending = ReqContext(req_id="pending")
    assert setup.manager.lookup(staged, pending) is LookupResult.HIT_PENDING
    submitted = MagicMock(wraps=setup.tier.submit_load)
    monkeypatch.setattr(setup.tier, "submit_load", submitted)
    drains = [MagicMock(wraps=tier.drain_jobs) for tier in setup.tiers]
    for tier, drain in zip(setup.tiers, drains):
        monkeypatch.setattr(tier, "drain_jobs", drain)

    setup.manager.reset_cache()

    for drain in drains:
        drain.assert_called_once()
    assert [setup.primary.lookup(key, ctx) for key in keys] == [LookupResult.MISS] * 3
    setup.end_step()
    submitted.assert_not_called()
    assert setup.manager.get_load_source(staged, pending) == "host"
    # Every chunk is free again.
    assert setup.store([_key(f"n{i}") for i in range(5)], ctx) == []
