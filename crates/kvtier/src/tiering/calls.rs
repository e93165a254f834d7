//! [`ManagerCalls`]: the calls an engine makes on a manager, whether the
//! manager lives in its process ([`Manager`]) or in a node server that the
//! engine reached through a socket (`crate::server::Client`).  The C
//! handle `kvtier_manager` holds one of the two behind this trait, so
//! every manager call has one implementation per side and one meaning.

use super::{LookupAnswer, Manager, ManagerStats, PrimaryBackend, RequestParams, StartedRequest};
use crate::Result;
use crate::key::KeyBatch;
use crate::primary::{CompleteStoreReport, StoreOutcome, StorePlan};
use crate::region::SlotMemory;
use crate::request::{RequestId, RequestState};
use crate::stats::Stat;

/// The request path and the observation calls of a manager, with the
/// meaning [`Manager`]'s methods of the same names document.  A connected
/// manager answers each with the same results and errors as a local one,
/// plus [`Error::Disconnected`](crate::Error::Disconnected) once the
/// server is gone (the C API's `KVTIER_STATUS_DISCONNECTED`).
pub trait ManagerCalls: Send + Sync {
    /// [`Manager::request_begin`].
    fn request_begin(&self, name: &str, params: RequestParams) -> Result<StartedRequest>;
    /// [`Manager::lookup_prefix`].
    fn lookup_prefix(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<LookupAnswer>;
    /// [`Manager::lookup_per_key`].
    fn lookup_per_key(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<LookupAnswer>;
    /// [`Manager::prepare_load`].
    fn prepare_load(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()>;
    /// [`Manager::set_positions`].
    fn set_positions(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()>;
    /// [`Manager::touch`].
    fn touch(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<()>;
    /// [`Manager::complete_load`].
    fn complete_load(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<()>;
    /// [`Manager::prepare_store`].
    fn prepare_store(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome>;
    /// [`Manager::complete_store`].
    fn complete_store(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
    ) -> Result<CompleteStoreReport>;
    /// [`Manager::request_finished`].
    fn request_finished(&self, request: RequestId) -> Result<()>;
    /// [`Manager::request_state`].
    fn request_state(&self, request: RequestId) -> Result<RequestState>;
    /// [`Manager::schedule_end`].
    fn schedule_end(&self) -> Result<()>;
    /// [`Manager::has_pending_work`].
    fn has_pending_work(&self) -> Result<bool>;
    /// [`Manager::manager_stats`].
    fn manager_stats(&self) -> Result<ManagerStats>;
    /// [`Manager::tier_stats`].
    fn tier_stats(&self, tier: usize) -> Result<Vec<Stat>>;
    /// [`Manager::prometheus_text`].
    fn prometheus_text(&self) -> Result<String>;
    /// [`Manager::take_error_if`], with the test as a `dyn` closure: the
    /// oldest message is removed when `accept` answers true; its second
    /// value comes back.
    fn take_error_if_dyn(
        &self,
        accept: &mut dyn FnMut(&str) -> (bool, usize),
    ) -> Result<Option<usize>>;
    /// [`Manager::slot_memory`]: the slots blocks are copied through.
    fn slot_memory(&self) -> Option<&SlotMemory>;
    /// [`Manager::shutdown`]; a connected manager closes its connection
    /// (the server ends what its requests still hold).
    fn shutdown(&self) -> Result<()>;
}

impl<P: PrimaryBackend> ManagerCalls for Manager<P> {
    fn request_begin(&self, name: &str, params: RequestParams) -> Result<StartedRequest> {
        Manager::request_begin(self, name, params)
    }
    fn lookup_prefix(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<LookupAnswer> {
        Manager::lookup_prefix(self, request, keys)
    }
    fn lookup_per_key(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<LookupAnswer> {
        Manager::lookup_per_key(self, request, keys)
    }
    fn prepare_load(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        slots_out: &mut Vec<u32>,
    ) -> Result<()> {
        Manager::prepare_load(self, request, keys, slots_out)
    }
    fn set_positions(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        positions: &[u64],
    ) -> Result<()> {
        Manager::set_positions(self, request, keys, positions)
    }
    fn touch(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        Manager::touch(self, request, keys)
    }
    fn complete_load(&self, request: RequestId, keys: KeyBatch<'_>) -> Result<()> {
        Manager::complete_load(self, request, keys)
    }
    fn prepare_store(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        plan: &mut StorePlan,
    ) -> Result<StoreOutcome> {
        Manager::prepare_store(self, request, keys, plan)
    }
    fn complete_store(
        &self,
        request: RequestId,
        keys: KeyBatch<'_>,
        success: bool,
    ) -> Result<CompleteStoreReport> {
        Manager::complete_store(self, request, keys, success)
    }
    fn request_finished(&self, request: RequestId) -> Result<()> {
        Manager::request_finished(self, request)
    }
    fn request_state(&self, request: RequestId) -> Result<RequestState> {
        Manager::request_state(self, request)
    }
    fn schedule_end(&self) -> Result<()> {
        Manager::schedule_end(self)
    }
    fn has_pending_work(&self) -> Result<bool> {
        Manager::has_pending_work(self)
    }
    fn manager_stats(&self) -> Result<ManagerStats> {
        Manager::manager_stats(self)
    }
    fn tier_stats(&self, tier: usize) -> Result<Vec<Stat>> {
        Manager::tier_stats(self, tier)
    }
    fn prometheus_text(&self) -> Result<String> {
        Manager::prometheus_text(self)
    }
    fn take_error_if_dyn(
        &self,
        accept: &mut dyn FnMut(&str) -> (bool, usize),
    ) -> Result<Option<usize>> {
        Manager::take_error_if(self, accept)
    }
    fn slot_memory(&self) -> Option<&SlotMemory> {
        Manager::slot_memory(self)
    }
    fn shutdown(&self) -> Result<()> {
        Manager::shutdown(self)
    }
}
