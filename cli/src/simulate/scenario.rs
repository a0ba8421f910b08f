//! A scenario file (TOML): the room, the hosts, the crowd, the faults, read into the cluster
//! tier's simulation. Unknown keys are errors, named with their table.

use serde::Deserialize;
use velvet_rope_cluster::sim::{Crowd, Fault, RandomFaults, Scenario, Sharing, SimEvent, Spike};

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// A title for the report and the plot.
    pub name: String,
    /// What it reproduces, and from where.
    #[serde(default)]
    pub description: String,
    /// Minutes simulated.
    pub minutes: f64,
    /// The seed (`--seed` overrides it).
    #[serde(default = "one")]
    pub seed: u64,
    pub room: Room,
    #[serde(default)]
    pub hosts: Hosts,
    #[serde(default)]
    pub arrivals: Arrivals,
    #[serde(default)]
    pub visitors: Visitors,
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
}

/// The default seed.
pub(super) fn one() -> u64 {
    1
}

/// The room's settings (as in a configuration's `[[rooms]]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Room {
    pub total_active_users: u64,
    pub new_users_per_minute: u64,
    /// Minutes.
    #[serde(default = "five")]
    pub session_duration: u32,
    /// Seconds.
    #[serde(default = "thirty")]
    pub refresh_interval: u32,
    #[serde(default = "queue_buckets")]
    pub queue_buckets: u32,
    #[serde(default = "max_live_waiters")]
    pub max_live_waiters: u32,
    pub event: Option<Event>,
}

fn five() -> u32 {
    5
}
fn thirty() -> u32 {
    30
}
fn queue_buckets() -> u32 {
    1024
}
fn max_live_waiters() -> u32 {
    32_768
}

/// A scheduled event of the room, in minutes from the start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub prequeue_minute: Option<f64>,
    pub start_minute: f64,
    pub end_minute: f64,
    pub total_active_users: u64,
    pub new_users_per_minute: Option<u64>,
    #[serde(default)]
    pub shuffle: bool,
}

/// The hosts sharing the room and their sync through the store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hosts {
    pub count: usize,
    /// Worker processes per host (they share the host's counters).
    pub processes: usize,
    /// Relative share of the traffic per host.
    pub weights: Option<Vec<f64>>,
    pub sync_interval_ms: u64,
    pub lease_ms: u64,
    pub timeout_ms: u64,
    pub fallback_share: f64,
    /// How the hosts share the room: `store` (velvet-rope's cluster tier), or the seed's
    /// `division` or `curve`, to compare.
    pub sharing: String,
}

impl Default for Hosts {
    fn default() -> Self {
        Self {
            count: 1,
            processes: 2,
            weights: None,
            sync_interval_ms: 1000,
            lease_ms: 5000,
            timeout_ms: 200,
            fallback_share: 0.3,
            sharing: "store".into(),
        }
    }
}

/// New visitors over time.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrivals {
    /// `[minute, new visitors per minute]` points, linear between them.
    #[serde(default)]
    pub rate: Vec<(f64, f64)>,
    #[serde(default)]
    pub spikes: Vec<SpikeSpec>,
}

/// A burst of visitors.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpikeSpec {
    pub at_minute: f64,
    pub visitors: u64,
    #[serde(default)]
    pub over_seconds: f64,
    pub host: Option<usize>,
}

/// How visitors behave.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Visitors {
    pub pages_per_minute: f64,
    pub session_minutes: f64,
    /// 0: nobody gives up.
    pub patience_minutes: f64,
    pub come_back: f64,
    pub come_back_minutes: f64,
}

impl Default for Visitors {
    fn default() -> Self {
        let c = Crowd::default();
        Self {
            pages_per_minute: c.pages_per_minute,
            session_minutes: c.session_minutes,
            patience_minutes: c.patience_minutes,
            come_back: c.come_back,
            come_back_minutes: c.come_back_minutes,
        }
    }
}

/// A fault at a set time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// `store_down`, `store_stall`, `store_wipe`, `store_failover`, `host_partition` or
    /// `host_restart`.
    pub kind: String,
    pub at_minute: f64,
    /// How long (down, stall, partition).
    #[serde(default)]
    pub seconds: f64,
    /// Which host (partition, restart).
    #[serde(default)]
    pub host: usize,
}

/// Two weeks, in minutes: the longest a scenario's times go.
const TWO_WEEKS: f64 = 60.0 * 24.0 * 14.0;
/// The most new visitors a minute a rate may ask for.
const MAX_RATE: f64 = 1_000_000.0;
/// The most visitors one run may bring (each is simulated: memory and time).
const MAX_VISITORS: f64 = 5_000_000.0;
/// The most simulated processes (each has a thread).
const MAX_PROCESSES: usize = 1000;

/// Whether a run of `minutes` can be simulated: more than none, at most two weeks.
pub fn minutes_in_range(minutes: f64) -> bool {
    minutes > 0.0 && minutes <= TWO_WEEKS
}

fn ms(minutes: f64) -> u64 {
    (minutes * 60_000.0).round().max(0.0) as u64
}

