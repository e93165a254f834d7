//! Tests of the fs tier's index.

use super::*;

fn k(i: u8) -> Key {
    Key::new(&[i]).unwrap()
}

#[test]
fn lru_order_touch_and_readers() {
    let mut ix = Index::new(10);
    for i in 0..4 {
        assert!(ix.insert(k(i), State::Ready));
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
        assert!(ix.insert(ab(1, i), State::Ready));
    }
    assert!(ix.insert(ab(1, 9), State::Writing));
    assert!(ix.insert(ab(2, 0), State::Ready));
    assert!(ix.add_reader(&ab(1, 1)));
    assert_eq!(ix.evict_one(true), Some(ab(1, 0)), "1.0 is least recent");
    let mut idle = Vec::new();
    // 1.0 is being removed (neither), 1.1 read and 1.9 written (busy).
    assert_eq!(ix.with_prefix(&[1], &mut idle, &mut Vec::new()), 2);
    idle.sort_unstable();
    assert_eq!(idle, vec![Held::Key(ab(1, 2)), Held::Key(ab(1, 3))]);
    idle.clear();
    assert_eq!(ix.with_prefix(&[], &mut idle, &mut Vec::new()), 2);
    assert_eq!(idle.len(), 3);
}

#[test]
fn dropping_a_fanout_forgets_only_its_ready_keys() {
    let mut ix = Index::new(10);
    let keys: Vec<Key> = (0..40).map(k).collect();
    let f = Layout::fanout_index(&keys[0]);
    for key in &keys {
        assert!(ix.insert(*key, State::Ready));
    }
    ix.set_announced(&keys[0]);
    let writing = (0..=255u8)
        .map(|i| Key::new(&[i, 1]).unwrap())
        .find(|key| Layout::fanout_index(key) == f)
        .unwrap();
    assert!(ix.insert(writing, State::Writing));
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
    assert!(ix.insert(k(1), State::Writing));
    assert_eq!(ix.used(), 5);
    assert_eq!(ix.evict_one(false), None);
    assert!(!ix.add_reader(&k(1)));
    assert!(ix.set_ready(&k(1)));
    assert!(!ix.set_ready(&k(1)));
    assert_eq!(ix.evict_one(false), Some(k(1)));
    assert!(ix.insert(k(2), State::Writing));
    assert_eq!(ix.remove(&k(2)), Some(State::Writing));
    assert_eq!(ix.used(), 0);
}

#[test]
fn records_found_at_restart_stay_theirs_and_the_others_go_out_lowest_first() {
    let mut ix = Index::new(100);
    assert!(ix.insert_found(k(2), Some(4)));
    assert!(ix.insert_found(k(1), Some(1)));
    ix.add_free_records(&[5, 3, 2, 0]);
    assert_eq!((ix.record(&k(1)), ix.record(&k(2))), (Some(1), Some(4)));
    assert_eq!(ix.free_records(), 4);
    let mut got = Vec::new();
    for n in 10..14 {
        assert!(ix.insert(k(n), State::Writing));
        got.push(ix.assign_record(&k(n)).unwrap());
    }
    assert_eq!(got, [0, 2, 3, 5]);
    assert!(ix.insert(k(20), State::Writing));
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
        assert!(ix.insert(k(i), State::Ready));
    }
    assert!(ix.insert(k(9), State::Writing));
    assert!(ix.hold(&k(0)) && ix.hold(&k(1)));
    assert!(ix.hold(&k(0)), "held already");
    assert!(!ix.hold(&k(9)) && !ix.hold(&k(7)), "written, absent");
    assert_eq!(ix.held_count(), 2);
    ix.touch(&k(0));
    assert!(!ix.retire(&k(0)));
    let mut idle = Vec::new();
    assert_eq!(
        ix.with_prefix(&[], &mut idle, &mut Vec::new()),
        3,
        "two held, one written"
    );
    idle.sort_unstable();
    assert_eq!(idle, vec![Held::Key(k(2)), Held::Key(k(3))]);
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

