//! What a store completion did with the keys it named: a plain record,
//! below every module that reports it (the primary tier, the manager, the
//! error a completion that left keys alone returns).

/// What `complete_store` did with its keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompleteStoreReport {
    /// Write-pending keys that became ready (success).
    pub ready: usize,
    /// Write-pending keys dropped and their slots freed (failure).
    pub dropped: usize,
    /// Absent keys ignored (late completions).
    pub ignored: usize,
    /// Keys write pending for another writer (another request, or a
    /// promotion), left alone.
    pub foreign: usize,
    /// Keys already ready, left alone.
    pub already_ready: usize,
}

impl CompleteStoreReport {
    /// Keys named that the completion left alone: absent, written by
    /// another writer, or already ready.
    pub fn left_alone(&self) -> usize {
        self.ignored + self.foreign + self.already_ready
    }
}
