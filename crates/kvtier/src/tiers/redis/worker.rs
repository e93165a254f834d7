//! The tier's workers, in the kit's worker pool: each owns one connection
//! and takes tasks from one shared queue, so the number of connections is
//! bounded by the number of workers.  Workers report every task back
//! through a channel that the tier reads without blocking.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::conn::{Conn, Endpoint, Op};
use super::header::{self, Corruption};
use super::outcome::{Cause, Reply};
use crate::key::Key;
use crate::region::SlotMemory;
use crate::tiering::{Direction, JobRef};
use crate::tiers::kit::{PoolCore, WorkQueue};

/// Work for a worker.
pub(super) enum Task {
    /// Store the job's keys at these positions (the others are already in Redis).
    Store(JobRef, Vec<usize>),
    /// Load every key of the job.
    Load(JobRef),
    /// Check which of these keys exist.
    Exists(Vec<Key>),
    /// Connect and PING, for the circuit breaker.
    Probe,
}

/// A finished task, as a worker reports it.
pub(super) enum Done {
    /// A store or load job.
    Job(JobDone),
    /// An existence check: the keys and whether each exists, or why it failed.
    Exists {
        /// The keys checked.
        keys: Vec<Key>,
        /// Per key, whether it exists (empty on failure).
        present: Vec<bool>,
        /// Why the check failed, if it did.
        failure: Option<Cause>,
    },
    /// A probe: whether the server answered.
    Probe(Option<Cause>),
}

/// The outcome of one store or load job.
pub(super) struct JobDone {
    /// The job.
    pub job: JobRef,
    /// Store or load.
    pub direction: Direction,
    /// Why the job failed as a whole (transport, server, breaker), if it did.
    pub failure: Option<Cause>,
    /// Positions (in the job) of the keys that were stored or loaded.
    pub done: Vec<usize>,
    /// Positions of keys a load found absent.
    pub missing: Vec<usize>,
    /// Positions of keys whose value is a sound block of another size (a
    /// different layout sharing the namespace): not served, not deleted.
    pub mismatched: Vec<usize>,
    /// Positions of keys a load found corrupt, and why.
    pub corrupt: Vec<(usize, Corruption)>,
    /// How many corrupt values were deleted.
    pub deleted: usize,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Time from the first command to the last reply.
    pub duration: Duration,
    /// Network round trips made.
    pub round_trips: u64,
}

/// What the workers and the tier share besides the queue.
#[derive(Default)]
pub(super) struct Shared {
    /// Whether the circuit breaker is open (workers then fail tasks fast).
    pub breaker_open: AtomicBool,
    /// Failed attempts to connect (and authenticate, select the database).
    pub connect_failures: AtomicU64,
    /// [`Cause::index`] of the last failed attempt to connect.
    pub last_connect_cause: AtomicUsize,
}

/// The queue: tasks in order (a probe goes first).
#[derive(Default)]
pub(super) struct Tasks(pub VecDeque<Task>);

impl WorkQueue for Tasks {
    type Item = Task;

