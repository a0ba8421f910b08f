//! Leases: `coordinator*`, `rateLimiter*` and `gauge*` functions over numeric handles.

use std::sync::LazyLock;

use napi_derive::napi;
use velvet_rope::lease::{self, Denied, LeaseConfig};
use velvet_rope::{Clock, Config};

use crate::errors::{invalid, lease_to_js, to_js};
use crate::handles::Handles;

static COORDINATORS: LazyLock<Handles<lease::Coordinator>> =
    LazyLock::new(|| Handles::new("coordinator"));
pub(crate) static LIMITERS: LazyLock<Handles<lease::RateLimiter>> =
    LazyLock::new(|| Handles::new("rate limiter"));
static GAUGES: LazyLock<Handles<lease::Gauge>> = LazyLock::new(|| Handles::new("gauge"));

/// Leaf coordinators' upstream loops, by handle (a `[cluster]` table makes a coordinator a
/// leaf under the Redis lease root).
static LEAVES: std::sync::Mutex<Vec<(u32, velvet_rope_cluster::LeafSync)>> =
    std::sync::Mutex::new(Vec::new());

/// Frees a coordinator's handle (and stops its upstream loop, off JavaScript's thread).
#[napi]
pub fn coordinator_free(coordinator: u32) {
    stop_leaf(coordinator);
    COORDINATORS.remove(coordinator);
}

/// Frees the coordinators, rate limiters and gauges environment `owner` still holds (it is
/// torn down), and stops the coordinators' upstream loops.
pub(crate) fn free_environment(owner: u64) {
    for handle in COORDINATORS.take_owned_by(owner) {
        stop_leaf(handle);
    }
    LIMITERS.take_owned_by(owner);
    GAUGES.take_owned_by(owner);
}

/// Stops the upstream loop of coordinator `handle`, if it has one, off JavaScript's thread.
fn stop_leaf(handle: u32) {
    let mut leaves = LEAVES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = leaves.iter().position(|(h, _)| *h == handle) {
        let (_, leaf) = leaves.swap_remove(i);
        drop(leaves);
        let _ = std::thread::Builder::new()
            .name("velvet-rope-leaf-stop".into())
            .spawn(move || drop(leaf));
    }
}

/// Frees a rate limiter's handle.
#[napi]
pub fn rate_limiter_free(limiter: u32) {
    LIMITERS.remove(limiter);
}

/// Frees a gauge's handle.
#[napi]
pub fn gauge_free(gauge: u32) {
    GAUGES.remove(gauge);
}
use crate::or_now;

/// A coordinator from configuration text (or, with `isPath`, a file) with `[[resources]]`;
/// with a `[cluster]` table, a leaf under the Redis lease root it names.
#[napi]
pub fn coordinator_new(
    config: String,
    is_path: bool,
    now_ms: Option<f64>,
) -> napi::Result<u32, &'static str> {
    let config = if is_path {
        Config::from_path(&config)
    } else {
        Config::from_text(&config)
    }
    .map_err(to_js)?;
    let handle = lease::Coordinator::from_config(
        &LeaseConfig {
            resources: config.resources.clone(),
        },
        or_now(now_ms)?,
    )
    .map_err(lease_to_js)
    .and_then(|c| COORDINATORS.insert(c))?;
    // With a `[cluster]` table: a leaf under the Redis lease root.
    let leaf = velvet_rope_cluster::leaf_for(&config, COORDINATORS.get(handle)?);
    match leaf {
        Ok(Some(leaf)) => LEAVES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((handle, leaf)),
        Ok(None) => {}
        Err(e) => {
            COORDINATORS.remove(handle);
            return Err(lease_to_js(e));
        }
    }
    Ok(handle)
}

/// A lease: what a client may use, until when.
#[napi(object)]
pub struct LeaseObject {
    /// Granted capacity (per second for rates, units for gauges).
    pub capacity: f64,
    /// Expiry, milliseconds since the Unix epoch.
    pub expires_at_ms: f64,
    /// Seconds between refreshes.
    pub refresh_interval_secs: f64,
    /// What to use when the lease cannot be refreshed.
    pub safe_capacity: f64,
}

/// Asks for `wants` of `resource` for `clientId`; returns the lease granted.
#[napi]
pub fn coordinator_request(
    coordinator: u32,
    client_id: String,
    resource: String,
    wants: f64,
    priority: u32,
    now_ms: Option<f64>,
) -> napi::Result<LeaseObject, &'static str> {
    let now = or_now(now_ms)?;
    let l = COORDINATORS
        .with(coordinator, |c| {
            c.request(&client_id, &resource, wants, priority, now)
        })?
        .map_err(lease_to_js)?;
    Ok(LeaseObject {
        capacity: l.capacity,
        expires_at_ms: l.expires_at as f64,
        refresh_interval_secs: l.refresh_interval_secs,
        safe_capacity: l.safe_capacity,
    })
}

