//! How many slots a room's pools may hold, and how a tick moves them there.
//!
//! The limits are turned into one number: the most *claims* (slots ever taken from the room's
//! pools) they allow, counted since the counters were made. Every admission is one claim, then
//! booked to a bucket. Both limits can be written with quantities that no claim in flight can
//! make wrong:
//!
//! - per minute: the admissions booked to the current bucket, plus claims not booked yet, stay
//!   within `new_users_per_minute`. As a bound on claims: `new_users_per_minute + (admissions
//!   booked to other buckets)`. A claim still in flight counts against the current bucket (it is
//!   in the claims, not yet in "other buckets"), which is exact when it lands there and errs on
//!   the side of fewer admissions when it lands in the next. Admissions may be booked to the
//!   next bucket too (a process whose clock is ahead), so the bound is taken for both.
//! - total: visitors active = claims not booked to a bucket that left the session window, plus
//!   moves and afresh counts in the window. As a bound on claims: `total_active_users +
//!   (admissions booked to departed buckets) - (moves in the window)`. A claim in flight is
//!   recent: it counts as active, which it is.
//!
//! Neither bound mentions how many claims were made, so the tick never has to read the pools at
//! one instant (which it cannot): the pools' ledger (granted minus revoked, see `slot_pool`)
//! is simply moved to the bound, and claims can never pass it.

use crate::counters::slot_pool::SlotPool;
use crate::env::{self, FaultPoint};

/// Free slots a `passthrough` room keeps topped up to (it admits everyone; claims still count).
pub(crate) const PASSTHROUGH_FREE: u64 = 1 << 30;

/// What the claim limit is computed from (read by the tick, see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Figures {
    /// `total_active_users`.
    pub(crate) total_active_users: u64,
    /// `new_users_per_minute` (for the current bucket).
    pub(crate) new_users_per_minute: u64,
    /// `new_users_per_minute` for the next bucket (the same, unless a cluster allowance says
    /// otherwise).
    pub(crate) new_users_next: u64,
    /// Admissions booked to any bucket since the counters were made.
    pub(crate) admitted_ever: u64,
    /// Admissions booked to buckets before the session window.
    pub(crate) admitted_departed: u64,
    /// Admissions booked to the current bucket.
    pub(crate) admitted_current: u64,
    /// Admissions booked to the next bucket (clocks ahead of the tick's).
    pub(crate) admitted_next: u64,
    /// Moves into, minus moves out of, plus afresh counts in the session window.
    pub(crate) moved_in_window: i64,
}

impl Figures {
    /// Visitors active in the session window (claims in flight aside).
    pub(crate) fn active(&self) -> u64 {
        let booked = self.admitted_ever - self.admitted_departed.min(self.admitted_ever);
        (booked as i128 + self.moved_in_window as i128).max(0) as u64
    }
}

/// The most claims, counted since the counters were made, the room's limits allow.
pub(crate) fn claim_limit(f: &Figures) -> u64 {
    let in_bucket =
        |allowed: u64, booked: u64| allowed.saturating_add(f.admitted_ever.saturating_sub(booked));
    let per_minute = in_bucket(f.new_users_per_minute, f.admitted_current)
        .min(in_bucket(f.new_users_next, f.admitted_next));
    let total = (i128::from(f.total_active_users) + i128::from(f.admitted_departed)
        - i128::from(f.moved_in_window))
    .clamp(0, i128::from(u64::MAX)) as u64;
    per_minute.min(total)
}

/// What a tick wants the two pools to hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// Slots kept for waiters the queue has reached.
    pub(crate) waiters: u64,
    /// Slots open to anyone.
    pub(crate) open: u64,
}

