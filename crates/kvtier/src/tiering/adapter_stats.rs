//! The statistics an adapter of a tier written in another language (the
//! C crate's vtable tier) reports before the tier's own, declared once.
//!
//! The C crate counts them, but they are declared here: their families
//! belong in the metric catalogue with every other component's (which
//! [`crate::catalogue`] lists for the docs and the checks), and the table
//! macro is the core's.

use crate::stats::{family, stat_table};

stat_table! {
    /// The families of [`AdapterStats`]: what
    /// [`SecondaryTier::stat_table`](super::SecondaryTier::stat_table)
    /// returns for such a tier.
    pub static ADAPTER_STATS;

    /// What an adapter counts of the tier it adapts; its `stat_list` comes
    /// first in the tier's statistics.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct AdapterStats {
        /// Callbacks that returned a status other than OK or answered
        /// something invalid.
        counter callback_errors: u64 => T_CALLBACK_ERRORS,
        /// Events refused because their key was empty or too long.
        counter events_rejected: u64 => T_EVENTS_REJECTED,
    }
}

family! {
    T_CALLBACK_ERRORS, "kvtier_tier_callback_errors_total", Counter, Tier,
    "Callbacks of a C or C++ tier that returned a status other than OK or answered something invalid."
}
family! {
    T_EVENTS_REJECTED, "kvtier_tier_events_rejected_total", Counter, Tier,
    "Events of a C or C++ tier refused because their key was empty or longer than 64 bytes."
}
