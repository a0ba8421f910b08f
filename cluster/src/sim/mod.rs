//! Deterministic fault simulation of the cluster tier (feature `simulation`).
//!
//! In the spirit of FoundationDB's simulation tests: hosts, each with several processes
//! sharing one room's counters, sync through a store on a virtual clock, while a seed chooses
//! the visitors and the faults. The code under test is the production code (engines over
//! shared regions, [`SyncRound`](crate::SyncRound), the allocator the Redis script mirrors);
//! what the simulation replaces is time, the network, the store's server, and the process's
//! environment (process ids, which processes live, where a process stops or crashes; see
//! `velvet_rope::simulation`).
//!
//! After every step the invariant is checked against the ground truth (every visitor's seat,
//! from the tickets the engines handed out):
//!
//! - **exact**: while every host syncs at least once a lease and a session (no partition,
//!   stall or outage longer), the store keeps what it acknowledged (`replicas` for
//!   failovers), and a store that lost its data hears from every host within its learning
//!   lease, the room never holds more than `total_active_users`, and no bucket admits more
//!   than `new_users_per_minute`;
//! - **bounded** otherwise: at most the holdings and fallback share of each host that went
//!   longer without a sync (or whose clock stepped), plus a roomful for a store that lost
//!   writes hosts were using (see [`Outcome::bound`]).
//!
//! A run is a pure function of its [`Scenario`] and seed: a failing seed replays exactly
//! (`SIM_SEED=<n>`), with a trace of its last events.
//!
//! ```no_run
//! use velvet_rope_cluster::sim::{run, Scenario};
//! let outcome = run(&Scenario::default(), 42);
//! assert!(outcome.violation.is_none(), "{}", outcome.report());
//! ```

mod crowd;
mod faults;
mod leases;
mod measure;
mod network;
mod process;
mod sharing;
mod truth;
mod world;

pub use crowd::{Crowd, Spike};
pub use faults::{Fault, Point, ProcessFault};
pub use leases::{run_leases, LeaseFault, LeaseMeasured, LeaseSample, LeaseScenario, LeaseSpike};
pub use measure::{Distribution, Measured, Sample};
pub use sharing::Sharing;

/// What a simulation runs: the cluster, the room, the crowd, and the faults.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Hosts sharing the room.
    pub hosts: usize,
    /// Processes per host (they share the host's counters, as nginx or gunicorn workers do).
    pub processes: usize,
    /// `total_active_users`.
    pub total: u64,
    /// `new_users_per_minute` (per bucket).
    pub per_minute: u64,
    /// `session_duration`, in buckets.
    pub session: u32,
    /// Bucket width, seconds.
    pub bucket_secs: u32,
    /// `cluster.sync_interval_ms`.
    pub sync_interval_ms: u64,
    /// `cluster.lease_ms`.
    pub lease_ms: u64,
    /// `cluster.timeout_ms`.
    pub timeout_ms: u64,
    /// `cluster.fallback_share`.
    pub fallback_share: f64,
    /// `cluster.replicas` (0 or 1 here: the simulated store has one replica).
    pub replicas: u32,
    /// Virtual time simulated, ms.
    pub run_ms: u64,
    /// New visitors per second, over all hosts (varied by the seed over time and hosts).
    pub arrivals_per_sec: f64,
    /// Faults injected at set times, besides those the seed draws.
    pub faults: Vec<Fault>,
    /// Whether the seed draws faults too, and of which kind: within the guarantee only, or
    /// beyond it as well.
    pub random_faults: RandomFaults,
    /// Keep the last this many events for the report of a failing run.
    pub trace: usize,
    /// A scheduled event of the room, if any (see [`SimEvent`]).
    pub event: Option<SimEvent>,
    /// The chance that the origin ends an admitted visitor's session with its answer
    /// (`Velvet-Rope-Command: revoke`; the room then has `enabled_origin_commands`). A
    /// revoked visitor comes back without its ticket, or (a client that ignores the clearing
    /// cookie, one in three) replays it: the host must refuse it, and the seat it freed
    /// counts for nobody else. 0: no revocations (the seed's draws are as before).
    pub revocations: f64,
    /// The chance that a visitor's request goes to its own host (a load balancer with
    /// affinity). Below 1, a request may go to any host (drawn by the hosts' shares of the
    /// arrivals), which counts the visitor afresh; a revocation then frees that seat there
    /// too, when it reaches that host. 1: every request at its own host (the seed's draws
    /// are as before).
    pub affinity: f64,
    /// A planned crowd (`velvet-rope simulate`) instead of the fault tests' bursts: its
    /// arrivals and behaviour, and the run measures it (see [`Outcome::measured`]).
    pub crowd: Option<Crowd>,
    /// `refresh_interval`, seconds (a waiter refreshes that often).
    pub refresh_secs: u32,
    /// `max_live_waiters`.
    pub max_live_waiters: u32,
    /// `queue_buckets`.
    pub queue_buckets: u32,
    /// How the hosts share the room: through the store (what the checks hold to the limits),
    /// or one of the seed's divisions, to compare (measured only: their overshoot is theirs).
    pub sharing: Sharing,
}

