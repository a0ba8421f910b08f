//! One filter configuration: the engine it decides with (shared by all of Envoy's worker
//! threads: exact across them with no shared memory), the room, and its tick interval.
//!
//! The filter's `filter_config` is JSON (a `google.protobuf.StringValue` in Envoy's
//! configuration, or a `Struct`, which Envoy hands over as JSON):
//!
//! ```json
//! {"config_path": "/etc/velvet-rope.toml", "room": "shop"}
//! {"config": "[[rooms]]\nname = \"shop\"\n...", "room": "shop", "state_file": "/run/vr.state"}
//! ```
//!
//! `config_path` or `config` (inline TOML or JSON) gives the engine's configuration; `room`
//! the room that decides the requests through this filter; `state_file` (optional) keeps the
//! counters in a file, so that they survive Envoy's restarts; `tick_interval_ms` (default
//! 1000, at most the bucket width and every room's refresh interval) how often the module's
//! ticker thread folds the counters.
//!
//! # One engine per configuration source
//!
//! Filter configurations of one process that name the same configuration (the same file, or
//! the same inline text) and state file share one engine: several listeners, or a listener
//! update (which makes a new filter configuration while the old one drains), count one room
//! once, with one ticket key. What the shared engine runs follows the *live* configurations
//! (those Envoy has taken, until it destroys them):
//!
//! - its configuration is the newest live one's, plus every room that an older live
//!   configuration still decides and the newest no longer has (with the settings it runs
//!   with): a filter never finds its room gone while Envoy still routes requests through it.
//!   Such a room is dropped when the last configuration deciding it goes. (Refusing the new
//!   configuration instead would make removing a room together with its filter impossible
//!   in one update: the old filter lives on while its listener drains.)
//! - it ticks at the shortest `tick_interval_ms` among them, and the interval changes as they
//!   come and go.
//!
//! # When a new configuration takes effect
//!
//! Envoy makes a filter configuration (`config_new`, on its main thread) while it builds a
//! listener, *before* it knows whether it will take the listener: a listener update that Envoy
//! then refuses (another filter's configuration in it is bad, say) destroys the configurations
//! made for it without ever using them. So `config_new` changes nothing that runs: it reads
//! and checks the configuration (a mistake, or a change the running engine's counters cannot
//! serve, refuses it, and Envoy then refuses the listener) and, for a source no live engine
//! has, makes the engine, but neither ticks it nor starts its sync loop. The configuration is
//! *committed* (the shared engine reloaded, the tick interval and the sync loop adjusted) at
//! the first of:
//!
//! 1. an event it schedules on Envoy's main thread from `config_new`: it comes back in a later
//!    turn of the main loop, after Envoy has finished the update, and only if Envoy still
//!    holds the configuration (Envoy's scheduler keeps a weak reference to it), so a refused
//!    update's configurations never commit;
//! 2. its first stream (`filter_new`, on a worker): a configuration Envoy routes requests
//!    through has been taken, whether or not the event came yet.
//!
//! A configuration destroyed uncommitted leaves the running engine as it was. One destroyed
//! committed leaves the live set: its room may be dropped (above), the interval recomputed,
//! and with the last one the ticker and sync loop stop (joined).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde::Deserialize;
use velvet_rope::{Clock, CoarseSystemClock, Config, Engine, RoomConfig};
use velvet_rope_cluster::Syncer;

use crate::abi::{self, ConfigEnvoyPtr, Host, RateLimitedLog};
use crate::metrics::{Cue, EnvoyStats, Ledger, MetricIds, SchedulerSlot, Sink};
use crate::ticker::Ticker;

/// The filter configuration's fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    config_path: Option<String>,
    config: Option<String>,
    room: String,
    state_file: Option<String>,
    tick_interval_ms: Option<u64>,
}

/// [`FilterConfig::room_traits`]: the room reads the whole request.
const READS: u64 = 1;
/// [`FilterConfig::room_traits`]: the origin may revoke the room's sessions.
const REVOCABLE: u64 = 2;

/// Creation order of filter configurations in this process: the newest live one's engine
/// configuration is the one the shared engine runs.
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);

/// The process's engines, by configuration source and state file (dead ones pruned as new
/// configurations come; configurations are made on Envoy's main thread, never per request).
static ENGINES: Mutex<Vec<(String, Weak<SharedEngine>)>> = Mutex::new(Vec::new());

/// The process's publish groups of engines with a state file, by the file's device and inode
/// (dead ones pruned as new engines come).
static GROUPS: Mutex<Vec<(FileId, Weak<PublishGroup>)>> = Mutex::new(Vec::new());

/// A file's device and inode.
type FileId = (u64, u64);

/// The engines of this process whose counters are one state file's (a listener update with an
/// inline configuration that changed makes a second engine over the file while the old
/// listener drains) publish them as one, so that the host's counters go into Envoy's once: a
/// room's figures are published by the newest live configuration among the engines that run
/// it (each engine's newest publishes the rooms no newer engine of the group runs), from one
/// [`Ledger`]. An engine without a state file is a group of its own.
#[derive(Default)]
struct PublishGroup {
    /// What the group's publishers wrote into Envoy's stats (see `metrics`).
    ledger: Mutex<Ledger>,
    /// The live, committed configurations of the group's engines, and their engines.
    live: Mutex<Vec<(u64, Weak<SharedEngine>)>>,
}

impl PublishGroup {
    /// The group of the engines over the file at `state_file` (just opened by the engine: the
    /// file, not the path, so that a file removed and made anew at the path is another
    /// group), or a group of its own.
    fn of(state_file: Option<&str>) -> Arc<Self> {
        use std::os::unix::fs::MetadataExt;
        let Some(file) = state_file.and_then(|p| std::fs::metadata(p).ok()) else {
            return Arc::default();
        };
        let key = (file.dev(), file.ino());
        let mut groups = lock(&GROUPS);
        groups.retain(|(_, w)| w.strong_count() > 0);
        if let Some(group) = groups
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return group;
        }
        let group = Arc::new(Self::default());
        groups.push((key, Arc::downgrade(&group)));
        group
    }
}

