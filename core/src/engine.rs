//! The engine: one immutable snapshot per tick, read lock-free by every `admit`.
//!
//! `admit` loads the current [`Snapshot`] through `arc-swap` (no lock), opens the visitor's
//! ticket, and claims a slot from the room's sharded pool when a new admission is due. It
//! never blocks, never does I/O and allocates only when it has to hand out a new ticket.
//! `tick` (serialised by a mutex; one caller at a time, off the request path) folds the
//! counters into free-slot targets, moves the queue's frontier, and swaps in a new snapshot.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustc_hash::FxHashMap;

use crate::active_counts::Renewal;
use crate::clock::Millis;
use crate::config::{Config, QueueingMethod, RoomConfig};
use crate::cookie_finder::CookieFinder;
use crate::decision::{Decision, Outcome, RoomStats, TicketRejections};
use crate::error::{Error, Result};
use crate::hash::mix64;
use crate::page::{self, Page};
use crate::queue_lanes::Counted;
use crate::room_counters::{RoomCounters, RoomLayout};
use crate::shares::free_slots;
use crate::slot_pool::home_shard;
use crate::sync::{AtomicU64, Ordering};
use crate::tick_block::{Cell, TickBlock};
use crate::ticket::{random_id, room_tag, Keyring, Ticket, TicketError, TicketState};

/// What never changes while a room's configuration stays the same.
struct RoomStatic {
    cfg: RoomConfig,
    counters: Arc<RoomCounters>,
    tag: u32,
    cookie_name: String,
    cookie_finder: CookieFinder,
    cookie_attrs: String,
    session_secs: u32,
}

/// A room as the current snapshot sees it.
struct RoomView {
    s: Arc<RoomStatic>,
    frontier: u64,
    draw_threshold: u64,
    queue_length: u64,
    queue_base: u64,
    /// `ahead[i]`: live waiters with arrival bucket below `queue_base + i`.
    ahead: Arc<[u64]>,
    rate_per_sec: f64,
    stats: RoomStats,
}

/// Everything a decision reads, swapped in whole.
struct Snapshot {
    keyring: Arc<Keyring>,
    config: Arc<Config>,
    bucket_ms: u64,
    skew_secs: u32,
    rooms: Vec<RoomView>,
    by_name: FxHashMap<Box<[u8]>, usize>,
}

/// Where rooms' counters live: memory the engine owns, or a region the host hands in.
enum Storage {
    Owned,
    Shared(SharedRegion),
}

/// A host-provided region holding every room's counters, in configuration order.
struct SharedRegion {
    base: *mut u8,
    len: usize,
}

// SAFETY: the region is only ever accessed through atomics; the creator of the engine promised
// (`Engine::new_shared`) that it outlives the engine.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

/// State of `tick` and `reload` inside this process (cross-process state is in the regions).
struct TickState {
    rooms: HashMap<String, Arc<RoomStatic>>,
    last_now: Millis,
    storage: Storage,
}

/// The admission engine. Cheap to share (`Arc<Engine>`); every method takes `&self`.
pub struct Engine {
    current: ArcSwap<Snapshot>,
    ticking: std::sync::Mutex<TickState>,
}

const ENGINE_MAGIC: u64 = u64::from_le_bytes(*b"vrENGINE");
const ENGINE_VERSION: u64 = 1;
/// Engine header of a shared region: magic, version, size, fingerprint, key state, key (4 words).
const ENGINE_HEADER: usize = 128;

/// Rooms' layouts and their offsets in a shared region, with a fingerprint of the whole.
fn shared_plan(config: &Config) -> (Vec<(RoomLayout, usize)>, usize, u64) {
    let mut at = ENGINE_HEADER;
    let mut fingerprint = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |v: u64| {
        fingerprint = (fingerprint ^ v).wrapping_mul(0x0000_0100_0000_01b3);
    };
    let mut plan = Vec::with_capacity(config.rooms.len());
    for room in &config.rooms {
        let layout = RoomLayout::of(room, &config.settings);
        mix(u64::from(room_tag(&room.name)));
        mix(layout.size() as u64);
        plan.push((layout, at));
        at += layout.size();
    }
    (plan, at, fingerprint)
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let snap = self.current.load();
        f.debug_struct("Engine")
            .field(
                "rooms",
                &snap.rooms.iter().map(|r| &r.s.cfg.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn keyring_of(
    config: &Config,
    previous: Option<&Arc<Keyring>>,
    shared_key: Option<[u8; 32]>,
) -> Result<Arc<Keyring>> {
    if config.tickets.keys.is_empty() {
        if let Some(key) = shared_key {
            // Every process sharing the region seals and opens with the region's key.
            return Ok(Arc::new(Keyring::new(&[(0, key)], Some(0))?));
        }
        if let Some(prev) = previous {
            // Keep the ephemeral key across reloads so tickets already out stay valid.
            return Ok(prev.clone());
        }
    }
    let mut keys = Vec::with_capacity(config.tickets.keys.len());
    for (i, k) in config.tickets.keys.iter().enumerate() {
        keys.push((k.id, k.material(&format!("tickets.keys[{i}]"))?));
    }
    Ok(Arc::new(Keyring::new(&keys, config.tickets.signing_key)?))
}

fn room_static(cfg: &RoomConfig, config: &Config, counters: Arc<RoomCounters>) -> RoomStatic {
    let c = &cfg.cookie;
    let mut attrs = format!("; Path={}", c.path);
    if let Some(d) = &c.domain {
        attrs.push_str(&format!("; Domain={d}"));
    }
    if c.secure {
        attrs.push_str("; Secure");
    }
    if c.http_only {
        attrs.push_str("; HttpOnly");
    }
    attrs.push_str(&format!("; SameSite={}", c.same_site));
    RoomStatic {
        cfg: cfg.clone(),
        counters,
        tag: room_tag(&cfg.name),
        cookie_name: cfg.cookie_name(),
        cookie_finder: CookieFinder::new(&cfg.cookie_name()),
        cookie_attrs: attrs,
        session_secs: cfg.session_duration * config.settings.bucket_width_secs,
    }
}

/// Finds `name`'s value in a `Cookie` header (`a=b; c=d`).
pub fn find_cookie<'h>(header: &'h str, name: &str) -> Option<&'h str> {
    // The value is a byte slice of a str cut at ASCII delimiters, so it is valid UTF-8.
    find_cookie_bytes(header.as_bytes(), name).and_then(|v| std::str::from_utf8(v).ok())
}

/// Finds `name`'s value in a `Cookie` header given as bytes (headers need not be UTF-8).
pub fn find_cookie_bytes<'h>(header: &'h [u8], name: &str) -> Option<&'h [u8]> {
    CookieFinder::new(name).find(header)
}

