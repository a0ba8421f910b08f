//! Events a log can use: a room's queue starting and stopping, an event's pre-queue opening,
//! an event starting (its pre-queue shuffled) and ending, a configuration reloaded or refused,
//! the cluster tier's store lost and found, a lease coordinator or the lease root learning
//! and the lease root lost and found. One structured line each (JSON), kept in a bounded
//! log the host drains after its tick and writes through its own logger (nginx's error log,
//! Envoy's log, Python's `logging`, a Node event emitter).
//!
//! Room events are found by the tick, never by a request: the process whose tick advances the
//! room (under its tick lock, with the governing configuration) compares what the advance
//! published with what was last logged in the room's shared counters (cells of the tick
//! block), so a host shared by several processes logs each change once, whichever process's
//! tick made it. A queue starts "queueing" when it has live waiters (as the advance counted
//! them) and stops once it has been empty for [`QUIET_MS`] (a room at its limit whose queue
//! comes and goes with single visitors does not log a pair of lines every tick). An event's
//! phase is identified by its start time (a reload that reorders events changes nothing).
//! The process that logged a change holds its line: one that crashes before its host drains
//! it loses that line. A forked child starts with an empty log.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::admission::room::Room;
use crate::clock::Millis;
use crate::counters::tick_block::{Cell, TickBlock};
use crate::fork_safe_lock::ForkSafeLock;

/// How long a room's queue must stay empty before `queueing_stopped` is logged.
pub const QUIET_MS: Millis = 60_000;

/// Events the log keeps before the oldest are dropped (and counted).
pub const EVENT_LOG_CAPACITY: usize = 256;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The room has waiters, after having none.
    QueueingStarted,
    /// The room's queue emptied.
    QueueingStopped,
    /// A scheduled event's pre-queue opened: everyone arriving waits for its start.
    PrequeueOpened,
    /// A scheduled event started (its rules in force).
    EventStarted,
    /// A shuffled pre-queue was drawn into a random order at its event's start.
    ShuffleDone,
    /// A scheduled event ended: the room's own rules again.
    EventEnded,
    /// A new configuration took effect.
    ConfigReloaded,
    /// A configuration was refused; the running one keeps serving.
    ConfigRefused,
    /// The cluster tier's store stopped answering.
    ClusterOutageBegan,
    /// The cluster tier's store answers again.
    ClusterOutageEnded,
    /// A lease resource's grants are in learning mode: only what clients report holding is
    /// given back (a coordinator's first lease after start, or the lease root's table after
    /// the store lost it or another server took over). Field `source`: `coordinator` or
    /// `root`.
    LeaseLearningStarted,
    /// A lease resource's learning mode ended: grants are fair shares again.
    LeaseLearningEnded,
    /// A leaf coordinator's lease root stopped answering.
    LeaseRootOutageBegan,
    /// A leaf coordinator's lease root answers again.
    LeaseRootOutageEnded,
}

