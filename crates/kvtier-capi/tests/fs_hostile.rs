//! The fs tier and kvtier-inspect in a hostile directory: FIFOs, sockets,
//! device nodes and symlinks in every position the tier names (fan-out
//! directory, block file, segment file, `segments/`, lock file, temporary
//! and probe files), other users' files, huge sparse files, and entries
//! appearing and changing during a scan.
//!
//! Every case checks, by listing the whole tree of an "outside" directory
//! beside the tier's (paths, kinds, modes, sizes and bytes) before and
//! after, that nothing outside was read into a block, written, resized or
//! removed; and that the tier opens, serves and closes, and the inspector
//! scans and repairs, within a generous deadline (30 s), so a hang fails
//! the test instead of hanging the suite.
//!
//! The randomized form (`hostile_matrix_randomized`) runs
//! `KVTIER_FAULT_ROUNDS` rounds (3 under `make test`, more under
//! `make faults`), `KVTIER_FAULT_SEED` repeating a run.

use kvtier_testkit::fault_run;
use kvtier_testkit::fs_blocks;
use kvtier_testkit::require;
use kvtier_testkit::rng;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fs_blocks::{holds, key, load, request, stat, store};
use kvtier_core::region::SlotMemory;
use kvtier_core::tiering::{SecondaryTier, TierLookup};
use kvtier_core::tiers::fs::Cause;
use kvtier_core::tiers::fs::format::Layout;
use kvtier_core::tiers::fs::{FsLayout, FsOptions};

const SLOT: usize = 4096;
const DEADLINE: Duration = Duration::from_secs(30);

/// What a tree holds: path → (kind and mode, size, bytes of files).
type Tree = BTreeMap<PathBuf, (u32, u64, Option<Vec<u8>>)>;

/// Lists `dir` recursively without following symlinks.
fn tree(dir: &Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let bytes = if m.file_type().is_file() && m.len() < (1 << 20) {
                Some(std::fs::read(&p).unwrap())
            } else if m.file_type().is_symlink() {
                Some(
                    std::fs::read_link(&p)
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else {
                None
            };
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p, (m.mode(), m.len(), bytes));
        }
    }
    out
}

/// Fails with the paths that differ between `before` and `now`.
fn assert_same(before: &Tree, now: &Tree, what: &str) {
    let changed: Vec<_> = before
        .keys()
        .chain(now.keys())
        .filter(|p| before.get(*p) != now.get(*p))
        .map(|p| {
            let size = |t: &Tree| t.get(p).map(|v| (v.0, v.1));
            format!(
                "{} (mode, size) {:?} -> {:?}",
                p.display(),
                size(before),
                size(now)
            )
        })
        .collect();
    assert!(changed.is_empty(), "{what}: {changed:#?}");
}

/// Runs `f` on another thread; fails the test if it does not return
/// within the deadline (a hang).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: still running after {DEADLINE:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// Runs kvtier-inspect with `args` (as user `uid` when given), killing it
/// past the deadline; its exit code and standard output.
fn inspect_as(uid: Option<u32>, args: &[&str]) -> (i32, String) {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(env!("CARGO_BIN_EXE_kvtier-inspect"));
    c.args(args)
        .arg("--quiet")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(uid) = uid {
        c.uid(uid).gid(uid);
    }
    let mut child = c.spawn().unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            use std::io::Read;
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            return (status.code().unwrap_or(-1), out);
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kvtier-inspect {args:?}: still running after {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn inspect(args: &[&str]) -> (i32, String) {
    inspect_as(None, args)
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o666) },
        0,
        "{}",
        p.display()
    );
}

/// A character device like /dev/null (1:3), where the process may make
/// one (root); a FIFO elsewhere.
fn mknod_null(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    if rc != 0 {
        mkfifo(p);
    }
}

fn socket(p: &Path) {
    let l = std::os::unix::net::UnixListener::bind(p).unwrap();
    // The socket file stays after the listener closes.
    drop(l);
}

/// Kinds of thing to put in a tier's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thing {
    Fifo,
    Socket,
    Device,
    /// A symlink to a file outside.
    LinkFile,
    /// A symlink to a directory outside.
    LinkDir,
}

const THINGS: [Thing; 5] = [
    Thing::Fifo,
    Thing::Socket,
    Thing::Device,
    Thing::LinkFile,
    Thing::LinkDir,
];

