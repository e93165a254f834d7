//! The shared region across real processes: creator and joiner, creator
//! failure, timeouts, segments, layouts, unlink after join, stale files,
//! cleanup with lent slots, pre-faulting, and every bad input.
//!
//! This test binary has its own `main` (harness = false) so that it can
//! re-execute itself as a child process: with `KVTIER_REGION_CHILD` set it
//! plays one role (joiner, live creator, barrier peer) and exits.  Without
//! it, it runs every test below (or those whose name contains an argument).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kvtier_testkit::own_main;
use kvtier_testkit::region_files::start_creating_by_hand;
use kvtier_testkit::tmpfs;

use kvtier_core::Error;
use kvtier_core::region::{OpenMode, Prefault, PrefaultMethod, Region, RegionOptions, Role, Share};
use tmpfs::SmallTmpfs;

const PAGE: usize = 4096;
const CHILD_VAR: &str = "KVTIER_REGION_CHILD";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name no other test or run uses.
fn unique(tag: &str) -> String {
    format!(
        "kvtier-test-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn shm() -> PathBuf {
    PathBuf::from("/dev/shm")
}

/// Backing files in `/dev/shm` whose names start with `name`.
fn leftovers(name: &str) -> Vec<PathBuf> {
    std::fs::read_dir(shm())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(name))
        .map(|e| e.path())
        .collect()
}

/// Removes whatever a test left under `name` (on success nothing should be).
struct Cleanup(String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in leftovers(&self.0) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn opts(name: &str, slots: u32, bytes: usize) -> RegionOptions {
    let mut o = RegionOptions::new(name, slots, bytes);
    o.join_timeout = Duration::from_secs(10);
    o
}

/// A limit that only a hang runs into, however loaded the machine.
const GENEROUS: Duration = Duration::from_secs(60);

/// Waits until this process holds `n` `flock` locks on the file at `path`
/// (as /proc/locks lists them).  A joiner takes its shared lock before it
/// waits for the creator, so a joiner thread's lock says that it waits.
fn wait_for_flocks(path: &std::path::Path, n: usize) {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).unwrap().ino().to_string();
    let pid = std::process::id().to_string();
    let deadline = Instant::now() + GENEROUS;
    loop {
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        let held = locks
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| {
                f.len() >= 6
                    && f[1] == "FLOCK"
                    && f[4] == pid
                    && f[5].rsplit(':').next() == Some(ino.as_str())
            })
            .count();
        if held >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{held} of {n} flock locks on {} after {GENEROUS:?}: the joiner never took its lock",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn pattern(slot: u32, i: usize) -> u8 {
    (slot as usize)
        .wrapping_mul(31)
        .wrapping_add(i)
        .wrapping_add(7) as u8
}

fn write_pattern(r: &Region) {
    let s = r.slots();
    for slot in 0..s.slot_count() {
        let data: Vec<u8> = (0..s.slot_bytes()).map(|i| pattern(slot, i)).collect();
        s.write(slot, 0, &data).unwrap();
    }
}

fn check_pattern(r: &Region) {
    let s = r.slots();
    let mut buf = vec![0u8; s.slot_bytes()];
    for slot in 0..s.slot_count() {
        s.read(slot, 0, &mut buf).unwrap();
        for (i, b) in buf.iter().enumerate() {
            assert_eq!(*b, pattern(slot, i), "slot {slot} byte {i}");
        }
    }
}

// ---------------------------------------------------------------- children

struct Peer {
    child: Child,
    out: BufReader<ChildStdout>,
    inp: Option<ChildStdin>,
}

impl Peer {
    fn spawn(role: &str, name: &str, slots: u32, bytes: usize) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_VAR, format!("{role} {name} {slots} {bytes}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("re-executing the test binary");
        let out = BufReader::new(child.stdout.take().unwrap());
        let inp = child.stdin.take();
        Peer { child, out, inp }
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.out.read_line(&mut s).unwrap();
        s.trim_end().to_string()
    }

    fn send(&mut self, s: &str) {
        let w = self.inp.as_mut().unwrap();
        writeln!(w, "{s}").unwrap();
        w.flush().unwrap();
    }

