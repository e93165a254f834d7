//! Model-based test of the primary tier.
//!
//! A small reference model written from the primary tier's rules (the
//! module doc of `crates/kvtier/src/primary/mod.rs` and its methods' docs), with
//! plain vectors and linear scans so that it is obviously correct, runs the
//! same random operation sequences as the real tier (misuse mixed in,
//! promotions, and completions naming keys other writers are writing).
//! After every operation the results, the lookups of every key, the stats,
//! the policy order and the events must match, and the invariants must
//! hold.  At least 100,000 operations per run; `KVTIER_MODEL_OPS=N` runs N.
//!
//! The model follows vLLM 0.33's own code literally where kvtier follows
//! it: lru ranks are pairs (a fresh rank `(n, 0)`, or `(request rank,
//! -position)` for a key with a token position stored or first presented
//! by an active request), the order being the ranks sorted with ties by
//! key bytes; a request records each key once, in first presentation
//! order, before a store's eviction; its finish orders its keys by KV
//! group and position (`order_request_keys`) and commits them from the
//! tail.  A request that finishes with pins of its loads still held keeps
//! them for its late `complete_load`, which releases only those: an
//! active request's unpin beyond its own pins of a key spends a pin of the
//! key, and a late completion of a key with spent pins is charged one
//! (nothing released) instead of unpinning.  Runs
//! draw the KV-group option and whether positions are given.
//!
//! This is the primary tier's exact model, for this test alone.  The test
//! kit's `model::ModelPrimary` models less (slots, states and argument
//! checks; LRU without ranks or positions) and is a `PrimaryBackend`, for
//! the tests that drive the manager over it.

use kvtier_testkit::rng;

use kvtier_core::Error;
use kvtier_core::Key;
use kvtier_core::events::{Event, EventKind};
use kvtier_core::primary::{
    CompleteStoreReport, PolicyKind, PrimaryConfig, PrimaryLookup, PrimaryTier, StoreOutcome,
    StorePlan, Writer,
};
use kvtier_core::request::RequestId;
use rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry {
    key: Key,
    slot: u32,
    refc: i32,
    announced: bool,
    /// Who writes it, while write pending: only that writer completes it.
    writer: Option<Writer>,
}

#[derive(Debug, Default)]
struct Req {
    id: u64,
    /// Keys in first presentation order (vLLM's `seen_keys` and `key_groups`).
    seen: Vec<Key>,
    inserted: Vec<Key>,
    reused: Vec<Key>,
    adapted: Vec<Key>,
    positions: Vec<(Key, u64)>,
    /// The request's lru rank in this cache generation.
    rank: Option<u64>,
    /// One entry per pin its loads took and have not released.
    pins: Vec<Key>,
}

impl Req {
    fn position(&self, k: &Key) -> Option<u64> {
        self.positions.iter().find(|(x, _)| x == k).map(|p| p.1)
    }
}

/// An lru rank: compared as a pair, ties broken by key bytes.
type Rank = (u64, i64);

/// What an operation returned, in comparable form.
#[derive(Debug, PartialEq)]
enum Out {
    Unit,
    Err(&'static str, Option<usize>),
    Slots(Vec<u32>),
    Store(StoreOutcome, StorePlan),
    Complete(CompleteStoreReport),
}

fn err_out(e: &Error) -> Out {
    match e {
        Error::KeyState { index, .. } => Out::Err("key_state", Some(*index)),
        Error::InvalidKey { index, .. } => Out::Err("invalid_key", Some(*index)),
        Error::InvalidArgument(_) => Out::Err("invalid_argument", None),
        Error::UnknownRequest(_) => Out::Err("unknown_request", None),
        Error::DuplicateRequest(_) => Out::Err("duplicate_request", None),
        other => panic!("unexpected error kind: {other}"),
    }
}

fn res<T>(r: Result<T, Error>, ok: impl FnOnce(T) -> Out) -> Out {
    match r {
        Ok(v) => ok(v),
        Err(e) => err_out(&e),
    }
}

/// The reference model.
struct Model {
    cap: u32,
    policy: PolicyKind,
    threshold: u32,
    table_size: usize,
    event_cap: usize,
    kv_groups: bool,
    entries: Vec<Entry>,
    free: Vec<u32>,
    fresh: u32,
    /// lru: the rank of every resident key, and the rank counter.
    ranks: Vec<(Key, Rank)>,
    clock: u64,
    t1: Vec<Key>,
    t2: Vec<Key>,
    b1: Vec<Key>,
    b2: Vec<Key>,
    target: f64,
    table: Vec<(Key, u32)>,
    reqs: Vec<Req>,
    /// Finished requests whose loads still hold pins.
    finished_loads: Vec<Req>,
    /// Loads completed by a finished request.
    late_loads: u64,
    /// Per key, unpins by active requests beyond their own pins, not yet
    /// charged to a finished request's late completion.
    spent: Vec<(Key, u32)>,
    /// Keys of late completions charged with a spent pin.
    spent_completions: u64,
    events: Vec<Event>,
    evictions: u64,
    refusals: u64,
    skips: u64,
    planned: u64,
    completed: u64,
    failed: u64,
    late: u64,
    foreign: u64,
    already_ready: u64,
    loads: u64,
    tpins: u64,
    dropped: u64,
}

fn remove_key(v: &mut Vec<Key>, k: &Key) -> bool {
    match v.iter().position(|x| x == k) {
        Some(i) => {
            v.remove(i);
            true
        }
        None => false,
    }
}

fn to_back(v: &mut Vec<Key>, k: &Key) {
    remove_key(v, k);
    v.push(*k);
}

impl Model {
    fn new(c: &PrimaryConfig) -> Model {
        Model {
            cap: c.capacity,
            policy: c.policy,
            threshold: c.store_threshold,
            table_size: c.admission_table_size,
            event_cap: c.event_capacity,
            kv_groups: c.kv_groups,
            entries: vec![],
            free: vec![],
            fresh: 0,
            ranks: vec![],
            clock: 0,
            t1: vec![],
            t2: vec![],
            b1: vec![],
            b2: vec![],
            target: 0.0,
            table: vec![],
            reqs: vec![],
            finished_loads: vec![],
            late_loads: 0,
            spent: vec![],
            spent_completions: 0,
            events: vec![],
            evictions: 0,
            refusals: 0,
            skips: 0,
            planned: 0,
            completed: 0,
            failed: 0,
            late: 0,
            foreign: 0,
            already_ready: 0,
            loads: 0,
            tpins: 0,
            dropped: 0,
        }
    }

