//! Shutting a manager down: every secondary tier is stopped, and the
//! attached region is released unless a tier failed to stop (it may still
//! use the region, which then stays mapped, also when the manager is
//! dropped).

use super::PrimaryBackend;
use super::{Error, Manager, Result, State};

impl<P: PrimaryBackend> Manager<P> {
    /// Shuts every secondary tier down (each gets a try even if an earlier
    /// one failed), then releases the attached region.  If a tier failed,
    /// the region stays mapped (that tier may still use it) and the error
    /// names every failure.  Every later call returns [`Error::Closed`].
    pub fn shutdown(&self) -> Result<()> {
        let mut s = self.enter("shutdown")?;
        s.shutdown_now()
    }
}

impl<P: PrimaryBackend> Drop for Manager<P> {
    fn drop(&mut self) {
        let s = self.state.get_mut();
        if !s.closed {
            let _ = s.shutdown_now();
        }
        if s.shutdown_failed
            && let Some(keep) = s.keepalive.take()
        {
            // A tier failed to stop and may still touch the region: keep it mapped.
            std::mem::forget(keep);
        }
    }
}

impl<P: PrimaryBackend> State<P> {
    pub(super) fn shutdown_now(&mut self) -> Result<()> {
        self.closed = true;
        let mut failures = Vec::new();
        let mut names = Vec::new();
        for t in &mut self.tiers {
            if let Err(e) = t.tier.shutdown() {
                failures.push(format!("{}: {e}", t.name));
                names.push(t.name.to_string());
            }
        }
        if failures.is_empty() {
            self.keepalive = None;
            return Ok(());
        }
        self.shutdown_failed = true;
        let message = format!(
            "shutdown failed ({}); the region stays mapped because the tier may still use it",
            failures.join("; ")
        );
        self.log(message.clone());
        Err(Error::Tier {
            tier: names.join(","),
            message,
        })
    }
}