impl ScenarioFile {
    /// Reads a scenario from TOML text, its hosts sharing the room the way named by
    /// `sharing` if given.
    pub fn parse_with(text: &str, sharing: Option<&str>) -> Result<Self, String> {
        let mut f: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(s) = sharing {
            f.hosts.sharing = s.to_owned();
        }
        f.validate()?;
        Ok(f)
    }

    fn validate(&self) -> Result<(), String> {
        let bad = |what: &str| Err(what.to_string());
        // Minutes anywhere in a scenario: from 0 to two weeks.
        let minute_ok = |m: f64| (0.0..=TWO_WEEKS).contains(&m);
        if !minutes_in_range(self.minutes) {
            return bad("minutes: more than 0, at most two weeks (20160)");
        }
        if self.room.total_active_users == 0 || self.room.new_users_per_minute == 0 {
            return bad("room: total_active_users and new_users_per_minute must be at least 1");
        }
        let h = &self.hosts;
        if h.count == 0 || h.count > 1000 || h.processes == 0 || h.processes > 16 {
            return bad("hosts: count between 1 and 1000, processes between 1 and 16");
        }
        if h.count * h.processes > MAX_PROCESSES {
            return Err(format!(
                "hosts: {} processes in all ({} x {}); at most {MAX_PROCESSES} (each is a \
                 thread of the simulation)",
                h.count * h.processes,
                h.count,
                h.processes
            ));
        }
        if let Some(w) = &h.weights {
            if w.len() != h.count || w.iter().any(|x| !(0.0..=1e9).contains(x)) {
                return bad("hosts.weights: one weight per host, from 0 to 1e9");
            }
            if w.iter().sum::<f64>() <= 0.0 {
                return bad("hosts.weights: at least one host gets traffic");
            }
        }
        let Some(sharing) = Sharing::parse(&h.sharing) else {
            return bad("hosts.sharing: store, division or curve");
        };
        if sharing != Sharing::Store && self.room.event.is_some() {
            return bad("hosts.sharing: division and curve take no room.event (limits per host)");
        }
        if sharing != Sharing::Store
            && self
                .faults
                .iter()
                .any(|f| f.kind.starts_with("store_") || f.kind == "host_partition")
        {
            return bad(
                "hosts.sharing: division and curve have no store to lose or be cut off from \
                 (only host_restart faults)",
            );
        }
        if !(0.0..=1.0).contains(&h.fallback_share) {
            return bad("hosts.fallback_share: from 0 to 1");
        }
        for (i, p) in self.arrivals.rate.iter().enumerate() {
            if !(minute_ok(p.0) && (0.0..=MAX_RATE).contains(&p.1)) {
                return Err(format!(
                    "arrivals.rate: [minute, new visitors a minute] pairs, minutes from 0 to \
                     20160, rates from 0 to {MAX_RATE}"
                ));
            }
            if i > 0 && p.0 < self.arrivals.rate[i - 1].0 {
                return bad("arrivals.rate: minutes in order");
            }
        }
        for s in &self.arrivals.spikes {
            if s.host.is_some_and(|x| x >= h.count) {
                return bad("arrivals.spikes: host out of range");
            }
            if !(minute_ok(s.at_minute) && minute_ok(s.over_seconds / 60.0)) {
                return bad("arrivals.spikes: at_minute and over_seconds from 0 to two weeks");
            }
        }
        let v = &self.visitors;
        if !((0.0..=600.0).contains(&v.pages_per_minute)
            && minute_ok(v.session_minutes)
            && minute_ok(v.patience_minutes)
            && (0.0..=1.0).contains(&v.come_back)
            && minute_ok(v.come_back_minutes))
        {
            return bad(
                "visitors: pages_per_minute from 0 to 600, minutes from 0 to two weeks, \
                 come_back a chance (0 to 1)",
            );
        }
        if let Some(e) = &self.room.event {
            let ok = minute_ok(e.start_minute)
                && minute_ok(e.end_minute)
                && e.prequeue_minute.map_or(true, minute_ok)
                && ms(e.start_minute) < ms(e.end_minute)
                && e.prequeue_minute
                    .map_or(true, |p| ms(p) <= ms(e.start_minute));
            if !ok {
                return bad(
                    "room.event: minutes from 0 to two weeks, prequeue_minute <= start_minute < \
                     end_minute (a millisecond apart at least)",
                );
            }
        }
        for f in &self.faults {
            if !(minute_ok(f.at_minute) && minute_ok(f.seconds / 60.0)) {
                return bad("faults: at_minute and seconds from 0 to two weeks");
            }
            self.fault(f, 0)?;
        }
        Ok(())
    }

    /// Checks what a run of `run_ms` would bring: the crowd it must hold.
    pub fn check_size(&self, scenario: &Scenario) -> Result<(), String> {
        let expected = scenario.crowd.as_ref().map_or(0.0, |c| {
            c.expected_visitors(scenario.run_ms.saturating_sub(c.start_ms))
        });
        if expected > MAX_VISITORS {
            return Err(format!(
                "the crowd would bring about {expected:.0} visitors; at most {MAX_VISITORS:.0} \
                 in one run"
            ));
        }
        Ok(())
    }