impl Engine {
    /// An engine over a validated configuration, with its first tick at `now`.
    pub fn new(config: Config, now: Millis) -> Result<Self> {
        config.validate()?;
        let keyring = keyring_of(&config, None, None)?;
        Self::start(config, keyring, Storage::Owned, now)
    }

    fn start(config: Config, keyring: Arc<Keyring>, storage: Storage, now: Millis) -> Result<Self> {
        let mut state = TickState {
            rooms: HashMap::new(),
            last_now: now,
            storage,
        };
        let snapshot = build(&mut state, Arc::new(config), keyring, now)?;
        Ok(Self {
            current: ArcSwap::from_pointee(snapshot),
            ticking: std::sync::Mutex::new(state),
        })
    }

    /// Bytes of shared memory an engine for `config` needs (see [`Engine::new_shared`]).
    pub fn shared_region_size(config: &Config) -> usize {
        shared_plan(config).1
    }

    /// An engine whose counters live in memory the host provides, so that several processes
    /// mapping the same memory (nginx workers, a pre-fork server) share exact counts. A zeroed
    /// region is initialised; a region initialised by an engine of the same layout is attached
    /// and keeps its counts; anything else is refused. With no ticket keys configured, the
    /// ephemeral key is kept in the region so every process shares it.
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
        let (_, size, fingerprint) = shared_plan(&config);
        if len < size {
            return Err(Error::Region(format!(
                "{len} bytes given, the configuration needs {size}"
            )));
        }
        // SAFETY: forwarded from this function's contract.
        let header = unsafe { crate::region::Region::borrowed(region, ENGINE_HEADER) }?;
        let h = header.u64s(0, 16);
        match h[0].compare_exchange(0, ENGINE_MAGIC, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                h[1].store(ENGINE_VERSION, Ordering::Release);
                h[2].store(size as u64, Ordering::Release);
                h[3].store(fingerprint, Ordering::Release);
            }
            Err(found) if found != ENGINE_MAGIC => {
                return Err(Error::Region("not a velvet-rope region (bad magic)".into()))
            }
            Err(_) => {
                let spin_until = std::time::Instant::now() + std::time::Duration::from_secs(1);
                while h[3].load(Ordering::Acquire) == 0 && std::time::Instant::now() < spin_until {
                    std::hint::spin_loop();
                }
                if h[1].load(Ordering::Acquire) != ENGINE_VERSION
                    || h[3].load(Ordering::Acquire) != fingerprint
                {
                    return Err(Error::Region(
                        "the region was laid out for another configuration (rooms or their sizes differ)"
                            .into(),
                    ));
                }
            }
        }
        let shared_key = if config.tickets.keys.is_empty() {
            Some(shared_key(&h[4..9])?)
        } else {
            None
        };
        let keyring = keyring_of(&config, None, shared_key)?;
        Self::start(
            config,
            keyring,
            Storage::Shared(SharedRegion { base: region, len }),
            now,
        )
    }

    /// An engine from TOML or JSON text.
    pub fn from_text(text: &str, now: Millis) -> Result<Self> {
        Self::new(Config::from_text(text)?, now)
    }

    /// An engine from a configuration file (`.json` or TOML).
    pub fn from_path(path: impl AsRef<Path>, now: Millis) -> Result<Self> {
        Self::new(Config::from_path(path)?, now)
    }

    /// Replaces the configuration. A bad one is refused with an error and the running one keeps
    /// serving. Rooms whose memory layout is unchanged keep their counts.
    pub fn reload(&self, config: Config) -> Result<()> {
        config.validate()?;
        let mut state = self.lock();
        let previous = self.current.load_full();
        let keyring =
            if matches!(state.storage, Storage::Shared(_)) && config.tickets.keys.is_empty() {
                // The region's shared key stays.
                if previous.config.tickets.keys.is_empty() {
                    previous.keyring.clone()
                } else {
                    return Err(Error::invalid(
                        "tickets.keys",
                        "cannot be emptied on reload of a shared engine: restart it instead",
                    ));
                }
            } else {
                keyring_of(&config, Some(&previous.keyring), None)?
            };
        let now = state.last_now;
        let snapshot = build(&mut state, Arc::new(config), keyring, now)?;
        self.current.store(Arc::new(snapshot));
        Ok(())
    }

    /// Folds the counters into a new snapshot as of `now`. Call it about once a second (and at
    /// least once per bucket and per refresh interval); one caller at a time is served, others
    /// wait for it.
    pub fn tick(&self, now: Millis) {
        let mut state = self.lock();
        let now = now.max(state.last_now);
        let snap = self.current.load_full();
        // The same configuration over the same counters: nothing is laid out or attached
        // again, so a tick cannot fail (and does no more than fold and publish).
        let counters = snap.rooms.iter().map(|r| r.s.counters.clone()).collect();
        let next = assemble(
            &mut state,
            snap.config.clone(),
            snap.keyring.clone(),
            counters,
            now,
        );
        self.current.store(Arc::new(next));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TickState> {
        // A panic while ticking leaves counters consistent (each is atomic), so a poisoned lock
        // is safe to take over.
        self.ticking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.current.load().config.clone()
    }

    /// The room's state as of the last tick.
    pub fn stats(&self, room: &str) -> Result<RoomStats> {
        let snap = self.current.load();
        let view = snap.room(room)?;
        let mut stats = view.stats;
        let r = view.s.counters.rejections();
        let get = |e: TicketError| r[e as usize].load(Ordering::Relaxed);
        stats.ticket_rejections = TicketRejections {
            bad_encoding: get(TicketError::BadEncoding),
            unknown_key: get(TicketError::UnknownKey),
            bad_tag: get(TicketError::BadTag),
            wrong_room: get(TicketError::WrongRoom),
            expired: get(TicketError::Expired),
            from_future: get(TicketError::FromFuture),
        };
        Ok(stats)
    }

    /// Every room's stats as one JSON object: `{"rooms": {"<name>": {...}}}` (what an nginx
    /// status location or a metrics scrape serves).
    pub fn stats_json(&self) -> String {
        let snap = self.current.load();
        let mut rooms = serde_json::Map::new();
        for view in &snap.rooms {
            let name = &view.s.cfg.name;
            if let Ok(st) = self.stats(name) {
                let r = st.ticket_rejections;
                rooms.insert(
                    name.clone(),
                    serde_json::json!({
                        "active_users": st.active_users,
                        "admitted_this_minute": st.admitted_this_minute,
                        "admitted_total": st.admitted_total,
                        "queue_length": st.queue_length,
                        "frontier": st.frontier,
                        "free_slots": st.free_slots,
                        "admission_rate": st.admission_rate,
                        "memory_bytes": st.memory_bytes,
                        "total_active_users": view.s.cfg.total_active_users,
                        "new_users_per_minute": view.s.cfg.new_users_per_minute,
                        "ticket_rejections": {
                            "bad_encoding": r.bad_encoding,
                            "unknown_key": r.unknown_key,
                            "bad_tag": r.bad_tag,
                            "wrong_room": r.wrong_room,
                            "expired": r.expired,
                            "from_future": r.from_future,
                        },
                    }),
                );
            }
        }
        serde_json::json!({ "rooms": rooms }).to_string()
    }

    /// Names of the configured rooms.
    pub fn rooms(&self) -> Vec<String> {
        self.current
            .load()
            .rooms
            .iter()
            .map(|r| r.s.cfg.name.clone())
            .collect()
    }

    /// The page to serve for a queue or reject decision (`None` for admit). `accept` is the
    /// request's `Accept` header: JSON is served when it prefers `application/json` and the
    /// room allows it.
    pub fn render_page(
        &self,
        room: &str,
        decision: &Decision,
        accept: Option<&str>,
    ) -> Result<Option<Page>> {
        let snap = self.current.load();
        let view = snap.room(room)?;
        Ok(page::render(&view.s.cfg, decision, accept))
    }

    /// Decides one request. `cookie_header` is the request's whole `Cookie` header, if any;
    /// `now` is milliseconds since the Unix epoch. The only error is an unknown room.
    pub fn admit(&self, room: &str, cookie_header: Option<&str>, now: Millis) -> Result<Decision> {
        let snap = self.current.load();
        let view = snap.room(room)?;
        let ticket = cookie_header.and_then(|h| view.s.cookie_finder.find_ticket(h.as_bytes()));
        Ok(snap.decide(view, ticket, now))
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
        let view = snap.room_bytes(room)?;
        let ticket = cookie_header.and_then(|h| view.s.cookie_finder.find_ticket(h));
        Ok(snap.decide(view, ticket, now))
    }

    /// Decides one request given the ticket cookie's value itself (no header parsing).
    pub fn admit_ticket(&self, room: &str, ticket: Option<&str>, now: Millis) -> Result<Decision> {
        let snap = self.current.load();
        let view = snap.room(room)?;
        Ok(snap.decide(view, ticket.map(str::as_bytes), now))
    }
}

