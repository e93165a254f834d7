//! Block I/O: copies straight between a region slot and a block file with
//! `preadv`/`pwritev` (header and data in one call, no staging buffer),
//! `O_DIRECT` where the file system takes it, and the checksum computed over
//! the slot just before the write or just after the read.
//!
//! Runs on the tier's worker threads only.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::beneath::{self, Fd, errno};
pub use super::cause::Cause;
use super::file::{
    ALIGN, cpath, cstr, header_and_data, link_fd, pread_exact, pwrite_all, retrying_eintr, sync_fd,
};
pub(super) use super::file::{LinkVia, Scratch, probe_direct, probe_tmpfile};
use super::format::{
    BlockHasher, HEADER_LEN, Header, Layout, decode_header, encode_header, file_len,
};
use super::segments::Segments;
use crate::key::Key;
use crate::region::SlotMemory;

/// Directories the workers found missing, for the tier to take the blocks
/// they held out of its index (see `FsTier`'s module docs).
#[derive(Default)]
pub(super) struct LostDirs {
    root: AtomicBool,
    fanouts: [AtomicU64; 4],
}

impl LostDirs {
    /// The root directory was found missing.
    fn root_lost(&self) {
        self.root.store(true, Ordering::Release);
    }

    /// Fan-out directory `fanout` had to be made again.
    fn fanout_made(&self, fanout: u8) {
        self.fanouts[fanout as usize / 64].fetch_or(1 << (fanout % 64), Ordering::AcqRel);
    }

    /// Takes what was found since the last call: whether the root was
    /// missing, and a bit per fan-out directory made since.
    pub(super) fn take(&self) -> (bool, [u64; 4]) {
        let root = self.root.swap(false, Ordering::AcqRel);
        let fanouts = std::array::from_fn(|i| self.fanouts[i].swap(0, Ordering::AcqRel));
        (root, fanouts)
    }
}

/// What the worker threads share to move blocks.
pub(super) struct BlockIo {
    /// The region's slots.
    pub slots: SlotMemory,
    /// Whether `O_DIRECT` is used (probed at open).
    pub direct: bool,
    /// Whether stores are made durable (fdatasync the file, fsync the directory).
    pub durable: bool,
    /// Whether other processes share the directory (a store first checks
    /// whether one of them wrote the block already).
    pub shared: bool,
    /// How stores link unnamed files (`O_TMPFILE`) under their names
    /// (probed at open); `None`: temporary files and a rename instead.
    pub link: Option<LinkVia>,
    /// Directories found missing since the tier last looked.
    pub lost: LostDirs,
    /// The segment files, in the segments layout (`None`: a file per block).
    pub segments: Option<Segments>,
    /// Mode of the files the tier creates.
    pub file_mode: u32,
    root_c: CString,
    pid: u32,
    temp_seq: AtomicU64,
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
    /// Block I/O over `slots` under `layout`.
    pub(super) fn new(
        layout: Layout,
        slots: SlotMemory,
        direct: bool,
        durable: bool,
        shared: bool,
        link: Option<LinkVia>,
    ) -> BlockIo {
        BlockIo {
            root_c: cpath(layout.root()),
            slots,
            direct,
            durable,
            shared,
            link,
            lost: LostDirs::default(),
            segments: None,
            file_mode: 0o600,
            pid: std::process::id(),
            temp_seq: AtomicU64::new(0),
        }
    }

    /// Bytes of data per block (the slot size).
    pub(super) fn block_bytes(&self) -> usize {
        self.slots.slot_bytes()
    }

    /// Notes the root directory lost if it is missing (or not a directory).
    fn check_root(&self) {
        // SAFETY: stat is plain data, valid when zeroed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a valid out-parameter.
        let rc = unsafe { libc::stat(self.root_c.as_ptr(), &mut st) };
        if (rc != 0 && matches!(errno(), libc::ENOENT | libc::ENOTDIR))
            || (rc == 0 && (st.st_mode & libc::S_IFMT) != libc::S_IFDIR)
        {
            self.lost.root_lost();
        }
    }

    fn direct_for(&self, ptr: *const u8) -> bool {
        self.direct && (ptr as usize) % ALIGN == 0 && self.slots.slot_bytes() % ALIGN == 0
    }

    /// `key`'s fan-out directory, reached from the root without following
    /// a symlink; with `create`, made (mode from the options) when missing.
    fn fanout(&self, key: &Key, create: bool) -> Result<Fd, i32> {
        let root = beneath::open_root(&self.root_c)?;
        let name = Layout::fanout_c(key);
        let name = CStr::from_bytes_with_nul(&name).expect("NUL-terminated");
        beneath::subdir(
            root.0,
            name,
            create.then(|| beneath::dir_mode_of(self.file_mode)),
            || self.lost.fanout_made(Layout::fanout_index(key)),
        )
    }

