//! The waiting room: decisions, ticks, reloads, and what they answer.

pub(crate) mod budget;
pub mod cluster;
pub(crate) mod cookie_finder;
mod decide;
pub(crate) mod decision;
pub(crate) mod engine;
pub mod events;
mod front_door;
mod governance;
mod keys;
pub mod metrics;
mod place;
pub mod revoke;
mod room;
mod set_cookie;
mod snapshot;
mod stats;
mod storage;
mod tick;

pub use crate::page::{wants_json, wants_metrics, Page, PageRequest};
pub use cookie_finder::{find_cookie, find_cookie_bytes};
pub use decision::{Decision, Outcome, RoomStats, TicketRejections};
pub use engine::Engine;
pub use events::{Event, EventKind};
pub use front_door::{RoomLabel, Routed};
pub use metrics::{MetricFamily, MetricKind, Sample};
pub use revoke::{
    is_revoke_command, OutgoingRevocations, Revocation, RevokeRefused, COMMAND_HEADER,
    REVOCATIONS_PER_SYNC,
};
