//! One request's decision, from the current snapshot.
//!
//! The steady state of an admitted visitor (a valid admission ticket counted by these counters
//! in this bucket or later: nearly every request a site serves) is decided inline; every other
//! case goes through one cold call, so that the compiler lays the common path out as a few
//! contiguous cache lines of code (measured in nginx: its instruction fetches, not its
//! instruction count, are what a request pays for).
//!
//! Every admission first claims a slot from the room's pool (the pool's ledger is what makes
//! the limits exact, see `budget`), then books it to a bucket: the request's own, clamped to the
//! two buckets the tick has opened. The claimer reads which buckets are open *after* its claim,
//! so a claimer that took a slot a tick granted books to a bucket that tick opened (the claim's
//! acquire synchronises with the grant).

use crate::admission::decision::{Decision, Outcome};
use crate::admission::place;
use crate::admission::room::Room;
use crate::admission::set_cookie::set_cookie;
use crate::admission::snapshot::{RoomView, Snapshot};
use crate::clock::Millis;
use crate::config::{QueueingMethod, Rules, SHUFFLE_LANES};
use crate::counters::buckets::{Claim, Renewal};
use crate::counters::queue_lanes::Counted;
use crate::counters::room_tallies::AdmissionKind;
use crate::counters::slot_pool::home_shard;
use crate::counters::tick_block::Cell;
use crate::hash::mix64;
use crate::sync::Ordering;
use crate::ticket::{random_id, Ticket, TicketError, TicketState};

/// Salt of the draw of a pre-queued visitor's place in a shuffle (independent of the per-epoch
/// draws, which use the epoch).
const SHUFFLE_SALT: u64 = 0x5bd1_e995_3c6e_f372;

/// One request's clock and the rules in force at it.
struct At<'a> {
    /// Now (ms since the Unix epoch).
    now: Millis,
    /// The bucket of `now`.
    bucket: u64,
    /// `now` in seconds.
    secs: u32,
    /// The rules in force.
    rules: &'a Rules,
}

/// The bucket an admission made now is booked to: the request's, clamped to the two buckets
/// the tick has opened (read after the claim, see the module documentation).
fn booking_bucket(room: &Room, request_bucket: u64) -> u64 {
    let opened = room.counters.tick_block().get(Cell::Bucket);
    request_bucket.clamp(opened, opened + 1)
}

/// Whether the origin revoked the session of admission ticket `t` (a room with
/// `enabled_origin_commands`; see `revoke`). A call away from the steady path, which only
/// tests `room.revocable` inline: rooms without origin commands keep their code layout.
#[inline(never)]
fn revoked(room: &Room, t: &Ticket, bucket: u64) -> bool {
    revoked_at(room, t.id, u64::from(t.counted), bucket)
}

/// The FIFO arrival bucket `arrival` of a waiter under `rules`, unless its queue is random,
/// everyone queues, or the bucket is a shuffled pre-queue's (see `Decider::queued`).
fn fifo_lane(rules: &Rules, arrival: u64) -> Option<u64> {
    (rules.queueing_method == QueueingMethod::Fifo
        && !rules.queue_all
        && !rules.is_shuffle_lane(arrival))
    .then_some(arrival)
}

/// Whether ticket `id`, counted (or last refreshed) in bucket `counted`, presented in
/// `bucket`, was revoked.
fn revoked_at(room: &Room, id: u64, counted: u64, bucket: u64) -> bool {
    room.counters
        .revocations()
        .is_some_and(|r| r.is_revoked(id, counted, bucket))
}

/// Counts an admission of `kind` in the room's tallies (if its region has them).
fn tally(room: &Room, kind: AdmissionKind) {
    if let Some(t) = room.counters.tallies() {
        t.admitted(kind);
    }
}

/// Counts waiter `t` admitted from the queue at `now_secs`: an admission, its wait, and how
/// much later (or earlier) than the entry its ticket was last promised (see `place`) it got in.
fn waited(room: &Room, t: &Ticket, now_secs: u32) {
    if let Some(tallies) = room.counters.tallies() {
        tallies.admitted(AdmissionKind::FromQueue);
        let promised = place::promised_entry(t);
        tallies.waited(
            u64::from(now_secs.saturating_sub(t.accepted_at)),
            promised.map(|e| i64::from(now_secs) - i64::from(e)),
        );
    }
}

