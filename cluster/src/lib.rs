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
//! Once a sync interval (default 1 s), one process per host (a turn in the counters' shared
//! memory, busy for the whole sync) ticks, then sends the store, per room, one report: its
//! active visitors and admissions, its traffic, the allowances it holds, and its live waiters
//! per arrival bucket. A host goes by its id and its counters' incarnation, so counters made
//! anew (a restart without a state file, or another process with counters of its own) are a
//! new host, and the old one's holdings stay reserved until they lapse. The store answers each
//! report atomically (one Lua script call, `sync.lua`; `allocator` is the same steps in Rust,
//! for the in-process store, and a test holds the two to the same answers):
//!
//! 1. it keeps, for every host, the larger of what the host reported it holds and what it
//!    last granted it (*reserved*), per bucket for admissions, and for the bucket a host has
//!    just left;
//! 2. it moves the room's FIFO frontier over all hosts' waiters, oldest arrival bucket first,
//!    while they fit in the room's free slots (never past the oldest bucket a present host is
//!    in);
//! 3. it grants this host its holdings plus one headroom per bucket, within both limits: its
//!    waiters the frontier reached (oldest first, each after older waiters at other hosts
//!    that their own allowance does not cover), then, unless anyone waits behind the
//!    frontier, room for new arrivals: a chunk of twice its last interval's admissions, and a
//!    share of the free slots left after every waiter and every host's chunk, half evenly and
//!    half following its traffic (the seed's shares follow traffic alone, which starves quiet
//!    hosts: with many hosts, new arrivals there queued while the room was far from full),
//!    within what the waiters elsewhere that their own allowance does not cover leave; all
//!    clamped to the limit less every other host's reservation.
//!
//! A call costs the store the same however many hosts share the room: the room keeps its sums
//! over the hosts (reservations, active visitors, traffic, waiters by arrival bucket, what no
//! allowance covers), and each call takes its host's old entry out of them and puts the new
//! one in. A host's lease ending (it stops counting as present) and its reservation ending
//! (its entry goes) are processed from a set ordered by deadline, at most
//! [`LAPSES_PER_SYNC`] per call, soonest first; one not processed yet keeps counting what it
//! would release, which can only lower grants. A host syncs all its rooms in one exchange
//! (one pipeline to Redis: [`Store::sync_many`]).
//!
//! # The bound, and why it holds
//!
//! *While every host hears from the store at least once a lease and a session, the store keeps
//! what it acknowledged, and clocks do not step by a lease, the room never holds more than its
//! limits: zero overshoot.* Every grant is at most the limit less the others' reservations, so
//! reservations add up to at most the limit. A host enforces at most its reservation:
//! - a grant it has not applied yet is reported as held (`reserved_total` takes the larger of
//!   the applied and the pending grant); an allowance that shrinks below what a host already
//!   holds is enforced as what it holds (the tick publishes the larger) and reported so;
//! - a grant that arrives after a later one (another process's sync) is dropped by its
//!   sequence number; a report older than the host's last grant (a process that stalled past
//!   its turn) is answered with what the store already reserves, never lowering it;
//! - a lapsed grant is enforced, and nothing more, until the store could have given it away:
//!   the store keeps a silent host's reservation for a lease, a session and a margin of a
//!   lease after its last report, counted on its *effective* clock (never back, at most a
//!   lease forward per call: see `allocator`), and the host relies on it only for a lease and
//!   a session from *before* it sent that report, on its own clock. Only then does it fall
//!   back to `fallback_share` (default: one over the most hosts it has known), uncoordinated;
//! - a report is read under the tick lock, never half an advance, and by the process that
//!   holds the room's sync turn (its holder's pid in the turn: a dead holder is taken over at
//!   once).
//!
//! Its active visitors never exceed what it enforces. Summing over hosts: active visitors <=
//! reservations <= limit. The same argument runs per bucket for admissions.
//! `tests/fault_simulation.rs` checks it over thousands of seeded fault schedules (see
//! the `sim` module, feature `simulation`), `tests/three_hosts.rs` and `tests/redis_faults.rs`
//! against a real Redis, and `examples/simulate.rs` over ten virtual minutes of a sale.
//!
//! What the store cannot see costs what is stated here:
//! - *A host that goes longer than a lease and a session without an answer* keeps its
//!   visitors while the store hands their seats to others: the room can exceed its limits by
//!   that host's holdings, or its fallback share once it falls back if that is more;
//!   `fallback_share = 0` keeps it to the holdings.
//! - *A store that loses writes* (restarted without persistence, reloaded from an older
//!   snapshot, failed over to a replica that missed them) finds out at its first call when
//!   another server process answers (each room's hash keeps the Redis `run_id` that wrote
//!   it), else from the first host that holds a grant it has no record of (the store keeps
//!   each host's last grant number), or that relies on a reservation it does not hold; and
//!   learns: for a lease, or for the longest a host that reaches it may take to report
//!   ([`Params::learn`]), plus a lease of margin for its clock, it grants nobody more than
//!   they report holding. Grants it made to other hosts before it found out (a rollback in
//!   place), and hosts that do not report while it learns (partitioned, or counters restarted
//!   without a state file whose old holdings only the store knew), can cost up to a roomful.
//!   With a replicated store set `replicas`: a host applies a grant only once the replicas
//!   hold it (`WAIT`), so a failover forgets nothing a host uses.
//! - *A visitor who moves between hosts* is counted afresh where it lands (its ticket names
//!   the counters that counted it), and stays counted where it was until its session ends
//!   there: this under-admits, never over-admits. Put sticky load balancing in front.
//! - *Passthrough rooms* admit everyone: they take no part.
//! - *A waiter the store has not seen yet* takes its place in the global FIFO at its host's
//!   next sync; the other hosts learn of it at their next sync after that. Until then (two
//!   sync intervals, more while a sync runs late) they admit newcomers on the allowances they
//!   hold, ahead of it (FIFO order only; the counts are unaffected). A waiter its own host
//!   has no allowance for does not stop new arrivals elsewhere either: the new arrivals'
//!   allowances granted after the store heard of it leave its slot to it (under both
//!   limits), and its host has one for it once the others hold those allowances. Until then
//!   (about two sync intervals after each change: a sync, then the grant applied) a host may
//!   let new arrivals take slots it already holds, seats its visitors just left included,
//!   ahead of it; one queued in the last intervals before the room fills can so lose its slot
//!   and wait for a departure (in the simulated many-hosts room, seed 1, 1 of the 116 queued
//!   early). Waiters the frontier reached at other hosts, newer than it, leave it its slot
//!   under both limits too (each bucket's admissions), from their hosts' next syncs on.
//! - *A host whose lease ended* counts as present until the store processes the end (at most
//!   [`LAPSES_PER_SYNC`] ends per call, soonest first: at once unless many hosts lapse
//!   together): its waiters can move the global frontier early meanwhile (FIFO order only;
//!   the counts are unaffected, and everything else it counts for only lowers grants).
//! - *A host whose clock runs ahead* and holds waiters can move the global frontier early by
//!   its lead (FIFO order only, for that many buckets; the counts are unaffected). A host
//!   clock that *steps* moves its deadlines: forward, it falls back early; back, it relies on
//!   its grant longer than the store keeps it (both beyond the guarantee).
//!
//! Leases across hosts are the other half of this crate: [`RedisLeaseRoot`] (a lease source in
//! Redis running the core's algorithms, clamped in one script, O(1) in its clients) and
//! [`LeafRound`] (a host's coordinator as a leaf under it); their bounds are in their modules.
//!
//! What a host pays for not asking the store per request is early queueing and idle
//! allowances: a host whose traffic jumps waits up to a sync interval for a larger grant, and a
//! host that has just opened a bucket waits for the sync after its tick for that bucket's
//! allowance beyond what the previous grant gave it (the interval must be at most a quarter of
//! a bucket). `BENCHMARKS.md` measures it against per-host division and the seed's curve on the
//! same arrivals.

mod allocator;
mod lease_leaf;
mod lease_root;
mod memory_store;
mod periodic;
mod protocol;
mod redis_cluster_store;
mod redis_store;
#[cfg(feature = "simulation")]
pub mod sim;
mod store;
mod syncer;

pub use allocator::{allocate, relay_revocations, Entry, RoomState, LAPSES_PER_SYNC};
pub use lease_leaf::{leaf_for, LeafRound, LeafSync};
pub use lease_root::RedisLeaseRoot;
pub use memory_store::MemoryStore;
pub use protocol::{id_text, id_value, store_host, Params, Reply, Report};
pub use redis_cluster_store::{key_slot, RedisClusterStore};
pub use redis_store::{script_arg, script_calls, script_reply, RedisStore, SYNC_SCRIPT};
pub use store::{store_for, Store, StoreError, SyncCall};
pub use syncer::{host_name, Log, SyncOptions, SyncRound, SyncStatus, Syncer};
pub use velvet_rope::admission::cluster::TICK_LOCK_TAKEOVER_MS;