/// Takes a lock, also after a panic elsewhere (what it guards stays consistent: each change
/// is made whole before the guard is dropped, or not at all).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A filter configuration, live from `config_new` to `config_destroy`.
pub struct FilterConfig {
    /// The engine deciding this filter's requests.
    pub engine: Arc<Engine>,
    /// The room.
    pub room: String,
    /// The filter's name in Envoy's configuration (for log lines).
    pub name: String,
    /// Lines about this configuration's requests, at most one a minute.
    pub errors: RateLimitedLog,
    /// Lines about its origin's commands (not followed, or refused), at most one a minute.
    pub commands: RateLimitedLog,
    /// Its scheduler (until it goes): its commit event (see the module docs) and, while it is
    /// its engine's publisher, the publish events the engine's ticker thread commits (see
    /// `metrics`).
    pub scheduler: Arc<SchedulerSlot>,
    /// Its stats in Envoy, as Envoy defined them in `config_new` (none in unit tests).
    pub metrics: MetricIds,
    /// Lines about stats Envoy refused to write, at most one a minute.
    pub metrics_errors: RateLimitedLog,
    /// The engine configuration it was made with.
    source: Arc<Config>,
    interval_ms: u64,
    seq: u64,
    /// Whether the shared engine runs this configuration (see the module docs).
    committed: AtomicBool,
    /// What the room is, in the engine's configuration generation that was read in:
    /// `generation << 2 | revocable << 1 | reads` (0: not yet read). See
    /// [`FilterConfig::room_reads_request`] and [`FilterConfig::room_revocable`].
    room_traits: AtomicU64,
    shared: Arc<SharedEngine>,
}

/// One committed, live filter configuration, as its shared engine sees it.
struct Member {
    seq: u64,
    /// Its scheduler, for the engine's publish events while it is the newest.
    scheduler: Arc<SchedulerSlot>,
    name: String,
    room: String,
    interval_ms: u64,
    source: Arc<Config>,
}

/// What a shared engine runs besides its engine: the live configurations, the newest engine
/// configuration among them, the ticker and the sync loop.
#[derive(Default)]
struct Live {
    members: Vec<Member>,
    /// The newest committed configuration's engine configuration (kept when it goes).
    newest: Option<(u64, Arc<Config>)>,
    ticker: Option<Ticker>,
    /// The sync loop, and the `[cluster]` table it was started for.
    sync: Option<(Syncer, velvet_rope::config::ClusterConfig)>,
}

/// An engine and what runs it, shared by the filter configurations that name its source.
pub struct SharedEngine {
    engine: Arc<Engine>,
    /// The engines publishing its counters with it, and their ledger (see [`PublishGroup`]).
    publishing: Arc<PublishGroup>,
    /// The newest live configuration's scheduler, for the ticker thread's publish events.
    cue: Arc<Cue>,
    /// Bumped after each reload of `engine` (only this module reloads it), so that a filter
    /// configuration can keep what it read of the running configuration until it changes.
    generation: AtomicU64,
    live: Mutex<Live>,
}