impl EventKind {
    /// Its name in a log line: `queueing_started`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::QueueingStarted => "queueing_started",
            EventKind::QueueingStopped => "queueing_stopped",
            EventKind::PrequeueOpened => "prequeue_opened",
            EventKind::EventStarted => "event_started",
            EventKind::ShuffleDone => "shuffle_done",
            EventKind::EventEnded => "event_ended",
            EventKind::ConfigReloaded => "config_reloaded",
            EventKind::ConfigRefused => "config_refused",
            EventKind::ClusterOutageBegan => "cluster_outage_began",
            EventKind::ClusterOutageEnded => "cluster_outage_ended",
            EventKind::LeaseLearningStarted => "lease_learning_started",
            EventKind::LeaseLearningEnded => "lease_learning_ended",
            EventKind::LeaseRootOutageBegan => "lease_root_outage_began",
            EventKind::LeaseRootOutageEnded => "lease_root_outage_ended",
        }
    }

    /// Whether it calls for an operator's attention (a refusal, an outage): a host logs it as
    /// a warning, the rest as notices.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventKind::ConfigRefused
                | EventKind::ClusterOutageBegan
                | EventKind::LeaseRootOutageBegan
        )
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When (ms since the Unix epoch, the engine's clock).
    pub at: Millis,
    /// What happened.
    pub kind: EventKind,
    /// The room it happened to, if any.
    pub room: Option<String>,
    /// Further fields: the queue's length, the event's name, the error.
    pub fields: Vec<(&'static str, String)>,
}

impl Event {
    /// The event as one line of JSON: `{"event":"queueing_started","at_ms":...,"room":"shop",
    /// "queue_length":"12"}` (field values are strings).
    pub fn to_json(&self) -> String {
        let mut out = format!(
            "{{\"event\":\"{}\",\"at_ms\":{}",
            self.kind.as_str(),
            self.at
        );
        if let Some(room) = &self.room {
            let _ = write!(out, ",\"room\":{}", json_string(room));
        }
        for (k, v) in &self.fields {
            let _ = write!(out, ",\"{k}\":{}", json_string(v));
        }
        out.push('}');
        out
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// A bounded log of events, drained by the host: behind a lock a forked child takes over
/// (a ticker thread may hold it at the fork), and emptied in a child (its parent logs what
/// was pending).
pub(crate) struct EventLog {
    events: ForkSafeLock<(u64, VecDeque<Event>)>,
    dropped: AtomicU64,
}

impl Default for EventLog {
    fn default() -> Self {
        Self {
            events: ForkSafeLock::new((crate::random::fork_generation(), VecDeque::new())),
            dropped: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog").finish_non_exhaustive()
    }
}

impl EventLog {
    /// The queue, emptied first in a forked child.
    fn queue(&self) -> crate::fork_safe_lock::Guard<'_, (u64, VecDeque<Event>)> {
        let mut g = self.events.lock();
        let generation = crate::random::fork_generation();
        if g.0 != generation {
            *g = (generation, VecDeque::new());
        }
        g
    }

    /// Adds `event`, dropping the oldest when the log is full.
    pub(crate) fn push(&self, event: Event) {
        let mut g = self.queue();
        let q = &mut g.1;
        if q.len() >= EVENT_LOG_CAPACITY {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(event);
    }

    /// The oldest event, if `take` accepts it (otherwise it stays first).
    pub(crate) fn pop_if(&self, take: impl FnOnce(&Event) -> bool) -> Option<Event> {
        let mut g = self.queue();
        if take(g.1.front()?) {
            g.1.pop_front()
        } else {
            None
        }
    }

    /// Every event logged since the last drain, oldest first.
    pub(crate) fn drain(&self) -> Vec<Event> {
        self.queue().1.drain(..).collect()
    }

    /// Events dropped because the log was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The phase of the room's rules at `clock` as logged: 0 no event, else the event's start
/// (ms) times 2, plus 1 in its pre-queue, plus 2 (never 0).
fn phase(room: &Room, clock: Millis) -> u64 {
    let rules = room.rules_at(clock);
    rules.event.map_or(0, |e| {
        let start = room.cfg.events.get(e).map_or(0, |e| e.event_start.millis());
        (start << 1 | u64::from(rules.prequeue)) + 2
    })
}

/// The event starting at `start` (ms) in the room's configuration: its name, or its start
/// time if no event of the configuration starts then (removed by a reload).
fn event_name(room: &Room, start: u64) -> String {
    room.cfg
        .events
        .iter()
        .find(|e| e.event_start.millis() == start)
        .map_or_else(
            || crate::config::Instant::from_millis(start).to_rfc3339(),
            |e| e.name.clone(),
        )
}

/// Whether the event starting at `start` shuffles its pre-queue.
fn shuffles(room: &Room, start: u64) -> bool {
    room.cfg
        .events
        .iter()
        .any(|e| e.event_start.millis() == start && e.shuffle_at_event_start)
}

/// Logs what the advance that just ran changed in `room` (see the module documentation), at
/// `now`: called by the tick lock's holder, for the governing configuration, right after its
/// advance.
pub(crate) fn observe(room: &Room, tb: &TickBlock<'_>, log: &EventLog, now: Millis) {
    let name = Some(room.cfg.name.clone());
    let queue = tb.get(Cell::QueueLength);
    let was = tb.get(Cell::LoggedQueueing);
    if queue > 0 {
        tb.set(Cell::QueueEmptySince, 0);
        if was != 2 {
            tb.set(Cell::LoggedQueueing, 2);
            log.push(Event {
                at: now,
                kind: EventKind::QueueingStarted,
                room: name.clone(),
                fields: vec![("queue_length", queue.to_string())],
            });
        }
    } else if was == 2 {
        let since = tb.get(Cell::QueueEmptySince);
        if since == 0 {
            tb.set(Cell::QueueEmptySince, now.max(1));
        } else if now.saturating_sub(since) >= QUIET_MS {
            tb.set(Cell::LoggedQueueing, 1);
            tb.set(Cell::QueueEmptySince, 0);
            log.push(Event {
                at: now,
                kind: EventKind::QueueingStopped,
                room: name.clone(),
                fields: vec![("empty_for_ms", now.saturating_sub(since).to_string())],
            });
        }
    }
    let now_phase = phase(room, tb.get(Cell::RulesClock));
    let was = tb.get(Cell::LoggedPhase);
    if was == now_phase {
        return;
    }
    tb.set(Cell::LoggedPhase, now_phase);
    // The event's start, and whether in its pre-queue, of a phase.
    let event = |p: u64| (p >= 2).then(|| ((p - 2) >> 1, (p - 2) & 1 == 1));
    let (before, after) = (event(was), event(now_phase));
    let push = |kind, start: u64| {
        log.push(Event {
            at: now,
            kind,
            room: name.clone(),
            fields: vec![("event_name", event_name(room, start))],
        });
    };
    let same = |a: Option<(u64, bool)>, b: Option<(u64, bool)>| matches!((a, b), (Some((x, _)), Some((y, _))) if x == y);
    if let Some((start, _)) = before.filter(|_| !same(before, after)) {
        push(EventKind::EventEnded, start);
    }
    if let Some((start, prequeue)) = after {
        let was_prequeue = same(before, after) && before.is_some_and(|(_, p)| p);
        if prequeue && !same(before, after) {
            push(EventKind::PrequeueOpened, start);
        } else if !prequeue && (!same(before, after) || was_prequeue) {
            push(EventKind::EventStarted, start);
            if was_prequeue && shuffles(room, start) {
                push(EventKind::ShuffleDone, start);
            }
        }
    }
}
