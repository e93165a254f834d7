//! What a store's calls write, for the manager and the primary tier alike:
//! the plan of `prepare_store` ([`PlanOut`]) and the report of
//! `complete_store` ([`write_completion`]).  One place for each rule, so
//! both objects answer the same way.

use super::boundary::{Failure, out_ref, out_slice};
use super::dialect::{kvtier_key_buf, kvtier_store_completion, kvtier_store_plan};
use kvtier_core::error::{Error, Result};
use kvtier_core::primary::{CompleteStoreReport, StoreOutcome, StorePlan};

/// The caller's `kvtier_store_plan` and its arrays, checked before the
/// store is planned: `store_indices` and `slots` are required (room for
/// `len` entries each; NULL allowed when `len` is 0), `evicted` may be
/// NULL (the caller does not want the evicted keys; their number is
/// written all the same).
pub(crate) struct PlanOut<'a> {
    plan: &'a mut kvtier_store_plan,
    store_indices: &'a mut [usize],
    slots: &'a mut [u32],
    evicted: Option<&'a mut [kvtier_key_buf]>,
}

impl<'a> PlanOut<'a> {
    /// Checks `plan_out` and its arrays for a store of `len` keys.
    ///
    /// # Safety
    /// `plan_out` NULL or valid for reads and writes; its arrays NULL or
    /// valid for `len` writes each.
    pub(crate) unsafe fn new(
        plan_out: *mut kvtier_store_plan,
        len: usize,
    ) -> Result<PlanOut<'a>, Failure> {
        let plan = unsafe { out_ref(plan_out, "plan_out") }?;
        let store_indices =
            unsafe { out_slice(plan.store_indices, len, "plan_out->store_indices") }?;
        let slots = unsafe { out_slice(plan.slots, len, "plan_out->slots") }?;
        let evicted = if plan.evicted.is_null() {
            None
        } else {
            Some(unsafe { out_slice(plan.evicted, len, "plan_out->evicted") }?)
        };
        Ok(PlanOut {
            plan,
            store_indices,
            slots,
            evicted,
        })
    }

    /// Writes what `prepare_store` planned: on a refusal only the counts
    /// (0) and `refused`, the arrays untouched; else the positions
    /// (`positions` writes the first `plan.to_store.len()` entries of the
    /// slice it is given: each key's position in the batch), the slots,
    /// the evicted keys (unless `evicted` is NULL) and the counts.
    pub(crate) fn write(
        self,
        outcome: StoreOutcome,
        plan: &StorePlan,
        positions: impl FnOnce(&mut [usize]),
    ) {
        let refused = outcome == StoreOutcome::Refused;
        self.plan.refused = refused;
        if refused {
            self.plan.store_count = 0;
            self.plan.evicted_count = 0;
            return;
        }
        let stored = plan.to_store.len();
        positions(&mut self.store_indices[..stored]);
        self.slots[..stored].copy_from_slice(&plan.slots);
        if let Some(evicted) = self.evicted {
            for (out, key) in evicted.iter_mut().zip(&plan.evicted) {
                let bytes = key.as_bytes();
                out.len = bytes.len();
                out.bytes[..bytes.len()].copy_from_slice(bytes);
            }
        }
        self.plan.store_count = stored;
        self.plan.evicted_count = plan.evicted.len();
    }
}

/// The C form of a completion report.
fn completion_of(r: &CompleteStoreReport) -> kvtier_store_completion {
    kvtier_store_completion {
        ready: r.ready,
        dropped: r.dropped,
        ignored: r.ignored,
        foreign: r.foreign,
        already_ready: r.already_ready,
    }
}

/// Writes the report of a `complete_store` to `*result_out` (unless it is
/// NULL) and returns its status: the report is written both when every
/// key named was acted on (`KVTIER_STATUS_OK`) and when some were left
/// alone (`KVTIER_STATUS_KEYS_IGNORED`, the core's answer); any other
/// error writes nothing.
///
/// # Safety
/// `result_out` NULL or valid for writes.
pub(crate) unsafe fn write_completion(
    answer: Result<CompleteStoreReport>,
    result_out: *mut kvtier_store_completion,
) -> Result<(), Failure> {
    let report = match &answer {
        Ok(report) | Err(Error::KeysIgnored { report, .. }) => *report,
        Err(_) => return answer.map(|_| ()).map_err(Failure::from),
    };
    if let Some(out) = unsafe { result_out.as_mut() } {
        *out = completion_of(&report);
    }
    answer.map(|_| ()).map_err(Failure::from)
}
