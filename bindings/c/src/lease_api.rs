//! Capacity leases over the C ABI: the coordinator, and the rate limiter and gauge that
//! enforce a lease locally.

use std::ffi::c_char;

use engine::lease::{Coordinator, Gauge, Lease, LeaseConfig, RateLimiter};
use engine::Config;

use crate::engine_api::{checked_now, next_event};
use crate::error::{free_handle, guard, null, vr_result, Failure, VR_INVALID_ARGUMENT};
use crate::strings::{text, write};

/// An in-process lease coordinator (opaque). Thread-safe.
pub struct vr_coordinator {
    inner: std::sync::Arc<Coordinator>,
    /// With a `[cluster]` table: the coordinator is a leaf under the Redis lease root, and
    /// this is its upstream loop (stopped when the coordinator is freed).
    _leaf: Option<velvet_rope_cluster::LeafSync>,
}

/// A rate limiter enforcing a lease (opaque). Thread-safe; all threads share one budget and
/// see a rate change at once.
pub struct vr_rate_limiter {
    inner: RateLimiter,
}

/// A concurrency gauge (opaque). Thread-safe.
pub struct vr_gauge {
    inner: Gauge,
}

/// A lease: plain data owned by the caller.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct vr_lease {
    /// Granted capacity (rate per second, or concurrent units).
    pub capacity: f64,
    /// Expiry, milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
    /// Seconds between refreshes.
    pub refresh_interval_secs: f64,
    /// What to use if the lease cannot be refreshed.
    pub safe_capacity: f64,
}

impl From<Lease> for vr_lease {
    fn from(l: Lease) -> Self {
        Self {
            capacity: l.capacity,
            expires_at_ms: l.expires_at,
            refresh_interval_secs: l.refresh_interval_secs,
            safe_capacity: l.safe_capacity,
        }
    }
}

fn finite_non_negative(v: f64, name: &str) -> Result<f64, Failure> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(Failure(
            VR_INVALID_ARGUMENT,
            format!("`{name}` must be a finite number >= 0, got {v}"),
        ))
    }
}

/// Creates a coordinator from configuration text (its `resources` templates).
/// `*coordinator_out` owns it: free with [`vr_coordinator_free`]. With a `[cluster]` table it
/// is a leaf under the Redis lease root the table names (leases shared across hosts), with an
/// upstream loop in a thread of this process: create it after any fork.
///
/// # Safety
/// `config` readable for `config_len` bytes; `coordinator_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_coordinator_new(
    config: *const c_char,
    config_len: usize,
    now_ms: u64,
    coordinator_out: *mut *mut vr_coordinator,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let text = unsafe { text(config, config_len, "config") }?;
        if coordinator_out.is_null() {
            return Err(null("coordinator_out"));
        }
        let now_ms = checked_now(now_ms)?;
        let cfg = Config::from_text(text)?;
        let inner = std::sync::Arc::new(Coordinator::from_config(
            &LeaseConfig {
                resources: cfg.resources.clone(),
            },
            now_ms,
        )?);
        let leaf = velvet_rope_cluster::leaf_for(&cfg, inner.clone())?;
        let handle = Box::into_raw(Box::new(vr_coordinator { inner, _leaf: leaf }));
        // SAFETY: checked non-null.
        unsafe { write(coordinator_out, handle, "coordinator_out") }
    })
}

