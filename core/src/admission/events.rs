//! Events a log can use: a room's queue starting and stopping, an event's pre-queue opening,
//! an event starting (its pre-queue shuffled) and ending, a configuration reloaded or refused,
//! the cluster tier's store lost and found. One structured line each (JSON), kept in a bounded
//! log the host drains after its tick and writes through its own logger (nginx's error log,
//! Envoy's log, Python's `logging`, a Node event emitter).
//!
//! Room events are found by the tick, never by a request: each engine's tick compares what it
//! sees in the room's shared counters with what was last logged there (two cells of the tick
//! block) and logs a change only if it wins the swap of that cell, so a host shared by several
//! processes logs each change once, whichever process's tick saw it. A queue is "queueing"
//! while it has live waiters (as the last advance counted them).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::admission::room::Room;
use crate::clock::Millis;
use crate::counters::tick_block::Cell;

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
        }
    }

    /// Whether it calls for an operator's attention (a refusal, an outage): a host logs it as
    /// a warning, the rest as notices.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventKind::ConfigRefused | EventKind::ClusterOutageBegan
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

/// A bounded log of events, drained by the host.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    events: Mutex<VecDeque<Event>>,
    dropped: AtomicU64,
}

impl EventLog {
    /// Adds `event`, dropping the oldest when the log is full.
    pub(crate) fn push(&self, event: Event) {
        let mut q = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= EVENT_LOG_CAPACITY {
            q.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back(event);
    }

    /// The oldest event, if `take` accepts it (otherwise it stays first).
    pub(crate) fn pop_if(&self, take: impl FnOnce(&Event) -> bool) -> Option<Event> {
        let mut q = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if take(q.front()?) {
            q.pop_front()
        } else {
            None
        }
    }

    /// Every event logged since the last drain, oldest first.
    pub(crate) fn drain(&self) -> Vec<Event> {
        let mut q = self.events.lock().unwrap_or_else(|p| p.into_inner());
        q.drain(..).collect()
    }

    /// Events dropped because the log was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The phase of the room's rules at `clock` as logged: 0 no event, else `2 * (event + 1)`
/// plus 1 in its pre-queue.
fn phase(room: &Room, clock: Millis) -> u64 {
    let rules = room.rules_at(clock);
    rules
        .event
        .map_or(0, |e| 2 * (e as u64 + 1) + u64::from(rules.prequeue))
}

/// The name of event `i` of the room.
fn event_name(room: &Room, i: usize) -> String {
    room.cfg
        .events
        .get(i)
        .map_or_else(|| format!("events[{i}]"), |e| e.name.clone())
}

/// Logs what changed in `room` since an engine last logged it (see the module documentation),
/// as of its last advance; `now` stamps the events.
pub(crate) fn observe(room: &Room, log: &EventLog, now: Millis) {
    let tb = room.counters.tick_block();
    if tb.get(Cell::LastTick) == 0 {
        return;
    }
    let name = Some(room.cfg.name.clone());
    let queue = tb.get(Cell::QueueLength);
    let queueing = if queue > 0 { 2 } else { 1 };
    let was = tb.get(Cell::LoggedQueueing);
    if was != queueing
        && !(was == 0 && queueing == 1)
        && tb.compare_exchange(Cell::LoggedQueueing, was, queueing)
    {
        log.push(Event {
            at: now,
            kind: if queueing == 2 {
                EventKind::QueueingStarted
            } else {
                EventKind::QueueingStopped
            },
            room: name.clone(),
            fields: vec![("queue_length", queue.to_string())],
        });
    }
    let now_phase = phase(room, tb.get(Cell::RulesClock));
    let was = tb.get(Cell::LoggedPhase);
    if was == now_phase || !tb.compare_exchange(Cell::LoggedPhase, was, now_phase) {
        return;
    }
    let event = |p: u64| (p >= 2).then(|| (p / 2 - 1) as usize);
    let (before, after) = (event(was), event(now_phase));
    let push = |kind, i: usize, extra: Vec<(&'static str, String)>| {
        let mut fields = vec![("event_name", event_name(room, i))];
        fields.extend(extra);
        log.push(Event {
            at: now,
            kind,
            room: name.clone(),
            fields,
        });
    };
    if let Some(b) = before.filter(|&b| Some(b) != after) {
        push(EventKind::EventEnded, b, Vec::new());
    }
    if let Some(a) = after {
        let prequeue = now_phase % 2 == 1;
        let was_prequeue = before == Some(a) && was % 2 == 1;
        if prequeue && before != Some(a) {
            push(EventKind::PrequeueOpened, a, Vec::new());
        } else if !prequeue && (before != Some(a) || was_prequeue) {
            push(EventKind::EventStarted, a, Vec::new());
            let shuffled = room
                .cfg
                .events
                .get(a)
                .is_some_and(|e| e.shuffle_at_event_start);
            if was_prequeue && shuffled {
                push(EventKind::ShuffleDone, a, Vec::new());
            }
        }
    }
}
