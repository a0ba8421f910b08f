//! The counters of rooms: plain `#[repr(C)]`-style atomics at fixed offsets in a byte region,
//! so the same code works on memory the engine owns and on memory several processes share.
//!
//! - [`region`]: the memory, owned or borrowed;
//! - [`directory`]: a shared region's header and its rooms by name;
//! - [`state_file`]: a region in a mapped file that outlives processes;
//! - [`room_layout`], [`room_counters`]: one room's blocks and the views over them;
//! - the lock-free structures: [`slot_pool`] (the ledger of free slots), [`buckets`] (per-bucket
//!   admissions, moves and replay guards), [`queue_lanes`] (live waiters),
//!   [`fingerprint_set`] (the insert-if-absent sets behind every replay guard);
//! - [`revocations`]: revoked ticket ids, kept for as long as their tickets could be presented;
//! - [`tick_block`], [`process_lock`]: the state ticks share, and who advances it.
//!
//! Memory orders are documented at the top of each lock-free structure's module; each has a
//! loom model in `loom_models`.

pub(crate) mod buckets;
pub(crate) mod directory;
pub(crate) mod fingerprint_set;
pub(crate) mod process_lock;
pub(crate) mod queue_lanes;
pub(crate) mod region;
pub(crate) mod revocations;
pub(crate) mod room_counters;
pub(crate) mod room_layout;
pub(crate) mod room_tallies;
pub mod slot_pool;
pub(crate) mod state_file;
pub(crate) mod tick_block;

#[cfg(all(test, velvet_rope_loom))]
mod loom_models;
