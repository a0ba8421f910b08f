//! The seam between a room and the cluster tier: what a host reports, what the store grants,
//! and the limits a tick enforces when the room's limits are shared by many hosts.
//!
//! With a `[cluster]` table, a host does not enforce a room's `total_active_users` and
//! `new_users_per_minute` itself: it enforces *allowances* (a number of active visitors, a
//! number of admissions in a bucket) that the store hands out so that the allowances of all
//! hosts together never exceed the limits. The tick puts an allowance where the limit was, so
//! the host's own counting stays exact exactly as it is for one host (see `budget`): this
//! host's active visitors never exceed its allowance of active visitors, and its admissions in a
//! bucket never exceed its allowance for that bucket.
//!
//! An allowance can always grow (the store reserved it before granting it) but cannot shrink
//! below what the host already holds: visitors let in stay in. So the tick also publishes the
//! allowance it *enforced* (the granted one, or more when the host already holds more), and the
//! host reports that back: the store keeps reserved for a host the larger of what it granted and
//! what the host reported it enforces, and grants others only from the rest. The exactness
//! argument is written out in the `velvet-rope-cluster` crate.
//!
//! An allowance is good until a time written with it (a lease): the host's clock when it sent
//! the report, plus the lease. The store keeps what it granted reserved for at least a lease
//! and a session after it answered, so a host whose allowance lapsed (the store unreachable or
//! stalled) goes on enforcing it, and nothing more, until the store could have given it
//! away: a session after the lease ended. Only then does it fall back to a configured share of
//! the limits, uncoordinated. A host that never had a grant waits as long from its first
//! clustered tick before it falls back.

use crate::admission::room::Room;
use crate::clock::Millis;
use crate::config::{QueueingMethod, Rules};
use crate::counters::process_lock::Held;
pub use crate::counters::tick_block::TICK_LOCK_TAKEOVER_MS;
use crate::counters::tick_block::{Cell, TickBlock, APPLIED_CELLS, GRANT_CELLS};
use crate::env;

/// What a host tells the store about one room at a sync (built by [`crate::Engine::cluster_report`]
/// from what the room's last tick published).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostReport {
    /// The incarnation of the room's counters (random, drawn when they were laid out): a
    /// host whose counters were made anew is another host to the store.
    pub incarnation: u32,
    /// The store's sequence number of the last grant written.
    pub seq: u64,
    /// The bucket the last tick opened.
    pub bucket: u64,
    /// Visitors active in the session window.
    pub active: u64,
    /// Admissions booked to `bucket`.
    pub admitted: u64,
    /// Admissions booked to the bucket before `bucket` (the traffic history shares follow).
    pub admitted_last_bucket: u64,
    /// Admission rate, visitors per second, over about a minute.
    pub rate_per_sec: f64,
    /// The allowance of active visitors this host may hold until its next sync: the larger of
    /// the one its last tick enforced and the one granted but not applied yet.
    pub reserved_total: u64,
    /// The same for admissions booked to `bucket`.
    pub reserved_minute: u64,
    /// The same for admissions booked to the bucket after `bucket`.
    pub reserved_minute_next: u64,
    /// Live waiters by arrival bucket (FIFO rooms; empty buckets left out), oldest first.
    pub waiters: Vec<(u64, u64)>,
    /// Whether the host may still rely on its last grant being reserved by the store (it is
    /// within a lease and a session of the report that got it): a store that holds nothing
    /// for the host then lost its state (see the cluster crate).
    pub held: bool,
    /// Admissions at the host (any of its processes) since the host's last report.
    pub admitted_since_report: u64,
    /// Milliseconds since the host's last report (0 for its first).
    pub ms_since_report: u64,
}

/// What the store grants a host for one room (written by [`crate::Engine::cluster_grant`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterGrant {
    /// The store's sequence number of this grant (a grant older than the one written is
    /// dropped).
    pub seq: u64,
    /// Good until this time (ms, the clock the engine is ticked with).
    pub until: Millis,
    /// The allowance of active visitors.
    pub total: u64,
    /// The bucket `minute` is for.
    pub bucket: u64,
    /// The allowance of admissions in `bucket`.
    pub minute: u64,
    /// The allowance of admissions in the bucket after `bucket`.
    pub minute_next: u64,
    /// The global FIFO frontier: waiters who arrived in this bucket or before may enter.
    pub frontier: u64,
    /// Live waiters behind the frontier at other hosts (new arrivals here queue while any wait).
    pub waiting_elsewhere: u64,
    /// The share of the limits to admit on once this grant lapses, in millionths.
    pub fallback_ppm: u64,
    /// Free slots in the whole room beyond its live waiters (0: none, or not known; 0 too
    /// while the store learns). Only paces the waiters the frontier reached: while some are
    /// spare, a visitor queued for want of this host's allowance comes back after two syncs;
    /// no limit depends on it.
    pub room_spare: u64,
}

