//! The redis tier itself: [`RedisTier`] (see the module above for how it
//! behaves).  Here the tier, its submissions and its `SecondaryTier`
//! calls; in `tier/` what it knows about keys (`known.rs`), its circuit
//! breaker (`breaker.rs`) and how it takes in what the workers did
//! (`collect.rs`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::events::Event;
use crate::key::Key;
use crate::region::SlotMemory;
use crate::request::{Locality, Medium, Request};
use crate::stats::Stat;
use crate::tiering::{DEFAULT_TIER_EVENT_CAPACITY, JobRef, JobResult, SecondaryTier, TierLookup};
use hashbrown::{HashMap, HashSet};

use super::config::RedisTierConfig;
use super::conn::Endpoint;
use super::outcome::Cause;
use super::stats::{self, Counters};
use super::worker::{Done, Shared, Task, Tasks, WorkerCtx};
use crate::tiers::kit::{Announcer, Reporter, Wake, WorkerPool};

mod breaker;
mod collect;
mod known;

use breaker::Breaker;
use known::Known;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// The redis secondary tier.  See the module docs.
pub struct RedisTier {
    name: String,
    ttl: Option<Duration>,
    miss_cache: Duration,
    breaker_failures: u32,
    breaker_cooldown: Duration,
    connections: usize,
    shared: Arc<Shared>,
    done_rx: Receiver<Done>,
    pool: WorkerPool<Tasks>,
    known: Map<Key, Known>,
    /// Known keys in the order they were learnt, with the time (entries
    /// whose time no longer matches `known` are stale): expiry order under
    /// a TTL, and the order in which keys are forgotten beyond `max_known`.
    order: VecDeque<(Key, Instant)>,
    max_known: usize,
    /// Keys with an existence check queued or running.
    pending: Set<Key>,
    /// Existence checks gathered in this step.
    batch: Vec<Key>,
    /// Keys found absent, until the given time.
    absent: Map<Key, Instant>,
    absent_order: VecDeque<(Key, Instant)>,
    finished: VecDeque<JobResult>,
    events: Announcer,
    reporter: Reporter,
    /// `host:port` list, for failure descriptions.
    nodes: String,
    /// Connection failures the workers counted that were already described.
    connect_failures_seen: u64,
    in_flight: usize,
    breaker: Breaker,
    counters: Counters,
    closed: bool,
    /// Slots of the memory the workers copy through.
    slot_count: u32,
    /// The layout fingerprint the namespace was checked against.
    layout_fingerprint: Option<String>,
    /// The configuration for namespace-wide commands (`admin`).
    admin: Box<RedisTierConfig>,
    /// Whether to clear the namespace at shutdown.
    clear_at_shutdown: bool,
}

/// Most existence checks sent in one batch; a larger step sends several.
const EXISTS_BATCH: usize = 1024;

impl RedisTier {
    /// Creates the tier named `config.name` over `slots`.  Checks the configuration
    /// and starts the worker threads; connects nothing yet (workers connect
    /// on their first task), so it never waits on the network.
    pub fn new(config: RedisTierConfig, slots: SlotMemory) -> Result<RedisTier> {
        config.check()?;
        let endpoint = Endpoint::new(&config)?;
        if let Some(f) = &config.layout_fingerprint {
            super::admin::settle_layout(&config, f)?;
        }
        let shared = Arc::new(Shared::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let mut prefix = config.namespace.clone().into_bytes();
        prefix.push(b':');
        let ttl_ms = config
            .ttl
            .map(|t| t.as_millis().min(u64::MAX as u128) as u64);
        let pool = WorkerPool::start(
            config.connections,
            "a redis tier worker thread",
            |i| format!("kvtier-redis-{i}"),
            |_| {
                super::worker::worker(WorkerCtx {
                    shared: shared.clone(),
                    done: tx.clone(),
                    endpoint: endpoint.clone(),
                    slots: slots.clone(),
                    prefix: prefix.clone(),
                    ttl_ms,
                    pipeline_bytes: config.pipeline_bytes,
                    pipeline_ops: config.pipeline_ops,
                })
            },
        )?;
        Ok(RedisTier {
            name: config.name.clone(),
            ttl: config.ttl,
            miss_cache: config.miss_cache,
            breaker_failures: config.breaker_failures,
            breaker_cooldown: config.breaker_cooldown,
            connections: config.connections,
            shared,
            done_rx: rx,
            pool,
            known: Map::default(),
            order: VecDeque::new(),
            max_known: config.max_known_keys,
            pending: Set::default(),
            batch: Vec::new(),
            absent: Map::default(),
            absent_order: VecDeque::new(),
            finished: VecDeque::new(),
            events: Announcer::new(DEFAULT_TIER_EVENT_CAPACITY),
            reporter: super::report::reporter(&config.name),
            nodes: config.nodes.join(","),
            connect_failures_seen: 0,
            in_flight: 0,
            breaker: Breaker::default(),
            counters: Counters::default(),
            closed: false,
            slot_count: slots.slot_count(),
            layout_fingerprint: config.layout_fingerprint.clone(),
            clear_at_shutdown: config.clear_on_shutdown,
            admin: Box::new(config.clone()),
        })
    }

    fn enqueue(&self, task: Task, front: bool) {
        self.pool.submit(Wake::One, |q| {
            if front {
                q.0.push_front(task);
            } else {
                q.0.push_back(task);
            }
        });
    }

    fn flush_batch(&mut self) {
        while !self.batch.is_empty() {
            let n = self.batch.len().min(EXISTS_BATCH);
            let keys: Vec<Key> = self.batch.drain(..n).collect();
            self.counters.exists_batches += 1;
            self.enqueue(Task::Exists(keys), false);
        }
    }
}

impl SecondaryTier for RedisTier {
    fn name(&self) -> &str {
        &self.name
    }

