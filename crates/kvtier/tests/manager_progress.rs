//! The batched lookup that promotes a whole prefix, and the progress rule:
//! a prefix comes back in two steps, a lookup's own promotions never evict
//! its hits, blocks promoted for a waiting request are held for it until it
//! loads them, promotions that do not fit end the prefix, and every wait
//! ends within the bound.

use kvtier_testkit::common;
use kvtier_testkit::probe::Probed;

use common::*;
use kvtier_core::Key;
use kvtier_core::primary::{PolicyKind, PrimaryConfig, PrimaryTier};
use kvtier_core::primary::{StoreOutcome, StorePlan};
use kvtier_core::request::RequestId;
use kvtier_core::tiering::PrimaryBackend;
use kvtier_core::tiering::{
    LookupAnswer, LookupResult, Manager, ManagerOptions, MissReason, ProgressOptions,
    PromotionAnswer, RequestParams,
};

fn start<P: PrimaryBackend>(m: &Manager<P>, name: &str) -> RequestId {
    m.request_begin(name, RequestParams::default()).unwrap().id
}

fn manager_with(
    capacity: u32,
    policy: PolicyKind,
    progress: ProgressOptions,
) -> (
    Probed<PrimaryTier>,
    std::sync::Arc<parking_lot::Mutex<Script>>,
) {
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity,
        policy,
        event_capacity: 0,
        ..Default::default()
    })
    .unwrap();
    let m = Probed::new(
        primary,
        ManagerOptions {
            progress,
            ..Default::default()
        },
    );
    let (tier, script) = TestTier::new("mem");
    m.add_tier(rust(tier)).unwrap();
    (m, script)
}

fn manager(
    capacity: u32,
) -> (
    Probed<PrimaryTier>,
    std::sync::Arc<parking_lot::Mutex<Script>>,
) {
    manager_with(capacity, PolicyKind::Lru, ProgressOptions::default())
}

/// Stores `keys` in the primary tier for a request of their own, which
/// finishes, and ends the step (the tier's copies finish): they are then
/// resident, ready and idle.
fn resident<P: PrimaryBackend>(m: &Manager<P>, name: &str, keys: &[Key]) {
    let r = start(m, name);
    let mut plan = StorePlan::default();
    assert_eq!(
        m.prepare_store(r, keys, &mut plan).unwrap(),
        StoreOutcome::Planned
    );
    m.complete_store(r, keys, true).unwrap();
    m.request_finished(r).unwrap();
    m.schedule_end().unwrap();
    m.schedule_end().unwrap();
}

fn refs(m: &Probed<PrimaryTier>, key: &Key) -> Option<i32> {
    m.primary().ref_count(key)
}

fn answer(
    hits: usize,
    pending: usize,
    end: usize,
    stop: LookupResult,
    reason: Option<MissReason>,
) -> LookupAnswer {
    LookupAnswer {
        hits,
        pending,
        end,
        stop,
        reason,
    }
}

#[test]
fn a_prefix_held_by_a_tier_comes_back_in_two_steps() {
    let (m, script) = manager(128);
    script.lock().stored.extend(keys(0..64));
    let r = start(&m, "r");
    let ks = keys(0..64);
    let first = m.lookup_prefix(r, &ks).unwrap();
    assert_eq!(first, answer(0, 64, 64, LookupResult::Retry, None));
    assert_eq!(stat(&m, None, "promotions_started"), 64.0);
    m.schedule_end().unwrap();
    let second = m.lookup_prefix(r, &ks).unwrap();
    assert_eq!(second, answer(64, 0, 64, LookupResult::Hit, None));
    let mut slots = Vec::new();
    m.prepare_load(r, &ks, &mut slots).unwrap();
    assert_eq!(slots.len(), 64);
}

