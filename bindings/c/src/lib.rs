//! The C ABI of velvet-rope.
//!
//! Conventions (also in the README's "C API" section):
//! - **Handles** are opaque (`vr_engine`, `vr_page`, `vr_coordinator`, `vr_rate_limiter`,
//!   `vr_gauge`); each has a `_new`/`_free` pair. `_free` accepts NULL.
//! - **Results**: every fallible function returns a [`vr_result`]; outputs go through
//!   out-pointers that are written only on `VR_OK`. [`vr_last_error`] gives this thread's
//!   message for the last failure, [`vr_result_name`] a name for any code.
//! - **NULL**: a NULL pointer where one is required returns `VR_NULL_PARAMETER`. Strings are
//!   pointer + length (not NUL-terminated) unless said otherwise; a NULL pointer with length 0
//!   is an empty string.
//! - **Panics** never cross the boundary: every body runs under `catch_unwind` and a panic
//!   becomes `VR_PANIC`.
//! - **Threads**: engines, coordinators, limiters and gauges may be used from any number of
//!   threads at once; a `vr_page` belongs to one thread at a time.

#![allow(non_camel_case_types)]

mod engine_api;
mod error;
mod lease_api;
mod request_api;
mod revoke_api;
mod strings;

pub use engine_api::*;
pub use error::*;
pub use lease_api::*;
pub use request_api::*;
pub use revoke_api::*;

/// Major version of this library (matches the crate version).
pub const VR_VERSION_MAJOR: u32 = 0;
/// Minor version of this library.
pub const VR_VERSION_MINOR: u32 = 3;
/// Patch version of this library.
pub const VR_VERSION_PATCH: u32 = 0;

/// The library version as a static NUL-terminated string, e.g. `"0.3.0"`.
#[no_mangle]
pub extern "C" fn vr_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Milliseconds since the Unix epoch, from the system clock: the `now_ms` to pass when the
/// caller has no clock of its own.
#[no_mangle]
pub extern "C" fn vr_now_ms() -> u64 {
    use engine::Clock;
    engine::SystemClock.now_ms()
}