    fn entry(&self, k: &Key) -> Option<usize> {
        self.entries.iter().position(|e| e.key == *k)
    }

    fn req(&self, id: u64) -> Option<usize> {
        self.reqs.iter().position(|r| r.id == id)
    }

    /// With KV groups, the error for the first key too short for a group.
    fn group_error(&self, keys: &[Key]) -> Option<Out> {
        let i = keys.iter().position(|k| self.kv_groups && k.len() < 5)?;
        Some(Out::Err("invalid_key", Some(i)))
    }

    fn rank_of(&self, k: &Key) -> Option<Rank> {
        self.ranks.iter().find(|(x, _)| x == k).map(|r| r.1)
    }

    fn set_rank(&mut self, k: &Key, rank: Rank) {
        match self.ranks.iter_mut().find(|(x, _)| x == k) {
            Some(r) => r.1 = rank,
            None => self.ranks.push((*k, rank)),
        }
    }

    /// A fresh lru rank for resident `k`.
    fn fresh_rank(&mut self, k: &Key) {
        if self.entry(k).is_some() {
            self.clock += 1;
            let c = self.clock;
            self.set_rank(k, (c, 0));
        }
    }

    /// Request `r`'s rank, given it on first need (vLLM's `_get_request_rank`).
    fn request_rank(&mut self, r: usize) -> u64 {
        if let Some(rank) = self.reqs[r].rank {
            return rank;
        }
        self.clock += 1;
        self.reqs[r].rank = Some(self.clock);
        self.clock
    }

    /// vLLM's `_record_request_cache_access`, then the policy's
    /// `on_request_access` (lru) for the keys new to the request.
    fn record(&mut self, r: usize, keys: &[Key], reused: &[Key]) {
        let mut new = vec![];
        for k in keys {
            if !self.reqs[r].seen.contains(k) {
                self.reqs[r].seen.push(*k);
                new.push(*k);
            }
        }
        if !new.is_empty() && self.policy == PolicyKind::Lru {
            let rr = self.request_rank(r);
            for k in &new {
                let Some(p) = self.reqs[r].position(k) else {
                    continue;
                };
                let Some(now) = self.rank_of(k) else {
                    continue;
                };
                let rank = (rr, -(p as i64));
                if now < rank {
                    self.set_rank(k, rank);
                }
            }
        }
        for k in reused {
            let req = &mut self.reqs[r];
            if !req.inserted.contains(k) && !req.reused.contains(k) {
                req.reused.push(*k);
            }
        }
    }

    /// vLLM's `on_request_finished` ordering: groups ascending, each by
    /// position if all its keys have one, then all by position if all do.
    fn finish_order(&self, req: &Req) -> Vec<Key> {
        let group = |k: &Key| {
            let b = k.as_bytes();
            if self.kv_groups {
                u32::from_be_bytes(b[b.len() - 4..].try_into().unwrap())
            } else {
                0
            }
        };
        let mut groups: Vec<u32> = req.seen.iter().map(group).collect();
        groups.sort_unstable();
        groups.dedup();
        let mut keys = vec![];
        for g in groups {
            let mut in_group: Vec<Key> =
                req.seen.iter().filter(|k| group(k) == g).copied().collect();
            if in_group.iter().all(|k| req.position(k).is_some()) {
                in_group.sort_by_key(|k| req.position(k)); // stable
            }
            keys.extend(in_group);
        }
        if keys.iter().all(|k| req.position(k).is_some()) {
            keys.sort_by_key(|k| req.position(k)); // stable
        }
        keys
    }