#[test]
fn per_key_lookups_bring_a_prefix_back_one_block_per_step() {
    let (m, script) = manager(128);
    script.lock().stored.extend(keys(0..8));
    let r = start(&m, "r");
    let ks = keys(0..8);
    let mut steps = 0;
    loop {
        steps += 1;
        let a = m.lookup_per_key(r, &ks).unwrap();
        if a.stop == LookupResult::Hit {
            break;
        }
        assert_eq!((a.pending, a.end), (1, a.hits + 1), "{a:?}");
        m.schedule_end().unwrap();
    }
    assert_eq!(steps, 9);
}

#[test]
fn the_prefix_ends_at_the_first_key_no_tier_has() {
    let (m, script) = manager(64);
    script
        .lock()
        .stored
        .extend(keys(2..5).into_iter().chain(keys(6..9)));
    resident(&m, "w", &keys(0..2));
    let r = start(&m, "r");
    let a = m.lookup_prefix(r, &keys(0..9)).unwrap();
    assert_eq!(
        a,
        answer(2, 3, 5, LookupResult::Retry, Some(MissReason::Absent))
    );
    assert_eq!(stat(&m, None, "promotions_started"), 3.0);
    assert_eq!(stat(&m, None, "misses_absent"), 1.0);
    assert_eq!(stat(&m, None, "lookups"), 6.0);
    assert_eq!(stat(&m, None, "primary_hits"), 2.0);
}

#[test]
fn the_scan_goes_on_past_write_pending_keys_and_hits_after_them() {
    let (m, script) = manager(64);
    script.lock().stored.insert(k(3));
    resident(&m, "w", &[k(0), k(2)]);
    // k(1) is being written by another request's store.
    let writer = start(&m, "writer");
    let mut plan = StorePlan::default();
    m.prepare_store(writer, &[k(1)], &mut plan).unwrap();
    let r = start(&m, "r");
    let a = m.lookup_prefix(r, &keys(0..5)).unwrap();
    // 0 ready; 1 pending; 2 ready; 3 promoted; 4 absent.
    assert_eq!(
        a,
        answer(1, 2, 4, LookupResult::HitPending, Some(MissReason::Absent))
    );
    assert_eq!(stat(&m, None, "primary_hit_pending"), 1.0);
}

#[test]
fn a_lookups_own_promotions_never_evict_the_hits_it_reports() {
    for progress in [ProgressOptions::default(), ProgressOptions::vllm()] {
        let (m, script) = manager_with(2, PolicyKind::Lru, progress);
        script.lock().stored.insert(k(9));
        resident(&m, "w", &[k(0), k(1)]);
        let r = start(&m, "r");
        let a = m.lookup_prefix(r, &[k(0), k(1), k(9)]).unwrap();
        assert_eq!(
            a,
            answer(2, 0, 2, LookupResult::Miss, Some(MissReason::NoRoom)),
            "{progress:?}"
        );
        let mut slots = Vec::new();
        m.prepare_load(r, &[k(0), k(1)], &mut slots).unwrap();
        assert_eq!(stat(&m, None, "misses_no_room"), 1.0);
    }
}

#[test]
fn a_promotion_evicts_an_idle_block_outside_the_prefix_not_a_hit() {
    let (m, script) = manager(3);
    script.lock().stored.insert(k(9));
    // k(5) is the least recently used: without protection the lookup's
    // promotion would take k(0) first.
    resident(&m, "w", &[k(0), k(1)]);
    resident(&m, "x", &[k(5)]);
    let r = start(&m, "r");
    let a = m.lookup_prefix(r, &[k(0), k(1), k(9)]).unwrap();
    assert_eq!(a, answer(2, 1, 3, LookupResult::Retry, None));
    assert_eq!(refs(&m, &k(5)), None);
    assert_eq!(refs(&m, &k(0)), Some(1));
    assert_eq!(refs(&m, &k(1)), Some(1));
}

