//! Pin sets and block drops: `kvtier_manager_pin_set`, `_unpin_set`,
//! `_pin_sets` and `_drop_blocks`.  A manager connected to kvtierd answers
//! each with `KVTIER_STATUS_UNSUPPORTED` (the server's configuration owns
//! its cache, as for resets).

use std::ffi::c_char;

use super::boundary::{Failure, enter, ffi_call, in_str, out_ref, out_slice};
use super::growth::{Grows, read_grown};
use super::key::{kvtier_key, with_keys};
use super::manager::kvtier_manager;
use kvtier_core::error::Error;

/// What `kvtier_manager_pin_set` did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvtier_pin_outcome {
    /// Distinct keys the set holds now.
    pub pinned: usize,
    /// Distinct keys named that were absent from the tier (or not readable
    /// yet): not held.
    pub absent: usize,
}

/// Longest pin-set name in bytes (a `kvtier_pin_set_info` name holds it
/// and its NUL).
pub const KVTIER_PIN_SET_NAME_MAX: usize = 256;

/// One pin set as `kvtier_manager_pin_sets` lists it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvtier_pin_set_info {
    /// The set's name, NUL-terminated (`KVTIER_PIN_SET_NAME_MAX` bytes and the NUL).
    pub name: [c_char; 257],
    /// The tier holding it (0 the primary tier).
    pub tier: usize,
    /// Distinct keys it holds.
    pub keys: u64,
    /// Their bytes (keys × the manager's `block_bytes`; 0 when unknown).
    pub bytes: u64,
}

/// Which blocks `kvtier_manager_drop_blocks` drops.  Under the growth rule
/// (`struct_size` first).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kvtier_drop_selector {
    /// `sizeof(kvtier_drop_selector)` as the caller was compiled.
    pub struct_size: usize,
    /// The keys' first bytes; may be NULL only if `key_prefix_len` is 0
    /// (every key).
    pub key_prefix: *const u8,
    /// Bytes of `key_prefix` (0 to 64).
    pub key_prefix_len: usize,
    /// NULL: every tier; else only tiers with this layout fingerprint (the
    /// primary tier's is the JSON option `layout_fingerprint`).
    pub fingerprint: *const c_char,
}

impl Grows for kvtier_drop_selector {
    const NAME: &'static str = "kvtier_drop_selector";
    const FIRST_LAYOUT_SIZE: usize = std::mem::size_of::<kvtier_drop_selector>();
}

/// What `kvtier_manager_drop_blocks` did, all selected tiers together.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct kvtier_drop_report {
    /// Blocks removed.
    pub dropped: u64,
    /// Matching blocks kept because busy (a load or store in flight, write
    /// pending, held by a pin set).
    pub kept: u64,
    /// Selected tiers that cannot drop blocks (C tiers, a Redis tier on a
    /// cluster): skipped.
    pub unsupported_tiers: u32,
}

/// Holds the `len` blocks of `keys` resident in tier `tier` (0 the primary
/// tier) as the pin set `name` (1 to 256 bytes of UTF-8), whatever the
/// tier's eviction wants, until `kvtier_manager_unpin_set`; writes how
/// many distinct keys it holds and how many were absent (not held) to
/// `*outcome_out`.  A set of an existing name is replaced at once.  Past
/// the bound (the JSON option `pinning.max_share` of the tier's capacity,
/// all sets together; an fs tier's capacity is its `capacity_bytes` over
/// one block file's bytes) `KVTIER_STATUS_NO_SPACE` and nothing changes.
/// The primary tier and fs tiers keep pin sets; another tier (Redis, C
/// tiers) or a manager connected to kvtierd answers
/// `KVTIER_STATUS_UNSUPPORTED`, nothing changed.  A load's unpin never releases a
/// set's hold.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `name` NUL-terminated; `keys` valid for `len`
/// reads; `outcome_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_pin_set(
    manager: *const kvtier_manager,
    name: *const c_char,
    tier: usize,
    keys: *const kvtier_key,
    len: usize,
    outcome_out: *mut kvtier_pin_outcome,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(name, "name") }?;
        let out = unsafe { out_ref(outcome_out, "outcome_out") }?;
        let m = m.local("kvtier_manager_pin_set")?;
        let o = unsafe { with_keys(keys, len, |views| Ok(m.pin_set(name, views, tier)?)) }?;
        *out = kvtier_pin_outcome {
            pinned: o.pinned,
            absent: o.absent,
        };
        Ok(())
    })
}