    fn set_positions(&mut self, id: u64, keys: &[Key], positions: &[u64]) -> Out {
        if keys.len() != positions.len() {
            return Out::Err("invalid_argument", None);
        }
        let Some(r) = self.req(id) else {
            return Out::Err("unknown_request", None);
        };
        if let Some(e) = self.group_error(keys) {
            return e;
        }
        for (k, p) in keys.iter().zip(positions) {
            let req = &mut self.reqs[r];
            match req.positions.iter_mut().find(|(x, _)| x == k) {
                Some(e) => e.1 = *p,
                None => req.positions.push((*k, *p)),
            }
        }
        Out::Unit
    }

    fn emit(&mut self, kind: EventKind, key: Option<Key>) -> bool {
        if self.event_cap == 0 {
            return false;
        }
        if self.events.len() >= self.event_cap {
            self.dropped += 1;
            return false;
        }
        self.events.push(Event { kind, key });
        true
    }

    fn lookup(&self, k: &Key) -> PrimaryLookup {
        match self.entry(k) {
            None => PrimaryLookup::Miss,
            Some(i) if self.entries[i].refc == -1 => PrimaryLookup::HitPending,
            Some(_) => PrimaryLookup::Hit,
        }
    }

    fn begin(&mut self, id: u64) -> Out {
        if self.req(id).is_some() || self.finished_loads.iter().any(|r| r.id == id) {
            return Out::Err("duplicate_request", None);
        }
        self.reqs.push(Req {
            id,
            ..Default::default()
        });
        Out::Unit
    }

    fn pin(&mut self, keys: &[Key]) -> Result<Vec<u32>, Out> {
        let mut slots = vec![];
        for (i, k) in keys.iter().enumerate() {
            match self.entry(k) {
                Some(e) if self.entries[e].refc >= 0 => slots.push(self.entries[e].slot),
                _ => return Err(Out::Err("key_state", Some(i))),
            }
        }
        for k in keys {
            let e = self.entry(k).unwrap();
            self.entries[e].refc += 1;
        }
        Ok(slots)
    }

    fn unpin(&mut self, keys: &[Key]) -> Out {
        let mut refs: Vec<(Key, i32)> = vec![];
        for (i, k) in keys.iter().enumerate() {
            let Some(e) = self.entry(k) else {
                return Out::Err("key_state", Some(i));
            };
            let taken = refs.iter().filter(|(x, _)| x == k).count() as i32;
            if self.entries[e].refc - taken <= 0 {
                return Out::Err("key_state", Some(i));
            }
            refs.push((*k, 1));
        }
        for k in keys {
            let e = self.entry(k).unwrap();
            self.entries[e].refc -= 1;
        }
        Out::Unit
    }

    fn prepare_load(&mut self, id: u64, keys: &[Key]) -> Out {
        let Some(r) = self.req(id) else {
            return Out::Err("unknown_request", None);
        };
        if let Some(e) = self.group_error(keys) {
            return e;
        }
        match self.pin(keys) {
            Ok(slots) => {
                self.loads += keys.len() as u64;
                self.record(r, keys, keys);
                self.reqs[r].pins.extend_from_slice(keys);
                Out::Slots(slots)
            }
            Err(o) => o,
        }
    }

    /// An active request unpins any pinned key, releasing its own pins
    /// of them; an unpin beyond its own pins of a key spends a pin of the
    /// key.  A finished one releases only its own pins, each charged with
    /// a spent pin of its key if there is one (nothing released) or
    /// unpinned; it is forgotten with the last.
    fn complete_load(&mut self, id: u64, keys: &[Key]) -> Out {
        let known = self.req(id).is_some() || self.finished_loads.iter().any(|r| r.id == id);
        if let (true, Some(e)) = (known, self.group_error(keys)) {
            return e;
        }
        if let Some(r) = self.req(id) {
            let out = self.unpin(keys);
            if out == Out::Unit {
                for k in keys {
                    if !remove_key(&mut self.reqs[r].pins, k) {
                        self.spend(k);
                    }
                }
            }
            return out;
        }
        let Some(f) = self.finished_loads.iter().position(|r| r.id == id) else {
            return Out::Err("unknown_request", None);
        };
        let mut pins = self.finished_loads[f].pins.clone();
        for (i, k) in keys.iter().enumerate() {
            if !remove_key(&mut pins, k) {
                return Out::Err("key_state", Some(i));
            }
        }
        let spent_before = self.spent.clone();
        let mut unpinned = vec![];
        let mut at = vec![];
        for (i, k) in keys.iter().enumerate() {
            match self.spent.iter_mut().find(|(x, n)| x == k && *n > 0) {
                Some((_, n)) => *n -= 1,
                None => {
                    unpinned.push(*k);
                    at.push(i);
                }
            }
        }
        match self.unpin(&unpinned) {
            Out::Err(e, Some(j)) => {
                self.spent = spent_before;
                return Out::Err(e, Some(at[j]));
            }
            Out::Unit => {}
            other => return other,
        }
        self.spent.retain(|(_, n)| *n > 0);
        self.spent_completions += (keys.len() - unpinned.len()) as u64;
        self.late_loads += 1;
        if pins.is_empty() {
            self.finished_loads.remove(f);
        } else {
            self.finished_loads[f].pins = pins;
        }
        Out::Unit
    }

