//! The manager's request handles, batched lookups (the same answers and
//! counters as one lookup per key), the reasons of a miss, typed
//! statistics and event batches.

use kvtier_testkit::common;
use kvtier_testkit::rng::Rng;

use common::*;
use kvtier_core::Error;
use kvtier_core::events::EventKind;
use kvtier_core::primary::{PrimaryConfig, PrimaryTier};
use kvtier_core::primary::{StoreOutcome, StorePlan};
use kvtier_core::request::{Locality, Medium, RequestId};
use kvtier_core::tiering::backend::PrimaryBackend;
use kvtier_core::tiering::{
    LookupAnswer, LookupResult, Manager, ManagerOptions, MissReason, PromotionAnswer, RequestParams,
};

fn start<P: PrimaryBackend>(m: &Manager<P>, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

/// Looks `keys` up one key per call, stopping at the first key not HIT,
/// as engines did before batched lookups.
fn one_by_one<P: PrimaryBackend>(
    m: &Manager<P>,
    r: RequestId,
    keys: &[kvtier_core::Key],
) -> (usize, LookupResult) {
    for (i, key) in keys.iter().enumerate() {
        let a = m.lookup(r, key).unwrap();
        if a != LookupResult::Hit {
            return (i, a);
        }
    }
    (keys.len(), LookupResult::Hit)
}

/// Every statistic but the measured times, which differ between runs.
fn comparable<P: PrimaryBackend>(m: &Manager<P>) -> Vec<(Option<usize>, String, f64)> {
    m.stats()
        .unwrap()
        .into_iter()
        .filter(|s| !s.stat.name.ends_with("_seconds"))
        .map(|s| (s.tier, s.stat.series_name().into_owned(), s.stat.value))
        .collect()
}

fn primary(capacity: u32, store_threshold: u32) -> PrimaryTier {
    PrimaryTier::new(PrimaryConfig {
        capacity,
        store_threshold,
        event_capacity: 256,
        ..Default::default()
    })
    .unwrap()
}

/// One engine's run, the same for both managers but for how it looks up:
/// batched (`lookup_per_key`) in `a`, one key per call in `b`.  Every
/// answer and every statistic must agree after every step.
/// Returns the misses of each reason and the promotions started.
fn same_run(
    seed: u64,
    real: bool,
    promotion_answer: PromotionAnswer,
    store_threshold: u32,
) -> [u64; 3] {
    if real {
        same_run_over(
            seed,
            real,
            || primary(12, store_threshold),
            promotion_answer,
        )
    } else {
        let model = || common::model::ModelPrimary::new(12);
        same_run_over(seed, real, model, promotion_answer)
    }
}

/// [`same_run`] over managers whose primary tiers `backend` builds.
fn same_run_over<P: PrimaryBackend>(
    seed: u64,
    real: bool,
    backend: impl Fn() -> P,
    promotion_answer: PromotionAnswer,
) -> [u64; 3] {
    let opts = ManagerOptions {
        promotion_answer,
        ..Default::default()
    };
    let build = || {
        let m = Manager::with_backend(backend(), opts.clone());
        let (t, s) = TestTier::new("t");
        s.lock().stored.extend(keys(30..40));
        m.add_tier(Box::new(t)).unwrap();
        (m, s)
    };
    let (a, sa) = build();
    let (b, sb) = build();
    let mut rng = Rng(seed);
    let mut next = 0;
    let (mut absent, mut no_room) = (0, 0);
    for step in 0..120 {
        let what = format!("seed {seed} real {real} step {step}");
        if step == 60 {
            a.reset_cache().unwrap();
            b.reset_cache().unwrap();
        }
        if step == 70 {
            a.reset_flushed().unwrap();
            b.reset_flushed().unwrap();
        }
        let mut started = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let name = format!("r{next}");
            next += 1;
            let (ra, rb) = (start(&a, &name), start(&b, &name));
            assert_eq!(ra, rb, "{what}");
            let n = rng.below(9) as usize;
            let ks: Vec<kvtier_core::Key> = (0..n).map(|_| k(rng.below(40) as u32)).collect();
            started.push((ra, ks));
        }
        let mut stores = Vec::new();
        for (r, ks) in &started {
            let got: LookupAnswer = a.lookup_per_key(*r, ks).unwrap();
            let want = one_by_one(&b, *r, ks);
            assert_eq!((got.hits, got.stop), want, "{what}: {ks:?}");
            match got.reason {
                Some(MissReason::Absent) => absent += 1,
                Some(MissReason::NoRoom) => no_room += 1,
                // Both managers wait alike: a timeout is an answer the
                // comparison above already checked.
                Some(MissReason::TimedOut) => {}
                None => assert_ne!(got.stop, LookupResult::Miss, "{what}"),
            }
            if got.stop == LookupResult::Miss {
                let rest = &ks[got.hits..];
                let (mut pa, mut pb) = (StorePlan::default(), StorePlan::default());
                let oa = a.prepare_store(*r, rest, &mut pa).unwrap();
                assert_eq!(oa, b.prepare_store(*r, rest, &mut pb).unwrap(), "{what}");
                assert_eq!(pa.to_store, pb.to_store, "{what}");
                if oa == StoreOutcome::Planned {
                    stores.push((*r, pa.to_store));
                }
            }
        }
        a.schedule_end().unwrap();
        b.schedule_end().unwrap();
        for (r, planned) in &stores {
            let ok = rng.below(5) != 0;
            let ra = report_of(a.complete_store(*r, planned, ok));
            assert_eq!(ra, report_of(b.complete_store(*r, planned, ok)), "{what}");
        }
        for (r, _) in &started {
            a.request_finished(*r).unwrap();
            b.request_finished(*r).unwrap();
        }
        assert_eq!(comparable(&a), comparable(&b), "{what}");
        assert_eq!(sa.lock().stored, sb.lock().stored, "{what}");
    }
    let st = a.manager_stats().unwrap();
    assert_eq!(
        (st.misses_absent, st.misses_no_room),
        (absent, no_room),
        "seed {seed} real {real}: every miss counted under its reason"
    );
    [absent, no_room, st.promotions_started]
}

