//! The manager's lock and its re-entrancy guard: a tier callback that
//! calls back into the manager that called it gets [`Error::Reentrant`]
//! instead of a deadlock, detected with a thread-local list of the
//! managers whose lock this thread holds.

use std::cell::RefCell;

use parking_lot::MutexGuard;

use super::PrimaryBackend;
use super::{Error, Manager, Result, State};

thread_local! {
    /// Managers whose lock this thread holds (innermost last).
    static ENTERED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The lock of one manager, taken by this thread; releases the
/// re-entrancy marker when dropped.
pub(super) struct Entered<'a, P: PrimaryBackend> {
    guard: MutexGuard<'a, State<P>>,
    me: usize,
}

impl<P: PrimaryBackend> Drop for Entered<'_, P> {
    fn drop(&mut self) {
        if self.guard.listener.is_some() {
            // Push this call's events to the listener while the lock and the
            // re-entrancy marker are still held.
            self.guard.gather_events();
        }
        let me = self.me;
        ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            // Usually this call's marker is the last (calls nest).
            if e.last() == Some(&me) {
                e.pop();
            } else if let Some(pos) = e.iter().rposition(|&m| m == me) {
                e.remove(pos);
            }
        });
    }
}

impl<P: PrimaryBackend> std::ops::Deref for Entered<'_, P> {
    type Target = State<P>;
    fn deref(&self) -> &State<P> {
        &self.guard
    }
}

impl<P: PrimaryBackend> std::ops::DerefMut for Entered<'_, P> {
    fn deref_mut(&mut self) -> &mut State<P> {
        &mut self.guard
    }
}

impl<P: PrimaryBackend> Manager<P> {
    /// Takes the lock, refusing a re-entrant call from a tier callback.
    pub(super) fn enter(&self, what: &str) -> Result<Entered<'_, P>> {
        let me = self as *const Self as usize;
        ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            if e.contains(&me) {
                return Err(Error::Reentrant(format!(
                    "{what} called from inside a callback of the same tiering manager"
                )));
            }
            e.push(me);
            Ok(())
        })?;
        // The marker is popped by `Entered::drop`.
        let guard = self.state.lock();
        let entered = Entered { guard, me };
        if entered.closed {
            return Err(Error::Closed(format!(
                "{what}: the tiering manager is shut down"
            )));
        }
        Ok(entered)
    }
}