    /// The faults that happen within a run of `minutes`, described for the report.
    pub fn faults_within(&self, minutes: f64) -> Vec<String> {
        self.faults
            .iter()
            .filter(|f| f.at_minute <= minutes)
            .map(|f| {
                let mut d = format!("{} at minute {}", f.kind, f.at_minute);
                if matches!(
                    f.kind.as_str(),
                    "store_down" | "store_stall" | "host_partition"
                ) {
                    d += &format!(" for {} s", f.seconds);
                }
                if f.kind.starts_with("host_") {
                    d += &format!(" (host {})", f.host);
                }
                d
            })
            .collect()
    }

    /// Fault `f`, its time `offset` ms later (the warm-up).
    fn fault(&self, f: &FaultSpec, offset: u64) -> Result<Fault, String> {
        let at = ms(f.at_minute) + offset;
        let (ms_, host) = ((f.seconds * 1000.0) as u64, f.host);
        if host >= self.hosts.count {
            return Err(format!("faults: host {host} out of range"));
        }
        Ok(match f.kind.as_str() {
            "store_down" => Fault::StoreDown { at, ms: ms_ },
            "store_stall" => Fault::StoreStall { at, ms: ms_ },
            "store_wipe" => Fault::StoreWipe { at },
            "store_failover" => Fault::StoreFailover { at },
            "host_partition" => Fault::HostPartition { at, host, ms: ms_ },
            "host_restart" => Fault::HostRestart { at, host },
            other => {
                return Err(format!(
                    "faults: unknown kind `{other}` (store_down, store_stall, store_wipe, \
                     store_failover, host_partition, host_restart)"
                ))
            }
        })
    }

    /// The simulation's scenario, `minutes` long (the file's unless given), after a warm-up
    /// (see [`warm_up_ms`]): every time of the file counts from its end.
    pub fn to_scenario(&self, minutes: Option<f64>) -> Scenario {
        let h = &self.hosts;
        let v = &self.visitors;
        let mut s = Scenario {
            hosts: h.count,
            processes: h.processes,
            total: self.room.total_active_users,
            per_minute: self.room.new_users_per_minute,
            session: self.room.session_duration,
            bucket_secs: 60,
            sync_interval_ms: h.sync_interval_ms,
            lease_ms: h.lease_ms,
            timeout_ms: h.timeout_ms,
            fallback_share: h.fallback_share,
            replicas: 1,
            run_ms: ms(minutes.unwrap_or(self.minutes)),
            arrivals_per_sec: 0.0,
            faults: Vec::new(),
            random_faults: RandomFaults::None,
            trace: 0,
            event: self.room.event.as_ref().map(|e| SimEvent {
                start_ms: ms(e.start_minute),
                end_ms: ms(e.end_minute),
                total: e.total_active_users,
                per_minute: e.new_users_per_minute,
                prequeue_ms: e.prequeue_minute.map(ms),
                shuffle: e.shuffle,
            }),
            revocations: 0.0,
            affinity: 1.0,
            crowd: Some(Crowd {
                start_ms: 0,
                rate: self.arrivals.rate.clone(),
                spikes: self
                    .arrivals
                    .spikes
                    .iter()
                    .map(|s| Spike {
                        at_ms: ms(s.at_minute),
                        visitors: s.visitors,
                        over_ms: (s.over_seconds * 1000.0) as u64,
                        host: s.host,
                    })
                    .collect(),
                weights: h.weights.clone(),
                pages_per_minute: v.pages_per_minute,
                session_minutes: v.session_minutes,
                patience_minutes: v.patience_minutes,
                come_back: v.come_back,
                come_back_minutes: v.come_back_minutes,
            }),
            refresh_secs: self.room.refresh_interval,
            max_live_waiters: self.room.max_live_waiters,
            queue_buckets: self.room.queue_buckets,
            sharing: Sharing::parse(&h.sharing).unwrap_or_default(),
        };
        let warm = warm_up_ms(&s);
        s.run_ms += warm;
        if let Some(c) = &mut s.crowd {
            c.start_ms = warm;
        }
        if let Some(e) = &mut s.event {
            e.start_ms += warm;
            e.end_ms += warm;
            e.prequeue_ms = e.prequeue_ms.map(|p| p + warm);
        }
        s.faults = self
            .faults
            .iter()
            .filter_map(|f| self.fault(f, warm).ok())
            .collect();
        s
    }
}

/// How long the hosts and the store run before the crowd: a store that starts empty learns
/// what hosts hold before it grants (its learning lease: every new visitor is queued
/// meanwhile), which is a deployment's first seconds, not a sale's. Twice the learning lease
/// and two syncs, in whole minutes so that the crowd's minutes are the room's (its buckets).
pub fn warm_up_ms(s: &Scenario) -> u64 {
    let need = 2 * s.learn_ms() + 2 * s.sync_interval_ms;
    need.div_ceil(60_000).max(1) * 60_000
}
