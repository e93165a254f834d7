//! A reference model of the primary tier: its rules (`crates/kvtier/src/primary/mod.rs`)
//! written as plainly as possible (LRU, no admission threshold, linear
//! scans).  Each write-pending key remembers its writer, and a completion
//! acts only on its own writer's keys.  It is slow on purpose; tests drive
//! the manager over it and over the real tier and compare, and check slot
//! invariants against it (through [`crate::probe::Probed`]).
//!
//! It models slots, states and the argument checks, not the finer order of
//! recency: request finishes commit nothing here, and token positions are
//! checked (request, lengths, KV-group key sizes) and otherwise ignored.
//! A request that finishes with pins of its loads still held keeps them
//! for its late `complete_load`, which releases only those: an active
//! request's unpin beyond its own pins of a key spends a pin of the key,
//! and a late completion of a key with spent pins is charged one (nothing
//! released) instead of unpinning.
//! The primary tier's own model test (`crates/kvtier/tests/primary_model.rs`) models
//! ranks, positions and groups exactly.

use std::collections::{HashMap, HashSet};

use kvtier_core::events::{Event, EventKind};
use kvtier_core::key::{Key, KeyBatch};
use kvtier_core::primary::{CompleteStoreReport, PrimaryLookup, StoreOutcome, StorePlan, Writer};
use kvtier_core::request::RequestId;
use kvtier_core::stats::Stat;
use kvtier_core::tiering::backend::PrimaryBackend;
use kvtier_core::{Error, Result};

/// State of one resident key in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    /// Its slot.
    pub slot: u32,
    /// -1 write pending, 0 idle, n pinned.
    pub refs: i32,
    /// Logical recency (higher is more recent).
    pub recency: u64,
    /// Whether a Stored event was emitted for it.
    pub announced: bool,
    /// Who writes it, while it is write pending.
    pub writer: Option<Writer>,
}

/// The reference model.  See the module docs.
#[derive(Debug)]
pub struct ModelPrimary {
    capacity: u32,
    /// Resident keys.
    pub entries: HashMap<Key, ModelEntry>,
    fresh: u32,
    freed: Vec<u32>,
    clock: u64,
    requests: HashSet<RequestId>,
    /// The pins each request's loads took and have not released (one
    /// entry per pin), active requests and finished ones alike.
    loads: HashMap<RequestId, Vec<Key>>,
    /// Per key, unpins by active requests beyond their own pins, not yet
    /// charged to a finished request's late completion.
    spent: HashMap<Key, u32>,
    events: Vec<Event>,
    kv_groups: bool,
}

impl ModelPrimary {
    /// An empty model of `capacity` slots.
    pub fn new(capacity: u32) -> ModelPrimary {
        ModelPrimary {
            capacity,
            entries: HashMap::new(),
            fresh: 0,
            freed: Vec::new(),
            clock: 0,
            requests: HashSet::new(),
            loads: HashMap::new(),
            spent: HashMap::new(),
            events: Vec::new(),
            kv_groups: false,
        }
    }

    /// Ref count of `key` (None if absent).
    pub fn refs(&self, key: &Key) -> Option<i32> {
        self.entries.get(key).map(|e| e.refs)
    }

    /// Number of free slots.
    pub fn free_slots(&self) -> u32 {
        self.capacity - self.entries.len() as u32
    }

