//! One engine's connection to the server: the requests it began and what
//! each still holds (pins of its loads, write-pending keys of its stores),
//! its bounds, and the release of all of it when the connection ends.
//!
//! Ownership: every call that names a request is answered as unknown
//! unless this connection began it, so no engine can see, complete, unpin
//! or finish another's.  Blocks themselves are shared: a key one engine
//! stored is a hit for every engine.

use std::sync::Arc;

use hashbrown::{HashMap, HashSet};

use crate::key::{Key, KeyBatch};
use crate::primary::StorePlan;
use crate::request::RequestId;
use crate::tiering::{Manager, RequestParams, StartedRequest};
use crate::{Error, Result};

type Hasher = foldhash::fast::RandomState;

/// Room for `n` more entries in a table, or [`Error::OutOfMemory`].
fn room<T>(
    tried: std::result::Result<(), hashbrown::TryReserveError>,
    n: usize,
    what: &str,
) -> Result<()> {
    tried.map_err(|_| crate::fallible::out_of_memory::<T>(what, n))
}

/// What one request of the connection holds in the manager.
#[derive(Default)]
struct Held {
    /// Pins its loads took and have not released, per key.
    pins: HashMap<Key, u32, Hasher>,
    /// Keys its stores planned that are still write pending for it.
    planned: HashSet<Key, Hasher>,
    /// Whether `request_finished` was called.
    finished: bool,
}

impl Held {
    fn holds_nothing(&self) -> bool {
        self.pins.is_empty() && self.planned.is_empty()
    }
}

/// The per-connection bounds, in keys and requests.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Most requests held at once.
    pub requests: usize,
    /// Most pins held at once.
    pub pins: usize,
    /// Most write-pending keys of stores in flight at once.
    pub stores: usize,
}

/// An engine's connection: its requests and what they hold.
pub struct Session {
    manager: Arc<Manager>,
    /// The label its request names are made unique with.
    prefix: String,
    bounds: Bounds,
    requests: HashMap<RequestId, Held, Hasher>,
    /// Per key, the pins the connection's loads took less its unpins of
    /// that key, whichever of its requests made them: what the pin bound
    /// counts.  (A request's own records, in `Held`, are what it
    /// releases at the end; a local manager's unpins may go beyond a
    /// request's own pins, so the two differ.)
    live_pins: HashMap<Key, u32, Hasher>,
    /// The sum of `live_pins`.
    pins: usize,
    stores: usize,
    name_buf: String,
    /// Per key, how often the unpin being checked names it (reused).
    named: HashMap<Key, u32, Hasher>,
}

/// What a connection holds now, for the client list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Holdings {
    /// Requests begun and not let go.
    pub requests: usize,
    /// Pins held by its loads.
    pub pins: usize,
    /// Keys write pending for its stores.
    pub stores: usize,
}

impl Session {
    /// A session of client `id` over `manager`.
    pub fn new(manager: Arc<Manager>, id: u64, bounds: Bounds) -> Session {
        Session {
            manager,
            prefix: format!("c{id}/"),
            bounds,
            requests: HashMap::default(),
            live_pins: HashMap::default(),
            pins: 0,
            stores: 0,
            name_buf: String::new(),
            named: HashMap::default(),
        }
    }

    /// What the session holds now.
    pub fn holdings(&self) -> Holdings {
        Holdings {
            requests: self.requests.len(),
            pins: self.pins,
            stores: self.stores,
        }
    }

    fn owned(&self, request: RequestId) -> Result<()> {
        if self.requests.contains_key(&request) {
            Ok(())
        } else {
            Err(Error::UnknownRequest(format!(
                "{request}: not a request of this connection (never begun by it, or let go)"
            )))
        }
    }

    /// Whether `request` (of this connection) is finished: the manager
    /// then refuses a load or store plan as unknown, as a local one does,
    /// and no bound is reached on its behalf.
    fn finished(&self, request: RequestId) -> bool {
        self.requests.get(&request).is_some_and(|h| h.finished)
    }