/// Takes the next event in the coordinator's log (its learning period started or ended, and
/// for a leaf its root's learning and outages: `lease_learning_started`,
/// `lease_learning_ended`, `lease_root_outage_began`, `lease_root_outage_ended`), after the
/// ends of learning periods over at `now_ms` (`vr_now_ms()` for now), as
/// `vr_engine_next_event` writes an
/// engine's: one line of JSON, NUL-terminated, into `buf`, `*written_out` its length (0: no
/// event), `*warning_out` 1 for an outage's start. Call it now and then (once a second) until
/// it writes nothing; the log keeps 256 events.
///
/// # Safety
/// `coordinator` live; `buf` NULL or writable for `buf_len` bytes; `written_out` writable;
/// `warning_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vr_coordinator_next_event(
    coordinator: *const vr_coordinator,
    now_ms: u64,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
    warning_out: *mut u8,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let c = &unsafe { coordinator.as_ref() }
            .ok_or_else(|| null("coordinator"))?
            .inner;
        let now_ms = checked_now(now_ms)?;
        // SAFETY: per this function's contract.
        unsafe {
            next_event(
                |take| c.next_event_if(now_ms, take),
                buf,
                buf_len,
                written_out,
                warning_out,
            )
        }
    })
}

/// Frees a coordinator. NULL is ignored.
///
/// # Safety
/// NULL or a handle from [`vr_coordinator_new`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn vr_coordinator_free(coordinator: *mut vr_coordinator) {
    // SAFETY: forwarded from this function's contract.
    unsafe { free_handle(coordinator) }
}

/// Asks for (or refreshes) `client_id`'s lease on `resource`, wanting `wants`, in priority
/// band `priority` (higher is served first). Writes `*lease_out` on success.
///
/// # Safety
/// Handle live; strings readable for their lengths; `lease_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_coordinator_request(
    coordinator: *const vr_coordinator,
    client_id: *const c_char,
    client_id_len: usize,
    resource: *const c_char,
    resource_len: usize,
    wants: f64,
    priority: u32,
    now_ms: u64,
    lease_out: *mut vr_lease,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let c = &unsafe { coordinator.as_ref() }
            .ok_or_else(|| null("coordinator"))?
            .inner;
        // SAFETY: per this function's contract.
        let client = unsafe { text(client_id, client_id_len, "client_id") }?;
        // SAFETY: per this function's contract.
        let resource = unsafe { text(resource, resource_len, "resource") }?;
        let wants = finite_non_negative(wants, "wants")?;
        let now_ms = checked_now(now_ms)?;
        if lease_out.is_null() {
            return Err(null("lease_out"));
        }
        let lease = c.request(client, resource, wants, priority, now_ms)?;
        // SAFETY: checked non-null.
        unsafe { write(lease_out, lease.into(), "lease_out") }
    })
}

/// Releases `client_id`'s lease on `resource`; `*released_out` says whether there was one.
///
/// # Safety
/// Handle live; strings readable; `released_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_coordinator_release(
    coordinator: *const vr_coordinator,
    client_id: *const c_char,
    client_id_len: usize,
    resource: *const c_char,
    resource_len: usize,
    released_out: *mut bool,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let c = &unsafe { coordinator.as_ref() }
            .ok_or_else(|| null("coordinator"))?
            .inner;
        // SAFETY: per this function's contract.
        let client = unsafe { text(client_id, client_id_len, "client_id") }?;
        // SAFETY: per this function's contract.
        let resource = unsafe { text(resource, resource_len, "resource") }?;
        if released_out.is_null() {
            return Err(null("released_out"));
        }
        let released = c.release(client, resource)?;
        // SAFETY: checked non-null.
        unsafe { write(released_out, released, "released_out") }
    })
}

/// Creates a rate limiter allowing `rate` permits per second, spread evenly over the second.
/// Free with [`vr_rate_limiter_free`].
///
/// # Safety
/// `limiter_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_rate_limiter_new(
    rate: f64,
    limiter_out: *mut *mut vr_rate_limiter,
) -> vr_result {
    guard(|| {
        let rate = finite_non_negative(rate, "rate")?;
        if limiter_out.is_null() {
            return Err(null("limiter_out"));
        }
        let handle = Box::into_raw(Box::new(vr_rate_limiter {
            inner: RateLimiter::new(rate),
        }));
        // SAFETY: checked non-null.
        unsafe { write(limiter_out, handle, "limiter_out") }
    })
}

