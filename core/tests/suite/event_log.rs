//! The events an engine logs for the host (`Engine::drain_events`): a queue starting and
//! stopping, a scheduled event's phases, reloads, once per host however many engines share
//! the room's counters.

use velvet_rope::admission::EventKind;
use velvet_rope::{Config, Engine, Outcome};

const T0: u64 = 1_800_000_000_000;
const MIN: u64 = 60_000;

fn rfc3339(ms: u64) -> String {
    velvet_rope::config::Instant::from_millis(ms).to_rfc3339()
}

fn room(extra: &str) -> String {
    format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 2\nnew_users_per_minute = 1000\n\
         session_duration = 1\n{extra}\n"
    )
}

fn kinds(e: &Engine) -> Vec<EventKind> {
    e.drain_events().into_iter().map(|ev| ev.kind).collect()
}

/// Queueing starts when the room first has waiters and stops when its queue empties, each
/// logged once, though two engines (two processes) share the counters and both tick.
#[test]
fn a_queue_starting_and_stopping_is_logged_once_per_host() {
    let dir = std::env::temp_dir().join(format!("vr-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.state");
    let cfg = Config::from_toml(&room("")).unwrap();
    let a = Engine::open_state_file(cfg.clone(), &path, T0).unwrap();
    let b = Engine::open_state_file(cfg, &path, T0).unwrap();
    let mut now = T0;
    let both = |now: u64| {
        a.tick(now);
        b.tick(now);
        let mut all = a.drain_events();
        all.extend(b.drain_events());
        all
    };
    assert!(both(now + 1).is_empty(), "nothing happened");
    let outcomes: Vec<Outcome> = (0..4)
        .map(|_| a.admit("r", None, now).unwrap().outcome)
        .collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Queue).count(), 2);
    now += 1_000;
    let seen = both(now);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].kind, EventKind::QueueingStarted);
    assert_eq!(seen[0].room.as_deref(), Some("r"));
    let line = seen[0].to_json();
    let json: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(json["event"], "queueing_started");
    assert_eq!(json["queue_length"], "2");
    assert!(both(now + 500).is_empty(), "no change, no line");
    // The waiters never come back: their places lapse, the queue empties.
    let mut stopped = Vec::new();
    for _ in 0..10 {
        now += 30_000;
        stopped.extend(both(now));
    }
    let stopped: Vec<EventKind> = stopped.iter().map(|e| e.kind).collect();
    assert_eq!(stopped, vec![EventKind::QueueingStopped]);
    drop((a, b));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A scheduled event with a shuffled pre-queue: opened, started (shuffled), ended, each once.
#[test]
fn an_events_phases_are_logged() {
    let prequeue = T0 + 2 * MIN;
    let start = T0 + 4 * MIN;
    let end = T0 + 6 * MIN;
    let e = Engine::from_text(
        &room(&format!(
            "[[rooms.events]]\nname = \"drop\"\nprequeue_start = \"{}\"\nevent_start = \"{}\"\n\
             event_end = \"{}\"\nshuffle_at_event_start = true\n",
            rfc3339(prequeue),
            rfc3339(start),
            rfc3339(end)
        )),
        T0,
    )
    .unwrap();
    let mut order = Vec::new();
    let mut now = T0;
    while now < end + 2 * MIN {
        now += 10_000;
        e.tick(now);
        for ev in e.drain_events() {
            if ev.kind != EventKind::QueueingStarted && ev.kind != EventKind::QueueingStopped {
                assert_eq!(ev.fields[0], ("event_name", "drop".to_owned()));
                order.push(ev.kind);
            }
        }
    }
    assert_eq!(
        order,
        vec![
            EventKind::PrequeueOpened,
            EventKind::EventStarted,
            EventKind::ShuffleDone,
            EventKind::EventEnded
        ]
    );
}

