//! A tier's worker threads: each takes the next item from one queue whose
//! order the tier decides ([`WorkQueue::pick`]), runs the tier's own code
//! on it, and goes back for more; the tier queues work, waits for the
//! workers to go idle, and stops them.  The manager's wake-up signal is
//! kept here, for workers (and the tier) to raise when something finished.

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::tiering::Notifier;

/// The queue of a pool: the tier's own structure (one deque, or several
/// with priorities).
pub(crate) trait WorkQueue: Default + Send + 'static {
    /// One unit of work.
    type Item: Send + 'static;

    /// The next item for worker `worker` (numbered from 0 in the order
    /// started), if any.
    fn pick(&mut self, worker: usize) -> Option<Self::Item>;

    /// Whether nothing is queued.
    fn is_empty(&self) -> bool;
}

/// Which waiting workers a submission wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// One (a single item was queued).
    One,
    /// All (several were).
    All,
}

struct State<Q> {
    queue: Q,
    /// Workers running an item now.
    active: usize,
    stop: bool,
}

/// What the pool's threads and its owner share.
pub(crate) struct PoolCore<Q> {
    state: Mutex<State<Q>>,
    work: Condvar,
    idle: Condvar,
    notifier: OnceLock<Notifier>,
}

impl<Q> PoolCore<Q> {
    /// Raises the manager's wake-up signal, once one is set.
    pub(crate) fn notify(&self) {
        if let Some(n) = self.notifier.get() {
            n.notify();
        }
    }
}

/// The worker threads of a tier.
pub(crate) struct WorkerPool<Q: WorkQueue> {
    core: Arc<PoolCore<Q>>,
    threads: Vec<JoinHandle<()>>,
}

impl<Q: WorkQueue> WorkerPool<Q> {
    /// Starts `n` workers named `name(i)`; worker `i` runs each item it
    /// takes with the function `make(i)` returns (which owns the worker's
    /// own state: buffers, a connection).  A thread that cannot start
    /// stops those already started; `what` names them in the error.
    pub(crate) fn start<F>(
        n: usize,
        what: &str,
        name: impl Fn(usize) -> String,
        mut make: impl FnMut(usize) -> F,
    ) -> crate::Result<WorkerPool<Q>>
    where
        F: FnMut(Q::Item, &PoolCore<Q>) + Send + 'static,
    {
        let core = Arc::new(PoolCore {
            state: Mutex::new(State {
                queue: Q::default(),
                active: 0,
                stop: false,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
            notifier: OnceLock::new(),
        });
        let mut pool = WorkerPool {
            core,
            threads: Vec::with_capacity(n),
        };
        for i in 0..n {
            let core = pool.core.clone();
            let run = make(i);
            let spawned = std::thread::Builder::new()
                .name(name(i))
                .spawn(move || worker(&core, i, run));
            match spawned {
                Ok(h) => pool.threads.push(h),
                Err(e) => {
                    pool.stop();
                    return Err(crate::Error::io(format!("starting {what}"), e));
                }
            }
        }
        Ok(pool)
    }

    /// Queues work with `f` and wakes workers.
    pub(crate) fn submit(&self, wake: Wake, f: impl FnOnce(&mut Q)) {
        f(&mut self.core.state.lock().queue);
        match wake {
            Wake::One => {
                self.core.work.notify_one();
            }
            Wake::All => {
                self.core.work.notify_all();
            }
        }
    }

    /// Runs `f` on the queue (to take back queued items) and returns its answer.
    pub(crate) fn with_queue<R>(&self, f: impl FnOnce(&mut Q) -> R) -> R {
        f(&mut self.core.state.lock().queue)
    }

    /// Blocks until nothing is queued and no worker runs an item.
    pub(crate) fn wait_idle(&self) {
        let mut st = self.core.state.lock();
        while st.active > 0 || !st.queue.is_empty() {
            self.core.idle.wait(&mut st);
        }
    }

    /// Raises `notifier` whenever [`PoolCore::notify`] is called from now
    /// on (set once).
    pub(crate) fn set_notifier(&self, notifier: Notifier) {
        let _ = self.core.notifier.set(notifier);
    }

    /// Raises the manager's wake-up signal, once one is set.
    pub(crate) fn notify(&self) {
        self.core.notify();
    }

    /// Stops the workers once the queue is empty and joins them; false if
    /// one of them panicked.
    pub(crate) fn stop(&mut self) -> bool {
        self.core.state.lock().stop = true;
        self.core.work.notify_all();
        let mut ok = true;
        for t in self.threads.drain(..) {
            ok &= t.join().is_ok();
        }
        ok
    }

    /// Whether the workers were stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.threads.is_empty()
    }
}

impl<Q: WorkQueue> Drop for WorkerPool<Q> {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
        }
    }
}

