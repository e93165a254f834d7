//! Polling: finished jobs come in from the completion queue (jobs that
//! tiers reported from any thread through [`Manager::complete_job`]) and
//! from each tier's `poll_finished`, and the tiers' errors into the
//! manager's error log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::PrimaryBackend;
use super::{Error, JobResult, MAX_FINISHED_PER_POLL, Manager, Result, State};

/// Finished jobs reported from any thread, waiting for the next poll.
#[derive(Default)]
pub(super) struct CompletionQueue {
    pub(super) nonempty: AtomicBool,
    pub(super) items: Mutex<Vec<(usize, JobResult)>>,
}

impl<P: PrimaryBackend> Manager<P> {
    /// Reports a finished job from any thread, without the main lock; the
    /// next poll collects it.  `tier` is the index `add_tier` returned, of
    /// a tier that reports through this call (see
    /// [`reports_through_complete_job`]); any other index (the primary
    /// tier's, one past the last tier, a built-in tier that reports
    /// through `poll_finished`) is [`Error::InvalidArgument`] and nothing
    /// is queued.  Reports of unknown or repeated job ids are tier bugs,
    /// logged then.
    ///
    /// [`reports_through_complete_job`]: crate::tiering::SecondaryTier::reports_through_complete_job
    pub fn complete_job(&self, tier: usize, result: JobResult) -> Result<()> {
        let n = self.tier_count.load(Ordering::Acquire);
        if tier == 0 || tier > n {
            return Err(Error::InvalidArgument(format!(
                "complete_job: tier index {tier} is not a secondary tier (1..={n})"
            )));
        }
        if self.completes_through_queue.load(Ordering::Relaxed) & (1 << (tier - 1)) == 0 {
            let name = self
                .queue_tier_names
                .lock()
                .get(tier - 1)
                .cloned()
                .unwrap_or_else(|| Arc::from("?"));
            return Err(Error::InvalidArgument(format!(
                "complete_job: tier {tier} ({name:?}) reports its jobs through poll_finished, \
                 not complete_job; the result of job {} was refused",
                result.id.0
            )));
        }
        let mut q = self.queue.items.lock();
        q.push((tier - 1, result));
        self.queue.nonempty.store(true, Ordering::Release);
        drop(q);
        self.notifier.notify();
        Ok(())
    }
}

impl<P: PrimaryBackend> State<P> {
    pub(super) fn poll_gated(&mut self, queue: &CompletionQueue) {
        if !self.gate_spent {
            self.gate_spent = true;
            let _ = self.poll_now(queue);
        }
    }

    /// Collects finished jobs: the completion queue, then at most
    /// [`MAX_FINISHED_PER_POLL`] from each tier.  True if a tier may hold more.
    pub(super) fn poll_now(&mut self, queue: &CompletionQueue) -> bool {
        if queue.nonempty.load(Ordering::Acquire) {
            let mut buf = std::mem::take(&mut self.queue_buf);
            {
                let mut q = queue.items.lock();
                std::mem::swap(&mut *q, &mut buf);
                queue.nonempty.store(false, Ordering::Release);
            }
            for (t, r) in buf.drain(..) {
                self.finish_job(t, r);
            }
            self.queue_buf = buf;
        }
        if self.tiers.is_empty() {
            return false;
        }
        let mut more = false;
        let mut results = std::mem::take(&mut self.results);
        for t in 0..self.tiers.len() {
            results.clear();
            self.tiers[t]
                .tier
                .poll_finished(MAX_FINISHED_PER_POLL, &mut results);
            if results.len() >= MAX_FINISHED_PER_POLL {
                // The rest waits for the next poll.
                self.tiers[t].c.poll_limit_reached += 1;
                more = true;
            }
            for r in results.drain(..) {
                self.finish_job(t, r);
            }
        }
        self.results = results;
        // Tier failures reach the log (and the log callback) as they happen.
        self.gather_errors();
        more
    }

    pub(super) fn tier_bug(&mut self, tier: &str, message: String) {
        self.c.tier_bugs += 1;
        let text = Error::Tier {
            tier: tier.to_string(),
            message,
        }
        .to_string();
        self.log(text);
    }

    pub(super) fn log(&mut self, text: String) {
        // Also to the engine's log callback, if it installed one.
        log::warn!(target: "kvtier::tiering", "{text}");
        if self.opts.error_log_capacity == 0 {
            return;
        }
        while self.errors.len() >= self.opts.error_log_capacity {
            self.errors.pop_front();
        }
        self.errors.push_back(text);
    }

    pub(super) fn gather_errors(&mut self) {
        let mut strings = std::mem::take(&mut self.strings);
        for t in 0..self.tiers.len() {
            strings.clear();
            self.tiers[t].tier.take_errors(&mut strings);
            let name = self.tiers[t].name.clone();
            for m in strings.drain(..) {
                self.log(
                    Error::Tier {
                        tier: name.to_string(),
                        message: m,
                    }
                    .to_string(),
                );
            }
        }
        self.strings = strings;
    }
}