#[test]
fn a_batched_lookup_answers_and_counts_as_one_lookup_per_key_did() {
    let mut seen = [0; 3];
    for seed in 1..=6 {
        for real in [true, false] {
            let answer = if seed % 2 == 0 {
                PromotionAnswer::Retry
            } else {
                PromotionAnswer::HitPending
            };
            // A store threshold of 2 leaves some promotions not admitted.
            let got = same_run(seed, real, answer, if seed % 3 == 0 { 2 } else { 0 });
            for (total, n) in seen.iter_mut().zip(got) {
                *total += n;
            }
        }
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "the runs met absent keys, keys without room and promotions: {seen:?}"
    );
}

#[test]
fn a_batch_stops_at_the_first_key_not_hit_and_looks_no_further() {
    let m = Manager::with_backend(primary(16, 0), ManagerOptions::default());
    let (t, s) = TestTier::new("t");
    s.lock().stored.extend(keys(20..30));
    m.add_tier(Box::new(t)).unwrap();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..10), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    m.request_finished(r).unwrap();
    let r = start(&m, "r");
    // Hits past one read-together group, then a key a tier has.
    let mut ks = keys(0..8);
    ks.extend([k(20), k(21), k(22)]);
    let a = m.lookup_per_key(r, &ks).unwrap();
    assert_eq!(
        (a.hits, a.stop, a.reason),
        (8, LookupResult::Retry, None),
        "the promotion of k20 started"
    );
    assert_eq!(s.lock().lookups, 1, "k21 and k22 were not looked up");
    let st = m.manager_stats().unwrap();
    assert_eq!(
        (st.lookups, st.primary_hits, st.promotions_started),
        (9, 8, 1)
    );
    let all = m.lookup_per_key(r, &keys(0..8)).unwrap();
    assert_eq!(
        (all.hits, all.stop, all.reason),
        (8, LookupResult::Hit, None)
    );
    let none = m.lookup_per_key(r, &[]).unwrap();
    assert_eq!((none.hits, none.stop), (0, LookupResult::Hit));
    assert_eq!(m.manager_stats().unwrap().lookups, 17);
}

