//! Where a request handle stands: [`Manager::request_state`], and the
//! text of every [`Error::UnknownRequest`] the manager answers, which says
//! which of those states made the handle unknown to the call.

use super::PrimaryBackend;
use super::{Manager, Result, State};
use crate::error::Error;
use crate::request::{RequestId, RequestState};

impl<P: PrimaryBackend> Manager<P> {
    /// Where `request` stands: never issued by this manager (0, or a
    /// handle it never handed out), active, finished but kept by its
    /// stores in flight, parked keys or staged promotions
    /// ([`RequestState::Finishing`]; it may hold load pins too), finished
    /// with only pins its loads took still held
    /// ([`RequestState::LoadsPinned`]), or gone.  Changes nothing.
    pub fn request_state(&self, request: RequestId) -> Result<RequestState> {
        let s = self.enter("request_state")?;
        Ok(s.request_state(request))
    }
}

impl<P: PrimaryBackend> State<P> {
    /// [`Manager::request_state`] under the lock.
    pub(super) fn request_state(&self, id: RequestId) -> RequestState {
        if !self.names.was_issued(id) {
            return RequestState::NeverIssued;
        }
        match self.reqs.get(&id) {
            Some(st) if !st.finished => RequestState::Active,
            Some(_) => RequestState::Finishing,
            None if self.primary.holds_finished_loads(id) => RequestState::LoadsPinned,
            None => RequestState::Gone,
        }
    }

    /// The [`Error::UnknownRequest`] of a call that does not take `id`,
    /// saying where `id` stands.
    pub(super) fn unknown_request(&self, id: RequestId) -> Error {
        Error::UnknownRequest(self.request_state(id).why_unknown(id, "manager"))
    }
}
