//! Moving one block: the tier's on-disk layouts ([`OnDisk`]: `files.rs`, a
//! file per block, and `segments.rs`, records in segment files) over what
//! they share here: copies straight between a region slot and a file with
//! `preadv`/`pwritev` (header and data in one call, no staging buffer),
//! `O_DIRECT` where the file system takes it, and the checksum computed
//! over the slot just before the write or just after the read.
//!
//! Runs on the tier's worker threads only.

use super::beneath::errno;
use super::cause::Cause;
use super::file::{ALIGN, Scratch, header_and_data, pread_exact, pwrite_all, retrying_eintr};
use super::format::{BlockHasher, HEADER_LEN, Header, decode_header, encode_header};
use crate::key::Key;
use crate::region::SlotMemory;

/// Where a tier's blocks live on disk: one type per layout.  Every call
/// but the queries runs on a worker thread.
pub(super) trait OnDisk: Send + Sync {
    /// Stores slot `slot` as `key`'s block (at segment record `record`
    /// where blocks live in records, see [`OnDisk::in_records`]) so that
    /// readers see the old state or the whole block.
    fn store(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause>;

    /// Loads `key`'s block (from `record`, as for [`OnDisk::store`]) into
    /// slot `slot`, verifying header and checksum; bytes of data read.  On
    /// failure the slot holds unspecified bytes (it is write pending; the
    /// key is reported failed and never readable).
    fn load(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<u64, Cause>;

    /// Removes an evicted block (where eviction does not free it at once);
    /// a missing one is not an error.
    fn remove(&self, key: &Key, scratch: &mut Scratch) -> Result<(), Cause>;

    /// Whether a whole block for `key` exists (shared directories).
    fn exists(&self, io: &BlockIo, key: &Key, scratch: &mut Scratch) -> bool;

    /// Whether blocks live in records the tier's index assigns (freed at
    /// eviction, nothing to remove) rather than in files of their own.
    fn in_records(&self) -> bool;

    /// The key of the whole block segment record `record` holds, read
    /// from its header (where blocks live in records); `None` if it
    /// holds none.
    fn record_key(&self, _io: &BlockIo, _record: u32, _scratch: &mut Scratch) -> Option<Key> {
        None
    }

    /// Whether stores write unnamed files and link them.
    fn links_unnamed(&self) -> bool {
        false
    }

    /// At a clean shutdown (nothing writes any more), records which
    /// records hold blocks: exactly `live` (where blocks live in records).
    fn save_live(&self, _live: &[u32], _mode: u32) -> Result<(), i32> {
        Ok(())
    }

    /// Directories found missing since the last call: whether the root
    /// was, and a bit per fan-out directory made again.
    fn take_lost(&self) -> (bool, [u64; 4]) {
        (false, [0; 4])
    }
}

/// What every layout's transfers share: the slots and how blocks are
/// written.
pub(super) struct BlockIo {
    /// The region's slots.
    pub slots: SlotMemory,
    /// Whether `O_DIRECT` is used (probed at open).
    pub direct: bool,
    /// Whether stores are made durable (fdatasync the file, fsync the directory).
    pub durable: bool,
    /// Mode of the files the tier creates.
    pub file_mode: u32,
}

/// Result of storing one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    /// Written now; bytes of data.
    Written(u64),
    /// A whole file for the key was there already (another process, or an
    /// earlier run): nothing written.
    Present,
}

impl BlockIo {
    /// Bytes of data per block (the slot size).
    pub(super) fn block_bytes(&self) -> usize {
        self.slots.slot_bytes()
    }

    /// The address of slot `slot`.
    pub(super) fn slot_base(&self, slot: u32) -> Result<*const u8, Cause> {
        let p = self.slots.slot_ptr(slot).map_err(|_| Cause::BadSlot)?;
        Ok(p.as_ptr() as *const u8)
    }