    fn finish(mut self) -> i32 {
        drop(self.inp.take());
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

fn child_main(spec: &str) -> i32 {
    let parts: Vec<&str> = spec.split(' ').collect();
    let (role, name) = (parts[0], parts[1]);
    let slots: u32 = parts[2].parse().unwrap();
    let bytes: usize = parts[3].parse().unwrap();
    let o = opts(name, slots, bytes);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let say = |s: &str| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{s}").unwrap();
        out.flush().unwrap();
    };
    match role {
        // Joins, checks the role, writes the pattern, reports.
        "join-write" => {
            let r = Region::create_or_join(&o).unwrap();
            assert_eq!(r.role(), Role::Joiner);
            write_pattern(&r);
            say("written");
            0
        }
        // Creates, writes the pattern, and keeps the region until stdin closes.
        "create-hold" => {
            let mut o = o;
            o.open = OpenMode::Create;
            let r = Region::create_or_join(&o).unwrap();
            write_pattern(&r);
            say("ready");
            for _ in lines.by_ref() {}
            r.close().unwrap();
            0
        }
        // Creates or joins with a barrier that meets the parent over the pipes.
        "barrier" => {
            let result = Region::create_or_join_with_barrier(&o, |setup| {
                say(&format!(
                    "arrived {}",
                    match setup {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e.to_string(),
                    }
                ));
                match lines.next() {
                    Some(Ok(l)) if l == "go" => Ok(()),
                    other => Err(Error::PeerFailed(format!("barrier broken: {other:?}"))),
                }
            });
            match result {
                Ok(r) => {
                    write_pattern(&r);
                    say(&format!("written {:?}", r.role()));
                    for _ in lines.by_ref() {}
                    0
                }
                Err(e) => {
                    say(&format!("error {e}"));
                    3
                }
            }
        }
        // Starts creating by hand, then waits (to be killed mid-set-up).
        "start-creating" => {
            let _f = start_creating_by_hand(&shm().join(name));
            say("ready");
            for _ in lines.by_ref() {}
            0
        }
        other => panic!("unknown child role {other}"),
    }
}

// ------------------------------------------------------------------- tests

fn creator_and_joiner_share_bytes() {
    let name = unique("share");
    let _c = Cleanup(name.clone());
    let r = Region::create_or_join(&opts(&name, 8, 2 * PAGE)).unwrap();
    assert_eq!(r.role(), Role::Creator);
    let mut peer = Peer::spawn("join-write", &name, 8, 2 * PAGE);
    assert_eq!(peer.line(), "written");
    assert_eq!(peer.finish(), 0);
    check_pattern(&r);
    let path = r.paths()[0].clone();
    assert!(path.exists());
    let report = r.close().unwrap();
    assert!(report.removed_names && !report.kept_mapping && !report.views_alive);
    assert!(leftovers(&name).is_empty(), "{:?}", leftovers(&name));
}

fn joiner_fails_fast_when_the_creator_fails() {
    // A creator in set-up holds the exclusively created, still empty file;
    // it fails and removes the file, as Region's creator path does.  The
    // joiner, waiting for it, fails with PeerFailed: it does not wait out
    // its join timeout (a minute; that would end in Timeout).
    let name = unique("creatorfail");
    let _c = Cleanup(name.clone());
    let path = shm().join(&name);
    let mut o = opts(&name, 4, PAGE);
    o.join_timeout = GENEROUS;
    // A joiner that takes its lock just as the file goes may find it gone
    // before it starts waiting: it then creates the region itself, which is
    // right too.  That needs the removal to fall between two system calls
    // of the joiner; try again, a few times.
    for attempt in 1.. {
        let creator = start_creating_by_hand(&path);
        let o = o.clone();
        let joiner = std::thread::spawn(move || {
            let r = Region::create_or_join(&o);
            (r.map(|r| r.close().map(|_| ())), Instant::now())
        });
        wait_for_flocks(&path, 2); // the creator's and the waiting joiner's
        std::fs::remove_file(&path).unwrap();
        let failed_at = Instant::now();
        drop(creator);
        let (result, done) = joiner.join().unwrap();
        let took = done.duration_since(failed_at);
        match result {
            Ok(closed) if attempt < 5 => {
                closed.unwrap();
                eprintln!("  the joiner found the file gone and created the region; again");
                continue;
            }
            Ok(_) => panic!("the joiner never waited for the creator in {attempt} attempts"),
            Err(e) => {
                assert!(matches!(e, Error::PeerFailed(_)), "{e}");
                assert!(
                    e.to_string().contains("failed during set-up and removed"),
                    "{e}"
                );
                eprintln!("  joiner failed {took:?} after its creator removed the file");
                break;
            }
        }
    }
    assert!(leftovers(&name).is_empty());
}

fn joiner_fails_fast_when_the_creator_is_killed_during_set_up() {
    // The joiner waits for a creator that is killed in set-up: it fails
    // with PeerFailed, not after its join timeout (a minute: Timeout).
    let name = unique("creatorkilled");
    let _c = Cleanup(name.clone());
    let mut creator = Peer::spawn("start-creating", &name, 4, PAGE);
    assert_eq!(creator.line(), "ready");
    let mut o = opts(&name, 4, PAGE);
    o.join_timeout = GENEROUS;
    let joiner = std::thread::spawn(move || {
        let r = Region::create_or_join(&o);
        (r.map(|r| r.role()), Instant::now())
    });
    // The joiner holds its shared lock: it found the live creator's file
    // and waits for it (once the creator is gone the file would be stale).
    wait_for_flocks(&shm().join(&name), 1);
    creator.child.kill().unwrap(); // SIGKILL: no clean-up
    let killed_at = Instant::now();
    creator.child.wait().unwrap();
    let (result, done) = joiner.join().unwrap();
    let took = done.duration_since(killed_at);
    let e = result.unwrap_err();
    assert!(matches!(e, Error::PeerFailed(_)), "{e}");
    assert!(e.to_string().contains("died during set-up"), "{e}");
    eprintln!("  joiner failed {took:?} after its creator was killed");
    // The dead creator's empty file is stale now: the next creator replaces it.
    assert!(shm().join(&name).exists());
    let r = Region::create_or_join(&opts(&name, 4, PAGE)).unwrap();
    assert_eq!(r.role(), Role::Creator);
    r.close().unwrap();
    assert!(leftovers(&name).is_empty());
}

fn a_failing_creator_leaves_nothing_on_disk() {
    // Not enough room: the creator removes the file it created.
    let name = unique("nospace");
    let _c = Cleanup(name.clone());
    let e = Region::create_or_join(&opts(&name, 1 << 20, 1 << 20)).unwrap_err();
    assert!(matches!(e, Error::NoSpace(_)), "{e}");
    let m = e.to_string();
    assert!(m.contains("1024.00 GiB") && m.contains("/dev/shm"), "{m}");
    assert!(leftovers(&name).is_empty());
}

fn join_times_out() {
    let name = unique("never");
    let _c = Cleanup(name.clone());
    let mut o = opts(&name, 4, PAGE);
    o.open = OpenMode::Join;
    o.join_timeout = Duration::from_millis(200);
    let t = Instant::now();
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert!(e.to_string().contains("never appeared"), "{e}");
    // It waited its timeout, and then gave up: the upper bound is that
    // promise (not never), with room for a loaded machine.
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < GENEROUS,
        "{waited:?}"
    );
    assert!(leftovers(&name).is_empty());