impl Snapshot {
    #[inline]
    fn room(&self, name: &str) -> Result<&RoomView> {
        self.room_bytes(name.as_bytes())
    }

    #[inline]
    fn room_bytes(&self, name: &[u8]) -> Result<&RoomView> {
        // A handful of rooms (the usual case) is found faster by comparing names than by
        // hashing one.
        let found = if self.rooms.len() <= 8 {
            self.rooms.iter().find(|r| r.s.cfg.name.as_bytes() == name)
        } else {
            self.by_name.get(name).map(|&i| &self.rooms[i])
        };
        match found {
            Some(view) => Ok(view),
            None => Err(unknown_room(name)),
        }
    }

    /// Decides one request. The steady state of an admitted visitor (a valid admission ticket
    /// already counted in this bucket: nearly every request a site serves) is decided here;
    /// every other case goes through one cold call, so that the compiler lays the common path
    /// out as a few contiguous cache lines of code (measured in nginx: its instruction
    /// fetches, not its instruction count, are what a request pays for).
    #[inline]
    fn decide(&self, view: &RoomView, cookie: Option<&[u8]>, now: Millis) -> Decision {
        let s = &view.s;
        let now_secs = (now / 1000).min(u32::MAX as u64) as u32;
        let bucket = now / self.bucket_ms;
        let opened = cookie.map(|text| {
            self.keyring
                .open_bytes(text, s.tag, now_secs, self.skew_secs)
        });
        if let Some(Ok(t)) = &opened {
            if t.state == TicketState::Admitted
                && (s.cfg.disable_session_renewal || u64::from(t.counted) == bucket)
            {
                // Counted this bucket already (or never renewed): nothing to change.
                return Decision::admit(None, None);
            }
        }
        self.not_steady(view, opened, bucket, now_secs)
    }

