//! `Coordinator`, `Lease`, `RateLimiter`, `Gauge`: the lease side.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyType;
use velvet_rope::lease::{self, Denied, LeaseConfig};
use velvet_rope::Clock;

use crate::engine::ConfigArg;
use crate::errors::lease_to_py;
use crate::time::or_now;

/// Hands out leases of shared resources (the configuration's `resources` section).
#[pyclass(frozen, subclass, module = "velvet_rope._velvet_rope")]
pub struct Coordinator {
    inner: std::sync::Arc<lease::Coordinator>,
    /// With a `[cluster]` table: the upstream loop of this coordinator as a leaf under the
    /// Redis lease root.
    _leaf: Option<velvet_rope_cluster::LeafSync>,
}

#[pymethods]
impl Coordinator {
    /// A coordinator from a configuration (text or path) with `[[resources]]` templates. With
    /// a `[cluster]` table it is a leaf under the Redis lease root the table names: its leases
    /// are shares of what the root grants this process, shared fairly across hosts (make it in
    /// each worker, after any fork).
    #[new]
    #[pyo3(signature = (config, *, now_ms = None))]
    fn new(config: ConfigArg, now_ms: Option<u64>) -> PyResult<Self> {
        let config = config_of(config)?;
        let inner = std::sync::Arc::new(
            lease::Coordinator::from_config(
                &LeaseConfig {
                    resources: config.resources.clone(),
                },
                or_now(now_ms)?,
            )
            .map_err(lease_to_py)?,
        );
        let leaf = velvet_rope_cluster::leaf_for(&config, inner.clone()).map_err(lease_to_py)?;
        Ok(Self { inner, _leaf: leaf })
    }

    /// Asks for `wants` of `resource` for `client_id`; returns the lease granted.
    #[pyo3(signature = (client_id, resource, wants, priority = 0, now_ms = None))]
    fn request(
        &self,
        client_id: &str,
        resource: &str,
        wants: f64,
        priority: u32,
        now_ms: Option<u64>,
    ) -> PyResult<Lease> {
        self.inner
            .request(client_id, resource, wants, priority, or_now(now_ms)?)
            .map(Lease::from)
            .map_err(lease_to_py)
    }

    /// Gives a client's lease back; returns whether it held one.
    fn release(&self, client_id: &str, resource: &str) -> PyResult<bool> {
        self.inner.release(client_id, resource).map_err(lease_to_py)
    }

    /// Every resource's metrics (capacity, granted, wanted, clients, learning, refusals) in
    /// the OpenMetrics text format, ending with `# EOF`, at `now_ms` (default: now).
    #[pyo3(signature = (now_ms = None))]
    fn metrics_text(&self, now_ms: Option<u64>) -> PyResult<String> {
        Ok(self.inner.metrics_text(or_now(now_ms)?))
    }

    /// Every event logged since the last call, oldest first, with the ends of learning
    /// periods over at `now_ms` (default: now), as `Engine.drain_events` gives an engine's:
    /// `lease_learning_started` / `lease_learning_ended` (field `source`: `coordinator` for
    /// its own learning after start, `root` for a leaf's root), `lease_root_outage_began` /
    /// `lease_root_outage_ended` (a leaf's root lost and found).
    #[pyo3(signature = (now_ms = None))]
    fn drain_events<'py>(
        &self,
        py: Python<'py>,
        now_ms: Option<u64>,
    ) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        crate::engine::events_to_py(py, self.inner.drain_events(or_now(now_ms)?))
    }

    /// Events dropped because nobody drained them in time (the log keeps 256).
    fn events_dropped(&self) -> u64 {
        self.inner.events_dropped()
    }

    /// Every resource's metrics, as `Engine.metrics` gives a room's.
    #[pyo3(signature = (now_ms = None))]
    fn metrics(&self, now_ms: Option<u64>) -> PyResult<crate::engine::MetricsList> {
        Ok(crate::engine::families_to_py(
            self.inner.metrics(or_now(now_ms)?),
        ))
    }
}

fn config_of(config: ConfigArg) -> PyResult<velvet_rope::Config> {
    match config {
        ConfigArg::Path(p) => velvet_rope::Config::from_path(p),
        ConfigArg::Text(t) => velvet_rope::Config::from_text(&t),
    }
    .map_err(crate::errors::to_py)
}