    /// Checks the slot invariants: every slot used once, counts add up.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut seen = HashSet::new();
        for (k, e) in &self.entries {
            if e.slot >= self.capacity || !seen.insert(e.slot) {
                return Err(format!("key {k} has a bad or shared slot {}", e.slot));
            }
            if e.refs < -1 {
                return Err(format!("key {k} has ref count {}", e.refs));
            }
            if e.writer.is_some() != (e.refs == -1) {
                return Err(format!("key {k}: writer {:?}, refs {}", e.writer, e.refs));
            }
            if self.freed.contains(&e.slot) || e.slot >= self.fresh {
                return Err(format!("key {k} holds free slot {}", e.slot));
            }
        }
        if self.entries.len() + self.freed.len() != self.fresh as usize {
            return Err(format!(
                "slots lost: {} resident + {} freed != {} handed out",
                self.entries.len(),
                self.freed.len(),
                self.fresh
            ));
        }
        Ok(())
    }

    fn alloc(&mut self) -> u32 {
        if self.fresh < self.capacity {
            self.fresh += 1;
            self.fresh - 1
        } else {
            self.freed.pop().expect("caller checked for room")
        }
    }

    fn need_request(&self, req: RequestId) -> Result<()> {
        if self.requests.contains(&req) {
            Ok(())
        } else {
            Err(Error::UnknownRequest(format!("{}", req.0)))
        }
    }

    /// Plans a store of `keys` for `req`, written by `writer`.
    fn plan(
        &mut self,
        req: RequestId,
        writer: Writer,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.need_request(req)?;
        self.check_groups(keys)?;
        plan.to_store.clear();
        plan.slots.clear();
        plan.evicted.clear();
        let mut new: Vec<Key> = Vec::new();
        for k in keys {
            if !self.entries.contains_key(k) && !new.contains(k) {
                new.push(*k);
            }
        }
        let free = self.free_slots() as usize;
        let short = new.len().saturating_sub(free);
        let mut idle: Vec<(u64, Key)> = self
            .entries
            .iter()
            .filter(|(k, e)| e.refs == 0 && !keys.contains(k))
            .map(|(k, e)| (e.recency, *k))
            .collect();
        if idle.len() < short {
            return Ok(StoreOutcome::Refused);
        }
        idle.sort();
        for (_, k) in idle.into_iter().take(short) {
            let e = self.entries.remove(&k).expect("idle key is resident");
            self.freed.push(e.slot);
            if e.announced {
                self.events.push(Event {
                    kind: EventKind::Removed,
                    key: Some(k),
                });
            }
            plan.evicted.push(k);
        }
        for k in new {
            let slot = self.alloc();
            self.clock += 1;
            self.entries.insert(
                k,
                ModelEntry {
                    slot,
                    refs: -1,
                    recency: self.clock,
                    announced: false,
                    writer: Some(writer),
                },
            );
            plan.to_store.push(k);
            plan.slots.push(slot);
        }
        Ok(StoreOutcome::Planned)
    }

    /// Finishes `by`'s writes among `keys`, pinning each key made ready
    /// `pins` times; every other key is counted.
    fn complete(
        &mut self,
        by: Writer,
        keys: &[Key],
        success: bool,
        pins: u32,
        made_ready: &mut Vec<Key>,
        slots: &mut Vec<u32>,
    ) -> CompleteStoreReport {
        let mut r = CompleteStoreReport::default();
        for k in keys {
            match self.entries.get_mut(k) {
                None => r.ignored += 1,
                Some(e) if e.refs >= 0 => r.already_ready += 1,
                Some(e) if e.writer != Some(by) => r.foreign += 1,
                Some(e) if success => {
                    e.refs = pins as i32;
                    e.writer = None;
                    e.announced = true;
                    self.events.push(Event {
                        kind: EventKind::Stored,
                        key: Some(*k),
                    });
                    r.ready += 1;
                    if pins > 0 {
                        made_ready.push(*k);
                        slots.push(e.slot);
                    }
                }
                Some(e) => {
                    let slot = e.slot;
                    self.entries.remove(k);
                    self.freed.push(slot);
                    r.dropped += 1;
                }
            }
        }
        r
    }

    /// With KV groups on, an error for the first key too short to end
    /// with a 4-byte group index.
    fn check_groups(&self, keys: &[Key]) -> Result<()> {
        match keys.iter().position(|k| self.kv_groups && k.len() < 5) {
            Some(index) => Err(Error::InvalidKey {
                index,
                reason: "too short for a group index".into(),
            }),
            None => Ok(()),
        }
    }

    fn key_state(index: usize, key: &Key, reason: &str) -> Error {
        Error::KeyState {
            index,
            key: key.to_hex(),
            reason: reason.to_string(),
        }
    }
}

