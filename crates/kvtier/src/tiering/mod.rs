//! The tiering manager and the secondary-tier contract.

mod adapter_stats;
pub mod backend;
mod backpressure;
mod calls;
mod counter_memory;
mod listen;
mod manager;
mod notify;
mod readiness;
mod tier;

pub use crate::events::TierEvent;
pub use crate::primary::DropCount;
pub use adapter_stats::{ADAPTER_STATS, AdapterStats};
pub use backend::PrimaryBackend;
pub use backpressure::{BackpressureConfig, PressurePolicy};
pub use calls::ManagerCalls;
pub use listen::{EventBatch, EventListener};
pub use manager::{
    DropReport, LookupAnswer, LookupResult, MAX_PIN_SET_NAME, Manager, ManagerOptions, ManagerStat,
    ManagerStats, MissReason, PinOutcome, PinSetInfo, PinningOptions, ProgressOptions,
    PromotionAnswer, RequestParams, RequestReport, RequestReportListener, StartedRequest,
    TakenBatch, TakenEvents, TierOptions,
};
pub use manager::{EventBuffer, QueuedEvents};
pub(crate) use manager::{MANAGER_STATS, TIER_MANAGED_STATS};
pub use notify::Notifier;
pub use readiness::{Readiness, TierReadiness};
pub use tier::{
    DEFAULT_TIER_EVENT_CAPACITY, Direction, Job, JobId, JobRef, JobResult, MAX_EVENTS_PER_TAKE,
    MAX_FINISHED_PER_POLL, OffloadPolicy, SecondaryTier, TierLookup,
};