    fn pick(&mut self, _worker: usize) -> Option<Task> {
        self.0.pop_front()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a worker needs to do its work.
pub(super) struct WorkerCtx {
    /// Queue shared with the tier.
    pub shared: Arc<Shared>,
    /// Where finished tasks go.
    pub done: Sender<Done>,
    /// How to connect.
    pub endpoint: Endpoint,
    /// The region's slots.
    pub slots: SlotMemory,
    /// Key prefix (`namespace:`).
    pub prefix: Vec<u8>,
    /// Expiry of stored blocks in milliseconds.
    pub ttl_ms: Option<u64>,
    /// Most value bytes per round trip.
    pub pipeline_bytes: usize,
    /// Most commands per round trip.
    pub pipeline_ops: usize,
}

/// A worker: its connection (made on its first task) and buffers, and
/// what it does with each task it takes: run it, report it.
pub(super) fn worker(ctx: WorkerCtx) -> impl FnMut(Task, &PoolCore<Tasks>) + Send + 'static {
    let mut conn: Option<Conn> = None;
    let mut names = Names::new(&ctx.prefix);
    move |task, core| {
        // What to report if the task panics, so that it is still reported
        // exactly once and the worker stays alive.
        let fallback = match &task {
            Task::Store(job, _) => Done::Job(JobDone::failed(job.clone(), Direction::Store)),
            Task::Load(job) => Done::Job(JobDone::failed(job.clone(), Direction::Load)),
            Task::Exists(keys) => Done::Exists {
                keys: keys.clone(),
                present: Vec::new(),
                failure: Some(Cause::Other),
            },
            Task::Probe => Done::Probe(Some(Cause::Other)),
        };
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            execute(&ctx, &mut conn, &mut names, task)
        }))
        .unwrap_or_else(|_| {
            conn = None;
            names = Names::new(&ctx.prefix);
            fallback
        });
        // Report before going idle, so that a drain that sees every worker
        // idle also finds every report in the channel.  A send fails only
        // when the tier is gone, and then nobody waits for the report.
        let _ = ctx.done.send(done);
        core.notify();
    }
}

/// The Redis key names of a batch, built in one reused buffer.
struct Names {
    prefix_len: usize,
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Names {
    fn new(prefix: &[u8]) -> Names {
        Names {
            prefix_len: prefix.len(),
            buf: prefix.to_vec(),
            ends: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.buf.truncate(self.prefix_len);
        self.ends.clear();
    }

    fn push(&mut self, key: &Key) {
        // Each name is the prefix followed by the key's hex; the prefix is
        // copied once per name so every name is one contiguous slice.
        if !self.ends.is_empty() {
            self.buf.extend_from_within(..self.prefix_len);
        }
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for b in key.as_bytes() {
            self.buf.push(HEX[(b >> 4) as usize]);
            self.buf.push(HEX[(b & 15) as usize]);
        }
        self.ends.push(self.buf.len());
    }

    fn get(&self, i: usize) -> &[u8] {
        let end = self.ends[i];
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..end]
    }
}

/// The Redis key name of `key` under `prefix` (for tests and tools).
pub(super) fn key_name(prefix: &[u8], key: &Key) -> Vec<u8> {
    let mut n = Names::new(prefix);
    n.push(key);
    n.get(0).to_vec()
}

fn ensure<'a>(ctx: &WorkerCtx, conn: &'a mut Option<Conn>) -> Result<&'a mut Conn, Cause> {
    if conn.is_none() {
        match ctx.endpoint.connect() {
            Ok(c) => *conn = Some(c),
            Err(f) => {
                let shared = &ctx.shared;
                shared
                    .last_connect_cause
                    .store(f.cause.index(), Ordering::Relaxed);
                shared.connect_failures.fetch_add(1, Ordering::Release);
                return Err(f.cause);
            }
        }
    }
    Ok(conn.as_mut().expect("connected above"))
}

