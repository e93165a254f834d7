//! The shared offload region and the slot view tiers use.

pub mod slots;

pub use slots::SlotMemory;