/// Gives a client's lease back; whether it held one.
#[napi]
pub fn coordinator_release(
    coordinator: u32,
    client_id: String,
    resource: String,
) -> napi::Result<bool, &'static str> {
    COORDINATORS
        .with(coordinator, |c| c.release(&client_id, &resource))?
        .map_err(lease_to_js)
}

/// Every resource's metrics in the OpenMetrics text format, ending with `# EOF`.
#[napi]
pub fn coordinator_metrics_text(
    coordinator: u32,
    now_ms: Option<f64>,
) -> napi::Result<String, &'static str> {
    let now = or_now(now_ms)?;
    COORDINATORS.with(coordinator, |c| c.metrics_text(now))
}

/// Every event the coordinator logged since the last call, with the ends of learning periods
/// over at `now_ms` (its learning, a leaf's root's learning and outages).
#[napi]
pub fn coordinator_drain_events(
    coordinator: u32,
    now_ms: Option<f64>,
) -> napi::Result<Vec<crate::engine::EventObject>, &'static str> {
    let now = or_now(now_ms)?;
    COORDINATORS.with(coordinator, |c| {
        crate::engine::events_to_js(c.drain_events(now))
    })
}

/// Every resource's metrics, family by family.
#[napi]
pub fn coordinator_metrics(
    coordinator: u32,
    now_ms: Option<f64>,
) -> napi::Result<Vec<crate::engine::MetricFamilyObject>, &'static str> {
    let now = or_now(now_ms)?;
    COORDINATORS.with(coordinator, |c| {
        crate::engine::families_to_js(c.metrics(now))
    })
}

fn rate(rate: f64) -> napi::Result<f64, &'static str> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(rate)
    } else {
        Err(invalid(format!(
            "rate must be a finite number >= 0, got {rate}"
        )))
    }
}

/// A limiter of `rate` permits per second, spread evenly.
#[napi]
pub fn rate_limiter_new(per_second: f64) -> napi::Result<u32, &'static str> {
    LIMITERS.insert(lease::RateLimiter::new(rate(per_second)?))
}

/// Takes `n` permits now (`null`), or says in how many milliseconds they may be free; throws
/// if they never can be.
#[napi]
pub fn rate_limiter_try_or_wait(limiter: u32, n: u32) -> napi::Result<Option<f64>, &'static str> {
    let limiter = LIMITERS.get(limiter)?;
    match limiter.check(n) {
        Ok(()) => Ok(None),
        Err(Denied::NotUntil(at)) => {
            let now = limiter.clock().now_ms();
            Ok(Some(at.saturating_sub(now).max(1) as f64))
        }
        Err(Denied::ZeroRate) => Ok(Some(10.0)),
        Err(Denied::ExceedsBurst { burst }) => Err(lease_to_js(lease::LeaseError::ExceedsLimit {
            requested: u64::from(n),
            limit: burst,
        })),
    }
}

/// Changes the rate; every caller sees it at once.
#[napi]
pub fn rate_limiter_set_rate(limiter: u32, per_second: f64) -> napi::Result<(), &'static str> {
    let per_second = rate(per_second)?;
    LIMITERS.with(limiter, |l| l.set_rate(per_second))
}

/// The rate in permits per second.
#[napi]
pub fn rate_limiter_rate(limiter: u32) -> napi::Result<f64, &'static str> {
    LIMITERS.with(limiter, |l| l.params().rate())
}

/// A gauge of `capacity` units.
#[napi]
pub fn gauge_new(capacity: u32) -> napi::Result<u32, &'static str> {
    GAUGES.insert(lease::Gauge::new(capacity))
}

/// Whole units of a lease's capacity.
#[napi]
pub fn gauge_units(capacity: f64) -> u32 {
    lease::gauge::units(capacity)
}

/// Takes `n` units if free now. Never blocks.
#[napi]
pub fn gauge_try_acquire(gauge: u32, n: u32) -> napi::Result<bool, &'static str> {
    let gauge = GAUGES.get(gauge)?;
    let capacity = gauge.capacity();
    if n > capacity && capacity > 0 {
        return Err(lease_to_js(lease::LeaseError::ExceedsLimit {
            requested: u64::from(n),
            limit: u64::from(capacity),
        }));
    }
    Ok(gauge.try_acquire_permits(n))
}

/// Gives back `n` units; throws if fewer are held.
#[napi]
pub fn gauge_release(gauge: u32, n: u32) -> napi::Result<(), &'static str> {
    GAUGES
        .with(gauge, |g| g.release_permits(n))?
        .map_err(lease_to_js)
}

/// Changes the capacity.
#[napi]
pub fn gauge_set_capacity(gauge: u32, capacity: u32) -> napi::Result<(), &'static str> {
    GAUGES.with(gauge, |g| g.set_capacity(capacity))
}

/// Units the gauge holds at most.
#[napi]
pub fn gauge_capacity(gauge: u32) -> napi::Result<u32, &'static str> {
    GAUGES.with(gauge, |g| g.capacity())
}

/// Units held now.
#[napi]
pub fn gauge_in_use(gauge: u32) -> napi::Result<u32, &'static str> {
    GAUGES.with(gauge, |g| g.in_use())
}