    /// Begins a request named `name` within this connection (other
    /// engines may use the same names).
    pub fn request_begin(&mut self, name: &str, params: RequestParams) -> Result<StartedRequest> {
        if self.requests.len() >= self.bounds.requests {
            return Err(Error::NoSpace(format!(
                "this client holds {} requests, its bound (server.max_requests_per_client)",
                self.requests.len()
            )));
        }
        room::<Held>(self.requests.try_reserve(1), 1, "the connection's requests")?;
        self.name_buf.clear();
        self.name_buf.push_str(&self.prefix);
        self.name_buf.push_str(name);
        let started = self.manager.request_begin(&self.name_buf, params)?;
        self.requests.insert(started.id, Held::default());
        Ok(started)
    }

    /// The manager, for calls that need only ownership checked.
    pub fn manager_for(&self, request: RequestId) -> Result<&Manager> {
        self.owned(request)?;
        Ok(&self.manager)
    }

    /// The manager, for calls that name no request.
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// Pins `keys` for a load, within the connection's pin bound.
    pub fn prepare_load(
        &mut self,
        request: RequestId,
        keys: &[Key],
        slots: &mut Vec<u32>,
    ) -> Result<()> {
        self.owned(request)?;
        if self.pins + keys.len() > self.bounds.pins && !self.finished(request) {
            return Err(Error::NoSpace(format!(
                "this client holds {} pins and asks for {} more; its bound is {} \
                 (server.max_pinned_share of the primary tier)",
                self.pins,
                keys.len(),
                self.bounds.pins
            )));
        }
        let held = self.requests.get_mut(&request).expect("owned");
        room::<Key>(
            held.pins.try_reserve(keys.len()),
            keys.len(),
            "the connection's pins",
        )?;
        room::<Key>(
            self.live_pins.try_reserve(keys.len()),
            keys.len(),
            "the connection's pins",
        )?;
        self.manager
            .prepare_load(request, KeyBatch::from(keys), slots)?;
        for k in keys {
            *held.pins.entry(*k).or_insert(0) += 1;
            *self.live_pins.entry(*k).or_insert(0) += 1;
        }
        self.pins += keys.len();
        Ok(())
    }

