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
"""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
import torch

from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob
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

    def __init__(self, num_chunks: int):
        region = _region(num_chunks)
        self.primary = CPUPrimaryTierOffloadingManager(num_chunks=num_chunks, mmap_region=region)
        self.tier = ExampleSecondaryTierManager(
            offloading_spec=MagicMock(), primary_kv_view=region.create_kv_memoryview(), tier_type="example"
        )
        self.manager = TieringOffloadingManager(primary_tier=self.primary, secondary_tiers=[self.tier])

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