    // A creator that never sizes the file (it holds it, so it is not stale).
    let path = shm().join(&name);
    let _creator = start_creating_by_hand(&path);
    o.open = OpenMode::CreateOrJoin;
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    assert!(e.to_string().contains("for its creator to size"), "{e}");
    assert!(path.exists(), "a joiner never removes a live region's file");
}

fn segments_are_one_contiguous_mapping() {
    // Two segments of (just over) 1 GiB; rows of 3 pages, so one row
    // straddles the boundary.  Pre-faulting is off: only touched pages use memory.
    let name = unique("seg");
    let _c = Cleanup(name.clone());
    let stride = 3 * PAGE;
    let slots = ((2usize << 30).div_ceil(stride)) as u32;
    let mut o = opts(&name, slots, stride);
    o.segments = 2;
    o.prefault = Prefault::Off;
    let r = Region::create_or_join(&o).unwrap();
    assert_eq!(r.prefault_method(), PrefaultMethod::None);
    assert_eq!(r.paths().len(), 2);
    // The first file holds the layout header (one page), then its slots.
    let header = r.header_bytes();
    assert_eq!(header, PAGE);
    let seg0 = std::fs::metadata(&r.paths()[0]).unwrap().len() as usize - header;
    let seg1 = std::fs::metadata(&r.paths()[1]).unwrap().len() as usize;
    assert_eq!(seg0 + seg1, r.len());
    assert!(seg0 >= 1 << 30 && seg1 >= 1 << 30);
    let row = (seg0 / stride) as u32; // starts in segment 0, ends in segment 1
    assert!((row as usize) * stride < seg0 && (row as usize + 1) * stride > seg0);
    let data: Vec<u8> = (0..stride).map(|i| pattern(row, i)).collect();
    r.slots().write(row, 0, &data).unwrap();
    // The bytes landed in the two files, either side of the boundary.
    use std::os::unix::fs::FileExt;
    let in0 = seg0 - row as usize * stride;
    let mut a = vec![0u8; in0];
    std::fs::File::open(&r.paths()[0])
        .unwrap()
        .read_exact_at(&mut a, (header + row as usize * stride) as u64)
        .unwrap();
    let mut b = vec![0u8; stride - in0];
    std::fs::File::open(&r.paths()[1])
        .unwrap()
        .read_exact_at(&mut b, 0)
        .unwrap();
    assert_eq!(&data[..in0], &a[..]);
    assert_eq!(&data[in0..], &b[..]);
    // A joiner sees the same bytes through its own contiguous mapping.
    let j = Region::create_or_join(&o).unwrap();
    assert_eq!(j.role(), Role::Joiner);
    let mut back = vec![0u8; stride];
    j.slots().read(row, 0, &mut back).unwrap();
    assert_eq!(back, data);
    drop(j);
    r.close().unwrap();
    assert!(leftovers(&name).is_empty());

    // Segments under 1 GiB are refused, naming the sizes.
    let mut o = opts(&name, 1024, 1 << 20); // 1 GiB in all
    o.segments = 2;
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(e.to_string().contains("at least 1073741824 bytes"), "{e}");
    assert!(leftovers(&name).is_empty());
}

