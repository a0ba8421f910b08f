//! The background sync: every interval, for every room, one process of the host reports the
//! room to the store and hands the engine what the store granted. Nothing here runs on a
//! request's path: requests are decided on the last grant, and on the fallback share once it
//! lapses (see `velvet_rope::admission::cluster`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use velvet_rope::admission::cluster::{HostReport, TICK_LOCK_TAKEOVER_MS};
use velvet_rope::admission::{Event, EventKind};
use velvet_rope::config::ClusterConfig;
use velvet_rope::env::{fault_point, FaultPoint};
use velvet_rope::{Clock, Engine, Millis, SystemClock};

use crate::periodic::Periodic;
use crate::protocol::{id_text, id_value, store_host, Params, Report};
use crate::store::{Store, StoreError, SyncCall};

/// What the sync loop has done, for tests, metrics and logs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncStatus {
    /// Syncs of one room that got an answer.
    pub syncs: u64,
    /// Syncs of one room that failed.
    pub failures: u64,
    /// Outages: runs of a room's failures after a success (or from the start), summed over
    /// the rooms.
    pub outages: u64,
    /// Whether some room's last sync failed (with a Redis Cluster, one master's rooms may
    /// fail while the others' sync).
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
    /// How long one store call may take.
    pub timeout: Duration,
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
            timeout: Duration::from_millis(c.timeout_ms),
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

/// A running sync loop (a thread of its own). Stopped and joined when dropped.
pub struct Syncer {
    status: Arc<Mutex<SyncStatus>>,
    _thread: Periodic,
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
        let store = crate::store::store_for(c)?;
        Ok(Some(Self::start(
            engine,
            store,
            SyncOptions::from_config(c),
        )))
    }

    /// Syncs `engine`'s rooms through `store` until dropped. The first sync runs at once.
    pub fn start(engine: Arc<Engine>, store: Box<dyn Store>, options: SyncOptions) -> Self {
        let (interval, log) = (options.interval, options.log.clone());
        let mut round = SyncRound::new(engine, store, options);
        let status = round.status.clone();
        Self {
            status,
            _thread: Periodic::start("velvet-rope-sync", interval, &log, move || round.round()),
        }
    }

    /// What the loop has done so far.
    pub fn status(&self) -> SyncStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the loop's thread runs in this process: false in a child forked after the loop
    /// started (a pre-fork server's worker), where it should be started again
    /// ([`Syncer::from_engine`]); dropping the parent's there is harmless.
    pub fn running_here(&self) -> bool {
        self._thread.running_here()
    }
}

/// The sync loop's body: what one interval does. [`Syncer`] runs it on a thread; a simulation
/// in virtual time calls [`SyncRound::round`] itself, with a clock of its own in the options.
pub struct SyncRound {
    engine: Arc<Engine>,
    store: Box<dyn Store>,
    options: SyncOptions,
    status: Arc<Mutex<SyncStatus>>,
    most_hosts: std::collections::HashMap<String, u64>,
    /// Rooms whose last sync failed.
    failing: std::collections::HashSet<String>,
}

impl Drop for SyncRound {
    /// A loop stopped (a reload that replaced it, the engine closed) ends its rooms'
    /// outages: a new loop starts with none failing, and would otherwise never end them.
    fn drop(&mut self) {
        if !self.failing.is_empty() {
            let rooms: Vec<String> = self.failing.iter().cloned().collect();
            self.end_outages(rooms, "no longer synced by this loop (it stopped)");
        }
    }
}

impl std::fmt::Debug for SyncRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncRound")
            .field("options", &self.options)
            .finish()
    }
}

impl SyncRound {
    /// Rounds of `engine`'s rooms through `store`.
    pub fn new(engine: Arc<Engine>, store: Box<dyn Store>, options: SyncOptions) -> Self {
        Self {
            engine,
            store,
            options,
            status: Arc::new(Mutex::new(SyncStatus::default())),
            most_hosts: Default::default(),
            failing: Default::default(),
        }
    }