/// A lease: what a client may use, until when.
#[pyclass(frozen, get_all, module = "velvet_rope._velvet_rope")]
#[derive(Clone)]
pub struct Lease {
    /// Granted capacity (per second for rates, units for gauges).
    capacity: f64,
    /// Expiry, milliseconds since the Unix epoch.
    expires_at_ms: u64,
    /// Seconds between refreshes.
    refresh_interval_secs: f64,
    /// What to use when the lease cannot be refreshed.
    safe_capacity: f64,
}

impl From<lease::Lease> for Lease {
    fn from(l: lease::Lease) -> Self {
        Self {
            capacity: l.capacity,
            expires_at_ms: l.expires_at,
            refresh_interval_secs: l.refresh_interval_secs,
            safe_capacity: l.safe_capacity,
        }
    }
}

#[pymethods]
impl Lease {
    fn __repr__(&self) -> String {
        format!(
            "Lease(capacity={}, expires_at_ms={}, refresh_interval_secs={}, safe_capacity={})",
            self.capacity, self.expires_at_ms, self.refresh_interval_secs, self.safe_capacity
        )
    }
}

/// How long a blocking wait goes without checking for signals (Ctrl-C lands within it).
const SIGNAL_CHECK: Duration = Duration::from_millis(20);

/// Takes the GIL for a moment to run pending signal handlers (on the main thread; elsewhere
/// this does nothing): true, with the handler's exception (`KeyboardInterrupt`) in `signal`,
/// if one raised.
fn interrupted(signal: &mut Option<PyErr>) -> bool {
    match Python::attach(|py| py.check_signals()) {
        Ok(()) => false,
        Err(e) => {
            *signal = Some(e);
            true
        }
    }
}

fn non_negative(rate: f64) -> PyResult<f64> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(rate)
    } else {
        Err(pyo3::exceptions::PyValueError::new_err(format!(
            "rate must be a finite number >= 0, got {rate}"
        )))
    }
}

/// Enforces a rate lease locally: permits spread evenly over each second. (`velvet_rope`
/// subclasses it to add `acquire_async`.)
#[pyclass(frozen, subclass, module = "velvet_rope._velvet_rope")]
pub struct RateLimiter {
    inner: lease::RateLimiter,
}

#[pymethods]
impl RateLimiter {
    /// A limiter of `rate` permits per second.
    #[new]
    fn new(rate: f64) -> PyResult<Self> {
        Ok(Self {
            inner: lease::RateLimiter::new(non_negative(rate)?),
        })
    }

    /// A limiter (of the class it is called on) at a lease's capacity.
    #[classmethod]
    fn from_lease<'py>(cls: &Bound<'py, PyType>, lease: &Lease) -> PyResult<Bound<'py, PyAny>> {
        cls.call1((lease.capacity,))
    }

    /// Takes `n` permits if they are free now. Never blocks. Raises `CapacityError` if `n`
    /// is more than one call can ever take (as Node's `tryAcquire` throws).
    #[pyo3(signature = (n = 1))]
    fn try_acquire(&self, n: u32) -> PyResult<bool> {
        match self.inner.check(n) {
            Ok(()) => Ok(true),
            Err(Denied::ExceedsBurst { burst }) => {
                Err(lease_to_py(velvet_rope::lease::LeaseError::ExceedsLimit {
                    requested: u64::from(n),
                    limit: burst,
                }))
            }
            Err(_) => Ok(false),
        }
    }

    /// Blocks until `n` permits are taken (the GIL is released while waiting; signals are
    /// checked every few milliseconds, so Ctrl-C raises `KeyboardInterrupt`). Raises
    /// `CapacityError` if `n` is more than one call can ever take.
    #[pyo3(signature = (n = 1))]
    fn acquire(&self, py: Python<'_>, n: u32) -> PyResult<()> {
        let mut signal = None;
        py.detach(|| {
            self.inner
                .acquire_interruptibly(n, SIGNAL_CHECK, || interrupted(&mut signal))
        })
        .map_err(lease_to_py)?;
        signal.map_or(Ok(()), Err)
    }

    /// Takes `n` permits now (`None`), or says how many seconds until they may be free (a
    /// float, for `await asyncio.sleep`). Raises `CapacityError` if they never can be.
    #[pyo3(signature = (n = 1))]
    fn try_acquire_or_wait(&self, n: u32) -> PyResult<Option<f64>> {
        match self.inner.check(n) {
            Ok(()) => Ok(None),
            Err(Denied::NotUntil(at)) => {
                let now = self.inner.clock().now_ms();
                Ok(Some(
                    Duration::from_millis(at.saturating_sub(now).max(1)).as_secs_f64(),
                ))
            }
            Err(Denied::ZeroRate) => Ok(Some(0.01)),
            Err(Denied::ExceedsBurst { burst }) => {
                Err(lease_to_py(velvet_rope::lease::LeaseError::ExceedsLimit {
                    requested: u64::from(n),
                    limit: burst,
                }))
            }
        }
    }

    /// Changes the rate (a refreshed lease); every thread sees it at once.
    fn set_rate(&self, rate: f64) -> PyResult<()> {
        self.inner.set_rate(non_negative(rate)?);
        Ok(())
    }

    /// The rate in permits per second.
    #[getter]
    fn rate(&self) -> f64 {
        self.inner.params().rate()
    }
}