fn layouts_hand_out_strided_views() {
    let name = unique("layout");
    let _c = Cleanup(name.clone());
    let mut o = opts(&name, 16, 4 * PAGE);
    o.worker_bytes = PAGE; // four workers per row
    let r = Region::create_or_join(&o).unwrap();
    assert_eq!(r.worker_count(), 4);
    let v = r.worker_view(2, 100, 200).unwrap();
    assert_eq!(
        (v.offset, v.stride, v.length, v.rows),
        (2 * PAGE + 100, 4 * PAGE, 200, 16)
    );
    assert!(r.worker_view(4, 0, 1).is_err(), "worker out of range");
    assert!(
        r.worker_view(1, PAGE - 10, 11).is_err(),
        "past the worker area"
    );
    assert!(r.worker_view(1, 0, 0).is_err(), "empty view");
    let c = r.canonical_view(PAGE, 3 * PAGE).unwrap();
    assert_eq!(
        (c.offset, c.stride, c.length, c.rows),
        (PAGE, 4 * PAGE, 3 * PAGE, 16)
    );
    assert!(r.canonical_view(PAGE, 3 * PAGE + 1).is_err());
    // Views address the region's bytes: worker 2's area of row 5.
    let s = r.slots();
    s.write(5, 2 * PAGE + 100, b"worker2").unwrap();
    let p = unsafe { r.base().as_ptr().add(v.offset + 5 * v.stride) };
    assert_eq!(unsafe { std::slice::from_raw_parts(p, 7) }, b"worker2");
    assert_eq!(
        r.slot_ptr(5).unwrap().as_ptr() as usize,
        r.base().as_ptr() as usize + 5 * r.stride()
    );
    // Without worker_bytes there is no per-worker layout.
    let name2 = unique("layout");
    let _c2 = Cleanup(name2.clone());
    let r2 = Region::create_or_join(&opts(&name2, 2, PAGE)).unwrap();
    let e = r2.worker_view(0, 0, 1).unwrap_err();
    assert!(e.to_string().contains("no per-worker layout"), "{e}");
}

