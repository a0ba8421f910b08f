//! The engine: one immutable snapshot per tick, read lock-free by every `admit`.
//!
//! `admit` loads the current snapshot through `arc-swap` (no lock), opens the visitor's
//! ticket, and claims a slot from the room's sharded pool when a new admission is due. It
//! never blocks, never does I/O and allocates only when it has to hand out a new ticket.
//! `tick` folds the counters into a new snapshot and swaps it in; it never waits either (a
//! tick that finds another running returns, and a room another process is advancing is read as
//! last published). `reload` validates a configuration and swaps it in, keeping each room's
//! counters (matched by name) or refusing the change.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::admission::cluster::{self, ClusterGrant, ClusterState, HostReport, SyncTurn};
use crate::admission::decision::{Decision, RoomStats};
use crate::admission::events::{Event, EventKind, EventLog};
use crate::admission::front_door::carried_out;
use crate::admission::governance;
use crate::admission::keys::keyring_for;
use crate::admission::room::Room;
use crate::admission::snapshot::{RoomView, Snapshot};
use crate::admission::stats::{room_stats, room_stats_json};
use crate::admission::storage::Storage;
use crate::admission::tick::{first_tick_room, tick_room};
use crate::clock::{Clock, Millis, SystemClock, MAX_NOW_MS};
use crate::config::Config;
use crate::counters::directory::HEADER_BYTES;
use crate::counters::room_layout::RoomLayout;
use crate::error::{Error, Result};
use crate::fork_safe_lock::{ForkSafeLock, Guard};
use crate::page::{self, Page, PageRequest, RoomPages};
use crate::request::FrontDoor;
use crate::ticket::Keyring;

/// State of `tick` and `reload` inside this process (cross-process state is in the regions).
/// Behind a lock a forked child can take over (a pre-fork server forks while a ticker thread
/// ticks): its fields are only ever replaced whole, so a copy left mid-tick is usable.
struct Lifecycle {
    storage: Storage,
    last_now: Millis,
}

/// The admission engine. Cheap to share (`Arc<Engine>`); every method takes `&self`.
pub struct Engine {
    pub(crate) current: ArcSwap<Snapshot>,
    lifecycle: ForkSafeLock<Lifecycle>,
    /// Events for the host's log (see `admission::events`).
    events: EventLog,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("rooms", &self.rooms())
            .finish()
    }
}

impl Engine {
    /// An engine over a validated configuration, with its first tick at `now`. Its counters
    /// live in memory it owns.
    pub fn new(config: Config, now: Millis) -> Result<Self> {
        Self::start(config, Storage::Owned, now)
    }

    /// An engine from TOML or JSON text.
    pub fn from_text(text: &str, now: Millis) -> Result<Self> {
        Self::new(Config::from_text(text)?, now)
    }

    /// An engine from a configuration file (`.json` or TOML).
    pub fn from_path(path: impl AsRef<Path>, now: Millis) -> Result<Self> {
        Self::new(Config::from_path(path)?, now)
    }

    /// Bytes of shared memory an engine for `config` needs (see [`Engine::new_shared`]): a
    /// header with the room directory, then each room's counters.
    pub fn shared_region_size(config: &Config) -> usize {
        HEADER_BYTES
            + config
                .rooms
                .iter()
                .map(|r| RoomLayout::of(r, &config.settings).size())
                .sum::<usize>()
    }

    /// Bytes of counters a room of this configuration takes: fixed by the configuration,
    /// whatever the number of visitors.
    pub fn room_memory_bytes(
        room: &crate::config::RoomConfig,
        settings: &crate::config::Settings,
    ) -> usize {
        RoomLayout::of(room, settings).size()
    }