/// Enforces a concurrency lease locally: at most `capacity` units held at once. (`velvet_rope`
/// subclasses it to add context managers and `acquire_async`.)
#[pyclass(frozen, subclass, module = "velvet_rope._velvet_rope")]
pub struct Gauge {
    inner: lease::Gauge,
}

#[pymethods]
impl Gauge {
    /// A gauge of `capacity` units.
    #[new]
    fn new(capacity: u32) -> Self {
        Self {
            inner: lease::Gauge::new(capacity),
        }
    }

    /// A gauge (of the class it is called on) at a lease's capacity, in whole units.
    #[classmethod]
    fn from_lease<'py>(cls: &Bound<'py, PyType>, lease: &Lease) -> PyResult<Bound<'py, PyAny>> {
        cls.call1((lease::gauge::units(lease.capacity),))
    }

    /// Takes `n` units if they are free now. Never blocks. Raises `CapacityError` if `n` is
    /// above the capacity (as Node's `tryAcquire` throws).
    #[pyo3(signature = (n = 1))]
    fn try_acquire(&self, n: u32) -> PyResult<bool> {
        let capacity = self.inner.capacity();
        if n > capacity && capacity > 0 {
            return Err(lease_to_py(velvet_rope::lease::LeaseError::ExceedsLimit {
                requested: u64::from(n),
                limit: u64::from(capacity),
            }));
        }
        Ok(self.inner.try_acquire_permits(n))
    }

    /// Blocks until `n` units are taken (the GIL is released while waiting; signals are
    /// checked every few milliseconds, so Ctrl-C raises `KeyboardInterrupt`). Raises
    /// `CapacityError` if `n` is above the capacity.
    #[pyo3(signature = (n = 1))]
    fn acquire(&self, py: Python<'_>, n: u32) -> PyResult<()> {
        let mut signal = None;
        py.detach(|| {
            self.inner
                .acquire_interruptibly(n, SIGNAL_CHECK, || interrupted(&mut signal))
                // Held until `release`: the guard is not kept.
                .map(|held| held.map(std::mem::forget))
        })
        .map_err(lease_to_py)?;
        signal.map_or(Ok(()), Err)
    }

    /// Gives back `n` units. Raises `CapacityError` if fewer are held.
    #[pyo3(signature = (n = 1))]
    fn release(&self, n: u32) -> PyResult<()> {
        self.inner.release_permits(n).map_err(lease_to_py)
    }

    /// Changes the capacity (a refreshed lease).
    fn set_capacity(&self, capacity: u32) {
        self.inner.set_capacity(capacity);
    }

    /// Units the gauge holds at most.
    #[getter]
    fn capacity(&self) -> u32 {
        self.inner.capacity()
    }

    /// Units held now.
    #[getter]
    fn in_use(&self) -> u32 {
        self.inner.in_use()
    }
}
