//! The types every object of the C API answers with: request handles,
//! lookup answers, store plans and completions, cache events, owned keys.
//! The manager and the primary tier share them, so the same thing has the
//! same shape wherever it appears.

use super::boundary::Failure;
use super::key::kvtier_key;
use kvtier_core::error::Error;
use kvtier_core::request::Locality;

/// A started request, as `kvtier_manager_request_begin` and
/// `kvtier_primary_request_begin` hand it out; every later call of that
/// request takes it instead of the request's name.  Never 0, never reused
/// by the same object: a finished or unknown handle is
/// `KVTIER_STATUS_UNKNOWN_REQUEST`, never another request's state.
pub type kvtier_request_handle = u64;

/// How one key looked up: a `KVTIER_LOOKUP_*` value.  Secondary tiers
/// answer their `lookup` callback with MISS, HIT or RETRY.
pub type kvtier_lookup_result = i32;
/// Not readable, and nothing is on its way (see `kvtier_miss_reason`).
pub const KVTIER_LOOKUP_MISS: kvtier_lookup_result = 0;
/// Ready in the primary tier (in a secondary tier: the tier has it).
pub const KVTIER_LOOKUP_HIT: kvtier_lookup_result = 1;
/// Coming into the primary tier (write pending): ask again later.
pub const KVTIER_LOOKUP_HIT_PENDING: kvtier_lookup_result = 2;
/// Ask again later: a promotion started, or a tier could not answer yet.
pub const KVTIER_LOOKUP_RETRY: kvtier_lookup_result = 3;

/// Why a lookup answered MISS: a `KVTIER_MISS_*` value.
pub type kvtier_miss_reason = i32;
/// The answer was not MISS.
pub const KVTIER_MISS_NONE: kvtier_miss_reason = 0;
/// No tier has the key.
pub const KVTIER_MISS_ABSENT: kvtier_miss_reason = 1;
/// A secondary tier has the key, but the primary tier had no free slot to
/// bring it back into: asking again a step later may find it (but not
/// while the request waits: its prefix stays ended there).
pub const KVTIER_MISS_NO_ROOM: kvtier_miss_reason = 2;
/// The request waited for its blocks longer than the manager's wait bound
/// (`progress_wait_steps`, `progress_wait_ms`): load what is ready and
/// compute the rest.  Since 0.3.
pub const KVTIER_MISS_TIMED_OUT: kvtier_miss_reason = 3;

/// The answer of a batched lookup: how many leading keys are ready now
/// (`hits`), how many more are on their way (`pending`), and where the
/// prefix ends (`end`).  Keys `hits..end` are ready or on their way;
/// `pending` is 0 exactly when `hits == end`, when there is nothing to
/// wait for.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct kvtier_lookup_answer {
    /// Number of leading keys that are HIT: ready in the primary tier.
    pub hits: usize,
    /// The answer of key `hits` (HIT when every key is a hit), as a lookup
    /// of that one key would give it; MISS where the prefix ends at it
    /// (`end == hits`).
    pub stop: kvtier_lookup_result,
    /// Why the prefix ends at `end` (`KVTIER_MISS_NONE` when it ends at the
    /// last key); when `stop` is MISS, why key `hits` missed.
    pub reason: kvtier_miss_reason,
    /// Keys after the hits, before `end`, not ready yet but on their way
    /// (being written into the primary tier, promotions started now or
    /// earlier, or a tier asked to be asked again).  Since 0.3.
    pub pending: usize,
    /// Where the prefix ends: the first key no tier has (or that found no
    /// room, or timed out: see `reason`), else the number of keys.
    /// Since 0.3.
    pub end: usize,
}

/// An owned copy of one key: `len` bytes of `bytes`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_key_buf {
    /// Number of bytes, 1..=64.
    pub len: usize,
    /// The key's bytes.
    pub bytes: [u8; 64],
}

