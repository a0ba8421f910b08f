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
//! Memory orders and the reasoning behind each lock-free structure are documented at the top
//! of the module that holds it (`slot_pool`, `active_counts`, `queue_lanes`).

#![cfg_attr(velvet_rope_loom, allow(dead_code))]

pub mod clock;
pub mod config;
pub mod error;
pub mod lease;
pub mod shares;
pub mod ticket;

mod active_counts;
#[cfg(not(velvet_rope_loom))]
mod cookie_finder;
#[cfg(not(velvet_rope_loom))]
mod decision;
#[cfg(not(velvet_rope_loom))]
mod engine;
mod fingerprint_set;
mod hash;
#[cfg(not(velvet_rope_loom))]
mod page;
mod queue_lanes;
mod random;
#[cfg(not(velvet_rope_loom))]
mod region;
#[cfg(not(velvet_rope_loom))]
mod room_counters;
pub mod slot_pool;
mod sync;
#[cfg(not(velvet_rope_loom))]
mod tick_block;
mod ticket_cache;

#[cfg(all(test, velvet_rope_loom))]
mod loom_models;

pub use clock::{Clock, FakeClock, Millis, SystemClock};
pub use config::{Config, QueueingMethod, RoomConfig};
#[cfg(not(velvet_rope_loom))]
pub use decision::{Decision, Outcome, RoomStats, TicketRejections};
#[cfg(not(velvet_rope_loom))]
pub use engine::{find_cookie, find_cookie_bytes, Engine};
pub use error::{Error, Result};
#[cfg(not(velvet_rope_loom))]
pub use page::{wants_json, Page};
pub use ticket::TicketError;