/// Books one claim to `bucket`, or (should its ring slot have been recycled meanwhile: a
/// thread stalled for a whole session) to the bucket open now. Returns where it was booked.
fn book(room: &Room, bucket: u64, request_bucket: u64) -> u64 {
    let buckets = room.counters.buckets();
    let mut b = bucket;
    for _ in 0..4 {
        if buckets.book_admission(b) {
            return b;
        }
        b = booking_bucket(room, request_bucket);
    }
    b
}

impl Snapshot {
    /// Decides one request.
    #[inline]
    pub(crate) fn decide(&self, view: &RoomView, cookie: Option<&[u8]>, now: Millis) -> Decision {
        let room = &view.room;
        // The view's rules by reference (no copy on the steady path), or worked out afresh
        // for a request after a switch the last tick did not see yet.
        // (A suspended room's view has an empty span: it is always worked out here.)
        let afresh;
        let rules = if now >= view.rules_from && now < view.rules_until {
            &view.rules
        } else {
            afresh = room.rules_at(now);
            if afresh.suspended {
                // Suspended: untouched, uncounted.
                return Decision::admit(None, None);
            }
            &afresh
        };
        let now_secs = (now / 1000).min(u32::MAX as u64) as u32;
        let bucket = now / room.bucket_ms;
        let opened = cookie.map(|text| {
            self.keyring
                .open_bytes(text, &room.id, now_secs, self.skew_secs)
        });
        if let Some(Ok(t)) = &opened {
            if t.state == TicketState::Admitted
                && t.incarnation == room.incarnation
                && (u64::from(t.counted) >= bucket
                    || (rules.disable_session_renewal
                        && (rules.session_duration >= room.longest_session
                            || u64::from(t.counted) + u64::from(rules.session_duration) >= bucket)))
                && !(room.revocable && revoked(room, t, bucket))
            {
                // Counted by these counters in this bucket or a later one (or never renewed,
                // and within the session window in force): nothing to change.
                return Decision::admit(None, None);
            }
        }
        let at = At {
            now,
            bucket,
            secs: now_secs,
            rules,
        };
        self.not_steady(view, opened, &at)
    }

    /// Decides one request only for a visitor holding a valid admission ticket of the room
    /// (see `Engine::admit_holder_bytes`); in a `passthrough` room everyone passes, uncounted.
    /// `None` for anyone else, having counted, claimed and queued nothing.
    pub(crate) fn decide_holder(
        &self,
        view: &RoomView,
        cookie: Option<&[u8]>,
        now: Millis,
    ) -> Option<Decision> {
        let room = &view.room;
        let now_secs = (now / 1000).min(u32::MAX as u64) as u32;
        let holds = cookie.is_some_and(|text| {
            self.keyring
                .open_bytes(text, &room.id, now_secs, self.skew_secs)
                .is_ok_and(|t| {
                    t.state == TicketState::Admitted
                        && !(room.revocable && revoked(room, &t, now / room.bucket_ms))
                })
        });
        if holds {
            return Some(self.decide(view, cookie, now));
        }
        let rules = view.rules_at(now);
        // A dry run enforces nothing: like a passthrough room, everyone passes.
        (rules.suspended
            || rules.queueing_method == QueueingMethod::Passthrough
            || room.cfg.mode == crate::config::RoomMode::DryRun)
            .then(|| Decision::admit(None, None))
    }

