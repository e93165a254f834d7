//! `ProgressOptions::hold_hits`, the rule of a manager several engines
//! share: a lookup's hits stay in the primary tier, held for its request,
//! until its load, its finish or the wait bound, so that another engine's
//! store between the lookup and the load cannot evict them.

use kvtier_testkit::common::{k, keys};

use kvtier_core::Error;
use kvtier_core::primary::{PrimaryConfig, PrimaryTier, StoreOutcome, StorePlan};
use kvtier_core::request::RequestId;
use kvtier_core::tiering::{Manager, ManagerOptions, ProgressOptions, RequestParams};

fn manager(hold_hits: bool, wait_steps: u32) -> Manager {
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: 4,
        ..Default::default()
    })
    .unwrap();
    Manager::new(
        primary,
        ManagerOptions {
            progress: ProgressOptions {
                hold_hits,
                wait_steps,
                ..ProgressOptions::default()
            },
            ..Default::default()
        },
    )
}

fn begin(m: &Manager, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

/// Keys 0..4 ready, the primary tier full.
fn filled(m: &Manager) {
    let r = begin(m, "fill");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..4), &mut plan).unwrap();
    m.complete_store(r, &keys(0..4), true).unwrap();
    m.request_finished(r).unwrap();
}

/// Another request's store of four new keys: planned (evicting all four
/// ready keys; the store stays in flight) or refused (the request ends).
fn store_four_new(m: &Manager) -> StoreOutcome {
    let r = m.request_begin(&format!("other-{}", next()), RequestParams::default());
    let r = r.unwrap().id;
    let mut plan = StorePlan::default();
    let outcome = m.prepare_store(r, &keys(10..14), &mut plan).unwrap();
    if outcome == StoreOutcome::Refused {
        m.request_finished(r).unwrap();
    }
    outcome
}

fn next() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn without_the_rule_a_store_between_lookup_and_load_evicts_the_hits() {
    let m = manager(false, 16);
    filled(&m);
    let r = begin(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().hits, 2);
    assert_eq!(store_four_new(&m), StoreOutcome::Planned);
    let e = m.prepare_load(r, &keys(0..2), &mut Vec::new()).unwrap_err();
    assert!(matches!(e, Error::KeyState { .. }), "{e}");
}

#[test]
fn held_hits_survive_another_requests_store_until_the_load_takes_them_over() {
    for per_key in [false, true] {
        let m = manager(true, 16);
        filled(&m);
        let r = begin(&m, "r");
        let a = if per_key {
            m.lookup_per_key(r, &keys(0..2)).unwrap()
        } else {
            m.lookup_prefix(r, &keys(0..2)).unwrap()
        };
        assert_eq!(a.hits, 2);
        // Two of four slots are held: four new keys do not fit.
        assert_eq!(
            store_four_new(&m),
            StoreOutcome::Refused,
            "per key: {per_key}"
        );
        let mut slots = Vec::new();
        m.prepare_load(r, &keys(0..2), &mut slots).unwrap();
        assert_eq!(slots.len(), 2);
        m.complete_load(r, &keys(0..2)).unwrap();
        // The load released the holds: nothing is held any more.
        assert_eq!(
            store_four_new(&m),
            StoreOutcome::Planned,
            "per key: {per_key}"
        );
    }
}

#[test]
fn held_hits_go_at_the_requests_finish_and_at_the_bound() {
    let m = manager(true, 2);
    filled(&m);
    let r = begin(&m, "r");
    assert_eq!(m.lookup_prefix(r, &[k(0)]).unwrap().hits, 1);
    let o = begin(&m, "o");
    let mut plan = StorePlan::default();
    // One held: the other three of four new keys fit, not four.
    assert_eq!(
        m.prepare_store(o, &keys(10..14), &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    m.request_finished(r).unwrap();
    assert_eq!(
        m.prepare_store(o, &keys(10..14), &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    m.complete_store(o, &keys(10..14), true).unwrap();
    m.request_finished(o).unwrap();
    // The bound: two steps after the hold, it is released.
    let r = begin(&m, "r2");
    assert_eq!(m.lookup_prefix(r, &keys(10..12)).unwrap().hits, 2);
    let o = begin(&m, "o2");
    let mut plan = StorePlan::default();
    assert_eq!(
        m.prepare_store(o, &keys(20..24), &mut plan).unwrap(),
        StoreOutcome::Refused
    );
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
    assert_eq!(
        m.prepare_store(o, &keys(20..24), &mut plan).unwrap(),
        StoreOutcome::Planned
    );
}
