//! The settings a room enforces at one instant: its own, or those of the event in force.

use crate::config::event::{event_at, next_switch, switches, EventPhase};
use crate::config::room::{QueueingMethod, RoomConfig};

/// Arrival buckets a shuffled pre-queue is spread over, just before its event's start bucket:
/// a pre-queued visitor's ticket carries one of them, drawn at random, as its arrival, so
/// that the FIFO queue serves the pre-queue in a random order (see `admission::decide`).
pub const SHUFFLE_LANES: u64 = 64;

/// What a room enforces at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The room is suspended: requests pass untouched, nothing is counted.
    pub suspended: bool,
    /// `total_active_users` in force.
    pub total_active_users: u64,
    /// `new_users_per_minute` in force.
    pub new_users_per_minute: u64,
    /// `session_duration` in force (buckets).
    pub session_duration: u32,
    /// `disable_session_renewal` in force.
    pub disable_session_renewal: bool,
    /// `queueing_method` in force.
    pub queueing_method: QueueingMethod,
    /// Everyone queues (the room's `queue_all`, or an event's pre-queue).
    pub queue_all: bool,
    /// The event in force (its index in the room's `events`), if any.
    pub event: Option<usize>,
    /// In that event's pre-queue.
    pub prequeue: bool,
    /// The arrival buckets of a shuffled pre-queue (`first..first + SHUFFLE_LANES`), for the
    /// event in force or about to start; `None` when its pre-queue is not shuffled.
    pub shuffle_lanes: Option<u64>,
}

impl Rules {
    /// Whether `arrival` is one of the shuffled pre-queue's arrival buckets.
    pub fn is_shuffle_lane(&self, arrival: u64) -> bool {
        self.shuffle_lanes
            .is_some_and(|first| arrival >= first && arrival < first + SHUFFLE_LANES)
    }
}

impl RoomConfig {
    /// The rules in force at `now_ms` (ms since the Unix epoch), with buckets of `bucket_ms`.
    pub fn rules_at(&self, now_ms: u64, bucket_ms: u64) -> Rules {
        let mut r = Rules {
            suspended: self.suspended,
            total_active_users: self.total_active_users,
            new_users_per_minute: self.new_users_per_minute,
            session_duration: self.session_duration,
            disable_session_renewal: self.disable_session_renewal,
            queueing_method: self.queueing_method,
            queue_all: self.queue_all,
            event: None,
            prequeue: false,
            shuffle_lanes: None,
        };
        if let Some(at) = event_at(&self.events, now_ms) {
            let e = at.event;
            r.total_active_users = e.total_active_users.unwrap_or(r.total_active_users);
            r.new_users_per_minute = e.new_users_per_minute.unwrap_or(r.new_users_per_minute);
            r.session_duration = e.session_duration.unwrap_or(r.session_duration);
            r.disable_session_renewal = e
                .disable_session_renewal
                .unwrap_or(r.disable_session_renewal);
            r.queueing_method = e.queueing_method.unwrap_or(r.queueing_method);
            r.event = Some(at.index);
            r.prequeue = at.phase == EventPhase::Prequeue;
            r.queue_all |= r.prequeue;
            if e.shuffle_at_event_start && e.prequeue_start.is_some() {
                let start_bucket = e.event_start.millis() / bucket_ms.max(1);
                r.shuffle_lanes = Some(start_bucket.saturating_sub(SHUFFLE_LANES));
            }
        }
        r
    }

    /// The rules in force at `now_ms`, and the span `from..until` (ms) over which they stay
    /// in force (0 and `u64::MAX` at the ends of the schedule).
    pub fn rules_span(&self, now_ms: u64, bucket_ms: u64) -> (Rules, u64, u64) {
        let until = next_switch(&self.events, now_ms).unwrap_or(u64::MAX);
        let from = switches(&self.events)
            .filter(|&t| t <= now_ms)
            .max()
            .unwrap_or(0);
        (self.rules_at(now_ms, bucket_ms), from, until)
    }

    /// The longest `session_duration` the room or any of its events sets: what its counters
    /// are sized for.
    pub fn longest_session(&self) -> u32 {
        self.events
            .iter()
            .filter_map(|e| e.session_duration)
            .fold(self.session_duration, u32::max)
    }

    /// The largest `total_active_users` the room or any of its events sets: what its
    /// counters are sized for.
    pub fn largest_total(&self) -> u64 {
        self.events
            .iter()
            .filter_map(|e| e.total_active_users)
            .fold(self.total_active_users, u64::max)
    }

    /// Whether the origin may revoke this room's sessions (`enabled_origin_commands`).
    pub fn revocable(&self) -> bool {
        self.enabled_origin_commands
            .contains(&crate::config::OriginCommand::Revoke)
    }

    /// How many revocations the room keeps at once (`max_revocations`, or its default); 0
    /// when the origin may not revoke.
    pub fn revocation_capacity(&self) -> u32 {
        match (self.revocable(), self.max_revocations) {
            (false, _) => 0,
            (true, 0) => self.largest_total().clamp(1024, 1 << 20) as u32,
            (true, n) => n,
        }
    }

    /// The strictest limits (`total_active_users`, `new_users_per_minute`) in force at any
    /// instant of `from_ms..=to_ms`: what a grant good over that span may be computed from.
    pub fn strictest_limits(&self, from_ms: u64, to_ms: u64, bucket_ms: u64) -> (u64, u64) {
        let mut at = from_ms;
        let mut limits = (u64::MAX, u64::MAX);
        loop {
            let r = self.rules_at(at, bucket_ms);
            limits = (
                limits.0.min(r.total_active_users),
                limits.1.min(r.new_users_per_minute),
            );
            match next_switch(&self.events, at) {
                Some(t) if t <= to_ms => at = t,
                _ => return limits,
            }
        }
    }
}