    /// Every request but an admitted visitor's steady state: new visitors, refused tickets,
    /// renewals, waiters. Cold only for code layout (it is a call away from the hot path);
    /// what it calls is compiled as usual.
    #[cold]
    #[inline(never)]
    fn not_steady(
        &self,
        view: &RoomView,
        opened: Option<Result<Ticket, TicketError>>,
        at: &At<'_>,
    ) -> Decision {
        match opened {
            None => self.arrival(view, at, None),
            Some(Ok(t)) if t.state == TicketState::Admitted => {
                if view.room.revocable && revoked(&view.room, &t, at.bucket) {
                    self.refused(view, TicketError::Revoked, at)
                } else {
                    self.renew(view, t, at)
                }
            }
            Some(Ok(t)) => {
                // A queued ticket keeps its id when its holder is admitted: one whose session
                // the origin ended is refused here too (looked up as of its last refresh).
                let room = &view.room;
                let refreshed = u64::from(t.expires.saturating_sub(room.queued_secs(at.rules)))
                    * 1000
                    / room.bucket_ms;
                if room.revocable && revoked_at(room, t.id, refreshed.max(1), at.bucket) {
                    self.refused(view, TicketError::Revoked, at)
                } else {
                    self.waiter(view, t, at)
                }
            }
            Some(Err(e)) => self.refused(view, e, at),
        }
    }

    /// A visitor whose ticket was refused: counted by reason, then treated as new.
    #[inline(never)]
    fn refused(&self, view: &RoomView, e: TicketError, at: &At<'_>) -> Decision {
        view.room.counters.rejections()[e as usize].fetch_add(1, Ordering::Relaxed);
        self.arrival(view, at, Some(e))
    }

    /// A visitor holding a valid admission ticket that these counters must count now: last
    /// counted in an earlier bucket (moved), or counted by another incarnation of the counters
    /// (counted afresh, once, taking a free slot if there is one: see
    /// `Buckets::count_afresh`). Re-issued its ticket saying so. Both go to the bucket open
    /// for this request's clock, clamped as admissions are: a process whose clock lags by more
    /// than a session must not move a visitor into a bucket the room counts as ended.
    #[inline(never)]
    fn renew(&self, view: &RoomView, t: Ticket, at: &At<'_>) -> Decision {
        let (bucket, now_secs, rules) = (at.bucket, at.secs, at.rules);
        let room = &view.room;
        let buckets = room.counters.buckets();
        let first = bucket.saturating_sub(u64::from(rules.session_duration));
        if rules.session_duration < room.longest_session
            && t.incarnation == room.incarnation
            && u64::from(t.counted) < first
        {
            // Counted before the session window of the rules in force (an event shortened
            // sessions since): its session is over, whatever its ticket says.
            return self.arrival(view, at, None);
        }
        let afresh = || {
            // The slot first, then which bucket is open (see the module documentation).
            let home = home_shard();
            let (open, waiters) = (room.counters.open_pool(), room.counters.waiter_pool());
            let claimed = view
                .may_claim(at.now)
                .then(|| {
                    open.try_claim(home)
                        .map(|shard| (open, shard))
                        .or_else(|| waiters.try_claim(home).map(|shard| (waiters, shard)))
                })
                .flatten();
            let to = booking_bucket(room, bucket);
            // Counted afresh already in a later bucket (by a request whose clock read later):
            // counted, once; its ticket then says that bucket.
            let latest = room.counters.tick_block().get(Cell::Bucket) + 1;
            let (outcome, to) = match buckets.counted_afresh(t.id, to + 1, latest) {
                Some(later) => (Renewal::AlreadyCounted, later),
                None => match buckets.count_afresh(t.id, first, to, claimed.is_some()) {
                    // A sibling request counts it: its ticket names the sibling's bucket.
                    Renewal::TakenFor(b) => (Renewal::AlreadyCounted, b),
                    r => (r, to),
                },
            };
            if outcome != Renewal::Counted {
                if let Some((pool, shard)) = claimed {
                    pool.unclaim(shard);
                }
            }
            (outcome, to)
        };
        let (outcome, counted) = if t.incarnation != room.incarnation {
            afresh()
        } else {
            let to = booking_bucket(room, bucket);
            if u64::from(t.counted) >= to {
                // Counted in the bucket open for this clock already (the clock runs ahead).
                return Decision::admit(None, None);
            }
            match buckets.renew(t.id, u64::from(t.counted), to) {
                Renewal::Untracked => afresh(),
                r => (r, to),
            }
        };
        if outcome == Renewal::NotReady {
            // The tick is late for this bucket: keep the ticket, count it on a later request.
            return Decision::admit(None, None);
        }
        match outcome {
            Renewal::Moved => tally(room, AdmissionKind::Renewed),
            Renewal::Counted => tally(room, AdmissionKind::Recounted),
            _ => {}
        }
        let expires = if rules.disable_session_renewal {
            t.expires
        } else {
            now_secs.saturating_add(room.session_secs(rules))
        };
        let renewed = Ticket {
            counted: counted as u32,
            last_checkin: now_secs,
            expires,
            incarnation: room.incarnation,
            ..t
        };
        Decision::admit(
            Some(set_cookie(&self.keyring, room, &renewed, now_secs)),
            None,
        )
    }

