//! Tests of the fs tier's index.

use super::*;

fn k(i: u8) -> Key {
    Key::new(&[i]).unwrap()
}

#[test]
fn lru_order_touch_and_readers() {
    let mut ix = Index::new(10);
    for i in 0..4 {
        ix.insert(k(i), State::Ready);
    }
    assert_eq!(ix.used(), 40);
    ix.touch(&k(0));
    assert!(ix.add_reader(&k(1)));
    assert_eq!(ix.evict_one(true), Some(k(2)), "1 is being read");
    assert_eq!(ix.get(&k(2)), Some((State::Removing, 0)));
    assert_eq!(ix.used(), 30);
    assert_eq!(ix.remove(&k(2)), Some(State::Removing));
    assert_eq!(ix.used(), 30);
    assert_eq!(ix.evict_one(false), Some(k(3)));
    assert_eq!(ix.evict_one(false), Some(k(0)));
    assert_eq!(ix.evict_one(false), None, "only the read key is left");
    ix.drop_reader(&k(1));
    assert_eq!(ix.evict_one(false), Some(k(1)));
    assert_eq!((ix.used(), ix.ready_count()), (0, 0));
}

#[test]
fn with_prefix_parts_idle_keys_from_busy_ones() {
    let mut ix = Index::new(10);
    let ab = |a: u8, b: u8| Key::new(&[a, b]).unwrap();
    for i in 0..4 {
        ix.insert(ab(1, i), State::Ready);
    }
    ix.insert(ab(1, 9), State::Writing);
    ix.insert(ab(2, 0), State::Ready);
    assert!(ix.add_reader(&ab(1, 1)));
    assert_eq!(ix.evict_one(true), Some(ab(1, 0)), "1.0 is least recent");
    let mut idle = Vec::new();
    // 1.0 is being removed (neither), 1.1 read and 1.9 written (busy).
    assert_eq!(ix.with_prefix(&[1], &mut idle), 2);
    idle.sort_unstable();
    assert_eq!(idle, vec![ab(1, 2), ab(1, 3)]);
    idle.clear();
    assert_eq!(ix.with_prefix(&[], &mut idle), 2);
    assert_eq!(idle.len(), 3);
}

#[test]
fn dropping_a_fanout_forgets_only_its_ready_keys() {
    let mut ix = Index::new(10);
    let keys: Vec<Key> = (0..40).map(k).collect();
    let f = Layout::fanout_index(&keys[0]);
    for key in &keys {
        ix.insert(*key, State::Ready);
    }
    ix.set_announced(&keys[0]);
    let writing = (0..=255u8)
        .map(|i| Key::new(&[i, 1]).unwrap())
        .find(|key| Layout::fanout_index(key) == f)
        .unwrap();
    ix.insert(writing, State::Writing);
    let in_f = keys
        .iter()
        .filter(|key| Layout::fanout_index(key) == f)
        .count();
    let mut out = Vec::new();
    ix.drop_ready(Some(f), &mut out);
    assert_eq!(out.len(), in_f);
    assert!(out.contains(&(keys[0], true)));
    assert!(out.iter().all(|(key, _)| Layout::fanout_index(key) == f));
    assert_eq!(ix.ready_count(), 40 - in_f);
    assert_eq!(ix.get(&writing), Some((State::Writing, 0)));
    assert_eq!(ix.used(), (40 - in_f as u64 + 1) * 10);
    out.clear();
    ix.drop_ready(Some(f), &mut out);
    assert!(out.is_empty());
    ix.drop_ready(None, &mut out);
    assert_eq!(out.len(), 40 - in_f);
    assert_eq!((ix.ready_count(), ix.used()), (0, 10));
}

#[test]
fn writing_keys_are_not_evictable_until_ready() {
    let mut ix = Index::new(5);
    ix.insert(k(1), State::Writing);
    assert_eq!(ix.used(), 5);
    assert_eq!(ix.evict_one(false), None);
    assert!(!ix.add_reader(&k(1)));
    assert!(ix.set_ready(&k(1)));
    assert!(!ix.set_ready(&k(1)));
    assert_eq!(ix.evict_one(false), Some(k(1)));
    ix.insert(k(2), State::Writing);
    assert_eq!(ix.remove(&k(2)), Some(State::Writing));
    assert_eq!(ix.used(), 0);
}

#[test]
fn records_found_at_restart_stay_theirs_and_the_others_go_out_lowest_first() {
    let mut ix = Index::with_records(100, 6, &[(k(1), 1), (k(2), 4)]).unwrap();
    assert_eq!((ix.record(&k(1)), ix.record(&k(2))), (Some(1), Some(4)));
    assert_eq!(ix.free_records(), 4);
    let mut got = Vec::new();
    for n in 10..14 {
        ix.insert(k(n), State::Writing);
        got.push(ix.assign_record(&k(n)).unwrap());
    }
    assert_eq!(got, [0, 2, 3, 5]);
    ix.insert(k(20), State::Writing);
    assert_eq!(ix.assign_record(&k(20)), None, "no record left");
    // A Ready key, or one that has a record, gets none.
    assert_eq!(ix.assign_record(&k(1)), None);
    assert_eq!(ix.assign_record(&k(10)), None);
    // Removing and evicting give records back.
    ix.remove(&k(11));
    assert_eq!(ix.free_records(), 1);
    assert_eq!(ix.assign_record(&k(10)), None, "one record per key");
    assert_eq!(ix.free_records(), 1);
    assert_eq!(
        ix.evict_one(false),
        Some(k(1)),
        "the least recent found block"
    );
    assert_eq!(ix.free_records(), 2);
    assert_eq!(ix.record(&k(1)), None);
}