impl FilterConfig {
    /// Builds a configuration from the filter's `filter_config` bytes, not yet committed (see
    /// the module docs); an error says what is wrong in words an operator can act on.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self, String> {
        let settings: Settings = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "filter `{name}`: filter_config must be JSON like \
                 {{\"config_path\": \"/etc/velvet-rope.toml\", \"room\": \"shop\"}}: {e}"
            )
        })?;
        let (config, source) = match (&settings.config_path, &settings.config) {
            (Some(path), None) => {
                let canonical = std::fs::canonicalize(path)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| path.clone());
                (Config::from_path(path), format!("path:{canonical}"))
            }
            (None, Some(text)) => (Config::from_text(text), format!("text:{text}")),
            _ => {
                return Err(format!(
                    "filter `{name}`: give exactly one of `config_path` and `config`"
                ))
            }
        };
        let config = config.map_err(|e| format!("filter `{name}`: {e}"))?;
        if !config.rooms.iter().any(|r| r.name == settings.room) {
            let rooms: Vec<&str> = config.rooms.iter().map(|r| r.name.as_str()).collect();
            return Err(format!(
                "filter `{name}`: no room named `{}` in the configuration (its rooms: {})",
                settings.room,
                rooms.join(", ")
            ));
        }
        let interval_ms = tick_interval(name, &config, settings.tick_interval_ms)?;
        check_cluster(&config).map_err(|e| format!("filter `{name}`: {e}"))?;
        let key = format!(
            "{source}\0state:{}",
            settings.state_file.as_deref().unwrap_or("")
        );
        let shared = SharedEngine::find_or_make(&key, &config, settings.state_file.as_deref())
            .map_err(|e| format!("filter `{name}`: {e}"))?;
        Ok(Self {
            engine: shared.engine.clone(),
            room: settings.room,
            name: name.to_owned(),
            errors: RateLimitedLog::new(),
            commands: RateLimitedLog::new(),
            scheduler: Arc::new(Mutex::new(None)),
            metrics: MetricIds::default(),
            metrics_errors: RateLimitedLog::new(),
            source: Arc::new(config),
            interval_ms,
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            committed: AtomicBool::new(false),
            room_traits: AtomicU64::new(0),
            shared,
        })
    }

    /// Whether the room reads more of a request than its `Cookie` header (it has rules, or
    /// takes tickets from a header), in the configuration the engine runs now: such a room's
    /// requests are decided on all their headers and their client's address, the others on
    /// their `Cookie` header alone, as before rules existed.
    ///
    /// Asked on every request, so the answer is kept, with the generation of the engine's
    /// configuration it was read in: two loads while the configuration stays, against a
    /// look-up in the engine's current configuration (another snapshot load and a search of
    /// its rooms) on top of the decision's own.
    #[inline]
    pub fn room_reads_request(&self) -> bool {
        self.room_traits() & READS != 0
    }

    /// Whether the origin may end the room's sessions (`enabled_origin_commands =
    /// ["revoke"]`) in the configuration the engine runs now: an admitted request's `Cookie`
    /// and `Velvet-Rope-Ticket` headers are then kept for its response. Kept as
    /// [`FilterConfig::room_reads_request`] is.
    #[inline]
    pub fn room_revocable(&self) -> bool {
        self.room_traits() & REVOCABLE != 0
    }

    #[inline]
    fn room_traits(&self) -> u64 {
        // Acquire: pairs with the release bump after a reload, so that a generation seen new
        // comes with the reloaded configuration when the answer is read again.
        let generation = self.shared.generation.load(Ordering::Acquire);
        // Relaxed: the cached word is self-contained (an answer with its generation); a stale
        // one only sends this request to be read again.
        let cached = self.room_traits.load(Ordering::Relaxed);
        if cached >> 2 == generation {
            return cached & (READS | REVOCABLE);
        }
        self.read_room_traits(generation)
    }

    /// Reads [`FilterConfig::room_traits`] from the engine and keeps them for `generation`
    /// (read before, so a reload meanwhile only makes the next request read them again).
    #[cold]
    fn read_room_traits(&self, generation: u64) -> u64 {
        // A live configuration's room is always in the engine (see the module docs); were it
        // not, the cookie path reports the unknown room, and the request is refused (503).
        let reads = self
            .engine
            .room_reads_request(self.room.as_bytes())
            .unwrap_or(false);
        let revocable = self
            .engine
            .config()
            .rooms
            .iter()
            .any(|r| r.name == self.room && r.revocable());
        let traits = (u64::from(reads) * READS) | (u64::from(revocable) * REVOCABLE);
        self.room_traits
            .store(generation << 2 | traits, Ordering::Relaxed);
        traits
    }

    /// Commits the configuration unless it is already (see the module docs), from a worker
    /// (its first stream). Cheap when it is: one load, on every stream. The sync loop is left
    /// to the main thread's event (stopping one waits for its round), which comes for every
    /// configuration Envoy has taken.
    #[inline]
    pub fn ensure_committed(&self) {
        // Acquire: pairs with the release store in `SharedEngine::commit`, so a stream that
        // sees `true` sees the engine running this configuration's room.
        if !self.committed.load(Ordering::Acquire) {
            self.shared.commit(self, false);
        }
    }

    /// Commits the configuration unless it is already, on Envoy's main thread (its scheduled
    /// event): also starts, or restarts, the engine's sync loop as its configuration needs.
    pub fn commit_on_main_thread(&self) {
        self.shared.commit(self, true);
    }

    /// Whether the shared engine runs this configuration.
    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }

    /// Defines the configuration's stats in Envoy (see `metrics`): a stat Envoy refuses is
    /// logged and left out, never refusing the configuration.
    ///
    /// # Safety
    /// In `config_new`, on Envoy's main thread: `config_envoy` is the configuration Envoy is
    /// making (the only time Envoy lets a module define stats).
    pub unsafe fn define_metrics(&mut self, host: &Host, config_envoy: ConfigEnvoyPtr) {
        // SAFETY: the configuration being made, on the main thread (this function's contract).
        let mut stats = unsafe { EnvoyStats::new(host, config_envoy) };
        self.metrics = MetricIds::define(&self.engine.metrics(), &mut stats, &self.name);
    }

    /// Publishes the engine's metrics into Envoy's stats through `stats` (this
    /// configuration's), on Envoy's main thread, if this configuration is the engine's
    /// publisher (its newest live, committed configuration; see `metrics`). Stats Envoy
    /// refuses are logged, at most a line a minute.
    pub fn publish_metrics(&self, stats: &mut impl Sink) {
        let Some(report) = self.shared.publish(self, stats) else {
            return;
        };
        if let Some(first) = report.first_refusal {
            self.metrics_errors.log(abi::LOG_WARN, || {
                format!(
                    "velvet-rope: filter `{}`: Envoy refused {} stat update(s), first {first}",
                    self.name, report.refused
                )
            });
        }
    }
}

impl Drop for FilterConfig {
    fn drop(&mut self) {
        // First: the ticker thread then no longer commits through it (under this lock).
        drop(lock(&self.scheduler).take());
        if self.committed.load(Ordering::Acquire) {
            self.shared.release(self.seq);
        }
    }
}

/// The configuration's tick interval: `asked` (default 1000 ms), at most the bucket width and
/// every room's refresh interval, at least 10 ms.
fn tick_interval(name: &str, config: &Config, asked: Option<u64>) -> Result<u64, String> {
    let interval = asked.unwrap_or(1000);
    let most = config
        .rooms
        .iter()
        .map(|r| u64::from(r.refresh_interval))
        .chain([u64::from(config.settings.bucket_width_secs)])
        .min()
        .unwrap_or(1)
        .saturating_mul(1000);
    if interval < 10 || interval > most {
        return Err(format!(
            "filter `{name}`: tick_interval_ms must be between 10 and {most} (the bucket \
             width and every room's refresh interval)"
        ));
    }
    Ok(interval)
}

/// Whether the `[cluster]` table, if any, names a store the sync loop can use (the loop itself
/// starts when the configuration takes effect).
fn check_cluster(config: &Config) -> Result<(), String> {
    let Some(c) = &config.cluster else {
        return Ok(());
    };
    velvet_rope_cluster::store_for(c)
        .map(drop)
        .map_err(|e| format!("cluster: {e}"))
}

/// The sync loop for `engine`, if its configuration has a `[cluster]` table.
fn sync_loop(
    engine: &Arc<Engine>,
) -> Result<Option<(Syncer, velvet_rope::config::ClusterConfig)>, String> {
    let Some(table) = engine.config().cluster.clone() else {
        return Ok(None);
    };
    let syncer = Syncer::from_engine(engine.clone()).map_err(|e| format!("cluster: {e}"))?;
    Ok(syncer.map(|s| (s, table)))
}