/// Releases pin set `name`: its blocks no other set holds are evictable
/// again; writes how many keys it held to `*keys_out`.  An unknown name is
/// `KVTIER_STATUS_NOT_FOUND`.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `name` NUL-terminated; `keys_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_unpin_set(
    manager: *const kvtier_manager,
    name: *const c_char,
    keys_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let name = unsafe { in_str(name, "name") }?;
        let out = unsafe { out_ref(keys_out, "keys_out") }?;
        *out = m.local("kvtier_manager_unpin_set")?.unpin_set(name)?;
        Ok(())
    })
}

/// Writes the pin sets, by name, to `sets_out` (room for `capacity`) and
/// their number to `*written_out`; fewer than that room is
/// `KVTIER_STATUS_BUFFER_TOO_SMALL` with the number needed in
/// `*written_out`.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `sets_out` valid for `capacity` writes (NULL
/// if 0); `written_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_pin_sets(
    manager: *const kvtier_manager,
    sets_out: *mut kvtier_pin_set_info,
    capacity: usize,
    written_out: *mut usize,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        let buf = unsafe { out_slice(sets_out, capacity, "sets_out") }?;
        let written = unsafe { out_ref(written_out, "written_out") }?;
        let sets = m.local("kvtier_manager_pin_sets")?.pin_sets()?;
        *written = sets.len();
        if capacity < sets.len() {
            return Err(Error::BufferTooSmall {
                needed: sets.len(),
                given: capacity,
            }
            .into());
        }
        for (dst, s) in buf.iter_mut().zip(sets.iter()) {
            let mut name = [0 as c_char; KVTIER_PIN_SET_NAME_MAX + 1];
            const _: () = assert!(KVTIER_PIN_SET_NAME_MAX + 1 == 257);
            for (d, &b) in name.iter_mut().zip(s.name.as_bytes()) {
                *d = b as c_char;
            }
            *dst = kvtier_pin_set_info {
                name,
                tier: s.tier,
                keys: s.keys as u64,
                bytes: s.bytes,
            };
        }
        Ok(())
    })
}

/// Drops every block whose key starts with the selector's prefix (every
/// block for an empty one) from every tier the selector's fingerprint
/// selects (every tier for NULL), e.g. at a model upgrade; writes the
/// counts to `*report_out`.  Busy blocks (a load or store in flight,
/// write pending, held by a pin set) are kept and counted in `kept`; a
/// selected tier that cannot drop blocks (a C tier, a Redis tier on a
/// cluster) is skipped and counted in `unsupported_tiers`.  The Redis
/// tier deletes its blocks on the server in the call (network I/O).  Another tier's failure ends the call
/// with its error (the tiers before it dropped theirs).  Dropped blocks
/// are announced as removed, as evictions are.  A manager connected to
/// kvtierd answers `KVTIER_STATUS_UNSUPPORTED`.  Internally synchronized.
///
/// # Safety
/// `manager` a live handle; `selector` valid for its `struct_size`, with
/// `key_prefix` valid for `key_prefix_len` reads and `fingerprint` NULL or
/// NUL-terminated; `report_out` valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kvtier_manager_drop_blocks(
    manager: *const kvtier_manager,
    selector: *const kvtier_drop_selector,
    report_out: *mut kvtier_drop_report,
) -> super::kvtier_status {
    ffi_call!({
        let m = unsafe { enter::<kvtier_manager>(manager) }?;
        if selector.is_null() {
            return Err(Failure::Null("selector"));
        }
        let default = kvtier_drop_selector {
            struct_size: std::mem::size_of::<kvtier_drop_selector>(),
            key_prefix: std::ptr::null(),
            key_prefix_len: 0,
            fingerprint: std::ptr::null(),
        };
        let sel = unsafe { read_grown(selector, default) }?;
        let out = unsafe { out_ref(report_out, "report_out") }?;
        if sel.key_prefix_len > kvtier_core::MAX_KEY_LEN {
            return Err(Error::InvalidArgument(format!(
                "key_prefix_len {} (at most {})",
                sel.key_prefix_len,
                kvtier_core::MAX_KEY_LEN
            ))
            .into());
        }
        let prefix: &[u8] = if sel.key_prefix_len == 0 {
            &[]
        } else if sel.key_prefix.is_null() {
            return Err(Failure::Null("selector.key_prefix"));
        } else {
            unsafe { std::slice::from_raw_parts(sel.key_prefix, sel.key_prefix_len) }
        };
        let fingerprint =
            unsafe { super::boundary::opt_str(sel.fingerprint, "selector.fingerprint") }?;
        let r = m
            .local("kvtier_manager_drop_blocks")?
            .drop_blocks(prefix, fingerprint)?;
        *out = kvtier_drop_report {
            dropped: r.dropped,
            kept: r.kept,
            unsupported_tiers: r.unsupported_tiers,
        };
        Ok(())
    })
}
