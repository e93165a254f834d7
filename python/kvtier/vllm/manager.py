"""vLLM 0.33's ``OffloadingManager`` over one kvtier manager.

`KvtierOffloadingManager` is the scheduler side of kvtier's offloading
spec: every call vLLM's offloading connector makes on its manager goes to
one ``kvtier_manager`` (the primary tier plus its secondary tiers), through
the C API.  What the Python layer itself adds:

* requests: vLLM names a request by its ``ReqContext``; the first call
  naming a request begins it in kvtier (``on_new_request`` or any other),
  and its handle is kept by request id until kvtier is done with it;
* token positions: the positions vLLM's scheduler recorded on the context
  (``ReqContext.get_offload_key_position``) reach kvtier before a key's
  lookup (those recorded since the last lookup's, in one call, so that a
  promotion ranks by its key's position as vLLM's does) and with the keys
  of every ``prepare_store`` and ``prepare_load``, each position once;
  keys carry their KV group (kvtier's ``kv_groups``);
* events: kvtier's event batches become ``OffloadingEvent``s (tier 0 the
  primary, ``ownership`` None; a secondary tier's carry its label), and a
  failed store's slots released before they were ever announced give a
  ``metadata_only`` removal, as vLLM's managers do;
* statistics: kvtier's cumulative counters become vLLM's per-read values
  (`kvtier.vllm.metrics`);
* a load completed after its request finished: kvtier ends a request's
  load calls with its finish, vLLM may still complete loads afterwards, so
  the finish is passed on once the request's loads are complete.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import Manager
from .._calls import take_events
from .._ffi import ffi, lib
from .._keys import MAX_KEY_LEN, key_buffer, key_bufs_bytes
from .._scratch import OneKey, acquire, release
from .._scratch import one_keys as _one_keys
from ..errors import KvtierError, Status, check, encode_str
from ..manager import TierMatcher
from ..types import EventKind
from ..types import Locality as KtLocality
from ..types import Medium as KtMedium
from ..types import OffloadPolicy as KtOffloadPolicy
from . import _vllm as v
from .metrics import PRIMARY_LABEL, StatsReader
from .tiers import LOCALITY_TO_KVTIER, MEDIUM_TO_KVTIER, VllmTierAdapter

__all__ = ["KvtierOffloadingManager", "TierSpec"]

# kvtier's answers, as vLLM's (index: KVTIER_LOOKUP_* value).
_ANSWERS = (v.LookupResult.MISS, v.LookupResult.HIT, v.LookupResult.HIT_PENDING, v.LookupResult.RETRY)
_HIT = v.LookupResult.HIT
_MEDIUM_FROM_KVTIER = {KtMedium.CPU: v.Medium.CPU, KtMedium.STORAGE: v.Medium.STORAGE}
_LOCALITY_FROM_KVTIER = {KtLocality.LOCAL: v.Locality.LOCAL, KtLocality.REMOTE: v.Locality.REMOTE}
_PROBE_NAME = "kvtier.vllm/primary-probe"
_EVENT_CAPACITY = 1 << 16
_LOOKUP_PER_KEY = lib.kvtier_manager_lookup_per_key
_PREPARE_LOAD = lib.kvtier_manager_prepare_load
_TOUCH = lib.kvtier_manager_touch
_COMPLETE_LOAD = lib.kvtier_manager_complete_load
_PREPARE_STORE = lib.kvtier_manager_prepare_store
_COMPLETE_STORE = lib.kvtier_manager_complete_store
_KEYS_IGNORED = int(Status.KEYS_IGNORED)
_REQUEST_BEGIN = lib.kvtier_manager_request_begin
_REQUEST_FINISHED = lib.kvtier_manager_request_finished
_REQUEST_LEVEL = int(KtOffloadPolicy.REQUEST_LEVEL)
_CLEARED, _REMOVED = int(EventKind.CLEARED), int(EventKind.REMOVED)
_monotonic = time.monotonic


def _slots_spec(slots: Any, n: int) -> v.CPULoadStoreSpec:
    """The first `n` slots of a ``uint32_t[]`` as vLLM's spec (which copies
    them into its own int32 array)."""
    return v.CPULoadStoreSpec(np.frombuffer(ffi.buffer(slots, 4 * n), dtype=np.uint32))


def _other_key(key: Any) -> tuple[Any, Any]:
    """A ``kvtier_key *`` over a key that is not ``bytes`` of 1 to
    `MAX_KEY_LEN` bytes (read in place; a ``TypeError`` unless bytes-like),
    and what keeps its bytes in place until the call returns."""
    data, length = key_buffer(key)
    return ffi.new("kvtier_key *", (data, length)), data


@dataclass
class TierSpec:
    """A secondary tier the manager is built with: a vLLM
    ``SecondaryTierManager`` (run through the vtable), or a built-in kvtier
    tier given as ``{"type": "fs" | "redis", ...options}``."""

    vllm_tier: Any = None
    builtin: dict[str, Any] | None = None


class _Request:
    """A request's state in this layer (a plain class: one is made per request)."""

    __slots__ = ("handle", "name", "ctx", "policy", "loads", "stores", "pending", "tiers_pending", "positions",
                 "recorded", "swept")

    def __init__(self, handle: int, name: str, ctx: Any, policy: Any):
        self.handle = handle
        self.name = name
        self.ctx = ctx
        self.policy = policy
        self.loads = 0  # keys pinned by prepare_load and not completed
        self.stores = 0  # keys planned by prepare_store and not completed
        self.pending: set[bytes] = set()  # planned, not completed (events on)
        self.tiers_pending = False  # finished, the secondary tiers not yet told
        self.positions: dict[bytes, int] = {}  # given to kvtier
        self.recorded: Any = None  # the context's positions last swept, and how many
        self.swept = 0


