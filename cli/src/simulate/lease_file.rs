//! A lease scenario file (TOML with a `[lease]` table): a resource, a tree of coordinators,
//! clients' demand, spikes and root faults, read into the cluster tier's lease simulation.

use serde::Deserialize;
use velvet_rope_cluster::sim::{LeaseFault, LeaseScenario, LeaseSpike};

/// A lease scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseFile {
    /// A title for the report and the plot.
    pub name: String,
    /// What it reproduces, and from where.
    #[serde(default)]
    pub description: String,
    /// Minutes simulated.
    pub minutes: f64,
    /// The seed (`--seed` overrides it).
    #[serde(default = "super::scenario::one")]
    pub seed: u64,
    /// The resource and its clients.
    pub lease: Lease,
}

/// The resource, the tree and the demand.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// Capacity at the root.
    pub capacity: f64,
    /// `fair_share` (default), `proportional_share`, ...
    #[serde(default = "fair_share")]
    pub algorithm: String,
    /// Seconds a lease lasts (default 20).
    #[serde(default = "twenty")]
    pub lease_secs: f64,
    /// Seconds between refreshes (default 5).
    #[serde(default = "five")]
    pub refresh_secs: f64,
    /// Seconds of learning after the root starts (default: one lease).
    pub learning_secs: Option<f64>,
    /// Children per node below the root, level by level: `[5]`, `[3, 3, 5]`.
    pub tree: Vec<usize>,
    /// Each client's mean demand.
    pub wants: f64,
    /// Its spread (a fraction: demand is drawn uniformly within it; default 0).
    #[serde(default)]
    pub spread: f64,
    /// How often demand is drawn again, seconds (0: never).
    #[serde(default)]
    pub change_every_secs: f64,
    /// Spikes of demand.
    #[serde(default)]
    pub spikes: Vec<Spike>,
    /// Faults of the root.
    #[serde(default)]
    pub faults: Vec<Fault>,
}

fn fair_share() -> String {
    "fair_share".into()
}
fn twenty() -> f64 {
    20.0
}
fn five() -> f64 {
    5.0
}

/// A spike of demand.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spike {
    /// When, minutes from the start.
    pub at_minute: f64,
    /// How long, seconds.
    pub seconds: f64,
    /// The share of clients it hits.
    pub clients: f64,
    /// Their demand times this.
    pub factor: f64,
}

/// A fault of the root.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// `root_restart` or `root_down`.
    pub kind: String,
    /// When, minutes from the start.
    pub at_minute: f64,
    /// How long (`root_down`), seconds.
    #[serde(default)]
    pub seconds: f64,
}

/// The most clients of one lease scenario.
const MAX_CLIENTS: usize = 2_000;
/// The most clients squared times minutes of one run (2,000 clients for an hour).
const MAX_CLIENT_WORK: f64 = 2_000.0 * 2_000.0 * 60.0;

/// Milliseconds of `minutes`, on the simulation's 100 ms steps.
fn ms(minutes: f64) -> u64 {
    ((minutes * 600.0).round() as u64) * 100
}

