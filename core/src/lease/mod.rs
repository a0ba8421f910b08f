//! Capacity leases: Doorman-style allocation of a shared resource among clients, and the
//! client-side enforcement of what each client was granted.
//!
//! - [`config`]: the `resources` section ([`ResourceTemplate`], [`LeaseConfig`]).
//! - [`template`]: template lookup (exact identifier first, then globs in order).
//! - [`algorithm`]: `none`, `static`, `proportional_share`, `fair_share`,
//!   `reserved_plus_shared` as pure functions, priority bands highest first.
//! - [`coordinator`]: the in-process [`Coordinator`] handing out [`Lease`]s.
//! - [`superseded`]: a leaf's earlier grants that still count while their leases run.
//! - [`rate_limiter`], [`gauge`]: [`RateLimiter`] and [`Gauge`] enforcing a lease.
//! - [`demand`], [`client`]: `wants` from observed demand; [`LeaseClient`] refreshing and
//!   degrading (`pessimistic`, `optimistic`, `safe`) when refreshes fail.

pub mod algorithm;
pub mod client;
pub mod coarse_clock;
pub mod config;
pub mod coordinator;
pub mod demand;
pub mod error;
pub mod gauge;
pub mod metrics;
pub mod rate_limiter;
pub mod superseded;
pub mod template;
pub mod timer;

pub use algorithm::Demand;
pub use client::{ClientOptions, ClientStatus, Enforcer, LeaseClient, LeaseSource, Wants};
pub use coarse_clock::{CoarseClock, SharedClock};
pub use config::{
    AlgorithmConfig, AlgorithmKind, LeaseConfig, RefreshFailureMode, ResourceTemplate,
};
pub use coordinator::{Aggregate, ClientGrant, Coordinator, Lease, LeaseRequest, Upstream};
pub use demand::DemandEstimator;
pub use error::LeaseError;
pub use gauge::{Gauge, GaugeGuard, OwnedGaugeGuard};
pub use rate_limiter::{Denied, RateLimiter, RateParams};
pub use template::TemplateSet;
