//! Leases in virtual time (`velvet-rope simulate` with a `[lease]` scenario): a tree of real
//! coordinators (Doorman's: a root, levels of leaves each leasing from the level above with
//! [`LeafRound`], clients at the bottom), clients whose demand changes, spikes, the root
//! restarting (it learns) or unreachable, measured every second: what the clients were
//! granted against the capacity and against what they wanted.
//!
//! The code under test is the production code: [`Coordinator`]s and [`LeafRound`]s, as a host
//! runs them; a root restart is a new coordinator in its place (what a restarted process is).
//! What the simulation replaces is time (one clock every node reads) and the network (a
//! request reaches its parent at once, or fails while the root is down).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use velvet_rope::lease::{Coordinator, Lease, LeaseConfig, LeaseError, LeaseRequest, LeaseSource};
use velvet_rope::{Clock, FakeClock};

use super::measure::Distribution;
use crate::lease_leaf::LeafRound;

/// The virtual clock's start (a whole minute).
const T0: u64 = 1_800_000_000_000;
const RESOURCE: &str = "resource";

/// A lease scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseScenario {
    /// The resource's capacity (at the root).
    pub capacity: f64,
    /// The algorithm (`fair_share`, `proportional_share`, ...).
    pub algorithm: String,
    /// Seconds a lease lasts.
    pub lease_secs: f64,
    /// Seconds between refreshes (clients and leaves).
    pub refresh_secs: f64,
    /// Seconds of learning after a root starts (`None`: one lease).
    pub learning_secs: Option<f64>,
    /// The tree below the root: children per node, level by level (`[5]`: five clients of
    /// the root; `[3, 3, 5]`: three regions of three data centres of five clients).
    pub tree: Vec<usize>,
    /// Each client's demand: a mean, a spread (a fraction; demand is drawn uniformly within
    /// it) and how often it is drawn again.
    pub wants: f64,
    /// See `wants`.
    pub spread: f64,
    /// See `wants` (ms; 0: never).
    pub change_every_ms: u64,
    /// Spikes of demand.
    pub spikes: Vec<LeaseSpike>,
    /// Faults of the root.
    pub faults: Vec<LeaseFault>,
    /// Virtual time simulated, ms.
    pub run_ms: u64,
}

/// Some clients' demand multiplied for a while.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSpike {
    /// When (ms from the start).
    pub at_ms: u64,
    /// How long.
    pub ms: u64,
    /// The share of the clients it hits (drawn by the seed).
    pub clients: f64,
    /// Their demand times this.
    pub factor: f64,
}

/// A fault of the root.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LeaseFault {
    /// The root crashes and restarts empty (a new coordinator: it learns).
    RootRestart {
        /// When.
        at_ms: u64,
    },
    /// The root cannot be reached for `ms`.
    RootDown {
        /// When.
        at_ms: u64,
        /// How long.
        ms: u64,
    },
}

/// One second of a lease run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LeaseSample {
    /// Seconds from the start.
    pub second: u64,
    /// What the clients want together.
    pub wanted: f64,
    /// What they hold together (unexpired leases).
    pub granted: f64,
    /// Per client: (wanted, granted), for the first ten clients.
    pub clients: Vec<(f64, f64)>,
}

/// What a lease run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LeaseMeasured {
    /// Seconds simulated.
    pub seconds: u64,
    /// The capacity.
    pub capacity: f64,
    /// Clients.
    pub clients: usize,
    /// Granted over what could be granted (the smaller of the capacity and what the clients
    /// wanted), each second's at most 1, averaged over every second.
    pub allocated_mean: f64,
    /// The same over the seconds after convergence (three refresh intervals and a lease
    /// after the last change of demand, a spike's start or end, a fault or an outage's end).
    pub allocated_after_convergence: Option<f64>,
    /// The most granted, in percent of the capacity.
    pub peak_percent: f64,
    /// Seconds in which the clients held more than the capacity.
    pub seconds_above_capacity: u64,
    /// Times the clients went above the capacity (episodes).
    pub times_above_capacity: u64,
    /// Seconds from a change of demand until the clients held 99 % of what could be granted.
    pub convergence: Option<Distribution>,
    /// Requests that could not be answered: the root down (its leaves' and its own
    /// clients').
    pub failed_requests: u64,
    /// Second by second.
    #[serde(skip)]
    pub series: Vec<LeaseSample>,
}