    /// An engine whose counters live in memory the host provides, so that several processes
    /// mapping the same memory (nginx workers, a pre-fork server) share exact counts. A zeroed
    /// region is laid out; a region laid out before is attached, each room found by name
    /// (order does not matter) and keeping its counts; a room the region does not hold yet takes
    /// free space after the others. Anything else is refused. With no ticket keys configured,
    /// the ephemeral key is kept in the region so every process shares it.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes, aligned to 128 bytes, stay
    /// mapped for the whole life of the engine, and be accessed by nothing but velvet-rope
    /// engines (in any process) while they live.
    pub unsafe fn new_shared(
        config: Config,
        now: Millis,
        region: *mut u8,
        len: usize,
    ) -> Result<Self> {
        config.validate()?;
        let size = Self::shared_region_size(&config);
        if len < size {
            return Err(Error::Region(format!(
                "{len} bytes given, the configuration needs {size}"
            )));
        }
        // SAFETY: forwarded from this function's contract.
        let storage = unsafe { Storage::region(region, len) }?;
        Self::start(config, storage, now)
    }

    /// An engine whose counters live in a *state file* at `path`, mapped into every process
    /// that opens it: the workers of a pre-fork server (gunicorn, uvicorn, `node:cluster`)
    /// share exact counts, and counts, queue and the ephemeral ticket key survive a restart of
    /// all of them. The file is created (mode 0600, [`Engine::shared_region_size`] bytes) if it
    /// does not exist. Rooms are found by name as in [`Engine::new_shared`]; a room whose counter
    /// layout changed, or that no longer fits, is refused (remove the file to start afresh).
    pub fn open_state_file(config: Config, path: impl AsRef<Path>, now: Millis) -> Result<Self> {
        config.validate()?;
        let storage = Storage::state_file(path.as_ref(), Self::shared_region_size(&config))?;
        Self::start(config, storage, now)
    }

    fn start(config: Config, storage: Storage, now: Millis) -> Result<Self> {
        let mut lifecycle = Lifecycle {
            storage,
            last_now: now,
        };
        let snapshot = build(&mut lifecycle, config, None, now)?;
        Ok(Self {
            current: ArcSwap::from_pointee(snapshot),
            lifecycle: ForkSafeLock::new(lifecycle),
            events: EventLog::default(),
        })
    }

    /// Replaces the configuration. A bad one is refused with an error and the running one keeps
    /// serving. Rooms are matched by name and keep their counters (and counts) when the counters
    /// can serve the new configuration (see README, "Reloads"); a change they cannot serve is
    /// refused, naming the room and the setting. New rooms start with fresh counters; removed
    /// rooms are dropped.
    /// Logs a `config_reloaded` event, or `config_refused` with the error (see
    /// [`Engine::drain_events`]).
    pub fn reload(&self, config: Config) -> Result<()> {
        let mut lifecycle = self.lock();
        let previous = self.current.load_full();
        let now = lifecycle.last_now;
        let rooms = config.rooms.len();
        match build(&mut lifecycle, config, Some(&previous), now) {
            Ok(snapshot) => {
                self.current.store(Arc::new(snapshot));
                self.events.push(Event {
                    at: now,
                    kind: EventKind::ConfigReloaded,
                    room: None,
                    fields: vec![("rooms", rooms.to_string())],
                });
                Ok(())
            }
            Err(e) => {
                self.events.push(Event {
                    at: now,
                    kind: EventKind::ConfigRefused,
                    room: None,
                    fields: vec![("error", e.to_string())],
                });
                Err(e)
            }
        }
    }

    /// Every event logged since the last call, oldest first (at most
    /// [`EVENT_LOG_CAPACITY`](crate::admission::events::EVENT_LOG_CAPACITY); older ones are
    /// dropped and counted by [`Engine::events_dropped`]): the rooms' queues starting and
    /// stopping and their scheduled events' phases, found by [`Engine::tick`] (once per host,
    /// whichever process's tick saw the change), reloads, and what the host adds with
    /// [`Engine::record_event`]. For the host's own logger: one JSON line each
    /// ([`Event::to_json`]).
    pub fn drain_events(&self) -> Vec<Event> {
        self.events.drain()
    }

    /// The oldest event, taken if `take` accepts it (a caller with a buffer too small for it
    /// leaves it for the next call); `None` when there is none or it was left.
    pub fn next_event_if(&self, take: impl FnOnce(&Event) -> bool) -> Option<Event> {
        self.events.pop_if(take)
    }

