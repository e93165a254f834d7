//! Why a block's transfer failed: the causes the fs tier counts apart, how
//! OS errors map to them, and which of them take a block out of the tier.

use crate::stats::family;
use crate::tiers::kit::tier_causes;

tier_causes! {
    /// Why one block's transfer failed; each is counted separately.
    #[derive(Hash)]
    pub enum Cause: "errors_" => FS_ERRORS {
        /// The file system is full (`ENOSPC`, `EDQUOT`, `EFBIG`).
        NoSpace = "no_space", "no space";
        /// The file system is read-only (`EROFS`).
        ReadOnly = "read_only", "read only";
        /// Permission denied (`EACCES`, `EPERM`).
        Permission = "permission", "permission";
        /// The tier's directory (or a fan-out directory) is missing or not a
        /// directory (`ENOENT`, `ENOTDIR` on a store).
        MissingDir = "missing_dir", "missing dir";
        /// Another I/O error.
        Io = "io", "io";
        /// The block file disappeared before it could be read.
        Vanished = "vanished", "vanished";
        /// The file is shorter than its header says.
        Truncated = "truncated", "truncated";
        /// The header is not ours, of another version, damaged, or for another
        /// key or block size.
        BadHeader = "bad_header", "bad header";
        /// The data does not match the checksum.
        Checksum = "checksum", "checksum";
        /// The key was not in the tier when the load was submitted.
        NotPresent = "not_present", "not present";
        /// The tier was shut down before the transfer ran.
        Closed = "closed", "closed";
        /// The job named a slot outside the region, or its keys and slots
        /// differ in number.
        BadSlot = "bad_slot", "bad slot";
        /// Something that is not a regular file sits under the block's name
        /// (a symlink, FIFO, socket or device), or a symlink in place of its
        /// fan-out directory: skipped, never followed nor waited on, and left
        /// where it is.
        Foreign = "foreign", "foreign";
        /// A shortage that passes by itself (`EAGAIN`, `EINTR`, `ENOMEM`,
        /// `ENOBUFS`, `EMFILE`, `ENFILE`, `EBUSY`, `ETIMEDOUT`): the block stays
        /// in the tier and a later load may succeed.
        Transient = "transient", "transient";
    }
}

impl Cause {
    /// Whether the cause means the stored file was proven bad (and is
    /// removed): the only causes for which the tier deletes a block.
    pub fn is_corruption(self) -> bool {
        matches!(self, Cause::Truncated | Cause::BadHeader | Cause::Checksum)
    }

    /// Whether a load that failed with this cause shows that the block can
    /// no longer be read, and waiting will not change that: a damaged file
    /// (removed), a vanished one, permission denied, another I/O error, or
    /// a foreign entry under its name (these three stay on disk, untouched:
    /// only a block proven bad is removed).  The key then leaves the tier,
    /// so the next lookup answers MISS instead of starting a promotion that
    /// fails the same way.  [`Cause::Transient`] and the causes that are
    /// not about the file (not present, closed, bad slot) keep the key.
    pub fn loses_block(self) -> bool {
        self.is_corruption()
            || matches!(
                self,
                Cause::Vanished | Cause::Permission | Cause::Io | Cause::Foreign
            )
    }

    fn transient(errno: i32) -> bool {
        matches!(
            errno,
            libc::EAGAIN
                | libc::EINTR
                | libc::ENOMEM
                | libc::ENOBUFS
                | libc::EMFILE
                | libc::ENFILE
                | libc::EBUSY
                | libc::ETIMEDOUT
        )
    }

    /// The cause of OS error `errno` during a store.
    pub fn of_store_errno(errno: i32) -> Cause {
        if Cause::transient(errno) {
            return Cause::Transient;
        }
        match errno {
            libc::ENOSPC | libc::EDQUOT | libc::EFBIG => Cause::NoSpace,
            libc::EROFS => Cause::ReadOnly,
            libc::EACCES | libc::EPERM => Cause::Permission,
            libc::ENOENT | libc::ENOTDIR => Cause::MissingDir,
            super::beneath::FOREIGN => Cause::Foreign,
            _ => Cause::Io,
        }
    }

    /// The cause of OS error `errno` during a load.
    pub fn of_load_errno(errno: i32) -> Cause {
        if Cause::transient(errno) {
            return Cause::Transient;
        }
        match errno {
            libc::ENOENT => Cause::Vanished,
            libc::EACCES | libc::EPERM => Cause::Permission,
            super::beneath::FOREIGN => Cause::Foreign,
            _ => Cause::Io,
        }
    }
}

// The family the causes' counters are exported in (label `cause`).
family! {
    pub(super) FS_ERRORS, "kvtier_fs_errors_total", Counter, Tier, "cause",
    "Failed fs-tier operations, by cause."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lasting_read_failures_lose_the_block_and_passing_ones_keep_it() {
        for e in [
            libc::EAGAIN,
            libc::EINTR,
            libc::ENOMEM,
            libc::EMFILE,
            libc::ENFILE,
        ] {
            assert_eq!(Cause::of_load_errno(e), Cause::Transient);
            assert_eq!(Cause::of_store_errno(e), Cause::Transient);
        }
        assert!(!Cause::Transient.loses_block());
        for (e, cause) in [
            (libc::EACCES, Cause::Permission),
            (libc::EIO, Cause::Io),
            (libc::EISDIR, Cause::Io),
            (libc::ENOENT, Cause::Vanished),
            (super::super::beneath::FOREIGN, Cause::Foreign),
        ] {
            assert_eq!(Cause::of_load_errno(e), cause);
            assert!(cause.loses_block(), "{cause:?}");
        }
        for cause in [
            Cause::NotPresent,
            Cause::Closed,
            Cause::BadSlot,
            Cause::NoSpace,
        ] {
            assert!(!cause.loses_block(), "{cause:?}");
        }
        assert_eq!(Cause::Transient.stat_name(), "errors_transient");
        for (i, cause) in Cause::ALL.into_iter().enumerate() {
            assert_eq!(cause.index(), i, "{cause:?}");
        }
        for cause in Cause::ALL {
            // The words are the counter's name, as failures always read.
            let words = cause
                .stat_name()
                .trim_start_matches("errors_")
                .replace('_', " ");
            assert_eq!(cause.describe(), words);
        }
    }
}