    fn slot_count(&self) -> Option<u32> {
        Some(self.slot_count)
    }

    fn set_notifier(&mut self, notifier: crate::tiering::Notifier) {
        self.pool.set_notifier(notifier);
    }

    fn medium(&self) -> Option<Medium> {
        Some(Medium::Storage)
    }

    fn layout_fingerprint(&self) -> Option<&str> {
        self.layout_fingerprint.as_deref()
    }

    fn locality(&self) -> Option<Locality> {
        Some(Locality::Remote)
    }

    fn lookup(&mut self, key: &Key, _request: &Request) -> TierLookup {
        self.counters.lookups += 1;
        self.collect();
        if self.closed {
            self.counters.lookup_misses += 1;
            return TierLookup::Miss;
        }
        if self.breaker.open_since.is_some() {
            self.maybe_probe();
            self.counters.lookup_breaker_misses += 1;
            self.counters.lookup_misses += 1;
            return TierLookup::Miss;
        }
        if let Some(k) = self.known.get(key) {
            if k.expires.is_none_or(|at| at > Instant::now()) {
                self.counters.lookup_hits += 1;
                return TierLookup::Hit;
            }
            self.counters.expired += 1;
            self.forget(key);
        }
        if self.pending.contains(key) {
            self.counters.lookup_retries += 1;
            return TierLookup::Retry;
        }
        if let Some(until) = self.absent.get(key) {
            if *until > Instant::now() {
                self.counters.lookup_misses += 1;
                return TierLookup::Miss;
            }
            self.absent.remove(key);
        }
        self.pending.insert(*key);
        self.batch.push(*key);
        self.counters.exists_checks += 1;
        if self.batch.len() >= EXISTS_BATCH {
            self.flush_batch();
        }
        self.counters.lookup_retries += 1;
        TierLookup::Retry
    }

    fn submit_store(&mut self, job: JobRef) {
        self.collect();
        self.counters.store_jobs += 1;
        if self.closed {
            self.counters.store_jobs_failed += 1;
            self.fail_now(&job, Cause::Cancelled);
            return;
        }
        if self.breaker.open_since.is_some() {
            self.maybe_probe();
            self.counters.stores_dropped += 1;
            self.counters.blocks_dropped += job.keys.len() as u64;
            self.counters.store_jobs_failed += 1;
            self.fail_now(&job, Cause::BreakerOpen);
            return;
        }
        let now = Instant::now();
        let positions: Vec<usize> = job
            .keys
            .iter()
            .enumerate()
            .filter(|(_, k)| {
                self.known
                    .get(*k)
                    .is_none_or(|e| e.expires.is_some_and(|at| at <= now))
            })
            .map(|(i, _)| i)
            .collect();
        self.counters.blocks_skipped += (job.keys.len() - positions.len()) as u64;
        if positions.is_empty() {
            self.finished.push_back(JobResult::new(job.id, true));
            return;
        }
        self.in_flight += 1;
        self.enqueue(Task::Store(job, positions), false);
    }

    fn submit_load(&mut self, job: JobRef) {
        self.collect();
        self.counters.load_jobs += 1;
        if self.closed || self.breaker.open_since.is_some() {
            self.maybe_probe();
            self.counters.loads_rejected += 1;
            self.counters.load_jobs_failed += 1;
            let cause = if self.closed {
                Cause::Cancelled
            } else {
                Cause::BreakerOpen
            };
            self.fail_now(&job, cause);
            return;
        }
        self.in_flight += 1;
        self.enqueue(Task::Load(job), false);
    }

    fn poll_finished(&mut self, max: usize, out: &mut Vec<JobResult>) {
        self.collect();
        self.maybe_probe();
        let n = max.min(self.finished.len());
        out.extend(self.finished.drain(..n));
    }

