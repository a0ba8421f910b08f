//! The background sync: every interval, for every room, one process of the host reports the
//! room to the store and hands the engine what the store granted. Nothing here runs on a
//! request's path: requests are decided on the last grant, and on the fallback share once it
//! lapses (see `velvet_rope::admission::cluster`).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use velvet_rope::config::ClusterConfig;
use velvet_rope::{Clock, Engine, Millis, SystemClock};

use crate::protocol::{Params, Report};
use crate::redis_store::RedisStore;
use crate::store::{Store, StoreError};

/// What the sync loop has done, for tests, metrics and logs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncStatus {
    /// Syncs of one room that got an answer.
    pub syncs: u64,
    /// Syncs of one room that failed.
    pub failures: u64,
    /// Outages: runs of failures after a success (or from the start).
    pub outages: u64,
    /// Whether the last sync failed.
    pub in_outage: bool,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// Hosts holding a lease at the last answer.
    pub hosts: u64,
    /// Commands sent to the store.
    pub commands: u64,
}

/// Where the sync loop says what happened (once per outage, and when it ends).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// How a [`Syncer`] runs.
#[derive(Clone)]
pub struct SyncOptions {
    /// This host's id in the store.
    pub host_id: String,
    /// Time between syncs.
    pub interval: Duration,
    /// How long a grant is good without a sync.
    pub lease: Duration,
    /// Share of the limits to fall back on (unset: one over the hosts last seen).
    pub fallback_share: Option<f64>,
    /// The clock the engine is ticked with.
    pub clock: Arc<dyn Clock>,
    /// Where outages are logged.
    pub log: Log,
}

impl std::fmt::Debug for SyncOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncOptions")
            .field("host_id", &self.host_id)
            .field("interval", &self.interval)
            .field("lease", &self.lease)
            .field("fallback_share", &self.fallback_share)
            .finish()
    }
}

impl SyncOptions {
    /// The options a `[cluster]` table sets, on the wall clock, logging to standard error.
    pub fn from_config(c: &ClusterConfig) -> Self {
        Self {
            host_id: c.host_id.clone().unwrap_or_else(host_name),
            interval: Duration::from_millis(c.sync_interval_ms),
            lease: Duration::from_millis(c.lease_ms),
            fallback_share: c.fallback_share,
            clock: Arc::new(SystemClock),
            log: Arc::new(|line| eprintln!("velvet-rope cluster: {line}")),
        }
    }
}

/// The machine's host name (`gethostname`), or `localhost` if it has none.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what we pass.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if rc == 0 && !name.is_empty() => name.to_owned(),
        _ => "localhost".to_owned(),
    }
}

struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// A running sync loop (a thread of its own). Stopped and joined when dropped.
pub struct Syncer {
    stop: Arc<Stop>,
    status: Arc<Mutex<SyncStatus>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncer")
            .field("status", &self.status())
            .finish()
    }
}

impl Syncer {
    /// Syncs `engine`'s rooms through the store its `[cluster]` table names. `None` when the
    /// configuration has no `[cluster]` table.
    pub fn from_engine(engine: Arc<Engine>) -> Result<Option<Self>, StoreError> {
        let config = engine.config();
        let Some(c) = config.cluster.as_ref() else {
            return Ok(None);
        };
        let store = RedisStore::new(
            &c.redis_url,
            &c.key_prefix,
            Duration::from_millis(c.timeout_ms),
        )?;
        Ok(Some(Self::start(
            engine,
            Box::new(store),
            SyncOptions::from_config(c),
        )))
    }

    /// Syncs `engine`'s rooms through `store` until dropped. The first sync runs at once.
    pub fn start(engine: Arc<Engine>, store: Box<dyn Store>, options: SyncOptions) -> Self {
        let stop = Arc::new(Stop {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let status = Arc::new(Mutex::new(SyncStatus::default()));
        let mut worker = Worker {
            engine,
            store,
            options,
            status: status.clone(),
            last_admitted: Default::default(),
        };
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("velvet-rope-sync".into())
            .spawn(move || loop {
                worker.round();
                let guard = stop2.stopped.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = stop2
                    .wake
                    .wait_timeout_while(guard, worker.options.interval, |s| !*s)
                    .unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
            })
            .ok();
        Self {
            stop,
            status,
            thread,
        }
    }

    /// What the loop has done so far.
    pub fn status(&self) -> SyncStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        *self.stop.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Worker {
    engine: Arc<Engine>,
    store: Box<dyn Store>,
    options: SyncOptions,
    status: Arc<Mutex<SyncStatus>>,
    last_admitted: std::collections::HashMap<String, u64>,
}

impl Worker {
    /// One sync of every room whose turn this process takes, then a tick to apply the grants.
    fn round(&mut self) {
        let config = self.engine.config();
        let interval_ms = self.options.interval.as_millis() as u64;
        let lease_ms = self.options.lease.as_millis() as u64;
        let bucket_ms = u64::from(config.settings.bucket_width_secs) * 1000;
        for room in &config.rooms {
            if !self
                .engine
                .cluster_sync_turn(&room.name, interval_ms)
                .unwrap_or(false)
            {
                continue;
            }
            let sent_at: Millis = self.options.clock.now_ms();
            let Ok(report) = self.engine.cluster_report(&room.name, sent_at) else {
                continue;
            };
            let admitted = self
                .engine
                .stats(&room.name)
                .map(|s| s.admitted_total)
                .unwrap_or(0);
            let before = self.last_admitted.insert(room.name.clone(), admitted);
            let since = before.map_or(0, |b| admitted.saturating_sub(b));
            // Ask, beyond the share, for twice what the last interval admitted (one interval
            // ahead of need, one to cover the next answer's delay), and at least one.
            let demand = (2 * since).max(1);
            let params = Params {
                total: room.total_active_users,
                minute: room.new_users_per_minute,
                lease: lease_ms,
                hold: u64::from(room.session_duration) * bucket_ms,
            };
            let result = self.store.sync(
                &room.name,
                &self.options.host_id,
                &Report::of(&report, demand),
                &params,
            );
            self.record(&room.name, result.as_ref().map(|r| r.hosts));
            if let Ok(reply) = result {
                let share = self
                    .options
                    .fallback_share
                    .unwrap_or(1.0 / reply.hosts.max(1) as f64);
                let ppm = (share.clamp(0.0, 1.0) * 1e6).round() as u64;
                let grant = reply.grant(sent_at + lease_ms, ppm);
                let _ = self.engine.cluster_grant(&room.name, &grant);
            }
        }
        self.engine.tick(self.options.clock.now_ms());
    }

    fn record(&mut self, room: &str, result: Result<u64, &StoreError>) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        s.commands = self.store.commands();
        match result {
            Ok(hosts) => {
                s.syncs += 1;
                s.hosts = hosts;
                if s.in_outage {
                    s.in_outage = false;
                    (self.options.log)(&format!(
                        "store reachable again (room `{room}`): allowances are synced anew"
                    ));
                }
            }
            Err(e) => {
                s.failures += 1;
                s.last_error = Some(e.to_string());
                if !s.in_outage {
                    s.in_outage = true;
                    s.outages += 1;
                    (self.options.log)(&format!(
                        "{e} (room `{room}`): deciding on the last allowances for up to {} ms, \
                         then on the fallback share; requests never wait for the store",
                        self.options.lease.as_millis()
                    ));
                }
            }
        }
    }
}