    /// What the rounds have done so far.
    pub fn status(&self) -> SyncStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One sync of every room whose turn this process takes (see
    /// [`Engine::cluster_sync_turn`]), then a tick to apply the grants.
    pub fn round(&mut self) {
        let config = self.engine.config();
        // A room a reload removed (or every room, with the `[cluster]` table gone) no longer
        // fails: it is not synced at all. Its outage ends (the event says why), so that an
        // alert on its beginning is not left open.
        let removed: Vec<String> = self
            .failing
            .iter()
            .filter(|r| {
                config.cluster.is_none() || !config.rooms.iter().any(|room| room.name == **r)
            })
            .cloned()
            .collect();
        if !removed.is_empty() {
            let reason = if config.cluster.is_none() {
                "no longer synced (the [cluster] table removed by a reload)"
            } else {
                "no longer synced (the room removed by a reload)"
            };
            self.end_outages(removed, reason);
        }
        if config.cluster.is_none() {
            // Reloaded without a `[cluster]` table: nothing to sync.
            return;
        }
        let interval_ms = self.options.interval.as_millis() as u64;
        let lease_ms = self.options.lease.as_millis() as u64;
        // The longest a sync of one room may take: a connection, a script call (one more call
        // to load the script into a restarted store) and a WAIT, and the wait for the tick
        // lock.
        let busy_ms = 4 * self.options.timeout.as_millis() as u64 + 500;
        let bucket_ms = u64::from(config.settings.bucket_width_secs) * 1000;
        // Tick first, so that a report is of the bucket open now (a grant is for it and the
        // next one).
        self.engine.tick(self.options.clock.now_ms());
        // Every room whose turn this process takes is reported, then all the reports go to the
        // store in one exchange (one round trip to Redis), then the grants are applied.
        let mut pending: Vec<Pending> = Vec::new();
        for room in &config.rooms {
            let turn_at: Millis = self.options.clock.now_ms();
            let Ok(Some(turn)) =
                self.engine
                    .cluster_sync_turn(&room.name, turn_at, interval_ms, busy_ms)
            else {
                continue;
            };
            // The report is read once the turn is this process's, so it is the host's newest.
            let report = match self.engine.cluster_report(&room.name, turn_at) {
                Ok(Some(report)) => report,
                _ => {
                    let _ = self.engine.cluster_sync_done(
                        &room.name,
                        turn,
                        self.options.clock.now_ms(),
                    );
                    continue;
                }
            };
            fault_point(FaultPoint::SyncReported);
            // A grant is enforced for its lease and held a session after it: it is computed
            // from the strictest limits the room's schedule sets over that span, so that an
            // event's switch to lower limits is exact across hosts too.
            let hold = u64::from(room.longest_session()) * bucket_ms;
            // (From a lease before the turn, for hosts whose clocks run behind this one's by
            // up to a lease, to the turn's report, which may leave up to `busy_ms` after it.)
            let (total, minute) = room.strictest_limits(
                turn_at.saturating_sub(lease_ms),
                turn_at + busy_ms + lease_ms + hold,
                bucket_ms,
            );
            let params = Params {
                total,
                minute,
                lease: lease_ms,
                hold,
                // A host that reaches the store reports within an interval, or a turn (or
                // the room's tick lock) whose holder stopped, and an interval: the store
                // learns that long.
                learn: interval_ms + busy_ms.max(TICK_LOCK_TAKEOVER_MS) + interval_ms,
            };
            let host = store_host(&self.options.host_id, report.incarnation);
            let mut sent = Report::of(&report, demand(&report, interval_ms));
            // Revocations made here go to the store; other hosts' come back.
            let outgoing = self.engine.cluster_revocations(&room.name).ok().flatten();
            if let Some(out) = &outgoing {
                sent.rc = Some(out.cursor);
                sent.rv = out.ids.iter().map(|&id| id_text(id)).collect();
            }
            pending.push(Pending {
                room: room.name.clone(),
                turn,
                host,
                sent,
                params,
                outgoing,
            });
        }
        let calls: Vec<SyncCall<'_>> = pending
            .iter()
            .map(|p| SyncCall {
                room: &p.room,
                host: &p.host,
                report: &p.sent,
                params: &p.params,
            })
            .collect();
        // The lease runs from just before the reports leave: it ends before the store's
        // reservation does, whatever delays came before (a grant never shortens the lease of
        // the one it replaces, for a process that stalls after this).
        let sent_at: Millis = self.options.clock.now_ms();
        let answers = if calls.is_empty() {
            Vec::new()
        } else {
            fault_point(FaultPoint::SyncSending);
            let answers = self.store.sync_many(&calls);
            fault_point(FaultPoint::SyncAnswered);
            answers
        };
        let mut answers = answers.into_iter();
        let mut last_error: Option<StoreError> = None;
        for p in &pending {
            // Rooms after one the store could not be reached for were not sent: they try
            // next round, and count as failed syncs now (each room's outage is its own).
            let result = match answers.next() {
                Some(result) => Some(result),
                None => last_error.clone().map(Err),
            };
            if let Some(result) = result {
                last_error = result.as_ref().err().cloned();
                self.record(&p.room, result.as_ref().map(|r| r.hosts));
                if let Ok(reply) = result {
                    // The fallback, unless configured: one over the most hosts ever known
                    // (silent ones included), so that a host never falls back to more than
                    // the seed's per-host division.
                    let known = self.most_hosts.entry(p.room.clone()).or_insert(1);
                    *known = (*known).max(reply.known);
                    let share = self.options.fallback_share.unwrap_or(1.0 / *known as f64);
                    let ppm = (share.clamp(0.0, 1.0) * 1e6).round() as u64;
                    let grant = reply.grant(sent_at + lease_ms, ppm);
                    let _ = self.engine.cluster_grant(&p.room, &grant);
                    fault_point(FaultPoint::SyncGranted);
                    if let (Some(out), Some(cursor)) = (&p.outgoing, reply.rc) {
                        let ids: Vec<u64> = reply.rv.iter().filter_map(|t| id_value(t)).collect();
                        let _ = self
                            .engine
                            .cluster_revocations_synced(&p.room, out, &ids, cursor);
                    }
                }
            }
            let _ = self
                .engine
                .cluster_sync_done(&p.room, p.turn, self.options.clock.now_ms());
        }
        self.engine.tick(self.options.clock.now_ms());
    }

    /// Ends the outages of `rooms`, which are no longer synced (`reason`): one event each, and
    /// a line when no room is failing any more.
    fn end_outages(&mut self, rooms: Vec<String>, reason: &'static str) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        for room in rooms {
            if self.failing.remove(&room) {
                self.engine.record_event(Event {
                    at: self.options.clock.now_ms(),
                    kind: EventKind::ClusterOutageEnded,
                    room: Some(room),
                    fields: vec![("reason", reason.into())],
                });
            }
        }
        if s.in_outage && self.failing.is_empty() {
            (self.options.log)(&format!("outage over: the failing rooms are {reason}"));
        }
        s.in_outage = !self.failing.is_empty();
    }