def build_kvtier_manager(
    num_chunks: int,
    *,
    cache_policy: str = "lru",
    enable_events: bool = False,
    store_threshold: int = 0,
    max_tracker_size: int = 64_000,
    builtin_tiers: Sequence[dict[str, Any]] = (),
    region: Any = None,
    progress: Mapping[str, Any] | None = None,
    layout_fingerprint: str | None = None,
) -> tuple[Manager, list[str]]:
    """A kvtier manager with vLLM's CPU-manager options (0.33's behaviour:
    HIT_PENDING for started promotions, keys with KV groups) and the
    built-in tiers of `builtin_tiers` (``{"type": "fs", "directory": ...}``
    or ``{"type": "redis", ...}``); and the tiers' labels.  A zero-chunk
    cache (vLLM allows one) is a one-slot kvtier manager that
    `KvtierOffloadingManager` never stores into.  `progress` None follows
    vLLM 0.33 (nothing held, no wait bound); a mapping turns kvtier's
    holds and wait bound on (``{"hold": True, "wait_steps": 16,
    "wait_ms": 0}``, each key optional).  `layout_fingerprint` is given to
    every built-in tier that names none of its own (``layout_fingerprint``
    in its options), so an fs directory or redis namespace holding another
    model's or layout's blocks is refused rather than served."""
    if progress is not None and not isinstance(progress, Mapping):
        raise TypeError(f"kvtier_progress: expected a mapping, got {type(progress).__name__}")
    progress = dict(progress) if progress is not None else {"hold": False, "wait_steps": 0, "wait_ms": 0}
    unknown = set(progress) - {"hold", "wait_steps", "wait_ms"}
    if unknown:
        raise ValueError(f"kvtier_progress: unknown keys {sorted(unknown)}")
    manager = Manager(
        max(num_chunks, 1),
        policy=cache_policy,
        store_threshold=store_threshold,
        admission_table_size=max_tracker_size,
        event_capacity=_EVENT_CAPACITY if enable_events else 0,
        promotion_answer="hit_pending",
        kv_groups=True,
        progress_hold=bool(progress.get("hold", True)),
        progress_wait_steps=int(progress.get("wait_steps", 16)),
        progress_wait_ms=int(progress.get("wait_ms", 0)),
        region=region,
    )
    labels = []
    for tier in builtin_tiers:
        options = dict(tier)
        kind = options.pop("type")
        if layout_fingerprint is not None and kind in ("fs", "redis"):
            options.setdefault("layout_fingerprint", layout_fingerprint)
        if kind == "fs":
            manager.add_fs_tier(options.pop("directory"), **options)
        elif kind == "redis":
            manager.add_redis_tier(**options)
        else:
            raise ValueError(f"unknown built-in kvtier tier type {kind!r}")
        labels.append(f"{len(labels) + 1}:{kind}")
    return manager, labels


