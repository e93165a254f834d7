//! Tests of the persisted index: what is written is what is loaded, once;
//! every file that is not exactly that is refused and removed; a body
//! that turns out bad midway hands on nothing of its bad chunk.

use std::os::fd::IntoRawFd;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::tiers::fs::found::Found;
use crate::tiers::fs::index::{Held, State};
use crate::tiers::fs::snapshot_files::temp_writer;
use crate::tiers::fs::snapshot_format::{CHUNK, TRAILER};
use crate::tiers::fs::snapshot_load::{Loaded, Records};

const BLOCK: usize = 4096;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvtier-snapshot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn key(i: u64) -> Key {
    let mut b = [0u8; 36];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[35] = (i % 251) as u8;
    Key::new(&b[..8 + (i % 29) as usize]).unwrap()
}

fn opts(d: &Path) -> FsOptions {
    FsOptions::new(d)
}

/// An index of `n` Ready keys, `key(0)` least recent.
fn index(n: u64) -> Index {
    let mut ix = Index::new(super::super::format::file_len(BLOCK));
    for i in 0..n {
        assert!(ix.insert(key(i), State::Ready));
    }
    ix
}

/// Opens `d` as a tier would, and writes `ix` as its shutdown would.
fn persist(d: &Path, o: &FsOptions, ix: &Index) {
    let p = Persisted::open(d, o, BLOCK).unwrap();
    assert_eq!(
        p.write(d, o, BLOCK, ix, |_| None),
        Ok(ix.ready_count() as u64)
    );
}

/// What `load` hands on as the files layout: (store time, key), least
/// recent first (the batches come most recent first, each least recent
/// first), and how it ended.
fn run_files(load: Load) -> (Vec<(SystemTime, Key)>, Loaded) {
    let mut batches = Vec::new();
    let ended = load.run(None, &|| false, &mut |f| {
        match f {
            Found::Files(b) => batches.push(b),
            other => panic!("{other:?}"),
        }
        true
    });
    batches.reverse();
    (batches.concat(), ended)
}

/// What an open of `d` loads: the keys (least recent first) and why a
/// file was refused.
fn load(d: &Path, o: &FsOptions) -> (Option<Vec<Key>>, Option<String>) {
    let mut p = Persisted::open(d, o, BLOCK).unwrap();
    // Whatever it was, a regular file is gone (a foreign entry is left
    // alone, as everywhere in the directory), before its body is read.
    let left = std::fs::symlink_metadata(d.join(INDEX_NAME));
    assert!(!left.is_ok_and(|m| m.is_file()));
    let loaded = p.take_load().and_then(|l| match run_files(l) {
        (found, Loaded::Whole) => Some(found.into_iter().map(|(_, k)| k).collect()),
        (_, Loaded::Rejected(why)) => {
            p.reject(why);
            None
        }
        (_, Loaded::Stopped) => panic!("stopped"),
    });
    (loaded, p.rejected().map(str::to_string))
}

fn generation(d: &Path) -> String {
    std::fs::read_to_string(d.join(GENERATION_NAME)).unwrap()
}