    fn record(&mut self, room: &str, result: Result<u64, &StoreError>) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        s.commands = self.store.commands();
        // A room's outage begins at its first failure after an answer and ends at its next
        // answer (one event each, per room); the log says when the first room fails and when
        // the last one is answered again.
        let began = result.is_err() && self.failing.insert(room.to_owned());
        let ended = result.is_ok() && self.failing.remove(room);
        self.engine.record_sync(room, result.is_ok(), began);
        let was = s.in_outage;
        s.in_outage = !self.failing.is_empty();
        match result {
            Ok(hosts) => {
                s.syncs += 1;
                s.hosts = hosts;
                if ended {
                    if was && !s.in_outage {
                        (self.options.log)(&format!(
                            "store reachable again (room `{room}`): allowances are synced anew"
                        ));
                    }
                    self.engine.record_event(Event {
                        at: self.options.clock.now_ms(),
                        kind: EventKind::ClusterOutageEnded,
                        room: Some(room.to_owned()),
                        fields: Vec::new(),
                    });
                }
            }
            Err(e) => {
                s.failures += 1;
                s.last_error = Some(e.to_string());
                if began {
                    s.outages += 1;
                    if !was {
                        (self.options.log)(&format!(
                            "{e} (room `{room}`): deciding on the last allowances for up to {} \
                             ms, then on the fallback share; requests never wait for the store",
                            self.options.lease.as_millis()
                        ));
                    }
                    self.engine.record_event(Event {
                        at: self.options.clock.now_ms(),
                        kind: EventKind::ClusterOutageBegan,
                        room: Some(room.to_owned()),
                        fields: vec![("error", e.to_string())],
                    });
                }
            }
        }
    }
}

/// One room's sync in a round, between its report and its answer.
struct Pending {
    room: String,
    turn: velvet_rope::admission::cluster::SyncTurn,
    host: String,
    sent: Report,
    params: Params,
    outgoing: Option<velvet_rope::admission::revoke::OutgoingRevocations>,
}