    /// Every request but an admitted visitor's steady state: new visitors, refused tickets,
    /// renewals, waiters. Cold only for code layout (it is a call away from the hot path);
    /// what it calls is compiled as usual.
    #[cold]
    #[inline(never)]
    fn not_steady(
        &self,
        view: &RoomView,
        opened: Option<std::result::Result<Ticket, TicketError>>,
        bucket: u64,
        now_secs: u32,
    ) -> Decision {
        match opened {
            None => self.arrival(view, bucket, now_secs, None),
            Some(Ok(t)) if t.state == TicketState::Admitted => {
                self.renew(view, t, bucket, now_secs)
            }
            Some(Ok(t)) => self.waiter(view, t, bucket, now_secs),
            Some(Err(e)) => self.refused(view, e, bucket, now_secs),
        }
    }

    /// A visitor whose ticket was refused: counted by reason, then treated as new.
    #[inline(never)]
    fn refused(&self, view: &RoomView, e: TicketError, bucket: u64, now_secs: u32) -> Decision {
        view.s.counters.rejections()[e as usize].fetch_add(1, Ordering::Relaxed);
        self.arrival(view, bucket, now_secs, Some(e))
    }

    /// A visitor holding a valid admission ticket last counted in an earlier bucket: counted
    /// in this one, and re-issued its ticket saying so.
    #[inline(never)]
    fn renew(&self, view: &RoomView, t: Ticket, bucket: u64, now_secs: u32) -> Decision {
        let s = &view.s;
        if s.counters
            .active()
            .renew(t.id, u64::from(t.counted), bucket)
            == Renewal::NotReady
        {
            // The tick is late for this bucket: keep the ticket, count it on a later request.
            return Decision::admit(None, None);
        }
        let renewed = Ticket {
            counted: bucket as u32,
            last_checkin: now_secs,
            expires: now_secs.saturating_add(s.session_secs),
            ..t
        };
        Decision::admit(Some(self.cookie(s, &renewed, now_secs)), None)
    }