/// Where in the tier's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// Key 1's fan-out directory.
    Fanout,
    /// Key 1's block file.
    Block,
    /// A temporary file of a dead writer in key 1's fan-out directory.
    Temp,
    /// An `O_DIRECT` probe file of a dead process in the root.
    Probe,
    /// `segments/`.
    SegmentsDir,
    /// The first segment file.
    Segment,
    /// `segments/lock`.
    Lock,
}

const PLACES: [Place; 7] = [
    Place::Fanout,
    Place::Block,
    Place::Temp,
    Place::Probe,
    Place::SegmentsDir,
    Place::Segment,
    Place::Lock,
];

/// How the tier runs in a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Files,
    Shared,
    Segments,
}

const MODES: [Mode; 3] = [Mode::Files, Mode::Shared, Mode::Segments];

fn options(root: &Path, mode: Mode) -> FsOptions {
    let mut o = FsOptions::new(root);
    o.read_threads = 2;
    o.write_threads = 2;
    match mode {
        Mode::Files => {}
        Mode::Shared => o.shared = true,
        Mode::Segments => {
            o.layout = FsLayout::Segments;
            o.capacity_bytes = 16 * (4096 + SLOT as u64);
        }
    }
    o
}

fn segment_name() -> String {
    format!("{}-0.kvs", 4096 + SLOT)
}