/// A grant as the room's tick block holds it: one record, written whole (see
/// `tick_block::Record`), so a process that dies writing one leaves the one before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The store's sequence number (a grant with a lower one arrived late and is dropped).
    pub(crate) seq: u64,
    /// Good until (engine clock, ms); 0: no grant yet.
    pub(crate) until: Millis,
    /// The allowance of active visitors.
    pub(crate) total: u64,
    /// The bucket `minute` is for (`minute_next` is for the one after).
    pub(crate) bucket: u64,
    /// The allowance of admissions in `bucket`.
    pub(crate) minute: u64,
    /// The allowance of admissions in the bucket after.
    pub(crate) minute_next: u64,
    /// The room's global FIFO frontier.
    pub(crate) frontier: u64,
    /// Live waiters behind the frontier at other hosts.
    pub(crate) behind: u64,
    /// The fallback share in millionths, plus one (0: none set by a sync).
    pub(crate) fallback: u64,
}

impl Grant {
    /// The grant in `tb`.
    pub(crate) fn read(tb: &TickBlock<'_>) -> Self {
        let [seq, until, total, bucket, minute, minute_next, frontier, behind, fallback] =
            tb.record::<GRANT_CELLS>(Cell::Grant).read();
        Self {
            seq,
            until,
            total,
            bucket,
            minute,
            minute_next,
            frontier,
            behind,
            fallback,
        }
    }

    /// Writes it into `tb`, whole.
    fn write(&self, tb: &TickBlock<'_>) {
        tb.record::<GRANT_CELLS>(Cell::Grant).write([
            self.seq,
            self.until,
            self.total,
            self.bucket,
            self.minute,
            self.minute_next,
            self.frontier,
            self.behind,
            self.fallback,
        ]);
    }

    /// The allowances of admissions it gives in `bucket` and the bucket after.
    fn minutes(&self, bucket: u64) -> (u64, u64) {
        if self.bucket == bucket {
            (self.minute, self.minute_next)
        } else if self.bucket.wrapping_add(1) == bucket {
            (self.minute_next, 0)
        } else {
            (0, 0)
        }
    }
}

/// What an advance enforced, as published for reports: one record, written whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Applied {
    total: u64,
    bucket: u64,
    minute: u64,
    minute_next: u64,
}

impl Applied {
    fn read(tb: &TickBlock<'_>) -> Self {
        let [total, bucket, minute, minute_next] = tb.record::<APPLIED_CELLS>(Cell::Applied).read();
        Self {
            total,
            bucket,
            minute,
            minute_next,
        }
    }

    fn write(&self, tb: &TickBlock<'_>) {
        tb.record::<APPLIED_CELLS>(Cell::Applied).write([
            self.total,
            self.bucket,
            self.minute,
            self.minute_next,
        ]);
    }
}

/// Where a host stands with the cluster tier for one room (see [`crate::Engine::cluster_state`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// The sequence number of the grant it holds (0: none yet).
    pub seq: u64,
    /// Until when its grant's lease runs (engine clock, ms; 0: none yet).
    pub until: Millis,
    /// The allowance of active visitors it was granted.
    pub total: u64,
    /// Whether it may still rely on the store reserving its grant (within a lease and a
    /// session of the report that got it).
    pub held: bool,
    /// Whether it enforces its fallback share: no grant the store may still reserve, after a
    /// lease and a session (uncoordinated: outside the exactness guarantee).
    pub fallback: bool,
}

/// Where `room` stands at `now` (see [`ClusterState`]).
pub(crate) fn state(room: &Room, now: Millis) -> ClusterState {
    let tb = room.counters.tick_block();
    let g = Grant::read(&tb);
    let held = g.until != 0 && now <= g.until.saturating_add(room.session_ms());
    let since = tb.get(Cell::ClusterSince);
    let waited =
        since != 0 && now > since.saturating_add(room.cluster_lease_ms + room.session_ms());
    ClusterState {
        seq: g.seq,
        until: g.until,
        total: g.total,
        held,
        fallback: !held && (g.until != 0 || waited),
    }
}

