//! velvet-rope's cluster tier: many hosts share one waiting room's limits through a store
//! (Redis), in the background. Requests never touch the store.
//!
//! ```no_run
//! use std::sync::Arc;
//! use velvet_rope::{Engine, SystemClock, Clock};
//! use velvet_rope_cluster::Syncer;
//!
//! let config = r#"
//!     [cluster]
//!     redis_url = "redis://127.0.0.1:6379"
//!     [[rooms]]
//!     name = "shop"
//!     total_active_users = 1000
//!     new_users_per_minute = 600
//! "#;
//! let engine = Arc::new(Engine::from_text(config, SystemClock.now_ms()).unwrap());
//! let _sync = Syncer::from_engine(engine.clone()).unwrap(); // syncs until dropped
//! // ... engine.admit(...) per request, engine.tick(...) about once a second, as alone.
//! ```
//!
//! # How hosts share a room
//!
//! Each host (the processes of one machine sharing counters) enforces, in place of the room's
//! `total_active_users` and `new_users_per_minute`, *allowances* the store grants it: a number
//! of active visitors, and a number of admissions in each bucket. The host's own counting is
//! exact (the core's pools never hand out a slot past the ledger, see the core's `budget`), so
//! with an allowance standing where the limit stood, the host holds at most its allowance of
//! active visitors and makes at most its allowance of admissions per bucket.
//!
//! Once a sync interval (default 1 s), one process per host sends the store, per room, one
//! report: its active visitors and admissions, its traffic, the allowances it holds, and its
//! live waiters per arrival bucket. The store answers it atomically (one Lua script call,
//! `sync.lua`; `allocator` is the same steps in Rust for the in-process store):
//!
//! 1. it keeps, for every host, the larger of what the host reported it holds and what it
//!    last granted it (*reserved*);
//! 2. it grants this host its active visitors plus what it wants (its share of the free slots,
//!    following its traffic as in the seed, plus a chunk of twice its last interval's
//!    admissions, plus its waiters the frontier has reached), clamped to the limit less what
//!    every other host has reserved (and the same per bucket for admissions);
//! 3. it moves the room's FIFO frontier over all hosts' waiters, oldest arrival bucket first,
//!    while they fit in the room's free slots, and says how many wait behind it elsewhere (new
//!    arrivals at this host queue while anyone does).
//!
//! # The bound, and why it holds
//!
//! *While the store answers, the room never holds more than its limits: zero overshoot.* Every
//! grant is at most the limit less the others' reservations, so reservations add up to at most
//! the limit. A host enforces at most its reservation: a grant it has not applied yet is
//! reported as held (`reserved_total` takes the larger of the applied and the pending grant),
//! and an allowance that shrinks below what a host already holds is enforced as what it holds
//! (the tick publishes the larger), and reported so. Its active visitors never exceed what it
//! enforces. Summing over hosts: active visitors <= reservations <= limit. The same argument
//! runs per bucket for admissions.
//!
//! What the store cannot see costs only what is stated here:
//! - *A host that stops syncing* (crashed, partitioned) keeps its reservation for its lease,
//!   then its allowance of active visitors for a session more (`hold`: its visitors may still
//!   be active that long). A partitioned host enforces its grant until its lease ends on its
//!   own clock (which started before the store's), then `fallback_share` of the limits: that
//!   share, uncoordinated, is the overshoot a partition longer than a lease can cause, per
//!   partitioned host. `fallback_share = 0` gives no overshoot, and no new admissions there.
//! - *A store that restarts* without persistence forgets every reservation. It then grants
//!   nobody more than what it reports holding, for one lease (learning, as Doorman's server
//!   does after a restart): every grant made before the restart lapses within a lease.
//! - *A visitor who moves between hosts* is counted afresh where it lands (its ticket names
//!   the counters that counted it), and stays counted where it was until its session ends
//!   there: this under-admits, never over-admits. Put sticky load balancing in front.
//!
//! What a host pays for not asking the store per request is early queueing: a host whose
//! traffic jumps waits up to a sync interval for a larger grant; `BENCHMARKS.md` measures it
//! against per-host division and the seed's curve on the same arrivals.

mod allocator;
mod memory_store;
mod protocol;
mod redis_store;
mod store;
mod syncer;

pub use allocator::{allocate, Entry, RoomState};
pub use memory_store::MemoryStore;
pub use protocol::{Params, Reply, Report};
pub use redis_store::{RedisStore, SYNC_SCRIPT};
pub use store::{Store, StoreError};
pub use syncer::{host_name, Log, SyncOptions, SyncStatus, Syncer};