fn unlink_after_join_with_a_barrier() {
    let name = unique("barrier");
    let _c = Cleanup(name.clone());
    let (slots, bytes) = (4, PAGE);
    let mut ok_peer = Peer::spawn("barrier", &name, slots, bytes);
    // A peer whose set-up fails (an unaligned slot size) still arrives.
    let mut bad_peer = Peer::spawn("barrier", &name, slots, bytes + 1);
    let o = opts(&name, slots, bytes);
    let mut seen = Vec::new();
    let r = Region::create_or_join_with_barrier(&o, |setup| {
        setup.unwrap();
        seen.push(ok_peer.line());
        seen.push(bad_peer.line());
        // Everyone arrived: release them.
        ok_peer.send("go");
        bad_peer.send("go");
        Ok(())
    });
    // The parent may have been the creator or a joiner (the peers race it).
    let r = r.unwrap();
    assert!(seen.contains(&"arrived ok".to_string()), "{seen:?}");
    assert!(
        seen.iter()
            .any(|l| l.starts_with("arrived invalid argument") && l.contains("page size")),
        "the failing peer arrives with its own error: {seen:?}"
    );
    let bad_says = bad_peer.line();
    assert!(bad_says.starts_with("error invalid argument"), "{bad_says}");
    assert_eq!(bad_peer.finish(), 3);
    let ok_says = ok_peer.line();
    assert!(ok_says.starts_with("written"), "{ok_says}");
    // The name is gone while both processes still share the memory.
    assert!(!r.paths()[0].exists());
    check_pattern(&r);
    assert_eq!(ok_peer.finish(), 0);
    let report = r.close().unwrap();
    assert!(!report.removed_names);
    assert!(leftovers(&name).is_empty());
}

fn explicit_unlink_keeps_the_memory_shared() {
    let name = unique("unlink");
    let _c = Cleanup(name.clone());
    let o = opts(&name, 4, PAGE);
    let a = Region::create_or_join(&o).unwrap();
    let b = Region::create_or_join(&o).unwrap();
    assert_eq!((a.role(), b.role()), (Role::Creator, Role::Joiner));
    assert!(b.unlink().unwrap());
    assert!(!a.unlink().unwrap(), "already gone");
    assert!(leftovers(&name).is_empty());
    a.slots().write(3, 0, b"still shared").unwrap();
    let mut out = [0u8; 12];
    b.slots().read(3, 0, &mut out).unwrap();
    assert_eq!(&out, b"still shared");
    // A new region may now use the name; the old ones never remove it.
    let c = Region::create_or_join(&o).unwrap();
    assert_eq!(c.role(), Role::Creator);
    drop(a);
    drop(b);
    assert!(c.paths()[0].exists());
    drop(c);
    assert!(leftovers(&name).is_empty());
}

fn stale_file_is_replaced_and_live_one_joined() {
    let (slots, bytes) = (4, PAGE);
    // A creator killed with SIGKILL leaves its file behind, unheld.
    let stale = unique("stale");
    let _c = Cleanup(stale.clone());
    let mut dead = Peer::spawn("create-hold", &stale, slots, bytes);
    assert_eq!(dead.line(), "ready");
    dead.child.kill().unwrap(); // SIGKILL
    dead.child.wait().unwrap();
    assert!(shm().join(&stale).exists());
    // Configured not to replace: a clear error, the file untouched.
    let mut o = opts(&stale, slots, bytes);
    o.replace_stale = false;
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    assert!(e.to_string().contains("stale region file"), "{e}");
    // A joiner does not take a stale file for a live region.
    o.open = OpenMode::Join;
    o.join_timeout = Duration::from_millis(100);
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(e.to_string().contains("stale"), "{e}");
    // By default the creator replaces it: fresh, zeroed memory.
    let r = Region::create_or_join(&opts(&stale, slots, bytes)).unwrap();
    assert_eq!(r.role(), Role::Creator);
    let mut b = [1u8; 16];
    r.slots().read(1, 0, &mut b).unwrap();
    assert_eq!(b, [0u8; 16]);
    r.close().unwrap();
    assert!(leftovers(&stale).is_empty());

    // A live region is joined, never replaced.
    let live = unique("live");
    let _c2 = Cleanup(live.clone());
    let mut holder = Peer::spawn("create-hold", &live, slots, bytes);
    assert_eq!(holder.line(), "ready");
    let j = Region::create_or_join(&opts(&live, slots, bytes)).unwrap();
    assert_eq!(j.role(), Role::Joiner);
    check_pattern(&j);
    let mut o = opts(&live, slots, bytes);
    o.open = OpenMode::Create;
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(
        matches!(e, Error::AlreadyExists(_)) && e.to_string().contains("is live"),
        "{e}"
    );
    drop(j);
    assert_eq!(holder.finish(), 0);
    assert!(leftovers(&live).is_empty());
}