    /// A visitor holding a valid queued ticket.
    #[inline(never)]
    fn waiter(&self, view: &RoomView, t: Ticket, bucket: u64, now_secs: u32) -> Decision {
        let s = &view.s;
        let cfg = &s.cfg;
        let epoch = u64::from(now_secs / cfg.refresh_interval);
        let lanes = s.counters.lanes();
        // Counting uses the slot the waiter was counted in at arrival; only the FIFO order and
        // the position use the arrival clamped to the tracked window.
        let slot = (u64::from(t.arrival) % u64::from(cfg.queue_buckets)) as usize;
        let arrival = u64::from(t.arrival).max(view.queue_base);
        let counted = u64::from(t.counted);
        if cfg.queueing_method == QueueingMethod::Passthrough {
            return self.admit_new(view, t.id, bucket, now_secs, None);
        }
        let active = s.counters.active();
        let window_start = bucket.saturating_sub(u64::from(cfg.session_duration));
        // A queued ticket admits once: a replay of it after its holder got in (whose queued
        // ticket expires within the session window this looks at) waits as before.
        let already_in = active.admitted_from_queue(t.id, window_start, bucket);
        let eligible = !cfg.queue_all
            && !already_in
            && match cfg.queueing_method {
                QueueingMethod::Random => {
                    mix64(t.id ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15)) < view.draw_threshold
                }
                _ => arrival <= view.frontier,
            };
        if eligible {
            let home = home_shard();
            if s.counters.waiter_pool().try_claim(home) || s.counters.open_pool().try_claim(home) {
                if active.mark_admitted_from_queue(t.id, bucket) {
                    if lanes.in_window(counted, epoch) {
                        lanes.uncount(slot, counted);
                    }
                    return self.admit_new(view, t.id, bucket, now_secs, None);
                }
                // A concurrent request with the same ticket was admitted first: this one gets
                // the same admission without being counted twice (its slot is spent).
                return self.admitted_ticket(view, t.id, bucket as u32, now_secs, None);
            }
        }
        let mut set_cookie = None;
        if counted != epoch && !already_in {
            let refreshed = Ticket {
                counted: epoch as u32,
                last_checkin: now_secs,
                expires: now_secs.saturating_add(self.queued_ttl(s)),
                ..t
            };
            match lanes.count(slot, epoch, t.id) {
                Counted::New => {
                    if lanes.in_window(counted, epoch) {
                        lanes.uncount(slot, counted);
                    }
                    set_cookie = Some(self.cookie(s, &refreshed, now_secs));
                }
                // Counted in this epoch by a sibling request: same ticket, no count change.
                Counted::Already => set_cookie = Some(self.cookie(s, &refreshed, now_secs)),
                Counted::NotReady => {}
            }
        }
        let position = match cfg.queueing_method {
            QueueingMethod::Fifo => {
                let i = arrival.saturating_sub(view.queue_base) as usize;
                view.ahead.get(i).copied().unwrap_or(view.queue_length) + 1
            }
            _ => view.queue_length.max(1),
        };
        self.queued(view, set_cookie, position, None)
    }

    /// A visitor with no valid ticket.
    #[inline(never)]
    fn arrival(
        &self,
        view: &RoomView,
        bucket: u64,
        now_secs: u32,
        err: Option<TicketError>,
    ) -> Decision {
        let s = &view.s;
        let cfg = &s.cfg;
        let id = random_id();
        if cfg.queueing_method == QueueingMethod::Passthrough {
            return self.admit_new(view, id, bucket, now_secs, err);
        }
        if !cfg.queue_all && s.counters.open_pool().try_claim(home_shard()) {
            return self.admit_new(view, id, bucket, now_secs, err);
        }
        if cfg.queueing_method == QueueingMethod::Reject {
            return Decision {
                outcome: Outcome::Reject,
                set_cookie: None,
                position: None,
                estimated_wait_secs: None,
                retry_after_secs: Some(u64::from(cfg.refresh_interval)),
                queue_length: None,
                ticket_error: err,
            };
        }
        let epoch = u64::from(now_secs / cfg.refresh_interval);
        let arrival = match cfg.queueing_method {
            QueueingMethod::Fifo => bucket,
            _ => 0,
        };
        let slot = (arrival % u64::from(cfg.queue_buckets)) as usize;
        // If the lane is not ready (tick is late), the waiter is counted at its next refresh.
        let counted = match s.counters.lanes().count(slot, epoch, id) {
            Counted::NotReady => 0,
            _ => epoch as u32,
        };
        let t = Ticket {
            room_tag: s.tag,
            id,
            state: TicketState::Queued,
            arrival: arrival as u32,
            accepted_at: now_secs,
            counted,
            last_checkin: now_secs,
            expires: now_secs.saturating_add(self.queued_ttl(s)),
        };
        let cookie = self.cookie(s, &t, now_secs);
        self.queued(view, Some(cookie), view.queue_length + 1, err)
    }

    /// Admits `id` (a slot is already claimed, or the room passes everyone).
    fn admit_new(
        &self,
        view: &RoomView,
        id: u64,
        bucket: u64,
        now_secs: u32,
        err: Option<TicketError>,
    ) -> Decision {
        let s = &view.s;
        // If the bucket is not prepared (tick is late), the ticket names no bucket, so the
        // visitor's next request counts it afresh instead of moving a count that never was.
        let counted = if s.counters.active().add(bucket) {
            bucket as u32
        } else {
            0
        };
        self.admitted_ticket(view, id, counted, now_secs, err)
    }

    /// An admission ticket for `id`, counted in bucket `counted` (0: not counted yet).
    fn admitted_ticket(
        &self,
        view: &RoomView,
        id: u64,
        counted: u32,
        now_secs: u32,
        err: Option<TicketError>,
    ) -> Decision {
        let s = &view.s;
        let t = Ticket {
            room_tag: s.tag,
            id,
            state: TicketState::Admitted,
            arrival: 0,
            accepted_at: now_secs,
            counted,
            last_checkin: now_secs,
            expires: now_secs.saturating_add(s.session_secs),
        };
        Decision::admit(Some(self.cookie(s, &t, now_secs)), err)
    }

    fn queued(
        &self,
        view: &RoomView,
        set_cookie: Option<String>,
        position: u64,
        err: Option<TicketError>,
    ) -> Decision {
        let rate = view.rate_per_sec;
        let wait = if rate > 0.0 {
            (position as f64 / rate).ceil() as u64
        } else {
            let per_sec = view.s.cfg.new_users_per_minute as f64 * 1000.0 / self.bucket_ms as f64;
            (position as f64 / per_sec).ceil() as u64
        };
        Decision {
            outcome: Outcome::Queue,
            set_cookie,
            position: Some(position),
            estimated_wait_secs: Some(wait),
            retry_after_secs: Some(u64::from(view.s.cfg.refresh_interval)),
            queue_length: Some(view.queue_length),
            ticket_error: err,
        }
    }

    /// A queued ticket keeps its place for a session's length after the last refresh (a
    /// waiter that returns within it keeps its place; one that is away stops counting as live
    /// after the grace period either way). Never longer: the guard that stops a queued ticket
    /// from admitting twice looks back exactly one session.
    fn queued_ttl(&self, s: &RoomStatic) -> u32 {
        s.session_secs
    }

    fn cookie(&self, s: &RoomStatic, t: &Ticket, now_secs: u32) -> String {
        let sealed = self.keyring.seal(t);
        let max_age = t.expires.saturating_sub(now_secs);
        let mut out = String::with_capacity(
            s.cookie_name.len() + sealed.as_str().len() + s.cookie_attrs.len() + 24,
        );
        out.push_str(&s.cookie_name);
        out.push('=');
        out.push_str(sealed.as_str());
        out.push_str("; Max-Age=");
        out.push_str(itoa(max_age).as_str());
        out.push_str(&s.cookie_attrs);
        out
    }
}