/// A root that can restart and go down (the simulation's network to it).
struct Root {
    coordinator: Mutex<Arc<Coordinator>>,
    down_until: Mutex<u64>,
    clock: Arc<FakeClock>,
    /// Requests it could not answer (down).
    refused: AtomicU64,
}

impl LeaseSource for Root {
    fn request_lease(&self, req: &LeaseRequest<'_>, now: u64) -> Result<Lease, LeaseError> {
        if self.clock.now_ms() < *self.down_until.lock().unwrap_or_else(|e| e.into_inner()) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(LeaseError::RefreshFailed {
                resource: req.resource.to_owned(),
                message: "the root is unreachable (simulated)".to_owned(),
            });
        }
        let c = self
            .coordinator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        c.request_with(req, now)
    }

    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        let c = self
            .coordinator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        c.release(client_id, resource)
    }
}

/// A node of the tree: the root, or a leaf coordinator leasing from its parent.
struct Node {
    /// Its coordinator (the root's is behind [`Root`]).
    source: Arc<dyn LeaseSource>,
    /// A leaf's round (none for the root).
    round: Option<LeafRound>,
    next: u64,
}

struct Client {
    id: String,
    parent: usize,
    base: f64,
    wants: f64,
    lease: Option<Lease>,
    next: u64,
    /// The spike its demand is in, if any.
    spike: Option<usize>,
}

/// The lease configuration text of a scenario.
fn config_text(s: &LeaseScenario) -> String {
    let learning = s
        .learning_secs
        .map_or(String::new(), |l| format!("learning_mode_duration = {l}\n"));
    format!(
        "[[resources]]\nidentifier_glob = \"{RESOURCE}\"\ncapacity = {}\n\
         refresh_failure = \"pessimistic\"\n[resources.algorithm]\nkind = \"{}\"\n\
         lease_length = {}\nrefresh_interval = {}\n{learning}",
        s.capacity, s.algorithm, s.lease_secs, s.refresh_secs
    )
}

