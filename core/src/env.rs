//! The process's environment as the counters see it: its id, whether another process lives,
//! the host's monotonic clock, waiting, and the points where a process may stop.
//!
//! Everything here is the real thing (`getpid`, `kill(pid, 0)`, `CLOCK_MONOTONIC`, a sleep, no
//! fault points; randomness in `random`, which a simulation replaces too) unless the `simulation` feature is on *and* a simulation has installed hooks
//! on the calling thread (see [`crate::simulation`]): then a deterministic simulation of many
//! processes and hosts in one OS process decides each answer, on its virtual clock, and may
//! stop or crash a process at any fault point. These are the only seams besides the clock and
//! the store that every entry point already takes: the code under simulation is the
//! production code.
//!
//! Only [`FaultPoint`] and [`fault_point`] are public: the cluster tier's sync marks its own
//! fault points with them.

use std::time::Duration;

/// Where a process may be stopped or crashed by a simulation. Named after what the process
/// has done when it reaches the point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPoint {
    /// An advance holds the room's tick lock and has read the ledger, before revoking slots.
    AdvanceRead,
    /// An advance revoked free slots, before it grants any.
    AdvanceRevoked,
    /// An advance granted slots to one pool, before the next pool (or publishing).
    AdvanceGranted,
    /// An advance published its figures, before releasing the tick lock.
    AdvancePublished,
    /// A sync took the room's turn and read its report, before sending it to the store.
    SyncReported,
    /// A sync read the time its lease starts from, right before sending its report.
    SyncSending,
    /// A sync has the store's answer, before writing the grant.
    SyncAnswered,
    /// A sync wrote the grant, before ending its turn.
    SyncGranted,
    /// A process wrote a shared region's ticket key, before marking it written.
    KeyWritten,
    /// A process wrote the new slot of a two-slot record (a grant, what an advance applied),
    /// before making it current.
    RecordWritten,
}

/// This process's id.
#[inline]
pub(crate) fn pid() -> u32 {
    #[cfg(feature = "simulation")]
    if let Some(h) = crate::simulation::hooks() {
        return h.pid();
    }
    std::process::id()
}

/// Whether a process with this id exists (or might: any answer but "no such process" counts
/// as alive, so a process of another user is never taken for dead).
pub(crate) fn process_alive(pid: u32) -> bool {
    #[cfg(feature = "simulation")]
    if let Some(h) = crate::simulation::hooks() {
        return h.alive(pid);
    }
    if pid == std::process::id() {
        return true;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The host's monotonic clock, in milliseconds (shared by every process of the host).
pub(crate) fn monotonic_ms() -> u64 {
    #[cfg(feature = "simulation")]
    if let Some(h) = crate::simulation::hooks() {
        return h.monotonic_ms();
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// Waits `d` (a bounded wait for another process; never on a request's path).
pub(crate) fn sleep(d: Duration) {
    #[cfg(feature = "simulation")]
    if let Some(h) = crate::simulation::hooks() {
        return h.sleep(d);
    }
    std::thread::sleep(d);
}

/// A point where a simulation may stop this process for a while, or crash it (see
/// [`FaultPoint`]). Nothing happens outside a simulation. (Public for the cluster tier's
/// sync, which has fault points of its own.)
#[inline]
pub fn fault_point(_at: FaultPoint) {
    #[cfg(feature = "simulation")]
    if let Some(h) = crate::simulation::hooks() {
        h.fault_point(_at);
    }
}

/// Whether this thread is unwinding from a simulated crash: a crashed process releases
/// nothing it held in shared memory (a real one cannot), so guards leave their locks held.
#[inline]
pub(crate) fn crashing() -> bool {
    #[cfg(feature = "simulation")]
    {
        crate::simulation::crashing()
    }
    #[cfg(not(feature = "simulation"))]
    {
        false
    }
}

/// Waits, a bounded `within`, until `ready` holds, sleeping `step` between tries (on the
/// environment's clock). Whether it held.
pub(crate) fn wait_until(
    within: Duration,
    step: Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let deadline = monotonic_ms().saturating_add(within.as_millis() as u64);
    loop {
        if ready() {
            return true;
        }
        if monotonic_ms() > deadline {
            return false;
        }
        sleep(step);
    }
}