    fn on_schedule_end(&mut self) {
        self.collect();
        if !self.closed {
            if self.breaker.open_since.is_some() {
                // Nothing goes out while the breaker is open: answer MISS.
                for k in std::mem::take(&mut self.batch) {
                    self.pending.remove(&k);
                }
            } else {
                self.flush_batch();
            }
        }
        self.maybe_probe();
        self.prune();
    }

    fn has_pending_work(&self) -> bool {
        self.in_flight > 0 || !self.finished.is_empty()
    }

    fn drain(&mut self) -> Result<()> {
        self.quiesce();
        Ok(())
    }

    fn stat_table(&self) -> Option<crate::stats::StatTable> {
        Some(stats::REDIS_STATS)
    }

    fn stats(&self) -> Vec<Stat> {
        let c = &self.counters;
        let mut v = c.stat_list();
        v.push(Stat::counter(stats::EVENTS_DROPPED, self.events.dropped()));
        c.failures.push_stats(&mut v);
        v.push(Stat::gauge(
            stats::BREAKER_OPEN,
            if self.breaker_open() { 1.0 } else { 0.0 },
        ));
        v.push(Stat::gauge(stats::KNOWN_KEYS, self.known.len() as f64));
        v.push(Stat::gauge(stats::EVENTS_QUEUED, self.events.len() as f64));
        v.push(Stat::gauge(stats::JOBS_IN_FLIGHT, self.in_flight as f64));
        v.push(Stat::gauge(stats::CONNECTIONS, self.connections as f64));
        v
    }

    fn take_events(&mut self, max: usize, out: &mut Vec<Event>) {
        self.collect();
        self.events.take(max, out);
    }

    fn set_event_capacity(&mut self, capacity: usize) {
        let known = &mut self.known;
        self.events.set_capacity(capacity, |key| {
            if let Some(k) = known.get_mut(&key) {
                k.announced = false;
            }
        });
    }

    fn take_errors(&mut self, out: &mut Vec<String>) {
        self.collect();
        self.reporter.take(out);
    }

    fn readiness(&self) -> crate::tiering::TierReadiness {
        self.readiness_now()
    }

    /// Deletes the namespace's blocks whose keys start with `key_prefix`
    /// on the server (`SCAN MATCH namespace:HEX*` and `UNLINK` in
    /// batches, the layout key never), here, on the caller's thread: an
    /// operator's call, not a per-step one; it does network I/O on a
    /// connection of its own, each command bounded by the tier's connect
    /// and command timeouts, one `SCAN` round trip per 1000 keys of the
    /// namespace.  `dropped` is what the server removed (blocks other
    /// instances stored included); `kept` is always 0: the tier does not
    /// track its transfers by key, so a store in flight that finishes
    /// after the drop writes its block again, and a load in flight may
    /// miss the block (that key fails, the rest of the load arrives).
    /// The keys this instance knew under the prefix are forgotten
    /// (announced as removed).  On a cluster [`Error::Unsupported`]
    /// (`SCAN` reaches one node); after shutdown nothing is dropped.
    fn drop_blocks(&mut self, key_prefix: &[u8]) -> Result<crate::primary::DropCount> {
        if self.admin.cluster {
            return Err(Error::Unsupported(format!(
                "dropping blocks from redis tier {}: it works on a standalone server, not a cluster",
                self.name
            )));
        }
        if self.closed {
            return Ok(crate::primary::DropCount::default());
        }
        self.collect();
        let dropped = super::admin::unlink_matching(&self.admin, "dropping blocks", key_prefix)?;
        let gone: Vec<Key> = self
            .known
            .keys()
            .filter(|k| k.as_bytes().starts_with(key_prefix))
            .copied()
            .collect();
        for k in &gone {
            self.forget(k);
        }
        Ok(crate::primary::DropCount { dropped, kept: 0 })
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.quiesce();
        self.closed = true;
        if std::mem::take(&mut self.clear_at_shutdown) {
            // The transfers are over: nothing stores into the namespace now.
            let config = &self.admin;
            match super::admin::clear(config) {
                Ok(n) => {
                    log::info!(target: "kvtier::redis", "{}: cleared {n} keys of namespace {:?} at shutdown", self.name, config.namespace)
                }
                Err(e) => {
                    log::warn!(target: "kvtier::redis", "{}: clearing the namespace at shutdown failed: {e}", self.name)
                }
            }
        }
        if self.pool.stop() {
            Ok(())
        } else {
            Err(Error::Tier {
                tier: self.name.clone(),
                message: "a redis worker thread panicked".into(),
            })
        }
    }
}

impl Drop for RedisTier {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.shutdown();
        }
    }
}

/// The Redis key a block is stored under, for tools and tests that inspect
/// the server directly.
pub fn redis_key_name(namespace: &str, key: &Key) -> Vec<u8> {
    let mut prefix = namespace.as_bytes().to_vec();
    prefix.push(b':');
    super::worker::key_name(&prefix, key)
}
