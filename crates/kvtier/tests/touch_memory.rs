//! A touch of keys read in place copies them only for the tiers that act
//! on touches, makes room for the copies before anything changes, and
//! memory that cannot be had for them is `OutOfMemory` that no tier hears
//! of.  This binary's allocator refuses, on the thread that asks it to,
//! any one allocation past a bound.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use parking_lot::Mutex;

use kvtier_core::primary::{PrimaryConfig, PrimaryTier};
use kvtier_core::request::Request;
use kvtier_core::tiering::{
    JobRef, JobResult, Manager, ManagerOptions, RequestParams, SecondaryTier, TierLookup,
};
use kvtier_core::{Error, Key, KeyRef};

/// The system allocator, refusing on this thread any one allocation
/// larger than [`BOUND`] while it is set.
struct Bounded;

thread_local! {
    static BOUND: Cell<usize> = const { Cell::new(usize::MAX) };
}

unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > BOUND.with(Cell::get) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

/// Runs `f` with allocations on this thread bounded to `bytes` each.
fn bounded<R>(bytes: usize, f: impl FnOnce() -> R) -> R {
    BOUND.with(|b| b.set(bytes));
    let r = f();
    BOUND.with(|b| b.set(usize::MAX));
    r
}

/// The number of keys of each touch a tier heard.
type Heard = Arc<Mutex<Vec<usize>>>;

/// A tier that keeps the touches it hears.
struct Touched {
    wants: bool,
    heard: Heard,
}

impl SecondaryTier for Touched {
    fn name(&self) -> &str {
        "touched"
    }
    fn lookup(&mut self, _key: &Key, _request: &Request) -> TierLookup {
        TierLookup::Miss
    }
    fn submit_store(&mut self, _job: JobRef) {}
    fn submit_load(&mut self, _job: JobRef) {}
    fn poll_finished(&mut self, _max: usize, _out: &mut Vec<JobResult>) {}
    fn touch(&mut self, keys: &[Key], _request: &Request) {
        self.heard.lock().push(keys.len());
    }
    fn wants_touches(&self) -> bool {
        self.wants
    }
    fn has_pending_work(&self) -> bool {
        false
    }
    fn drain(&mut self) -> kvtier_core::Result<()> {
        Ok(())
    }
    fn shutdown(&mut self) -> kvtier_core::Result<()> {
        Ok(())
    }
}

/// Keys whose copies (65 bytes each) need more than [`BOUND_BYTES`] in
/// one allocation, while their views (16 bytes each) need less.
const MANY: usize = 20_000;
const BOUND_BYTES: usize = 1 << 20;

/// A manager with one [`Touched`] tier, a request started, and `MANY`
/// distinct keys' bytes.
fn setup(wants: bool) -> (Manager, Heard, Vec<[u8; 8]>) {
    let primary = PrimaryTier::new(PrimaryConfig {
        capacity: 8,
        ..Default::default()
    })
    .unwrap();
    let m = Manager::new(primary, ManagerOptions::default());
    let heard = Arc::new(Mutex::new(Vec::new()));
    m.add_tier(Box::new(Touched {
        wants,
        heard: heard.clone(),
    }))
    .unwrap();
    let bytes = (0..MANY as u64).map(u64::to_le_bytes).collect();
    (m, heard, bytes)
}

#[test]
fn keys_read_in_place_are_not_copied_when_no_tier_wants_touches() {
    let (m, heard, bytes) = setup(false);
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let refs: Vec<KeyRef<'_>> = bytes.iter().map(|b| KeyRef::new(b).unwrap()).collect();
    assert!(MANY * std::mem::size_of::<Key>() > BOUND_BYTES);
    bounded(BOUND_BYTES, || m.touch(r, &refs)).unwrap();
    assert!(heard.lock().is_empty());
}

#[test]
fn no_room_for_the_copies_is_out_of_memory_and_no_tier_hears_of_the_touch() {
    let (m, heard, bytes) = setup(true);
    let r = m.request_begin("r", RequestParams::default()).unwrap().id;
    let refs: Vec<KeyRef<'_>> = bytes.iter().map(|b| KeyRef::new(b).unwrap()).collect();
    let e = bounded(BOUND_BYTES, || m.touch(r, &refs)).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory(_)), "{e}");
    assert!(heard.lock().is_empty());
    // With the memory there, the same touch reaches the tier.
    m.touch(r, &refs).unwrap();
    assert_eq!(*heard.lock(), [MANY]);
}