    /// One more spent pin of `k`.
    fn spend(&mut self, k: &Key) {
        match self.spent.iter_mut().find(|(x, _)| x == k) {
            Some((_, n)) => *n += 1,
            None => self.spent.push((*k, 1)),
        }
    }

    fn grow(&mut self) {
        let d = (self.b2.len() as f64 / self.b1.len() as f64).max(1.0);
        self.target = (self.target + d).min(self.cap as f64);
    }

    fn shrink(&mut self) {
        let d = (self.b1.len() as f64 / self.b2.len() as f64).max(1.0);
        self.target = (self.target - d).max(0.0);
    }

    fn touch(&mut self, id: u64, keys: &[Key]) -> Out {
        if self.req(id).is_none() {
            return Out::Err("unknown_request", None);
        }
        if let Some(e) = self.group_error(keys) {
            return e;
        }
        for k in keys.iter().rev() {
            match (self.policy, self.entry(k)) {
                (PolicyKind::Lru, Some(_)) => self.fresh_rank(k),
                (PolicyKind::Lru, None) => {}
                (PolicyKind::Arc, Some(e)) => {
                    if self.t1.contains(k) && self.entries[e].refc >= 0 {
                        remove_key(&mut self.t1, k);
                        self.t2.push(*k);
                    } else if self.t1.contains(k) {
                        to_back(&mut self.t1, k);
                    } else {
                        to_back(&mut self.t2, k);
                    }
                }
                (PolicyKind::Arc, None) => {
                    if self.b1.contains(k) {
                        self.grow();
                        to_back(&mut self.b1, k);
                    } else if self.b2.contains(k) {
                        self.shrink();
                        to_back(&mut self.b2, k);
                    }
                }
            }
        }
        Out::Unit
    }

    fn idle_free_to_evict(&self, k: &Key, named: &[Key], chosen: &[Key]) -> bool {
        let e = self.entry(k).unwrap();
        self.entries[e].refc == 0 && !named.contains(k) && !chosen.contains(k)
    }

    fn victims(&self, n: usize, named: &[Key]) -> Option<Vec<Key>> {
        let mut chosen: Vec<Key> = vec![];
        match self.policy {
            PolicyKind::Lru => {
                for k in &self.order() {
                    if chosen.len() < n && self.idle_free_to_evict(k, named, &chosen) {
                        chosen.push(*k);
                    }
                }
            }
            PolicyKind::Arc => {
                let mut vt1 = self.t1.len();
                for _ in 0..n {
                    let pick1 = self
                        .t1
                        .iter()
                        .find(|k| self.idle_free_to_evict(k, named, &chosen))
                        .copied();
                    let pick2 = self
                        .t2
                        .iter()
                        .find(|k| self.idle_free_to_evict(k, named, &chosen))
                        .copied();
                    let pick = if vt1 >= self.target as usize {
                        pick1.or(pick2)
                    } else {
                        pick2.or(pick1)
                    };
                    let k = pick?;
                    if self.t1.contains(&k) {
                        vt1 -= 1;
                    }
                    chosen.push(k);
                }
            }
        }
        (chosen.len() == n).then_some(chosen)
    }