/// How soon a visitor queued at `arrival` (its FIFO arrival bucket) should come back, in
/// seconds, when it waits only for this host's allowance: the room is clustered and not
/// learning, the current grant came with the store finding more free slots in the room than
/// waiters (so the frontier passed them all) in a report sent at most two sync
/// intervals ago, this host's own waiters at its last tick were no more than those spare
/// slots, and the visitor is at or before the frontier. The store then hands this host a slot
/// for it within a sync or two (the waiters the frontier reached come first, and other hosts'
/// new allowances leave room for them), so it comes back after two syncs rather than a whole
/// `refresh_interval` (at most that, at least a second). `None` otherwise (the usual pace):
/// the room is full, a crowd at this host outnumbers the spare slots, the figure is older
/// than two syncs (a store that stopped answering), or the room is not clustered.
pub(crate) fn allowance_retry_secs(room: &Room, arrival: u64, now: Millis) -> Option<u64> {
    if !clustered(room) {
        return None;
    }
    let tb = room.counters.tick_block();
    let g = Grant::read(&tb);
    let spare = tb.get(Cell::ClusterSpare).saturating_sub(1);
    let current = g.seq != 0
        && tb.get(Cell::ClusterSpareSeq) == g.seq
        && now <= tb.get(Cell::ClusterSpareUntil)
        && now >= tb.get(Cell::LearnUntil);
    let reached = arrival <= tb.get(Cell::Frontier).max(g.frontier);
    (current && spare > 0 && tb.get(Cell::QueueLength) <= spare && reached).then(|| {
        (2 * room.cluster_sync_ms)
            .div_ceil(1000)
            .clamp(1, u64::from(room.refresh_secs).max(1))
    })
}

/// The limits one advance enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allowance {
    /// Stands for `total_active_users`.
    pub(crate) total: u64,
    /// Stands for `new_users_per_minute` in the current bucket.
    pub(crate) minute: u64,
    /// Stands for `new_users_per_minute` in the next bucket.
    pub(crate) minute_next: u64,
    /// A global FIFO frontier and the waiters behind it elsewhere, when a grant is current.
    pub(crate) global_fifo: Option<(u64, u64)>,
}

/// Millionths in one.
const PPM: u64 = 1_000_000;

/// The limits an advance of `room` at `bucket` and `now` enforces: the room's own when it is
/// not clustered; else the current grant; else, while the store may still reserve the last
/// grant (a session after its lease), that grant and nothing more; else the fallback share.
pub(crate) fn allowance(
    room: &Room,
    tb: &TickBlock<'_>,
    bucket: u64,
    now: Millis,
    rules: &Rules,
) -> Allowance {
    let Some(default_ppm) = room.cluster_fallback_ppm.filter(|_| clustered(room)) else {
        return Allowance {
            total: rules.total_active_users,
            minute: rules.new_users_per_minute,
            minute_next: rules.new_users_per_minute,
            global_fifo: None,
        };
    };
    let g = Grant::read(tb);
    let until = g.until;
    let hold = room.session_ms();
    if until != 0 && now <= until.saturating_add(hold) {
        let (minute, minute_next) = g.minutes(bucket);
        // Past its lease the grant's frontier is stale: the host orders its own queue.
        let global_fifo = (now <= until).then_some((g.frontier, g.behind));
        // Never more than the limits in force here, whatever the grant (one computed before
        // an event's switch, see `Syncer`).
        return Allowance {
            total: g.total.min(rules.total_active_users),
            minute: minute.min(rules.new_users_per_minute),
            minute_next: minute_next.min(rules.new_users_per_minute),
            global_fifo,
        };
    }
    let since = tb.get(Cell::ClusterSince);
    let waited = since != 0 && now > since.saturating_add(room.cluster_lease_ms + hold);
    if until == 0 && !waited {
        // No grant yet, and the store may still hold a grant this host never heard of (or be
        // about to answer): nothing until the first grant, or a lease and a session.
        return Allowance {
            total: 0,
            minute: 0,
            minute_next: 0,
            global_fifo: None,
        };
    }
    let ppm = match g.fallback {
        0 => default_ppm,
        stored => stored - 1,
    };
    let part = |limit: u64| ((u128::from(limit) * u128::from(ppm)) / u128::from(PPM)) as u64;
    let minute = part(rules.new_users_per_minute);
    Allowance {
        total: part(rules.total_active_users),
        minute,
        minute_next: minute,
        global_fifo: None,
    }
}