/// The error for a room name no room has (out of line: the admit path only branches to it).
#[cold]
#[inline(never)]
fn unknown_room(name: &[u8]) -> Error {
    Error::UnknownRoom(String::from_utf8_lossy(name).into_owned())
}

/// Small integer formatting without `format!`.
fn itoa(mut n: u32) -> ItoaBuf {
    let mut buf = ItoaBuf {
        bytes: [0; 10],
        start: 10,
    };
    loop {
        buf.start -= 1;
        buf.bytes[buf.start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return buf;
        }
    }
}

struct ItoaBuf {
    bytes: [u8; 10],
    start: usize,
}

impl ItoaBuf {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[self.start..]).unwrap_or("0")
    }
}

/// Takes or makes the region's ephemeral key (words: state, then 4 words of key).
fn shared_key(words: &[AtomicU64]) -> Result<[u8; 32]> {
    const EMPTY: u64 = 0;
    const WRITING: u64 = 1;
    const READY: u64 = 2;
    if words[0]
        .compare_exchange(EMPTY, WRITING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        for w in &words[1..5] {
            w.store(random_id(), Ordering::Relaxed);
        }
        words[0].store(READY, Ordering::Release);
    }
    let spin_until = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while words[0].load(Ordering::Acquire) != READY {
        if std::time::Instant::now() > spin_until {
            return Err(Error::Region(
                "the region's ticket key was never written".into(),
            ));
        }
        std::hint::spin_loop();
    }
    let mut key = [0u8; 32];
    for (chunk, w) in key.chunks_mut(8).zip(&words[1..5]) {
        chunk.copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
    }
    Ok(key)
}

/// The counters of each room of `config`: kept from before when the layout allows, else new
/// (owned storage), or at their fixed place in the region (shared storage).
fn counters_for(state: &mut TickState, config: &Config) -> Result<Vec<Arc<RoomCounters>>> {
    match &state.storage {
        Storage::Owned => Ok(config
            .rooms
            .iter()
            .map(|cfg| {
                let layout = RoomLayout::of(cfg, &config.settings);
                match state.rooms.get(&cfg.name) {
                    Some(s) if s.counters.layout() == layout => s.counters.clone(),
                    _ => Arc::new(RoomCounters::new(layout)),
                }
            })
            .collect()),
        Storage::Shared(region) => {
            let (plan, size, _) = shared_plan(config);
            if size > region.len {
                return Err(Error::Region(format!(
                    "the configuration needs {size} bytes, the region has {}: restart to resize",
                    region.len
                )));
            }
            plan.into_iter()
                .map(|(layout, offset)| {
                    // SAFETY: `offset + layout.size() <= size <= region.len` and the offsets are
                    // multiples of 128 from a 128-aligned base; `Engine::new_shared`'s contract
                    // covers the rest.
                    let sub = unsafe {
                        crate::region::Region::borrowed(region.base.add(offset), layout.size())
                    }?;
                    RoomCounters::attach(sub, layout).map(Arc::new)
                })
                .collect()
        }
    }
}

/// Builds a snapshot of every room of `config` as of `now` over counters laid out (or
/// attached) for it, running one tick per room.
fn build(
    state: &mut TickState,
    config: Arc<Config>,
    keyring: Arc<Keyring>,
    now: Millis,
) -> Result<Snapshot> {
    let counters = counters_for(state, &config)?;
    Ok(assemble(state, config, keyring, counters, now))
}