    /// Counts a sync of `room` through the cluster tier (for the cluster tier's sync loop):
    /// answered (`ok`) or failed, and whether it began an outage of the store. Counted in the
    /// room's shared tallies (`velvet_rope_cluster_syncs_total`,
    /// `velvet_rope_cluster_outages_total`); nothing for a room the engine does not run.
    pub fn record_sync(&self, room: &str, ok: bool, outage_began: bool) {
        let snap = self.current.load();
        if let Some(t) = snap.room(room).ok().and_then(|v| v.room.counters.tallies()) {
            t.synced(ok, outage_began);
        }
    }

    /// Events dropped because nobody drained them in time.
    pub fn events_dropped(&self) -> u64 {
        self.events.dropped()
    }

    /// Adds an event of the host's to the log [`Engine::drain_events`] drains (the cluster
    /// tier's outages).
    pub fn record_event(&self, event: Event) {
        self.events.push(event);
    }

    /// Whether [`Engine::reload`] would take `config` now, changing nothing: the configuration
    /// is validated, its ticket keys read, and each room the engine runs is checked against
    /// the counters it has (the refusal names the room and the setting, as `reload`'s does).
    /// A room new to an engine whose counters live in a shared region is only checked for
    /// room in the region when a reload lays it out. For hosts that must refuse a
    /// configuration before they know whether it will be used (an Envoy listener update).
    pub fn check_reload(&self, config: &Config) -> Result<()> {
        config.validate()?;
        config.tickets.keyring()?;
        let previous = self.current.load();
        let same_settings = previous.config.settings == config.settings
            && previous.config.cluster == config.cluster;
        for (i, cfg) in config.rooms.iter().enumerate() {
            if let Ok(view) = previous.room(&cfg.name) {
                let running = &view.room;
                if running.cfg != *cfg || !same_settings {
                    counters_serve(running, i, cfg, &config.settings)?;
                }
            }
        }
        Ok(())
    }

    /// Folds the counters into a new snapshot as of `now`. Call it about once a second (and at
    /// least once per bucket and per refresh interval). It never waits: if another thread of
    /// this process is ticking, this call returns at once (that tick publishes).
    pub fn tick(&self, now: Millis) {
        let now = now.min(MAX_NOW_MS);
        let Some(mut lifecycle) = self.lifecycle.try_lock() else {
            return;
        };
        let now = now.max(lifecycle.last_now);
        lifecycle.last_now = now;
        let snap = self.current.load_full();
        let rooms = snap
            .rooms
            .iter()
            .map(|v| {
                if v.room.fork_guard && v.room.counters.copied_by_fork() {
                    // A forked child's copy of clustered counters: made its own first.
                    v.room.counters.reincarnate(now);
                    let room = Arc::new(
                        Room::new(&v.room.cfg, &snap.config, v.room.counters.clone())
                            .with_pages(v.room.pages.clone())
                            .with_tallies_of(&v.room),
                    );
                    tick_room(&room, now, Some(&self.events))
                } else {
                    tick_room(&v.room, now, Some(&self.events))
                }
            })
            .collect();
        let next = Snapshot::new(
            snap.keyring.clone(),
            snap.config.clone(),
            snap.front.clone(),
            rooms,
        );
        self.current.store(Arc::new(next));
    }

