//! The native part of the npm package `velvet-rope`: the core's types and functions as
//! free functions over opaque handles, converting types and errors and nothing more.
//!
//! A napi *class* method call costs about ten times a free function call (measured here: ~250
//! against ~27 ns), and napi-rs's `External` checks each handle under a global lock; so every
//! operation is a free function taking a numeric handle (see `handles`), and the package's
//! JavaScript classes (`index.js`) call them. The hot calls (a room's admit function,
//! `engineAdmit`, `rateLimiterTryAcquire`; see `hot`) also read their string arguments into
//! stack buffers (no allocation) and answer the steady case with `undefined` (no object to
//! build).

mod engine;
mod environment;
mod errors;
mod handles;
mod hot;
mod lease;
mod routing;

use napi_derive::napi;

/// Does nothing: the floor of a call into the native module (for benchmarks).
#[napi]
pub fn noop() {}

/// Milliseconds since the Unix epoch, from the system clock.
#[napi]
pub fn now_ms() -> f64 {
    use velvet_rope::Clock;
    velvet_rope::SystemClock.now_ms() as f64
}

/// `now` as the core takes it: the argument (milliseconds since the Unix epoch, a whole
/// number up to `MAX_NOW_MS`, the year 2106) or, when absent, the system clock at the
/// kernel's tick resolution (a few nanoseconds to read, against ~30 for the precise one).
pub(crate) fn or_now(now_ms: Option<f64>) -> Result<u64, errors::JsError> {
    use velvet_rope::Clock;
    match now_ms {
        None => Ok(velvet_rope::CoarseSystemClock.now_ms()),
        Some(ms) if ms.fract() == 0.0 && (0.0..=velvet_rope::MAX_NOW_MS as f64).contains(&ms) => {
            Ok(ms as u64)
        }
        Some(ms) => Err(errors::invalid(format!(
            "`nowMs` must be whole milliseconds since the Unix epoch, from 0 to {}, got {ms}",
            velvet_rope::MAX_NOW_MS
        ))),
    }
}
