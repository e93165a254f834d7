//! The shared offload region and the slot view tiers use.
//!
//! [`Region`] is one mmap'd buffer that the scheduler and every worker
//! process map at the same time, created by the first process and joined
//! by the others under one name; [`SlotMemory`] is the view of its slots
//! that secondary tiers copy through.  [`reclaim`] removes the files of
//! regions that no process maps any more.

mod dir;
mod header;
pub mod inspect;
mod options;
pub mod reclaim;
mod setup;
mod shared;
mod slots;
pub(crate) mod sys;

pub use options::{OpenMode, Prefault, RegionOptions, Role, Share};
pub use reclaim::{FoundRegion, Kept, ReclaimReport, RegionFile, reclaim_stale};
pub use shared::{CloseReport, Region, StridedView};
pub use slots::{SlotMemory, SlotOwner};
pub use sys::PrefaultMethod;