    fn lock(&self) -> Guard<'_, Lifecycle> {
        // A panic while ticking leaves counters consistent (each is atomic); the guard is
        // released as it unwinds.
        self.lifecycle.lock()
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.current.load().config.clone()
    }

    /// Names of the configured rooms.
    pub fn rooms(&self) -> Vec<String> {
        self.current
            .load()
            .rooms
            .iter()
            .map(|r| r.room.cfg.name.clone())
            .collect()
    }

    /// The room's figures as last published by a tick (of any process sharing its counters).
    pub fn stats(&self, room: &str) -> Result<RoomStats> {
        let snap = self.current.load();
        Ok(room_stats(&snap.room(room)?.room))
    }

    /// Every room's stats as one JSON object: `{"rooms": {"<name>": {...}}}` (what an nginx
    /// status location or a metrics scrape serves).
    pub fn stats_json(&self) -> String {
        let snap = self.current.load();
        let rooms: serde_json::Map<String, serde_json::Value> = snap
            .rooms
            .iter()
            .map(|v| (v.room.cfg.name.clone(), room_stats_json(&v.room)))
            .collect();
        serde_json::json!({ "rooms": rooms }).to_string()
    }

    /// Every room's metrics in the OpenMetrics text format (Prometheus' scrape format),
    /// ending with `# EOF`: the families of [`Engine::metrics`].
    pub fn metrics_text(&self) -> String {
        crate::admission::metrics::render(&self.metrics())
    }

    /// Every room's metrics: gauges of the room's state as its last tick published it,
    /// counters of admissions by kind, queue and reject decisions, ticket refusals by
    /// reason, rule matches, dry-run outcomes and revocations, and histograms of the waits
    /// of waiters let in and of their error against the wait promised. Every family is
    /// there, in the same order, whatever the rooms (with no samples when no room has any).
    pub fn metrics(&self) -> Vec<crate::admission::metrics::MetricFamily> {
        let snap = self.current.load();
        crate::admission::metrics::families(snap.rooms.iter().map(|v| &*v.room))
    }

    /// The page to serve for a queue or reject decision (`None` for admit). `accept` is the
    /// request's `Accept` header: JSON is served when it prefers `application/json` and the
    /// room allows it. The page is in the room's `default_template_language`, as of the
    /// system clock; [`Engine::render_page_for`] takes the visitor's `Accept-Language` and
    /// the time.
    pub fn render_page(
        &self,
        room: &str,
        decision: &Decision,
        accept: Option<&str>,
    ) -> Result<Option<Page>> {
        self.render_page_for(
            room,
            decision,
            &PageRequest {
                accept,
                accept_language: None,
                now_ms: SystemClock.now_ms(),
                ticket: None,
            },
        )
    }

    /// The page to serve for a queue or reject decision (`None` for admit), for `request`:
    /// JSON when its `Accept` prefers it and the room allows it; else the template in force
    /// at `request.now_ms` (an event's during its pre-queue and span, the room's, or the
    /// built-in pages), in the language its `Accept-Language` prefers when the room has
    /// `accept_language = true`. Templates were compiled when the configuration loaded: this
    /// only renders.
    pub fn render_page_for(
        &self,
        room: &str,
        decision: &Decision,
        request: &PageRequest<'_>,
    ) -> Result<Option<Page>> {
        let snap = self.current.load();
        let room = &snap.room(room)?.room;
        Ok(page::render(&room.pages, &room.cfg, decision, request))
    }

    /// Decides one request. `cookie_header` is the request's whole `Cookie` header, if any;
    /// `now` is milliseconds since the Unix epoch. The only error is an unknown room.
    pub fn admit(&self, room: &str, cookie_header: Option<&str>, now: Millis) -> Result<Decision> {
        self.admit_header_bytes(room.as_bytes(), cookie_header.map(str::as_bytes), now)
    }

    /// Decides one request given the room's name and the `Cookie` header as bytes (as servers
    /// and C callers hold them; neither need be UTF-8: a name that is not a room's is an
    /// unknown room, and a ticket that is not ASCII is refused as badly encoded).
    #[inline]
    pub fn admit_header_bytes(
        &self,
        room: &[u8],
        cookie_header: Option<&[u8]>,
        now: Millis,
    ) -> Result<Decision> {
        let snap = self.current.load();
        match snap.find_room(room) {
            Some(view) => Ok(snap.decide_cookie(view, cookie_header, now)),
            None => Err(crate::admission::snapshot::unknown_room(room)),
        }
    }

    /// Decides one request only if that hands the visitor nothing new, for a host that could
    /// not deliver a new ticket (an nginx subrequest whose client response is already on its
    /// way). A visitor holding a valid admission ticket of the room is decided as by
    /// [`Engine::admit_header_bytes`]: admitted, its count renewed if due (a renewed ticket
    /// that never reaches the visitor is harmless: the next renewal counts it once, as any
    /// replay). In a `passthrough` room every visitor passes, uncounted. Anyone else:
    /// `Ok(None)`, and nothing was counted, claimed or queued.
    pub fn admit_holder_bytes(
        &self,
        room: &[u8],
        cookie_header: Option<&[u8]>,
        now: Millis,
    ) -> Result<Option<Decision>> {
        let snap = self.current.load();
        let view = snap.room_bytes(room)?;
        let ticket = cookie_header.and_then(|h| view.room.cookie_finder.find_ticket(h));
        Ok(snap.decide_holder(view, ticket, now.min(MAX_NOW_MS)))
    }

    /// Decides one request given the ticket cookie's value itself (no header parsing).
    pub fn admit_ticket(&self, room: &str, ticket: Option<&str>, now: Millis) -> Result<Decision> {
        let snap = self.current.load();
        let view = snap.room(room)?;
        let d = snap.decide(view, ticket.map(str::as_bytes), now.min(MAX_NOW_MS));
        Ok(carried_out(&view.room, d))
    }

    /// What this host reports to the cluster tier about `room` (see [`crate::admission::cluster`]),
    /// as of the room's last tick and `now`. For `velvet-rope-cluster`'s sync; any process
    /// sharing the room's counters may call it.
    /// `Ok(None)` for a room that does not take part (no `[cluster]` table, or a
    /// `passthrough` room), or whose tick lock could not be had in time (a stopped process
    /// holds it).
    pub fn cluster_report(&self, room: &str, now: Millis) -> Result<Option<HostReport>> {
        let snap = self.current.load();
        let room = &snap.room(room)?.room;
        if !cluster::clustered(room) {
            return Ok(None);
        }
        Ok(cluster::report(room, now.min(MAX_NOW_MS)))
    }

    /// Hands `room` the allowance the cluster tier granted; the next tick enforces it. Returns
    /// `false` when the room was busy for too long (the grant is dropped: the next sync brings
    /// another). An engine without a `[cluster]` table ignores grants (`Ok(false)`).
    pub fn cluster_grant(&self, room: &str, grant: &ClusterGrant) -> Result<bool> {
        let snap = self.current.load();
        let room = &snap.room(room)?.room;
        if !cluster::clustered(room) {
            return Ok(false);
        }
        Ok(cluster::grant(room, grant))
    }

    /// Whether this process takes the turn, at `now`, to sync `room` with the cluster's store:
    /// one process at a time among those sharing the room's counters, once per `interval_ms`;
    /// the turn stays this process's for at most `busy_ms`, or until
    /// [`Engine::cluster_sync_done`] (another process takes over when it stops). Only an
    /// engine whose configuration governs the room (the newest to attach its counters) takes
    /// turns: the others would report under limits the room no longer follows.
    pub fn cluster_sync_turn(
        &self,
        room: &str,
        now: Millis,
        interval_ms: u64,
        busy_ms: u64,
    ) -> Result<Option<SyncTurn>> {
        let snap = self.current.load();
        let room = &snap.room(room)?.room;
        if !governance::is_governing(room) {
            return Ok(None);
        }
        Ok(cluster::sync_turn(
            room,
            now.min(MAX_NOW_MS),
            interval_ms.max(1),
            busy_ms,
        ))
    }

    /// Ends this process's `turn` to sync `room` (see [`Engine::cluster_sync_turn`]).
    pub fn cluster_sync_done(&self, room: &str, turn: SyncTurn, now: Millis) -> Result<()> {
        let snap = self.current.load();
        cluster::sync_done(&snap.room(room)?.room, turn, now.min(MAX_NOW_MS));
        Ok(())
    }

    /// Where this host stands with the cluster tier for `room` at `now`: the grant it holds,
    /// whether the store still reserves it, whether it falls back (see
    /// [`ClusterState`]). `None` for a room that takes no part.
    pub fn cluster_state(&self, room: &str, now: Millis) -> Result<Option<ClusterState>> {
        let snap = self.current.load();
        let room = &snap.room(room)?.room;
        if !cluster::clustered(room) {
            return Ok(None);
        }
        Ok(Some(cluster::state(room, now.min(MAX_NOW_MS))))
    }

    /// Whether this engine's configuration governs `room`'s counters, which several engines
    /// may share (see the README, "One configuration per room"): only the newest
    /// configuration to attach them advances them.
    pub fn governs(&self, room: &str) -> Result<bool> {
        let snap = self.current.load();
        Ok(governance::is_governing(&snap.room(room)?.room))
    }

    /// The keyring sealing this engine's tickets (for tests and tools).
    #[doc(hidden)]
    pub fn keyring(&self) -> Arc<Keyring> {
        self.current.load().keyring.clone()
    }
}