#[test]
fn hits_past_where_the_prefix_ended_for_lack_of_room_are_not_held() {
    let (m, script) = manager(3);
    resident(&m, "w", &[k(0), k(3)]);
    script.lock().auto_finish = false;
    script.lock().stored.extend([k(1), k(2)]);
    let r = start(&m, "r");
    // k(1) takes the free slot; k(2) finds none (k(0) and k(3) are held
    // for the promotions): the prefix ends at k(2), and k(3), past it, is
    // let go.
    let a = m.lookup_prefix(r, &keys(0..4)).unwrap();
    assert_eq!(
        a,
        answer(1, 1, 2, LookupResult::Retry, Some(MissReason::NoRoom))
    );
    assert_eq!(refs(&m, &k(0)), Some(1), "in the prefix: held");
    assert_eq!(refs(&m, &k(3)), Some(0), "past the prefix: not held");
}

#[test]
fn holds_last_until_the_load_and_its_pins_take_over() {
    let (m, script) = manager(8);
    script.lock().stored.extend(keys(2..4));
    resident(&m, "w", &keys(0..2));
    let r = start(&m, "r");
    let ks = keys(0..4);
    assert_eq!(m.lookup_prefix(r, &ks).unwrap().pending, 2);
    m.schedule_end().unwrap();
    assert_eq!(
        m.lookup_prefix(r, &ks).unwrap(),
        answer(4, 0, 4, LookupResult::Hit, None)
    );
    // Hits held at the first lookup, promotions held on arrival.
    for key in &ks {
        assert_eq!(refs(&m, key), Some(1), "{key}");
    }
    let mut slots = Vec::new();
    m.prepare_load(r, &ks, &mut slots).unwrap();
    for key in &ks {
        assert_eq!(refs(&m, key), Some(1), "the load's pin alone: {key}");
    }
    m.complete_load(r, &ks).unwrap();
    for key in &ks {
        assert_eq!(refs(&m, key), Some(0), "{key}");
    }
}

#[test]
fn holds_end_when_the_request_finishes() {
    let (m, script) = manager(8);
    script.lock().stored.extend(keys(2..4));
    resident(&m, "w", &keys(0..2));
    let r = start(&m, "r");
    m.lookup_prefix(r, &keys(0..4)).unwrap();
    m.schedule_end().unwrap();
    m.lookup_prefix(r, &keys(0..4)).unwrap();
    assert_eq!(refs(&m, &k(0)), Some(1));
    m.request_finished(r).unwrap();
    for key in &keys(0..4) {
        assert_eq!(refs(&m, key), Some(0), "{key}");
    }
    let q = start(&m, "q");
    m.lookup_prefix(q, &keys(0..4)).unwrap();
    assert_eq!(
        refs(&m, &k(0)),
        Some(0),
        "nothing to wait for: nothing held"
    );
}

#[test]
fn a_reset_drops_every_hold_and_the_request_holds_nothing_after_it() {
    let (m, script) = manager(8);
    resident(&m, "w", &keys(0..2));
    script.lock().auto_finish = false;
    script.lock().stored.extend(keys(2..4));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..4)).unwrap().pending, 2);
    assert_eq!(refs(&m, &k(0)), Some(1), "held");
    script.lock().finish_on_drain = true;
    m.reset_cache().unwrap();
    m.reset_flushed().unwrap();
    script.lock().auto_finish = true;
    resident(&m, "w2", &keys(0..2));
    // Had the request kept its holds, its load would release one of them
    // and leave a pin of before the reset on a block of after it.
    let mut slots = Vec::new();
    m.prepare_load(r, &keys(0..2), &mut slots).unwrap();
    m.complete_load(r, &keys(0..2)).unwrap();
    assert_eq!((refs(&m, &k(0)), refs(&m, &k(1))), (Some(0), Some(0)));
    m.request_finished(r).unwrap();
    assert_eq!(stat(&m, None, "internal_errors"), 0.0);
}

