//! The file-system tier's directory over time: the layout fingerprint
//! that guards reuse across restarts (adopted, matched, refused, and
//! hostile marker files refused without blocking), max age, and clearing
//! at shutdown.

use std::path::Path;
use std::time::{Duration, SystemTime};

use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{SecondaryTier, TierLookup};
use kvtier_core::tiers::fs::{FsLayout, FsOptions, clear_blocks, marker};

use fs_blocks::{files, holds, key, load, request, stat, store};
use kvtier_testkit::fs_blocks;

const SLOT: usize = 16 << 10;

fn opts(dir: &Path, fingerprint: Option<&str>) -> FsOptions {
    let mut o = FsOptions::new(dir);
    o.read_threads = 1;
    o.write_threads = 1;
    o.layout_fingerprint = fingerprint.map(String::from);
    o
}

fn open_err(mem: &SlotMemory, o: FsOptions) -> String {
    match fs_blocks::open_rebuilt(mem.clone(), o) {
        Ok(_) => panic!("opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_directory_adopts_the_first_fingerprint_and_serves_it_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let a = "org/model-8b|bfloat16|16|NHD";
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), Some(a))).unwrap();
    assert_eq!(tier.layout_fingerprint(), Some(a));
    assert_eq!(marker::read(dir.path()).unwrap().as_deref(), Some(a));
    assert!(store(&mut tier, &mem, 1, &[7]).success);
    tier.shutdown().unwrap();
    drop(tier);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), Some(a))).unwrap();
    assert_eq!(tier.lookup(&key(7), &request()), TierLookup::Hit);
    assert!(load(&mut tier, 2, &[7], 3).success);
    assert!(holds(&mem, 3, 7));
    drop(tier);
    // Without a fingerprint nothing is checked (the blocks are served).
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), None)).unwrap();
    assert_eq!(tier.layout_fingerprint(), None);
    assert_eq!(tier.lookup(&key(7), &request()), TierLookup::Hit);
}

#[test]
fn another_fingerprint_is_refused_naming_both_and_nothing_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier =
        fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), Some("a|bf16|16"))).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
    drop(tier);
    let e = open_err(&mem, opts(dir.path(), Some("a|fp8|16")));
    assert!(
        e.contains("\"a|bf16|16\"")
            && e.contains("\"a|fp8|16\"")
            && e.contains("kvtier-inspect clear"),
        "{e}"
    );
    assert_eq!(files(dir.path(), "kvb").len(), 2, "the blocks stay");
    assert_eq!(
        marker::read(dir.path()).unwrap().as_deref(),
        Some("a|bf16|16")
    );
    // A bad fingerprint is refused before the directory is looked at.
    let e = open_err(&mem, opts(dir.path(), Some("tab\there")));
    assert!(e.contains("layout_fingerprint"), "{e}");
}

#[test]
fn hostile_marker_files_are_refused_without_blocking() {
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let place = |make: &dyn Fn(&Path)| {
        let dir = tempfile::tempdir().unwrap();
        make(&dir.path().join(marker::MARKER_NAME));
        let e = open_err(&mem, opts(dir.path(), Some("f")));
        (dir, e)
    };
    // A FIFO: opening it must not wait for a writer.
    let (_d, e) = place(&|p| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    });
    assert!(e.contains("fifo"), "{e}");
    // A symlink to a marker that would match: never followed.
    let elsewhere = tempfile::tempdir().unwrap();
    let good = elsewhere.path().join("m");
    std::fs::write(&good, b"f\n").unwrap();
    let (_d, e) = place(&|p| std::os::unix::fs::symlink(&good, p).unwrap());
    assert!(e.contains("symlink"), "{e}");
    // A huge file is not read.
    let (_d, e) = place(&|p| std::fs::write(p, vec![b'f'; 1 << 20]).unwrap());
    assert!(e.contains("more than a fingerprint"), "{e}");
    // Garbage, and a directory in its place.
    let (_d, e) = place(&|p| std::fs::write(p, b"\xff\xfe\n").unwrap());
    assert!(e.contains("not a layout fingerprint"), "{e}");
    let (_d, e) = place(&|p| std::fs::create_dir(p).unwrap());
    assert!(e.contains("layout marker"), "{e}");
    // Another user's file, even one naming the same fingerprint (root can
    // make one; others cannot, and skip this case).
    if unsafe { libc::geteuid() } == 0 {
        let (_d, e) = place(&|p| {
            std::fs::write(p, b"f\n").unwrap();
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        });
        assert!(e.contains("owned by user 65534"), "{e}");
    }
}

#[test]
fn a_block_older_than_the_max_age_is_a_miss_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), None)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
    drop(tier);
    // Block 1 was stored two hours ago (its file says so), block 2 now.
    let old = files(dir.path(), "kvb")
        .into_iter()
        .find(|p| p.to_str().unwrap().contains(&hex(1)))
        .unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let mut o = opts(dir.path(), None);
    o.max_age = Duration::from_secs(3600);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    let req = request();
    assert_eq!(tier.lookup(&key(1), &req), TierLookup::Miss);
    assert_eq!(tier.lookup(&key(2), &req), TierLookup::Hit);
    assert_eq!(stat(&tier, "expired"), 1.0);
    assert!(
        !load(&mut tier, 2, &[1], 0).success,
        "an expired block is not loaded"
    );
    // Its file goes with the next store.
    assert!(store(&mut tier, &mem, 3, &[3]).success);
    assert!(!old.exists());
    assert_eq!(tier.block_count(), 2);
}

#[test]
fn a_block_this_tier_stored_expires_too_and_the_step_end_sweeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut o = opts(dir.path(), None);
    o.max_age = Duration::from_millis(1);
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    std::thread::sleep(Duration::from_millis(20));
    // Nobody looks it up: the end of the step removes it.
    tier.on_schedule_end();
    assert_eq!(tier.block_count(), 0);
    assert_eq!(stat(&tier, "expired"), 1.0);
    assert_eq!(tier.lookup(&key(1), &request()), TierLookup::Miss);
}

#[test]
fn clear_on_shutdown_empties_the_directory_but_keeps_it_and_its_marker() {
    for layout in [FsLayout::Files, FsLayout::Segments] {
        let dir = tempfile::tempdir().unwrap();
        let mem = SlotMemory::anonymous(4, SLOT).unwrap();
        let mut o = opts(dir.path(), Some("f"));
        o.layout = layout;
        o.capacity_bytes = 64 * (SLOT as u64 + 4096);
        o.clear_on_shutdown = true;
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
        assert!(store(&mut tier, &mem, 1, &[1, 2, 3]).success);
        tier.shutdown().unwrap();
        drop(tier);
        assert!(
            files(dir.path(), "kvb").is_empty() && files(dir.path(), "kvs").is_empty(),
            "{layout:?}"
        );
        assert_eq!(marker::read(dir.path()).unwrap().as_deref(), Some("f"));
        let tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
        assert_eq!(tier.block_count(), 0, "{layout:?}");
    }
    // Off (the default): the blocks stay.
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), opts(dir.path(), None)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1]).success);
    tier.shutdown().unwrap();
    assert_eq!(files(dir.path(), "kvb").len(), 1);
    assert_eq!(clear_blocks(dir.path()).unwrap().files_removed, 1);
    assert!(files(dir.path(), "kvb").is_empty());
}

/// The hex of `key(i)`'s bytes, as its file name holds it.
fn hex(i: u32) -> String {
    format!("block-{i:08}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}
