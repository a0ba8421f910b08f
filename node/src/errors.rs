//! The one place where the core's errors become JavaScript errors. Each has a stable `code`;
//! the package's `errors.js` turns them into `Error` subclasses by code.

use velvet_rope::lease::LeaseError;
use velvet_rope::Error;

/// A JavaScript error with a velvet-rope code.
pub(crate) type JsError = napi::Error<&'static str>;

/// Bad configuration (parse, validation, unreadable file).
pub(crate) const CONFIG: &str = "ERR_VELVET_ROPE_CONFIG";
/// No room of that name.
pub(crate) const UNKNOWN_ROOM: &str = "ERR_VELVET_ROPE_UNKNOWN_ROOM";
/// A state file (shared memory) cannot be used.
pub(crate) const SHARED_MEMORY: &str = "ERR_VELVET_ROPE_SHARED_MEMORY";
/// No resource template matches.
pub(crate) const UNKNOWN_RESOURCE: &str = "ERR_VELVET_ROPE_UNKNOWN_RESOURCE";
/// More permits or units than can ever be taken at once, or released than held.
pub(crate) const CAPACITY: &str = "ERR_VELVET_ROPE_CAPACITY";
/// Another lease error.
pub(crate) const LEASE: &str = "ERR_VELVET_ROPE_LEASE";
/// A bad argument (a type or a value out of range).
pub(crate) const INVALID_ARGUMENT: &str = "ERR_VELVET_ROPE_INVALID_ARGUMENT";

/// The JavaScript error for a core error.
pub(crate) fn to_js(e: Error) -> JsError {
    let code = match &e {
        Error::Parse(_) | Error::Invalid { .. } | Error::Io { .. } => CONFIG,
        Error::UnknownRoom(_) => UNKNOWN_ROOM,
        Error::Region(_) => SHARED_MEMORY,
        Error::Lease(l) => return lease_to_js((**l).clone()),
        _ => CONFIG,
    };
    napi::Error::new(code, e.to_string())
}

/// The JavaScript error for a lease error.
pub(crate) fn lease_to_js(e: LeaseError) -> JsError {
    let code = match &e {
        LeaseError::InvalidConfig { .. } | LeaseError::Parse { .. } => CONFIG,
        LeaseError::UnknownResource { .. } => UNKNOWN_RESOURCE,
        LeaseError::ExceedsLimit { .. } | LeaseError::ReleaseUnderflow { .. } => CAPACITY,
        LeaseError::InvalidRequest { .. } => INVALID_ARGUMENT,
        _ => LEASE,
    };
    napi::Error::new(code, e.to_string())
}

/// A bad argument.
pub(crate) fn invalid(message: impl Into<String>) -> JsError {
    napi::Error::new(INVALID_ARGUMENT, message.into())
}