#[test]
fn a_miss_says_whether_a_tier_has_the_key_and_both_are_counted() {
    // One slot, pinned by a load: a promotion finds no room.
    let m = Manager::with_backend(primary(1, 0), ManagerOptions::default());
    let (t, s) = TestTier::new("t");
    m.add_tier(Box::new(t)).unwrap();
    s.lock().stored.insert(k(2));
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &[k(1)], &mut plan).unwrap();
    m.complete_store(r, &[k(1)], true).unwrap();
    m.prepare_load(r, &[k(1)], &mut Vec::new()).unwrap();
    m.schedule_end().unwrap();
    let a = m.lookup_per_key(r, &[k(1), k(2)]).unwrap();
    assert_eq!(
        (a.hits, a.stop, a.reason),
        (1, LookupResult::Miss, Some(MissReason::NoRoom))
    );
    let a = m.lookup_per_key(r, &[k(3)]).unwrap();
    assert_eq!(
        (a.hits, a.stop, a.reason),
        (0, LookupResult::Miss, Some(MissReason::Absent))
    );
    let st = m.manager_stats().unwrap();
    assert_eq!((st.misses_no_room, st.misses_absent), (1, 1));
    assert_eq!(st.allocation_failures, 1);
    // The same counters by name, in the merged statistics.
    assert_eq!(stat(&m, None, "misses_no_room"), 1.0);
    assert_eq!(stat(&m, None, "misses_absent"), 1.0);
    // Promotions held after a reset: no tier is asked, absent.
    m.complete_load(r, &[k(1)]).unwrap();
    m.reset_cache().unwrap();
    let a = m.lookup_per_key(r, &[k(2)]).unwrap();
    assert_eq!(a.reason, Some(MissReason::Absent));
    let st = m.manager_stats().unwrap();
    assert_eq!((st.held_misses, st.misses_absent), (1, 2));

    // No secondary tier at all: absent.
    let m = Manager::with_backend(primary(4, 0), ManagerOptions::default());
    let r = start(&m, "r");
    let a = m.lookup_per_key(r, &[k(1)]).unwrap();
    assert_eq!(
        (a.stop, a.reason),
        (LookupResult::Miss, Some(MissReason::Absent))
    );
}

#[test]
fn handles_start_at_one_and_a_finished_handle_never_reaches_another_request() {
    let m = Manager::with_backend(primary(4, 0), ManagerOptions::default());
    let first = start(&m, "r");
    assert_eq!(first, RequestId(1), "0 is never a handle");
    assert!(matches!(
        m.request_begin("r", RequestParams::default()),
        Err(Error::DuplicateRequest(_))
    ));
    m.request_finished(first).unwrap();
    // The name is free again; the new request gets a new handle.
    let second = start(&m, "r");
    assert_eq!(second, RequestId(2));
    let unknown = |r: kvtier_core::Result<()>| {
        assert!(matches!(r, Err(Error::UnknownRequest(_))), "{r:?}");
    };
    unknown(m.lookup(first, &k(1)).map(|_| ()));
    unknown(m.touch(first, &[k(1)]));
    unknown(m.request_finished(first));
    unknown(m.lookup(RequestId(0), &k(1)).map(|_| ()));
    unknown(m.lookup(RequestId(99), &k(1)).map(|_| ()));
    let mut plan = StorePlan::default();
    unknown(m.prepare_store(first, &[k(1)], &mut plan).map(|_| ()));
    assert_eq!(m.manager_stats().unwrap().lookups, 0, "nothing looked up");
    // The live request is untouched.
    m.prepare_store(second, &[k(1)], &mut plan).unwrap();
    assert_eq!(plan.to_store, vec![k(1)]);
}

