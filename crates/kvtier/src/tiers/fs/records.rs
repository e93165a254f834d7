//! The segments layout as the tier moves blocks by it: each block in the
//! segment record the tier's index assigned it, written and read in place
//! (header and data, one call each), verified like a block file.  Eviction
//! frees a record at once (the next store overwrites it), so nothing is
//! ever removed, and a directory of segments is never shared.  A record
//! is marked in the live map before its first block is written.

use super::cause::Cause;
use super::file::Scratch;
use super::io::{BlockIo, OnDisk, Stored, read_block};
use super::segments::Segments;
use crate::key::Key;

impl Segments {
    /// Where a transfer between slot `slot` and segment record `record`
    /// goes: the segment's descriptor, the record's offset, and the slot's
    /// address (one `O_DIRECT` can copy when the segments use it).
    fn target(
        &self,
        io: &BlockIo,
        slot: u32,
        record: Option<u32>,
    ) -> Result<(i32, u64, *const u8), Cause> {
        let base = io.slot_base(slot)?;
        if self.direct() && !io.direct_for(base) {
            return Err(Cause::BadSlot);
        }
        // Records come from the tier's index, always in range; one that
        // is not fails its key rather than the worker.
        let (fd, off) = record
            .and_then(|r| self.locate(r))
            .ok_or(Cause::NotPresent)?;
        Ok((fd, off, base))
    }
}

impl OnDisk for Segments {
    fn record_key(&self, io: &BlockIo, record: u32, scratch: &mut Scratch) -> Option<Key> {
        match super::scan::record_holds(&self.geometry(), record, io.block_bytes(), scratch) {
            super::scan::RecordHolds::Block(key) => Some(key),
            _ => None,
        }
    }

    /// Stores slot `slot` as `key`'s block in segment record `record`
    /// (the store's, reserved by the tier), the record marked in the live
    /// map first (`live.rs`).
    fn store(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<Stored, Cause> {
        let (fd, off, base) = self.target(io, slot, record)?;
        if let Some(r) = record {
            self.live.mark(r).map_err(Cause::of_store_errno)?;
        }
        let len = io.block_bytes();
        io.write_block(key, fd, off, base, len, &mut scratch.page.0)
            .map_err(Cause::of_store_errno)?;
        Ok(Stored::Written(len as u64))
    }

    /// Loads `key`'s block from segment record `record` into slot `slot`,
    /// verifying header and checksum (a record overwritten or torn since
    /// is reported, never served).
    fn load(
        &self,
        io: &BlockIo,
        key: &Key,
        slot: u32,
        record: Option<u32>,
        scratch: &mut Scratch,
    ) -> Result<u64, Cause> {
        let (fd, off, base) = self.target(io, slot, record)?;
        let len = io.block_bytes();
        read_block(key, fd, off, base.cast_mut(), len, &mut scratch.page.0)
    }

    fn remove(&self, _key: &Key, _scratch: &mut Scratch) -> Result<(), Cause> {
        Ok(())
    }

    fn exists(&self, _io: &BlockIo, _key: &Key, _scratch: &mut Scratch) -> bool {
        false
    }

    fn in_records(&self) -> bool {
        true
    }

    fn save_live(&self, live: &[u32], mode: u32) -> Result<(), i32> {
        self.live.save(live, mode)
    }
}
