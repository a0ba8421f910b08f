//! The client side of a lease: refresh before expiry, degrade when refreshes fail.
//!
//! A [`LeaseClient`] is driven by [`tick`](LeaseClient::tick) (from the host's timer, a
//! thread, or the engine's background step): it refreshes the lease before it expires and
//! pushes the granted capacity into its enforcer (a [`RateLimiter`] or a [`Gauge`]), which all
//! threads read at once. When a refresh fails the current lease is used until it expires;
//! after that the resource's [`RefreshFailureMode`] decides: `pessimistic` (0), `optimistic`
//! (what the client wants) or `safe` (the safe capacity of the last lease, else the
//! configured fallback).

use std::sync::Arc;

use super::config::RefreshFailureMode;
use super::coordinator::{Coordinator, Lease, LeaseRequest};
use super::demand::DemandEstimator;
use super::error::LeaseError;
use super::gauge::{units, Gauge};
use super::rate_limiter::RateLimiter;
use crate::clock::{Clock, Millis};

/// Where leases come from: the in-process coordinator, or a remote one.
pub trait LeaseSource: Send + Sync {
    /// Requests or refreshes a lease.
    fn request_lease(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError>;
    /// Gives a lease back.
    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError>;
}

impl LeaseSource for Coordinator {
    fn request_lease(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
        self.request_with(req, now)
    }

    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        self.release(client_id, resource)
    }
}

impl<T: LeaseSource + ?Sized> LeaseSource for Arc<T> {
    fn request_lease(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
        (**self).request_lease(req, now)
    }

    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        (**self).release_lease(client_id, resource)
    }
}

/// What enforces a leased capacity locally.
pub trait Enforcer {
    /// Applies a new capacity; every thread sharing the enforcer sees it at once.
    fn apply(&self, capacity: f64);
    /// Cumulative demand counter, if the enforcer tracks one (enables it when asked).
    fn demand(&self, enable: bool) -> Option<u64>;
}

impl<C: Clock> Enforcer for RateLimiter<C> {
    fn apply(&self, capacity: f64) {
        self.set_rate(capacity);
    }

    fn demand(&self, enable: bool) -> Option<u64> {
        if enable {
            self.set_demand_tracking(true);
            Some(RateLimiter::demand(self))
        } else {
            None
        }
    }
}

impl Enforcer for Gauge {
    fn apply(&self, capacity: f64) {
        self.set_capacity(units(capacity));
    }

    fn demand(&self, _enable: bool) -> Option<u64> {
        None
    }
}

/// Where the client's `wants` come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wants {
    /// A fixed amount set by the user.
    Fixed(f64),
    /// Estimated from observed demand; `initial` until one window has been measured.
    Estimated {
        /// The wants before any measurement.
        initial: f64,
    },
}

/// Options of a [`LeaseClient`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientOptions {
    /// Where `wants` come from.
    pub wants: Wants,
    /// Subclients this client speaks for (weight in `fair_share`).
    pub subclients: u32,
    /// Priority band.
    pub priority: u32,
    /// Behaviour once the lease expired and cannot be refreshed.
    pub on_failure: RefreshFailureMode,
    /// Safe capacity to use in `safe` mode before any lease was obtained.
    pub fallback_safe_capacity: f64,
    /// Delay before retrying a failed refresh, in ms.
    pub retry_ms: u64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            wants: Wants::Estimated { initial: 1.0 },
            subclients: 1,
            priority: 0,
            on_failure: RefreshFailureMode::Safe,
            fallback_safe_capacity: 0.0,
            retry_ms: 1000,
        }
    }
}

/// The state of a client after a tick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClientStatus {
    /// No refresh was due.
    Idle,
    /// A lease was obtained or refreshed.
    Refreshed(Lease),
    /// The refresh failed; the unexpired lease is still in force.
    RefreshFailedLeaseValid,
    /// The refresh failed and no valid lease remains; the failure mode applies.
    Degraded(RefreshFailureMode),
}

/// Keeps one lease of one resource fresh and enforced.
#[derive(Debug)]
pub struct LeaseClient<S: LeaseSource, E: Enforcer> {
    source: S,
    enforcer: E,
    client_id: String,
    resource: String,
    options: ClientOptions,
    estimator: DemandEstimator,
    lease: Option<Lease>,
    next_refresh: Millis,
    effective: f64,
}