    /// Whether a transfer at `ptr` can use `O_DIRECT`.
    pub(super) fn direct_for(&self, ptr: *const u8) -> bool {
        self.direct && (ptr as usize) % ALIGN == 0 && self.slots.slot_bytes() % ALIGN == 0
    }

    /// Writes `key`'s block (header, then the `len` bytes at `base`) at
    /// byte `off` of file `fd`, and syncs it when durable.
    pub(super) fn write_block(
        &self,
        key: &Key,
        fd: i32,
        off: u64,
        base: *const u8,
        len: usize,
        page: &mut [u8; HEADER_LEN],
    ) -> Result<(), i32> {
        // The checksum pass leaves the block in cache for the copy that
        // follows; header and data then go out in one system call.
        let mut hasher = BlockHasher::new(key, len as u64);
        // SAFETY: the slot is pinned by the store job for its duration.
        hasher.update(unsafe { std::slice::from_raw_parts(base, len) });
        let header = Header {
            key: *key,
            data_len: len as u64,
            checksum: hasher.finish(),
        };
        let buf = page;
        encode_header(&header, buf);
        let total = HEADER_LEN + len;
        let iov = header_and_data(buf, base as *mut u8, len);
        // SAFETY: both buffers are valid for their lengths.
        let n =
            retrying_eintr(|| unsafe { libc::pwritev(fd, iov.as_ptr(), 2, off as libc::off_t) });
        if n < 0 {
            return Err(errno());
        }
        let n = n as usize;
        if n < total {
            // A short write: finish the rest in plain writes.
            if n < HEADER_LEN {
                pwrite_all(fd, buf[n..].as_ptr(), HEADER_LEN - n, off + n as u64)?;
                pwrite_all(fd, base, len, off + HEADER_LEN as u64)?;
            } else {
                let done = n - HEADER_LEN;
                // SAFETY: done < len.
                pwrite_all(fd, unsafe { base.add(done) }, len - done, off + n as u64)?;
            }
        }
        // SAFETY: plain fdatasync of an open descriptor.
        if self.durable && unsafe { libc::fdatasync(fd) } != 0 {
            return Err(errno());
        }
        Ok(())
    }
}

/// Reads the block at byte `off` of file `fd` into the `len` bytes at
/// `base`, verifying that the header is `key`'s and the checksum matches.
pub(super) fn read_block(
    key: &Key,
    fd: i32,
    off: u64,
    base: *mut u8,
    len: usize,
    page: &mut [u8; HEADER_LEN],
) -> Result<u64, Cause> {
    // Header and data in one system call, the data straight into the
    // slot; the header is checked before the data counts for anything.
    let total = HEADER_LEN + len;
    let iov = header_and_data(page, base, len);
    // SAFETY: both buffers are valid for their lengths (the slot is
    // write pending, reserved for this job).
    let n = retrying_eintr(|| unsafe { libc::preadv(fd, iov.as_ptr(), 2, off as libc::off_t) });
    if n < 0 {
        return Err(Cause::of_load_errno(errno()));
    }
    let mut got = n as usize;
    if got < HEADER_LEN {
        return Err(Cause::Truncated);
    }
    let header = decode_header(&page[..]).map_err(|_| Cause::BadHeader)?;
    if header.key != *key || header.data_len != len as u64 {
        return Err(Cause::BadHeader);
    }
    if got < total {
        // A short read (signals, network file systems): read the rest.
        let done = got - HEADER_LEN;
        // SAFETY: done < len, in bounds of the slot.
        match pread_exact(fd, unsafe { base.add(done) }, len - done, off + got as u64) {
            Ok(true) => got = total,
            Ok(false) => return Err(Cause::Truncated),
            Err(e) => return Err(Cause::of_load_errno(e)),
        }
    }
    debug_assert_eq!(got, total);
    let mut hasher = BlockHasher::new(key, len as u64);
    // SAFETY: the slot's `len` bytes were just read.
    hasher.update(unsafe { std::slice::from_raw_parts(base, len) });
    if hasher.finish() != header.checksum {
        return Err(Cause::Checksum);
    }
    Ok(len as u64)
}