#[test]
fn holds_outlive_a_settled_wait_only_until_the_bound() {
    let progress = ProgressOptions {
        wait_steps: 3,
        ..ProgressOptions::default()
    };
    let (m, script) = manager_with(8, PolicyKind::Lru, progress);
    script.lock().stored.extend(keys(0..4));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..4)).unwrap().pending, 4);
    m.schedule_end().unwrap();
    // Settled: the engine may load now, but does not (a budget, a
    // preemption); the holds, taken as the blocks arrived at this step's
    // first call, last until the bound counted from then: 3 steps.
    assert_eq!(m.lookup_prefix(r, &keys(0..4)).unwrap().pending, 0);
    for step in 1..=3 {
        assert_eq!(refs(&m, &k(0)), Some(1), "step {step} of the holds: held");
        m.schedule_end().unwrap();
    }
    for key in &keys(0..4) {
        assert_eq!(refs(&m, key), Some(0), "released at the bound: {key}");
    }
    assert_eq!(stat(&m, None, "wait_timeouts"), 0.0, "no wait timed out");
    // Released, the blocks are still known as promoted for the request:
    // loaded now, they count as served by the tier.
    let mut slots = Vec::new();
    m.prepare_load(r, &keys(0..4), &mut slots).unwrap();
    m.complete_load(r, &keys(0..4)).unwrap();
    m.request_finished(r).unwrap();
    assert_eq!(stat(&m, Some(1), "request_blocks_served"), 4.0);
    assert_eq!(stat(&m, None, "request_blocks_served_primary"), 0.0);
}

#[test]
fn hits_held_for_a_promotion_that_found_no_room_are_released_at_the_bound() {
    let progress = ProgressOptions {
        wait_steps: 2,
        ..ProgressOptions::default()
    };
    let (m, script) = manager_with(2, PolicyKind::Lru, progress);
    script.lock().stored.insert(k(9));
    resident(&m, "w", &[k(0), k(1)]);
    let r = start(&m, "r");
    let a = m.lookup_prefix(r, &[k(0), k(1), k(9)]).unwrap();
    assert_eq!(
        a,
        answer(2, 0, 2, LookupResult::Miss, Some(MissReason::NoRoom))
    );
    m.schedule_end().unwrap();
    assert_eq!(refs(&m, &k(0)), Some(1), "held until the load or the bound");
    m.schedule_end().unwrap();
    assert_eq!((refs(&m, &k(0)), refs(&m, &k(1))), (Some(0), Some(0)));
}

#[test]
fn another_requests_stray_unpin_of_a_held_block_leaves_the_other_holds_releasable() {
    let (m, script) = manager(8);
    resident(&m, "w", &keys(0..2));
    script.lock().auto_finish = false;
    script.lock().stored.insert(k(5));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &[k(0), k(1), k(5)]).unwrap().pending, 1);
    assert_eq!((refs(&m, &k(0)), refs(&m, &k(1))), (Some(1), Some(1)));
    // q never loaded k(0): as in vLLM, its unpin takes a pin all the same.
    let q = start(&m, "q");
    m.complete_load(q, &[k(0)]).unwrap();
    assert_eq!(refs(&m, &k(0)), Some(0));
    m.request_finished(r).unwrap();
    assert_eq!(refs(&m, &k(1)), Some(0), "r's other hold is released");
    assert_eq!(
        stat(&m, None, "internal_errors"),
        0.0,
        "another call's doing, not ours"
    );
    let mut log = Vec::new();
    m.take_errors(&mut log).unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(
        log[0].contains("1 held blocks had lost their pin"),
        "{log:?}"
    );
    // A release where every pin is there logs nothing.
    let s = start(&m, "s");
    assert_eq!(m.lookup_prefix(s, &[k(0), k(1), k(5)]).unwrap().pending, 1);
    m.request_finished(s).unwrap();
    m.take_errors(&mut log).unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
}

