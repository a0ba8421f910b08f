//! Time as the core takes it: milliseconds since the Unix epoch.

use pyo3::prelude::*;
use velvet_rope::{Clock, CoarseSystemClock, SystemClock, MAX_NOW_MS};

/// Milliseconds since the Unix epoch, from the system clock.
#[pyfunction]
pub(crate) fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// `now_ms` if given, else the system clock at the kernel's tick resolution (a few
/// nanoseconds to read, against ~30 for the precise one; decisions count in seconds). A
/// time past `MAX_NOW_MS` (2106; most likely microseconds passed for milliseconds) raises
/// `ValueError`, as the C ABI and Node refuse it.
#[inline]
pub(crate) fn or_now(now_ms: Option<u64>) -> PyResult<u64> {
    match now_ms {
        None => Ok(CoarseSystemClock.now_ms()),
        Some(ms) if ms <= MAX_NOW_MS => Ok(ms),
        Some(ms) => Err(past_2106(ms)),
    }
}

#[cold]
#[inline(never)]
fn past_2106(ms: u64) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!(
        "now_ms {ms} lies past 2106 (MAX_NOW_MS, {MAX_NOW_MS}): milliseconds since the Unix \
         epoch are due (microseconds?)"
    ))
}