    fn prepare_store(&mut self, id: u64, keys: &[Key], writer: Writer) -> Out {
        let Some(r) = self.req(id) else {
            return Out::Err("unknown_request", None);
        };
        if let Some(e) = self.group_error(keys) {
            return e;
        }
        let kinds: Vec<Option<bool>> = keys
            .iter()
            .map(|k| self.entry(k).map(|e| self.entries[e].refc >= 0))
            .collect();
        let mut fresh: Vec<Key> = vec![];
        for (k, kind) in keys.iter().zip(&kinds) {
            if kind.is_none() && !fresh.contains(k) {
                fresh.push(*k);
            }
        }
        // Admission: vLLM's offer table, literally (every named key is an
        // offer; keys on record count first and are protected, then new
        // keys enter, pushing out unprotected entries oldest first).
        if self.threshold >= 2 {
            let mut protected: Vec<Key> = vec![];
            for k in keys {
                if let Some(i) = self.table.iter().position(|t| t.0 == *k) {
                    let mut t = self.table.remove(i);
                    t.1 += 1;
                    self.table.push(t);
                    if !protected.contains(k) {
                        protected.push(*k);
                    }
                }
            }
            let mut unprotected = self.table.len() - protected.len();
            for k in keys {
                if self.table.iter().any(|t| t.0 == *k) {
                    continue;
                }
                if self.table.len() >= self.table_size {
                    if unprotected == 0 {
                        continue;
                    }
                    self.table.remove(0);
                    unprotected -= 1;
                }
                self.table.push((*k, 1));
            }
        }
        let mut to_store = vec![];
        for k in &fresh {
            let count = self.table.iter().find(|t| t.0 == *k).map_or(0, |t| t.1);
            if self.threshold < 2 || count >= self.threshold {
                to_store.push(*k);
            } else {
                self.skips += 1;
            }
        }
        // ARC store-miss adaptation: the admitted keys the request had not
        // offered, last to first; ghosts adapt and become most recent.
        if self.policy == PolicyKind::Arc {
            let new: Vec<Key> = to_store
                .iter()
                .filter(|k| !self.reqs[r].adapted.contains(k))
                .copied()
                .collect();
            for k in new.iter().rev() {
                if self.b1.contains(k) {
                    self.grow();
                    to_back(&mut self.b1, k);
                } else if self.b2.contains(k) {
                    self.shrink();
                    to_back(&mut self.b2, k);
                }
            }
            self.reqs[r].adapted.extend(new);
        }
        // Record before any eviction, refused or not: the keys to store
        // and the ready keys found, in call order; the ready ones reused.
        let ready: Vec<Key> = keys
            .iter()
            .zip(&kinds)
            .filter(|(_, kind)| **kind == Some(true))
            .map(|(k, _)| *k)
            .collect();
        let recorded: Vec<Key> = keys
            .iter()
            .filter(|k| to_store.contains(k) || ready.contains(k))
            .copied()
            .collect();
        self.record(r, &recorded, &ready);
        let free = (self.cap - self.fresh) as usize + self.free.len();
        let need = to_store.len().saturating_sub(free);
        let Some(victims) = self.victims(need, keys) else {
            self.refusals += 1;
            return Out::Store(StoreOutcome::Refused, StorePlan::default());
        };
        for v in &victims {
            let e = self.entry(v).unwrap();
            let entry = self.entries.remove(e);
            match self.policy {
                PolicyKind::Lru => {
                    self.ranks.retain(|(x, _)| x != v);
                }
                PolicyKind::Arc => {
                    let ghost = if remove_key(&mut self.t1, v) {
                        &mut self.b1
                    } else {
                        remove_key(&mut self.t2, v);
                        &mut self.b2
                    };
                    ghost.push(*v);
                    while ghost.len() > self.cap as usize {
                        ghost.remove(0);
                    }
                }
            }
            if entry.announced {
                self.emit(EventKind::Removed, Some(*v));
            }
            self.free.push(entry.slot);
            self.evictions += 1;
        }
        let mut slots = vec![];
        for k in &to_store {
            let slot = if self.fresh < self.cap {
                self.fresh += 1;
                self.fresh - 1
            } else {
                self.free.pop().unwrap()
            };
            slots.push(slot);
            self.entries.push(Entry {
                key: *k,
                slot,
                refc: -1,
                announced: false,
                writer: Some(writer),
            });
            match self.policy {
                PolicyKind::Lru => match self.reqs[r].position(k) {
                    Some(p) => {
                        let rr = self.request_rank(r);
                        self.set_rank(k, (rr, -(p as i64)));
                    }
                    None => self.fresh_rank(k),
                },
                PolicyKind::Arc => {
                    self.t1.push(*k);
                    remove_key(&mut self.b1, k);
                    remove_key(&mut self.b2, k);
                }
            }
        }
        self.planned += to_store.len() as u64;
        for k in &to_store {
            if !self.reqs[r].inserted.contains(k) {
                self.reqs[r].inserted.push(*k);
            }
        }
        Out::Store(
            StoreOutcome::Planned,
            StorePlan {
                to_store,
                slots,
                evicted: victims,
            },
        )
    }

    fn complete_store(&mut self, by: Writer, keys: &[Key], success: bool) -> Out {
        let mut rep = CompleteStoreReport::default();
        for k in keys {
            let Some(e) = self.entry(k) else {
                rep.ignored += 1;
                continue;
            };
            if self.entries[e].refc != -1 {
                rep.already_ready += 1;
                continue;
            }
            if self.entries[e].writer != Some(by) {
                rep.foreign += 1;
                continue;
            }
            if success {
                self.entries[e].refc = 0;
                self.entries[e].writer = None;
                rep.ready += 1;
                if self.emit(EventKind::Stored, Some(*k)) {
                    self.entries[e].announced = true;
                }
            } else {
                let entry = self.entries.remove(e);
                self.ranks.retain(|(x, _)| x != k);
                remove_key(&mut self.t1, k);
                remove_key(&mut self.t2, k);
                self.free.push(entry.slot);
                rep.dropped += 1;
            }
        }
        self.completed += rep.ready as u64;
        self.failed += rep.dropped as u64;
        self.late += rep.ignored as u64;
        self.foreign += rep.foreign as u64;
        self.already_ready += rep.already_ready as u64;
        Out::Complete(rep)
    }