fn bad_inputs_get_their_own_errors() {
    let name = unique("bad");
    let _c = Cleanup(name.clone());
    let msg = |o: &RegionOptions| Region::create_or_join(o).unwrap_err().to_string();
    let m = msg(&opts(&name, 0, PAGE));
    assert!(
        m.contains("at least one slot") && m.contains("0 slots"),
        "{m}"
    );
    let m = msg(&opts(&name, 4, 0));
    assert!(
        m.contains("at least one slot") && m.contains("of 0 bytes"),
        "{m}"
    );
    let m = msg(&opts(&name, 4, PAGE + 1));
    assert!(m.contains("not a multiple of the page size"), "{m}");
    let m = msg(&opts("a/b", 4, PAGE));
    assert!(m.contains("contains '/'"), "{m}");
    let mut o = opts(&name, 4, PAGE);
    o.directory = PathBuf::from(format!("/nonexistent-{name}"));
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(
        matches!(e, Error::NotFound(_)) && e.to_string().contains("does not exist"),
        "{e}"
    );
    // An existing name with another layout: both are named.
    let r = Region::create_or_join(&opts(&name, 4, PAGE)).unwrap();
    let m = msg(&opts(&name, 8, PAGE));
    assert!(
        m.contains("created with 4 slots of 4096 bytes")
            && m.contains("asks for 8 slots of 4096 bytes"),
        "{m}"
    );
    // A slot out of range.
    let e = r.slot_ptr(4).unwrap_err().to_string();
    assert!(e.contains("slot 4 out of range"), "{e}");
    r.close().unwrap();
    // Joining a region that never appears: see join_times_out.
    assert!(leftovers(&name).is_empty(), "{:?}", leftovers(&name));
}

fn lent_slots_keep_the_mapping_at_cleanup() {
    let name = unique("lent");
    let _c = Cleanup(name.clone());
    let r = Region::create_or_join(&opts(&name, 2, PAGE)).unwrap();
    r.slots().write(1, 0, b"device").unwrap();
    let p = r.slot_ptr(1).unwrap();
    r.set_lent_slots(2);
    let report = r.close().unwrap();
    assert!(report.kept_mapping && report.removed_names);
    assert!(leftovers(&name).is_empty(), "the name is removed anyway");
    // The address range is still mapped: a device could still write here.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(p.as_ptr(), 6) },
        b"device"
    );

    let r = Region::create_or_join(&opts(&name, 2, PAGE)).unwrap();
    let view = r.slots();
    let report = r.close().unwrap();
    assert!(!report.kept_mapping && report.views_alive);
    view.write(0, 0, b"still mapped while the view lives")
        .unwrap();
    drop(view);
}

/// Pages of `len` bytes at `base` that are resident.
fn resident_pages(base: *const u8, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(PAGE)];
    let r = unsafe { libc::mincore(base as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(r, 0);
    v.iter().filter(|b| *b & 1 == 1).count()
}

fn prefault_modes_shares_and_threads() {
    let name = unique("prefault");
    let _c = Cleanup(name.clone());
    // Off, then a share: only that share becomes resident.
    let mut o = opts(&name, 64, 4 * PAGE);
    o.prefault = Prefault::Off;
    let r = Region::create_or_join(&o).unwrap();
    assert_eq!(resident_pages(r.base().as_ptr(), r.len()), 0);
    let mut j = o.clone();
    j.prefault = Prefault::Auto;
    j.prefault_share = Some(Share { index: 1, count: 4 });
    j.prefault_threads = 2;
    let jr = Region::create_or_join(&j).unwrap();
    assert_ne!(jr.prefault_method(), PrefaultMethod::None);
    let quarter = r.len() / 4;
    let base = r.base().as_ptr();
    assert_eq!(resident_pages(base, quarter), 0);
    assert_eq!(
        resident_pages(unsafe { base.add(quarter) }, quarter),
        quarter / PAGE
    );
    assert_eq!(
        resident_pages(unsafe { base.add(2 * quarter) }, 2 * quarter),
        0
    );
    drop(jr);
    // Per-worker share: worker 3's area of every row (in a region of that
    // layout: every process of a region passes the same worker areas).
    let wname = unique("prefault-workers");
    let _cw = Cleanup(wname.clone());
    let mut w = opts(&wname, 64, 4 * PAGE);
    w.worker_bytes = PAGE;
    w.prefault = Prefault::Off;
    let wc = Region::create_or_join(&w).unwrap();
    let wbase = wc.base().as_ptr();
    w.prefault = Prefault::Touch;
    w.prefault_share = Some(Share { index: 3, count: 4 });
    let wr = Region::create_or_join(&w).unwrap();
    assert_eq!(wr.prefault_method(), PrefaultMethod::Touch);
    for row in 0..64 {
        let p = unsafe { wbase.add(row * 4 * PAGE) };
        assert_eq!(
            resident_pages(unsafe { p.add(3 * PAGE) }, PAGE),
            1,
            "row {row}"
        );
    }
    drop(wr);
    wc.close().unwrap();
    // Touching keeps bytes a peer already wrote, on many threads.
    write_pattern(&r);
    let mut t = o.clone();
    t.prefault = Prefault::Touch;
    t.prefault_threads = 3;
    let tr = Region::create_or_join(&t).unwrap();
    check_pattern(&tr);
    assert_eq!(resident_pages(base, r.len()), r.len() / PAGE);
    drop(tr);
    let mut a = o;
    a.prefault = Prefault::Auto;
    let ar = Region::create_or_join(&a).unwrap();
    check_pattern(&ar);
    drop(ar);
    r.close().unwrap();
    assert!(leftovers(&name).is_empty());
}

fn file_mode_is_exact() {
    use std::os::unix::fs::PermissionsExt;
    let name = unique("mode");
    let _c = Cleanup(name.clone());
    let r = Region::create_or_join(&opts(&name, 1, PAGE)).unwrap();
    let mode = std::fs::metadata(&r.paths()[0])
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    drop(r);
    let mut o = opts(&name, 1, PAGE);
    o.mode = 0o660;
    let r = Region::create_or_join(&o).unwrap();
    let mode = std::fs::metadata(&r.paths()[0])
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o660, "the umask does not apply");
}