    /// Whether a whole block file for `key` exists (a regular file of the
    /// block's size; contents verified only when loaded).
    pub(super) fn exists(&self, key: &Key, scratch: &mut Scratch) -> bool {
        let Ok(fan) = self.fanout(key, false) else {
            return false;
        };
        let name = Layout::name_c(key, &mut scratch.path);
        beneath::lstat_at(fan.0, name).is_ok_and(|st| {
            beneath::is_regular(&st) && st.st_size as u64 == file_len(self.block_bytes())
        })
    }

    /// Removes `key`'s block file; a missing file is not an error.
    pub(super) fn remove(&self, key: &Key, scratch: &mut Scratch) -> Result<(), Cause> {
        let fan = match self.fanout(key, false) {
            Ok(fan) => fan,
            Err(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(Cause::of_store_errno(e)),
        };
        let name = Layout::name_c(key, &mut scratch.path);
        // SAFETY: NUL-terminated name (the entry itself goes, never a
        // symlink's target).
        if unsafe { libc::unlinkat(fan.0, name.as_ptr(), 0) } != 0 {
            let e = errno();
            if e != libc::ENOENT {
                return Err(Cause::of_store_errno(e));
            }
        }
        Ok(())
    }

    /// Stores slot `slot` as `key`'s block so that readers see the old
    /// state or the whole block, and nothing is left behind on failure or
    /// crash: where the file system has `O_TMPFILE`, an unnamed file is
    /// written and then linked under its name (a crash leaves no trace);
    /// elsewhere a temporary file in the final directory is renamed.
    pub(super) fn store(
        &self,
        key: &Key,
        slot: u32,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        let result = self.store_block(key, slot, scratch);
        if result == Err(Cause::MissingDir) {
            self.check_root();
        }
        result
    }

    fn store_block(&self, key: &Key, slot: u32, scratch: &mut Scratch) -> Result<Stored, Cause> {
        if self.shared && self.exists(key, scratch) {
            return Ok(Stored::Present);
        }
        let len = self.block_bytes();
        let base = self
            .slots
            .slot_ptr(slot)
            .map_err(|_| Cause::BadSlot)?
            .as_ptr() as *const u8;
        let direct = self.direct_for(base);
        // Only the fan-out directory is created here: a missing root stays
        // missing (and the store fails with its cause).
        let fan = self.fanout(key, true).map_err(Cause::of_store_errno)?;
        if self.link.is_some() {
            return self.store_unnamed(&fan, key, base, len, direct, scratch);
        }
        let n = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = Layout::temp_name_c(key, self.pid, n, &mut scratch.temp);
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let (fd, _) = beneath::open_at(fan.0, tmp, flags, self.file_mode, direct)
            .map_err(Cause::of_store_errno)?;
        let written = self.write_block(key, fd.0, 0, base, len, &mut scratch.page.0);
        drop(fd);
        let result = written.and_then(|()| {
            let tmp = cstr(&scratch.temp);
            let dst = Layout::name_c(key, &mut scratch.path);
            // SAFETY: NUL-terminated names in an open directory.
            if unsafe { libc::renameat(fan.0, tmp.as_ptr(), fan.0, dst.as_ptr()) } != 0 {
                return Err(errno());
            }
            if self.durable {
                sync_fd(&fan)?;
            }
            Ok(())
        });
        match result {
            Ok(()) => Ok(Stored::Written(len as u64)),
            Err(e) => {
                // SAFETY: NUL-terminated name (the temporary file, if the
                // rename did not happen).
                unsafe { libc::unlinkat(fan.0, cstr(&scratch.temp).as_ptr(), 0) };
                Err(Cause::of_store_errno(e))
            }
        }
    }

    fn store_unnamed(
        &self,
        fan: &Fd,
        key: &Key,
        base: *const u8,
        len: usize,
        direct: bool,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        let flags = libc::O_TMPFILE | libc::O_WRONLY;
        let (fd, _) = beneath::open_at(fan.0, c".", flags, self.file_mode, direct)
            .map_err(Cause::of_store_errno)?;
        self.write_block(key, fd.0, 0, base, len, &mut scratch.page.0)
            .map_err(Cause::of_store_errno)?;
        let via = self.link.unwrap_or(LinkVia::ProcFd);
        let dst = Layout::name_c(key, &mut scratch.path);
        match link_fd(fd.0, fan.0, dst, via, &mut scratch.temp) {
            Ok(()) => {}
            Err(libc::EEXIST) if self.shared => return Ok(Stored::Present),
            Err(libc::EEXIST) => {
                // Not in the index, so stale (another format, damaged, or
                // left by an earlier run): its entry is replaced (a
                // symlink's target is never touched).
                // SAFETY: NUL-terminated name in an open directory.
                unsafe { libc::unlinkat(fan.0, dst.as_ptr(), 0) };
                link_fd(fd.0, fan.0, dst, via, &mut scratch.temp).map_err(Cause::of_store_errno)?;
            }
            Err(e) => return Err(Cause::of_store_errno(e)),
        }
        if self.durable {
            sync_fd(fan).map_err(Cause::of_store_errno)?;
        }
        Ok(Stored::Written(len as u64))
    }

    /// Writes `key`'s block (header, then the `len` bytes at `base`) at
    /// byte `off` of file `fd`, and syncs it when durable.
    fn write_block(
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

    /// Loads `key`'s block into slot `slot`, verifying size, header and
    /// checksum.  A block proven bad (its size, header, key or checksum)
    /// is removed; one that cannot be read (permission, I/O error, a
    /// foreign entry under its name) stays on disk untouched (see
    /// [`Cause::loses_block`]).  On failure the slot holds unspecified
    /// bytes (it is write pending; the key is reported failed and never
    /// readable).
    pub(super) fn load(&self, key: &Key, slot: u32, scratch: &mut Scratch) -> Result<u64, Cause> {
        let len = self.block_bytes();
        let base = self
            .slots
            .slot_ptr(slot)
            .map_err(|_| Cause::BadSlot)?
            .as_ptr();
        let direct = self.direct_for(base);
        let fan = match self.fanout(key, false) {
            Ok(fan) => fan,
            Err(e) => {
                let cause = Cause::of_load_errno(e);
                if cause == Cause::Vanished {
                    self.check_root();
                }
                return Err(cause);
            }
        };
        let name = Layout::name_c(key, &mut scratch.path);
        let (fd, st) = match beneath::open_at(fan.0, name, libc::O_RDONLY, 0, direct) {
            Ok(opened) => opened,
            Err(e) => {
                let cause = Cause::of_load_errno(e);
                if cause == Cause::Vanished {
                    self.check_root();
                }
                return Err(cause);
            }
        };
        let expected = file_len(len);
        let result = match (st.st_size as u64).cmp(&expected) {
            std::cmp::Ordering::Less => Err(Cause::Truncated),
            // Longer than a block of this size: another block size.
            std::cmp::Ordering::Greater => Err(Cause::BadHeader),
            std::cmp::Ordering::Equal => read_block(key, fd.0, 0, base, len, &mut scratch.page.0),
        };
        drop(fd);
        if let Err(cause) = result
            && cause.is_corruption()
        {
            // Only the file that was checked goes.
            let _ = beneath::unlink_same(fan.0, name, &st);
        }
        result
    }

    /// Stores slot `slot` as `key`'s block in segment record `record`
    /// (the segments layout; the record is the store's, reserved by the
    /// tier).
    pub(super) fn store_record(
        &self,
        key: &Key,
        slot: u32,
        record: u32,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        let (fd, off, base) = self.record_target(slot, record)?;
        let len = self.block_bytes();
        self.write_block(key, fd, off, base, len, &mut scratch.page.0)
            .map_err(Cause::of_store_errno)?;
        Ok(Stored::Written(len as u64))
    }

    /// Loads `key`'s block from segment record `record` into slot `slot`,
    /// verifying header and checksum (a record overwritten or torn since
    /// is reported, never served).
    pub(super) fn load_record(
        &self,
        key: &Key,
        slot: u32,
        record: u32,
        scratch: &mut Scratch,
    ) -> Result<u64, Cause> {
        let (fd, off, base) = self.record_target(slot, record)?;
        read_block(
            key,
            fd,
            off,
            base.cast_mut(),
            self.block_bytes(),
            &mut scratch.page.0,
        )
    }

    /// Where a transfer between slot `slot` and segment record `record`
    /// goes: the segment's descriptor, the record's offset, and the slot's
    /// address (one `O_DIRECT` can copy when the segments use it).
    fn record_target(&self, slot: u32, record: u32) -> Result<(i32, u64, *const u8), Cause> {
        let segments = self.segments.as_ref().ok_or(Cause::BadSlot)?;
        let base = self
            .slots
            .slot_ptr(slot)
            .map_err(|_| Cause::BadSlot)?
            .as_ptr() as *const u8;
        if segments.direct() && !self.direct_for(base) {
            return Err(Cause::BadSlot);
        }
        // Records come from the tier's index, always in range; one that
        // is not fails its key rather than the worker.
        let (fd, off) = segments.locate(record).ok_or(Cause::NotPresent)?;
        Ok((fd, off, base))
    }
}

/// Reads the block at byte `off` of file `fd` into the `len` bytes at
/// `base`, verifying that the header is `key`'s and the checksum matches.
fn read_block(
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