    fn finish(&mut self, id: u64) -> Out {
        let Some(r) = self.req(id) else {
            return Out::Err("unknown_request", None);
        };
        let req = self.reqs.remove(r);
        for k in self.finish_order(&req).iter().rev() {
            if self.entry(k).is_none() {
                continue;
            }
            let reused = req.reused.contains(k);
            let insertion_only = req.inserted.contains(k) && !reused;
            match self.policy {
                PolicyKind::Lru => self.fresh_rank(k),
                PolicyKind::Arc => {
                    if insertion_only {
                        if self.t1.contains(k) {
                            to_back(&mut self.t1, k);
                        } else {
                            to_back(&mut self.t2, k);
                        }
                    } else if reused {
                        remove_key(&mut self.t1, k);
                        to_back(&mut self.t2, k);
                    }
                }
            }
        }
        if !req.pins.is_empty() {
            self.finished_loads.push(req);
        }
        Out::Unit
    }

    fn reset(&mut self) -> Out {
        self.entries.clear();
        self.free.clear();
        self.fresh = 0;
        self.ranks.clear();
        self.t1.clear();
        self.t2.clear();
        self.b1.clear();
        self.b2.clear();
        self.target = 0.0;
        self.events.clear();
        self.emit(EventKind::Cleared, None);
        // A new cache generation: requests keep only their positions.
        for r in &mut self.reqs {
            r.seen.clear();
            r.inserted.clear();
            r.reused.clear();
            r.adapted.clear();
            r.rank = None;
            r.pins.clear();
        }
        self.finished_loads.clear();
        self.spent.clear();
        Out::Unit
    }

    fn order(&self) -> Vec<Key> {
        match self.policy {
            PolicyKind::Lru => {
                let mut v: Vec<(Rank, Key)> = self.ranks.iter().map(|(k, r)| (*r, *k)).collect();
                v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.as_bytes().cmp(b.1.as_bytes())));
                v.into_iter().map(|(_, k)| k).collect()
            }
            PolicyKind::Arc => self.t1.iter().chain(self.t2.iter()).copied().collect(),
        }
    }
}

fn key(n: u64) -> Key {
    // Variable lengths exercise the inline key storage.
    let bytes = n.to_le_bytes();
    let len = 1 + (n % 8) as usize;
    let mut v = vec![0xa5u8; len.max(2)];
    v[0] = bytes[0];
    v[1] = bytes[1];
    Key::new(&v).unwrap()
}

/// Key `n` for a tier with KV groups: a 2-byte name then a 4-byte group
/// index (0, 1 or 2); every seventh is 4 bytes long, too short for a group.
fn group_key(n: u64) -> Key {
    let bytes = n.to_le_bytes();
    if n % 7 == 6 {
        return Key::new(&[bytes[0], bytes[1], 0xee, 0xee]).unwrap();
    }
    let g = (n % 3) as u32;
    let mut v = vec![bytes[0], bytes[1]];
    v.extend_from_slice(&g.to_be_bytes());
    Key::new(&v).unwrap()
}