/// A request whose promotions arrived, and another request's store that
/// wants every slot: with holds the waiting request keeps its blocks, and
/// without (vLLM's rules) the store evicts them and the request promotes
/// them again.
#[test]
fn blocks_promoted_for_a_waiting_request_survive_other_requests_stores() {
    for (progress, kept) in [
        (ProgressOptions::default(), true),
        (ProgressOptions::vllm(), false),
    ] {
        let (m, script) = manager_with(4, PolicyKind::Arc, progress);
        script.lock().stored.extend(keys(0..2));
        let r = start(&m, "r");
        assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().pending, 2);
        m.schedule_end().unwrap();
        let other = start(&m, "other");
        let mut plan = StorePlan::default();
        let outcome = m.prepare_store(other, &keys(10..14), &mut plan).unwrap();
        let again = m.lookup_prefix(r, &keys(0..2)).unwrap();
        if kept {
            assert_eq!(
                outcome,
                StoreOutcome::Refused,
                "only 2 slots are free of holds"
            );
            assert_eq!(again, answer(2, 0, 2, LookupResult::Hit, None));
        } else {
            assert_eq!(outcome, StoreOutcome::Planned);
            assert_eq!(again.hits, 0, "{again:?}");
        }
    }
}

#[test]
fn promotions_that_do_not_fit_end_the_prefix_and_it_stays_ended_while_the_request_waits() {
    let (m, script) = manager(4);
    script.lock().stored.extend(keys(0..8));
    let r = start(&m, "r");
    let ks = keys(0..8);
    let a = m.lookup_prefix(r, &ks).unwrap();
    assert_eq!(
        a,
        answer(0, 4, 4, LookupResult::Retry, Some(MissReason::NoRoom))
    );
    assert_eq!(stat(&m, None, "promotions_started"), 4.0);
    m.schedule_end().unwrap();
    let b = m.lookup_prefix(r, &ks).unwrap();
    assert_eq!(
        b,
        answer(4, 0, 4, LookupResult::Miss, Some(MissReason::NoRoom))
    );
    assert_eq!(
        stat(&m, None, "promotions_started"),
        4.0,
        "none started piecemeal"
    );
    let mut slots = Vec::new();
    m.prepare_load(r, &keys(0..4), &mut slots).unwrap();
}

#[test]
fn while_promotions_are_on_their_way_the_prefix_stays_ended_where_room_ran_out() {
    let (m, script) = manager(4);
    script.lock().auto_finish = false;
    script.lock().stored.extend(keys(0..8));
    let r = start(&m, "r");
    let ks = keys(0..8);
    assert_eq!(
        m.lookup_prefix(r, &ks).unwrap(),
        answer(0, 4, 4, LookupResult::Retry, Some(MissReason::NoRoom))
    );
    let (lookups, no_room) = (stat(&m, None, "lookups"), stat(&m, None, "misses_no_room"));
    assert_eq!(
        (lookups, no_room),
        (8.0, 1.0),
        "each key scanned, the first with no room missed"
    );
    m.schedule_end().unwrap();
    // The four promotions are in flight: the scan stops at the cap, and
    // the key there counts as one lookup and one miss for no room.
    let b = m.lookup_prefix(r, &ks).unwrap();
    assert_eq!(
        b,
        answer(0, 4, 4, LookupResult::HitPending, Some(MissReason::NoRoom))
    );
    assert_eq!(stat(&m, None, "lookups"), lookups + 5.0);
    assert_eq!(stat(&m, None, "misses_no_room"), no_room + 1.0);
    assert_eq!(stat(&m, None, "promotions_started"), 4.0);
}

#[test]
fn a_wait_ends_at_the_step_bound_with_a_timed_out_miss() {
    let progress = ProgressOptions {
        wait_steps: 3,
        ..ProgressOptions::default()
    };
    let (m, script) = manager_with(8, PolicyKind::Lru, progress);
    resident(&m, "w", &[k(0)]);
    script.lock().auto_finish = false;
    script.lock().stored.extend(keys(1..3));
    let r = start(&m, "r");
    let ks = keys(0..3);
    assert_eq!(m.lookup_prefix(r, &ks).unwrap().pending, 2);
    assert_eq!(refs(&m, &k(0)), Some(1));
    for step in 1..=3 {
        m.schedule_end().unwrap();
        let lookups = stat(&m, None, "lookups");
        let a = m.lookup_prefix(r, &ks).unwrap();
        if step == 3 {
            assert_eq!(
                stat(&m, None, "lookups"),
                lookups + 2.0,
                "the hit and the key timed out"
            );
        }
        if step < 3 {
            assert_eq!(
                a,
                answer(1, 2, 3, LookupResult::HitPending, None),
                "step {step}"
            );
        } else {
            assert_eq!(
                a,
                answer(1, 0, 1, LookupResult::Miss, Some(MissReason::TimedOut))
            );
        }
    }
    assert_eq!(refs(&m, &k(0)), Some(0), "the bound released the hold");
    assert_eq!(stat(&m, None, "wait_timeouts"), 1.0);
    assert_eq!(stat(&m, None, "misses_timed_out"), 1.0);
    // The wait ended: a later lookup waits anew.
    assert_eq!(m.lookup_prefix(r, &ks).unwrap().pending, 2);
}