fn many_racing_processes_agree_on_one_creator() {
    let name = unique("race");
    let _c = Cleanup(name.clone());
    let peers: Vec<Peer> = (0..4)
        .map(|_| Peer::spawn("barrier", &name, 4, PAGE))
        .collect();
    let mut peers = peers;
    let arrived: Vec<String> = peers.iter_mut().map(|p| p.line()).collect();
    assert!(arrived.iter().all(|l| l == "arrived ok"), "{arrived:?}");
    for p in peers.iter_mut() {
        p.send("go");
    }
    let roles: Vec<String> = peers.iter_mut().map(|p| p.line()).collect();
    let creators = roles.iter().filter(|l| l.contains("Creator")).count();
    assert_eq!(creators, 1, "{roles:?}");
    for p in peers {
        assert_eq!(p.finish(), 0);
    }
    assert!(leftovers(&name).is_empty());
}

fn a_joiner_with_another_layout_of_the_same_size_is_refused() {
    // 128 rows of 8 KiB and 256 rows of 4 KiB are the same 1 MiB: the file
    // size cannot tell them apart, the layout stored in it does.
    let name = unique("layout-mismatch");
    let _c = Cleanup(name.clone());
    let r = Region::create_or_join(&opts(&name, 128, 2 * PAGE)).unwrap();
    let e = Region::create_or_join(&opts(&name, 256, PAGE)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("128 slots of 8192 bytes") && m.contains("256 slots of 4096 bytes"),
        "{m}"
    );
    // The same rows split among workers differently.
    let mut w = opts(&name, 128, 2 * PAGE);
    w.worker_bytes = PAGE;
    let m = Region::create_or_join(&w).unwrap_err().to_string();
    assert!(
        m.contains("worker areas of 4096 bytes") && m.contains("no worker areas"),
        "{m}"
    );
    // The same layout joins.
    let j = Region::create_or_join(&opts(&name, 128, 2 * PAGE)).unwrap();
    assert_eq!(j.role(), Role::Joiner);
    drop(j);
    r.close().unwrap();
    assert!(leftovers(&name).is_empty());
}

fn old_format_files_are_replaced_when_stale_and_refused_when_live() {
    use std::os::fd::AsRawFd;
    // A file of the right size with no layout header (what earlier versions
    // wrote), held by no process: left by a crashed run, so replaced.
    let name = unique("old-format");
    let _c = Cleanup(name.clone());
    let path = shm().join(&name);
    let old = std::fs::File::create(&path).unwrap();
    old.set_len((4 * PAGE) as u64).unwrap();
    drop(old);
    let r = Region::create_or_join(&opts(&name, 4, PAGE)).unwrap();
    assert_eq!(r.role(), Role::Creator);
    r.close().unwrap();
    assert!(leftovers(&name).is_empty());
    // Held by a live process: never joined as if it were a region of this
    // format, and never replaced; refused at once, not after the timeout.
    let live = std::fs::File::create(&path).unwrap();
    live.set_len((4 * PAGE) as u64).unwrap();
    assert_eq!(unsafe { libc::flock(live.as_raw_fd(), libc::LOCK_SH) }, 0);
    // "At once": the refusal names the missing header; a wait for the
    // join timeout (two minutes) would have ended in `Timeout` instead.
    let mut o = opts(&name, 4, PAGE);
    o.join_timeout = 2 * GENEROUS;
    let e = Region::create_or_join(&o).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("no layout header"), "{e}");
    assert!(path.exists(), "a live file is left alone");
}