    /// Releases `keys`' pins of `request`'s loads.  Only pins this
    /// connection's loads took: a key named more often than the
    /// connection holds it pinned is [`Error::KeyState`] naming its
    /// position, and nothing changes, so that no engine releases a block
    /// another engine is still copying out of.  (A local manager, like
    /// vLLM, lets a request's unpins take other requests' pins; within
    /// one connection they still may.)
    pub fn complete_load(&mut self, request: RequestId, keys: &[Key]) -> Result<()> {
        self.owned(request)?;
        if let Err(e) = self.check_unpins(keys) {
            // A request the manager no longer takes answers as it would
            // (an unload of no keys changes nothing).
            self.manager
                .complete_load(request, KeyBatch::from(&keys[..0]))?;
            return Err(e);
        }
        self.manager.complete_load(request, KeyBatch::from(keys))?;
        let held = self.requests.get_mut(&request).expect("owned");
        for k in keys {
            if let Some(n) = held.pins.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    held.pins.remove(k);
                }
            }
            if let Some(n) = self.live_pins.get_mut(k) {
                *n -= 1;
                self.pins -= 1;
                if *n == 0 {
                    self.live_pins.remove(k);
                }
            }
        }
        self.let_go_if_done(request);
        Ok(())
    }

    /// An error unless every key of an unpin is pinned by this
    /// connection's loads as often as the unpin names it.
    fn check_unpins(&mut self, keys: &[Key]) -> Result<()> {
        self.named.clear();
        room::<Key>(
            self.named.try_reserve(keys.len()),
            keys.len(),
            "an unpin's keys",
        )?;
        for (index, k) in keys.iter().enumerate() {
            let named = self.named.entry(*k).or_insert(0);
            *named += 1;
            if *named > self.live_pins.get(k).copied().unwrap_or(0) {
                return Err(Error::KeyState {
                    index,
                    key: k.to_hex(),
                    reason: "not pinned by this connection's loads (another engine's pins \
                             are its own to release)"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// Plans a store of `keys`, within the connection's store bound.
    pub fn prepare_store(
        &mut self,
        request: RequestId,
        keys: &[Key],
        plan: &mut StorePlan,
    ) -> Result<crate::primary::StoreOutcome> {
        self.owned(request)?;
        if self.stores + keys.len() > self.bounds.stores && !self.finished(request) {
            return Err(Error::NoSpace(format!(
                "this client has {} keys of stores in flight and asks for {} more; its bound is \
                 {} (server.max_store_share of the primary tier)",
                self.stores,
                keys.len(),
                self.bounds.stores
            )));
        }
        let held = self.requests.get_mut(&request).expect("owned");
        room::<Key>(
            held.planned.try_reserve(keys.len()),
            keys.len(),
            "the connection's stores",
        )?;
        let outcome = self
            .manager
            .prepare_store(request, KeyBatch::from(keys), plan)?;
        for k in &plan.to_store {
            if held.planned.insert(*k) {
                self.stores += 1;
            }
        }
        Ok(outcome)
    }

    /// Completes `keys` of `request`'s stores.
    pub fn complete_store(
        &mut self,
        request: RequestId,
        keys: &[Key],
        success: bool,
    ) -> Result<crate::primary::CompleteStoreReport> {
        self.owned(request)?;
        let answer = self
            .manager
            .complete_store(request, KeyBatch::from(keys), success);
        if matches!(answer, Ok(_) | Err(Error::KeysIgnored { .. })) {
            let held = self.requests.get_mut(&request).expect("owned");
            for k in keys {
                if held.planned.remove(k) {
                    self.stores -= 1;
                }
            }
            self.let_go_if_done(request);
        }
        answer
    }

    /// Finishes `request`; the connection keeps it while its loads or
    /// stores still hold keys.
    pub fn request_finished(&mut self, request: RequestId) -> Result<()> {
        self.owned(request)?;
        self.manager.request_finished(request)?;
        self.requests.get_mut(&request).expect("owned").finished = true;
        self.let_go_if_done(request);
        Ok(())
    }

    fn let_go_if_done(&mut self, request: RequestId) {
        if self
            .requests
            .get(&request)
            .is_some_and(|h| h.finished && h.holds_nothing())
        {
            self.requests.remove(&request);
        }
    }

    /// Ends every request of the connection as if its engine had finished
    /// them and failed every store in flight: write-pending keys are
    /// dropped (never served), pins released, requests finished.  Called
    /// when the connection ends, however it ends.
    pub fn release_all(&mut self) {
        let mut keys: Vec<Key> = Vec::new();
        for (id, held) in self.requests.drain() {
            if !held.planned.is_empty() {
                keys.clear();
                keys.extend(held.planned.iter().copied());
                let _ = self
                    .manager
                    .complete_store(id, KeyBatch::from(&keys), false);
            }
            if !held.pins.is_empty() {
                keys.clear();
                for (k, n) in &held.pins {
                    for _ in 0..*n {
                        keys.push(*k);
                    }
                }
                // Another request of this connection may have taken some
                // of these pins (a local manager's unpins go beyond their
                // own): then the batch is refused whole, and each key is
                // released alone.
                if self
                    .manager
                    .complete_load(id, KeyBatch::from(&keys))
                    .is_err()
                {
                    for k in &keys {
                        let _ = self.manager.complete_load(id, KeyBatch::from(&[*k]));
                    }
                }
            }
            if !held.finished {
                let _ = self.manager.request_finished(id);
            }
        }
        self.live_pins.clear();
        self.pins = 0;
        self.stores = 0;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.release_all();
    }
}
