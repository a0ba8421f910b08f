//! Hooks for a deterministic simulation (feature `simulation`): many processes and hosts run
//! in one OS process, on a virtual clock, with a seed choosing where each process is stopped
//! or crashed. The engine's own code runs unchanged; what a simulation replaces is the
//! process's environment (see the crate's `env` module): its id, which processes live, the
//! host's monotonic clock, bounded waits, and the fault points.
//!
//! Hooks are per thread: a simulation runs each simulated process on a thread of its own (or
//! sets the hooks of the process it is acting for), and a thread without hooks sees the real
//! environment, so ordinary tests in the same build are unaffected.
//!
//! A simulated crash unwinds the process's thread with [`crash`]: nothing it held in shared
//! memory is released on the way (a real crash cannot release anything either), so the next
//! process finds its locks held by a process that no longer lives, as it would.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

pub use crate::env::FaultPoint;

/// What a simulation decides for the process running on this thread.
pub trait Hooks: Send + Sync {
    /// The process's id.
    fn pid(&self) -> u32;
    /// Whether process `pid` lives.
    fn alive(&self, pid: u32) -> bool;
    /// The host's monotonic clock, in ms.
    fn monotonic_ms(&self) -> u64;
    /// A bounded wait: the simulation lets the others run for `d` of virtual time.
    fn sleep(&self, d: Duration);
    /// The process reached `at`: return to go on, or call [`crash`] to crash it here (or let
    /// others run first: the process is then stopped here for that long).
    fn fault_point(&self, at: FaultPoint);
    /// Fills `out` with the simulation's own random bytes (ticket ids, nonces, counters'
    /// incarnations), so that a run repeats exactly; `false` to draw real ones.
    fn random(&self, _out: &mut [u8]) -> bool {
        false
    }
}

thread_local! {
    static HOOKS: RefCell<Option<Arc<dyn Hooks>>> = const { RefCell::new(None) };
    static CRASHING: Cell<bool> = const { Cell::new(false) };
}

/// The hooks installed on this thread, if any.
pub(crate) fn hooks() -> Option<Arc<dyn Hooks>> {
    HOOKS.with(|h| h.borrow().clone())
}

/// Whether this thread is unwinding from [`crash`].
pub(crate) fn crashing() -> bool {
    CRASHING.with(Cell::get)
}

/// Hooks installed on this thread until dropped (the ones before are put back).
#[must_use = "the hooks are removed when this is dropped"]
pub struct Installed {
    previous: Option<Arc<dyn Hooks>>,
}

impl std::fmt::Debug for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Installed").finish()
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        HOOKS.with(|h| *h.borrow_mut() = previous);
    }
}

/// Installs `hooks` on this thread.
pub fn install(hooks: Arc<dyn Hooks>) -> Installed {
    let previous = HOOKS.with(|h| h.borrow_mut().replace(hooks));
    Installed { previous }
}

/// The payload a simulated crash unwinds with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash;

/// Crashes the process running on this thread: unwinds with [`Crash`] (without the panic
/// hook: nothing is printed), releasing nothing it holds in shared memory. Catch it with
/// `std::panic::catch_unwind` where the simulated process starts, then call [`recovered`].
pub fn crash() -> ! {
    CRASHING.with(|c| c.set(true));
    std::panic::resume_unwind(Box::new(Crash))
}

/// Ends a crash's unwinding on this thread (after catching it).
pub fn recovered() {
    CRASHING.with(|c| c.set(false));
}