/// Runs a lease scenario; an error when its configuration is refused. Deterministic for a
/// seed.
pub fn run_leases(
    s: &LeaseScenario,
    seed: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<LeaseMeasured, String> {
    let config = LeaseConfig::from_toml(&config_text(s)).map_err(|e| format!("the lease: {e}"))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = Arc::new(FakeClock::new(T0));
    let refresh_ms = (s.refresh_secs * 1000.0).max(1.0) as u64;
    let new_root = |at: u64| {
        Coordinator::from_config(&config, at)
            .map(Arc::new)
            .map_err(|e| format!("the lease: {e}"))
    };
    let root = Arc::new(Root {
        coordinator: Mutex::new(new_root(T0)?),
        down_until: Mutex::new(0),
        clock: clock.clone(),
        refused: AtomicU64::new(0),
    });
    // The tree, level by level: node 0 the root.
    let mut nodes = vec![Node {
        source: root.clone(),
        round: None,
        next: u64::MAX,
    }];
    let mut level: Vec<usize> = vec![0];
    let depth = s.tree.len();
    let mut clients: Vec<Client> = Vec::new();
    for (d, &fan) in s.tree.iter().enumerate() {
        let mut below = Vec::new();
        for &parent in &level {
            for k in 0..fan {
                if d + 1 == depth {
                    let base = s.wants;
                    clients.push(Client {
                        id: format!("client-{}", clients.len()),
                        parent,
                        base,
                        wants: base,
                        lease: None,
                        next: T0 + rng.gen_range(0..refresh_ms),
                        spike: None,
                    });
                } else {
                    let leaf = new_root(T0)?;
                    let round = LeafRound::new(
                        leaf.clone(),
                        nodes[parent].source.clone(),
                        format!("node-{}-{k}", nodes.len()),
                        clock.clone(),
                        Arc::new(|_| {}),
                    );
                    below.push(nodes.len());
                    nodes.push(Node {
                        source: leaf,
                        round: Some(round),
                        next: T0 + rng.gen_range(0..refresh_ms),
                    });
                }
            }
        }
        level = below;
    }
    if clients.is_empty() {
        return Err("the lease: the tree has no clients".into());
    }
    let mut m = LeaseMeasured {
        capacity: s.capacity,
        clients: clients.len(),
        ..LeaseMeasured::default()
    };
    let (mut sum_alloc, mut n_alloc) = (0.0, 0u64);
    let (mut sum_conv, mut n_conv) = (0.0, 0u64);
    let mut last_change = 0u64;
    let mut converging: Option<u64> = Some(0);
    let mut convergence: Vec<f64> = Vec::new();
    let mut above = false;
    let settle = 3 * refresh_ms + (s.lease_secs * 1000.0) as u64;
    let mut faults = s.faults.clone();
    faults.sort_by_key(|f| match f {
        LeaseFault::RootRestart { at_ms } | LeaseFault::RootDown { at_ms, .. } => *at_ms,
    });
    let mut faults = faults.into_iter().peekable();
    // When outages end: a change the clients converge from too.
    let mut outage_ends: Vec<u64> = Vec::new();
    let step = 100u64;
    let mut t = 0u64;
    while t <= s.run_ms {
        let now = T0 + t;
        clock.set(now);
        // Faults due.
        while let Some(f) = faults.peek().copied() {
            let at = match f {
                LeaseFault::RootRestart { at_ms } | LeaseFault::RootDown { at_ms, .. } => at_ms,
            };
            if at > t {
                break;
            }
            faults.next();
            match f {
                LeaseFault::RootRestart { .. } => {
                    *root.coordinator.lock().unwrap_or_else(|e| e.into_inner()) = new_root(now)?;
                }
                LeaseFault::RootDown { ms, .. } => {
                    *root.down_until.lock().unwrap_or_else(|e| e.into_inner()) = now + ms;
                    outage_ends.push(t + ms);
                }
            }
            last_change = t;
            converging.get_or_insert(t);
        }
        if outage_ends.contains(&t) {
            last_change = t;
            converging.get_or_insert(t);
        }
        // Demand: drawn again every so often; spikes on top.
        if s.change_every_ms > 0 && t > 0 && t % s.change_every_ms == 0 {
            for c in &mut clients {
                c.base = (s.wants * (1.0 + rng.gen_range(-s.spread..=s.spread))).max(0.0);
            }
            last_change = t;
            converging.get_or_insert(t);
        }
        for (i, sp) in s.spikes.iter().enumerate() {
            // A spike's end first: one may start when another ends.
            if t == sp.at_ms + sp.ms {
                for c in clients.iter_mut().filter(|c| c.spike == Some(i)) {
                    c.spike = None;
                }
                last_change = t;
                converging.get_or_insert(t);
            }
        }
        for (i, sp) in s.spikes.iter().enumerate() {
            if t == sp.at_ms && sp.ms > 0 {
                for c in &mut clients {
                    if rng.gen_bool(sp.clients.clamp(0.0, 1.0)) {
                        c.spike = Some(i);
                    }
                }
                last_change = t;
                converging.get_or_insert(t);
            }
        }
        for c in &mut clients {
            c.wants = c.spike.map_or(c.base, |i| c.base * s.spikes[i].factor);
        }
        // Leaves first (bottom up: a level's total reaches its parent within a round).
        for n in nodes.iter_mut().rev() {
            if let Some(round) = &mut n.round {
                if now >= n.next {
                    round.round();
                    n.next = now + refresh_ms;
                }
            }
        }
        // Clients refresh.
        for c in &mut clients {
            if now < c.next {
                continue;
            }
            let has = c
                .lease
                .filter(|l| !l.is_expired(now))
                .map_or(0.0, |l| l.capacity);
            let req = LeaseRequest {
                client_id: &c.id,
                resource: RESOURCE,
                wants: c.wants,
                has,
                subclients: 1,
                priority: 0,
                leaf: false,
            };
            match nodes[c.parent].source.request_lease(&req, now) {
                Ok(l) => c.lease = Some(l),
                // (The root counts what it refuses itself.)
                Err(_) if c.parent != 0 => m.failed_requests += 1,
                Err(_) => {}
            }
            c.next = now + refresh_ms;
        }
        // A sample each second.
        if t % 1000 == 0 && t > 0 {
            let held = |c: &Client| {
                c.lease
                    .filter(|l| !l.is_expired(now))
                    .map_or(0.0, |l| l.capacity)
            };
            let wanted: f64 = clients.iter().map(|c| c.wants).sum();
            let granted: f64 = clients.iter().map(held).sum();
            let possible = wanted.min(s.capacity);
            let share = if possible > 0.0 {
                (granted / possible).min(1.0)
            } else {
                1.0
            };
            sum_alloc += share;
            n_alloc += 1;
            if t >= last_change + settle {
                sum_conv += share;
                n_conv += 1;
            }
            if let Some(from) = converging {
                if granted >= 0.99 * possible {
                    convergence.push((t - from) as f64 / 1000.0);
                    converging = None;
                }
            }
            let over = granted > s.capacity * (1.0 + 1e-9);
            m.seconds_above_capacity += u64::from(over);
            m.times_above_capacity += u64::from(over && !above);
            above = over;
            m.peak_percent = m.peak_percent.max(granted / s.capacity * 100.0);
            m.series.push(LeaseSample {
                second: t / 1000,
                wanted,
                granted,
                clients: clients
                    .iter()
                    .take(10)
                    .map(|c| (c.wants, held(c)))
                    .collect(),
            });
            m.seconds = t / 1000;
            progress(t);
        }
        t += step;
    }
    m.allocated_mean = if n_alloc > 0 {
        sum_alloc / n_alloc as f64
    } else {
        1.0
    };
    m.allocated_after_convergence = (n_conv > 0).then(|| sum_conv / n_conv as f64);
    m.convergence = Distribution::of(&mut convergence);
    m.failed_requests += root.refused.load(Ordering::Relaxed);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doorman_one() -> LeaseScenario {
        LeaseScenario {
            capacity: 500.0,
            algorithm: "fair_share".into(),
            lease_secs: 20.0,
            refresh_secs: 5.0,
            learning_secs: None,
            tree: vec![5],
            wants: 100.0,
            spread: 0.2,
            change_every_ms: 60_000,
            spikes: Vec::new(),
            faults: Vec::new(),
            run_ms: 600_000,
        }
    }

    #[test]
    fn five_clients_of_one_server_never_hold_more_than_its_capacity() {
        let m = run_leases(&doorman_one(), 1, &mut |_| {}).unwrap();
        assert_eq!(m.seconds_above_capacity, 0, "{m:?}");
        assert!(m.peak_percent <= 100.0 + 1e-9);
        assert!(m.allocated_after_convergence.unwrap() > 0.9, "{m:?}");
        assert_eq!(m.series.len(), 600);
    }

    #[test]
    fn the_same_seed_repeats() {
        let a = run_leases(&doorman_one(), 7, &mut |_| {}).unwrap();
        let b = run_leases(&doorman_one(), 7, &mut |_| {}).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn a_tree_and_a_root_restart_stay_within_capacity() {
        let s = LeaseScenario {
            tree: vec![3, 3, 5],
            faults: vec![LeaseFault::RootRestart { at_ms: 200_000 }],
            run_ms: 400_000,
            ..doorman_one()
        };
        let m = run_leases(&s, 3, &mut |_| {}).unwrap();
        assert_eq!(m.clients, 45);
        assert_eq!(m.seconds_above_capacity, 0, "{m:?}");
    }
}