/// A scheduled event of the simulated room: another `total_active_users` from `start_ms` to
/// `end_ms` (virtual time from the run's start). At every switch to a lower limit the room
/// holds no one more than before while it is over the new limit, and no one is let in while
/// it is at or over it: no admission may make the room hold more than the limit in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimEvent {
    /// When the event starts.
    pub start_ms: u64,
    /// When it ends.
    pub end_ms: u64,
    /// `total_active_users` during it.
    pub total: u64,
    /// `new_users_per_minute` during it (`None`: the room's).
    pub per_minute: Option<u64>,
    /// When its pre-queue opens (`None`: no pre-queue).
    pub prequeue_ms: Option<u64>,
    /// Whether the start shuffles the pre-queue.
    pub shuffle: bool,
}

/// Which faults a seed draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandomFaults {
    /// None: only the scenario's own.
    None,
    /// Only faults the exactness guarantee covers.
    WithinGuarantee,
    /// Any, beyond the guarantee too (checked against the stated bound).
    Any,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            hosts: 3,
            processes: 2,
            total: 30,
            per_minute: 40,
            session: 4,
            bucket_secs: 1,
            sync_interval_ms: 100,
            lease_ms: 600,
            timeout_ms: 200,
            fallback_share: 0.3,
            replicas: 1,
            run_ms: 20_000,
            arrivals_per_sec: 12.0,
            faults: Vec::new(),
            random_faults: RandomFaults::WithinGuarantee,
            trace: 60,
            event: None,
            revocations: 0.0,
            affinity: 1.0,
            crowd: None,
            refresh_secs: 1,
            max_live_waiters: 1024,
            queue_buckets: 64,
            sharing: Sharing::Store,
        }
    }
}

impl Scenario {
    /// A lease and a session: how long a host may go without a sync within the guarantee.
    pub fn hold_ms(&self) -> u64 {
        self.lease_ms + u64::from(self.session) * u64::from(self.bucket_secs) * 1000
    }

    /// How long a store that lost writes learns at least, in real time (as the sync loop
    /// tells it: see [`Params::learn`](crate::Params::learn); the store adds a lease of margin
    /// for its clock): every host must be heard within it.
    pub fn learn_ms(&self) -> u64 {
        let busy = (4 * self.timeout_ms + 500).max(crate::TICK_LOCK_TAKEOVER_MS);
        self.lease_ms.max(2 * self.sync_interval_ms + busy)
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Events simulated.
    pub steps: u64,
    /// The most visitors the room held at once (ground truth).
    pub max_active: u64,
    /// The most admissions booked to one bucket.
    pub max_per_bucket: u64,
    /// Visitors admitted (first admissions).
    pub admitted: u64,
    /// Visitors queued on arrival.
    pub queued: u64,
    /// Sessions the origin revoked.
    pub revoked: u64,
    /// Faults that happened (drawn or given).
    pub faults: Vec<String>,
    /// The most the room could hold over its limit given the faults beyond the guarantee
    /// (0 when every fault was within it).
    pub bound: u64,
    /// The same for one bucket's admissions.
    pub bound_per_bucket: u64,
    /// The first invariant broken, if any.
    pub violation: Option<String>,
    /// The last events before the end (or the violation).
    pub trace: Vec<String>,
    /// Syncs answered, failed, and reports found stale or learning.
    pub syncs: u64,
    /// Syncs that failed.
    pub sync_failures: u64,
    /// Processes crashed.
    pub crashes: u64,
    /// Reports the store found older than their host's last grant.
    pub stale_reports: u64,
    /// With a planned crowd: what the run measured.
    pub measured: Option<Measured>,
}

impl Outcome {
    /// A report to print for a failing run: the seed to replay, the faults, the trace.
    pub fn report(&self) -> String {
        let mut s = format!(
            "seed {} (replay: SIM_SEED={}): {}\n  max active {} (bound over the limit {}), \
             max per bucket {} (bound {}), admitted {}, queued {}, syncs {} ({} failed), \
             crashes {}\n  faults:\n",
            self.seed,
            self.seed,
            self.violation.as_deref().unwrap_or("no violation"),
            self.max_active,
            self.bound,
            self.max_per_bucket,
            self.bound_per_bucket,
            self.admitted,
            self.queued,
            self.syncs,
            self.sync_failures,
            self.crashes
        );
        for f in &self.faults {
            s.push_str(&format!("    {f}\n"));
        }
        s.push_str("  last events:\n");
        for t in &self.trace {
            s.push_str(&format!("    {t}\n"));
        }
        s
    }
}

/// Runs `scenario` with `seed`. Deterministic: the same scenario and seed give the same
/// outcome.
///
/// # Panics
///
/// When a host's configuration is refused (the scenario's settings out of the engine's
/// ranges): [`run_with_progress`] returns that as an error.
pub fn run(scenario: &Scenario, seed: u64) -> Outcome {
    match world::World::new(scenario, seed) {
        Ok(w) => w.run(&mut |_| {}),
        Err(e) => panic!("{e}"),
    }
}

/// [`run`], telling `progress` the virtual time reached (ms from the start) about once a
/// simulated second; an error when a host's configuration is refused.
pub fn run_with_progress(
    scenario: &Scenario,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Outcome, String> {
    Ok(world::World::new(scenario, seed)?.run(progress))
}