#[test]
fn a_per_key_lookup_past_the_bound_answers_timed_out_too() {
    let progress = ProgressOptions {
        wait_steps: 1,
        ..ProgressOptions::default()
    };
    let (m, script) = manager_with(8, PolicyKind::Lru, progress);
    script.lock().auto_finish = false;
    script.lock().stored.insert(k(0));
    let r = start(&m, "r");
    assert_eq!(m.lookup(r, &k(0)).unwrap(), LookupResult::Retry);
    m.schedule_end().unwrap();
    let a = m.lookup_per_key(r, &[k(0)]).unwrap();
    assert_eq!(
        a,
        answer(0, 0, 0, LookupResult::Miss, Some(MissReason::TimedOut))
    );
}

#[test]
fn a_wait_ends_at_the_time_bound() {
    let progress = ProgressOptions {
        wait_steps: 0,
        wait_ms: 1,
        ..ProgressOptions::default()
    };
    let (m, script) = manager_with(8, PolicyKind::Lru, progress);
    script.lock().auto_finish = false;
    script.lock().stored.insert(k(0));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &[k(0)]).unwrap().pending, 1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let a = m.lookup_prefix(r, &[k(0)]).unwrap();
    assert_eq!(a.reason, Some(MissReason::TimedOut));
}

#[test]
fn without_a_bound_a_request_waits_as_long_as_its_promotions_take() {
    let (m, script) = manager_with(8, PolicyKind::Lru, ProgressOptions::vllm());
    script.lock().auto_finish = false;
    script.lock().stored.insert(k(0));
    let r = start(&m, "r");
    for _ in 0..100 {
        assert_eq!(m.lookup_prefix(r, &[k(0)]).unwrap().pending, 1);
        m.schedule_end().unwrap();
    }
    script.lock().finish_all(true);
    assert_eq!(m.lookup_prefix(r, &[k(0)]).unwrap().hits, 1);
}

#[test]
fn a_tier_that_asks_to_be_asked_again_keeps_the_prefix_open() {
    let (m, script) = manager(8);
    script.lock().retry_lookups = true;
    script.lock().stored.insert(k(1));
    let r = start(&m, "r");
    let a = m.lookup_prefix(r, &keys(0..3)).unwrap();
    // 0 retry, 1 promoted, 2 retry: the prefix spans all three.
    assert_eq!(a, answer(0, 3, 3, LookupResult::Retry, None));
}

#[test]
fn the_promotion_answer_option_shapes_the_stop_only() {
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: 8,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::new(
        primary,
        ManagerOptions {
            promotion_answer: PromotionAnswer::HitPending,
            ..Default::default()
        },
    );
    let (tier, script) = TestTier::new("mem");
    m.add_tier(rust(tier)).unwrap();
    script.lock().stored.extend(keys(0..2));
    let r = start(&m, "r");
    let a = m.lookup_prefix(r, &keys(0..2)).unwrap();
    assert_eq!(a, answer(0, 2, 2, LookupResult::HitPending, None));
}