impl SharedEngine {
    /// The live engine of `key`, which must be able to take `config` (checked, not applied),
    /// or a new engine running `config`, not yet ticked.
    fn find_or_make(
        key: &str,
        config: &Config,
        state_file: Option<&str>,
    ) -> Result<Arc<Self>, String> {
        let mut engines = lock(&ENGINES);
        engines.retain(|(_, w)| w.strong_count() > 0);
        if let Some(live) = engines
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, w)| w.upgrade())
        {
            live.check(config)?;
            return Ok(live);
        }
        let now = CoarseSystemClock.now_ms();
        let engine = match state_file {
            Some(path) => Engine::open_state_file(config.clone(), path, now),
            None => Engine::new(config.clone(), now),
        }
        .map_err(|e| e.to_string())?;
        let shared = Arc::new(SharedEngine {
            engine: Arc::new(engine),
            publishing: PublishGroup::of(state_file),
            cue: Arc::new(Cue::default()),
            generation: AtomicU64::new(1),
            live: Mutex::new(Live::default()),
        });
        engines.push((key.to_owned(), Arc::downgrade(&shared)));
        Ok(shared)
    }

    /// Whether the engine could run `config` as the newest configuration now.
    fn check(&self, config: &Config) -> Result<(), String> {
        let live = lock(&self.live);
        let (target, _) = self.target(&live, Some(config));
        self.engine
            .check_reload(&target)
            .map_err(|e| format!("the running engine cannot take this configuration: {e}"))
    }

    /// What the engine should run: the newest configuration (`newest`, else the newest live
    /// one's, else the running one), plus the rooms live configurations decide that it lacks,
    /// as the engine runs them. Also says which rooms were kept so, and for which filter.
    fn target(&self, live: &Live, newest: Option<&Config>) -> (Config, Vec<(String, String)>) {
        let running = self.engine.config();
        let mut target = match (newest, &live.newest) {
            (Some(c), _) => c.clone(),
            (None, Some((_, c))) => (**c).clone(),
            (None, None) => (*running).clone(),
        };
        let mut kept = Vec::new();
        for m in &live.members {
            if target.rooms.iter().any(|r| r.name == m.room) {
                continue;
            }
            let find = |rooms: &[RoomConfig]| rooms.iter().find(|r| r.name == m.room).cloned();
            if let Some(r) = find(&running.rooms).or_else(|| find(&m.source.rooms)) {
                target.rooms.push(r);
                kept.push((m.room.clone(), m.name.clone()));
            }
        }
        (target, kept)
    }

    /// Makes `config` live (once; see the module docs): reloads the engine if its
    /// configuration changes, then sets the ticker, and on the main thread the sync loop.
    fn commit(&self, config: &FilterConfig, main_thread: bool) {
        let mut live = lock(&self.live);
        if config.committed.load(Ordering::Acquire) {
            if main_thread {
                self.run_sync(&mut live, &config.name);
            }
            return;
        }
        let previous = live.newest.clone();
        if !matches!(&live.newest, Some((seq, _)) if *seq > config.seq) {
            live.newest = Some((config.seq, config.source.clone()));
        }
        live.members.push(Member {
            seq: config.seq,
            scheduler: config.scheduler.clone(),
            name: config.name.clone(),
            room: config.room.clone(),
            interval_ms: config.interval_ms,
            source: config.source.clone(),
        });
        lock(&self.publishing.live).push((config.seq, Arc::downgrade(&config.shared)));
        let newest = matches!(&live.newest, Some((seq, _)) if *seq == config.seq);
        let (target, kept) = self.target(&live, None);
        if target != *self.engine.config() {
            if let Err(e) = self.reload(target) {
                live.newest = previous;
                abi::log(
                    abi::LOG_ERROR,
                    &format!(
                        "velvet-rope: filter `{}`: the running engine could not take the \
                         configuration Envoy accepted, and keeps its own: {e}",
                        config.name
                    ),
                );
            }
        }
        for (room, keeper) in kept {
            if newest && self.engine.stats(&room).is_ok() {
                abi::log(
                    abi::LOG_INFO,
                    &format!(
                        "velvet-rope: filter `{}`: its configuration has no room `{room}`, \
                         which filter `{keeper}` still decides: room `{room}` keeps its \
                         running settings until no filter decides it",
                        config.name
                    ),
                );
            }
        }
        self.set_publisher(&live);
        self.run_ticker(&mut live);
        if main_thread {
            self.run_sync(&mut live, &config.name);
        }
        abi::log(
            abi::LOG_INFO,
            &format!(
                "velvet-rope: filter `{}` decides room `{}`",
                config.name, config.room
            ),
        );
        // Release: pairs with the acquire load in `ensure_committed`.
        config.committed.store(true, Ordering::Release);
    }

    /// `seq`'s configuration is gone: drops the rooms nothing needs any more, recomputes the
    /// interval, and stops the ticker and the sync loop with the last configuration.
    fn release(&self, seq: u64) {
        let mut live = lock(&self.live);
        live.members.retain(|m| m.seq != seq);
        lock(&self.publishing.live).retain(|(s, _)| *s != seq);
        self.set_publisher(&live);
        if live.members.is_empty() {
            let threads = (live.ticker.take(), live.sync.take());
            drop(live);
            // Joined with no lock held: a worker committing meanwhile does not wait for a
            // sync round to end.
            drop(threads);
            return;
        }
        let (target, _) = self.target(&live, None);
        let running = self.engine.config();
        let dropped: Vec<&str> = running
            .rooms
            .iter()
            .filter(|r| !target.rooms.iter().any(|t| t.name == r.name))
            .map(|r| r.name.as_str())
            .collect();
        if !dropped.is_empty() {
            match self.reload(target.clone()) {
                Ok(()) => {
                    for room in dropped {
                        abi::log(
                            abi::LOG_INFO,
                            &format!(
                                "velvet-rope: room `{room}` is dropped: the configuration no \
                                 longer has it and no live filter decides it"
                            ),
                        );
                    }
                }
                Err(e) => abi::log(
                    abi::LOG_ERROR,
                    &format!("velvet-rope: rooms {dropped:?} could not be dropped: {e}"),
                ),
            }
        }
        self.run_ticker(&mut live);
        self.run_sync(&mut live, "");
    }

    /// Reloads the engine into `target`, then bumps the generation (see
    /// [`FilterConfig::room_traits`]).
    fn reload(&self, target: Config) -> velvet_rope::Result<()> {
        self.engine.reload(target)?;
        // Release: pairs with the acquire load in `FilterConfig::room_traits`.
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// The newest live configuration publishes the engine's metrics (see `metrics`).
    fn set_publisher(&self, live: &Live) {
        let newest = live.members.iter().max_by_key(|m| m.seq);
        self.cue.set(newest.map(|m| m.scheduler.clone()));
    }

    /// Publishes the engine's metrics through `stats` if `config` is the engine's newest live
    /// configuration (on Envoy's main thread): the rooms no newer engine of its publish group
    /// runs; what was written, or `None` if it is not the publisher.
    fn publish(
        &self,
        config: &FilterConfig,
        stats: &mut impl Sink,
    ) -> Option<crate::metrics::Report> {
        let newest = lock(&self.live).members.iter().map(|m| m.seq).max();
        if newest != Some(config.seq) {
            return None;
        }
        let group: Vec<(u64, Weak<SharedEngine>)> = lock(&self.publishing.live).clone();
        // Rooms a newer engine over the same counters runs: it publishes them.
        let newer: Vec<String> = group
            .iter()
            .filter(|(seq, _)| *seq > config.seq)
            .filter_map(|(_, w)| w.upgrade())
            .filter(|e| !std::ptr::eq(Arc::as_ptr(e), self))
            .flat_map(|e| {
                e.engine
                    .config()
                    .rooms
                    .iter()
                    .map(|r| r.name.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut families = self.engine.metrics();
        if !newer.is_empty() {
            for f in &mut families {
                f.samples.retain(|s| {
                    !s.labels
                        .iter()
                        .any(|(k, v)| *k == "room" && newer.iter().any(|r| r == v))
                });
            }
        }
        let live: Vec<u64> = group.iter().map(|(seq, _)| *seq).collect();
        let mut ledger = lock(&self.publishing.ledger);
        Some(ledger.publish(&families, &config.metrics, stats, config.seq, &live))
    }

    /// Sets the ticker to the shortest live interval, starting it if needed (after each tick
    /// it cues the publisher's publish event).
    fn run_ticker(&self, live: &mut Live) {
        let Some(interval) = live.members.iter().map(|m| m.interval_ms).min() else {
            return;
        };
        match &live.ticker {
            Some(t) => t.set_interval(interval),
            None => match Ticker::start(self.engine.clone(), interval, {
                let cue = self.cue.clone();
                move || cue.ring()
            }) {
                Ok(t) => live.ticker = Some(t),
                Err(e) => abi::log(abi::LOG_ERROR, &format!("velvet-rope: {e}")),
            },
        }
    }

    /// Starts or restarts the sync loop when the running `[cluster]` table is not the one it
    /// runs for (Envoy's main thread only: stopping a loop waits for its round).
    fn run_sync(&self, live: &mut Live, who: &str) {
        if live.members.is_empty() {
            return;
        }
        let table = self.engine.config().cluster.clone();
        if live.sync.as_ref().map(|(_, t)| t) != table.as_ref() {
            // A new store, or new sync settings: the old loop stops (joined) first.
            live.sync = None;
            match sync_loop(&self.engine) {
                Ok(s) => live.sync = s,
                Err(e) => abi::log(
                    abi::LOG_ERROR,
                    &format!("velvet-rope: filter `{who}`: {e}; the rooms decide alone"),
                ),
            }
        }
    }

    /// The ticker's interval now (none before the first commit or after the last release).
    #[cfg(test)]
    fn interval_ms(&self) -> Option<u64> {
        lock(&self.live).ticker.as_ref().map(Ticker::interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOMS: &str = "[[rooms]]\nname = \"shop\"\ntotal_active_users = 2\n\
                         new_users_per_minute = 100\n";

    fn json(v: serde_json::Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    fn room(name: &str, total: u64) -> String {
        format!(
            "[[rooms]]\nname = \"{name}\"\ntotal_active_users = {total}\n\
             new_users_per_minute = 100\n"
        )
    }

    /// A configuration, committed as Envoy's event would.
    fn live(name: &str, settings: serde_json::Value) -> FilterConfig {
        let c = FilterConfig::from_bytes(name, &json(settings)).unwrap();
        c.commit_on_main_thread();
        c
    }

    /// A scratch file for one test.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("vr-envoy-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("rooms.toml")
    }

    fn rooms_of(e: &Engine) -> Vec<String> {
        let mut r = e.rooms();
        r.sort();
        r
    }

    #[test]
    fn inline_configuration_and_room() {
        let c = live("f", serde_json::json!({"config": ROOMS, "room": "shop"}));
        assert_eq!(c.room, "shop");
        let d = c
            .engine
            .admit("shop", None, CoarseSystemClock.now_ms())
            .unwrap();
        assert!(d.set_cookie.is_some());
    }

    #[test]
    fn configurations_of_one_source_share_one_engine_and_reload_it() {
        let text = ROOMS.replace("name = \"shop\"", "name = \"shared\"");
        let a = live("a", serde_json::json!({"config": text, "room": "shared"}));
        let b = live("b", serde_json::json!({"config": text, "room": "shared"}));
        assert!(Arc::ptr_eq(&a.engine, &b.engine), "one source, one engine");
        let other = live("c", serde_json::json!({"config": ROOMS, "room": "shop"}));
        assert!(!Arc::ptr_eq(&a.engine, &other.engine));
        // A ticket of one configuration re-admits through the other (one key, one count).
        let now = CoarseSystemClock.now_ms();
        let d = a.engine.admit("shared", None, now).unwrap();
        let cookie = d.set_cookie.unwrap();
        let cookie = cookie.split(';').next().unwrap();
        let again = b.engine.admit("shared", Some(cookie), now).unwrap();
        assert!(again.set_cookie.is_none(), "the same engine's steady path");
        // When every configuration of a source is gone, the next one starts a new engine
        // (here with a new ephemeral key: the old ticket is refused).
        drop((a, b));
        let fresh = live("d", serde_json::json!({"config": text, "room": "shared"}));
        let d = fresh.engine.admit("shared", Some(cookie), now).unwrap();
        assert!(d.ticket_error.is_some(), "{d:?}");
    }

    #[test]
    fn a_changed_file_reloads_the_running_engine_once_committed_or_is_refused() {
        let path = scratch("reload");
        let settings = serde_json::json!({"config_path": path, "room": "shop"});
        std::fs::write(&path, ROOMS).unwrap();
        let old = live("old", settings.clone());
        std::fs::write(
            &path,
            ROOMS.replace("total_active_users = 2", "total_active_users = 3"),
        )
        .unwrap();
        let new = FilterConfig::from_bytes("new", &json(settings.clone())).unwrap();
        assert!(Arc::ptr_eq(&old.engine, &new.engine));
        let limit = |c: &FilterConfig| c.engine.config().rooms[0].total_active_users;
        assert_eq!(limit(&new), 2, "made, not yet committed: nothing changed");
        new.ensure_committed();
        assert_eq!(limit(&new), 3, "committed: reloaded");
        // The bucket width numbers the counters: the running engine cannot take it.
        std::fs::write(
            &path,
            format!("[settings]\nbucket_width_secs = 30\n{ROOMS}"),
        )
        .unwrap();
        match FilterConfig::from_bytes("bad", &json(settings)) {
            Ok(_) => panic!("a layout change was taken"),
            Err(e) => assert!(e.contains("cannot take this configuration"), "{e}"),
        }
        assert_eq!(limit(&old), 3, "still serving");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_configuration_destroyed_uncommitted_leaves_the_engine_as_it_was() {
        // A refused listener update: Envoy makes the configuration, then destroys it.
        let path = scratch("refused");
        let settings = serde_json::json!({"config_path": path, "room": "a",
                                          "tick_interval_ms": 500});
        std::fs::write(&path, room("a", 2)).unwrap();
        let running = live("a", settings.clone());
        std::fs::write(&path, format!("{}{}", room("a", 5), room("b", 1))).unwrap();
        let fast = serde_json::json!({"config_path": path, "room": "b",
                                      "tick_interval_ms": 20});
        let refused = FilterConfig::from_bytes("b", &json(fast)).unwrap();
        drop(refused);
        assert_eq!(rooms_of(&running.engine), ["a"]);
        assert_eq!(running.engine.config().rooms[0].total_active_users, 2);
        assert_eq!(running.shared.interval_ms(), Some(500));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_room_stays_while_a_live_configuration_decides_it() {
        let path = scratch("keep");
        let of = |room: &str| serde_json::json!({"config_path": path, "room": room});
        std::fs::write(&path, format!("{}{}", room("a", 5), room("b", 1))).unwrap();
        let x = live("x", of("a"));
        let y = live("y", of("b"));
        let now = CoarseSystemClock.now_ms();
        assert!(y.engine.admit("b", None, now).unwrap().set_cookie.is_some());
        // The file loses room b; a new configuration of x commits (a listener update).
        std::fs::write(&path, room("a", 6)).unwrap();
        let x2 = live("x", of("a"));
        drop(x);
        assert_eq!(rooms_of(&x2.engine), ["a", "b"], "b is still decided by y");
        assert_eq!(x2.engine.config().rooms[0].total_active_users, 6);
        x2.engine.tick(now + 10);
        assert_eq!(
            y.engine.stats("b").unwrap().active_users,
            1,
            "b kept its count"
        );
        assert_eq!(
            y.engine.admit("b", None, now + 20).unwrap().outcome,
            velvet_rope::Outcome::Queue,
            "b still decides, full"
        );
        // y goes: nothing decides b, and the configuration lacks it.
        drop(y);
        assert_eq!(rooms_of(&x2.engine), ["a"]);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn the_tick_interval_is_the_shortest_of_the_live_configurations() {
        let text = format!("{}{}", room("ta", 5), room("tb", 5));
        let of = |room: &str, ms: u64| serde_json::json!({"config": text, "room": room, "tick_interval_ms": ms});
        let slow = live("slow", of("ta", 900));
        assert_eq!(slow.shared.interval_ms(), Some(900));
        let fast = live("fast", of("tb", 50));
        assert_eq!(slow.shared.interval_ms(), Some(50));
        let pending = FilterConfig::from_bytes("pending", &json(of("ta", 10))).unwrap();
        assert_eq!(
            slow.shared.interval_ms(),
            Some(50),
            "not committed: not counted"
        );
        drop(pending);
        drop(fast);
        assert_eq!(
            slow.shared.interval_ms(),
            Some(900),
            "back when the fast one went"
        );
        let shared = slow.shared.clone();
        drop(slow);
        assert_eq!(
            shared.interval_ms(),
            None,
            "stopped with the last configuration"
        );
    }

    #[test]
    fn an_older_configuration_committing_late_does_not_win() {
        // Two updates in a row: the first's configuration commits after the second's.
        let path = scratch("order");
        let settings = serde_json::json!({"config_path": path, "room": "a"});
        std::fs::write(&path, room("a", 2)).unwrap();
        let first = live("first", settings.clone());
        std::fs::write(&path, room("a", 3)).unwrap();
        let older = FilterConfig::from_bytes("older", &json(settings.clone())).unwrap();
        std::fs::write(&path, room("a", 4)).unwrap();
        let newer = live("newer", settings);
        older.ensure_committed();
        assert_eq!(first.engine.config().rooms[0].total_active_users, 4);
        drop((first, older, newer));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn whether_the_room_reads_requests_follows_the_running_configuration() {
        // A room without rules is decided on its Cookie header; a reload that gives it rules
        // (a new configuration committed for another filter of the same file) is seen by a
        // filter made before it, and one that takes them away again too.
        let path = scratch("reads");
        let of = |room: &str| serde_json::json!({"config_path": path, "room": room});
        let rule =
            "[[rooms.rules]]\nname = \"health\"\naction = \"bypass\"\npaths = [\"/health\"]\n";
        std::fs::write(&path, format!("{}{}", room("a", 5), room("b", 5))).unwrap();
        let x = live("x", of("a"));
        assert!(!x.room_reads_request());
        assert!(!x.room_reads_request(), "kept: the same answer");
        std::fs::write(&path, format!("{}{rule}{}", room("a", 5), room("b", 5))).unwrap();
        let y = live("y", of("b"));
        assert!(x.room_reads_request(), "the reload gave room a a rule");
        assert!(!y.room_reads_request());
        std::fs::write(
            &path,
            format!("{}{}ticket_header = true\n", room("a", 5), room("b", 5)),
        )
        .unwrap();
        let z = live("z", of("a"));
        assert!(!x.room_reads_request(), "rule gone");
        assert!(!z.room_reads_request());
        assert!(y.room_reads_request(), "b takes header tickets");
        drop((x, y, z));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn whether_the_origin_may_revoke_follows_the_running_configuration() {
        // Room a starts out revocable; a reload that takes the setting away (a new
        // configuration committed for another filter of the same file) is seen by a filter
        // made before it. (Giving it back needs a restart: it lays the counters out anew.)
        let path = scratch("revocable");
        let of = |room: &str| serde_json::json!({"config_path": path, "room": room});
        let revoke = "enabled_origin_commands = [\"revoke\"]\n";
        std::fs::write(&path, format!("{}{revoke}{}", room("a", 5), room("b", 5))).unwrap();
        let x = live("x", of("a"));
        assert!(x.room_revocable() && !x.room_reads_request());
        assert!(x.room_revocable(), "kept: the same answer");
        std::fs::write(&path, format!("{}{}", room("a", 5), room("b", 5))).unwrap();
        let y = live("y", of("b"));
        assert!(!x.room_revocable(), "the reload took the setting away");
        assert!(!x.room_reads_request());
        assert!(!y.room_revocable());
        drop((x, y));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// Stats that count what is written (ids 1-based, as Envoy's).
    #[derive(Default)]
    struct Counted {
        defined: usize,
        written: usize,
    }

    impl Sink for Counted {
        fn define(
            &mut self,
            _kind: crate::metrics::StatKind,
            _name: &str,
            _labels: &[&str],
        ) -> Result<usize, abi::MetricsResult> {
            self.defined += 1;
            Ok(self.defined)
        }

        fn update(
            &mut self,
            _kind: crate::metrics::StatKind,
            _id: usize,
            _labels: &[&str],
            _value: u64,
        ) -> abi::MetricsResult {
            self.written += 1;
            abi::METRICS_SUCCESS
        }
    }

    /// A configuration with its stats defined, uncommitted.
    fn with_stats(name: &str, settings: serde_json::Value) -> FilterConfig {
        let mut c = FilterConfig::from_bytes(name, &json(settings)).unwrap();
        c.metrics = MetricIds::define(&c.engine.metrics(), &mut Counted::default(), name);
        assert!(!c.metrics.is_empty());
        c
    }

    #[test]
    fn the_newest_live_configuration_of_an_engine_publishes() {
        let text = room("pub", 5);
        let of = serde_json::json!({"config": text, "room": "pub"});
        let old = with_stats("old", of.clone());
        old.commit_on_main_thread();
        let mut stats = Counted::default();
        old.publish_metrics(&mut stats);
        let first = stats.written;
        assert!(first > 0, "the only live configuration publishes");
        old.publish_metrics(&mut stats);
        assert_eq!(stats.written, first, "nothing changed, nothing written");

        // Made, not committed (a listener update Envoy may yet refuse): not the publisher.
        let new = with_stats("new", of);
        new.publish_metrics(&mut stats);
        assert_eq!(
            stats.written, first,
            "an uncommitted configuration never publishes"
        );
        new.ensure_committed();
        new.publish_metrics(&mut stats);
        let handed = stats.written - first;
        assert_eq!(handed, first, "the new publisher writes every series once");
        old.publish_metrics(&mut stats);
        assert_eq!(
            stats.written,
            first + handed,
            "the replaced one no longer publishes"
        );
        assert!(Arc::ptr_eq(
            lock(&old.shared.cue.publisher).as_ref().unwrap(),
            &new.scheduler
        ));

        // The new one goes: the old one publishes again, and the cue follows.
        drop(new);
        assert!(Arc::ptr_eq(
            lock(&old.shared.cue.publisher).as_ref().unwrap(),
            &old.scheduler
        ));
        let shared = old.shared.clone();
        drop(old);
        assert!(
            lock(&shared.cue.publisher).is_none(),
            "none live: no publisher"
        );
    }

    /// Envoy's stats as a process holds them: one stat per name, shared by the scopes that
    /// define it (ids are per definition); counters add, gauges are set.
    #[derive(Default)]
    struct Envoy {
        names: Vec<String>,
        values: std::collections::HashMap<String, u64>,
    }

    impl Sink for Envoy {
        fn define(
            &mut self,
            _kind: crate::metrics::StatKind,
            name: &str,
            _labels: &[&str],
        ) -> Result<usize, abi::MetricsResult> {
            self.names.push(name.to_owned());
            Ok(self.names.len())
        }

        fn update(
            &mut self,
            kind: crate::metrics::StatKind,
            id: usize,
            labels: &[&str],
            value: u64,
        ) -> abi::MetricsResult {
            let key = format!("{}{{{}}}", self.names[id - 1], labels.join(","));
            let v = self.values.entry(key).or_default();
            match kind {
                crate::metrics::StatKind::Counter => *v += value,
                crate::metrics::StatKind::Gauge => *v = value,
            }
            abi::METRICS_SUCCESS
        }
    }

    /// A configuration with its stats defined in `envoy`, committed as Envoy's event would.
    fn committed_in(envoy: &mut Envoy, name: &str, settings: serde_json::Value) -> FilterConfig {
        let mut c = FilterConfig::from_bytes(name, &json(settings)).unwrap();
        c.metrics = MetricIds::define(&c.engine.metrics(), envoy, name);
        c.commit_on_main_thread();
        c
    }

    /// A listener update with an inline configuration that changed, over one state file: two
    /// engines of the process share the host's counters while the old listener drains. Their
    /// host-wide counters go into Envoy's once (one publisher for the state file, one ledger),
    /// not once per engine; the old engine publishes again only when it is the last.
    #[test]
    fn engines_sharing_a_state_file_publish_its_counters_once() {
        let dir = scratch("state-publish");
        let state = dir.with_file_name("rooms.state");
        let _ = std::fs::remove_file(&state);
        let settings = |text: String| serde_json::json!({"config": text, "room": "pub", "state_file": state.to_str()});
        let mut envoy = Envoy::default();
        let old = committed_in(&mut envoy, "old", settings(room("pub", 50)));
        let new = committed_in(
            &mut envoy,
            "new",
            settings(room("pub", 50) + "# the listener update\n"),
        );
        assert!(!Arc::ptr_eq(&old.engine, &new.engine), "two engines");
        let now = CoarseSystemClock.now_ms();
        let admitted = "room_admissions_total{pub,new}";
        let admit = |c: &FilterConfig, n: usize, envoy: &mut Envoy| {
            for _ in 0..n {
                c.engine.admit("pub", None, now).unwrap();
            }
            c.engine.tick(now);
            old.publish_metrics(envoy);
            new.publish_metrics(envoy);
            envoy.values.get(admitted).copied()
        };
        assert_eq!(admit(&old, 3, &mut envoy), Some(3));
        assert_eq!(admit(&new, 2, &mut envoy), Some(5), "{:?}", envoy.values);
        assert_eq!(admit(&old, 1, &mut envoy), Some(6));
        // The old listener drained: the new engine goes on from the same ledger.
        drop(old);
        for _ in 0..2 {
            new.engine.admit("pub", None, now).unwrap();
        }
        new.engine.tick(now);
        new.publish_metrics(&mut envoy);
        assert_eq!(envoy.values.get(admitted).copied(), Some(8));
        drop(new);
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    /// A room only the older engine runs (the update removed it) is published by it while it
    /// lives (review: only the group's newest configuration published, so it froze).
    #[test]
    fn a_room_only_the_older_engine_runs_is_still_published() {
        let dir = scratch("state-room");
        let state = dir.with_file_name("rooms.state");
        let _ = std::fs::remove_file(&state);
        let mut envoy = Envoy::default();
        let mk = |name: &str, text: String, r: &str, envoy: &mut Envoy| {
            let v = serde_json::json!({"config": text, "room": r, "state_file": state.to_str()});
            committed_in(envoy, name, v)
        };
        // Old sizes the file for both rooms; the update drops room b.
        let old = mk("old", room("a", 50) + &room("b", 50), "b", &mut envoy);
        let new = mk("new", room("a", 50), "a", &mut envoy);
        let now = CoarseSystemClock.now_ms();
        for _ in 0..3 {
            old.engine.admit("b", None, now).unwrap();
        }
        old.engine.tick(now);
        old.publish_metrics(&mut envoy);
        new.publish_metrics(&mut envoy);
        assert_eq!(
            envoy.values.get("room_admissions_total{b,new}").copied(),
            Some(3)
        );
        assert_eq!(envoy.values.get("room_active_users{b}").copied(), Some(3));
        drop((old, new));
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    /// One path, two files (the state file removed and made anew between the engines): two
    /// groups, each its own counters (review: one ledger over both read 8 for 7).
    #[test]
    fn engines_over_two_files_at_one_path_keep_their_own_ledgers() {
        let dir = scratch("state-inode");
        let state = dir.with_file_name("rooms.state");
        let _ = std::fs::remove_file(&state);
        let s = |text: String| serde_json::json!({"config": text, "room": "pub", "state_file": state.to_str()});
        let mut envoy = Envoy::default();
        let now = CoarseSystemClock.now_ms();
        let k = "room_admissions_total{pub,new}";
        let old = committed_in(&mut envoy, "old", s(room("pub", 50)));
        for _ in 0..5 {
            old.engine.admit("pub", None, now).unwrap();
        }
        old.engine.tick(now);
        old.publish_metrics(&mut envoy);
        std::fs::remove_file(&state).unwrap(); // old keeps the unlinked inode
        let new = committed_in(&mut envoy, "new", s(room("pub", 50) + "#\n")); // a fresh file, same path
        for _ in 0..2 {
            new.engine.admit("pub", None, now).unwrap();
        }
        new.engine.tick(now);
        new.publish_metrics(&mut envoy);
        drop(new); // e.g. the update rolled back
        old.publish_metrics(&mut envoy);
        // 7 admissions (5 + 2): one ledger over both files read 8 (new's 2 taken as a total
        // that went down, then old's 5 - 2 added).
        assert_eq!(envoy.values.get(k).copied(), Some(7));
        drop(old);
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (b"not json".to_vec(), "must be JSON"),
            (json(serde_json::json!({"room": "shop"})), "exactly one of"),
            (
                json(serde_json::json!({"config": ROOMS, "config_path": "/x", "room": "shop"})),
                "exactly one of",
            ),
            (
                json(serde_json::json!({"config": ROOMS, "room": "nope"})),
                "no room named `nope`",
            ),
            (
                json(serde_json::json!({"config": ROOMS, "room": "shop", "extra": 1})),
                "unknown field",
            ),
            (
                json(serde_json::json!({"config": "[[rooms]]\nname = 3", "room": "shop"})),
                "filter `f`",
            ),
            (
                json(serde_json::json!({"config_path": "/nonexistent/vr.toml", "room": "shop"})),
                "/nonexistent/vr.toml",
            ),
            (
                json(serde_json::json!({"config": ROOMS, "room": "shop", "tick_interval_ms": 0})),
                "tick_interval_ms",
            ),
            (
                // Longer than the room's refresh interval (20 s by default).
                json(
                    serde_json::json!({"config": ROOMS, "room": "shop", "tick_interval_ms": 30000}),
                ),
                "between 10 and 20000",
            ),
        ];
        for (bytes, want) in cases {
            match FilterConfig::from_bytes("f", &bytes) {
                Ok(_) => panic!("accepted {}", String::from_utf8_lossy(&bytes)),
                Err(e) => assert!(e.contains(want), "{e:?} lacks {want:?}"),
            }
        }
    }
}
