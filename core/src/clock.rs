//! Time, injected.
//!
//! Decision logic never reads a clock: every entry point takes `now` as milliseconds since the
//! Unix epoch. A [`Clock`] is only the source of that argument for callers that want one, so
//! tests and the simulator run in virtual time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// The latest time the engine takes (2106-02-07, the end of 32-bit seconds, which tickets
/// carry): later times are taken as this one. The C ABI refuses them instead, since a caller
/// passing microseconds where milliseconds are due (a common mistake) passes times far past it.
pub const MAX_NOW_MS: Millis = u32::MAX as u64 * 1000;

/// A source of the current time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now_ms(&self) -> Millis;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to: for tests, benches and simulations.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicU64,
}

impl FakeClock {
    /// A fake clock that reads `start`.
    pub fn new(start: Millis) -> Self {
        Self {
            now: AtomicU64::new(start),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`.
    pub fn set(&self, ms: Millis) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}