/// FIFO: waiters at or before the frontier hold the free slots they need; the frontier moves
/// forward (over arrival buckets `base..=bucket`, whose live waiters are `live`) until the free
/// slots are spoken for or nobody is left behind it. New arrivals get slots only when nobody
/// waits behind the frontier. Returns the split and the new frontier.
pub(crate) fn fifo(free: u64, live: &[u64], base: u64, bucket: u64, frontier: u64) -> (Split, u64) {
    let queue_length: u64 = live.iter().sum();
    let mut frontier = frontier.max(base.saturating_sub(1));
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
    let waiters = free.min(reserved);
    let open = if behind == 0 { free - waiters } else { 0 };
    (Split { waiters, open }, frontier)
}

/// FIFO across hosts: the frontier is the cluster's (`frontier`, not moved here); waiters at
/// or before it hold the free slots they need, and new arrivals get slots only when nobody
/// waits behind it, here or (`behind_elsewhere`) at another host.
pub(crate) fn fifo_global(
    free: u64,
    live: &[u64],
    base: u64,
    frontier: u64,
    behind_elsewhere: u64,
) -> Split {
    let queue_length: u64 = live.iter().sum();
    let reserved: u64 = if frontier >= base {
        let last = ((frontier - base) as usize).min(live.len().saturating_sub(1));
        live.get(..=last).map_or(0, |l| l.iter().sum())
    } else {
        0
    };
    let waiters = free.min(reserved);
    let behind = queue_length - reserved.min(queue_length) + behind_elsewhere;
    let open = if behind == 0 { free - waiters } else { 0 };
    Split { waiters, open }
}

/// Random: every live waiter has the same chance; waiters get as many slots as there are
/// waiters (up to what is free), the rest is open. Returns the split and the draw threshold
/// (a waiter whose draw is below it may enter).
pub(crate) fn random(free: u64, queue_length: u64) -> (Split, u64) {
    let waiters = free.min(queue_length);
    let threshold = if queue_length == 0 {
        0
    } else if waiters >= queue_length {
        u64::MAX
    } else {
        ((u128::from(waiters) << 64) / u128::from(queue_length)) as u64
    };
    (
        Split {
            waiters,
            open: free - waiters,
        },
        threshold,
    )
}

/// Moves the pools towards `want` without letting the slots granted (net of revokes) pass
/// `limit`: slots are revoked first, from whichever pool holds more than wanted (a revoke takes
/// only slots still free), then granted, waiters first, within what the limit leaves.
/// `granted` is the ledger before (read from the pools, see `slot_pool`); the ledger after is
/// returned. `start` spreads grants; `go_on` is asked before each grant (an advance whose lock
/// was taken over while it was stopped grants nothing more). A crash anywhere in between
/// leaves the pools' ledger saying exactly what was granted: every grant is recorded in the
/// same atomic add that makes it.
pub(crate) fn apply(
    waiters: SlotPool<'_>,
    open: SlotPool<'_>,
    granted: u64,
    limit: u64,
    want: Split,
    start: usize,
    mut go_on: impl FnMut() -> bool,
) -> u64 {
    let pools = [(waiters, want.waiters), (open, want.open)];
    let deltas = pools.map(|(pool, want)| i128::from(want) - i128::from(pool.free()));
    let mut ledger = i128::from(granted);
    for ((pool, _), d) in pools.iter().zip(deltas) {
        if d < 0 {
            ledger -= i128::from(pool.revoke((-d) as u64));
        }
    }
    env::fault_point(FaultPoint::AdvanceRevoked);
    for ((pool, _), d) in pools.iter().zip(deltas) {
        let room = i128::from(limit) - ledger;
        let add = d.min(room).max(0);
        if add > 0 {
            ledger += i128::from(pool.grant_while(add as u64, start, &mut go_on));
            env::fault_point(FaultPoint::AdvanceGranted);
        }
    }
    ledger.clamp(0, i128::from(u64::MAX)) as u64
}