/// A reload that takes effect, and one refused (the running configuration keeps serving).
#[test]
fn reloads_are_logged() {
    let e = Engine::from_text(&room(""), T0).unwrap();
    e.reload(Config::from_toml(&room("queue_all = true")).unwrap())
        .unwrap();
    let mut bigger = room("");
    bigger = bigger.replace("session_duration = 1", "session_duration = 100");
    // A longer session than the counters can hold is refused.
    let refused = Config::from_toml(&bigger).unwrap();
    assert!(e.reload(refused).is_err());
    let events = e.drain_events();
    assert_eq!(
        events.iter().map(|ev| ev.kind).collect::<Vec<_>>(),
        vec![EventKind::ConfigReloaded, EventKind::ConfigRefused]
    );
    assert!(
        events[1].fields[0].1.contains("session_duration"),
        "{:?}",
        events[1]
    );
    assert!(EventKind::ConfigRefused.is_warning());
    assert!(kinds(&e).is_empty(), "drained");
}

/// Two configurations share a room's counters (a rolling restart, two applications on one
/// state file): only the governing one (the newest) logs, so the events do not flip between
/// the two configurations' views at every tick.
#[test]
fn engines_of_two_configurations_on_one_region_do_not_take_turns() {
    let dir = std::env::temp_dir().join(format!("vr-events-gov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.state");
    let start = T0 + 2 * MIN;
    let with_event = room(&format!(
        "[[rooms.events]]\nname = \"drop\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n",
        rfc3339(start),
        rfc3339(start + 60 * MIN)
    ));
    let old = Engine::open_state_file(Config::from_toml(&room("")).unwrap(), &path, T0).unwrap();
    let new = Engine::open_state_file(Config::from_toml(&with_event).unwrap(), &path, T0).unwrap();
    let mut lines = Vec::new();
    let mut now = start;
    for _ in 0..20 {
        now += 1_000;
        old.tick(now);
        new.tick(now);
        lines.extend(old.drain_events().into_iter().map(|e| e.kind));
        lines.extend(new.drain_events().into_iter().map(|e| e.kind));
    }
    assert_eq!(lines, vec![EventKind::EventStarted], "{lines:?}");
    drop((old, new));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A room whose queue comes and goes with single visitors (each waits, never comes back,
/// and its place lapses) logs its start once, and its stop only after the queue stayed empty
/// for a minute.
#[test]
fn a_queue_that_comes_and_goes_is_not_a_storm() {
    let e = Engine::from_text(&room("queue_all = true"), T0).unwrap();
    let mut now = T0;
    let mut lines = Vec::new();
    let step = |now: u64, lines: &mut Vec<EventKind>| {
        e.tick(now);
        lines.extend(e.drain_events().into_iter().map(|ev| ev.kind));
        e.stats("r").unwrap().queue_length
    };
    // Three times: one visitor waits, its place lapses, the queue is empty for ten seconds,
    // then the next one comes.
    let mut emptied = 0;
    let mut empty_since = None;
    assert_eq!(e.admit("r", None, now).unwrap().outcome, Outcome::Queue);
    while emptied < 3 && now < T0 + 30 * MIN {
        now += 1_000;
        match (step(now, &mut lines), empty_since) {
            (0, None) => empty_since = Some(now),
            (0, Some(t)) if now - t >= 10_000 => {
                emptied += 1;
                empty_since = None;
                assert_eq!(e.admit("r", None, now).unwrap().outcome, Outcome::Queue);
            }
            _ => {}
        }
    }
    assert_eq!(emptied, 3, "the queue never emptied");
    assert_eq!(lines, vec![EventKind::QueueingStarted], "{lines:?}");
    // The last one lapses, and the queue stays empty for a minute: stopped, once.
    for _ in 0..(6 * 60) {
        now += 1_000;
        step(now, &mut lines);
    }
    assert_eq!(
        lines,
        vec![EventKind::QueueingStarted, EventKind::QueueingStopped]
    );
}
