//! The native module `velvet_rope._velvet_rope`: the core's types and functions, converted to
//! Python and nothing more (the pure-Python package `velvet_rope` re-exports them and adds the
//! middleware). Every object is immutable or internally synchronised, so it can be shared
//! between threads; calls that can wait release the GIL.

use pyo3::prelude::*;

mod engine;
mod errors;
mod lease;
mod routing;
mod time;

/// The native module.
#[pymodule]
fn _velvet_rope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<engine::Decision>()?;
    m.add_class::<engine::RoomStats>()?;
    m.add_class::<engine::Page>()?;
    m.add_class::<engine::ClusterStatus>()?;
    m.add_class::<lease::Coordinator>()?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<lease::RateLimiter>()?;
    m.add_class::<lease::Gauge>()?;
    m.add_class::<routing::Router>()?;
    m.add_function(wrap_pyfunction!(engine::shared_memory_size, m)?)?;
    m.add_function(wrap_pyfunction!(engine::is_revoke_command, m)?)?;
    m.add("COMMAND_HEADER", velvet_rope::admission::COMMAND_HEADER)?;
    m.add_function(wrap_pyfunction!(time::now_ms, m)?)?;
    m.add_function(wrap_pyfunction!(noop, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Does nothing: the floor of a call into the native module (for benchmarks).
#[pyfunction]
fn noop() {}