/// The free slots a tick can hand out: what the limit leaves beyond the ledger, plus what the
/// pools hold now.
pub(crate) fn free_slots(limit: u64, granted: u64, held: u64) -> u64 {
    (i128::from(limit) - i128::from(granted) + i128::from(held)).max(0) as u64
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicU64;
    use crossbeam_utils::CachePadded;

    fn shards(n: usize) -> Vec<CachePadded<AtomicU64>> {
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect()
    }

    #[test]
    fn limits_as_a_bound_on_claims() {
        let fresh = Figures {
            total_active_users: 37,
            new_users_per_minute: 100,
            new_users_next: 100,
            ..Figures::default()
        };
        assert_eq!(claim_limit(&fresh), 37);
        // 37 admitted and booked: the same bound (nothing left the room).
        let full = Figures {
            admitted_ever: 37,
            admitted_current: 37,
            ..fresh
        };
        assert_eq!(claim_limit(&full), 37);
        // Their bucket left the window, but 30 moved on into it: 7 more.
        let later = Figures {
            admitted_departed: 37,
            admitted_current: 0,
            moved_in_window: 30,
            ..full
        };
        assert_eq!(later.active(), 30);
        assert_eq!(claim_limit(&later), 44);
        // The minute binds: 10 per minute, 6 booked now, 3 ahead in the next bucket.
        let minute = Figures {
            total_active_users: 1000,
            new_users_per_minute: 10,
            new_users_next: 10,
            admitted_ever: 20,
            admitted_current: 6,
            admitted_next: 3,
            ..Figures::default()
        };
        assert_eq!(claim_limit(&minute), 10 + 14);
        // More afresh counts than the room holds: no claims at all beyond those made.
        let over = Figures {
            moved_in_window: 50,
            ..fresh
        };
        assert_eq!(claim_limit(&over), 0);
    }

    #[test]
    fn fifo_and_random_splits() {
        // 3 free, waiters 2 and 4 in buckets 10 and 11: bucket 10 entirely, 1 of 11.
        let (s, f) = fifo(3, &[2, 4, 0], 10, 12, 0);
        assert_eq!(
            (s, f),
            (
                Split {
                    waiters: 3,
                    open: 0
                },
                11
            )
        );
        // Nobody waits: everything is open.
        assert_eq!(
            fifo(5, &[0, 0], 10, 11, 0).0,
            Split {
                waiters: 0,
                open: 5
            }
        );
        let (s, t) = random(4, 8);
        assert_eq!(
            s,
            Split {
                waiters: 4,
                open: 0
            }
        );
        assert_eq!(t, 1 << 63);
    }

    #[test]
    fn apply_never_passes_the_limit() {
        let (w, o) = (shards(2), shards(2));
        let (wp, op) = (SlotPool::new(&w), SlotPool::new(&o));
        let mut g = 0u64;
        let step = |g: &mut u64, limit, want| {
            *g = apply(wp, op, *g, limit, want, 0, || true);
            assert_eq!(
                *g as u32,
                wp.ledger32().wrapping_add(op.ledger32()),
                "the pools are the ledger"
            );
        };
        step(
            &mut g,
            10,
            Split {
                waiters: 0,
                open: 10,
            },
        );
        assert_eq!((g, op.free()), (10, 10));
        // Four claimed; the queue wants 5 of the 6 left: taken from the open pool.
        for _ in 0..4 {
            op.try_claim(0).unwrap();
        }
        step(
            &mut g,
            10,
            Split {
                waiters: 5,
                open: 1,
            },
        );
        assert_eq!((g, wp.free(), op.free()), (10, 5, 1));
        // The limit drops below what was granted: only free slots are revoked.
        step(
            &mut g,
            3,
            Split {
                waiters: 0,
                open: 0,
            },
        );
        assert_eq!(
            (g, wp.free(), op.free()),
            (4, 0, 0),
            "4 claimed stay claimed"
        );
        // Wanting more than the limit allows gets only what it allows.
        step(
            &mut g,
            6,
            Split {
                waiters: 1,
                open: 9,
            },
        );
        assert_eq!((g, wp.free(), op.free()), (6, 1, 1));
    }
}
