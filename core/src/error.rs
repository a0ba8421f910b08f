//! The crate's error type: misuse and bad input. Outcomes (admit, queue, reject) are values,
//! never errors.

use thiserror::Error;

/// Everything that can go wrong when building, reloading or calling an engine.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration text could not be parsed (syntax, types, unknown fields).
    #[error("configuration could not be parsed: {0}")]
    Parse(String),
    /// The configuration parsed but a field has an invalid value.
    #[error("invalid configuration: `{field}` {problem}")]
    Invalid {
        /// Dotted path of the offending field, e.g. `rooms[0].total_active_users`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A configuration file could not be read.
    #[error("cannot read configuration file `{path}`: {source}")]
    Io {
        /// The path that was read.
        path: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The named room is not in the running configuration.
    #[error("no room named `{0}` in the configuration")]
    UnknownRoom(String),
    /// A lease configuration or request was refused.
    #[error(transparent)]
    Lease(Box<crate::lease::LeaseError>),
    /// A memory region handed in by the host does not fit the configuration.
    #[error("memory region refused: {0}")]
    Region(String),
}

impl Error {
    /// Shorthand for [`Error::Invalid`].
    pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