/// What a `prepare_store` call planned.  The caller provides the three
/// arrays, each with room for as many entries as keys were passed (a
/// store plans and evicts at most one slot per key); the call fills the
/// counts and `refused`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_store_plan {
    /// Out: positions, in the keys passed, of the keys to write now.
    pub store_indices: *mut usize,
    /// Out: the slot of each key to write, parallel to `store_indices`.
    pub slots: *mut u32,
    /// Out: the keys evicted to make room (the engine drops its copies).
    pub evicted: *mut kvtier_key_buf,
    /// Written: entries used in `store_indices` and `slots`.
    pub store_count: usize,
    /// Written: entries used in `evicted`.
    pub evicted_count: usize,
    /// Written: true when the store was refused as a whole (no room).
    pub refused: bool,
}

/// What a `complete_store` call did with the keys it was given.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct kvtier_store_completion {
    /// Keys made readable.
    pub ready: usize,
    /// Keys whose failed write freed their slot.
    pub dropped: usize,
    /// Keys not write pending at all (absent or evicted since): ignored.
    pub ignored: usize,
    /// Keys write pending for another request or a promotion: ignored.
    pub foreign: usize,
    /// Keys already readable: ignored.
    pub already_ready: usize,
}

/// What happened to the keys of a cache event: a `KVTIER_EVENT_*` value.
pub type kvtier_event_kind = i32;
/// The keys became readable in the tier.
pub const KVTIER_EVENT_STORED: kvtier_event_kind = 0;
/// The keys left the tier.
pub const KVTIER_EVENT_REMOVED: kvtier_event_kind = 1;
/// The tier was emptied (no keys).
pub const KVTIER_EVENT_CLEARED: kvtier_event_kind = 2;

/// Where a tier keeps blocks: a `KVTIER_MEDIUM_*` value.
pub type kvtier_medium = i32;
/// Any medium (in a tier filter), or none declared (in an event).
pub const KVTIER_MEDIUM_ANY: kvtier_medium = 0;
/// Memory (a CPU tier, a peer's RAM).
pub const KVTIER_MEDIUM_CPU: kvtier_medium = 1;
/// Storage (files, object stores, key-value servers).
pub const KVTIER_MEDIUM_STORAGE: kvtier_medium = 2;

/// How far a tier is: a `KVTIER_LOCALITY_*` value.
pub type kvtier_locality = i32;
/// Any locality (in a tier filter), or none declared (in an event).
pub const KVTIER_LOCALITY_ANY: kvtier_locality = 0;
/// On this host.
pub const KVTIER_LOCALITY_LOCAL: kvtier_locality = 1;
/// On another host.
pub const KVTIER_LOCALITY_REMOTE: kvtier_locality = 2;

/// Consecutive cache events of one tier and kind: the one shape of the
/// event callback and of `take_events`.  `keys` belongs to the library:
/// valid during the callback, or until the next `take_events` call on the
/// same object.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kvtier_event {
    /// 0 for the primary tier, 1.. for secondary tiers in the order added.
    pub tier: u32,
    /// Stored, removed or cleared.
    pub kind: kvtier_event_kind,
    /// The tier's medium (`KVTIER_MEDIUM_ANY` if it declared none).
    pub medium: kvtier_medium,
    /// The tier's locality (`KVTIER_LOCALITY_ANY` if it declared none).
    pub locality: kvtier_locality,
    /// The keys (NULL when `len` is 0).
    pub keys: *const kvtier_key,
    /// Number of keys.
    pub len: usize,
}

/// The C value of a locality.
pub(crate) fn locality_code(locality: Locality) -> kvtier_locality {
    match locality {
        Locality::Local => KVTIER_LOCALITY_LOCAL,
        Locality::Remote => KVTIER_LOCALITY_REMOTE,
    }
}

/// The locality of a C value (`what` names the field in errors).
pub(crate) fn locality_of(code: kvtier_locality, what: &str) -> Result<Locality, Failure> {
    match code {
        KVTIER_LOCALITY_LOCAL => Ok(Locality::Local),
        KVTIER_LOCALITY_REMOTE => Ok(Locality::Remote),
        v => Err(Error::InvalidArgument(format!(
            "{what} {v} is not KVTIER_LOCALITY_LOCAL or _REMOTE"
        ))
        .into()),
    }
}