    /// A visitor holding a valid queued ticket.
    #[inline(never)]
    fn waiter(&self, view: &RoomView, t: Ticket, at: &At<'_>) -> Decision {
        let (bucket, now_secs, rules) = (at.bucket, at.secs, at.rules);
        let room = &view.room;
        if rules.queueing_method == QueueingMethod::Passthrough {
            // The gates opened (a reload, an event's method): a waiter let in, with its wait.
            return self.arrival_with(view, t.id, at, None, Some(&t));
        }
        let epoch = u64::from(now_secs / room.refresh_secs);
        let lanes = room.counters.lanes();
        let q = room.counters.layout().queue_slots as u64;
        // Counting uses the slot the waiter was counted in at arrival; only the FIFO order and
        // the position use the arrival clamped to the tracked window.
        let slot = (u64::from(t.arrival) % q) as usize;
        let arrival = u64::from(t.arrival).max(view.queue_base);
        // The epoch it was counted in, if these counters counted it.
        let counted = (t.incarnation == room.incarnation).then_some(u64::from(t.counted));
        let buckets = room.counters.buckets();
        // The longest session of the room and its events: a session shortened by an event
        // does not shorten what a queued ticket may be replayed over.
        let window_start = bucket.saturating_sub(u64::from(room.longest_session));
        // A queued ticket admits once: a replay of it after its holder got in (whose queued
        // ticket expires within the session window this looks at) waits as before.
        let already_in = buckets.admitted_from_queue(t.id, window_start, bucket + 1);
        let tb = room.counters.tick_block();
        let draw = || mix64(t.id ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        // Counts the waiter live in this epoch (moving it from the epoch it was counted in).
        let count_in_epoch = || {
            let c = lanes.count(slot, epoch, t.id);
            if c == Counted::New {
                if let Some(old) = counted.filter(|&c| lanes.in_window(c, epoch)) {
                    lanes.uncount(slot, old);
                }
            }
            c
        };
        let frontier = tb.get(Cell::Frontier);
        let may_enter = !rules.queue_all && !already_in;
        // A waiter of a shuffled pre-queue's bucket at the frontier draws once per refresh
        // epoch: its first request of the epoch (by ticket id, so replays of older tickets
        // included) is counted, then draws; any other request of the epoch does not, so that
        // refreshing more often than the page does gains nothing.
        let fresh = (may_enter
            && rules.queueing_method == QueueingMethod::Fifo
            && arrival == frontier
            && rules.is_shuffle_lane(arrival)
            && counted != Some(epoch))
        .then(count_in_epoch);
        let eligible = may_enter
            && match rules.queueing_method {
                QueueingMethod::Random => draw() < tb.get(Cell::DrawThreshold),
                _ => {
                    arrival < frontier
                        || (arrival == frontier
                            && (!rules.is_shuffle_lane(arrival)
                                || (fresh == Some(Counted::New)
                                    && draw() < tb.get(Cell::FrontierDraw))))
                }
            };
        if eligible && view.may_claim(at.now) {
            let home = home_shard();
            let (waiters, open) = (room.counters.waiter_pool(), room.counters.open_pool());
            let claimed = waiters
                .try_claim(home)
                .map(|shard| (waiters, shard))
                .or_else(|| open.try_claim(home).map(|shard| (open, shard)));
            if let Some((pool, shard)) = claimed {
                let b = booking_bucket(room, bucket);
                let claim = buckets.claim_from_queue(t.id, b);
                if claim == Claim::Won {
                    let b = book(room, b, bucket);
                    waited(room, &t, now_secs);
                    // It leaves the lane it is counted in: this epoch's if it was just
                    // counted, else the one its ticket says.
                    let live_in = match fresh {
                        Some(Counted::New) => Some(epoch),
                        _ => counted,
                    };
                    if let Some(c) = live_in.filter(|&c| lanes.in_window(c, epoch)) {
                        lanes.uncount(slot, c);
                    }
                    return self.admitted(view, t.id, b as u32, at, None);
                }
                // Its slot goes back. A concurrent request with the same ticket was admitted
                // first: this one gets the same admission, its ticket naming the bucket the
                // other booked to (its clock may have read the next or the last bucket).
                pool.unclaim(shard);
                if let Claim::Taken(b) = claim {
                    return self.admitted(view, t.id, b as u32, at, None);
                }
                // (Not prepared: before the room's first tick, or its slot recycled under a
                // stalled request. It waits a refresh more.)
            }
        }
        // Counted in this epoch now (or by a sibling request): its ticket says so from now on.
        let recounted = counted != Some(epoch)
            && !already_in
            && match fresh.unwrap_or_else(count_in_epoch) {
                Counted::New | Counted::Already => true,
                Counted::NotReady => false,
            };
        let place = place::of_waiter(view, rules, &t, arrival, at.now);
        // A new ticket when it is counted in a new epoch, or when the place or wait it
        // remembers improved (they are never shown worse than before: see `place`).
        let cookie = (recounted || place.remembered != t.last_checkin).then(|| {
            let refreshed = if recounted {
                Ticket {
                    counted: epoch as u32,
                    last_checkin: place.remembered,
                    expires: now_secs.saturating_add(room.queued_secs(rules)),
                    incarnation: room.incarnation,
                    ..t
                }
            } else {
                Ticket {
                    last_checkin: place.remembered,
                    ..t
                }
            };
            set_cookie(&self.keyring, room, &refreshed, now_secs)
        });
        let retry = fifo_lane(rules, arrival);
        self.queued(view, cookie, place, retry, at.now, None)
    }

    /// A visitor with no valid ticket.
    #[inline(never)]
    fn arrival(&self, view: &RoomView, at: &At<'_>, err: Option<TicketError>) -> Decision {
        self.arrival_with(view, random_id(), at, err, None)
    }

    /// A new visitor, or a `waiter` of a `passthrough` room (counted as let in from the
    /// queue), with ticket id `id`.
    fn arrival_with(
        &self,
        view: &RoomView,
        id: u64,
        at: &At<'_>,
        err: Option<TicketError>,
        waiter: Option<&Ticket>,
    ) -> Decision {
        let (bucket, now_secs, rules) = (at.bucket, at.secs, at.rules);
        let counted_in = |room: &Room| match waiter {
            // Once per waiter: a replay of its queued ticket (after its holder got in, within
            // the window a queued ticket lives) is let through again, uncounted. It leaves
            // the queue's lane it was counted in.
            Some(t) => {
                let buckets = room.counters.buckets();
                let window_start = bucket.saturating_sub(u64::from(room.longest_session));
                let b = booking_bucket(room, bucket);
                if !buckets.admitted_from_queue(t.id, window_start, bucket + 1)
                    && buckets.claim_from_queue(t.id, b) == Claim::Won
                {
                    waited(room, t, now_secs);
                    let lanes = room.counters.lanes();
                    let epoch = u64::from(now_secs / room.refresh_secs);
                    let counted = (t.incarnation == room.incarnation)
                        .then_some(u64::from(t.counted))
                        .filter(|&c| lanes.in_window(c, epoch));
                    if let Some(c) = counted {
                        let q = room.counters.layout().queue_slots as u64;
                        lanes.uncount((u64::from(t.arrival) % q) as usize, c);
                    }
                }
            }
            None => tally(room, AdmissionKind::New),
        };
        let room = &view.room;
        let cfg = &room.cfg;
        let passthrough = rules.queueing_method == QueueingMethod::Passthrough;
        if passthrough || !rules.queue_all {
            if view.may_claim(at.now) && room.counters.open_pool().try_claim(home_shard()).is_some()
            {
                let b = book(room, booking_bucket(room, bucket), bucket);
                counted_in(room);
                return self.admitted(view, id, b as u32, at, err);
            }
            if passthrough {
                // Never short of slots in practice (the tick keeps a billion free); admitted
                // uncounted, and counted afresh on its next request.
                counted_in(room);
                return self.admitted(view, id, 0, at, err);
            }
        }
        if rules.queueing_method == QueueingMethod::Reject {
            if let Some(t) = room.counters.tallies() {
                t.decided(Outcome::Reject);
            }
            return Decision {
                outcome: Outcome::Reject,
                set_cookie: None,
                position: None,
                estimated_wait_secs: None,
                retry_after_secs: Some(u64::from(cfg.refresh_interval)),
                queue_length: None,
                ticket_error: err,
                ..Decision::admit(None, None)
            };
        }
        let epoch = u64::from(now_secs / room.refresh_secs);
        let arrival = match (rules.queueing_method, rules.shuffle_lanes) {
            // A shuffled pre-queue: one of the buckets before the event's start, drawn at
            // random (the ticket's id is random and sealed: nobody can choose or read it).
            (QueueingMethod::Fifo, Some(first)) if rules.prequeue => {
                first + mix64(id ^ SHUFFLE_SALT) % SHUFFLE_LANES
            }
            // Its own arrival bucket, whatever the method: a random queue does not use it,
            // and the room's FIFO order after an event with another method does.
            _ => bucket,
        };
        let q = room.counters.layout().queue_slots as u64;
        let slot = (arrival % q) as usize;
        // If the lane is not ready (tick is late), the waiter is counted at its next refresh.
        let counted = match room.counters.lanes().count(slot, epoch, id) {
            Counted::NotReady => 0,
            _ => epoch as u32,
        };
        let place = place::of_arrival(view, rules, at.now);
        let t = Ticket {
            id,
            state: TicketState::Queued,
            arrival: arrival as u32,
            accepted_at: now_secs,
            counted,
            // A queued ticket's check-in is its epoch (`counted`): this field remembers the
            // place and wait shown (see `place`).
            last_checkin: place.remembered,
            expires: now_secs.saturating_add(room.queued_secs(rules)),
            incarnation: room.incarnation,
        };
        let cookie = set_cookie(&self.keyring, room, &t, now_secs);
        let retry = fifo_lane(rules, arrival);
        self.queued(view, Some(cookie), place, retry, at.now, err)
    }

    /// An admission ticket for `id`, counted in bucket `counted` (0: not counted yet).
    fn admitted(
        &self,
        view: &RoomView,
        id: u64,
        counted: u32,
        at: &At<'_>,
        err: Option<TicketError>,
    ) -> Decision {
        let now_secs = at.secs;
        let room = &view.room;
        let t = Ticket {
            id,
            state: TicketState::Admitted,
            arrival: 0,
            accepted_at: now_secs,
            counted,
            last_checkin: now_secs,
            expires: now_secs.saturating_add(room.session_secs(at.rules)),
            incarnation: room.incarnation,
        };
        Decision::admit(Some(set_cookie(&self.keyring, room, &t, now_secs)), err)
    }

    /// A queue decision at `place`, for a waiter of FIFO arrival bucket `lane` (`None`: a
    /// random queue, or a shuffled pre-queue's lane, whose waiters wait at the usual pace).
    fn queued(
        &self,
        view: &RoomView,
        set_cookie: Option<String>,
        place: place::Place,
        lane: Option<u64>,
        now: Millis,
        err: Option<TicketError>,
    ) -> Decision {
        let cfg = &view.room.cfg;
        let retry = lane
            .and_then(|a| crate::admission::cluster::allowance_retry_secs(&view.room, a, now))
            .unwrap_or(u64::from(cfg.refresh_interval));
        if let Some(t) = view.room.counters.tallies() {
            t.decided(Outcome::Queue);
        }
        Decision {
            outcome: Outcome::Queue,
            set_cookie,
            position: place.position,
            estimated_wait_secs: place.wait_secs,
            retry_after_secs: Some(retry),
            queue_length: Some(view.queue_length),
            ticket_error: err,
            ..Decision::admit(None, None)
        }
    }
}