/// A snapshot of every room of `config` over `counters` (one per room, in order) as of `now`,
/// running one tick per room.
fn assemble(
    state: &mut TickState,
    config: Arc<Config>,
    keyring: Arc<Keyring>,
    counters: Vec<Arc<RoomCounters>>,
    now: Millis,
) -> Snapshot {
    state.last_now = now;
    let bucket_ms = u64::from(config.settings.bucket_width_secs) * 1000;
    let mut old = std::mem::take(&mut state.rooms);
    let mut rooms = Vec::with_capacity(config.rooms.len());
    let mut by_name = FxHashMap::default();
    for (cfg, counters) in config.rooms.iter().zip(counters) {
        let s = match old.remove(&cfg.name) {
            Some(s) if Arc::ptr_eq(&s.counters, &counters) && s.cfg == *cfg => s,
            _ => Arc::new(room_static(cfg, &config, counters)),
        };
        let view = tick_room(&s, bucket_ms, now);
        by_name.insert(cfg.name.as_bytes().into(), rooms.len());
        rooms.push(view);
        state.rooms.insert(cfg.name.clone(), s);
    }
    Snapshot {
        keyring,
        skew_secs: config.settings.max_clock_skew_secs,
        config,
        bucket_ms,
        rooms,
        by_name,
    }
}

/// One tick of one room: advance the shared state if no other process is doing it, then read
/// what was published into a view.
fn tick_room(s: &Arc<RoomStatic>, bucket_ms: u64, now: Millis) -> RoomView {
    let tb = s.counters.tick_block();
    if let Some(token) = tb.try_lock(now) {
        advance(s, &tb, bucket_ms, now);
        tb.unlock(token);
    } else {
        // Another process is advancing the room right now (workers' timers fire together):
        // wait for it to publish rather than keep the figures of the advance before, which may
        // predate admissions this process has just made. An advance takes microseconds; the
        // wait is bounded (a holder descheduled longer costs a second of older figures, one
        // that died is taken over after the stale time) so a request loop is never held long.
        tb.wait_unlocked(std::time::Duration::from_millis(100));
    }
    observe(s, &tb, bucket_ms, now)
}

/// Folds counts, computes targets, moves the frontier, publishes. One process at a time.
fn advance(s: &RoomStatic, tb: &TickBlock<'_>, bucket_ms: u64, now: Millis) {
    let cfg = &s.cfg;
    let counters = &s.counters;
    let bucket = now / bucket_ms;
    let epoch = now / 1000 / u64::from(cfg.refresh_interval);
    let active_counts = counters.active();
    active_counts.prepare(bucket);
    active_counts.prepare(bucket + 1);
    let lanes = counters.lanes();
    lanes.prepare(epoch);
    lanes.prepare(epoch + 1);

    // Exact admissions since the last advance, from the pools' claim counters.
    let open = counters.open_pool();
    let waiters = counters.waiter_pool();
    let open_r = open.read();
    let waiter_r = waiters.read();
    let (open_seen, waiter_seen) = tb.readings();
    let claims = open_r.claims_since(&open_seen) + waiter_r.claims_since(&waiter_seen);
    tb.set(Cell::AdmittedTotal, tb.get(Cell::AdmittedTotal) + claims);
    let admitted_this_minute = tb.add_admitted(bucket, claims);

    // Active users: visitors whose last check-in bucket is in the session window (one extra
    // bucket, so a visitor is never dropped early), floored by the admissions in the window.
    let first = bucket.saturating_sub(u64::from(cfg.session_duration));
    let active = active_counts
        .sum(first, bucket)
        .max(tb.admitted_in(first, bucket));
    let free = free_slots(
        cfg.total_active_users,
        active,
        cfg.new_users_per_minute,
        admitted_this_minute,
    );

    // Live waiters per arrival bucket, oldest first.
    let q = u64::from(cfg.queue_buckets);
    let base = (bucket + 1).saturating_sub(q);
    let live: Vec<u64> = (base..=bucket)
        .map(|b| lanes.live((b % q) as usize, epoch))
        .collect();
    let queue_length: u64 = live.iter().sum();
    let previous_frontier = tb.get(Cell::Frontier);

    let (waiter_target, open_target, frontier, draw_threshold) = if cfg.queue_all {
        (0, 0, previous_frontier, 0)
    } else {
        match cfg.queueing_method {
            QueueingMethod::Fifo => {
                // Waiters at or before the frontier hold `reserved` of the free slots; move the
                // frontier forward until the slots are spoken for or nobody is left behind it.
                let mut frontier = previous_frontier.max(base.saturating_sub(1));
                let idx = |b: u64| (b - base) as usize;
                let mut reserved: u64 = if frontier >= base {
                    live[..=idx(frontier.min(bucket))].iter().sum()
                } else {
                    0
                };
                while reserved < free && frontier < bucket {
                    frontier += 1;
                    reserved += live[idx(frontier)];
                }
                let behind = queue_length - reserved.min(queue_length);
                let to_waiters = free.min(reserved);
                let to_open = if behind == 0 { free - to_waiters } else { 0 };
                (to_waiters, to_open, frontier, 0)
            }
            QueueingMethod::Random => {
                let to_waiters = free.min(queue_length);
                let threshold = if queue_length == 0 {
                    0
                } else if to_waiters >= queue_length {
                    u64::MAX
                } else {
                    ((u128::from(to_waiters) << 64) / u128::from(queue_length)) as u64
                };
                (to_waiters, free - to_waiters, previous_frontier, threshold)
            }
            QueueingMethod::Reject => (0, free, previous_frontier, 0),
            QueueingMethod::Passthrough => (0, 0, previous_frontier, 0),
        }
    };
    waiters.set_target(waiter_target, &waiter_r);
    open.set_target(open_target, &open_r);
    tb.set_readings(&open_r, &waiter_r);

    // Admission rate: exponentially weighted over about a minute of ticks.
    let last = tb.get(Cell::LastTick);
    let mut rate = f64::from_bits(tb.get(Cell::RateBits));
    if last != 0 && now > last {
        let dt = (now - last) as f64 / 1000.0;
        let w = (dt / 60.0).min(1.0);
        rate = rate * (1.0 - w) + (claims as f64 / dt) * w;
    }
    tb.set(Cell::RateBits, rate.to_bits());
    tb.set(Cell::LastTick, now);
    tb.set(Cell::Frontier, frontier);
    tb.set(Cell::Active, active);
    tb.set(Cell::AdmittedThisMinute, admitted_this_minute);
    tb.set(Cell::QueueLength, queue_length);
    tb.set(Cell::WaiterTarget, waiter_target);
    tb.set(Cell::OpenTarget, open_target);
    tb.set(Cell::DrawThreshold, draw_threshold);
}