/// Publishes what an advance enforced: each allowance, or more where the host already holds
/// more (`ledger` is the pools' ledger after the advance; see `budget` for the bounds).
pub(crate) fn publish_applied(
    tb: &TickBlock<'_>,
    allow: &Allowance,
    f: &crate::admission::budget::Figures,
    ledger: u64,
    bucket: u64,
) {
    let ledger = i128::from(ledger);
    let held_total = ledger - i128::from(f.admitted_departed) + i128::from(f.moved_in_window);
    let held_minute =
        |booked_there: u64| ledger - i128::from(f.admitted_ever) + i128::from(booked_there);
    let at_least =
        |allowed: u64, held: i128| allowed.max(held.clamp(0, i128::from(u64::MAX)) as u64);
    Applied {
        total: at_least(allow.total, held_total),
        bucket,
        minute: at_least(allow.minute, held_minute(f.admitted_current)),
        minute_next: at_least(allow.minute_next, held_minute(f.admitted_next)),
    }
    .write(tb);
}

/// Whether `room` takes part in the cluster tier (clustered, and not a `passthrough` room,
/// which admits everyone and has nothing to share).
pub(crate) fn clustered(room: &Room) -> bool {
    room.cluster_fallback_ppm.is_some() && room.cfg.queueing_method != QueueingMethod::Passthrough
}

/// The room's tick lock, waited for a bounded 200 ms (it is held for microseconds, unless its
/// holder stopped). Sync only: requests and ticks never wait for it.
fn tick_lock<'a>(tb: &TickBlock<'a>) -> Option<Held<'a>> {
    let mut held = None;
    env::wait_until(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_micros(100),
        || {
            held = tb.try_lock();
            held.is_some()
        },
    );
    held
}

/// What the room reports at a sync (see [`HostReport`]), as of its last tick and `now`: read
/// under the tick lock, so that no advance is half published. Marks the report as the host's
/// last (what the next report's admissions are counted from): call it only with the room's
/// sync turn. `None` when the lock could not be had in time (this sync skips the room).
pub(crate) fn report(room: &Room, now: Millis) -> Option<HostReport> {
    let tb = room.counters.tick_block();
    let _held = tick_lock(&tb)?;
    let applied = Applied::read(&tb);
    let bucket = applied.bucket;
    let g = Grant::read(&tb);
    let until = g.until;
    // A grant not applied yet (the next advance will) counts as held too.
    let (granted_total, granted_minute, granted_minute_next) = if until != 0 && now <= until {
        let (m0, _) = g.minutes(bucket);
        let (m1, _) = g.minutes(bucket + 1);
        (g.total, m0, m1)
    } else {
        (0, 0, 0)
    };
    let lanes = room.counters.lanes();
    let q = room.counters.layout().queue_slots as u64;
    let epoch = now / 1000 / u64::from(room.refresh_secs);
    let epoch = epoch.max(tb.get(Cell::Epoch));
    let opened = tb.get(Cell::Bucket);
    let base = (opened + 1).saturating_sub(q);
    let window = lanes.window(epoch);
    let waiters = (base..=opened)
        .map(|b| (b, lanes.live_in(&window, (b % q) as usize)))
        .filter(|&(_, n)| n > 0)
        .collect();
    let admitted_total = tb.get(Cell::AdmittedTotal);
    let last_at = tb.get(Cell::SyncAt);
    let (admitted_since_report, ms_since_report) = if last_at == 0 {
        (0, 0)
    } else {
        (
            admitted_total.saturating_sub(tb.get(Cell::SyncAdmitted)),
            now.saturating_sub(last_at),
        )
    };
    tb.set(Cell::SyncAdmitted, admitted_total);
    tb.set(Cell::SyncAt, now.max(1));
    Some(HostReport {
        incarnation: room.incarnation,
        seq: g.seq,
        bucket,
        active: tb.get(Cell::Active),
        admitted: tb.get(Cell::AdmittedThisMinute),
        admitted_last_bucket: tb.get(Cell::AdmittedLastMinute),
        rate_per_sec: f64::from_bits(tb.get(Cell::RateBits)),
        reserved_total: applied.total.max(granted_total),
        reserved_minute: applied.minute.max(granted_minute),
        reserved_minute_next: applied.minute_next.max(granted_minute_next),
        waiters,
        held: until != 0 && now <= until.saturating_add(room.session_ms()),
        admitted_since_report,
        ms_since_report,
    })
}