impl<S: LeaseSource, E: Enforcer> LeaseClient<S, E> {
    /// A client that has no lease yet (its enforcer is set to 0 until the first tick).
    pub fn new(
        source: S,
        enforcer: E,
        client_id: impl Into<String>,
        resource: impl Into<String>,
        options: ClientOptions,
    ) -> Self {
        enforcer.apply(0.0);
        Self {
            source,
            enforcer,
            client_id: client_id.into(),
            resource: resource.into(),
            options,
            estimator: DemandEstimator::new(1000),
            lease: None,
            next_refresh: 0,
            effective: 0.0,
        }
    }

    /// The enforcer (share it with the threads that take permits).
    pub fn enforcer(&self) -> &E {
        &self.enforcer
    }

    /// The current lease, if any was obtained.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// The capacity the enforcer currently applies.
    pub fn effective_capacity(&self) -> f64 {
        self.effective
    }

    /// When the next refresh is due.
    pub fn next_refresh_at(&self) -> Millis {
        self.next_refresh
    }

    /// The wants the next refresh will send.
    pub fn current_wants(&self) -> f64 {
        match self.options.wants {
            Wants::Fixed(w) => w,
            Wants::Estimated { initial } => self.estimator.wants().unwrap_or(initial),
        }
    }

    fn set_effective(&mut self, capacity: f64) {
        self.effective = capacity;
        self.enforcer.apply(capacity);
    }

    /// Refreshes if due (always before expiry) and applies the outcome.
    pub fn tick(&mut self, now: Millis) -> ClientStatus {
        let estimating = matches!(self.options.wants, Wants::Estimated { .. });
        if let Some(total) = self.enforcer.demand(estimating) {
            self.estimator.observe(total, now);
        }
        let expired = match &self.lease {
            Some(l) => l.is_expired(now),
            None => true,
        };
        if now < self.next_refresh && !expired {
            return ClientStatus::Idle;
        }
        if now < self.next_refresh {
            // Expired while a retry is pending: degrade now, retry when due.
            return self.degrade();
        }
        let wants = self.current_wants();
        let has = match &self.lease {
            Some(l) if !l.is_expired(now) => l.capacity,
            _ => 0.0,
        };
        let req = LeaseRequest {
            client_id: &self.client_id,
            resource: &self.resource,
            wants,
            has,
            subclients: self.options.subclients.max(1),
            priority: self.options.priority,
            leaf: false,
        };
        match self.source.request_lease(&req, now) {
            Ok(lease) => {
                let interval_ms = super::config::secs_to_ms(lease.refresh_interval_secs).max(1);
                let half_left = lease.expires_at.saturating_sub(now) / 2;
                self.next_refresh = now + interval_ms.min(half_left).max(1);
                self.lease = Some(lease);
                self.set_effective(lease.capacity);
                ClientStatus::Refreshed(lease)
            }
            Err(_) => {
                self.next_refresh = now + self.options.retry_ms.max(1);
                match &self.lease {
                    Some(l) if !l.is_expired(now) => {
                        // Never retry later than the expiry: refresh before it if possible.
                        self.next_refresh = self
                            .next_refresh
                            .min(l.expires_at.saturating_sub(1))
                            .max(now + 1);
                        ClientStatus::RefreshFailedLeaseValid
                    }
                    _ => self.degrade(),
                }
            }
        }
    }

    fn degrade(&mut self) -> ClientStatus {
        let mode = self.options.on_failure;
        let capacity = match mode {
            RefreshFailureMode::Pessimistic => 0.0,
            RefreshFailureMode::Optimistic => self.current_wants(),
            RefreshFailureMode::Safe => self
                .lease
                .map(|l| l.safe_capacity)
                .unwrap_or(self.options.fallback_safe_capacity),
        };
        self.set_effective(capacity);
        ClientStatus::Degraded(mode)
    }

    /// Gives the lease back and sets the enforcer to 0.
    pub fn release(&mut self) -> Result<bool, LeaseError> {
        self.lease = None;
        self.set_effective(0.0);
        self.source.release_lease(&self.client_id, &self.resource)
    }
}
