//! A waiter's place in line and estimated wait: estimated from the last tick's queue figures,
//! and never shown worse than what the same visitor was shown before.
//!
//! **Estimate.** FIFO: the live waiters of the arrival buckets before the visitor's, plus its
//! share of its own bucket's by arrival time (the fraction of the bucket that had passed when
//! it arrived; of the bucket so far, for the bucket still open), plus one. A shuffled
//! pre-queue's bucket is served in a random order: the middle of it. Random queues: the queue
//! length. The wait is the place over the recent admission rate (see `tick`: it starts at the
//! new-user rate in force); it is not known (`None`) while everyone queues, when the room has
//! let nobody in for a long while, or past a week.
//!
//! **Never back.** A queued ticket carries what it was last shown, packed into its
//! `last_checkin` field (a queued ticket's check-in time is its refresh epoch, `counted`):
//! the place (18 bits; at most 262,142 is remembered) and the estimated time of entry
//! (12 bits, in 8-second steps after its arrival, rounded down: a wait shown may undercut
//! the estimate by up to 8 s; at most about 9 hours).
//! The place shown is the smaller of the estimate and the remembered place, and the wait the
//! smaller of the estimate and the time left to the remembered entry (once that has passed,
//! nothing: the queue is slower than promised; a queue that stops shows no wait at all). Packed values stay
//! below 2^30, which no time since 2004 is: a ticket sealed before this carried a time there
//! and remembers nothing. Only a refresh's new ticket carries the new values: a visitor who
//! keeps an older ticket (the page's refresh keeps the newest) may see an older figure again.

use crate::admission::snapshot::RoomView;
use crate::config::{QueueingMethod, Rules};
use crate::ticket::Ticket;

/// Bits of the remembered place.
const PLACE_BITS: u32 = 18;
/// The place remembered when it is this large or larger: nothing (no bound).
const PLACE_NONE: u64 = (1 << PLACE_BITS) - 1;
/// Seconds per step of the remembered entry time.
const ETA_STEP_SECS: u32 = 8;
/// Steps of the remembered entry time; the largest means nothing (no bound).
const ETA_NONE: u32 = (1 << (30 - PLACE_BITS)) - 1;

/// A waiter's place and wait as shown, and what its ticket remembers of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// Place in line (1: next), or none (a pre-queue).
    pub(crate) position: Option<u64>,
    /// Estimated seconds until admission.
    pub(crate) wait_secs: Option<u64>,
    /// The packed value for the ticket's `last_checkin`.
    pub(crate) remembered: u32,
}

/// The remembered place and entry time (seconds since the Unix epoch) of a queued ticket.
fn remembered(t: &Ticket) -> (Option<u64>, Option<u32>) {
    let v = t.last_checkin;
    if v == 0 || v >= 1 << 30 {
        return (None, None);
    }
    let place = u64::from(v & ((1 << PLACE_BITS) - 1));
    let eta = v >> PLACE_BITS;
    (
        (place != 0 && place != PLACE_NONE).then_some(place),
        (eta != ETA_NONE).then(|| t.accepted_at.saturating_add(eta * ETA_STEP_SECS)),
    )
}

/// The entry time (seconds since the Unix epoch) queued ticket `t` was last promised, if any:
/// the earliest it was ever shown, since a promise is never shown worse (see the module
/// documentation), and so never later than the first.
pub(crate) fn promised_entry(t: &Ticket) -> Option<u32> {
    remembered(t).1
}

/// The packed value remembering `position` and an entry at `entry_secs`, for a ticket that
/// arrived at `accepted_at`.
fn remember(position: Option<u64>, entry_secs: Option<u64>, accepted_at: u32) -> u32 {
    let place = position.map_or(0, |p| p.min(PLACE_NONE)) as u32;
    let eta = entry_secs.map_or(ETA_NONE, |e| {
        let steps = e.saturating_sub(u64::from(accepted_at)) / u64::from(ETA_STEP_SECS);
        steps.min(u64::from(ETA_NONE)) as u32
    });
    (eta << PLACE_BITS) | place
}

/// Admissions per second below which a room is taken to admit nobody (one an hour): its
/// waits are not known.
const STALLED_RATE: f64 = 1.0 / 3600.0;

/// Longest wait ever promised: a week (a wait longer than that is not known either).
const LONGEST_WAIT_SECS: u64 = 7 * 86_400;

/// The estimated wait for `position`, in seconds; `None` when the room admits nobody (everyone
/// queues, or it has let nobody in for a long while) or the wait would pass a week.
fn wait_for(view: &RoomView, rules: &Rules, position: u64) -> Option<u64> {
    let rate = view.rate_per_sec;
    if rules.queue_all || rate.is_nan() || rate < STALLED_RATE {
        return None;
    }
    let wait = (position as f64 / rate).ceil();
    (wait <= LONGEST_WAIT_SECS as f64).then_some(wait as u64)
}