/// A key of `len` bytes numbered `i` (distinct for distinct `i` below
/// 2^(8 len)).
pub(super) fn sized(i: u64, len: usize) -> Key {
    let mut b = [0u8; 64];
    let x = i.to_le_bytes();
    b[..len.min(8)].copy_from_slice(&x[..len.min(8)]);
    for (n, byte) in b[8..len.max(8)].iter_mut().enumerate() {
        *byte = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (n % 8 * 8)) as u8 ^ n as u8;
    }
    Key::new(&b[..len]).unwrap()
}

/// Heap bytes of an index of `n` Ready keys of `len` bytes grown one
/// insert at a time: (at the end, at the peak of growth, when a part that
/// moves to grow holds its old and its new allocation at once, and the
/// most per key indexed at any moment of growth past 1000 keys).  The
/// nodes' chunks (part 1) never move.
fn grown(n: u64, len: usize) -> (usize, usize, f64) {
    grown_in(Index::new(4096), n, len)
}

/// [`grown`] in `ix` (empty).
pub(super) fn grown_in(mut ix: Index, n: u64, len: usize) -> (usize, usize, f64) {
    let mut parts = ix.heap_parts();
    let (mut peak, mut worst) = (0, 0f64);
    for i in 0..n {
        assert!(ix.insert(sized(i, len), State::Ready));
        let now = ix.heap_parts();
        let moving: usize = [0, 2, 3]
            .into_iter()
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
fn a_key_of_16_bytes_costs_under_48_heap_bytes_at_a_million_keys() {
    const N: u64 = 1_000_000;
    // Per key: a 16-byte header and its slot in the nodes, 5 bytes a
    // bucket in the table (2^21 buckets for 10^6 keys).
    let mut per_len = Vec::new();
    for len in [8, 16, 32, 64] {
        let (end, peak, worst) = grown(N, len);
        let per = end as f64 / N as f64;
        eprintln!(
            "index of {N} keys of {len} bytes: {per:.1} bytes per key grown, peak {:.1} per final key, at most {worst:.1} per key indexed at a moment of growth",
            peak as f64 / N as f64
        );
        per_len.push((len, per));
    }
    assert!(per_len[1].1 < 48.0, "{per_len:?}: 16 bytes");
    assert!(per_len[2].1 < 60.0, "{per_len:?}: 32 bytes");
    // A restart reserves its table ahead: no rehash, the same bytes.
    let mut ix = Index::new(4096);
    ix.reserve(N as usize).unwrap();
    for i in 0..N {
        assert!(ix.insert(sized(i, 16), State::Ready));
    }
    let per = ix.heap_bytes() as f64 / N as f64;
    eprintln!("index of {N} keys of 16 bytes reserved at once: {per:.1} bytes per key");
    assert!(per < 48.0, "{per} bytes per key");
    // Every key is found again, and evicting them all empties it.
    assert!(
        (0..N)
            .step_by(997)
            .all(|i| ix.get(&sized(i, 16)) == Some((State::Ready, 0)))
    );
    for i in 0..N {
        assert_eq!(ix.evict_one(false), Some(sized(i, 16)));
    }
    assert_eq!((ix.ready_count(), ix.used()), (0, 0));
}

/// A 32-byte key (a block hash) numbered `i`.
fn hash32(i: u64) -> Key {
    let mut b = [0u8; 32];
    for (n, part) in b.chunks_mut(8).enumerate() {
        let x = (i ^ ((n as u64) << 56)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        part.copy_from_slice(&x.to_le_bytes());
    }
    Key::new(&b).unwrap()
}

#[test]
#[ignore = "a measurement: run in release with --nocapture"]
fn time_the_store_touch_and_evict_paths() {
    use std::time::Instant;
    const N: u64 = 1_000_000;
    let ns = |t: Instant, n: u64| t.elapsed().as_nanos() as f64 / n as f64;
    // A fixed scramble of 0..N: the keys touched in no particular order.
    let order: Vec<u64> = (0..N).map(|i| i * 611_953 % N).collect();
    let mut ix = Index::new(4096);
    let t = Instant::now();
    for i in 0..N {
        assert!(ix.insert(hash32(i), State::Writing));
        ix.set_ready(&hash32(i));
    }
    let insert = ns(t, N);
    let t = Instant::now();
    for &i in &order {
        ix.touch(&hash32(i));
    }
    let touch = ns(t, N);
    let t = Instant::now();
    for &i in &order {
        assert!(ix.add_reader(&hash32(i)));
        ix.drop_reader(&hash32(i));
    }
    let read = ns(t, N);
    let t = Instant::now();
    for i in N..2 * N {
        ix.evict_one(false).unwrap();
        assert!(ix.insert(hash32(i), State::Writing));
        ix.set_ready(&hash32(i));
    }
    let churn = ns(t, N);
    let t = Instant::now();
    while ix.evict_one(false).is_some() {}
    let evict = ns(t, N);
    eprintln!(
        "{N} keys of 32 bytes, ns per key: insert+ready {insert:.0}, touch {touch:.0}, reader add+drop {read:.0}, evict+insert+ready {churn:.0}, evict {evict:.0}"
    );
}

#[test]
fn keys_of_every_length_are_kept_apart_each_in_its_class() {
    let mut ix = Index::new(1);
    // Each key a prefix of the next: only their lengths tell them apart.
    let key = |len: usize| Key::new(&[7; 64][..len]).unwrap();
    for len in 1..=64 {
        assert_eq!(ix.insert_new(key(len), State::Ready), Added::Yes);
    }
    assert!((1..=64).all(|len| ix.insert_new(key(len), State::Ready) == Added::Present));
    assert!(ix.get(&Key::new(&[7, 8]).unwrap()).is_none());
    assert!(ix.remove(&key(9)).is_some() && ix.get(&key(9)).is_none());
    assert!(
        (1..=64)
            .filter(|&l| l != 9)
            .all(|l| ix.get(&key(l)).is_some())
    );
    let mut idle = Vec::new();
    ix.with_prefix(&[7; 60], &mut idle, &mut Vec::new());
    idle.sort_unstable();
    assert_eq!(
        idle,
        (60..=64).map(|n| Held::Key(key(n))).collect::<Vec<_>>()
    );
    for len in (1..=64).filter(|&l| l != 9) {
        assert_eq!(ix.evict_one(false), Some(key(len)));
    }
    assert_eq!(ix.evict_one(false), None);
}

#[test]
fn a_freed_node_goes_to_the_next_key_of_its_class_only() {
    let mut ix = Index::new(1);
    let n = slab::CHUNK_NODES as u64;
    for i in 0..n {
        assert!(ix.insert(sized(i, 16), State::Ready));
    }
    let full = ix.heap_parts()[1];
    for i in 0..n / 2 {
        assert_eq!(ix.remove(&sized(i, 16)), Some(State::Ready));
    }
    for i in 0..n / 4 {
        assert_eq!(ix.evict_one(false), Some(sized(n / 2 + i, 16)));
    }
    // Keys of 9 to 16 bytes take the freed nodes: no chunk more.
    for i in 0..n * 3 / 4 {
        assert!(ix.insert(sized(n + i, 9 + i as usize % 8), State::Writing));
    }
    assert_eq!(ix.heap_parts()[1], full);
    // One key more of that class, or one of another, takes a new chunk.
    assert!(ix.insert(sized(2 * n, 16), State::Writing));
    let two = ix.heap_parts()[1];
    assert!(two > full);
    assert!(ix.insert(sized(2 * n, 17), State::Writing));
    assert!(ix.heap_parts()[1] > two);
    assert!((n * 3 / 4..n).all(|i| ix.get(&sized(i, 16)) == Some((State::Ready, 0))));
    assert!((0..n * 3 / 4).all(|i| ix.set_ready(&sized(n + i, 9 + i as usize % 8))));
    assert_eq!(ix.ready_count(), n as usize);
}

#[test]
fn many_keys_across_chunks_keep_their_records_and_flags() {
    let mut ix = Index::new(1);
    let n = 3 * slab::CHUNK_NODES as u64 + 5;
    let len = |i: u64| 1 + (i as usize * 7) % 64;
    let key = |i: u64| sized(i + 300, len(i).max(2));
    ix.add_free_records(&(0..n as u32).rev().collect::<Vec<_>>());
    for i in 0..n {
        assert!(ix.insert(key(i), State::Writing));
        assert_eq!(ix.assign_record(&key(i)), Some(i as u32));
        if i % 3 == 0 {
            ix.set_announced(&key(i));
        }
    }
    for i in (0..n).step_by(2) {
        assert_eq!(ix.remove(&key(i)), Some(State::Writing));
    }
    for i in 0..n {
        let there = i % 2 == 1;
        assert_eq!(ix.record(&key(i)), there.then_some(i as u32));
        assert_eq!(ix.announced(&key(i)), there && i % 3 == 0);
        assert_eq!(ix.set_ready(&key(i)), there);
    }
    let mut keys = Vec::new();
    ix.ready_keys(&mut keys);
    assert_eq!(keys, (1..n).step_by(2).map(key).collect::<Vec<_>>());
}

#[test]
fn a_key_takes_at_most_u16_max_readers() {
    let mut ix = Index::new(1);
    assert!(ix.insert(k(1), State::Ready));
    for _ in 0..u16::MAX {
        assert!(ix.add_reader(&k(1)));
    }
    assert!(!ix.add_reader(&k(1)), "as if absent");
    assert_eq!(ix.get(&k(1)), Some((State::Ready, u16::MAX as u32)));
    ix.drop_reader(&k(1));
    assert!(ix.add_reader(&k(1)));
    assert!(!ix.retire(&k(1)) && ix.evict_one(false).is_none());
}

/// A plain model of the index: each key's state, readers and flags, and
/// the two recency lists as vectors (least recent first).
#[derive(Default)]
struct Model {
    keys: std::collections::HashMap<Key, (State, u32, bool, bool)>,
    lists: [Vec<Key>; 2],
}

impl Model {
    fn out_of_lists(&mut self, key: &Key) {
        self.lists.iter_mut().for_each(|l| l.retain(|k| k != key));
    }

    fn used(&self) -> u64 {
        let counted = |s: &State| *s != State::Removing;
        self.keys.values().filter(|v| counted(&v.0)).count() as u64
    }
}

#[test]
fn random_operations_agree_with_a_plain_model() {
    let mut ix = Index::new(1);
    let mut m = Model::default();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // 300 keys of every length (short ones repeat: the same key).
    let key = |i: u64| sized(i, 1 + (i as usize * 13) % 64);
    for step in 0..60_000 {
        let k = key(next(300));
        let entry = m.keys.get(&k).copied();
        match next(12) {
            0 | 1 => {
                let st = if next(2) == 0 {
                    State::Ready
                } else {
                    State::Writing
                };
                assert_eq!(ix.insert_new(k, st) == Added::Yes, entry.is_none());
                if entry.is_none() {
                    m.keys.insert(k, (st, 0, false, false));
                    if st == State::Ready {
                        m.lists[0].push(k);
                    }
                }
            }
            2 => {
                let writing = entry.is_some_and(|e| e.0 == State::Writing);
                assert_eq!(ix.set_ready(&k), writing);
                if writing {
                    m.keys.get_mut(&k).unwrap().0 = State::Ready;
                    m.lists[0].push(k);
                }
            }
            3 => {
                assert_eq!(ix.remove(&k), entry.map(|e| e.0));
                m.keys.remove(&k);
                m.out_of_lists(&k);
            }
            4 => {
                ix.touch(&k);
                if entry.is_some_and(|e| e.0 == State::Ready && !e.2) {
                    m.out_of_lists(&k);
                    m.lists[0].push(k);
                }
            }
            5 => {
                let ok = entry.is_some_and(|e| e.0 == State::Ready);
                assert_eq!(ix.add_reader(&k), ok);
                if ok {
                    m.keys.get_mut(&k).unwrap().1 += 1;
                }
            }
            6 => {
                ix.drop_reader(&k);
                if let Some(e) = m.keys.get_mut(&k) {
                    e.1 = e.1.saturating_sub(1);
                }
            }
            7 => {
                let keep = next(2) == 0;
                let victim = m.lists[0].iter().copied().find(|k| m.keys[k].1 == 0);
                assert_eq!(ix.evict_one(keep), victim);
                if let Some(v) = victim {
                    m.out_of_lists(&v);
                    if keep {
                        m.keys.get_mut(&v).unwrap().0 = State::Removing;
                    } else {
                        m.keys.remove(&v);
                    }
                }
            }
            8 => {
                let ok = entry.is_some_and(|e| e.0 == State::Ready && e.1 == 0 && !e.2);
                assert_eq!(ix.retire(&k), ok);
                if ok {
                    m.out_of_lists(&k);
                    m.keys.get_mut(&k).unwrap().0 = State::Removing;
                }
            }
            9 => {
                let ok = entry.is_some_and(|e| e.0 == State::Ready);
                assert_eq!(ix.hold(&k), ok);
                if ok && !entry.unwrap().2 {
                    m.out_of_lists(&k);
                    m.lists[1].push(k);
                    m.keys.get_mut(&k).unwrap().2 = true;
                }
            }
            10 => {
                let held = entry.is_some_and(|e| e.2);
                assert_eq!(ix.release_hold(&k), held);
                if held {
                    m.out_of_lists(&k);
                    m.lists[0].push(k);
                    m.keys.get_mut(&k).unwrap().2 = false;
                }
            }
            _ => {
                if next(50) == 0 {
                    let f = Layout::fanout_index(&k);
                    let mut out = Vec::new();
                    ix.drop_ready(Some(f), &mut out);
                    let mut want = Vec::new();
                    for key in m.lists[0].clone().iter().chain(m.lists[1].clone().iter()) {
                        if Layout::fanout_index(key) == f {
                            want.push((*key, m.keys[key].3));
                            m.keys.remove(key);
                            m.out_of_lists(key);
                        }
                    }
                    assert_eq!(out, want);
                } else if entry.is_some() {
                    ix.set_announced(&k);
                    m.keys.get_mut(&k).unwrap().3 = true;
                }
            }
        }
        if step % 97 == 0 {
            for i in 0..300 {
                let k = key(i);
                let e = m.keys.get(&k);
                assert_eq!(ix.get(&k), e.map(|e| (e.0, e.1)), "step {step}");
                assert_eq!(ix.is_held(&k), e.is_some_and(|e| e.2));
                assert_eq!(ix.announced(&k), e.is_some_and(|e| e.3));
            }
            let mut keys = Vec::new();
            ix.ready_keys(&mut keys);
            assert_eq!(keys, m.lists.concat(), "step {step}");
            assert_eq!(ix.used(), m.used());
            assert_eq!(ix.held_count(), m.lists[1].len());
            assert_eq!(
                ix.ready_count(),
                m.lists.iter().map(Vec::len).sum::<usize>()
            );
        }
    }
}

#[test]
fn a_full_size_class_takes_no_key_more_and_the_others_still_do() {
    let mut ix = Index::new(10);
    ix.limit_nodes(2);
    assert!(ix.insert(sized(1, 16), State::Ready));
    assert!(ix.insert(sized(2, 16), State::Writing));
    assert_eq!(ix.insert_new(sized(3, 16), State::Ready), Added::NoRoom);
    assert_eq!(ix.get(&sized(3, 16)), None, "nothing changed");
    assert_eq!((ix.used(), ix.ready_count()), (20, 1));
    assert_eq!(ix.insert_new(sized(1, 16), State::Ready), Added::Present);
    // Another class has room; a key removed makes room in its own.
    assert!(ix.insert(sized(3, 8), State::Ready));
    assert!(!ix.insert_found(sized(4, 16), Some(7)));
    assert_eq!(ix.record(&sized(4, 16)), None);
    assert_eq!(ix.remove(&sized(2, 16)), Some(State::Writing));
    assert!(ix.insert_found(sized(4, 16), Some(7)));
    assert_eq!(ix.record(&sized(4, 16)), Some(7));
    assert_eq!(
        ix.evict_one(false),
        Some(sized(4, 16)),
        "found: least recent"
    );
}

#[test]
fn the_debug_form_counts_each_classs_chunks_and_nodes() {
    let mut ix = Index::new(10);
    assert!(ix.insert(sized(1, 16), State::Ready));
    let shown = format!("{ix:?}");
    assert!(
        shown.contains("Class { chunks: 1, len: 1, free: 4294967295 }"),
        "{shown}"
    );
}
