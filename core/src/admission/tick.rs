//! One tick of one room: advance the shared state (if no other process is doing it right now),
//! then read what was published into a view for the next snapshot.
//!
//! An advance opens the current bucket and refresh epoch, folds the counters into the figures
//! of `budget`, moves the pools' ledger to the claim limit and the queue's frontier, and
//! publishes the figures. The bucket and epoch do not move back for a tick with an older clock
//! (another process's cached time): it advances from the newest bucket any tick has opened. A
//! stored bucket more than the ring's length ahead of the caller's clock cannot come from a
//! clock that merely lags: it was opened by a clock that jumped forward (a clock step, a wrong
//! `now`), and the room is re-opened at the caller's bucket rather than frozen until real time
//! catches up. Admissions booked in the jump stay counted until their ring slots are
//! recycled (conservative); visitors admitted in it hold tickets that look current and are not
//! counted again after that: the jump costs at most what it admitted.
//!
//! Two advances can overlap only when a stopped holder of the lock resumes after being taken
//! over (see `process_lock`). The ledger is the pools themselves (see `slot_pool`), and the
//! folded admissions are moved by adding what each advance folded, never by storing a value
//! read before; a holder checks that it still holds the lock before each grant, so a resumed
//! holder stops at its next grant (a holder stopped for `TICK_LOCK_TAKEOVER_MS` between that
//! check and the add after it can add once more what it had computed: the one overlap left).
//! A process that dies mid-advance leaves pools whose ledger says exactly what it granted.
//!
//! Only engines of the configuration that governs the room advance it (see `governance`).

use std::sync::Arc;

use crate::admission::budget::{self, Figures, Split, PASSTHROUGH_FREE};
use crate::admission::cluster;
use crate::admission::events::{self, EventLog};
use crate::admission::governance;
use crate::admission::room::Room;
use crate::admission::snapshot::{RoomName, RoomView};
use crate::clock::Millis;
use crate::config::QueueingMethod;
use crate::counters::process_lock::Held;
use crate::counters::slot_pool::{home_shard, widen_ledger};
use crate::counters::tick_block::{Cell, TickBlock};
use crate::env::{self, FaultPoint};

/// Advances `room` if this process gets its tick lock (never waits for it) and its
/// configuration governs the room, then views it. With `log`, what the advance changed goes
/// there as events (see `events`), once for the host.
pub(crate) fn tick_room(room: &Arc<Room>, now: Millis, log: Option<&EventLog>) -> RoomView {
    let tb = room.counters.tick_block();
    if let Some(held) = tb.try_lock() {
        if governance::governs(room, &tb) {
            advance(room, &tb, now, &held);
            if let Some(log) = log {
                events::observe(room, &tb, log, now);
            }
        }
    }
    observe(room, &tb, now)
}

/// The first tick of a room as an engine is built over it: like [`tick_room`], except that a
/// room no process has advanced yet (counters just laid out, nothing granted) is waited for, a
/// bounded two seconds, while another process runs its first advance. Otherwise visitors
/// arriving in that moment would find no slots and queue ahead of the whole room. Engine
/// construction only: requests and ticks never wait. The engine's configuration takes the
/// room over (see `governance`): it is the newest.
pub(crate) fn first_tick_room(room: &Arc<Room>, now: Millis) -> RoomView {
    let tb = room.counters.tick_block();
    let mut done = false;
    env::wait_until(
        std::time::Duration::from_secs(2),
        std::time::Duration::from_micros(200),
        || {
            if let Some(held) = tb.try_lock() {
                governance::claim(room, &tb);
                if tb.get(Cell::Bucket) == 0 && room.cfg.restart_learning {
                    // Counters made anew: learn for a session (see `RoomConfig`).
                    tb.set(
                        Cell::LearnUntil,
                        now.saturating_add(room.session_ms()).max(1),
                    );
                }
                advance(room, &tb, now, &held);
                done = true;
            }
            done || tb.get(Cell::Bucket) != 0
        },
    );
    if !done {
        governance::claim(room, &tb);
    }
    observe(room, &tb, now)
}