impl PrimaryBackend for ModelPrimary {
    fn capacity(&self) -> u32 {
        self.capacity
    }
    fn request_begin(&mut self, req: RequestId) -> Result<()> {
        if self.loads.contains_key(&req) && !self.requests.contains(&req) {
            return Err(Error::DuplicateRequest(format!("{} (loads pinned)", req.0)));
        }
        if !self.requests.insert(req) {
            return Err(Error::DuplicateRequest(format!("{}", req.0)));
        }
        Ok(())
    }
    fn lookup(&self, key: &Key) -> PrimaryLookup {
        match self.entries.get(key) {
            None => PrimaryLookup::Miss,
            Some(e) if e.refs < 0 => PrimaryLookup::HitPending,
            Some(_) => PrimaryLookup::Hit,
        }
    }
    fn prepare_load(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        let keys = &copied(keys);
        self.need_request(req)?;
        self.check_groups(keys)?;
        self.pin_for_transfer(keys, slots_out)?;
        if !keys.is_empty() {
            self.loads.entry(req).or_default().extend_from_slice(keys);
        }
        Ok(())
    }
    fn touch(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        let keys = &copied(keys);
        self.need_request(req)?;
        self.check_groups(keys)?;
        for k in keys.iter().rev() {
            self.clock += 1;
            if let Some(e) = self.entries.get_mut(k) {
                e.recency = self.clock;
            }
        }
        Ok(())
    }
    fn set_positions(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()> {
        let keys = &copied(keys);
        self.need_request(req)?;
        if keys.len() != positions.len() {
            return Err(Error::InvalidArgument("keys and positions differ".into()));
        }
        self.check_groups(keys)
    }
    fn enable_kv_groups(&mut self) {
        self.kv_groups = true;
    }
    fn holds_finished_loads(&self, req: RequestId) -> bool {
        !self.requests.contains(&req) && self.loads.contains_key(&req)
    }
    fn complete_load(&mut self, req: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        let keys = &copied(keys);
        let active = self.requests.contains(&req);
        let mut own = match self.loads.get(&req) {
            Some(own) => own.clone(),
            None if active => Vec::new(),
            None => return Err(Error::UnknownRequest(format!("{}", req.0))),
        };
        self.check_groups(keys)?;
        let release = |own: &mut Vec<Key>, k: &Key| match own.iter().position(|x| x == k) {
            Some(i) => {
                own.swap_remove(i);
                true
            }
            None => false,
        };
        if !active {
            for (i, k) in keys.iter().enumerate() {
                if !release(&mut own, k) {
                    return Err(Self::key_state(i, k, "not pinned by this request"));
                }
            }
            let spent_before = self.spent.clone();
            let (mut unpinned, mut at) = (Vec::new(), Vec::new());
            for (i, k) in keys.iter().enumerate() {
                match self.spent.get_mut(k) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => {
                        unpinned.push(*k);
                        at.push(i);
                    }
                }
            }
            if let Err(e) = self.unpin_for_transfer_in(&unpinned, &[]) {
                self.spent = spent_before;
                return Err(match e {
                    Error::KeyState { index, key, reason } => Error::KeyState {
                        index: at[index],
                        key,
                        reason,
                    },
                    other => other,
                });
            }
            self.spent.retain(|_, n| *n > 0);
        } else {
            self.unpin_for_transfer_in(keys, &[])?;
            for k in keys {
                if !release(&mut own, k) {
                    *self.spent.entry(*k).or_default() += 1;
                }
            }
        }
        if own.is_empty() {
            self.loads.remove(&req);
        } else {
            self.loads.insert(req, own);
        }
        Ok(())
    }
    fn prepare_store(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.plan(req, Writer::Request(req), &copied(keys), plan)
    }
    fn prepare_promotion(
        &mut self,
        req: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        self.plan(req, Writer::Promotion, keys, plan)
    }
    fn complete_store_pinned(
        &mut self,
        req: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
        pins: u32,
        made_ready: &mut Vec<Key>,
        slots: &mut Vec<u32>,
    ) -> CompleteStoreReport {
        let by = Writer::Request(req);
        self.complete(by, &copied(keys), success, pins, made_ready, slots)
    }
    fn complete_promotion(&mut self, keys: &[Key], success: bool) -> CompleteStoreReport {
        self.complete(
            Writer::Promotion,
            keys,
            success,
            0,
            &mut Vec::new(),
            &mut Vec::new(),
        )
    }
    fn pin_for_transfer(&mut self, keys: &[Key], slots_out: &mut Vec<u32>) -> Result<()> {
        for (i, k) in keys.iter().enumerate() {
            match self.entries.get(k) {
                None => return Err(Self::key_state(i, k, "absent, needs ready")),
                Some(e) if e.refs < 0 => {
                    return Err(Self::key_state(i, k, "write pending, needs ready"));
                }
                _ => {}
            }
        }
        slots_out.clear();
        for k in keys {
            let e = self.entries.get_mut(k).expect("checked");
            e.refs += 1;
            slots_out.push(e.slot);
        }
        Ok(())
    }
    /// The slots are not looked at.
    fn unpin_for_transfer_in(&mut self, keys: &[Key], _slots: &[u32]) -> Result<()> {
        let mut need: HashMap<Key, i32> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            let n = need.entry(*k).or_default();
            *n += 1;
            match self.entries.get(k) {
                Some(e) if e.refs >= *n => {}
                _ => return Err(Self::key_state(i, k, "not pinned")),
            }
        }
        for k in keys {
            self.entries.get_mut(k).expect("checked").refs -= 1;
        }
        Ok(())
    }
    fn request_finished(&mut self, req: RequestId) -> Result<()> {
        if !self.requests.remove(&req) {
            return Err(Error::UnknownRequest(format!("{}", req.0)));
        }
        // Kept in `loads` while its loads hold pins.
        Ok(())
    }
    fn reset(&mut self) {
        self.loads.clear();
        self.spent.clear();
        self.entries.clear();
        self.freed.clear();
        self.fresh = 0;
        self.events.clear();
        self.events.push(Event {
            kind: EventKind::Cleared,
            key: None,
        });
    }
    fn take_events_up_to(&mut self, max: usize, out: &mut Vec<Event>) {
        let n = max.min(self.events.len());
        out.extend(self.events.drain(..n));
    }
    /// The model's queue is unbounded.
    fn event_capacity(&self) -> usize {
        usize::MAX
    }
    fn stat_list(&self) -> Vec<Stat> {
        vec![Stat::gauge("resident", self.entries.len() as f64)]
    }
}

/// The keys of `batch`, copied.
fn copied(batch: KeyBatch<'_>) -> Vec<Key> {
    batch.iter().map(Key::from).collect()
}