/// What a host asks for beyond its share: twice its admissions per sync interval since its
/// last report (one interval ahead of need, one to cover the next answer's delay), measured
/// over the host's processes and scaled to one interval (a process taking its first turn in a
/// while asks for the host's rate, not for everything since), and at least one.
fn demand(report: &HostReport, interval_ms: u64) -> u64 {
    let per_interval = if report.ms_since_report == 0 {
        0
    } else {
        let span = report.ms_since_report.max(interval_ms);
        ((u128::from(report.admitted_since_report) * u128::from(interval_ms)) / u128::from(span))
            as u64
    };
    (2 * per_interval).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_store::MemoryStore;
    use crate::protocol::{Params, Reply, Report};
    use velvet_rope::{Config, FakeClock};

    /// A store that never answers for room `b`.
    struct FailsForB(MemoryStore);

    impl Store for FailsForB {
        fn sync(
            &mut self,
            room: &str,
            host: &str,
            report: &Report,
            params: &Params,
        ) -> Result<Reply, StoreError> {
            if room == "b" {
                return Err(StoreError::Unreachable("b's master is down".into()));
            }
            self.0.sync(room, host, report, params)
        }

        fn commands(&self) -> u64 {
            self.0.commands()
        }
    }

    fn config(rooms: &[&str]) -> String {
        let rooms: String = rooms
            .iter()
            .map(|r| format!("[[rooms]]\nname = \"{r}\"\ntotal_active_users = 10\nnew_users_per_minute = 100\n"))
            .collect();
        format!(
            "[cluster]\nredis_url = \"redis://unused\"\nhost_id = \"h\"\n\
             sync_interval_ms = 100\nlease_ms = 600\ntimeout_ms = 100\n{rooms}"
        )
    }

    /// A store that answers nothing.
    struct Down;

    impl Store for Down {
        fn sync(
            &mut self,
            _room: &str,
            _host: &str,
            _report: &Report,
            _params: &Params,
        ) -> Result<Reply, StoreError> {
            Err(StoreError::Unreachable("connection refused".into()))
        }

        fn commands(&self) -> u64 {
            0
        }
    }

    /// Rounds of rooms `a` and `b` on a fake clock through the store `store` makes, and their
    /// engine.
    fn rounds(
        store: impl FnOnce(Arc<FakeClock>) -> Box<dyn Store>,
    ) -> (Arc<FakeClock>, Arc<Engine>, SyncRound) {
        let clock = Arc::new(FakeClock::new(1_800_000_000_000));
        let engine = Arc::new(Engine::from_text(&config(&["a", "b"]), clock.now_ms()).unwrap());
        let mut options = SyncOptions::from_config(engine.config().cluster.as_ref().unwrap());
        options.clock = clock.clone();
        options.log = Arc::new(|_| {});
        let round = SyncRound::new(engine.clone(), store(clock.clone()), options);
        (clock, engine, round)
    }

    fn outages(engine: &Engine, kind: EventKind) -> Vec<String> {
        let mut rooms: Vec<String> = engine
            .drain_events()
            .into_iter()
            .filter(|e| e.kind == kind)
            .filter_map(|e| e.room)
            .collect();
        rooms.sort();
        rooms
    }

    /// An exchange that fails stops at its first room (the rest are not sent): every room of
    /// it is a failed sync, and each room's outage begins. (Before, only the first room's
    /// did: an alert on the second room's outage never fired, and its failures were not
    /// counted.)
    #[test]
    fn a_store_down_fails_every_room_of_the_exchange() {
        let (_, engine, mut round) = rounds(|_| Box::new(Down));
        engine.drain_events();
        round.round();
        assert_eq!(outages(&engine, EventKind::ClusterOutageBegan), ["a", "b"]);
        assert_eq!(round.status().failures, 2, "{:?}", round.status());
        // A reload that changes `[cluster]` replaces the loop: the old one ends its outages
        // (the new one starts with none failing, and could never end them).
        drop(round);
        assert_eq!(outages(&engine, EventKind::ClusterOutageEnded), ["a", "b"]);
    }

    /// The review of the whole change: a room removed by a reload while its syncs failed
    /// stayed among the failing rooms for good, so the syncer said it was in an outage
    /// forever (and never logged the end of it).
    #[test]
    fn a_room_removed_while_failing_ends_the_outage() {
        let (clock, engine, mut round) = rounds(|clock| {
            Box::new(FailsForB(MemoryStore::with_clock(
                Duration::from_millis(100),
                clock,
            )))
        });
        round.round();
        assert!(round.status().in_outage, "{:?}", round.status());
        engine
            .reload(Config::from_text(&config(&["a"])).unwrap())
            .unwrap();
        engine.drain_events();
        clock.advance(200);
        round.round();
        assert_eq!(
            outages(&engine, EventKind::ClusterOutageEnded),
            ["b"],
            "the removed room's outage ends"
        );
        let status = round.status();
        assert!(status.syncs >= 2, "{status:?}");
        assert!(!status.in_outage, "{status:?}");
        // The same with the `[cluster]` table gone (the round returns early).
        engine
            .reload(Config::from_text(&config(&["a", "b"])).unwrap())
            .unwrap();
        clock.advance(200);
        round.round();
        assert!(round.status().in_outage);
        let plain = config(&["a", "b"]);
        let plain = &plain[plain.find("[[rooms]]").unwrap()..];
        engine.reload(Config::from_text(plain).unwrap()).unwrap();
        clock.advance(200);
        round.round();
        assert!(!round.status().in_outage, "{:?}", round.status());
    }
}
