//! Why a block's transfer failed: the causes the fs tier counts apart and
//! how OS errors map to them.

/// Why one block's transfer failed; each is counted separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The file system is full (`ENOSPC`, `EDQUOT`, `EFBIG`).
    NoSpace,
    /// The file system is read-only (`EROFS`).
    ReadOnly,
    /// Permission denied (`EACCES`, `EPERM`).
    Permission,
    /// The tier's directory (or a fan-out directory) is missing or not a
    /// directory (`ENOENT`, `ENOTDIR` on a store).
    MissingDir,
    /// Another I/O error.
    Io,
    /// The block file disappeared before it could be read.
    Vanished,
    /// The file is shorter than its header says.
    Truncated,
    /// The header is not ours, of another version, damaged, or for another
    /// key or block size.
    BadHeader,
    /// The data does not match the checksum.
    Checksum,
    /// The key was not in the tier when the load was submitted.
    NotPresent,
    /// The tier was shut down before the transfer ran.
    Closed,
    /// The job named a slot outside the region, or its keys and slots
    /// differ in number.
    BadSlot,
}

impl Cause {
    /// Every cause, in stats order.
    pub const ALL: [Cause; 12] = [
        Cause::NoSpace,
        Cause::ReadOnly,
        Cause::Permission,
        Cause::MissingDir,
        Cause::Io,
        Cause::Vanished,
        Cause::Truncated,
        Cause::BadHeader,
        Cause::Checksum,
        Cause::NotPresent,
        Cause::Closed,
        Cause::BadSlot,
    ];

    /// Stat name of the cause's counter.
    pub fn stat_name(self) -> &'static str {
        match self {
            Cause::NoSpace => "errors_no_space",
            Cause::ReadOnly => "errors_read_only",
            Cause::Permission => "errors_permission",
            Cause::MissingDir => "errors_missing_dir",
            Cause::Io => "errors_io",
            Cause::Vanished => "errors_vanished",
            Cause::Truncated => "errors_truncated",
            Cause::BadHeader => "errors_bad_header",
            Cause::Checksum => "errors_checksum",
            Cause::NotPresent => "errors_not_present",
            Cause::Closed => "errors_closed",
            Cause::BadSlot => "errors_bad_slot",
        }
    }

    /// Index into [`Cause::ALL`].
    pub fn index(self) -> usize {
        Cause::ALL.iter().position(|c| *c == self).expect("listed")
    }

    /// Whether the cause means the stored file was bad (and is removed).
    pub fn is_corruption(self) -> bool {
        matches!(self, Cause::Truncated | Cause::BadHeader | Cause::Checksum)
    }

    /// The cause of OS error `errno` during a store.
    pub fn of_store_errno(errno: i32) -> Cause {
        match errno {
            libc::ENOSPC | libc::EDQUOT | libc::EFBIG => Cause::NoSpace,
            libc::EROFS => Cause::ReadOnly,
            libc::EACCES | libc::EPERM => Cause::Permission,
            libc::ENOENT | libc::ENOTDIR => Cause::MissingDir,
            _ => Cause::Io,
        }
    }

    /// The cause of OS error `errno` during a load.
    pub fn of_load_errno(errno: i32) -> Cause {
        match errno {
            libc::ENOENT => Cause::Vanished,
            libc::EACCES | libc::EPERM => Cause::Permission,
            _ => Cause::Io,
        }
    }
}
