//! The files layout: a file per block, `<root>/<aa>/<key hex>.kvb` (see
//! `format.rs`), each stored whole or not at all (an unnamed file linked,
//! or a temporary file renamed), reached beneath the root without
//! following a symlink; and the directories the workers find missing.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::beneath::{self, Fd, errno};
use super::cause::Cause;
use super::file::{LinkVia, Scratch, cpath, cstr, link_fd, sync_fd};
use super::format::{Layout, file_len};
use super::io::{BlockIo, OnDisk, Stored, read_block};
use crate::key::Key;

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

/// The files layout of one tier.
pub(super) struct Files {
    /// Whether other processes share the directory (a store first checks
    /// whether one of them wrote the block already).
    shared: bool,
    /// How stores link unnamed files (`O_TMPFILE`) under their names
    /// (probed at open); `None`: temporary files and a rename instead.
    link: Option<LinkVia>,
    /// Directories found missing since the tier last looked.
    lost: LostDirs,
    root_c: CString,
    pid: u32,
    temp_seq: AtomicU64,
}

impl Files {
    /// The files layout under `layout`'s root.
    pub(super) fn new(layout: &Layout, shared: bool, link: Option<LinkVia>) -> Files {
        Files {
            shared,
            link,
            lost: LostDirs::default(),
            root_c: cpath(layout.root()),
            pid: std::process::id(),
            temp_seq: AtomicU64::new(0),
        }
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

    /// `key`'s fan-out directory, reached from the root without following
    /// a symlink; with `create`, made with that mode when missing.
    fn fanout(&self, key: &Key, create: Option<u32>) -> Result<Fd, i32> {
        let root = beneath::open_root(&self.root_c)?;
        let name = Layout::fanout_c(key);
        let name = CStr::from_bytes_with_nul(&name).expect("NUL-terminated");
        beneath::subdir(root.0, name, create, || {
            self.lost.fanout_made(Layout::fanout_index(key))
        })
    }

    /// [`OnDisk::store`] proper; the caller checks the root after it.
    fn store_block(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        if self.shared && self.exists(io, key, scratch) {
            return Ok(Stored::Present);
        }
        let len = io.block_bytes();
        let base = io.slot_base(slot)?;
        let direct = io.direct_for(base);
        // Only the fan-out directory is created here: a missing root stays
        // missing (and the store fails with its cause).
        let fan = self
            .fanout(key, Some(beneath::dir_mode_of(io.file_mode)))
            .map_err(Cause::of_store_errno)?;
        if self.link.is_some() {
            return self.store_unnamed(io, &fan, key, base, len, direct, scratch);
        }
        let n = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = Layout::temp_name_c(key, self.pid, n, &mut scratch.temp);
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let (fd, _) = beneath::open_at(fan.0, tmp, flags, io.file_mode, direct)
            .map_err(Cause::of_store_errno)?;
        let written = io.write_block(key, fd.0, 0, base, len, &mut scratch.page.0);
        drop(fd);
        let result = written.and_then(|()| {
            let tmp = cstr(&scratch.temp);
            let dst = Layout::name_c(key, &mut scratch.path);
            // SAFETY: NUL-terminated names in an open directory.
            if unsafe { libc::renameat(fan.0, tmp.as_ptr(), fan.0, dst.as_ptr()) } != 0 {
                return Err(errno());
            }
            if io.durable {
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

    #[allow(clippy::too_many_arguments)]
    fn store_unnamed(
        &self,
        io: &BlockIo,
        fan: &Fd,
        key: &Key,
        base: *const u8,
        len: usize,
        direct: bool,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        let flags = libc::O_TMPFILE | libc::O_WRONLY;
        let (fd, _) = beneath::open_at(fan.0, c".", flags, io.file_mode, direct)
            .map_err(Cause::of_store_errno)?;
        io.write_block(key, fd.0, 0, base, len, &mut scratch.page.0)
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
        if io.durable {
            sync_fd(fan).map_err(Cause::of_store_errno)?;
        }
        Ok(Stored::Written(len as u64))
    }
}

impl OnDisk for Files {
    /// Whether a whole block file for `key` exists (a regular file of the
    /// block's size; contents verified only when loaded).
    fn exists(&self, io: &BlockIo, key: &Key, scratch: &mut Scratch) -> bool {
        let Ok(fan) = self.fanout(key, None) else {
            return false;
        };
        let name = Layout::name_c(key, &mut scratch.path);
        beneath::lstat_at(fan.0, name).is_ok_and(|st| {
            beneath::is_regular(&st) && st.st_size as u64 == file_len(io.block_bytes())
        })
    }

    /// Removes `key`'s block file; a missing file is not an error.
    fn remove(&self, key: &Key, scratch: &mut Scratch) -> Result<(), Cause> {
        let fan = match self.fanout(key, None) {
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
    fn store(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        _record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        let result = self.store_block(io, key, slot, scratch);
        if result == Err(Cause::MissingDir) {
            self.check_root();
        }
        result
    }

    /// Loads `key`'s block into slot `slot`, verifying size, header and
    /// checksum.  A block proven bad (its size, header, key or checksum)
    /// is removed; one that cannot be read (permission, I/O error, a
    /// foreign entry under its name) stays on disk untouched (see
    /// [`Cause::loses_block`]).  On failure the slot holds unspecified
    /// bytes (it is write pending; the key is reported failed and never
    /// readable).
    fn load(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        _record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<u64, Cause> {
        let len = io.block_bytes();
        let base = io.slot_base(slot)?.cast_mut();
        let direct = io.direct_for(base);
        // A block that vanished may mean its directory did: check the root.
        let failed = |e| {
            let cause = Cause::of_load_errno(e);
            if cause == Cause::Vanished {
                self.check_root();
            }
            cause
        };
        let fan = self.fanout(key, None).map_err(failed)?;
        let name = Layout::name_c(key, &mut scratch.path);
        let (fd, st) = beneath::open_at(fan.0, name, libc::O_RDONLY, 0, direct).map_err(failed)?;
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

    fn in_records(&self) -> bool {
        false
    }

    fn links_unnamed(&self) -> bool {
        self.link.is_some()
    }

    fn take_lost(&self) -> (bool, [u64; 4]) {
        self.lost.take()
    }
}
