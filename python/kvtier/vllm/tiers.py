"""vLLM secondary tiers (``SecondaryTierManager``) as kvtier tiers: each
runs unchanged behind the C vtable of one kvtier manager.

The adapter turns kvtier's callbacks into the tier's methods: a lookup gets
the request's own ``ReqContext``, a job becomes a ``TransferJob`` (its
``chunk_ids`` the primary slots), finished ``JobResult``s go back as
kvtier job results (a partial promotion's ``successful_keys`` included;
the keys of a failed promotion that did not arrive leave the request's
load sources, as vLLM's manager drops them),
and the tier's ``OffloadingEvent``s become kvtier events of its tier index.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from .. import types as kt
from ..tier import Job, JobResult, Tier, TierRequest
from . import _vllm as v
from .metrics import StatsReader

_LOOKUP = {
    v.LookupResult.MISS: kt.LookupResult.MISS,
    v.LookupResult.HIT: kt.LookupResult.HIT,
    v.LookupResult.RETRY: kt.LookupResult.RETRY,
    # A tier writing the block answers "ask again", as RETRY.
    v.LookupResult.HIT_PENDING: kt.LookupResult.RETRY,
}
_VLLM_NO_TOUCH = v.SecondaryTierManager.touch
MEDIUM_TO_KVTIER = {None: kt.Medium.ANY, v.Medium.CPU: kt.Medium.CPU, v.Medium.STORAGE: kt.Medium.STORAGE}
LOCALITY_TO_KVTIER = {
    None: kt.Locality.ANY,
    v.Locality.LOCAL: kt.Locality.LOCAL,
    v.Locality.REMOTE: kt.Locality.REMOTE,
}


class AdapterOwner(Protocol):
    """What an adapter calls on its manager (``KvtierOffloadingManager``),
    declared here so that this module does not import the manager's."""

    @property
    def _metrics(self) -> StatsReader: ...

    @property
    def _step_context(self) -> Any: ...

    def _context_for(self, name: str) -> Any: ...

    def _forget_name(self, name: str) -> None: ...

    def _record_load_source(self, name: str, keys: Iterable[bytes], source: Any) -> None: ...

    def _drop_load_source(self, name: str, keys: Iterable[bytes], source: Any) -> None: ...