class KvtierOffloadingManager(v.OffloadingManager):
    """vLLM's ``OffloadingManager`` interface over one `kvtier.Manager`.

    Build it with `KvtierOffloadingManager.create` (or through
    `kvtier.vllm.KvtierOffloadingSpec`): `num_chunks` primary slots,
    `cache_policy` ``"lru"`` or ``"arc"``, `store_threshold` and
    `max_tracker_size` as vLLM's CPU manager, `enable_events`, the vLLM
    secondary tiers and built-in tiers in `tiers`, and the `region` the
    built-in tiers copy through.  vLLM's tiering metric families are
    reported with secondary tiers, with `tiering` (vLLM's tiering manager)
    or with `tier_metrics` (kvtier's spec: with no secondary tier, the
    primary tier's lookups); ``config_info`` has vLLM's tiering shape (a
    ``tier`` label) with secondary tiers or `tiering`.
    """

    def __init__(
        self,
        manager: Manager,
        *,
        num_chunks: int,
        store_threshold: int = 0,
        enable_events: bool = False,
        info: Any = None,
        vllm_tiers: Sequence[Any] = (),
        tier_labels: Sequence[str] = (),
        tiering: bool = False,
        tier_metrics: bool = False,
    ):
        self._m = manager
        self._h = manager._h  # its guarded handle, for the calls made once per key
        self.medium = v.Medium.CPU
        self._num_chunks = num_chunks
        self._events_on = enable_events
        self._config_info = info.as_config_info() if info is not None else {}
        self._reqs: dict[str, _Request] = {}
        self._finishing: dict[str, list[_Request]] = {}
        self._by_name: dict[str, Any] = {}
        self._duplicates = itertools.count(1)
        self._lock_obj = threading.Lock()
        self._event_buffer: list[v.OffloadingEvent] = []
        self._load_sources: dict[str, dict[bytes, Any]] = {}
        self._step_context = v.ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        self._probe: int | None = None
        self._tiering = tiering
        self._adapters: list[VllmTierAdapter] = []
        self._at_shutdown: list[Any] = []
        self._tier_labels = list(tier_labels)
        self._metrics = StatsReader(self, store_threshold, tiering or tier_metrics)
        # `lookup` times the primary tier's answers, and may pass the
        # handle's guard inline (it takes no lock).
        self._timed_fast = self._metrics.tiering and self._h.fast
        for tier in vllm_tiers:
            adapter = VllmTierAdapter(tier, self, len(self._tier_labels) + 1)
            adapter.index = manager.add_tier(adapter)
            self._adapters.append(adapter)
            self._tier_labels.append(adapter.name)
        if self._adapters:
            self._adapters[-1].last = True
        # vLLM's ``TieringOffloadingManager.secondary_tiers``: the vLLM
        # tiers this manager runs through the vtable, in tier order (the
        # built-in tiers are kvtier's own, not vLLM objects).
        self.secondary_tiers: list[Any] = [a.vllm_tier for a in self._adapters]

    @classmethod
    def create(cls, num_chunks: int, **options: Any) -> KvtierOffloadingManager:
        """A manager over a new kvtier manager built with these options
        (see `build_kvtier_manager`)."""
        self = cls.__new__(cls)
        self._setup(num_chunks, **options)
        return self

    def _setup(
        self,
        num_chunks: int,
        *,
        cache_policy: str = "lru",
        enable_events: bool = False,
        store_threshold: int = 0,
        max_tracker_size: int = 64_000,
        info: Any = None,
        vllm_tiers: Sequence[Any] = (),
        builtin_tiers: Sequence[dict[str, Any]] = (),
        region: Any = None,
        tiering: bool = False,
        tier_metrics: bool = False,
        progress: Mapping[str, Any] | None = None,
        layout_fingerprint: str | None = None,
    ) -> None:
        manager, labels = build_kvtier_manager(
            num_chunks,
            cache_policy=cache_policy,
            enable_events=enable_events,
            store_threshold=store_threshold,
            max_tracker_size=max_tracker_size,
            builtin_tiers=builtin_tiers,
            region=region,
            progress=progress,
            layout_fingerprint=layout_fingerprint,
        )
        KvtierOffloadingManager.__init__(
            self,
            manager,
            num_chunks=num_chunks,
            store_threshold=store_threshold,
            enable_events=enable_events,
            info=info,
            vllm_tiers=vllm_tiers,
            tier_labels=labels,
            tiering=tiering or bool(vllm_tiers) or bool(builtin_tiers),
            tier_metrics=tier_metrics,
        )

    # ------------------------------------------------------------------
    # Requests
    # ------------------------------------------------------------------

    @property
    def lock(self) -> threading.Lock:
        return self._lock_obj

    def _begin(self, ctx: Any) -> _Request:
        name = ctx.req_id
        tier_filter = None
        load_filter = getattr(ctx, "load_tier_filter", v.TierFilter.ALL)
        if load_filter is not v.TierFilter.ALL:
            tier_filter = [
                TierMatcher(MEDIUM_TO_KVTIER.get(m.medium, KtMedium.ANY), LOCALITY_TO_KVTIER.get(m.locality, KtLocality.ANY))
                for m in load_filter.matchers
            ]
        self._by_name[name] = ctx
        while True:
            try:
                handle, policy = self._request_begin(name, tier_filter)
                break
            except KvtierError as e:
                if e.status != Status.DUPLICATE_REQUEST:
                    raise
                # The id's earlier request still finishes its stores: a new one.
                name = f"{ctx.req_id}#{next(self._duplicates)}"
                self._by_name[name] = ctx
        vllm_policy = v.OffloadPolicy.REQUEST_LEVEL if policy == _REQUEST_LEVEL else v.OffloadPolicy.CHUNK_LEVEL
        state = _Request(handle, name, ctx, vllm_policy)
        self._reqs[ctx.req_id] = state
        return state

    def _request_begin(self, name: str, tier_filter: list[TierMatcher] | None) -> tuple[int, int]:
        """`Manager.request_begin`: the handle and the tiers' policy.  With
        no tier filter, the call made once per request, through a scratch."""
        if tier_filter is not None:
            handle, policy = self._m.request_begin(name, tier_filter=tier_filter)
            return handle, int(policy)
        scratch = acquire()
        try:
            handle, policy = scratch.handle, scratch.policy
            status = self._h.call(_REQUEST_BEGIN, encode_str(name, "name"), ffi.NULL, handle, policy)
            if status:
                check(status, "kvtier_manager_request_begin")
            return handle[0], policy[0]
        finally:
            release(scratch)

    def _state(self, ctx: Any) -> _Request:
        state = self._reqs.get(ctx.req_id)
        if state is None:
            return self._begin(ctx)
        if state.ctx is not ctx:
            state.ctx = ctx
            self._by_name[state.name] = ctx
        return state

    def _context_for(self, name: str) -> Any:
        ctx = self._by_name.get(name)
        return ctx if ctx is not None else v.ReqContext(req_id=name)

    def _forget_name(self, name: str) -> None:
        """The secondary tiers were told that request `name` finished."""
        ctx = self._by_name.get(name)
        if ctx is None:
            return
        for state in self._finishing.get(ctx.req_id, ()):
            if state.name == name:
                state.tiers_pending = False
                self._maybe_drop(state)
                return

    @property
    def _req_state(self) -> dict[str, _Request]:
        """Requests by id until kvtier is done with them (active ones, and
        finished ones whose stores, loads or tier notifications are
        outstanding)."""
        states = {req_id: states[-1] for req_id, states in self._finishing.items() if states}
        states.update(self._reqs)
        return states

    def _push_positions(self, state: _Request, keys: Sequence[bytes]) -> None:
        """Gives kvtier the positions of `keys` it does not have yet."""
        ctx = state.ctx
        recorded = getattr(ctx, "_offload_key_positions", None)
        if recorded is not None and not recorded:
            return  # nothing recorded on the context
        given = state.positions
        batch = {}
        for key in keys:
            position = ctx.get_offload_key_position(key)
            if position is not None and given.get(key) != position:
                batch[key] = position
        self._send_positions(state, batch)

    def _positions_before_lookup(self, state: _Request, ctx: Any, key: bytes) -> None:
        """Gives kvtier `key`'s position before its lookup (a promotion it
        starts ranks by it, as in vLLM's primary tier), with every position
        recorded on the context since the last sweep: one call at the
        first lookup of a step, none for the keys after it."""
        position = ctx.get_offload_key_position(key)
        given = state.positions
        if position is None or given.get(key) == position:
            return
        batch = {}
        recorded = getattr(ctx, "_offload_key_positions", None)
        if isinstance(recorded, dict):
            # vLLM's scheduler appends to the context's positions (a key
            # given again keeps its place: read above for `key`, and by
            # `_push_positions` for the keys of stores and loads).
            if recorded is not state.recorded:
                state.recorded, state.swept = recorded, 0
            for other, at in itertools.islice(recorded.items(), state.swept, None):
                if given.get(other) != at:
                    batch[other] = at
            state.swept = len(recorded)
        batch[key] = position
        self._send_positions(state, batch)

    def _send_positions(self, state: _Request, batch: dict[bytes, int]) -> None:
        if batch:
            self._m.set_positions(state.handle, list(batch), list(batch.values()))
            state.positions.update(batch)

    def _primary_lookup(self, key: bytes) -> v.LookupResult:
        """The primary tier's answer alone (a request asking no tier)."""
        if self._probe is None:
            self._probe, _ = self._m.request_begin(_PROBE_NAME, tier_filter=[])
        return self._lookup_handle(self._probe, key)

    def _lookup_handle(self, handle: int, key: bytes, timed: bool = False) -> v.LookupResult:
        """Request `handle`'s answer for `key` (any key, any guard); with
        `timed`, the primary tier's delay is recorded (`lookup`)."""
        start = _monotonic()
        try:
            buffers = _one_keys.pop()
        except IndexError:
            buffers = OneKey()
        try:
            _keep = None
            if type(key) is bytes and 0 < len(key) <= MAX_KEY_LEN:
                c_key = buffers.set(key)
            else:
                c_key, _keep = _other_key(key)
            answer = buffers.answer
            status = self._h.call(_LOOKUP_PER_KEY, handle, c_key, 1, answer)
            if status:
                check(status, "kvtier_manager_lookup_per_key")
            result = _HIT if answer.hits else _ANSWERS[answer.stop]
        finally:
            _one_keys.append(buffers)
        if timed:
            self._metrics.primary_delays.append(_monotonic() - start)
        return result

    def _record_load_source(self, name: str, keys: Iterable[bytes], source: Any) -> None:
        ctx = self._by_name.get(name)
        req_id = ctx.req_id if ctx is not None else name
        sources = self._load_sources.setdefault(req_id, {})
        for key in keys:
            sources[key] = source

    def _drop_load_source(self, name: str, keys: Iterable[bytes], source: Any) -> None:
        """Keys of a promotion from a tier of `source` that did not arrive:
        the request's load source no longer names that tier for them (vLLM
        drops them; `get_load_source` answers the host)."""
        ctx = self._by_name.get(name)
        sources = self._load_sources.get(ctx.req_id if ctx is not None else name)
        if not sources:
            return
        for key in keys:
            if sources.get(key) == source:
                del sources[key]

    # ------------------------------------------------------------------
    # OffloadingManager
    # ------------------------------------------------------------------

    def on_new_request(self, req_context: Any) -> Any:
        state = self._reqs.get(req_context.req_id) or self._begin(req_context)
        state.ctx = req_context
        return v.RequestOffloadingContext(policy=state.policy)

    def lookup(self, key: bytes, req_context: Any) -> v.LookupResult:
        state = self._reqs.get(req_context.req_id)
        if state is None:
            state = self._begin(req_context)
        try:
            recorded = req_context._offload_key_positions
        except AttributeError:
            recorded = None
        if recorded is None or recorded:  # positions recorded on the context
            self._positions_before_lookup(state, req_context, key)
        if not self._timed_fast or type(key) is not bytes:
            return self._lookup_handle(state.handle, key, self._metrics.tiering)
        # The call made once per key: `_lookup_handle` for a bytes key
        # with the handle's lock-free guard (`Handle.call`, see
        # kvtier._handle) written out, timed.
        start = _monotonic()
        try:
            buffers = _one_keys.pop()
        except IndexError:
            buffers = OneKey()
        try:
            n = len(key)
            if 0 < n <= MAX_KEY_LEN:
                buffers.view[:n] = key
                c_key = buffers.key
                if n != buffers.len:
                    c_key.len = buffers.len = n
                _keep = None
            else:
                c_key, _keep = _other_key(key)
            answer = buffers.answer
            h = self._h
            inside = h.inside
            inside.append(None)
            if h.closing:
                inside.pop()
                h.left()
                raise h.closed_error()
            try:
                status = _LOOKUP_PER_KEY(h.ptr, state.handle, c_key, 1, answer)
            finally:
                inside.pop()
                if h.closing:
                    h.left()
            if status:
                check(status, "kvtier_manager_lookup_per_key")
            result = _HIT if answer.hits else _ANSWERS[answer.stop]
        finally:
            _one_keys.append(buffers)
        # The primary tier answers every lookup at once (vLLM's sync delay
        # of tier 0); the secondary tiers' answers are timed by their adapters.
        self._metrics.primary_delays.append(_monotonic() - start)
        return result

    def get_load_source(self, key: bytes, req_context: Any) -> Any:
        sources = self._load_sources.get(req_context.req_id)
        if sources is not None and key in sources:
            return sources[key]
        return v.CacheHitSource.HOST

    # The key calls go to the C API directly, each through a scratch (its
    # own buffers) and the manager's guarded call, as `Manager`'s do.

    def _keys_call(self, fn: Any, name: str, handle: int, keys: list[bytes]) -> None:
        """``fn(manager, handle, keys, len)``, checked."""
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            status = self._h.call(fn, handle, ptr, n)
        finally:
            release(scratch)
        if status:
            check(status, name)

    def prepare_load(self, keys: Collection[bytes], req_context: Any) -> v.LoadStoreSpec:
        keys = list(keys)
        state = self._state(req_context)
        recorded = getattr(req_context, "_offload_key_positions", None)
        if recorded is None or recorded:
            self._push_positions(state, keys)
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            slots = scratch.u32
            status = self._h.call(_PREPARE_LOAD, state.handle, ptr, n, slots)
            if status:
                check(status, "kvtier_manager_prepare_load")
            spec = _slots_spec(slots, n)
        finally:
            release(scratch)
        state.loads += len(keys)
        return spec

    def touch(self, keys: Collection[bytes], req_context: Any) -> None:
        state = self._state(req_context)
        self._keys_call(_TOUCH, "kvtier_manager_touch", state.handle, list(keys))

    def complete_load(self, keys: Collection[bytes], req_context: Any) -> None:
        keys = list(keys)
        state = self._reqs.get(req_context.req_id)
        if state is None or state.loads == 0:
            state = self._finishing_with_loads(req_context.req_id) or state
        if state is None:
            raise KvtierError(Status.UNKNOWN_REQUEST, f"complete_load for request {req_context.req_id!r}, never seen")
        # A finished request's handle still releases its loads' pins.
        self._keys_call(_COMPLETE_LOAD, "kvtier_manager_complete_load", state.handle, keys)
        state.loads = max(state.loads - len(keys), 0)
        if state.loads == 0 and self._reqs.get(req_context.req_id) is not state:
            self._maybe_drop(state)

    def _maybe_drop(self, state: _Request) -> None:
        """Forgets a finished request once kvtier is done with it."""
        if state.stores or state.loads or state.tiers_pending:
            return
        req_id = state.ctx.req_id
        states = self._finishing.get(req_id)
        if states and state in states:
            states.remove(state)
            if not states:
                del self._finishing[req_id]
        active = self._reqs.get(req_id)
        if active is None or active.name != state.name:
            self._by_name.pop(state.name, None)

    def _finishing_with_loads(self, req_id: str) -> _Request | None:
        for state in self._finishing.get(req_id, ()):
            if state.loads:
                return state
        return None

    def prepare_store(self, keys: Collection[bytes], req_context: Any) -> v.PrepareStoreOutput | None:
        keys = list(keys)
        state = self._state(req_context)
        if self._num_chunks == 0:
            return None if keys else v.PrepareStoreOutput([], v.CPULoadStoreSpec([]), [])
        recorded = getattr(req_context, "_offload_key_positions", None)
        if recorded is None or recorded:
            self._push_positions(state, keys)
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            plan = scratch.plan
            status = self._h.call(_PREPARE_STORE, state.handle, ptr, n, plan)
            if status:
                check(status, "kvtier_manager_prepare_store")
            if plan.refused:
                return None
            count = plan.store_count
            # Positions in call order: all of them are 0..n-1.
            to_store = keys if count == n else [keys[i] for i in ffi.unpack(plan.store_indices, count)]
            spec = _slots_spec(plan.slots, count)
            evicted = key_bufs_bytes(plan.evicted, plan.evicted_count)
        finally:
            release(scratch)
        state.stores += len(to_store)
        if self._events_on and to_store:
            state.pending.update(to_store)
        return v.PrepareStoreOutput(keys_to_store=to_store, store_spec=spec, evicted_keys=evicted)

    def complete_store(self, keys: Collection[bytes], req_context: Any, success: bool = True) -> None:
        keys = list(keys)
        state = self._reqs.get(req_context.req_id)
        if state is None or state.stores == 0:
            for candidate in self._finishing.get(req_context.req_id, ()):
                if candidate.stores:
                    state = candidate
                    break
        if state is None or state.stores == 0:
            return  # nothing of this request is being written (a reset, or never planned)
        if self._events_on and not success and state.pending:
            self._drain_events()
        scratch = acquire()
        try:
            ptr, n, _keep = scratch.key_array(keys)
            result = scratch.completion
            status = self._h.call(_COMPLETE_STORE, state.handle, ptr, n, success, result)
            # vLLM's managers ignore keys a completion should not name
            # (KEYS_IGNORED): so does this layer (the report still says
            # what was done).
            if status and status != _KEYS_IGNORED:
                check(status, "kvtier_manager_complete_store")
            ready, dropped = result.ready, result.dropped
        finally:
            release(scratch)
        state.stores = max(state.stores - ready - dropped, 0)
        if self._events_on and state.pending:
            if not success and dropped:
                dropped = [k for k in dict.fromkeys(keys) if k in state.pending]
                if dropped:
                    self._event_buffer.append(
                        v.OffloadingEvent(keys=dropped, medium=self.medium, removed=True, metadata_only=True)
                    )
            state.pending.difference_update(keys)
        if state.stores == 0 and self._reqs.get(req_context.req_id) is not state:
            self._maybe_drop(state)

    def on_request_finished(self, req_context: Any) -> None:
        state = self._reqs.pop(req_context.req_id, None)
        self._load_sources.pop(req_context.req_id, None)
        if state is None:
            return
        self._finishing.setdefault(req_context.req_id, []).append(state)
        self._finish(state)

    def _finish(self, state: _Request) -> None:
        """Passes a request's finish on to kvtier (it is in `_finishing`)."""
        state.tiers_pending = bool(self._adapters)
        status = self._h.call(_REQUEST_FINISHED, state.handle)
        if status:
            check(status, "kvtier_manager_request_finished")
        self._maybe_drop(state)

    def on_schedule_end(self, context: Any) -> None:
        self._step_context = context
        self._m.schedule_end()

    def has_pending_work(self) -> bool:
        return self._m.has_pending_work()

    def reset_cache(self) -> None:
        self._m.reset_cache()
        for state in self._reqs.values():
            state.stores = 0
            state.loads = 0
            state.pending.clear()
        for states in list(self._finishing.values()):
            for state in list(states):
                state.stores = state.loads = 0
                state.pending.clear()
                self._maybe_drop(state)
        self._load_sources.clear()

    def on_reset_flushed(self) -> None:
        self._m.reset_flushed()

    def _drain_events(self) -> None:
        out = self._event_buffer
        for tier, kind, medium, locality, keys in take_events(self._h.call):
            if kind == _CLEARED or not keys:
                continue
            if tier == 0:
                out.append(v.OffloadingEvent(keys, self.medium, kind == _REMOVED))
                continue
            # A built-in tier's: the vLLM tiers' own events never pass
            # through kvtier's queue (`take_events` yields them as they are).
            out.append(
                v.OffloadingEvent(
                    keys=keys,
                    medium=_MEDIUM_FROM_KVTIER.get(medium, v.Medium.STORAGE),
                    removed=kind == _REMOVED,
                    locality=_LOCALITY_FROM_KVTIER.get(locality),
                    ownership=self._tier_labels[tier - 1] if tier <= len(self._tier_labels) else str(tier),
                )
            )

    def take_events(self) -> Iterator[v.OffloadingEvent]:
        if not self._events_on and not self._adapters:
            return
        self._drain_events()
        # Detach the batch first: a drain stopped early does not replay it.
        events, self._event_buffer = self._event_buffer, []
        for event in events:
            if event.metadata_only:
                # A retry may own the key again by now: only absent keys.
                keys = [k for k in event.keys if self._primary_lookup(k) is v.LookupResult.MISS]
                if not keys:
                    continue
                event = replace(event, keys=keys)
            yield event
        # Then each vLLM tier's own events, unchanged and in tier order, as
        # vLLM's tiering manager yields them (with events off too: they are
        # the tier's, not the manager's).
        for adapter in self._adapters:
            yield from adapter.vllm_tier.take_events()

    def get_stats(self) -> Any:
        return self._metrics.read()

    def config_info(self) -> Sequence[Any]:
        if not self._tiering:
            return [self._config_info]
        primary_tier = getattr(self, "primary_tier", None)
        if primary_tier is not None:
            [primary_info] = primary_tier.config_info()
        else:
            primary_info = self._config_info
        infos = [{**primary_info, "tier": PRIMARY_LABEL}]
        # One series per secondary tier: a built-in tier's has its label only.
        own_infos = {adapter.name: adapter.vllm_tier.config_info() for adapter in self._adapters}
        for label in self._tier_labels:
            infos.append({"tier": label, **dict(own_infos.get(label, {}))})
        return infos

    def release_at_shutdown(self, cleanup: Any) -> None:
        """Calls `cleanup` (no arguments) once this manager has shut down:
        for what its tiers used, such as the scheduler's shared region."""
        self._at_shutdown.append(cleanup)

    def shutdown(self) -> None:
        try:
            self._m.shutdown()
        except KvtierError as e:
            # A connected manager's server may be gone: nothing to shut down.
            if e.status not in (Status.CLOSED, Status.DISCONNECTED):
                raise
        while self._at_shutdown:
            self._at_shutdown.pop()()