/// The outside directory: a user's file, a valid block file of key 1 (a
/// copy from another tier), a file named like a temporary file, and a
/// 100,000-byte file, all with distinct modes.
fn make_outside(outside: &Path) {
    std::fs::create_dir_all(outside).unwrap();
    std::fs::write(outside.join("precious.txt"), b"a user's file").unwrap();
    std::fs::write(outside.join("big"), vec![7u8; 100_000]).unwrap();
    std::fs::set_permissions(outside.join("big"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let other = outside.join("other-tier");
    {
        let mem = SlotMemory::anonymous(4, SLOT).unwrap();
        let mut t = fs_blocks::open_rebuilt(mem.clone(), options(&other, Mode::Files)).unwrap();
        assert!(store(&mut t, &mem, 1, &[1]).success);
        t.shutdown().unwrap();
    }
    let block = Layout::new(other.clone()).block_path(&key(1));
    std::fs::copy(&block, outside.join(block.file_name().unwrap())).unwrap();
    std::fs::write(outside.join(".deadbeef.999999999.0.tmp"), b"temp-like").unwrap();
    std::fs::write(outside.join("lock"), b"not a lock").unwrap();
    std::fs::write(outside.join(segment_name()), vec![1u8; 100_000]).unwrap();
}

/// Puts `thing` at `place` of the tier directory `root`.
fn plant(root: &Path, outside: &Path, place: Place, thing: Thing) {
    let fan = root.join(std::str::from_utf8(&Layout::fanout(&key(1))).unwrap());
    let block = Layout::new(root.to_path_buf()).block_path(&key(1));
    let seg = root.join("segments");
    let path = match place {
        Place::Fanout => fan.clone(),
        Place::Block => block.clone(),
        Place::Temp => fan.join(format!(
            ".{}.999999999.0.tmp",
            block.file_stem().unwrap().to_str().unwrap()
        )),
        Place::Probe => root.join(".odirect-probe.999999999.tmp"),
        Place::SegmentsDir => seg.clone(),
        Place::Segment => seg.join(segment_name()),
        Place::Lock => seg.join("lock"),
    };
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let target_file = match place {
        Place::Segment => outside.join(segment_name()),
        Place::Lock => outside.join("lock"),
        Place::Block => outside.join(block.file_name().unwrap()),
        _ => outside.join("precious.txt"),
    };
    match thing {
        Thing::Fifo => mkfifo(&path),
        Thing::Socket => socket(&path),
        Thing::Device => mknod_null(&path),
        Thing::LinkFile => symlink(&target_file, &path).unwrap(),
        Thing::LinkDir => symlink(outside, &path).unwrap(),
    }
}

/// Opens a tier on `root`, stores, looks up and loads keys 1..=4, and
/// closes it, all within the deadline; whether it opened.
fn exercise_tier(root: &Path, mode: Mode) -> bool {
    let root = root.to_path_buf();
    within(&format!("tier {mode:?} on {}", root.display()), move || {
        let mem = SlotMemory::anonymous(16, SLOT).unwrap();
        let Ok(mut tier) = fs_blocks::open_rebuilt(mem.clone(), options(&root, mode)) else {
            // Refusing to open is allowed (a segment file or lock in the
            // way); hanging or touching the outside is not.
            return false;
        };
        let ids = [1, 2, 3, 4];
        let _ = store(&mut tier, &mem, 1, &ids);
        let req = request();
        for i in ids {
            let mut answer = tier.lookup(&key(i), &req);
            // A shared tier checks the disk off the caller's thread (the
            // answer is kept until the step ends).
            while answer == TierLookup::Retry {
                std::thread::sleep(Duration::from_millis(2));
                answer = tier.lookup(&key(i), &req);
            }
            tier.on_schedule_end();
            if answer == TierLookup::Hit {
                let r = load(&mut tier, 10 + i as u64, &[i], 8);
                if r.success {
                    assert!(holds(&mem, 8, i), "key {i} served the wrong bytes");
                }
            }
        }
        tier.shutdown().unwrap();
        drop(tier);
        true
    })
}

/// Runs one case: the tier in `mode` and kvtier-inspect (summary, verify,
/// repair, mode check) on a directory with `thing` at `place`; checks the
/// outside tree is byte-identical.  Returns whether the tier opened.
fn case(mode: Mode, place: Place, thing: Thing) -> bool {
    let top = tempfile::tempdir().unwrap();
    let root = top.path().join("cache");
    let outside = top.path().join("outside");
    make_outside(&outside);
    std::fs::create_dir_all(&root).unwrap();
    plant(&root, &outside, place, thing);
    let before = tree(&outside);
    let name = format!("{mode:?} {place:?} {thing:?}");
    let opened = exercise_tier(&root, mode);
    assert_eq!(
        tree(&outside),
        before,
        "{name}: the tier changed the outside"
    );
    let dir = root.to_str().unwrap();
    for args in [
        vec!["fs", dir],
        vec!["fs", dir, "--verify"],
        vec!["fs", dir, "--verify", "--repair"],
        vec!["fs", dir, "--json", "--mode", "0644"],
    ] {
        let (code, _) = inspect(&args);
        // A repair needs the lock: one that is not a regular file is a
        // clear refusal (exit 2).
        let refusal = place == Place::Lock && args.contains(&"--repair");
        assert!(
            code == 0 || code == 1 || (refusal && code == 2),
            "{name}: {args:?} exited {code}"
        );
    }
    assert_eq!(
        tree(&outside),
        before,
        "{name}: the inspector changed the outside"
    );
    // A second open after the inspector ran (a restart over the same entry).
    exercise_tier(&root, mode);
    assert_eq!(
        tree(&outside),
        before,
        "{name}: the restart changed the outside"
    );
    opened
}

#[test]
fn hostile_matrix_nothing_outside_changes_and_nothing_hangs() {
    let start = Instant::now();
    let mut cases = 0;
    let mut refused = Vec::new();
    for mode in MODES {
        for place in PLACES {
            let segments_place = matches!(place, Place::SegmentsDir | Place::Segment | Place::Lock);
            if segments_place != (mode == Mode::Segments) && !matches!(place, Place::Probe) {
                continue;
            }
            for thing in THINGS {
                cases += 1;
                if !case(mode, place, thing) {
                    refused.push(format!("{mode:?} {place:?} {thing:?}"));
                }
            }
        }
    }
    // Only the segments layout refuses, and only for an entry in the way
    // of a segment file, `segments/` or the lock.
    for r in &refused {
        assert!(r.starts_with("Segments"), "refused to open: {r}");
        assert!(!r.contains("Probe"), "refused to open: {r}");
    }
    println!(
        "fs-hostile: {cases} cases, {} refused (segments in the way), byte-identical outside in all, {:.1} s",
        refused.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn a_fifo_under_a_block_name_is_skipped_counted_and_left() {
    for shared in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(Layout::new(root.clone()).dir(&key(1))).unwrap();
        let fifo = Layout::new(root.clone()).block_path(&key(1));
        mkfifo(&fifo);
        let r2 = root.clone();
        let (report, errors) = within("open over a FIFO", move || {
            let mem = SlotMemory::anonymous(4, SLOT).unwrap();
            let mut o = options(&r2, Mode::Files);
            o.shared = shared;
            let mut tier = fs_blocks::open_rebuilt(mem, o).unwrap();
            let mut errors = Vec::new();
            tier.take_errors(&mut errors);
            let r = tier.rebuild_report();
            assert_eq!(stat(&tier, "restart_foreign_entries"), 1.0);
            tier.shutdown().unwrap();
            (r, errors)
        });
        assert_eq!((report.foreign, report.foreign_kinds.fifos), (1, 1));
        assert!(
            errors.iter().any(|e| e.contains("1 foreign entries")),
            "{errors:?}"
        );
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );
    }
}

use std::os::unix::fs::FileTypeExt;

#[test]
fn a_block_replaced_by_a_fifo_while_the_tier_runs_answers_miss_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    within("load of a FIFO", move || {
        let mem = SlotMemory::anonymous(8, SLOT).unwrap();
        let mut tier = fs_blocks::open_rebuilt(mem.clone(), options(&root, Mode::Files)).unwrap();
        assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
        let block = Layout::new(root.clone()).block_path(&key(1));
        std::fs::remove_file(&block).unwrap();
        mkfifo(&block);
        let r = load(&mut tier, 2, &[1, 2], 4);
        assert!(!r.success);
        assert_eq!(r.succeeded_keys, Some(vec![key(2)]));
        assert_eq!(tier.errors(Cause::Foreign), 1);
        assert_eq!(tier.lookup(&key(1), &request()), TierLookup::Miss);
        assert!(
            std::fs::symlink_metadata(&block)
                .unwrap()
                .file_type()
                .is_fifo()
        );
        tier.shutdown().unwrap();
    });
}

/// Whether this process may switch users (root).
/// The child side of the unprivileged test: opens a shared tier as
/// `nobody` on a directory of root's 0600 blocks, looks key 1 up (found
/// on disk), loads it (permission denied) and reports what it saw.
#[test]
#[ignore]
fn child_unprivileged() {
    let Ok(dir) = std::env::var("KVTIER_HOSTILE_DIR") else {
        return;
    };
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut o = options(Path::new(&dir), Mode::Shared);
    o.file_mode = 0o666;
    let mut tier = fs_blocks::open_rebuilt(mem, o).unwrap();
    let report = tier.rebuild_report();
    assert_eq!((report.blocks, report.unreadable), (0, 2), "{report:?}");
    assert_eq!(report.removed, 0);
    let req = request();
    let mut answer = tier.lookup(&key(1), &req);
    while answer == TierLookup::Retry {
        std::thread::sleep(Duration::from_millis(2));
        answer = tier.lookup(&key(1), &req);
    }
    assert_eq!(
        answer,
        TierLookup::Hit,
        "a whole-sized file is found on disk"
    );
    let r = load(&mut tier, 1, &[1], 0);
    assert!(!r.success);
    assert_eq!(tier.errors(Cause::Permission), 1);
    assert_eq!(stat(&tier, "unreadable_blocks_dropped"), 1.0);
    tier.shutdown().unwrap();
}

#[test]
fn another_users_unreadable_blocks_stay_byte_identical() {
    if !require::require_root("switching to user nobody") {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = top.path().join("shared");
    let mem = SlotMemory::anonymous(8, SLOT).unwrap();
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), options(&root, Mode::Files)).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
    tier.shutdown().unwrap();
    drop(tier);
    // The directories are open to all (a shared directory); the blocks
    // are root's, 0600.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    for i in [1, 2] {
        let d = Layout::new(root.clone()).dir(&key(i));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let b = Layout::new(root.clone()).block_path(&key(i));
        assert_eq!(std::fs::metadata(&b).unwrap().mode() & 0o777, 0o600);
    }
    let before = tree(&root);
    use std::os::unix::process::CommandExt;
    let status = fs_blocks::child(
        "child_unprivileged",
        &[("KVTIER_HOSTILE_DIR", root.to_str().unwrap().to_string())],
    )
    .uid(65534)
    .gid(65534)
    .status()
    .unwrap();
    assert!(status.success(), "the unprivileged tier failed");
    let (code, out) = inspect_as(
        Some(65534),
        &["fs", root.to_str().unwrap(), "--verify", "--repair"],
    );
    assert_eq!(code, 1, "{out}");
    assert_eq!(out.matches("unreadable").count(), 2, "{out}");
    assert!(!out.contains("(removed)"), "{out}");
    // Both blocks are there, byte for byte (the child's probe files and
    // fan-out directories aside: it made none for keys 1 and 2).
    let after: Tree = tree(&root)
        .into_iter()
        .filter(|(p, _)| before.contains_key(p))
        .collect();
    assert_same(&before, &after, "another user's blocks");
}

