//! Health and readiness: whether a manager answers at all (for a liveness
//! probe), and whether it and every one of its tiers can be used now (for
//! a readiness probe).

use std::time::Duration;

use super::PrimaryBackend;
use super::{Error, Manager, Result};
use crate::tiering::backpressure::PressurePolicy;
use crate::tiering::{Readiness, TierReadiness};

impl<P: PrimaryBackend> Manager<P> {
    /// Whether the manager answers: `Ok` when its lock could be had within
    /// `within` and it is not shut down; [`Error::Timeout`] when another
    /// call held the lock all that time (a tier callback that does not
    /// return, a drain that does not end), [`Error::Closed`] after
    /// [`Manager::shutdown`].  It changes nothing and calls no tier.
    pub fn health(&self, within: Duration) -> Result<()> {
        let Some(s) = self.state.try_lock_for(within) else {
            return Err(Error::Timeout(format!(
                "the tiering manager did not answer within {} ms (another call holds it)",
                within.as_millis()
            )));
        };
        if s.closed {
            return Err(Error::Closed(
                "the tiering manager is shut down".to_string(),
            ));
        }
        Ok(())
    }

    /// Whether the manager and every secondary tier can be used now, and
    /// why not: the manager is shut down, a tier says it is not ready
    /// ([`crate::tiering::SecondaryTier::readiness`]: a Redis tier whose
    /// circuit breaker is open, a file-system tier whose directory is gone
    /// or that was shut down), or a tier's back-pressure drops every
    /// cascade to it now (policy `drop`).  What the tiers report is their
    /// state as the engine's last calls left it (a breaker opens and closes
    /// as transfers and probes finish).  Calls no tier but its `readiness`;
    /// changes nothing.  An error only for a call from inside one of the
    /// manager's own tier callbacks ([`Error::Reentrant`]).
    pub fn readiness(&self) -> Result<Readiness> {
        let s = match self.enter("readiness") {
            Ok(s) => s,
            Err(Error::Closed(_)) => {
                return Ok(Readiness {
                    reasons: vec!["manager: shut down".to_string()],
                });
            }
            Err(e) => return Err(e),
        };
        let mut reasons = Vec::new();
        for (i, t) in s.tiers.iter().enumerate() {
            let tier = i + 1;
            if let TierReadiness::NotReady(why) = t.tier.readiness() {
                reasons.push(format!("tier {tier} ({}): {why}", t.name));
            }
            if let Some(d) = &t.detector
                && d.under_pressure()
                && d.config().policy == PressurePolicy::Drop
            {
                reasons.push(format!(
                    "tier {tier} ({}): under back-pressure, cascades to it are dropped",
                    t.name
                ));
            }
        }
        Ok(Readiness { reasons })
    }
}
