//! Readiness: whether every tier of a manager can be used now, and why
//! not ([`crate::tiering::Manager::readiness`]; the `/readyz` endpoint of
//! [`crate::serve`] serves it).

use std::fmt;

/// Whether one secondary tier can be used now, as the tier says
/// ([`crate::tiering::SecondaryTier::readiness`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierReadiness {
    /// Usable: stores and loads go to it.
    Ready,
    /// Not usable now; the text says why (e.g. "circuit breaker open").
    NotReady(String),
}

/// Whether a manager and every one of its tiers can be used now: ready
/// when no reason is listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Why it is not ready, one line each: "manager: ..." or
    /// "tier N (name): ..." (empty: ready).
    pub reasons: Vec<String>,
}

impl Readiness {
    /// Whether nothing keeps it from being used.
    pub fn is_ready(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// The reasons, one per line (nothing when ready).
impl fmt::Display for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for reason in &self.reasons {
            writeln!(f, "{reason}")?;
        }
        Ok(())
    }
}