#[test]
fn held_keys_are_out_of_eviction_retirement_and_drops_until_released() {
    let mut ix = Index::new(10);
    for i in 0..4 {
        ix.insert(k(i), State::Ready);
    }
    ix.insert(k(9), State::Writing);
    assert!(ix.hold(&k(0)) && ix.hold(&k(1)));
    assert!(ix.hold(&k(0)), "held already");
    assert!(!ix.hold(&k(9)) && !ix.hold(&k(7)), "written, absent");
    assert_eq!(ix.held_count(), 2);
    ix.touch(&k(0));
    assert!(!ix.retire(&k(0)));
    let mut idle = Vec::new();
    assert_eq!(ix.with_prefix(&[], &mut idle), 3, "two held, one written");
    idle.sort_unstable();
    assert_eq!(idle, vec![k(2), k(3)]);
    let mut all = Vec::new();
    ix.ready_keys(&mut all);
    assert_eq!(all, vec![k(2), k(3), k(0), k(1)], "held keys last");
    assert_eq!(ix.evict_one(false), Some(k(2)));
    assert_eq!(ix.evict_one(false), Some(k(3)));
    assert_eq!(ix.evict_one(false), None, "only held keys are left");
    // Released, key 1 is the most recent: key 0 goes first.
    assert!(ix.release_hold(&k(0)) && ix.release_hold(&k(1)));
    assert!(!ix.release_hold(&k(1)));
    assert_eq!(ix.held_count(), 0);
    assert_eq!(ix.evict_one(false), Some(k(0)));
    assert!(ix.hold(&k(1)));
    assert_eq!(ix.remove(&k(1)), Some(State::Ready));
    assert_eq!((ix.held_count(), ix.ready_count()), (0, 0));
    assert_eq!(ix.used(), 10, "the written key");
}

/// A vLLM-shaped key: 32 bytes of hash and a 4-byte group index.
fn wide(i: u64) -> Key {
    let mut b = [0u8; 36];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[8..16].copy_from_slice(&(i ^ 0x9e37_79b9_7f4a_7c15).to_le_bytes());
    Key::new(&b).unwrap()
}

/// Heap bytes of an index of `n` Ready keys grown one insert at a time:
/// (at the end, at the peak of growth, when a part that grows holds its
/// old and its new allocation at once, and the most per key indexed at
/// any moment of growth past 1000 keys).
fn grown(n: u64) -> (usize, usize, f64) {
    let mut ix = Index::new(4096);
    let mut parts = ix.heap_parts();
    let (mut peak, mut worst) = (0, 0f64);
    for i in 0..n {
        ix.insert(wide(i), State::Ready);
        let now = ix.heap_parts();
        let moving: usize = (0..3)
            .filter(|&p| now[p] != parts[p])
            .map(|p| parts[p])
            .sum();
        let at = now.iter().sum::<usize>() + moving;
        peak = peak.max(at);
        if i >= 1000 {
            worst = worst.max(at as f64 / (i + 1) as f64);
        }
        parts = now;
    }
    (ix.heap_bytes(), peak, worst)
}

#[test]
fn a_key_costs_under_100_heap_bytes_at_a_million_keys() {
    const N: u64 = 1_000_000;
    assert_eq!(
        std::mem::size_of::<Node>(),
        84,
        "the key once, and 19 bytes"
    );
    let (end, peak, worst) = grown(N);
    let per = end as f64 / N as f64;
    eprintln!(
        "index of {N} keys: {per:.1} bytes per key grown, peak {:.1} per final key, at most {worst:.1} per key indexed at a moment of growth",
        peak as f64 / N as f64
    );
    assert!(per < 100.0, "{per} bytes per key");
    // A restart reserves what it inserts: no slack in the slab.
    let mut ix = Index::new(4096);
    ix.reserve(N as usize).unwrap();
    for i in 0..N {
        ix.insert(wide(i), State::Ready);
    }
    let per = ix.heap_bytes() as f64 / N as f64;
    eprintln!("index of {N} keys reserved at once: {per:.1} bytes per key");
    assert!(per < 96.0, "{per} bytes per key");
    // Every key is found again, and evicting them all empties it.
    assert!(
        (0..N)
            .step_by(997)
            .all(|i| ix.get(&wide(i)) == Some((State::Ready, 0)))
    );
    for i in 0..N {
        assert_eq!(ix.evict_one(false), Some(wide(i)));
    }
    assert_eq!((ix.ready_count(), ix.used()), (0, 0));
}

#[test]
fn a_bulk_fill_keeps_its_order_and_finds_every_key_or_a_repeat() {
    let mut ix = Index::new(10);
    ix.reserve(5000).unwrap();
    for i in 0..5000 {
        ix.append_ready(wide(i), (i % 2 == 0).then_some(i as u32));
    }
    assert!(ix.map_appended());
    assert_eq!((ix.ready_count(), ix.used()), (5000, 50_000));
    assert!((0..5000).all(|i| ix.get(&wide(i)) == Some((State::Ready, 0))));
    assert_eq!(ix.record(&wide(4)), Some(4));
    assert_eq!(ix.record(&wide(5)), None);
    assert_eq!(ix.get(&wide(5000)), None);
    // The first appended is the least recent.
    assert_eq!(ix.evict_one(false), Some(wide(0)));
    // Usable as any index afterwards.
    ix.insert(wide(9999), State::Writing);
    assert!(ix.set_ready(&wide(9999)));
    let mut twice = Index::new(10);
    for i in [1, 2, 3, 2] {
        twice.append_ready(wide(i), None);
    }
    assert!(!twice.map_appended(), "a repeated key");
}