/// The bucket and refresh epoch as of `now`: never before the newest ones opened, unless
/// those lie more than a ring ahead of `now` (a clock that jumped forward; see the module
/// documentation).
fn bucket_and_epoch(room: &Room, tb: &TickBlock<'_>, now: Millis) -> (u64, u64) {
    let layout = room.counters.layout();
    let newest = |mine: u64, stored: u64, ring: usize| {
        if stored > mine.saturating_add(ring as u64) {
            mine
        } else {
            mine.max(stored)
        }
    };
    let bucket = newest(now / room.bucket_ms, tb.get(Cell::Bucket), layout.buckets);
    let epoch = newest(
        now / 1000 / u64::from(room.refresh_secs),
        tb.get(Cell::Epoch),
        layout.lanes,
    );
    (bucket, epoch)
}

/// Folds counts, moves the ledger and the frontier, publishes. One process at a time (the
/// holder of the room's tick lock, `held`).
pub(crate) fn advance(room: &Room, tb: &TickBlock<'_>, now: Millis, held: &Held<'_>) {
    let counters = &room.counters;
    // The rules in force (the room's, or an event's): what this advance grants under, taken
    // at the newest clock an advance used, so that they never go back past a switch (unless
    // that clock lies more than a bucket ahead: one that jumped).
    let stored = tb.get(Cell::RulesClock);
    let rules_now = if stored > now && stored - now <= room.bucket_ms {
        stored
    } else {
        now
    };
    tb.set(Cell::RulesClock, rules_now);
    let rules = room.rules_at(rules_now);
    let (bucket, epoch) = bucket_and_epoch(room, tb, now);
    if cluster::clustered(room) && tb.get(Cell::ClusterSince) == 0 {
        tb.set(Cell::ClusterSince, now.max(1));
    }

    // Open the bucket and the next one (admissions are booked to one of them), and the epoch
    // and the next one, before saying so. In a new room's first minutes the two buckets
    // before it are opened too (empty), for a claim's loser to tell where the winner counts
    // (see `Buckets::claim`); slots the ring used are left alone.
    let buckets = counters.buckets();
    let folded = buckets.prepare_unused(bucket.saturating_sub(2))
        + buckets.prepare_unused(bucket.saturating_sub(1))
        + buckets.prepare(bucket)
        + buckets.prepare(bucket + 1);
    let closed = tb.add(Cell::AdmittedClosed, folded as i64);
    let lanes = counters.lanes();
    lanes.prepare(epoch);
    lanes.prepare(epoch + 1);
    tb.set(Cell::Epoch, epoch);
    tb.set(Cell::Bucket, bucket);

    // The figures of the limits (see `budget`), from one reading of the ring.
    let first = bucket.saturating_sub(u64::from(rules.session_duration));
    let (before_window, all) = buckets.admitted_before_and_all(first);
    let window = buckets.sums(first, bucket + 1);
    let allow = cluster::allowance(room, tb, bucket, now, &rules);
    let figures = Figures {
        total_active_users: allow.total,
        new_users_per_minute: allow.minute,
        new_users_next: allow.minute_next,
        admitted_ever: closed + all,
        admitted_departed: closed + before_window,
        admitted_current: buckets.admitted_in(bucket),
        admitted_next: buckets.admitted_in(bucket + 1),
        moved_in_window: window.moved,
    };
    let waiters = counters.waiter_pool();
    let open = counters.open_pool();
    // The ledger, from the pools (exact whatever claims run meanwhile).
    let granted = widen_ledger(
        tb.get(Cell::Granted),
        waiters.ledger32().wrapping_add(open.ledger32()),
    );
    env::fault_point(FaultPoint::AdvanceRead);
    let held_slots = waiters.free() + open.free();
    let limit = if rules.queueing_method == QueueingMethod::Passthrough {
        granted
            .saturating_add(PASSTHROUGH_FREE)
            .saturating_sub(held_slots)
    } else {
        budget::claim_limit(&figures)
    };
    let free = budget::free_slots(limit, granted, held_slots);

    // Live waiters per arrival bucket, oldest first.
    let q = counters.layout().queue_slots as u64;
    let base = (bucket + 1).saturating_sub(q);
    let window = lanes.window(epoch);
    let live: Vec<u64> = (base..=bucket)
        .map(|b| lanes.live_in(&window, (b % q) as usize))
        .collect();
    let queue_length: u64 = live.iter().sum();
    let mut frontier = tb.get(Cell::Frontier);
    if let (true, Some(first)) = (rules.prequeue, rules.shuffle_lanes) {
        // Before a shuffled start the frontier stands before the shuffle's buckets (it may
        // have moved past some of them while the room ran before its pre-queue).
        frontier = frontier.min(first.saturating_sub(1));
    }
    let mut threshold = 0;
    let learning = now < tb.get(Cell::LearnUntil);
    let want = if rules.queue_all || learning {
        Split::default()
    } else {
        match rules.queueing_method {
            QueueingMethod::Fifo => match allow.global_fifo {
                Some((global, behind_elsewhere)) => {
                    frontier = frontier.max(global);
                    budget::fifo_global(free, &live, base, frontier, behind_elsewhere)
                }
                None => {
                    let (split, f) = budget::fifo(free, &live, base, bucket, frontier);
                    frontier = f;
                    split
                }
            },
            QueueingMethod::Random => {
                let (split, t) = budget::random(free, queue_length);
                threshold = t;
                split
            }
            QueueingMethod::Reject | QueueingMethod::Passthrough => Split {
                waiters: 0,
                open: free,
            },
        }
    };
    let ledger = budget::apply(waiters, open, granted, limit, want, home_shard(), || {
        held.still_held()
    });
    if !held.still_held() {
        // Taken over while stopped: the successor publishes.
        return;
    }
    // Only now, with the pools moved to the rules in force, may requests claim until the
    // schedule's next switch (see the module documentation).
    tb.set(
        Cell::GrantsUntil,
        crate::config::next_switch(&room.cfg.events, rules_now).unwrap_or(0),
    );
    tb.set(
        Cell::FrontierDraw,
        frontier_draw(&rules, &live, base, bucket, frontier, want.waiters),
    );
    tb.set(Cell::Granted, ledger);
    if cluster::clustered(room) {
        cluster::publish_applied(tb, &allow, &figures, ledger, bucket);
    }
    tb.set(Cell::Frontier, frontier);
    tb.set(Cell::DrawThreshold, threshold);

    // Admission rate: exponentially weighted over about a minute of ticks, divided by the
    // weight gathered so far (a room's first minute would read low otherwise: its first
    // waiters were promised several times their real wait).
    let last = tb.get(Cell::LastTick);
    let admitted_since = figures
        .admitted_ever
        .saturating_sub(tb.get(Cell::LastAdmittedTotal));
    let mut raw = f64::from_bits(tb.get(Cell::RateRawBits));
    let mut weight = f64::from_bits(tb.get(Cell::RateWeightBits));
    if last == 0 {
        // Before any measure: the new-user rate in force (what a queue drains at when the
        // per-minute limit binds), worth a minute of measures.
        raw = rules.new_users_per_minute as f64 * 1000.0 / room.bucket_ms as f64;
        weight = 1.0;
    }
    if last != 0 && now > last {
        let dt = (now - last) as f64 / 1000.0;
        let w = (dt / 60.0).min(1.0);
        raw = raw * (1.0 - w) + (admitted_since as f64 / dt) * w;
        weight = weight * (1.0 - w) + w;
    }
    if last == 0 || now > last {
        let rate = if weight > 0.0 { raw / weight } else { 0.0 };
        tb.set(Cell::RateRawBits, raw.to_bits());
        tb.set(Cell::RateWeightBits, weight.to_bits());
        tb.set(Cell::RateBits, rate.to_bits());
        tb.set(Cell::LastTick, now);
        tb.set(Cell::LastAdmittedTotal, figures.admitted_ever);
    }

    tb.set(Cell::Active, figures.active());
    tb.set(Cell::AdmittedThisMinute, figures.admitted_current);
    tb.set(
        Cell::AdmittedLastMinute,
        bucket.checked_sub(1).map_or(0, |b| buckets.admitted_in(b)),
    );
    tb.set(Cell::AdmittedTotal, figures.admitted_ever);
    tb.set(Cell::QueueLength, queue_length);
    tb.set(Cell::FreeSlots, waiters.free() + open.free());
    env::fault_point(FaultPoint::AdvancePublished);
}