class VllmTierAdapter(Tier):
    """One vLLM ``SecondaryTierManager`` as a kvtier `Tier`."""

    def __init__(self, tier: v.SecondaryTierManager, owner: AdapterOwner, index: int):
        super().__init__()
        self.vllm_tier = tier
        self.owner = owner
        self.index = index  # 1 for the first secondary tier
        self.name = f"{index}:{tier.tier_type}"
        self.medium = MEDIUM_TO_KVTIER.get(tier.medium, kt.Medium.ANY)
        self.locality = LOCALITY_TO_KVTIER.get(getattr(tier, "locality", None), kt.Locality.ANY)
        self.last = False  # the last tier: request clean-up follows its finish callback
        self._submitted: dict[int, tuple[bool, float, list[bytes], str]] = {}
        self._retrying: dict[tuple[str, bytes], float] = {}  # first RETRY of a request's key

    def _ctx(self, request: TierRequest) -> v.ReqContext:
        return self.owner._context_for(request.name)

    def lookup(self, key: bytes, request: TierRequest) -> kt.LookupResult:
        start = time.monotonic()
        answer = self.vllm_tier.lookup(key, self._ctx(request))
        now = time.monotonic()
        metrics = self.owner._metrics
        if answer is v.LookupResult.RETRY:
            self._retrying.setdefault((request.name, key), start)
        else:
            metrics.observe_lookup(self.name, now - start)
            first = self._retrying.pop((request.name, key), None)
            if first is not None:
                metrics.observe_lookup(self.name, now - first, resolved_later=True)
        return _LOOKUP[answer]

    def _transfer(self, job: Job, promotion: bool) -> v.TransferJob:
        ctx = self._ctx(job.request)
        now = time.monotonic()
        self._submitted[job.id] = (promotion, now, job.keys, job.request.name)
        return v.TransferJob(
            job_id=job.id,
            keys=job.keys,
            chunk_ids=np.array(job.slots, dtype=np.int64),
            is_promotion=promotion,
            req_context=ctx,
            submit_time=now,
        )

    def submit_store(self, job: Job) -> None:
        self.vllm_tier.submit_store(self._transfer(job, False))

    def submit_load(self, job: Job) -> None:
        source = self.vllm_tier.cache_hit_source
        self.owner._record_load_source(job.request.name, job.keys, source)
        try:
            self.vllm_tier.submit_load(self._transfer(job, True))
        except BaseException:
            # kvtier fails a job whose submit failed: none of its keys arrive.
            self._submitted.pop(job.id, None)
            self.owner._drop_load_source(job.request.name, job.keys, source)
            raise

    def poll_finished(self) -> Iterable[JobResult]:
        out = []
        now = time.monotonic()
        for result in self.vllm_tier.get_finished_jobs():
            arrived = None if result.successful_keys is None else list(result.successful_keys)
            submitted = self._submitted.pop(result.job_id, None)
            if submitted is not None:
                promotion, start, keys, name = submitted
                self.owner._metrics.on_job_finished(self, promotion, now - start, result, keys, name)
                if promotion and not result.success:
                    failed = _not_arrived(keys, arrived)
                    self.owner._drop_load_source(name, failed, self.vllm_tier.cache_hit_source)
            out.append(
                JobResult(
                    id=result.job_id,
                    success=bool(result.success),
                    succeeded_keys=arrived,
                    bytes=int(result.transfer_bytes or 0),
                    duration_ns=int((result.transfer_time or 0.0) * 1e9),
                )
            )
        return out

    @property
    def touch(self) -> Any:  # type: ignore[override]
        """`Tier`'s own no-op while the vLLM tier's touch is vLLM's no-op
        (asked at each touch: a tier's method may be replaced later), so
        that no keys are copied for it; else the forwarding call."""
        if getattr(self.vllm_tier.touch, "__func__", None) is _VLLM_NO_TOUCH:
            return Tier.touch.__get__(self)
        return self._touch_tier

    def _touch_tier(self, keys: Sequence[bytes], request: TierRequest) -> None:
        self.vllm_tier.touch(list(keys), self._ctx(request))

    def on_new_request(self, request: TierRequest) -> kt.OffloadPolicy:
        answer = self.vllm_tier.on_new_request(self._ctx(request))
        if answer is not None and answer.policy == v.OffloadPolicy.REQUEST_LEVEL:
            return kt.OffloadPolicy.REQUEST_LEVEL
        return kt.OffloadPolicy.BLOCK_LEVEL

    def on_request_finished(self, request: TierRequest) -> None:
        if self._retrying:
            for pending in [k for k in self._retrying if k[0] == request.name]:
                del self._retrying[pending]
        try:
            self.vllm_tier.on_request_finished(self._ctx(request))
        finally:
            if self.last:
                self.owner._forget_name(request.name)

    def on_schedule_end(self) -> None:
        self.vllm_tier.on_schedule_end(self.owner._step_context)

    def has_pending_work(self) -> bool:
        return bool(self.vllm_tier.has_pending_work())

    def drain(self) -> None:
        self.vllm_tier.drain_jobs()

    def shutdown(self) -> None:
        self.vllm_tier.shutdown()


def _not_arrived(keys: Sequence[bytes], arrived: Iterable[bytes] | None) -> list[bytes]:
    """The keys of a failed promotion job that did not arrive, as kvtier
    applies its result: those outside `arrived` (the tier's successful
    keys), or every key when the tier named none or a key not in the job."""
    if not arrived:
        return list(keys)
    arrived = set(arrived)
    if not arrived.issubset(keys):
        return list(keys)
    return [key for key in keys if key not in arrived]


def tier_event_medium(tier: Any) -> v.Medium | None:
    """The vLLM medium a tier's events carry."""
    return tier.medium