fn worker<Q: WorkQueue>(
    core: &PoolCore<Q>,
    index: usize,
    mut run: impl FnMut(Q::Item, &PoolCore<Q>),
) {
    loop {
        let item = {
            let mut st = core.state.lock();
            loop {
                if let Some(item) = st.queue.pick(index) {
                    st.active += 1;
                    break Some(item);
                }
                if st.stop {
                    break None;
                }
                core.work.wait(&mut st);
            }
        };
        let Some(item) = item else { return };
        run(item, core);
        let mut st = core.state.lock();
        st.active -= 1;
        if st.active == 0 && st.queue.is_empty() {
            core.idle.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Fifo(VecDeque<usize>);

    impl WorkQueue for Fifo {
        type Item = usize;
        fn pick(&mut self, _worker: usize) -> Option<usize> {
            self.0.pop_front()
        }
        fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    #[test]
    fn every_item_runs_once_before_idle_and_stop_joins() {
        let sum = Arc::new(AtomicUsize::new(0));
        let mut pool = WorkerPool::<Fifo>::start(
            3,
            "test workers",
            |i| format!("t{i}"),
            |_| {
                let sum = sum.clone();
                move |n: usize, _: &PoolCore<Fifo>| {
                    sum.fetch_add(n, Ordering::Relaxed);
                }
            },
        )
        .unwrap();
        pool.submit(Wake::All, |q| q.0.extend(1..=100));
        pool.wait_idle();
        assert_eq!(sum.load(Ordering::Relaxed), 5050);
        pool.submit(Wake::One, |q| q.0.push_back(1));
        assert!(pool.stop(), "the queued item runs before the workers stop");
        assert_eq!(sum.load(Ordering::Relaxed), 5051);
        assert!(pool.stopped());
    }

    fn pool_of(n: usize, run: impl Fn(usize) + Clone + Send + 'static) -> WorkerPool<Fifo> {
        WorkerPool::<Fifo>::start(
            n,
            "test workers",
            |i| format!("t{i}"),
            move |_| {
                let run = run.clone();
                move |item: usize, _: &PoolCore<Fifo>| run(item)
            },
        )
        .unwrap()
    }

    #[test]
    fn wait_idle_waits_for_the_item_a_worker_is_running() {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Arc::new(parking_lot::Mutex::new(release_rx));
        let done = Arc::new(AtomicUsize::new(0));
        let pool = {
            let done = done.clone();
            pool_of(1, move |_| {
                started_tx.send(()).unwrap();
                release_rx.lock().recv().unwrap();
                done.store(1, Ordering::SeqCst);
            })
        };
        pool.submit(Wake::One, |q| q.0.push_back(1));
        started.recv().unwrap();
        // The queue is empty now, but the item still runs.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            release.send(()).unwrap();
        });
        pool.wait_idle();
        assert_eq!(
            done.load(Ordering::SeqCst),
            1,
            "idle only once the item finished"
        );
        releaser.join().unwrap();
    }

    #[test]
    fn stop_says_whether_a_worker_panicked() {
        let mut pool = pool_of(1, |n| assert_ne!(n, 13, "a worker's item panics"));
        assert!(!pool.stopped(), "running workers are not stopped");
        pool.submit(Wake::One, |q| q.0.push_back(13));
        assert!(!pool.stop(), "the worker panicked");
        assert!(pool.stopped());
    }

    #[test]
    fn dropping_the_pool_runs_the_queue_and_joins_the_workers() {
        let sum = Arc::new(AtomicUsize::new(0));
        let pool = {
            let sum = sum.clone();
            pool_of(2, move |n| {
                sum.fetch_add(n, Ordering::Relaxed);
            })
        };
        pool.submit(Wake::All, |q| q.0.extend(1..=10));
        drop(pool);
        assert_eq!(
            Arc::strong_count(&sum),
            1,
            "every worker's state went with its thread"
        );
        assert_eq!(sum.load(Ordering::Relaxed), 55);
    }

    #[test]
    fn notify_raises_the_notifier_once_one_is_set() {
        let pool = pool_of(0, |_| {});
        let n = Notifier::new();
        n.fd().unwrap();
        pool.notify();
        assert!(!n.reset(), "no notifier set yet");
        pool.set_notifier(n.clone());
        pool.notify();
        assert!(n.reset(), "the pool raised it");
    }
}