/// Writes `grant` for the room's next advance. The grant is one record written whole under
/// the room's tick lock (so an advance never reads half of one grant and half of another, and
/// a process that dies writing it leaves the one before), which this waits for a bounded time:
/// `false` if it could not get it (the grant is dropped; the next sync brings another). A
/// grant never shortens the lease of the one it replaces: a newer grant was answered later, so
/// the store keeps it at least as long (its `until` can be earlier only when the process that
/// sent its report stalled before sending it).
pub(crate) fn grant(room: &Room, g: &ClusterGrant) -> bool {
    let tb = room.counters.tick_block();
    let Some(held) = tick_lock(&tb) else {
        return false;
    };
    let current = Grant::read(&tb);
    if g.seq < current.seq {
        // Overtaken by a later grant (another process's sync answered after this one).
        return false;
    }
    Grant {
        seq: g.seq,
        until: g.until.max(current.until).max(1),
        total: g.total,
        bucket: g.bucket,
        minute: g.minute,
        minute_next: g.minute_next,
        frontier: g.frontier,
        behind: g.waiting_elsewhere,
        fallback: g.fallback_ppm.min(PPM) + 1,
    }
    .write(&tb);
    // The spare figure, for the grant it came with and two syncs after its report was sent
    // (pacing only; an older engine's grant leaves the number behind, and it is not used).
    let sent = g.until.saturating_sub(room.cluster_lease_ms);
    tb.set(Cell::ClusterSpare, g.room_spare.saturating_add(1));
    tb.set(
        Cell::ClusterSpareUntil,
        sent.saturating_add(2 * room.cluster_sync_ms),
    );
    tb.set(Cell::ClusterSpareSeq, g.seq);
    drop(held);
    true
}

/// This process's turn to sync a room (see [`sync_turn`]): the mark it left in the room's
/// counters, which only it may clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncTurn {
    mark: u64,
}

/// Bits of a turn mark that hold a time (the rest hold the process id of a busy turn's
/// holder): ms since the Unix epoch, enough until 2109.
const TURN_TIME_BITS: u32 = 42;
const TURN_TIME: u64 = (1 << TURN_TIME_BITS) - 1;

/// Whether this process takes the turn, at `now`, to sync `room` with the store: the first
/// caller at least `interval_ms` (less a tenth, for timer jitter) after the last turn ended,
/// among all processes sharing the room's counters (one compare-and-swap). The turn is marked
/// busy, with this process's id, for `busy_ms` (the longest a sync may take) until
/// [`sync_done`] ends it, so two processes never sync one room at once while both keep time.
/// `now` is the engine's clock, which every process of a host reads alike. A mark further in
/// the future than a turn (the clock stepped back) is taken over, as is the turn of a process
/// that died mid-sync (at once) or stopped mid-sync (once `busy_ms` is past). A process
/// stopped past `busy_ms` may still send its report after its successor's: the store answers
/// a report older than the last grant to its host with what it already reserves for the
/// host (see the cluster crate), so an overlap never lowers a reservation.
pub(crate) fn sync_turn(
    room: &Room,
    now: Millis,
    interval_ms: u64,
    busy_ms: u64,
) -> Option<SyncTurn> {
    let tb = room.counters.tick_block();
    let last = tb.get(Cell::SyncTurn);
    let (holder, at) = ((last >> TURN_TIME_BITS) as u32, last & TURN_TIME);
    let gap = interval_ms - interval_ms / 10;
    // A mark more than a turn ahead of this caller's clock was left by a clock that stepped
    // back; a caller whose clock merely lags the holder's (read a moment earlier) waits.
    let due = last == 0
        || at > now + 2 * busy_ms + 1
        || now + 1 >= at + gap
        || (holder != 0 && !env::process_alive(holder));
    let mark = (u64::from(env::pid()) << TURN_TIME_BITS) | ((now + 1 + busy_ms) & TURN_TIME);
    (due && tb.compare_exchange(Cell::SyncTurn, last, mark)).then_some(SyncTurn { mark })
}

/// Ends this process's turn at `now`: the next is due an interval later. A turn another
/// process took over (this one overran `busy_ms`) is left alone.
pub(crate) fn sync_done(room: &Room, turn: SyncTurn, now: Millis) {
    let tb = room.counters.tick_block();
    tb.compare_exchange(Cell::SyncTurn, turn.mark, (now + 1) & TURN_TIME);
}

/// Millionths of `share` (a number in `[0, 1]`).
pub(crate) fn share_ppm(share: f64) -> u64 {
    (share.clamp(0.0, 1.0) * PPM as f64).round() as u64
}
