//! Tests of the persisted index: what is written is what is loaded, once;
//! every file that is not exactly that is refused and removed.

use std::path::PathBuf;

use super::*;
use crate::tiers::fs::index::State;
use crate::tiers::fs::snapshot_files::temp_writer;

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
        ix.insert(key(i), State::Ready);
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

/// What an open of `d` loads: the keys (least recent first) and why a
/// file was refused.
fn load(d: &Path, o: &FsOptions) -> (Option<Vec<Key>>, Option<String>) {
    let mut p = Persisted::open(d, o, BLOCK).unwrap();
    let mut ix = Index::new(super::super::format::file_len(BLOCK));
    let loaded = p.restore(o, &mut ix, |_, _| {}, |_| {}).map(|r| {
        assert!(r.index_loaded);
        assert_eq!(r.blocks, ix.ready_count() as u64);
        let mut keys = Vec::new();
        ix.ready_keys(&mut keys);
        keys
    });
    // Whatever it was, a regular file is gone (a foreign entry is left
    // alone, as everywhere in the directory).
    let left = std::fs::symlink_metadata(d.join(INDEX_NAME));
    assert!(!left.is_ok_and(|m| m.is_file()));
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
    let mut got = Vec::new();
    let mut ix = Index::new(4096);
    p.restore(&o, &mut ix, |k, at| got.push((k, at)), |_| {})
        .unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1], (key(1), t));
    assert!(got[0].1 > t, "an unknown store time is the load's");
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
    assert!(p.restore(&o, &mut index(0), |_, _| {}, |_| {}).is_none());
    assert!(p.write(&d, &o, BLOCK, &index(1), |_| None).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn no_index_is_written_while_blocks_are_in_flight() {
    let d = dir("flight");
    let o = opts(&d);
    let mut ix = index(4);
    ix.insert(key(99), State::Writing);
    let p = Persisted::open(&d, &o, BLOCK).unwrap();
    let why = p.write(&d, &o, BLOCK, &ix, |_| None).unwrap_err();
    assert!(why.contains("being written"), "{why}");
    assert!(!d.join(INDEX_NAME).exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_restored_index_over_the_capacity_is_evicted_down_to_the_low_watermark() {
    let d = dir("evict");
    let mut o = opts(&d);
    persist(&d, &o, &index(40));
    o.capacity_bytes = 20 * super::super::format::file_len(BLOCK);
    let mut p = Persisted::open(&d, &o, BLOCK).unwrap();
    let mut ix = Index::new(super::super::format::file_len(BLOCK));
    let mut gone = Vec::new();
    let r = p
        .restore(&o, &mut ix, |_, _| {}, |k| gone.push(*k))
        .unwrap();
    assert_eq!(r.blocks + r.evicted, 40);
    assert_eq!(r.blocks, ix.ready_count() as u64);
    assert!(ix.used() <= (o.capacity_bytes as f64 * o.low_watermark) as u64);
    // The least recent go first.
    assert_eq!(gone, (0..r.evicted).map(key).collect::<Vec<_>>());
    std::fs::remove_dir_all(&d).unwrap();
}

/// Times writing and loading an index of `n` keys (run with `--ignored
/// --nocapture`, in release, to measure).
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
    let read = t.elapsed();
    let mut back = Index::new(4096);
    let loaded = p.restore(&o, &mut back, |_, _| {}, |_| {});
    let load = t.elapsed();
    assert_eq!(loaded.map(|r| r.blocks), Some(n));
    eprintln!(
        "{n} entries ({bytes} bytes): written in {write:?}; opened in {load:?} (read, checked, generation moved on: {read:?}; index filled: {:?}); index {:.1} bytes per block",
        load - read,
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
    assert!(p2.restore(&o, &mut index(0), |_, _| {}, |_| {}).is_none());
    assert_eq!(std::fs::read(&p).unwrap(), before, "left as it was");
    assert!(!d.join(GENERATION_NAME).exists(), "the generation too");
    // And nothing is written over it at shutdown.
    assert!(p2.write(&d, &o, BLOCK, &index(1), |_| None).is_err());
    assert_eq!(std::fs::read(&p).unwrap(), before);
    std::fs::remove_dir_all(&d).unwrap();
}

/// An index body of `(key, record)` entries (`u32::MAX`: none).
fn body(entries: &[(u64, u32)]) -> Vec<u8> {
    let mut b = Vec::new();
    for &(i, record) in entries {
        let k = key(i);
        b.push(k.as_bytes().len() as u8);
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&record.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
    }
    b
}

#[test]
fn segment_records_must_be_present_distinct_within_the_capacity_and_marked_live() {
    // Every record maybe live, as a live map not trusted says.
    let all = [u64::MAX];
    let ok = body(&[(1, 5), (2, 0), (3, 7)]);
    let got = listed(&ok, 3, 8, &all).unwrap();
    assert_eq!(got, vec![(key(1), 5), (key(2), 0), (key(3), 7)]);
    assert_eq!(
        listed(&ok, 3, 7, &all),
        Err("a segment record past the capacity")
    );
    assert_eq!(listed(&ok, 2, 8, &all), Err("entries that do not parse"));
    let twice = body(&[(1, 5), (2, 5)]);
    assert_eq!(
        listed(&twice, 2, 8, &all),
        Err("a segment record listed twice")
    );
    let same_key = body(&[(1, 5), (1, 6)]);
    assert_eq!(listed(&same_key, 2, 8, &all), Err("a key listed twice"));
    let none = body(&[(1, u32::MAX)]);
    assert_eq!(
        listed(&none, 1, 8, &all),
        Err("an entry without a segment record")
    );
    // A record the live map has clear (records 0, 5 and 7 marked, not 3).
    let marked = [1 | 1 << 5 | 1 << 7];
    assert!(listed(&ok, 3, 8, &marked).is_ok());
    let unmarked = body(&[(1, 5), (2, 3)]);
    assert_eq!(
        listed(&unmarked, 2, 8, &marked),
        Err("a segment record the live map says holds no block")
    );
    // A repeated key is refused by the files layout's restore too.
    let d = dir("twice");
    let o = opts(&d);
    let mut p = Persisted {
        body: Some((body(&[(1, u32::MAX), (2, u32::MAX), (1, u32::MAX)]), 3)),
        generation: Some(0),
        rejected: None,
    };
    let mut ix = Index::new(4096);
    assert!(p.restore(&o, &mut ix, |_, _| {}, |_| {}).is_none());
    assert_eq!((ix.ready_count(), ix.used()), (0, 0));
    assert!(p.rejected().unwrap().starts_with("a key listed twice"));
    std::fs::remove_dir_all(&d).unwrap();
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