/// Frees a rate limiter. NULL is ignored.
///
/// # Safety
/// NULL or a handle from [`vr_rate_limiter_new`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn vr_rate_limiter_free(limiter: *mut vr_rate_limiter) {
    // SAFETY: forwarded from this function's contract.
    unsafe { free_handle(limiter) }
}

/// Takes `n` permits if the rate allows it now: `*acquired_out` says whether it did.
/// Lock-free; never blocks.
///
/// # Safety
/// Handle live; `acquired_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_rate_limiter_try_acquire(
    limiter: *const vr_rate_limiter,
    n: u32,
    acquired_out: *mut bool,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let l = &unsafe { limiter.as_ref() }
            .ok_or_else(|| null("limiter"))?
            .inner;
        // Checked before any permit is taken: a refused call takes nothing.
        if acquired_out.is_null() {
            return Err(null("acquired_out"));
        }
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { write(acquired_out, l.try_acquire_n(n), "acquired_out") }
    })
}

/// Changes the rate (e.g. to a refreshed lease's capacity); every thread sees it at once.
///
/// # Safety
/// Handle live.
#[no_mangle]
pub unsafe extern "C" fn vr_rate_limiter_set_rate(
    limiter: *const vr_rate_limiter,
    rate: f64,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let l = &unsafe { limiter.as_ref() }
            .ok_or_else(|| null("limiter"))?
            .inner;
        l.set_rate(finite_non_negative(rate, "rate")?);
        Ok(())
    })
}

/// Creates a gauge of `capacity` concurrent units. Free with [`vr_gauge_free`].
///
/// # Safety
/// `gauge_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_gauge_new(capacity: u32, gauge_out: *mut *mut vr_gauge) -> vr_result {
    guard(|| {
        if gauge_out.is_null() {
            return Err(null("gauge_out"));
        }
        let handle = Box::into_raw(Box::new(vr_gauge {
            inner: Gauge::new(capacity),
        }));
        // SAFETY: checked non-null.
        unsafe { write(gauge_out, handle, "gauge_out") }
    })
}

/// Frees a gauge. NULL is ignored.
///
/// # Safety
/// NULL or a handle from [`vr_gauge_new`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn vr_gauge_free(gauge: *mut vr_gauge) {
    // SAFETY: forwarded from this function's contract.
    unsafe { free_handle(gauge) }
}

/// Takes `n` units if free: `*acquired_out` says whether it did. Give them back with
/// [`vr_gauge_release`].
///
/// # Safety
/// Handle live; `acquired_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_gauge_try_acquire(
    gauge: *const vr_gauge,
    n: u32,
    acquired_out: *mut bool,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let g = &unsafe { gauge.as_ref() }
            .ok_or_else(|| null("gauge"))?
            .inner;
        // Checked before any unit is taken: a refused call takes nothing.
        if acquired_out.is_null() {
            return Err(null("acquired_out"));
        }
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { write(acquired_out, g.try_acquire_permits(n), "acquired_out") }
    })
}

/// Gives back `n` units taken with [`vr_gauge_try_acquire`]. Giving back more than is held is
/// refused with `VR_LEASE_ERROR` and changes nothing.
///
/// # Safety
/// Handle live.
#[no_mangle]
pub unsafe extern "C" fn vr_gauge_release(gauge: *const vr_gauge, n: u32) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let g = &unsafe { gauge.as_ref() }
            .ok_or_else(|| null("gauge"))?
            .inner;
        g.release_permits(n)?;
        Ok(())
    })
}

/// Units currently held.
///
/// # Safety
/// Handle live; `in_use_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_gauge_in_use(
    gauge: *const vr_gauge,
    in_use_out: *mut u32,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let g = &unsafe { gauge.as_ref() }
            .ok_or_else(|| null("gauge"))?
            .inner;
        // SAFETY: per this function's contract.
        unsafe { write(in_use_out, g.in_use(), "in_use_out") }
    })
}