/// A view of a room from its published state and its live-waiter table.
fn observe(s: &Arc<RoomStatic>, tb: &TickBlock<'_>, bucket_ms: u64, now: Millis) -> RoomView {
    let cfg = &s.cfg;
    let bucket = now / bucket_ms;
    let epoch = now / 1000 / u64::from(cfg.refresh_interval);
    let q = u64::from(cfg.queue_buckets);
    let base = (bucket + 1).saturating_sub(q);
    let lanes = s.counters.lanes();
    let mut ahead = Vec::with_capacity(q as usize);
    let mut sum = 0u64;
    for b in base..=bucket {
        ahead.push(sum);
        sum += lanes.live((b % q) as usize, epoch);
    }
    let rate = f64::from_bits(tb.get(Cell::RateBits));
    let frontier = tb.get(Cell::Frontier);
    RoomView {
        stats: RoomStats {
            active_users: tb.get(Cell::Active),
            admitted_this_minute: tb.get(Cell::AdmittedThisMinute),
            admitted_total: tb.get(Cell::AdmittedTotal),
            queue_length: sum,
            frontier,
            free_slots: tb.get(Cell::WaiterTarget) + tb.get(Cell::OpenTarget),
            admission_rate: rate,
            ticket_rejections: TicketRejections::default(),
            memory_bytes: s.counters.bytes(),
        },
        s: s.clone(),
        frontier,
        draw_threshold: tb.get(Cell::DrawThreshold),
        queue_length: sum,
        queue_base: base,
        ahead: ahead.into(),
        rate_per_sec: rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cookies() {
        let h = "a=1; __vr_shop=TICKET; b=\"2\"";
        assert_eq!(find_cookie(h, "__vr_shop"), Some("TICKET"));
        assert_eq!(find_cookie(h, "b"), Some("2"));
        assert_eq!(find_cookie(h, "__vr_sho"), None);
        assert_eq!(find_cookie("", "a"), None);
        assert_eq!(find_cookie("novalue; a=", "a"), Some(""));
        assert_eq!(find_cookie("xa=1; a=2", "a"), Some("2"));
        assert_eq!(find_cookie("x=a=1; a=2", "a"), Some("2"));
    }

    /// A process whose tick finds another mid-advance serves that advance's figures, not the
    /// ones from before it (nginx workers' timers fire together; the status page read 0
    /// active users a second after an admission).
    #[test]
    fn tick_waits_for_a_concurrent_advance() {
        const T0: u64 = 1_800_000_000_000;
        let cfg = Config::from_toml(
            "[[rooms]]\nname = \"r\"\ntotal_active_users = 5\nnew_users_per_minute = 100\n\
             [rooms.cookie]\nsecure = false\n",
        )
        .unwrap();
        let size = Engine::shared_region_size(&cfg);
        let mut mem = vec![0u128; size.div_ceil(16) + 8];
        let raw = mem.as_mut_ptr() as *mut u8;
        let pad = raw.align_offset(128);
        // SAFETY: `pad < 128` and the buffer has 128 spare bytes.
        let ptr = unsafe { raw.add(pad) };
        let len = mem.len() * 16 - pad;
        // SAFETY: `mem` outlives both engines and nothing else touches it.
        let a = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
        // SAFETY: as above.
        let b = unsafe { Engine::new_shared(cfg, T0, ptr, len) }.unwrap();
        assert_eq!(a.admit("r", None, T0 + 1).unwrap().outcome, Outcome::Admit);

        let snap = a.current.load_full();
        let s = snap.rooms[0].s.clone();
        let tb = s.counters.tick_block();
        let now = T0 + 1_000;
        let token = tb.try_lock(now).expect("nobody else holds the lock");
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| b.tick(now));
            std::thread::sleep(std::time::Duration::from_millis(10));
            advance(&s, &tb, snap.bucket_ms, now);
            tb.unlock(token);
            waiter.join().unwrap();
        });
        assert_eq!(b.stats("r").unwrap().active_users, 1);
        assert_eq!(b.stats("r").unwrap().admitted_total, 1);
    }

    #[test]
    fn itoa_formats() {
        assert_eq!(itoa(0).as_str(), "0");
        assert_eq!(itoa(300).as_str(), "300");
        assert_eq!(itoa(u32::MAX).as_str(), "4294967295");
    }
}
