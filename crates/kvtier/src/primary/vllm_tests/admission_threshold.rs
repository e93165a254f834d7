//! The admission threshold within a call (every key of a call counted
//! before any is forgotten, an offer larger than the table), and vLLM's
//! reuse-filter tests.

use super::*;

#[test]
fn admission_counts_every_key_of_a_call_before_forgetting_any() {
    // Table of 2: the second call's C must not push out A, offered again
    // in the same call.
    let mut t = configured(4, PolicyKind::Lru, 2, 2);
    t.request_begin(R).unwrap();
    assert_eq!(offer(&mut t, R, &[1, 2]), Some(vec![]));
    assert_eq!(offer(&mut t, R, &[3, 1]), Some(ks(&[1])));
    // The table forgot 2 (the oldest not offered in the call) for 3.
    assert_eq!(offer(&mut t, R, &[3]), Some(ks(&[3])));
}

/// Mirrors vLLM's `test_filter_reused_manager_oversized_offer_makes_progress`:
/// a call offering more distinct keys than the table holds records what
/// fits; the rest are stored by later offers.
#[test]
fn admission_of_an_offer_larger_than_the_table_makes_progress() {
    let mut t = configured(4, PolicyKind::Lru, 2, 3);
    t.request_begin(R).unwrap();
    let mut stored: Vec<u32> = Vec::new();
    let mut per_call = Vec::new();
    for _ in 0..4 {
        let rest: Vec<u32> = (1..=4).filter(|n| !stored.contains(n)).collect();
        let plan = store(&mut t, R, &rest);
        per_call.push(plan.to_store.len());
        stored.extend(rest.iter().filter(|&&n| plan.to_store.contains(&k(n))));
    }
    stored.sort();
    assert_eq!(stored, vec![1, 2, 3, 4]);
    // 1, 2, 3 recorded by the first call (4 did not fit); the second
    // stores them; 4 is recorded by the third and stored by the fourth.
    assert_eq!(per_call, vec![0, 3, 0, 1]);
}

/// Mirrors vLLM's `test_filter_reused_manager` (store_threshold 2, a table
/// of 3): a repeated offer makes the whole prefix eligible at once; the
/// table forgets its oldest entry; an offer of a resident key counts.
#[test]
fn admission_follows_vllms_reuse_filter_scenario() {
    let mut t = configured(4, PolicyKind::Lru, 2, 3);
    t.request_begin(R).unwrap();
    // Lookups do not count as offers.
    assert_eq!(t.lookup(&k(1)), PrimaryLookup::Miss);
    assert_eq!(t.stats().admission_table_len, 0);
    assert_eq!(store(&mut t, R, &[1, 2]).to_store, vec![]);
    assert_eq!(t.stats().admission_table_len, 2);
    assert_eq!(store(&mut t, R, &[1, 2]).to_store, ks(&[1, 2]));
    // 3 and 4: first offers; 1, the oldest entry, is forgotten.
    assert_eq!(store(&mut t, R, &[3, 4]).to_store, vec![]);
    assert_eq!(t.stats().admission_table_len, 3);
    // 1 (resident) is offered: it re-enters the table at one offer,
    // pushing out 2.  3 is then at its second offer.
    assert_eq!(store(&mut t, R, &[1]).to_store, vec![]);
    assert_eq!(store(&mut t, R, &[3]).to_store, ks(&[3]));
    assert_eq!(t.stats().admission_skips, 4);
}

#[test]
fn admission_counts_an_offer_of_a_resident_key() {
    // Capacity 1, threshold 2, a table of 2.
    let mut t = configured(1, PolicyKind::Lru, 2, 2);
    t.request_begin(R).unwrap();
    store(&mut t, R, &[1]);
    assert_eq!(store(&mut t, R, &[1]).to_store, ks(&[1]));
    store(&mut t, R, &[2]);
    store(&mut t, R, &[3]); // the table forgets 1: [2, 3]
    // 1 is resident; its offer still counts (the table forgets 2).
    assert_eq!(store(&mut t, R, &[1]).to_store, vec![]);
    let plan = store(&mut t, R, &[3]);
    assert_eq!((plan.to_store, plan.evicted), (ks(&[3]), ks(&[1])));
    // 1 is absent again, at its second offer since the table forgot it.
    assert_eq!(store(&mut t, R, &[1]).to_store, ks(&[1]));
}

/// Mirrors vLLM's `test_filter_reused_manager_reports_stores_skipped_counter`
/// (vLLM reports the count since the last read; here it is cumulative).
#[test]
fn admission_skips_count_every_candidate_held_back() {
    let mut t = configured(4, PolicyKind::Lru, 2, 64_000);
    t.request_begin(R).unwrap();
    let plan = store(&mut t, R, &[1, 2, 3]);
    assert_eq!(
        (plan.to_store, plan.slots, plan.evicted),
        (vec![], vec![], vec![])
    );
    assert_eq!(t.stats().admission_skips, 3);
    assert_eq!(t.stats().admission_skips, 3, "a read resets nothing");
}

/// Mirrors vLLM's `test_store_threshold_does_not_hide_ready_reuse`: a
/// resident key whose offers the table forgot is still found ready (reused,
/// not a skipped store), and its reuse refreshes it.
#[test]
fn admission_does_not_hide_the_reuse_of_a_ready_key() {
    let mut t = configured(2, PolicyKind::Lru, 2, 2);
    let (head, tail, noise_1, noise_2, replacement) = (0, 1, 2, 3, 4);
    let seed = RequestId(10);
    t.request_begin(seed).unwrap();
    assert_eq!(offer(&mut t, seed, &[head, tail]), Some(vec![]));
    assert_eq!(
        store(&mut t, seed, &[head, tail]).to_store,
        ks(&[head, tail])
    );
    t.request_finished(seed).unwrap();
    // The noise ages both resident keys out of the table.
    let noise = RequestId(11);
    t.request_begin(noise).unwrap();
    assert_eq!(offer(&mut t, noise, &[noise_1, noise_2]), Some(vec![]));
    let reuse = RequestId(12);
    t.request_begin(reuse).unwrap();
    let skips = t.stats().admission_skips;
    assert_eq!(offer(&mut t, reuse, &[tail]), Some(vec![]));
    assert_eq!(
        t.stats().admission_skips,
        skips,
        "a resident key is no skipped store"
    );
    t.request_finished(reuse).unwrap();
    let r = RequestId(13);
    t.request_begin(r).unwrap();
    assert_eq!(offer(&mut t, r, &[replacement]), Some(vec![]));
    let mut plan = StorePlan::default();
    t.prepare_store(r, &ks(&[replacement]), &mut plan).unwrap();
    assert_eq!(
        plan.evicted,
        ks(&[head]),
        "the reused tail outlives the head"
    );
}