#[test]
fn a_failed_promotion_ends_the_wait_with_a_miss_next_time() {
    let (m, script) = manager(8);
    script.lock().fail_all = true;
    script.lock().stored.extend(keys(0..2));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &keys(0..2)).unwrap().pending, 2);
    m.schedule_end().unwrap();
    script.lock().stored.clear();
    let a = m.lookup_prefix(r, &keys(0..2)).unwrap();
    assert_eq!(
        a,
        answer(0, 0, 0, LookupResult::Miss, Some(MissReason::Absent))
    );
}

#[test]
fn a_promotion_that_arrives_after_the_request_finished_is_not_held() {
    let (m, script) = manager(8);
    script.lock().auto_finish = false;
    script.lock().stored.insert(k(0));
    let r = start(&m, "r");
    m.lookup_prefix(r, &[k(0)]).unwrap();
    m.schedule_end().unwrap();
    m.request_finished(r).unwrap();
    script.lock().finish_all(true);
    m.schedule_end().unwrap();
    assert_eq!(refs(&m, &k(0)), Some(0));
}

/// Many requests over a small primary tier, each waiting for its prefix
/// (half of it in the tier): with the progress rule every request loads
/// within the bound, for both policies and several capacities.
#[test]
fn under_pressure_every_request_loads_within_the_bound() {
    for policy in [PolicyKind::Lru, PolicyKind::Arc] {
        for capacity in [16, 48, 160] {
            let bound = ProgressOptions::default().wait_steps as u64;
            let (m, script) = manager_with(capacity, policy, ProgressOptions::default());
            let mut rng = 0x9e37_79b9_u64;
            let mut next = |n: u64| {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (rng >> 33) % n
            };
            let mut active: Vec<(RequestId, Vec<Key>, u64)> = Vec::new();
            let mut finished = 0u64;
            let mut started = 0u32;
            let mut step = 0u64;
            while finished < 300 {
                step += 1;
                assert!(step < 20_000, "{policy:?} {capacity}: no progress");
                while active.len() < 12 {
                    let doc = next(40) as u32;
                    let len = 4 + next(12) as u32;
                    let ks = keys(doc * 100..doc * 100 + len);
                    script.lock().stored.extend(ks.iter().copied());
                    active.push((start(&m, &format!("r{started}")), ks, step));
                    started += 1;
                }
                let mut still = Vec::new();
                for (r, ks, since) in active.drain(..) {
                    let a = m.lookup_prefix(r, &ks).unwrap();
                    if a.pending > 0 {
                        assert!(
                            step - since <= bound + 1,
                            "{policy:?} {capacity}: waited {} steps",
                            step - since
                        );
                        still.push((r, ks, since));
                        continue;
                    }
                    let mut slots = Vec::new();
                    m.prepare_load(r, &ks[..a.hits], &mut slots).unwrap();
                    let mut plan = StorePlan::default();
                    if m.prepare_store(r, &ks[a.hits..], &mut plan).unwrap()
                        == StoreOutcome::Planned
                    {
                        let stored = plan.to_store.clone();
                        m.complete_store(r, &stored, true).unwrap();
                    }
                    m.complete_load(r, &ks[..a.hits]).unwrap();
                    m.request_finished(r).unwrap();
                    finished += 1;
                }
                active = still;
                m.schedule_end().unwrap();
            }
            m.primary().check_invariants().unwrap();
        }
    }
}

#[test]
fn a_promotion_that_arrives_after_the_wait_timed_out_is_not_held() {
    let progress = ProgressOptions {
        wait_steps: 1,
        ..ProgressOptions::default()
    };
    let (m, script) = manager_with(8, PolicyKind::Lru, progress);
    script.lock().auto_finish = false;
    script.lock().stored.insert(k(0));
    let r = start(&m, "r");
    assert_eq!(m.lookup_prefix(r, &[k(0)]).unwrap().pending, 1);
    m.schedule_end().unwrap();
    assert_eq!(stat(&m, None, "wait_timeouts"), 1.0);
    script.lock().finish_all(true);
    m.schedule_end().unwrap();
    assert_eq!(
        refs(&m, &k(0)),
        Some(0),
        "arrived for a request no longer waiting"
    );
}