fn memory_is_reserved_at_creation_even_without_pre_faulting() {
    // Without a reservation, a second region passed the free-space check
    // (nothing of the first was faulted in yet), and whichever process
    // touched its pages last died of SIGBUS.
    let Some(fs) = SmallTmpfs::mount(8 << 20) else {
        return;
    };
    let mut a = opts(&unique("reserve-a"), 6, 1 << 20);
    a.directory = fs.path().to_path_buf();
    a.prefault = Prefault::Off;
    let ra = Region::create_or_join(&a).unwrap();
    use std::os::unix::fs::MetadataExt;
    let allocated: u64 = ra
        .paths()
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().blocks() * 512)
        .sum();
    assert!(allocated >= 6 << 20, "only {allocated} bytes reserved");
    let mut b = a.clone();
    b.name = unique("reserve-b");
    let e = Region::create_or_join(&b).unwrap_err();
    assert!(matches!(e, Error::NoSpace(_)), "{e}");
    assert!(
        std::fs::read_dir(fs.path()).unwrap().count() == 1,
        "b left nothing"
    );
    // The first region's memory is all there: every page can be written.
    write_pattern(&ra);
    check_pattern(&ra);
    ra.close().unwrap();
    // Freed again: a region of the whole size fits now.
    let mut c = a.clone();
    c.slot_count = 7;
    let rc = Region::create_or_join(&c).unwrap();
    write_pattern(&rc);
    rc.close().unwrap();
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        std::process::exit(child_main(&spec));
    }
    let tests: &[(&str, fn())] = &[
        (
            "creator_and_joiner_share_bytes",
            creator_and_joiner_share_bytes,
        ),
        (
            "joiner_fails_fast_when_the_creator_fails",
            joiner_fails_fast_when_the_creator_fails,
        ),
        (
            "joiner_fails_fast_when_the_creator_is_killed_during_set_up",
            joiner_fails_fast_when_the_creator_is_killed_during_set_up,
        ),
        (
            "a_failing_creator_leaves_nothing_on_disk",
            a_failing_creator_leaves_nothing_on_disk,
        ),
        ("join_times_out", join_times_out),
        (
            "segments_are_one_contiguous_mapping",
            segments_are_one_contiguous_mapping,
        ),
        (
            "layouts_hand_out_strided_views",
            layouts_hand_out_strided_views,
        ),
        (
            "unlink_after_join_with_a_barrier",
            unlink_after_join_with_a_barrier,
        ),
        (
            "explicit_unlink_keeps_the_memory_shared",
            explicit_unlink_keeps_the_memory_shared,
        ),
        (
            "stale_file_is_replaced_and_live_one_joined",
            stale_file_is_replaced_and_live_one_joined,
        ),
        (
            "bad_inputs_get_their_own_errors",
            bad_inputs_get_their_own_errors,
        ),
        (
            "lent_slots_keep_the_mapping_at_cleanup",
            lent_slots_keep_the_mapping_at_cleanup,
        ),
        (
            "prefault_modes_shares_and_threads",
            prefault_modes_shares_and_threads,
        ),
        ("file_mode_is_exact", file_mode_is_exact),
        (
            "many_racing_processes_agree_on_one_creator",
            many_racing_processes_agree_on_one_creator,
        ),
        (
            "a_joiner_with_another_layout_of_the_same_size_is_refused",
            a_joiner_with_another_layout_of_the_same_size_is_refused,
        ),
        (
            "old_format_files_are_replaced_when_stale_and_refused_when_live",
            old_format_files_are_replaced_when_stale_and_refused_when_live,
        ),
        (
            "memory_is_reserved_at_creation_even_without_pre_faulting",
            memory_is_reserved_at_creation_even_without_pre_faulting,
        ),
    ];
    own_main::run_tests("region", tests);
}
