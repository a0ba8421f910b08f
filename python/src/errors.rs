//! The one place where the core's errors become Python exceptions. The exception classes are
//! defined in `velvet_rope/errors.py` (so that they can subclass two built-ins, e.g.
//! `ConfigError(VelvetRopeError, ValueError)`), and raised from here.

use pyo3::prelude::*;
use velvet_rope::lease::LeaseError as CoreLeaseError;
use velvet_rope::Error;

pyo3::import_exception!(velvet_rope.errors, VelvetRopeError);
pyo3::import_exception!(velvet_rope.errors, ConfigError);
pyo3::import_exception!(velvet_rope.errors, UnknownRoomError);
pyo3::import_exception!(velvet_rope.errors, SharedMemoryError);
pyo3::import_exception!(velvet_rope.errors, LeaseError);
pyo3::import_exception!(velvet_rope.errors, UnknownResourceError);
pyo3::import_exception!(velvet_rope.errors, CapacityError);

/// The Python exception for a core error.
pub(crate) fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::Parse(_) | Error::Invalid { .. } | Error::Io { .. } => ConfigError::new_err(message),
        Error::UnknownRoom(_) => UnknownRoomError::new_err(message),
        Error::Region(_) => SharedMemoryError::new_err(message),
        Error::Lease(e) => lease_to_py(*e),
        _ => VelvetRopeError::new_err(message),
    }
}

/// The Python exception for a lease error.
pub(crate) fn lease_to_py(e: CoreLeaseError) -> PyErr {
    let message = e.to_string();
    match e {
        CoreLeaseError::InvalidConfig { .. } | CoreLeaseError::Parse { .. } => {
            ConfigError::new_err(message)
        }
        CoreLeaseError::UnknownResource { .. } => UnknownResourceError::new_err(message),
        CoreLeaseError::ExceedsLimit { .. } | CoreLeaseError::ReleaseUnderflow { .. } => {
            CapacityError::new_err(message)
        }
        CoreLeaseError::InvalidRequest { .. } => pyo3::exceptions::PyValueError::new_err(message),
        _ => LeaseError::new_err(message),
    }
}