#[test]
fn an_index_written_is_loaded_once_in_its_order() {
    let d = dir("once");
    let o = opts(&d);
    let mut ix = index(500);
    ix.touch(&key(7));
    persist(&d, &o, &ix);
    // Nothing had the first generation (0, without a file) yet.
    assert!(!d.join(GENERATION_NAME).exists());
    let mut want = Vec::new();
    ix.ready_keys(&mut want);
    assert_eq!(load(&d, &o), (Some(want), None));
    assert_eq!(generation(&d), "1\n");
    // Used once: the next open finds nothing to load, refuses nothing,
    // and writes nothing.
    assert_eq!(load(&d, &o), (None, None));
    assert_eq!(generation(&d), "1\n");
    persist(&d, &o, &index(2));
    assert_eq!(load(&d, &o).0.map(|k| k.len()), Some(2));
    assert_eq!(generation(&d), "2\n");
    // No temporary file is left behind.
    let mut names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [GENERATION_NAME]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn store_times_and_an_empty_index_round_trip() {
    let d = dir("times");
    let mut o = opts(&d);
    o.max_age = Duration::from_secs(3600);
    let t = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
    let ix = index(3);
    let p = Persisted::open(&d, &o, BLOCK).unwrap();
    p.write(&d, &o, BLOCK, &ix, |k| (*k == key(1)).then_some(t))
        .unwrap();
    let mut p = Persisted::open(&d, &o, BLOCK).unwrap();
    let (got, ended) = run_files(p.take_load().unwrap());
    assert_eq!(ended, Loaded::Whole);
    assert_eq!(got.len(), 3);
    assert_eq!(got[1], (t, key(1)));
    assert!(got[0].0 > t, "an unknown store time is the load's");
    // An empty index is an index too.
    persist(&d, &o, &Index::new(4096));
    assert_eq!(load(&d, &o), (Some(vec![]), None));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Writes a good index of 50 keys into `d`, lets `spoil` change the
/// directory, and returns why the next open refused it (it must).
fn refused(name: &str, spoil: impl FnOnce(&Path, &mut FsOptions)) -> String {
    let d = dir(name);
    let mut o = opts(&d);
    persist(&d, &o, &index(50));
    spoil(&d, &mut o);
    let (loaded, why) = load(&d, &o);
    assert_eq!(loaded, None, "{name}: a spoiled index was loaded");
    std::fs::remove_dir_all(&d).unwrap();
    why.unwrap_or_else(|| panic!("{name}: no reason given"))
}

fn edit(d: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let p = d.join(INDEX_NAME);
    let mut bytes = std::fs::read(&p).unwrap();
    f(&mut bytes);
    std::fs::write(&p, bytes).unwrap();
}

#[test]
fn torn_damaged_and_foreign_index_files_are_refused() {
    let why = refused("short", |d, _| edit(d, |b| b.truncate(HEADER - 1)));
    assert!(why.contains("shorter than a header"), "{why}");
    let why = refused("torn", |d, _| edit(d, |b| b.truncate(b.len() - 1)));
    assert!(why.contains("do not hold"), "{why}");
    let why = refused("body", |d, _| edit(d, |b| *b.last_mut().unwrap() ^= 1));
    assert!(why.contains("checksum"), "{why}");
    let why = refused("entry", |d, _| edit(d, |b| b[HEADER + 3] ^= 1));
    assert!(why.contains("checksum"), "{why}");
    let why = refused("version", |d, _| {
        // A file of the format before (no key digests).
        edit(d, |b| {
            b[8..12].copy_from_slice(&2u32.to_le_bytes());
            let sum = super::super::snapshot_format::xxh3(&b[..HEADER - 8]);
            b[HEADER - 8..HEADER].copy_from_slice(&sum.to_le_bytes());
        })
    });
    assert!(why.contains("format version 2, not 3"), "{why}");
    let why = refused("header", |d, _| edit(d, |b| b[33] ^= 1));
    assert!(why.contains("checksum"), "{why}");
    let why = refused("magic", |d, _| edit(d, |b| b[0] ^= 1));
    assert!(why.contains("magic"), "{why}");
    let why = refused("empty", |d, _| edit(d, Vec::clear));
    assert!(why.contains("0 bytes"), "{why}");
}

#[test]
fn stale_and_other_tiers_index_files_are_refused() {
    let why = refused("stale", |d, _| {
        std::fs::write(d.join(GENERATION_NAME), "7\n").unwrap();
    });
    assert!(why.contains("generation 0, not 7"), "{why}");
    let why = refused("block", |d, _| {
        // The same file as a tier of other blocks would have written it.
        let o = opts(d);
        let p = Persisted {
            body: None,
            generation: Some(0),
            rejected: None,
        };
        p.write(d, &o, BLOCK * 2, &index(3), |_| None).unwrap();
    });
    assert!(why.contains("block size 8192, not 4096"), "{why}");
    let why = refused("fingerprint", |_, o| {
        o.layout_fingerprint = Some("m|bf16|16".into());
    });
    assert!(why.contains("fingerprint"), "{why}");
    let why = refused("shared", |_, o| o.shared = true);
    assert!(why.contains("shared"), "{why}");
    let why = refused("huge", |d, o| {
        // A sparse terabyte: its size is refused before anything is read.
        o.capacity_bytes = 2 * super::super::format::file_len(BLOCK);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.join(INDEX_NAME));
        f.unwrap().set_len(1 << 40).unwrap();
    });
    assert!(why.contains("1099511627776 bytes, more than"), "{why}");
}

#[test]
fn an_index_file_that_is_not_a_regular_file_is_never_opened() {
    let why = refused("symlink", |d, _| {
        let p = d.join(INDEX_NAME);
        std::fs::rename(&p, d.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), &p).unwrap();
    });
    assert!(why.contains("symlink"), "{why}");
    let why = refused("fifo", |d, _| {
        let p = d.join(INDEX_NAME);
        std::fs::remove_file(&p).unwrap();
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    });
    assert!(why.contains("FIFO") || why.contains("fifo"), "{why}");
    // A generation file that is not one: nothing is loaded, and nothing
    // will be written at shutdown.
    let d = dir("badgen");
    let o = opts(&d);
    persist(&d, &o, &index(5));
    std::fs::write(d.join(GENERATION_NAME), "one\n").unwrap();
    let mut p = Persisted::open(&d, &o, BLOCK).unwrap();
    assert!(p.rejected().unwrap().contains("not a number"));
    assert!(p.take_load().is_none());
    assert!(p.write(&d, &o, BLOCK, &index(1), |_| None).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn no_index_is_written_while_blocks_are_in_flight() {
    let d = dir("flight");
    let o = opts(&d);
    let mut ix = index(4);
    assert!(ix.insert(key(99), State::Writing));
    let p = Persisted::open(&d, &o, BLOCK).unwrap();
    let why = p.write(&d, &o, BLOCK, &ix, |_| None).unwrap_err();
    assert!(why.contains("being written"), "{why}");
    assert!(!d.join(INDEX_NAME).exists());
    std::fs::remove_dir_all(&d).unwrap();
}

/// Times writing and loading an index of `n` keys (run with `--ignored
/// --nocapture`, in release, to measure): the open (header checked,
/// generation moved on, file removed), then the body read, checked and
/// indexed as the tier takes in what the load hands on.
fn time_round_trip(n: u64) {
    let d = dir(&format!("time{n}"));
    let o = opts(&d);
    let ix = index(n);
    let p = Persisted::open(&d, &o, BLOCK).unwrap();
    let t = std::time::Instant::now();
    p.write(&d, &o, BLOCK, &ix, |_| None).unwrap();
    let write = t.elapsed();
    let bytes = std::fs::metadata(d.join(INDEX_NAME)).unwrap().len();
    let t = std::time::Instant::now();
    let mut p = Persisted::open(&d, &o, BLOCK).unwrap();
    let open = t.elapsed();
    let load = p.take_load().unwrap();
    let mut back = Index::new(4096);
    back.reserve(n as usize).unwrap();
    let ended = load.run(None, &|| false, &mut |f| {
        let Found::Files(b) = f else { panic!() };
        for &(_, key) in b.iter().rev() {
            assert!(back.insert_found(key, None));
        }
        true
    });
    let loaded = t.elapsed();
    assert_eq!((ended, back.ready_count() as u64), (Loaded::Whole, n));
    eprintln!(
        "{n} entries ({bytes} bytes): written in {write:?}; open returned in {open:?} (header checked, generation moved on); body read, checked and indexed {:?} later; index {:.1} bytes per block",
        loaded - open,
        back.heap_bytes() as f64 / n as f64
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "a measurement: run in release with --nocapture"]
fn time_a_million_entries() {
    time_round_trip(100_000);
    time_round_trip(1_000_000);
}

#[test]
fn another_users_index_file_is_neither_trusted_nor_touched() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: giving a file to another user needs root");
        return;
    }
    let d = dir("owner");
    let o = opts(&d);
    persist(&d, &o, &index(5));
    let p = d.join(INDEX_NAME);
    std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    let before = std::fs::read(&p).unwrap();
    let mut p2 = Persisted::open(&d, &o, BLOCK).unwrap();
    assert!(p2.rejected().unwrap().contains("owned by user 65534"));
    assert!(p2.take_load().is_none());
    assert_eq!(std::fs::read(&p).unwrap(), before, "left as it was");
    assert!(!d.join(GENERATION_NAME).exists(), "the generation too");
    // And nothing is written over it at shutdown.
    assert!(p2.write(&d, &o, BLOCK, &index(1), |_| None).is_err());
    assert_eq!(std::fs::read(&p).unwrap(), before);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A load of a body of `(key, record)` entries (`u32::MAX`: none),
/// written as `write` writes one (its header is not read by the load).
fn body(name: &str, entries: &[(u64, u32)]) -> Load {
    let mut w = BodyWriter::default();
    for &(i, record) in entries {
        w.push(
            &Held::Key(key(i)),
            Some(record).filter(|&r| r != u32::MAX),
            0,
        );
    }
    load_of(name, w)
}

fn load_of(name: &str, w: BodyWriter) -> Load {
    spoiled_load(name, w, |_, _| {})
}

/// A load of the body `w` writes, after `spoil` changed it (bytes of the
/// body, header).
fn spoiled_load(name: &str, w: BodyWriter, spoil: impl FnOnce(&mut Vec<u8>, &mut Header)) -> Load {
    let (mut body, entries, chunks) = w.finish();
    let d = dir(name);
    let mut h = Header {
        entries,
        body_len: body.len() as u64,
        chunks,
        ..Header::of(&opts(&d), BLOCK, 0)
    };
    spoil(&mut body, &mut h);
    let p = d.join("body");
    let mut bytes = vec![0u8; HEADER];
    bytes.extend_from_slice(&body);
    std::fs::write(&p, bytes).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
    Load::new(Fd(f.into_raw_fd()), &h)
}

/// What a load over `records` records hands on as the segments layout
/// (marked in `maybe_live`): its (key, record) pairs least recent first,
/// the free records, and how it ended.
fn run_records(
    load: Load,
    records: u32,
    maybe_live: &mut [u64],
) -> (Vec<(Held, u32)>, Vec<u32>, Loaded) {
    let (mut batches, mut free) = (Vec::new(), Vec::new());
    let records = Records {
        count: records,
        maybe_live,
    };
    let ended = load.run(Some(records), &|| false, &mut |f| {
        match f {
            Found::Records(b, f) => {
                assert!(b.is_empty() || f.is_empty(), "blocks, then free records");
                batches.push(b);
                free.extend(f);
            }
            other => panic!("{other:?}"),
        }
        true
    });
    batches.reverse();
    (batches.concat(), free, ended)
}

#[test]
fn segment_records_must_be_present_distinct_within_the_capacity_and_marked_live() {
    let rejected = |why: &str| Loaded::Rejected(why.into());
    let twice = "a segment record listed twice, or one the live map says holds no block";
    let ok = [(1, 5), (2, 0), (3, 7)];
    // Every record maybe live, as a live map not trusted says: the listed
    // ones handed on, the others free.
    let mut all = [u64::MAX];
    let (got, mut free, ended) = run_records(body("ok", &ok), 8, &mut all);
    assert_eq!(ended, Loaded::Whole);
    assert_eq!(
        got,
        vec![
            (Held::Key(key(1)), 5),
            (Held::Key(key(2)), 0),
            (Held::Key(key(3)), 7)
        ]
    );
    free.sort_unstable();
    assert_eq!(free, [1, 2, 3, 4, 6]);
    let mut all = [u64::MAX];
    let (got, free, ended) = run_records(body("cap", &ok), 7, &mut all);
    assert_eq!(ended, rejected("a segment record past the capacity"));
    assert!(got.is_empty() && free.is_empty());
    assert_eq!(all, [u64::MAX], "nothing taken");
    let mut all = [u64::MAX];
    let (_, _, ended) = run_records(body("twice", &[(1, 5), (2, 5)]), 8, &mut all);
    assert_eq!(ended, rejected(twice));
    let mut all = [u64::MAX];
    let (_, _, ended) = run_records(body("none", &[(1, u32::MAX)]), 8, &mut all);
    assert_eq!(ended, rejected("an entry without a segment record"));
    // A record the live map has clear (records 0, 5 and 7 marked, not 3).
    let mut marked = [1 | 1 << 5 | 1 << 7];
    let (_, free, ended) = run_records(body("marked", &ok), 8, &mut marked);
    assert_eq!((ended, free), (Loaded::Whole, vec![]));
    assert_eq!(marked, [0], "every marked record handed on");
    let mut marked = [1 | 1 << 5 | 1 << 7];
    let (_, _, ended) = run_records(body("unmarked", &[(1, 5), (2, 3)]), 8, &mut marked);
    assert_eq!(ended, rejected(twice));
    assert_eq!(marked, [1 | 1 << 5 | 1 << 7], "nothing taken");
    // A key listed twice is handed on twice: the tier takes in the first
    // (the most recent) as the scan takes a key found twice.
    let mut all = [u64::MAX];
    let (got, _, ended) = run_records(body("key", &[(1, 5), (1, 6)]), 8, &mut all);
    assert_eq!(ended, Loaded::Whole);
    assert_eq!(got, vec![(Held::Key(key(1)), 5), (Held::Key(key(1)), 6)]);
}

/// A body of `n` entries of the longest key, record `i` for entry `i`,
/// in several chunks, and the entries of a full chunk.
fn chunked(n: u32) -> (BodyWriter, u32) {
    let mut w = BodyWriter::default();
    for i in 0..n {
        let mut b = [0u8; crate::key::MAX_KEY_LEN];
        b[..4].copy_from_slice(&i.to_le_bytes());
        w.push(&Held::Key(Key::new(&b).unwrap()), Some(i), 0);
    }
    (w, (CHUNK / MAX_ENTRY) as u32)
}

#[test]
fn a_body_bad_in_a_chunk_hands_on_the_later_chunks_only_and_none_of_its_records() {
    let n = 40_000u32;
    let (w, per) = chunked(n);
    assert!(n > 2 * per, "three chunks or more");
    // A byte of the first chunk (read last) flipped.
    let load = spoiled_load("late", w, |b, _| b[100] ^= 1);
    let mut live = vec![u64::MAX; (n as usize).div_ceil(64)];
    let (got, free, ended) = run_records(load, n, &mut live);
    assert_eq!(ended, Loaded::Rejected("damaged (checksum)".into()));
    assert!(free.is_empty(), "no record handed on as free");
    // Exactly the entries after the first chunk, in order.
    let want: Vec<u32> = (per..n).collect();
    assert_eq!(got.iter().map(|&(_, r)| r).collect::<Vec<_>>(), want);
    // What the scan still reads: exactly the first chunk's records.
    for r in 0..n {
        let marked = live[r as usize / 64] & (1 << (r % 64)) != 0;
        assert_eq!(marked, r < per, "record {r}");
    }
    // An entry of the first chunk naming a record another chunk listed:
    // nothing of that chunk is handed on either.
    let (w, per) = chunked(n);
    let load = spoiled_load("listed", w, |b, _| {
        // The first entry's record (after its length byte and key), made
        // the last chunk's, and the chunk's checksum made good again.
        let at = 1 + crate::key::MAX_KEY_LEN;
        b[at..at + 4].copy_from_slice(&(n - 1).to_le_bytes());
        let len = per as usize * MAX_ENTRY;
        let sum = twox_hash::XxHash3_64::oneshot_with_seed(0, &b[..len + 8]);
        b[len + 8..len + 16].copy_from_slice(&sum.to_le_bytes());
    });
    let mut live = vec![u64::MAX; (n as usize).div_ceil(64)];
    let (got, _, ended) = run_records(load, n, &mut live);
    assert!(
        matches!(ended, Loaded::Rejected(ref w) if w.contains("listed twice")),
        "{ended:?}"
    );
    assert_eq!(got.len(), (n - per) as usize);
    assert!((0..per).all(|r| live[r as usize / 64] & (1 << (r % 64)) != 0));
}

#[test]
fn chunks_are_refused_out_of_order_or_unlike_their_header() {
    let n = 40_000u32;
    // The first two chunks swapped: each checksum is its place's.
    let (w, per) = chunked(n);
    let load = spoiled_load("swap", w, |b, _| {
        let whole = per as usize * MAX_ENTRY + TRAILER;
        let (a, rest) = b.split_at_mut(whole);
        a.swap_with_slice(&mut rest[..whole]);
    });
    let (got, ended) = run_files(load);
    assert_eq!(ended, Loaded::Rejected("damaged (checksum)".into()));
    assert_eq!(got.len(), (n - 2 * per) as usize);
    // A header announcing a chunk more or fewer than the body holds: the
    // last chunk's checksum is not its place's, nothing is handed on.
    for (name, more) in [("more", 1i64), ("fewer", -1)] {
        let (w, _) = chunked(n);
        let load = spoiled_load(name, w, |_, h| {
            h.chunks = h.chunks.wrapping_add_signed(more)
        });
        let (got, ended) = run_files(load);
        assert_eq!(
            ended,
            Loaded::Rejected("damaged (checksum)".into()),
            "{name}"
        );
        assert!(got.is_empty(), "{name}");
    }
    // An entry more than the body holds: known at its start.
    let (w, _) = chunked(n);
    let load = spoiled_load("entries", w, |_, h| h.entries += 1);
    let (_, ended) = run_files(load);
    assert_eq!(
        ended,
        Loaded::Rejected("fewer entries than its header says".into())
    );
    // A trailer naming more bytes than are left.
    let (w, _) = chunked(100);
    let load = spoiled_load("long", w, |b, _| {
        let at = b.len() - TRAILER;
        b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    });
    let (got, ended) = run_files(load);
    assert_eq!(ended, Loaded::Rejected("a chunk that does not fit".into()));
    assert!(got.is_empty());
}

#[test]
fn a_load_reads_a_multi_chunk_body_whole_and_in_order_and_stops_when_asked() {
    let n = 40_000u32;
    let (w, _) = chunked(n);
    let mut live = vec![u64::MAX; (n as usize + 10).div_ceil(64)];
    let (got, free, ended) = run_records(load_of("whole", w), n + 10, &mut live);
    assert_eq!(ended, Loaded::Whole);
    assert_eq!(got.len(), n as usize);
    assert!(got.iter().enumerate().all(|(i, &(_, r))| r == i as u32));
    // The records past the listed ones (still marked) are free.
    let mut free = free;
    free.sort_unstable();
    assert_eq!(free, (n..n + 10).collect::<Vec<_>>());
    // Every batch is at most BATCH, and a stop ends the load.
    let (w, _) = chunked(n);
    let sent = std::cell::Cell::new(0);
    let ended = load_of("stop", w).run(None, &|| sent.get() > 0, &mut |f| {
        let Found::Files(b) = f else { panic!() };
        assert!(b.len() <= crate::tiers::fs::found::BATCH);
        sent.set(sent.get() + 1);
        true
    });
    assert_eq!(ended, Loaded::Stopped);
    assert!(sent.get() > 0);
}

#[test]
fn temporary_files_of_gone_writers_are_removed_at_open() {
    assert_eq!(temp_writer(".kvtier-index.123.4.tmp"), Some(123));
    assert_eq!(temp_writer(".kvtier-generation.9.0.tmp"), Some(9));
    for other in [
        ".kvtier-index.123.tmp",
        "kvtier-index.1.2.tmp",
        ".kvtier-index.1.2.tmp.x",
        ".kvtier-layout.1.2.tmp",
        ".kvtier-indexx.1.2.tmp",
    ] {
        assert_eq!(temp_writer(other), None, "{other}");
    }
    let d = dir("temps");
    // A writer that cannot be alive (above any pid_max), and this one.
    let dead = d.join(".kvtier-index.999999999.0.tmp");
    let live = d.join(format!(".kvtier-index.{}.0.tmp", std::process::id()));
    let mine = d.join("notes.tmp");
    for f in [&dead, &live, &mine] {
        std::fs::write(f, b"x").unwrap();
    }
    Persisted::open(&d, &opts(&d), BLOCK).unwrap();
    assert!(!dead.exists() && live.exists() && mine.exists());
    std::fs::remove_dir_all(&d).unwrap();
}