impl LeaseFile {
    /// Reads a lease scenario from TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let f: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        f.validate()?;
        Ok(f)
    }

    fn validate(&self) -> Result<(), String> {
        let l = &self.lease;
        let minute_ok = |m: f64| (0.0..=60.0 * 24.0 * 14.0).contains(&m);
        if !super::scenario::minutes_in_range(self.minutes) {
            return Err("minutes: more than 0, at most two weeks (20160)".into());
        }
        if !(l.capacity > 0.0 && l.capacity <= 1e12) {
            return Err("lease.capacity: more than 0, at most 1e12".into());
        }
        let clients = l.tree.iter().try_fold(1usize, |a, &n| a.checked_mul(n));
        if l.tree.is_empty()
            || l.tree.len() > 8
            || l.tree.contains(&0)
            || clients.map_or(true, |n| n > MAX_CLIENTS)
        {
            return Err(format!(
                "lease.tree: one to eight levels of at least one child, at most {MAX_CLIENTS} \
                 clients in all"
            ));
        }
        self.check_cost(self.minutes)?;
        let secs_ok = |x: f64| x > 0.0 && x <= 1e6;
        if !(secs_ok(l.lease_secs) && secs_ok(l.refresh_secs)) || l.refresh_secs > l.lease_secs {
            return Err(
                "lease: lease_secs and refresh_secs more than 0, at most 1e6, \
                        refresh_secs at most lease_secs"
                    .into(),
            );
        }
        if l.learning_secs.is_some_and(|x| !(0.0..=1e6).contains(&x)) {
            return Err("lease.learning_secs: from 0 to 1e6".into());
        }
        if l.change_every_secs != 0.0 && l.change_every_secs < 0.1 {
            return Err("lease.change_every_secs: 0 (never) or at least 0.1".into());
        }
        if !((0.0..=1e12).contains(&l.wants)
            && (0.0..=1.0).contains(&l.spread)
            && minute_ok(l.change_every_secs / 60.0))
        {
            return Err(
                "lease: wants from 0 to 1e12, spread from 0 to 1, change_every_secs \
                        from 0 to two weeks"
                    .into(),
            );
        }
        for s in &l.spikes {
            if !(minute_ok(s.at_minute)
                && minute_ok(s.seconds / 60.0)
                && (0.0..=1.0).contains(&s.clients)
                && (0.0..=1e6).contains(&s.factor))
            {
                return Err(
                    "lease.spikes: at_minute and seconds within two weeks, clients a \
                            share (0 to 1), factor from 0 to 1e6"
                        .into(),
                );
            }
        }
        for f in &self.lease.faults {
            if !(minute_ok(f.at_minute) && minute_ok(f.seconds / 60.0)) {
                return Err("lease.faults: at_minute and seconds within two weeks".into());
            }
            if !matches!(f.kind.as_str(), "root_restart" | "root_down") {
                return Err(format!(
                    "lease.faults: unknown kind `{}` (root_restart, root_down)",
                    f.kind
                ));
            }
        }
        Ok(())
    }

    /// Whether a run of `minutes` is small enough to simulate: each client's request weighs
    /// up every client of its coordinator, so the cost grows with the square of the clients.
    pub fn check_cost(&self, minutes: f64) -> Result<(), String> {
        let n: f64 = self.lease.tree.iter().map(|&k| k as f64).product();
        if n * n * minutes > MAX_CLIENT_WORK {
            return Err(format!(
                "lease: {n} clients for {minutes} minutes would take too long to simulate (at \
                 most {MAX_CLIENT_WORK:.0} clients squared times minutes: 2,000 clients for an \
                 hour)"
            ));
        }
        Ok(())
    }

    /// The simulation's scenario, `minutes` long (the file's unless given).
    pub fn to_scenario(&self, minutes: Option<f64>) -> LeaseScenario {
        let l = &self.lease;
        LeaseScenario {
            capacity: l.capacity,
            algorithm: l.algorithm.clone(),
            lease_secs: l.lease_secs,
            refresh_secs: l.refresh_secs,
            learning_secs: l.learning_secs,
            tree: l.tree.clone(),
            wants: l.wants,
            spread: l.spread,
            change_every_ms: ms(l.change_every_secs / 60.0),
            spikes: l
                .spikes
                .iter()
                .map(|s| LeaseSpike {
                    at_ms: ms(s.at_minute),
                    ms: ms(s.seconds / 60.0),
                    clients: s.clients,
                    factor: s.factor,
                })
                .collect(),
            faults: l
                .faults
                .iter()
                .map(|f| match f.kind.as_str() {
                    "root_restart" => LeaseFault::RootRestart {
                        at_ms: ms(f.at_minute),
                    },
                    _ => LeaseFault::RootDown {
                        at_ms: ms(f.at_minute),
                        ms: ms(f.seconds / 60.0),
                    },
                })
                .collect(),
            run_ms: ms(minutes.unwrap_or(self.minutes)),
        }
    }
}