/// The estimated place of a FIFO waiter that arrived at `accepted_at` (seconds) in arrival
/// bucket `arrival` (clamped to the tracked window), at `now` (ms).
fn fifo_estimate(view: &RoomView, rules: &Rules, arrival: u64, accepted_at: u32, now: u64) -> u64 {
    let Some(i) = arrival
        .checked_sub(view.queue_base)
        .map(|i| i as usize)
        .filter(|&i| i < view.ahead.len())
    else {
        return view.queue_length.max(1);
    };
    let ahead = view.ahead[i];
    let next = view.ahead.get(i + 1).copied().unwrap_or(view.queue_length);
    let live = next.saturating_sub(ahead);
    let within = if rules.is_shuffle_lane(arrival) {
        live / 2
    } else {
        let bucket_ms = view.room.bucket_ms;
        let start = arrival.saturating_mul(bucket_ms);
        let arrived = (u64::from(accepted_at) * 1000).clamp(start, start + bucket_ms);
        // The part of the bucket that had passed when it arrived (of the part so far, for
        // the bucket still open).
        let span = now.clamp(start + 1, start + bucket_ms) - start;
        let share = (arrived - start).min(span) as f64 / span as f64;
        ((live as f64 * share) as u64).min(live.saturating_sub(1))
    };
    ahead + within + 1
}

/// The place and wait of a waiter holding queued ticket `t` (its arrival clamped to the
/// tracked window: `arrival`) at `now` (ms) under `rules`.
pub(crate) fn of_waiter(
    view: &RoomView,
    rules: &Rules,
    t: &Ticket,
    arrival: u64,
    now: u64,
) -> Place {
    if rules.prequeue {
        return Place {
            position: None,
            wait_secs: None,
            remembered: 0,
        };
    }
    let estimate = match rules.queueing_method {
        QueueingMethod::Fifo => fifo_estimate(view, rules, arrival, t.accepted_at, now),
        _ => view.queue_length.max(1),
    };
    let (was_place, was_entry) = remembered(t);
    let position = was_place.map_or(estimate, |p| estimate.min(p));
    let now_secs = now / 1000;
    // The entry time promised bounds the wait (once it has passed, the wait shown is
    // nothing until the visitor gets in: "less than a minute"; a room that lets nobody in
    // for a long while shows none, see `wait_for`).
    let promised = was_entry.map(|e| u64::from(e).saturating_sub(now_secs));
    let wait = match (wait_for(view, rules, position), promised) {
        (Some(w), Some(p)) => Some(w.min(p)),
        (w, _) => w,
    };
    Place {
        position: Some(position),
        wait_secs: wait,
        remembered: remember(
            Some(position),
            wait.map(|w| now_secs.saturating_add(w)),
            t.accepted_at,
        ),
    }
}

/// The place and wait of a visitor queued now, at `now` (ms): last in line (none in a
/// pre-queue).
pub(crate) fn of_arrival(view: &RoomView, rules: &Rules, now: u64) -> Place {
    let now_secs = now / 1000;
    if rules.prequeue {
        return Place {
            position: None,
            wait_secs: None,
            remembered: 0,
        };
    }
    let position = view.queue_length + 1;
    let wait = wait_for(view, rules, position);
    Place {
        position: Some(position),
        wait_secs: wait,
        remembered: remember(
            Some(position),
            wait.map(|w| now_secs.saturating_add(w)),
            now_secs as u32,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ticket::TicketState;

    fn ticket(accepted_at: u32, last_checkin: u32) -> Ticket {
        Ticket {
            id: 1,
            state: TicketState::Queued,
            arrival: 0,
            accepted_at,
            counted: 0,
            last_checkin,
            expires: u32::MAX,
            incarnation: 0,
        }
    }

    #[test]
    fn packing_round_trips_and_old_tickets_remember_nothing() {
        let at = 1_800_000_000;
        let v = remember(Some(1234), Some(u64::from(at) + 650), at);
        assert!(v < 1 << 30);
        // 650 s rounds down to 648 (81 steps of 8).
        assert_eq!(remembered(&ticket(at, v)), (Some(1234), Some(at + 648)));
        // A time (a ticket sealed before places were remembered) is nothing.
        assert_eq!(remembered(&ticket(at, at + 5)), (None, None));
        // Too far or too large to remember: nothing, never a wrong bound.
        let v = remember(Some(5_000_000), Some(u64::from(at) + 100_000), at);
        assert_eq!(remembered(&ticket(at, v)), (None, None));
        assert_eq!(remembered(&ticket(at, 0)), (None, None));
    }
}
