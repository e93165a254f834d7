//! Who writes each write-pending key, so that a store completion acts only
//! on the keys its own request planned.
//!
//! Every writer has a small id, carried by the ref count of each slot it
//! writes (`slots.rs`: -1 - id), so knowing a slot's writer costs no
//! memory and no read beyond the ref count a completion reads anyway.  Id
//! 0 is every promotion (the tiering manager's load jobs, which it
//! completes itself); requests get ids from 1 when they plan their first
//! key and give them back when their last planned key was completed (or
//! at a reset), so ids stay as few as the requests with writes in flight.
//! A request keeps its id after it finished, for its late completions.
//!
//! Cost: one hash lookup per `prepare_store` or `complete_store` call,
//! nothing per key; tables grow only to the most writers seen at once.

use foldhash::fast::RandomState;

use crate::request::RequestId;

/// The writer id of promotions.
pub(crate) const PROMOTION: u32 = 0;

/// The largest writer id (its ref count is `i32::MIN`).
const MAX_ID: u32 = i32::MAX as u32;

/// Who writes (and may complete) a write-pending key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    /// The request whose `prepare_store` planned the key.
    Request(RequestId),
    /// A promotion (planned by `prepare_promotion`, finished by
    /// `complete_promotion`).
    Promotion,
}

/// One request with keys write pending for it.
#[derive(Clone, Copy, Debug)]
struct Entry {
    id: u32,
    /// Its keys still write pending (always > 0 while registered).
    pending: u32,
}

/// The requests with writes in flight and their ids.
#[derive(Debug)]
pub(crate) struct Writers {
    by_request: hashbrown::HashMap<RequestId, Entry, RandomState>,
    /// The request of each id in use (index 0, promotions, unused).
    request_of: Vec<RequestId>,
    /// Ids given back, for reuse.
    free: Vec<u32>,
    /// The largest id handed out ([`MAX_ID`]; smaller in tests).
    max_id: u32,
}

impl Writers {
    /// No writer yet.
    pub(crate) fn new(hasher: RandomState) -> Writers {
        Writers {
            by_request: hashbrown::HashMap::with_hasher(hasher),
            request_of: vec![RequestId(0)],
            free: Vec::new(),
            max_id: MAX_ID,
        }
    }

    /// The id of `req` if it has writes in flight.
    #[inline]
    pub(crate) fn id_of(&self, req: RequestId) -> Option<u32> {
        self.by_request.get(&req).map(|e| e.id)
    }

    /// Whether `req` can plan keys: it has an id, or one is available.
    #[inline]
    pub(crate) fn can_plan(&self, req: RequestId) -> bool {
        self.by_request.contains_key(&req)
            || !self.free.is_empty()
            || self.request_of.len() <= self.max_id as usize
    }

