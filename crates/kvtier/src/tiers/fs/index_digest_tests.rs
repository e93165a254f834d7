//! Tests of the fs index with key digests: keys of more than 16 bytes
//! kept as digests, shorter ones whole, and what that changes.

use super::tests::{grown_in, sized};
use super::*;

const SEED: u64 = 7;

fn long(i: u8) -> Key {
    Key::new(&[i; 32]).unwrap()
}

fn short(i: u8) -> Key {
    Key::new(&[i; 16]).unwrap()
}

/// The keys of `ix`'s Ready list as it holds them, least recent first.
fn walk(ix: &Index) -> Vec<(Held, Option<u32>)> {
    let mut out = Vec::new();
    ix.ready_walk(|h, r| out.push((*h, r)));
    out
}

#[test]
fn keys_over_16_bytes_are_held_as_digests_and_found_by_their_key() {
    let mut ix = Index::with_digests(10, SEED);
    // The seed is made odd (0 says "no digests" in a persisted index).
    assert_eq!(ix.digest_seed(), Some(SEED | 1));
    let seed = SEED | 1;
    assert!(ix.insert(long(1), State::Ready));
    assert!(ix.insert(short(2), State::Ready));
    assert!(ix.insert(Key::new(&[3; 17]).unwrap(), State::Ready));
    assert_eq!(ix.insert_new(long(1), State::Ready), Added::Present);
    assert_eq!(ix.get(&long(1)), Some((State::Ready, 0)));
    assert_eq!(ix.get(&long(4)), None);
    assert_eq!(ix.held(&long(1)), Held::Digest(digest_of(seed, &[1; 32])));
    assert_eq!(ix.held(&short(2)), Held::Key(short(2)));
    assert_eq!(
        walk(&ix),
        vec![
            (Held::Digest(digest_of(seed, &[1; 32])), None),
            (Held::Key(short(2)), None),
            (Held::Digest(digest_of(seed, &[3; 17])), None),
        ]
    );
    // The same key under another seed is another digest.
    assert_ne!(digest_of(seed, &[1; 32]), digest_of(seed + 2, &[1; 32]));
    // Without digests the index holds the key whole.
    let mut whole = Index::new(10);
    assert!(whole.insert(long(1), State::Ready));
    assert_eq!(whole.held(&long(1)), Held::Key(long(1)));
    assert_eq!(walk(&whole), vec![(Held::Key(long(1)), None)]);
    assert_eq!(whole.digest_seed(), None);
}

#[test]
fn a_whole_key_and_a_digest_of_the_same_bytes_are_two_keys() {
    let mut ix = Index::with_digests(10, SEED);
    let d = digest_of(SEED | 1, long(1).as_bytes());
    let same_bytes = Key::new(&d).unwrap();
    assert!(ix.insert(long(1), State::Ready));
    assert_eq!(ix.get(&same_bytes), None, "found the digest's node");
    assert!(ix.insert(same_bytes, State::Writing));
    assert_eq!(ix.get(&long(1)), Some((State::Ready, 0)));
    assert_eq!(ix.get(&same_bytes), Some((State::Writing, 0)));
    assert_eq!(ix.remove(&same_bytes), Some(State::Writing));
    assert_eq!(ix.get(&long(1)), Some((State::Ready, 0)));
    assert_eq!(ix.remove_held(&Held::Digest(d)), Some(State::Ready));
    assert_eq!(ix.get(&long(1)), None);
}

#[test]
fn an_evicted_digest_is_forgotten_at_once_and_its_record_freed() {
    let mut ix = Index::with_digests(10, SEED);
    ix.add_free_records(&[5, 6]);
    for key in [long(1), short(2)] {
        assert!(ix.insert(key, State::Writing));
        assert!(ix.assign_record(&key).is_some());
        assert!(ix.set_ready(&key));
    }
    assert_eq!(ix.free_records(), 0);
    // Kept Removing is asked for; a digest is forgotten all the same.
    let victim = ix.evict_one(true).unwrap();
    assert_eq!(victim.as_bytes(), &digest_of(SEED | 1, long(1).as_bytes()));
    assert_eq!(ix.get(&long(1)), None);
    assert_eq!(ix.free_records(), 1);
    assert_eq!(ix.used(), 10);
    // A whole key stays Removing, its record held until removed.
    assert_eq!(ix.evict_one(true), Some(short(2)));
    assert_eq!(ix.get(&short(2)), Some((State::Removing, 0)));
    assert_eq!((ix.free_records(), ix.used()), (1, 0));
}

