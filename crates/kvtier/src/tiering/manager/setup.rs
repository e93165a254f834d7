//! Building a manager: its primary tier, the secondary tiers added before
//! the first request, and the slot memory or region kept for them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::{
    CompletionQueue, CounterMemory, Detector, Error, FastMap, Handout, MAX_SECONDARY_TIERS,
    Manager, ManagerOptions, ManagerStats, Notifier, PrimaryBackend, RequestNames, Result,
    SecondaryTier, SlotMemory, SlotOwner, State, StorePlan, TierCounters, TierEntry, TierOptions,
};

impl Manager {
    /// A manager over the CPU primary tier `primary`, with no secondary tier yet.
    pub fn new(primary: crate::primary::PrimaryTier, opts: ManagerOptions) -> Manager {
        Manager::with_backend(primary, opts)
    }
}

impl<P: PrimaryBackend> Manager<P> {
    /// A manager over `primary` with no secondary tier yet.
    pub fn with_backend(mut primary: P, opts: ManagerOptions) -> Manager<P> {
        if opts.kv_groups {
            primary.enable_kv_groups();
        }
        Manager {
            state: Mutex::new(State {
                primary,
                opts,
                tiers: Vec::new(),
                jobs: FastMap::default(),
                next_job: 0,
                epoch: 0,
                names: RequestNames::default(),
                reqs: FastMap::default(),
                gate_spent: false,
                steps: 0,
                tracked_reqs: Vec::new(),
                staged: Vec::new(),
                parked_reqs: Vec::new(),
                held: false,
                started: false,
                closed: false,
                shutdown_failed: false,
                keepalive: None,
                c: ManagerStats::default(),
                obs: super::report::Observations::default(),
                errors: VecDeque::new(),
                pending_events: VecDeque::new(),
                pending_per_tier: vec![0],
                listener: None,
                handout: Handout::default(),
                results: Vec::new(),
                queue_buf: Vec::new(),
                keys_a: Vec::new(),
                keys_b: Vec::new(),
                slots_b: Vec::new(),
                slots_c: Vec::new(),
                found: Vec::new(),
                plan: StorePlan::default(),
                events: Vec::new(),
                ids: Vec::new(),
                strings: Vec::new(),
                pins: super::pins::PinSets::default(),
                spare_jobs: Vec::new(),
                spare_staged: Vec::new(),
                no_request: std::sync::Arc::new(crate::request::RequestInfo {
                    name: String::new(),
                    params: Vec::new(),
                    user_data: 0,
                    filter: crate::request::TierFilter::All,
                }),
            }),
            queue: CompletionQueue::default(),
            tier_count: AtomicUsize::new(0),
            completes_through_queue: AtomicU64::new(0),
            queue_tier_names: Mutex::new(Vec::new()),
            notifier: Notifier::new(),
            slots: std::sync::OnceLock::new(),
        }
    }

    /// Adds a secondary tier with default options; see [`Manager::add_tier_with`].
    pub fn add_tier(&self, tier: Box<dyn SecondaryTier>) -> Result<usize> {
        self.add_tier_with(tier, TierOptions::default())
    }

    /// Adds a secondary tier at the end of the list and returns its index
    /// (1 for the first).  Allowed until the first request starts.
    pub fn add_tier_with(&self, tier: Box<dyn SecondaryTier>, opts: TierOptions) -> Result<usize> {
        let mut s = self.enter("add_tier")?;
        if s.started {
            return Err(Error::InvalidArgument(format!(
                "cannot add tier {:?}: tiers must be added before the first request starts",
                tier.name()
            )));
        }
        if s.tiers.len() >= MAX_SECONDARY_TIERS {
            return Err(Error::InvalidArgument(format!(
                "cannot add tier {:?}: at most {MAX_SECONDARY_TIERS} secondary tiers",
                tier.name()
            )));
        }
        if let Some(bp) = &opts.backpressure {
            bp.validate()?;
        }
        if let Some(n) = tier.slot_count() {
            covers(
                s.primary.capacity(),
                n,
                &format!("the slot memory of tier {:?}", tier.name()),
            )?;
        }
        let mut tier = tier;
        tier.set_notifier(self.notifier.clone());
        let events_on = opts.events && s.primary.event_capacity() > 0;
        tier.set_event_capacity(if events_on {
            s.primary.event_capacity()
        } else {
            0
        });
        let name: Arc<str> = Arc::from(tier.name());
        let entry = TierEntry {
            medium: tier.medium(),
            locality: tier.locality(),
            tier,
            name,
            detector: opts.backpressure.map(Detector::new),
            stores_in_flight: 0,
            events_on,
            c: TierCounters::default(),
            reported: CounterMemory::default(),
        };
        let through_queue = entry.tier.reports_through_complete_job();
        self.queue_tier_names.lock().push(entry.name.clone());
        s.tiers.push(entry);
        s.pending_per_tier.push(0);
        let n = s.tiers.len();
        if through_queue {
            self.completes_through_queue
                .fetch_or(1 << (n - 1), Ordering::Relaxed);
        }
        self.tier_count.store(n, Ordering::Release);
        Ok(n)
    }

    /// Keeps `keep` (a region or slot memory) alive until a successful
    /// shutdown; if a tier fails to shut down it is never released, so the
    /// mapping stays valid for that tier.  Memory of fewer slots than the
    /// primary tier has is refused ([`Error::InvalidArgument`]).
    pub fn attach_region(&self, keep: impl SlotOwner) -> Result<()> {
        let mut s = self.enter("attach_region")?;
        covers(s.primary.capacity(), keep.slot_count(), "the region")?;
        s.keepalive = Some(Box::new(keep));
        Ok(())
    }

    /// An error unless `slots` holds every slot of the primary tier (a
    /// tier copying through it would otherwise be handed slot ids past its
    /// end); for checking a region before opening a tier over it.
    pub fn check_slots(&self, slots: &SlotMemory) -> Result<()> {
        let s = self.enter("check_slots")?;
        covers(s.primary.capacity(), slots.slot_count(), "the region")
    }

    /// Records the slot memory the primary tier's slots live in, so
    /// callers that did not build it (a manager made from a configuration)
    /// can find it.  Set once; a second call is an error, and so is memory
    /// of fewer slots than the primary tier has.
    pub fn set_slot_memory(&self, slots: SlotMemory) -> Result<()> {
        self.check_slots(&slots)?;
        self.slots
            .set(slots)
            .map_err(|_| Error::InvalidArgument("the manager's slot memory is already set".into()))
    }

    /// The slot memory recorded with [`Manager::set_slot_memory`], if any.
    pub fn slot_memory(&self) -> Option<&SlotMemory> {
        self.slots.get()
    }
}

/// An error unless memory of `slot_count` slots (`what`) holds every one
/// of the primary tier's `capacity` slots.
fn covers(capacity: u32, slot_count: u32, what: &str) -> Result<()> {
    if slot_count >= capacity {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{what} has {slot_count} slots, fewer than the primary tier's {capacity}: \
         slot ids {slot_count} to {} would fall outside it (give it at least {capacity} slots)",
        capacity - 1
    )))
}