    /// The id under which `req`'s next planned keys are written (one is
    /// taken if it has none; [`Writers::can_plan`] must have said yes).
    /// Follow with [`Writers::planned`].
    pub(crate) fn id_for(&mut self, req: RequestId) -> u32 {
        if let Some(e) = self.by_request.get(&req) {
            return e.id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.request_of[id as usize] = req;
                id
            }
            None => {
                self.request_of.push(req);
                (self.request_of.len() - 1) as u32
            }
        };
        self.by_request.insert(req, Entry { id, pending: 0 });
        id
    }

    /// `req` planned `n` more keys under its id.
    pub(crate) fn planned(&mut self, req: RequestId, n: u32) {
        if let Some(e) = self.by_request.get_mut(&req) {
            e.pending += n;
        }
        self.give_back_if_done(req);
    }

    /// `n` of `req`'s planned keys were completed.
    pub(crate) fn completed(&mut self, req: RequestId, n: u32) {
        if let Some(e) = self.by_request.get_mut(&req) {
            e.pending = e.pending.saturating_sub(n);
        }
        self.give_back_if_done(req);
    }

    fn give_back_if_done(&mut self, req: RequestId) {
        if let Some(e) = self.by_request.get(&req)
            && e.pending == 0
        {
            self.free.push(e.id);
            self.by_request.remove(&req);
        }
    }

    /// Keys `req` planned that are still write pending for it.
    pub(crate) fn pending(&self, req: RequestId) -> u32 {
        self.by_request.get(&req).map_or(0, |e| e.pending)
    }

    /// Who writes under `id`, if anyone does.
    pub(crate) fn writer(&self, id: u32) -> Option<Writer> {
        if id == PROMOTION {
            return Some(Writer::Promotion);
        }
        let req = *self.request_of.get(id as usize)?;
        (self.id_of(req) == Some(id)).then_some(Writer::Request(req))
    }

    /// Forgets every writer (at a reset, when every slot is freed).
    pub(crate) fn clear(&mut self) {
        self.by_request.clear();
        self.request_of.truncate(1);
        self.free.clear();
    }

    /// Checks `counted(id)`, the write-pending slots found under each id,
    /// against the registry.  For tests.
    pub(crate) fn check(
        &self,
        counted: &std::collections::HashMap<u32, u32>,
    ) -> Result<(), String> {
        for (&id, &n) in counted {
            if id == PROMOTION {
                continue;
            }
            let Some(Writer::Request(req)) = self.writer(id) else {
                return Err(format!("{n} slots write pending for unknown writer {id}"));
            };
            if self.pending(req) != n {
                return Err(format!(
                    "writer {id} (request #{}) has {} keys pending, {n} slots found",
                    req.0,
                    self.pending(req)
                ));
            }
        }
        for (req, e) in &self.by_request {
            if counted.get(&e.id).copied().unwrap_or(0) != e.pending || e.pending == 0 {
                return Err(format!(
                    "request #{} counts {} keys pending under writer {}",
                    req.0, e.pending, e.id
                ));
            }
        }
        if self.by_request.len() + self.free.len() + 1 != self.request_of.len() {
            return Err("writer ids lost or handed out twice".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_taken_at_the_first_plan_and_given_back_when_done() {
        let mut w = Writers::new(RandomState::default());
        let (a, b) = (RequestId(7), RequestId(8));
        assert!(w.can_plan(a));
        let ida = w.id_for(a);
        assert_eq!(ida, 1, "0 is the promotions'");
        w.planned(a, 2);
        assert_eq!(w.id_for(a), ida, "one id per request");
        assert_eq!(w.writer(ida), Some(Writer::Request(a)));
        assert_eq!(w.writer(PROMOTION), Some(Writer::Promotion));
        w.completed(a, 1);
        assert_eq!(w.pending(a), 1);
        w.completed(a, 1);
        assert_eq!((w.pending(a), w.id_of(a), w.writer(ida)), (0, None, None));
        let idb = w.id_for(b);
        w.planned(b, 1);
        assert_eq!(idb, ida, "given-back ids are reused");
        // An id taken for a plan of nothing is given back at once.
        w.id_for(a);
        w.planned(a, 0);
        assert_eq!(w.id_of(a), None);
        w.clear();
        assert_eq!((w.pending(b), w.id_of(b)), (0, None));
        assert_eq!(w.id_for(a), 1, "ids restart after a reset");
    }

    #[test]
    fn check_finds_every_disagreement_between_registry_and_slots() {
        let mut w = Writers::new(RandomState::default());
        let (a, b) = (RequestId(7), RequestId(8));
        let ida = w.id_for(a);
        w.planned(a, 2);
        let idb = w.id_for(b);
        w.planned(b, 1);
        let counted = |v: &[(u32, u32)]| v.iter().copied().collect();
        assert_eq!(w.check(&counted(&[(ida, 2), (idb, 1)])), Ok(()));
        // Promotions' slots are not counted by request.
        assert_eq!(
            w.check(&counted(&[(ida, 2), (idb, 1), (PROMOTION, 5)])),
            Ok(())
        );
        // Slots under an id nobody holds.
        assert!(
            w.check(&counted(&[(ida, 2), (idb, 1), (idb + 1, 1)]))
                .is_err()
        );
        // Fewer or more slots than the request counts.
        assert!(w.check(&counted(&[(ida, 1), (idb, 1)])).is_err());
        assert!(w.check(&counted(&[(ida, 3), (idb, 1)])).is_err());
        // A request counting keys pending of which no slot was found.
        assert!(w.check(&counted(&[(idb, 1)])).is_err());
        // A given-back id is neither lost nor anyone's.
        w.completed(a, 2);
        assert_eq!(w.check(&counted(&[(idb, 1)])), Ok(()));
        assert!(w.check(&counted(&[(ida, 1), (idb, 1)])).is_err());
    }

    #[test]
    fn no_new_request_can_plan_once_every_id_is_taken() {
        let mut w = Writers::new(RandomState::default());
        w.max_id = 2;
        let (a, b, c) = (RequestId(1), RequestId(2), RequestId(3));
        for r in [a, b] {
            assert!(w.can_plan(r));
            w.id_for(r);
            w.planned(r, 1);
        }
        assert!(!w.can_plan(c), "ids 1 and 2 are taken");
        assert!(w.can_plan(a), "a request holding an id may plan more");
        w.completed(a, 1);
        assert!(w.can_plan(c), "a given-back id is free again");
    }
}
