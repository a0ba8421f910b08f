//! velvet-rope: an in-process admission engine.
//!
//! Per request, in nanoseconds and with no network hop, an [`Engine`] decides whether a
//! visitor may reach the origin now or must wait in a fair queue (a virtual waiting room), and
//! the [`lease`] module hands out and enforces shares of a downstream resource's capacity.
//!
//! ```
//! use velvet_rope::{Config, Engine, Outcome};
//!
//! let config = Config::from_toml(r#"
//!     [[rooms]]
//!     name = "shop"
//!     total_active_users = 2
//!     new_users_per_minute = 100
//! "#).unwrap();
//! let now = 1_800_000_000_000; // milliseconds since the Unix epoch
//! let engine = Engine::new(config, now).unwrap();
//! let first = engine.admit("shop", None, now).unwrap();
//! assert_eq!(first.outcome, Outcome::Admit);
//! let cookie = first.set_cookie.unwrap();             // "__vr_shop=...; Max-Age=300; ..."
//! let value = cookie.split(';').next().unwrap();      // what the browser sends back
//! assert_eq!(engine.admit("shop", Some(value), now).unwrap().outcome, Outcome::Admit);
//! engine.admit("shop", None, now).unwrap();           // a second visitor fills the room
//! let third = engine.admit("shop", None, now).unwrap();
//! assert_eq!(third.outcome, Outcome::Queue);
//! assert_eq!(third.position, Some(1));
//! ```
//!
//! The crate is laid out by part: [`admission`] (the engine: decisions, ticks, reloads),
//! `counters` (the lock-free counters, in owned or shared memory; memory orders are documented
//! at the top of each structure's module), [`ticket`] (sealed cookies), [`lease`] (capacity
//! leases), [`config`] (the one schema every front door reads), [`page`] (the waiting page:
//! templates, variables, languages).

#![cfg_attr(velvet_rope_loom, allow(dead_code))]

pub mod admission;
pub mod clock;
pub mod config;
mod counters;
pub mod env;
pub mod error;
pub mod fork_safe_lock;
mod hash;
pub mod lease;
mod needle;
pub mod page;
mod random;
pub mod request;
pub mod routing;
pub mod shares;
#[cfg(feature = "simulation")]
pub mod simulation;
mod sync;
pub mod ticket;

pub use admission::{
    find_cookie, find_cookie_bytes, is_revoke_command, wants_json, wants_metrics, Decision, Engine,
    MetricFamily, MetricKind, Outcome, Page, PageRequest, Revocation, RevokeRefused, RoomLabel,
    RoomStats, Routed, Sample, TicketRejections,
};
pub use clock::{Clock, CoarseSystemClock, FakeClock, Millis, SystemClock, MAX_NOW_MS};
pub use config::{Config, QueueingMethod, RoomConfig};
pub use counters::slot_pool;
pub use error::{Error, Result};
pub use ticket::TicketError;

/// Longest `Set-Cookie` value an engine hands out (the configuration bounds every part of it;
/// the C ABI's decision buffer holds this plus a NUL).
pub const MAX_SET_COOKIE_LEN: usize = 1023;

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