#[test]
fn event_batches_group_one_tiers_events_of_one_kind_and_keep_their_keys_until_the_next_take() {
    let m = Manager::with_backend(primary(2, 0), ManagerOptions::default());
    let (t, s) = TestTier::new("disk");
    s.lock().medium = Some(Medium::Storage);
    m.add_tier(Box::new(t)).unwrap();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(1..3), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    m.schedule_end().unwrap();
    m.prepare_store(r, &keys(3..5), &mut plan).unwrap(); // evicts 1 and 2
    m.complete_store(r, &plan.to_store, true).unwrap();
    s.lock().events.push(kvtier_core::events::Event {
        kind: EventKind::Stored,
        key: Some(k(9)),
    });
    let first = m
        .take_event_batches(2, |t| {
            let got: Vec<_> = t
                .batches
                .iter()
                .map(|b| (b.tier, b.kind, b.medium, b.locality, t.keys_of(b).to_vec()))
                .collect();
            (got, t.more)
        })
        .unwrap();
    let cpu = (Some(Medium::Cpu), Some(Locality::Local));
    assert_eq!(
        first.0,
        vec![
            (0, EventKind::Stored, cpu.0, cpu.1, keys(1..3)),
            (0, EventKind::Removed, cpu.0, cpu.1, keys(1..3)),
        ]
    );
    assert!(first.1, "more wait");
    let rest = m
        .take_event_batches(10, |t| {
            let got: Vec<_> = t
                .batches
                .iter()
                .map(|b| (b.tier, b.kind, b.medium, t.keys_of(b).to_vec()))
                .collect();
            (got, t.more)
        })
        .unwrap();
    assert_eq!(
        rest.0,
        vec![
            (0, EventKind::Stored, Some(Medium::Cpu), keys(3..5)),
            (1, EventKind::Stored, Some(Medium::Storage), vec![k(9)]),
        ]
    );
    assert!(!rest.1);
    // A reset's cleared event is a batch of its own, with no keys.
    m.reset_cache().unwrap();
    let cleared = m
        .take_event_batches(10, |t| {
            t.batches
                .iter()
                .map(|b| (b.tier, b.kind, b.len))
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(cleared, vec![(0, EventKind::Cleared, 0)]);
}

#[test]
fn a_write_pending_stop_and_each_tiers_lookups_are_counted() {
    let m = Manager::with_backend(primary(16, 0), ManagerOptions::default());
    let (t, s) = TestTier::new("t");
    m.add_tier(Box::new(t)).unwrap();
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    m.prepare_store(r, &keys(0..9), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    // k9 planned and not written yet: write pending.
    m.prepare_store(r, &[k(9)], &mut plan).unwrap();
    let a = m.lookup_per_key(r, &keys(0..12)).unwrap();
    assert_eq!((a.hits, a.stop), (9, LookupResult::HitPending));
    let st = m.manager_stats().unwrap();
    assert_eq!(
        (st.lookups, st.primary_hits, st.primary_hit_pending),
        (10, 9, 1)
    );
    // Two misses reach the tier, one lookup each.
    for key in [k(20), k(21)] {
        let a = m.lookup_per_key(r, &[key]).unwrap();
        assert_eq!(a.reason, Some(MissReason::Absent));
    }
    assert_eq!(s.lock().lookups, 2);
    assert_eq!(stat(&m, Some(1), "lookups"), 2.0);
    assert_eq!(m.manager_stats().unwrap().misses_absent, 2);
}

#[test]
fn an_answer_counts_the_hits_and_the_key_that_stopped_them_as_looked_up() {
    let answer = |hits, stop| LookupAnswer {
        hits,
        pending: 0,
        end: hits,
        stop,
        reason: None,
    };
    assert_eq!(answer(3, LookupResult::Hit).looked_up(), 3);
    assert_eq!(answer(3, LookupResult::Miss).looked_up(), 4);
    assert_eq!(answer(0, LookupResult::Retry).looked_up(), 1);
    assert_eq!(answer(0, LookupResult::Hit).looked_up(), 0);
}

#[test]
fn the_primary_tiers_events_waiting_in_the_manager_stay_within_its_event_capacity() {
    let p = PrimaryTier::new(PrimaryConfig {
        capacity: 16,
        event_capacity: 2,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::with_backend(p, ManagerOptions::default());
    let r = start(&m, "r");
    let mut plan = StorePlan::default();
    let queued = |m: &Manager<PrimaryTier>| m.events_queued().unwrap().keys;
    m.prepare_store(r, &keys(1..3), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    assert_eq!(queued(&m), 2);
    // Two more wait in the tier: the manager's share for it is full.
    m.prepare_store(r, &keys(3..5), &mut plan).unwrap();
    m.complete_store(r, &plan.to_store, true).unwrap();
    assert_eq!(queued(&m), 2, "the tier's share of the queue is full");
    let mut out = Vec::new();
    m.take_events(&mut out).unwrap();
    let taken: Vec<_> = out.iter().map(|e| e.event.key.unwrap()).collect();
    assert_eq!(taken, keys(1..3));
    assert_eq!(queued(&m), 2, "the two that waited in the tier come next");
    out.clear();
    m.take_events(&mut out).unwrap();
    let taken: Vec<_> = out.iter().map(|e| e.event.key.unwrap()).collect();
    assert_eq!(taken, keys(3..5));
}

#[test]
fn a_listener_gets_each_primary_event_once_from_any_backend() {
    // The reference model takes its events through the backend's default
    // way; the CPU tier through its own.
    fn run<P: PrimaryBackend>(p: P) -> Vec<(EventKind, Vec<kvtier_core::Key>)> {
        let m = Manager::with_backend(p, ManagerOptions::default());
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = got.clone();
        m.set_event_listener(
            Some(Box::new(move |b| {
                sink.lock().unwrap().push((b.kind, b.keys.to_vec()));
            })),
            false,
        )
        .unwrap();
        let r = start(&m, "r");
        let mut plan = StorePlan::default();
        for range in [1..4, 4..6] {
            m.prepare_store(r, &keys(range), &mut plan).unwrap();
            m.complete_store(r, &plan.to_store, true).unwrap();
            m.schedule_end().unwrap();
        }
        assert_eq!(m.events_queued().unwrap().keys, 0, "delivered, not queued");
        got.lock().unwrap().clone()
    }
    let want = vec![
        (EventKind::Stored, keys(1..4)),
        (EventKind::Stored, keys(4..6)),
    ];
    assert_eq!(run(common::model::ModelPrimary::new(16)), want);
    assert_eq!(run(primary(16, 0)), want);
}