fn check_same(t: &PrimaryTier, m: &Model, keyspace: &[Key], what: &str) {
    for k in keyspace {
        assert_eq!(t.lookup(k), m.lookup(k), "{what}: lookup {k}");
        let mr = m.entry(k).map(|e| m.entries[e].refc);
        assert_eq!(t.ref_count(k), mr, "{what}: ref count of {k}");
        let mw = m.entry(k).and_then(|e| m.entries[e].writer);
        assert_eq!(t.writer(k), mw, "{what}: writer of {k}");
    }
    assert_eq!(t.eviction_order(), m.order(), "{what}: policy order");
    let s = t.stats();
    let wp = m.entries.iter().filter(|e| e.refc == -1).count() as u32;
    let pinned = m.entries.iter().filter(|e| e.refc > 0).count() as u32;
    let idle = m.entries.iter().filter(|e| e.refc == 0).count() as u32;
    assert_eq!(
        (s.used, s.allocated, s.write_pending, s.pinned, s.idle),
        (m.entries.len() as u32, m.fresh, wp, pinned, idle),
        "{what}: gauges"
    );
    assert_eq!(
        (
            s.evictions,
            s.refusals,
            s.admission_skips,
            s.stores_planned,
            s.stores_completed,
            s.stores_failed,
            s.late_completions,
            s.foreign_completions,
            s.already_ready_completions,
            s.loads,
            s.transfer_pins,
            s.events_dropped,
        ),
        (
            m.evictions,
            m.refusals,
            m.skips,
            m.planned,
            m.completed,
            m.failed,
            m.late,
            m.foreign,
            m.already_ready,
            m.loads,
            m.tpins,
            m.dropped,
        ),
        "{what}: counters"
    );
    assert_eq!(
        s.spent_load_completions, m.spent_completions,
        "{what}: spent load completions"
    );
    assert_eq!(
        s.events_queued as usize,
        m.events.len(),
        "{what}: events queued"
    );
    if m.threshold >= 2 {
        assert_eq!(
            s.admission_table_len as usize,
            m.table.len(),
            "{what}: table"
        );
    }
    if m.policy == PolicyKind::Arc {
        assert_eq!(
            (s.arc_t1, s.arc_t2, s.arc_b1, s.arc_b2, s.arc_target),
            (
                m.t1.len() as u32,
                m.t2.len() as u32,
                m.b1.len() as u32,
                m.b2.len() as u32,
                m.target
            ),
            "{what}: arc"
        );
    }
    // Invariants: every slot free, write-pending or resident exactly once,
    // ref counts in range, index and lists agree (checked by the tier itself).
    t.check_invariants()
        .unwrap_or_else(|e| panic!("{what}: invariant: {e}"));
    // Model-side: slots of resident keys distinct and disjoint from free slots.
    let mut all: Vec<u32> = m
        .entries
        .iter()
        .map(|e| e.slot)
        .chain(m.free.iter().copied())
        .collect();
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "{what}: model slot used twice");
    assert_eq!(
        n as u32, m.fresh,
        "{what}: every allocated slot accounted for"
    );
}

fn pick_keys(rng: &mut Rng, keyspace: &[Key], max: u64) -> Vec<Key> {
    let n = rng.below(max + 1) as usize;
    (0..n)
        .map(|_| keyspace[rng.below(keyspace.len() as u64) as usize])
        .collect()
}

/// Keys the model says are resident (for well-formed loads).
fn resident_pick(rng: &mut Rng, m: &Model, ready: bool, pinned: bool) -> Vec<Key> {
    let pool: Vec<Key> = m
        .entries
        .iter()
        .filter(|e| {
            if pinned {
                e.refc > 0
            } else if ready {
                e.refc >= 0
            } else {
                e.refc == -1
            }
        })
        .map(|e| e.key)
        .collect();
    if pool.is_empty() {
        return vec![];
    }
    let n = 1 + rng.below(3) as usize;
    (0..n)
        .map(|_| pool[rng.below(pool.len() as u64) as usize])
        .collect()
}