/// One pipelined round trip; a failure that broke the connection drops it
/// (the next task connects again).
fn round_trip(
    ctx: &WorkerCtx,
    conn: &mut Option<Conn>,
    ops: &[Op<'_>],
    f: &mut dyn FnMut(usize, Reply<'_>),
) -> Result<(), Cause> {
    let c = ensure(ctx, conn)?;
    c.run(ops, f).map_err(|fail| {
        if fail.drop_conn {
            *conn = None;
        }
        fail.cause
    })
}

fn execute(ctx: &WorkerCtx, conn: &mut Option<Conn>, names: &mut Names, task: Task) -> Done {
    let open = ctx.shared.breaker_open.load(Ordering::Acquire);
    match task {
        Task::Probe => {
            let r = ensure(ctx, conn).and_then(|c| c.ping().map_err(|f| f.cause));
            if r.is_err() {
                *conn = None;
            }
            Done::Probe(r.err())
        }
        Task::Exists(keys) => {
            if open {
                return Done::Exists {
                    keys,
                    present: Vec::new(),
                    failure: Some(Cause::BreakerOpen),
                };
            }
            names.clear();
            for k in &keys {
                names.push(k);
            }
            let mut present = Vec::with_capacity(keys.len());
            let mut failure = None;
            let mut start = 0;
            while start < keys.len() {
                let end = (start + ctx.pipeline_ops).min(keys.len());
                let ops: Vec<Op<'_>> = (start..end).map(|i| Op::Exists(names.get(i))).collect();
                let r = round_trip(ctx, conn, &ops, &mut |_, r| match r {
                    Reply::Int(n) => present.push(n > 0),
                    Reply::Error(c) => {
                        failure.get_or_insert(c);
                    }
                    _ => {
                        failure.get_or_insert(Cause::Other);
                    }
                });
                if let Err(c) = r {
                    failure = Some(c);
                }
                if failure.is_some() {
                    present.clear();
                    break;
                }
                start = end;
            }
            Done::Exists {
                keys,
                present,
                failure,
            }
        }
        Task::Store(job, positions) => {
            let mut d = JobDone::new(job, Direction::Store);
            if open {
                d.failure = Some(Cause::BreakerOpen);
                return Done::Job(d);
            }
            store(ctx, conn, names, &positions, &mut d);
            Done::Job(d)
        }
        Task::Load(job) => {
            let mut d = JobDone::new(job, Direction::Load);
            if open {
                d.failure = Some(Cause::BreakerOpen);
                return Done::Job(d);
            }
            load(ctx, conn, names, &mut d);
            Done::Job(d)
        }
    }
}

impl JobDone {
    /// A job that failed before doing anything (a panic in the worker).
    fn failed(job: JobRef, direction: Direction) -> JobDone {
        let mut d = JobDone::new(job, direction);
        d.failure = Some(Cause::Other);
        d
    }

    /// An outcome with nothing done yet.
    pub(super) fn new(job: JobRef, direction: Direction) -> JobDone {
        JobDone {
            job,
            direction,
            failure: None,
            done: Vec::new(),
            missing: Vec::new(),
            mismatched: Vec::new(),
            corrupt: Vec::new(),
            deleted: 0,
            bytes: 0,
            duration: Duration::ZERO,
            round_trips: 0,
        }
    }
}

/// Splits `count` blocks into round trips of at most `pipeline_ops` commands
/// and `pipeline_bytes` bytes (at least one block each).
fn chunk_len(ctx: &WorkerCtx, remaining: usize) -> usize {
    let per = ctx.slots.slot_bytes() + header::MAX_LEN;
    let by_bytes = (ctx.pipeline_bytes / per).max(1);
    remaining.min(by_bytes).min(ctx.pipeline_ops.max(1))
}

fn store(
    ctx: &WorkerCtx,
    conn: &mut Option<Conn>,
    names: &mut Names,
    positions: &[usize],
    d: &mut JobDone,
) {
    let job = d.job.clone();
    names.clear();
    for &p in positions {
        names.push(&job.keys[p]);
    }
    let slot_bytes = ctx.slots.slot_bytes();
    let t0 = Instant::now();
    let mut headers: Vec<[u8; header::MAX_LEN]> = Vec::new();
    let mut header_lens: Vec<usize> = Vec::new();
    let mut payloads: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    while start < positions.len() {
        let n = chunk_len(ctx, positions.len() - start);
        headers.clear();
        header_lens.clear();
        payloads.clear();
        for (i, &p) in positions[start..start + n].iter().enumerate() {
            // SAFETY: a store job's slots are pinned until the job is
            // reported finished, so nobody writes them while we read.
            let payload = match unsafe { ctx.slots.slot(job.slots[p]) } {
                Ok(s) => s,
                Err(_) => {
                    d.failure = Some(Cause::Other);
                    d.duration = t0.elapsed();
                    return;
                }
            };
            headers.push([0u8; header::MAX_LEN]);
            let len = header::encode(&job.keys[p], payload, &mut headers[i]);
            header_lens.push(len);
            payloads.push(payload);
        }
        let ops: Vec<Op<'_>> = (0..n)
            .map(|i| Op::Set {
                name: names.get(start + i),
                header: &headers[i][..header_lens[i]],
                payload: payloads[i],
                ttl_ms: ctx.ttl_ms,
            })
            .collect();
        d.round_trips += 1;
        let mut failure = None;
        let r = round_trip(ctx, conn, &ops, &mut |i, r| match r {
            Reply::Error(c) => {
                failure.get_or_insert(c);
            }
            _ => {
                d.done.push(positions[start + i]);
                d.bytes += slot_bytes as u64;
            }
        });
        if let Err(c) = r {
            failure = Some(c);
        }
        if failure.is_some() {
            d.failure = failure;
            break;
        }
        start += n;
    }
    d.duration = t0.elapsed();
}

fn load(ctx: &WorkerCtx, conn: &mut Option<Conn>, names: &mut Names, d: &mut JobDone) {
    let job = d.job.clone();
    names.clear();
    for k in &job.keys {
        names.push(k);
    }
    let slot_bytes = ctx.slots.slot_bytes();
    let t0 = Instant::now();
    let mut start = 0;
    while start < job.keys.len() {
        let n = chunk_len(ctx, job.keys.len() - start);
        let ops: Vec<Op<'_>> = (start..start + n).map(|i| Op::Get(names.get(i))).collect();
        d.round_trips += 1;
        let r = round_trip(ctx, conn, &ops, &mut |i, r| {
            let p = start + i;
            match r {
                Reply::Nil => d.missing.push(p),
                Reply::Bulk(v) => match header::verify(v, &job.keys[p], slot_bytes) {
                    Ok(payload) => {
                        // SAFETY: a load job's slots are reserved (write
                        // pending) for it until it is reported finished.
                        match unsafe { ctx.slots.slot_mut(job.slots[p]) } {
                            Ok(dst) => {
                                dst.copy_from_slice(payload);
                                d.done.push(p);
                                d.bytes += slot_bytes as u64;
                            }
                            Err(_) => {
                                d.failure.get_or_insert(Cause::Other);
                            }
                        }
                    }
                    Err(Corruption::WrongSize) => d.mismatched.push(p),
                    Err(why) => d.corrupt.push((p, why)),
                },
                Reply::Error(c) => {
                    d.failure.get_or_insert(c);
                }
                Reply::Ok | Reply::Int(_) => d.corrupt.push((p, Corruption::NotABlock)),
            }
        });
        if let Err(c) = r {
            d.failure = Some(c);
        }
        if d.failure.is_some() {
            break;
        }
        start += n;
    }
    d.duration = t0.elapsed();
    if !d.corrupt.is_empty() && d.failure.is_none() {
        // Delete what was rejected so no later lookup finds it.  Best
        // effort: a failure here leaves the value, which is rejected again.
        let ops: Vec<Op<'_>> = d
            .corrupt
            .iter()
            .map(|&(p, _)| Op::Del(names.get(p)))
            .collect();
        let mut deleted = 0;
        let _ = round_trip(ctx, conn, &ops, &mut |_, r| {
            if matches!(r, Reply::Int(n) if n > 0) {
                deleted += 1;
            }
        });
        d.deleted = deleted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefix_and_hex() {
        let mut n = Names::new(b"ns:");
        n.push(&Key::new(&[0x01, 0xab]).unwrap());
        n.push(&Key::new(b"z").unwrap());
        assert_eq!(n.get(0), b"ns:01ab");
        assert_eq!(n.get(1), b"ns:7a");
        n.clear();
        n.push(&Key::new(&[0xff]).unwrap());
        assert_eq!(n.get(0), b"ns:ff");
        assert_eq!(key_name(b"p:", &Key::new(&[0x10]).unwrap()), b"p:10");
    }
}