#[test]
fn files_and_directories_are_created_with_the_file_mode_whatever_the_umask() {
    for (mode, layout) in [
        (0o600, FsLayout::Files),
        (0o640, FsLayout::Files),
        (0o600, FsLayout::Segments),
    ] {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("a/cache");
        let mem = SlotMemory::anonymous(4, SLOT).unwrap();
        let mut o = options(
            &root,
            if layout == FsLayout::Files {
                Mode::Files
            } else {
                Mode::Segments
            },
        );
        o.file_mode = mode;
        for unnamed in [true, false] {
            o.unnamed_temp_files = unnamed;
            // SAFETY: umask has no preconditions; an open umask must not
            // widen, a narrow one must not narrow.
            let old = unsafe { libc::umask(0o077) };
            let mut tier = fs_blocks::open_rebuilt(mem.clone(), o.clone()).unwrap();
            assert!(store(&mut tier, &mem, unnamed as u64, &[1 + unnamed as u32]).success);
            tier.shutdown().unwrap();
            drop(tier);
            // SAFETY: as above.
            unsafe { libc::umask(old) };
        }
        let dir_mode = mode | ((mode & 0o444) >> 2);
        for (p, (m, _, _)) in tree(&root) {
            let want = if m & libc::S_IFMT == libc::S_IFDIR {
                dir_mode
            } else {
                mode
            };
            assert_eq!(m & 0o7777, want, "{} ({layout:?}, {mode:o})", p.display());
        }
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, dir_mode);
        let (_, out) = inspect(&["fs", root.to_str().unwrap(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let too_open = v["too_open"].as_array().unwrap().len();
        assert_eq!(too_open > 0, (mode != 0o600), "{out}");
    }
}

#[test]
fn the_inspector_reports_files_more_open_than_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut o = options(dir.path(), Mode::Files);
    o.file_mode = 0o644;
    let mut tier = fs_blocks::open_rebuilt(mem.clone(), o).unwrap();
    assert!(store(&mut tier, &mem, 1, &[1, 2]).success);
    tier.shutdown().unwrap();
    let d = dir.path().to_str().unwrap();
    let (_, out) = inspect(&["fs", d, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Two block files and their fan-out directories (or one, shared).
    let n = v["too_open"].as_array().unwrap().len();
    assert!(n >= 3, "{out}");
    assert_eq!(v["mode"], "0600");
    let (_, out) = inspect(&["fs", d, "--json", "--mode", "0644"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["too_open"].as_array().unwrap().len(), 0, "{out}");
}

#[test]
fn a_failed_segments_open_removes_what_it_created_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    // A FIFO where the second segment file belongs: the open fails after
    // making the directory, the lock and the first segment file.
    let seg = root.join("segments");
    std::fs::create_dir_all(&seg).unwrap();
    std::fs::write(seg.join("keep"), b"x").unwrap();
    let record = 4096 + SLOT as u64;
    mkfifo(&seg.join(format!("{record}-1.kvs")));
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut o = options(&root, Mode::Segments);
    o.segment_file_bytes = record;
    o.capacity_bytes = record * 2;
    let err = within("segments open over a FIFO", move || {
        fs_blocks::open_rebuilt(mem, o)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    });
    assert!(err.contains("FIFO"), "{err}");
    let mut left: Vec<String> = std::fs::read_dir(&seg)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [format!("{record}-1.kvs"), "keep".to_string()]);
    // In a fresh directory, a failure leaves no segments directory at all.
    let fresh = tempfile::tempdir().unwrap();
    let root = fresh.path().to_path_buf();
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let mut o = options(&root, Mode::Segments);
    o.capacity_bytes = u64::MAX;
    assert!(fs_blocks::open_rebuilt(mem, o).is_err());
    assert!(!root.join("segments").exists());
}

#[test]
fn the_segments_layout_removes_probe_files_of_dead_processes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    for kind in ["odirect", "tmpfile"] {
        std::fs::write(root.join(format!(".{kind}-probe.999999999.tmp")), b"").unwrap();
    }
    let mem = SlotMemory::anonymous(4, SLOT).unwrap();
    let tier = fs_blocks::open_rebuilt(mem, options(&root, Mode::Segments)).unwrap();
    assert_eq!(tier.rebuild_report().temp_removed, 2);
    let probes = std::fs::read_dir(&root)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .contains("-probe.")
        })
        .count();
    assert_eq!(probes, 0);
}