/// Builds a snapshot of `config` as of `now`: rooms of `previous` (matched by name) keep their
/// counters when those can serve the new configuration, others get counters from the storage;
/// one tick per room.
fn build(
    lifecycle: &mut Lifecycle,
    config: Config,
    previous: Option<&Snapshot>,
    now: Millis,
) -> Result<Snapshot> {
    config.validate()?;
    let keyring = keyring_for(&config, previous.map(|p| &p.keyring), &lifecycle.storage)?;
    let mut rooms = Vec::with_capacity(config.rooms.len());
    for (i, cfg) in config.rooms.iter().enumerate() {
        let running = previous
            .and_then(|p| p.room(&cfg.name).ok())
            .map(|v| &v.room);
        let same_settings = previous.is_some_and(|p| {
            p.config.settings == config.settings && p.config.cluster == config.cluster
        });
        let pages = Arc::new(RoomPages::compile(cfg, &format!("rooms[{i}]"))?);
        let room = match running {
            // A template file is read anew at every load, so such a room gets its pages anew.
            Some(r) if r.cfg == *cfg && same_settings && !reads_files(cfg) => r.clone(),
            Some(r) => {
                counters_serve(r, i, cfg, &config.settings)?;
                Arc::new(
                    Room::new(cfg, &config, r.counters.clone())
                        .with_pages(pages)
                        .with_tallies_of(r),
                )
            }
            None => {
                let counters = lifecycle
                    .storage
                    .counters(cfg, &config.settings)
                    .map_err(|e| match e {
                        Error::Region(why) => {
                            Error::Region(format!("room `{}` (rooms[{i}]): {why}", cfg.name))
                        }
                        e => e,
                    })?;
                Arc::new(Room::new(cfg, &config, counters).with_pages(pages))
            }
        };
        rooms.push(room);
    }
    let views: Vec<RoomView> = rooms.iter().map(|r| first_tick_room(r, now)).collect();
    let front = Arc::new(FrontDoor::compile(&config)?);
    Ok(Snapshot::new(keyring, Arc::new(config), front, views))
}

/// Whether room `cfg`'s pages come from files (its own or an event's `custom_page_file`).
fn reads_files(cfg: &crate::config::RoomConfig) -> bool {
    cfg.custom_page_file.is_some() || cfg.events.iter().any(|e| e.custom_page_file.is_some())
}

/// Whether the counters of `running` can serve `cfg` (at `rooms[i]`) in place; the refusal
/// names the room and the setting.
fn counters_serve(
    running: &Room,
    i: usize,
    cfg: &crate::config::RoomConfig,
    settings: &crate::config::Settings,
) -> Result<()> {
    let needed = RoomLayout::of(cfg, settings);
    running
        .counters
        .layout()
        .serves(&needed, settings)
        .map_err(|why| {
            Error::invalid(
                format!("rooms[{i}]"),
                format!(
                    "(room `{}`) cannot be reloaded in place: {why}; keep the setting, or \
                     restart to apply it with fresh counters",
                    cfg.name
                ),
            )
        })
}
