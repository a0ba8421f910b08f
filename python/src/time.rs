//! Time as the core takes it: milliseconds since the Unix epoch.

use pyo3::prelude::*;
use velvet_rope::{Clock, CoarseSystemClock, SystemClock};

/// Milliseconds since the Unix epoch, from the system clock.
#[pyfunction]
pub(crate) fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// `now_ms` if given, else the system clock at the kernel's tick resolution (a few
/// nanoseconds to read, against ~30 for the precise one; decisions count in seconds).
#[inline]
pub(crate) fn or_now(now_ms: Option<u64>) -> u64 {
    now_ms.unwrap_or_else(|| CoarseSystemClock.now_ms())
}