/// Runs `ops` random operations; returns how many keys completions left
/// alone because another writer writes them, how many loads finished
/// requests completed, and how many keys of those were charged with pins
/// other requests' unpins had taken.
fn run(seed: u64, ops: u64) -> (u64, u64, u64) {
    let mut rng = Rng(seed);
    let config = PrimaryConfig {
        capacity: 1 + rng.below(10) as u32,
        policy: if rng.chance(50) {
            PolicyKind::Lru
        } else {
            PolicyKind::Arc
        },
        store_threshold: if rng.chance(30) {
            2 + rng.below(2) as u32
        } else {
            rng.below(2) as u32
        },
        admission_table_size: 1 + rng.below(6) as usize,
        event_capacity: [0, 3, 64][rng.below(3) as usize],
        kv_groups: rng.chance(30),
    };
    // Some runs never give a position (the tier then keeps no ranks).
    let with_positions = rng.chance(70);
    let mut t = PrimaryTier::new(config.clone()).unwrap();
    let mut m = Model::new(&config);
    let make_key = if config.kv_groups { group_key } else { key };
    let keyspace: Vec<Key> = (0..(config.capacity as u64 * 3 + 2))
        .map(make_key)
        .collect();
    let mut slots = Vec::new();
    let mut plan = StorePlan::default();
    let mut tev = Vec::new();
    for op in 0..ops {
        let req = rng.below(4);
        let rid = RequestId(req);
        let what = format!("seed {seed} op {op} config {config:?}");
        let mut choice = rng.below(108);
        if choice >= 100 && !with_positions {
            choice = 74; // a touch instead
        }
        let (got, want, name) = match choice {
            0..=4 => (
                res(t.request_begin(rid), |_| Out::Unit),
                m.begin(req),
                "begin",
            ),
            5..=9 => (
                res(t.request_finished(rid), |_| Out::Unit),
                m.finish(req),
                "finish",
            ),
            10..=34 => {
                // Now and then a batch longer than the linear-scan limit.
                let max = if rng.chance(5) { 40 } else { 4 };
                let keys = pick_keys(&mut rng, &keyspace, max);
                if rng.chance(20) {
                    (
                        res(t.prepare_promotion(rid, &keys, &mut plan), |o| {
                            Out::Store(o, plan.clone())
                        }),
                        m.prepare_store(req, &keys, Writer::Promotion),
                        "prepare_promotion",
                    )
                } else {
                    (
                        res(t.prepare_store(rid, &keys, &mut plan), |o| {
                            Out::Store(o, plan.clone())
                        }),
                        m.prepare_store(req, &keys, Writer::Request(rid)),
                        "prepare_store",
                    )
                }
            }
            35..=49 => {
                let mut keys = resident_pick(&mut rng, &m, false, false);
                if rng.chance(10) {
                    keys.extend(pick_keys(&mut rng, &keyspace, 2));
                }
                let ok = rng.chance(80);
                if rng.chance(20) {
                    (
                        Out::Complete(t.complete_promotion(&keys, ok)),
                        m.complete_store(Writer::Promotion, &keys, ok),
                        "complete_promotion",
                    )
                } else {
                    (
                        Out::Complete(t.complete_store(rid, &keys, ok)),
                        m.complete_store(Writer::Request(rid), &keys, ok),
                        "complete_store",
                    )
                }
            }
            50..=61 => {
                let mut keys = resident_pick(&mut rng, &m, true, false);
                if rng.chance(15) {
                    keys.extend(pick_keys(&mut rng, &keyspace, 2));
                }
                (
                    res(t.prepare_load(rid, &keys, &mut slots), |_| {
                        Out::Slots(slots.clone())
                    }),
                    m.prepare_load(req, &keys),
                    "prepare_load",
                )
            }
            62..=73 => {
                let mut keys = resident_pick(&mut rng, &m, true, true);
                if rng.chance(15) {
                    keys.extend(pick_keys(&mut rng, &keyspace, 2));
                }
                (
                    res(t.complete_load(rid, &keys), |_| Out::Unit),
                    m.complete_load(req, &keys),
                    "complete_load",
                )
            }
            74..=85 => {
                let keys = pick_keys(&mut rng, &keyspace, 4);
                (
                    res(t.touch(rid, &keys), |_| Out::Unit),
                    m.touch(req, &keys),
                    "touch",
                )
            }
            86..=89 => {
                let keys = resident_pick(&mut rng, &m, true, false);
                let want = match m.pin(&keys) {
                    Ok(s) => {
                        m.tpins += keys.len() as u64;
                        Out::Slots(s)
                    }
                    Err(o) => o,
                };
                (
                    res(t.pin_for_transfer(&keys, &mut slots), |_| {
                        Out::Slots(slots.clone())
                    }),
                    want,
                    "pin_for_transfer",
                )
            }
            90..=93 => {
                let mut keys = resident_pick(&mut rng, &m, true, true);
                if rng.chance(15) {
                    keys.extend(pick_keys(&mut rng, &keyspace, 2));
                }
                (
                    res(t.unpin_for_transfer(&keys), |_| Out::Unit),
                    m.unpin(&keys),
                    "unpin_for_transfer",
                )
            }
            94 => {
                t.reset();
                (Out::Unit, m.reset(), "reset")
            }
            100..=107 => {
                // Positions from a small range, so that ties happen; now
                // and then one position too few.
                let keys = pick_keys(&mut rng, &keyspace, 4);
                let mut pos: Vec<u64> = keys.iter().map(|_| 16 * (1 + rng.below(4))).collect();
                if rng.chance(5) && !pos.is_empty() {
                    pos.pop();
                }
                (
                    res(t.set_positions(rid, &keys, &pos), |_| Out::Unit),
                    m.set_positions(req, &keys, &pos),
                    "set_positions",
                )
            }
            95..=99 => {
                tev.clear();
                t.take_events(&mut tev);
                assert_eq!(tev, m.events, "{what}: events");
                m.events.clear();
                (Out::Unit, Out::Unit, "take_events")
            }
            _ => unreachable!("choice {choice}"),
        };
        assert_eq!(got, want, "{what}: {name}");
        check_same(&t, &m, &keyspace, &format!("{what} after {name}"));
    }
    // Every key announced removed was announced stored before.
    tev.clear();
    t.take_events(&mut tev);
    assert_eq!(tev, m.events);
    (m.foreign, m.late_loads, m.spent_completions)
}

#[test]
fn random_sequences_match_the_model() {
    let total: u64 = std::env::var("KVTIER_MODEL_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let per_run = 2_000;
    let runs = total.div_ceil(per_run);
    let (mut foreign, mut late_loads, mut spent) = (0, 0, 0);
    for seed in 0..runs {
        let (f, l, c) = run(0x5eed_0000 + seed, per_run);
        foreign += f;
        late_loads += l;
        spent += c;
    }
    assert!(foreign > 0, "completions named other writers' keys");
    assert!(late_loads > 0, "finished requests completed loads");
    assert!(spent > 0, "late completions met pins other unpins took");
}
