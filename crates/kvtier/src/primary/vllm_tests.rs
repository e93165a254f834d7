//! Unit tests of the [0.33] store-time rules (admission threshold within a
//! call, ARC's store-miss adaptation) and of vLLM 0.33.0's own primary-tier
//! tests (`tests/v1/kv_offload/cpu/test_manager.py`) re-expressed through
//! this tier's public interface: each such test names the vLLM test it
//! mirrors.  Here the helpers; the tests in `vllm_tests/`, by what they
//! pin: the admission threshold (`admission_threshold`), ARC's store-miss
//! adaptation (`arc_store_miss`), vLLM's CPU manager tests of stores and
//! events (`cpu_manager`) and its ARC policy tests (`arc_policy`).

use super::*;
use crate::events::EventKind;
use EventKind::{Removed, Stored};

mod admission_threshold;
mod arc_policy;
mod arc_store_miss;
mod cpu_manager;

fn k(n: u32) -> Key {
    Key::new(&n.to_be_bytes()).unwrap()
}

fn ks(ns: &[u32]) -> Vec<Key> {
    ns.iter().map(|&n| k(n)).collect()
}

fn tier(capacity: u32, policy: PolicyKind) -> PrimaryTier {
    configured(capacity, policy, 1, 0)
}

fn configured(capacity: u32, policy: PolicyKind, threshold: u32, table: usize) -> PrimaryTier {
    let mut config = PrimaryConfig {
        capacity,
        policy,
        event_capacity: 1024,
        ..Default::default()
    };
    config.store_threshold = threshold;
    config.admission_table_size = table;
    PrimaryTier::new(config).unwrap()
}

const R: RequestId = RequestId(1);

/// `prepare_store` of `ns` for `req`: the keys to store, or `None` if refused.
fn offer(t: &mut PrimaryTier, req: RequestId, ns: &[u32]) -> Option<Vec<Key>> {
    let mut plan = StorePlan::default();
    match t.prepare_store(req, &ks(ns), &mut plan).unwrap() {
        StoreOutcome::Planned => Some(plan.to_store),
        StoreOutcome::Refused => None,
    }
}

/// Offers `ns` for `req` and completes whatever the plan stores.
fn store(t: &mut PrimaryTier, req: RequestId, ns: &[u32]) -> StorePlan {
    let mut plan = StorePlan::default();
    assert_eq!(
        t.prepare_store(req, &ks(ns), &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    t.complete_store(req, &plan.to_store, true);
    plan
}

fn target(t: &PrimaryTier) -> f64 {
    t.stats().arc_target
}

fn ghosts(t: &PrimaryTier) -> (u32, u32) {
    let s = t.stats();
    (s.arc_b1, s.arc_b2)
}

/// A capacity-`cap` ARC tier whose request `R` is active.
fn arc(cap: u32) -> PrimaryTier {
    let mut t = tier(cap, PolicyKind::Arc);
    t.request_begin(R).unwrap();
    t
}

/// The events drained, consecutive keys of one kind together.
fn drain(t: &mut PrimaryTier) -> Vec<(EventKind, Vec<Key>)> {
    let mut events = Vec::new();
    t.take_events(&mut events);
    let mut out: Vec<(EventKind, Vec<Key>)> = Vec::new();
    for e in events {
        match out.last_mut() {
            Some((kind, keys)) if *kind == e.kind => keys.extend(e.key),
            _ => out.push((e.kind, e.key.into_iter().collect())),
        }
    }
    out
}