#[test]
fn huge_sparse_files_are_sized_before_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let huge: u64 = 100 << 30;
    // Under a block name: its size says it is no block of this size.
    let block = Layout::new(root.clone()).block_path(&key(1));
    std::fs::create_dir_all(block.parent().unwrap()).unwrap();
    std::fs::File::create(&block)
        .unwrap()
        .set_len(huge)
        .unwrap();
    // A sparse segment file of the same record size, another directory.
    let segroot = dir.path().join("seg");
    let seg = segroot.join("segments");
    std::fs::create_dir_all(&seg).unwrap();
    let sparse = seg.join(segment_name());
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(huge)
        .unwrap();
    // A valid header claiming 100 GiB of data, holes after it.
    let claims = dir.path().join("claims");
    std::fs::create_dir_all(&claims).unwrap();
    let b2 = Layout::new(claims.clone()).block_path(&key(2));
    std::fs::create_dir_all(b2.parent().unwrap()).unwrap();
    let mut header = vec![0u8; 4096];
    kvtier_core::tiers::fs::format::encode_header(
        &kvtier_core::tiers::fs::format::Header {
            key: key(2),
            data_len: huge,
            checksum: 0,
        },
        &mut header,
    );
    std::fs::write(&b2, &header).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&b2)
        .unwrap()
        .set_len(huge + 4096)
        .unwrap();
    let (r1, r2) = (root.clone(), segroot.clone());
    within("tier over huge sparse files", move || {
        let mem = SlotMemory::anonymous(4, SLOT).unwrap();
        let t = fs_blocks::open_rebuilt(mem.clone(), options(&r1, Mode::Files)).unwrap();
        assert_eq!(t.rebuild_report().removed, 1);
        drop(t);
        let t = fs_blocks::open_rebuilt(mem, options(&r2, Mode::Segments)).unwrap();
        drop(t);
    });
    for d in [&segroot, &claims] {
        let (code, out) = inspect(&["fs", d.to_str().unwrap(), "--verify"]);
        assert!(code == 0 || code == 1, "{out}");
    }
    let (_, out) = inspect(&["fs", claims.to_str().unwrap(), "--verify", "--repair"]);
    assert!(out.contains("sparse"), "{out}");
    assert!(b2.exists(), "a sparse block is reported, not removed");
}

