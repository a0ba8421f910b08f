//! The one error type of the lease side.
//!
//! Only misuse and bad input are errors; a denied permit is an outcome (see
//! [`Denied`](super::rate_limiter::Denied)), not an error.

use thiserror::Error;

/// What can go wrong when configuring or using leases.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// A configuration field has a value outside its domain.
    #[error("invalid lease configuration: {field}: {reason}")]
    InvalidConfig {
        /// Path of the offending field, e.g. `resources[2].algorithm.lease_length`.
        field: String,
        /// Why the value is refused.
        reason: String,
    },
    /// The configuration text could not be parsed.
    #[error("cannot parse lease configuration ({format}): {message}")]
    Parse {
        /// `toml` or `json`.
        format: &'static str,
        /// The parser's message, which names the line or field.
        message: String,
    },
    /// No template matches the resource identifier.
    #[error("no resource template matches resource `{resource}` (add a template whose identifier_glob matches it, e.g. `*` last)")]
    UnknownResource {
        /// The identifier that was looked up.
        resource: String,
    },
    /// A request argument is invalid.
    #[error("invalid lease request for resource `{resource}`: {field}: {reason}")]
    InvalidRequest {
        /// The resource the request was for.
        resource: String,
        /// The offending argument, e.g. `wants`.
        field: &'static str,
        /// Why the value is refused.
        reason: String,
    },
    /// More permits were asked for at once than the limiter can ever hand out at once.
    #[error("cannot acquire {requested} permits at once: the limit is {limit}")]
    ExceedsLimit {
        /// Permits asked for.
        requested: u64,
        /// The most that can ever be granted at once under the current lease.
        limit: u64,
    },
    /// More permits were released than are held.
    #[error("cannot release {released} permits: only {held} are held")]
    ReleaseUnderflow {
        /// Permits released.
        released: u64,
        /// Permits held at that moment.
        held: u64,
    },
    /// A safety invariant of the coordinator does not hold (a bug, reported rather than hidden).
    #[error("lease invariant violated on resource `{resource}`: {detail}")]
    InvariantViolated {
        /// The resource whose grants break the invariant.
        resource: String,
        /// What exactly is wrong.
        detail: String,
    },
    /// The lease source could not be reached or refused the refresh.
    #[error("lease refresh failed for resource `{resource}`: {message}")]
    RefreshFailed {
        /// The resource being refreshed.
        resource: String,
        /// Why.
        message: String,
    },
}

impl LeaseError {
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidConfig {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