/// The draw below which a waiter of the frontier's arrival bucket may enter, when that bucket
/// is one of a shuffled pre-queue's: the waiter slots left once every waiter before it has
/// one, over its live waiters (each of them then draws once per refresh epoch, so that the
/// order within the bucket is random too, and refreshing more often does not help). Any
/// other frontier: everyone (`u64::MAX`).
fn frontier_draw(
    rules: &crate::config::Rules,
    live: &[u64],
    base: u64,
    bucket: u64,
    frontier: u64,
    waiter_slots: u64,
) -> u64 {
    if !rules.is_shuffle_lane(frontier) || frontier < base || frontier > bucket {
        return u64::MAX;
    }
    let i = (frontier - base) as usize;
    let ahead: u64 = live[..i].iter().sum();
    budget::random(waiter_slots.saturating_sub(ahead), live[i]).1
}

/// A view of a room from its published state and its live-waiter table.
pub(crate) fn observe(room: &Arc<Room>, tb: &TickBlock<'_>, now: Millis) -> RoomView {
    let (bucket, epoch) = bucket_and_epoch(room, tb, now);
    let q = room.counters.layout().queue_slots as u64;
    let base = (bucket + 1).saturating_sub(q);
    let lanes = room.counters.lanes();
    let mut ahead = Vec::with_capacity(q as usize);
    let mut sum = 0u64;
    let window = lanes.window(epoch);
    for b in base..=bucket {
        ahead.push(sum);
        sum += lanes.live_in(&window, (b % q) as usize);
    }
    let (rules, rules_from, rules_until) = room.cfg.rules_span(now, room.bucket_ms);
    // A suspended room's span is empty, so that requests never take the steady path's rules
    // (see `decide`): the check stays off that path.
    let rules_until = if rules.suspended {
        rules_from
    } else {
        rules_until
    };
    RoomView {
        name: RoomName::new(room.cfg.name.as_bytes()),
        room: room.clone(),
        queue_length: sum,
        queue_base: base,
        ahead: ahead.into(),
        rate_per_sec: f64::from_bits(tb.get(Cell::RateBits)),
        rules,
        rules_from,
        rules_until,
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::counters::process_lock::tests::{dead_pid, held_by};
    use crate::counters::room_counters::RoomCounters;
    use crate::counters::room_layout::RoomLayout;

    const T0: u64 = 1_800_000_000_000;
    const MIN: u64 = 60_000;

    fn room() -> Arc<Room> {
        let cfg = Config::from_toml(
            "[[rooms]]\nname = \"r\"\ntotal_active_users = 5\nnew_users_per_minute = 100\n",
        )
        .unwrap();
        let counters = Arc::new(RoomCounters::new(RoomLayout::of(
            &cfg.rooms[0],
            &cfg.settings,
        )));
        Arc::new(Room::new(&cfg.rooms[0], &cfg, counters))
    }

    /// A tick that finds the advance lock held by a live process does not wait for it: it reads
    /// what was published and returns. One held by a dead process (a worker that crashed
    /// mid-tick) is taken over at once. (Before: every tick yielded for up to 100 ms per room,
    /// and a dead holder stalled every worker for seconds.)
    #[test]
    fn a_tick_never_waits_and_takes_over_a_dead_holder() {
        let r = room();
        let tb = r.counters.tick_block();
        let held = tb.try_lock().unwrap();
        let view = tick_room(&r, T0 + 1_000, None);
        assert_eq!(tb.get(Cell::Bucket), 0, "not advanced under a live holder");
        assert_eq!(view.queue_length, 0);
        drop(held);
        tb.set(Cell::Lock, held_by(dead_pid(), 0));
        tick_room(&r, T0 + MIN + 1, None);
        assert_eq!(tb.get(Cell::Bucket), (T0 + MIN) / MIN, "advanced at once");
        assert_eq!(tb.get(Cell::Lock), 0, "and released");
    }
}