/// Entries appearing and changing while the tier opens and the inspector
/// scans: a thread keeps replacing FIFOs, sockets, symlinks and files
/// under block names in every fan-out directory.
#[test]
fn hostile_matrix_randomized() {
    let rounds = fault_run::rounds(3);
    let seed = fault_run::seed();
    let mut rng = rng::Rng(seed);
    let start = Instant::now();
    let mut cases = 0;
    for round in 0..rounds {
        let mode = MODES[rng.below(3) as usize];
        let place = PLACES[rng.below(PLACES.len() as u64) as usize];
        let thing = THINGS[rng.below(THINGS.len() as u64) as usize];
        cases += 1;
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("cache");
        let outside = top.path().join("outside");
        make_outside(&outside);
        std::fs::create_dir_all(&root).unwrap();
        plant(&root, &outside, place, thing);
        let before = tree(&outside);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let (root, outside, stop) = (root.clone(), outside.clone(), stop.clone());
            let mut rng = rng::Rng(rng.next());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let i = 1 + rng.below(40) as u32;
                    let p = Layout::new(root.clone()).block_path(&key(i));
                    let _ = std::fs::create_dir_all(p.parent().unwrap());
                    // The churn itself must not write through a planted
                    // symlink: only real fan-out directories.
                    let real = std::fs::symlink_metadata(p.parent().unwrap())
                        .is_ok_and(|m| m.file_type().is_dir());
                    if !real {
                        continue;
                    }
                    let _ = std::fs::remove_file(&p);
                    match rng.below(4) {
                        0 => mkfifo_quiet(&p),
                        1 => {
                            let _ = symlink(outside.join("precious.txt"), &p);
                        }
                        2 => {
                            let _ = std::fs::write(&p, b"short");
                        }
                        _ => {
                            let _ = symlink(&outside, p.parent().unwrap().join("zz.kvb"));
                        }
                    }
                }
            })
        };
        exercise_tier(&root, mode);
        let dir = root.to_str().unwrap();
        inspect(&["fs", dir, "--verify", "--repair"]);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
        exercise_tier(&root, mode);
        assert_same(
            &before,
            &tree(&outside),
            &format!(
                "round {round} (seed {seed}): {mode:?} {place:?} {thing:?} changed the outside"
            ),
        );
    }
    println!(
        "fault-run fs-hostile: {cases} randomized cases, seed {seed}, byte-identical outside in all, {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

fn mkfifo_quiet(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated path.
    unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
}