#[test]
fn a_prefix_hands_digests_to_the_caller_unless_it_is_empty() {
    let mut ix = Index::with_digests(10, SEED);
    ix.add_free_records(&[8, 9]);
    let ab = Key::new(&[7, 1, 2, 3]).unwrap();
    assert!(ix.insert(ab, State::Ready));
    assert!(ix.insert(long(7), State::Writing));
    assert_eq!(ix.assign_record(&long(7)), Some(9));
    let (mut idle, mut unsure) = (Vec::new(), Vec::new());
    // Being written: its header may not be on disk yet.
    assert_eq!(ix.with_prefix(&[7], &mut idle, &mut unsure), 0);
    assert_eq!(
        (idle.clone(), unsure.clone()),
        (vec![Held::Key(ab)], vec![])
    );
    assert!(ix.set_ready(&long(7)));
    idle.clear();
    assert_eq!(ix.with_prefix(&[7], &mut idle, &mut unsure), 0);
    let d = digest_of(SEED | 1, long(7).as_bytes());
    assert_eq!(
        (idle.clone(), unsure.clone()),
        (vec![Held::Key(ab)], vec![(d, 9)])
    );
    // The state the caller asks of it once it has read the key.
    assert_eq!(ix.held_state(&Held::Digest(d)), Some((State::Ready, false)));
    assert!(ix.add_reader(&long(7)));
    assert_eq!(ix.held_state(&Held::Digest(d)), Some((State::Ready, true)));
    // Under the empty prefix every key matches, a busy one kept.
    let (mut idle, mut unsure) = (Vec::new(), Vec::new());
    assert_eq!(ix.with_prefix(&[], &mut idle, &mut unsure), 1);
    assert_eq!((idle, unsure), (vec![Held::Key(ab)], vec![]));
    ix.drop_reader(&long(7));
    let (mut idle, mut unsure) = (Vec::new(), Vec::new());
    assert_eq!(ix.with_prefix(&[], &mut idle, &mut unsure), 0);
    idle.sort_unstable();
    assert_eq!(idle, vec![Held::Key(ab), Held::Digest(d)]);
}

#[test]
fn found_digests_go_below_every_key_and_keep_their_records() {
    let mut ix = Index::with_digests(10, SEED);
    assert!(ix.insert(long(1), State::Ready));
    let d = digest_of(SEED | 1, long(2).as_bytes());
    assert!(ix.insert_found_held(&Held::Digest(d), Some(3)));
    assert_eq!(ix.record(&long(2)), Some(3));
    assert_eq!(
        ix.evict_one(false).map(|k| k.as_bytes().to_vec()),
        Some(d.to_vec())
    );
}

#[test]
fn a_key_of_32_or_64_bytes_costs_under_48_heap_bytes_at_a_million_keys() {
    const N: u64 = 1_000_000;
    for len in [32, 64] {
        let (end, peak, worst) = grown_in(Index::with_digests(4096, SEED), N, len);
        let per = end as f64 / N as f64;
        eprintln!(
            "index with digests of {N} keys of {len} bytes: {per:.1} bytes per key grown, peak {:.1} per final key, at most {worst:.1} per key indexed at a moment of growth",
            peak as f64 / N as f64
        );
        assert!(per < 48.0, "{len} bytes: {per}");
    }
    // Every one is found again.
    let mut ix = Index::with_digests(4096, SEED);
    ix.reserve(N as usize).unwrap();
    for i in 0..N {
        assert!(ix.insert(sized(i, 32), State::Ready));
    }
    let per = ix.heap_bytes() as f64 / N as f64;
    eprintln!(
        "index with digests of {N} keys of 32 bytes reserved at once: {per:.1} bytes per key"
    );
    assert!(per < 48.0, "{per}");
    assert!((0..N).all(|i| ix.get(&sized(i, 32)) == Some((State::Ready, 0))));
    assert!(ix.get(&sized(N, 32)).is_none());
}
