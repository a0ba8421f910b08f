//! Scheduled events under attack: each test is a way past the limits or the queue's order that
//! an adversarial review found in the first version, kept so that it stays closed.

use velvet_rope::{Config, Engine, Outcome};

const T0: u64 = 1_800_000_000_000;
const SEC: u64 = 1000;
const MIN: u64 = 60 * SEC;

fn rfc3339(ms: u64) -> String {
    velvet_rope::config::Instant::from_millis(ms).to_rfc3339()
}

struct Memory(Vec<u128>);
impl Memory {
    fn new(bytes: usize) -> Self {
        Self(vec![0u128; bytes.div_ceil(16) + 8])
    }
    fn ptr(&mut self) -> (*mut u8, usize) {
        let raw = self.0.as_mut_ptr() as *mut u8;
        let pad = raw.align_offset(128);
        // SAFETY: `pad < 128` and the buffer has 128 spare bytes.
        (unsafe { raw.add(pad) }, self.0.len() * 16 - pad)
    }
}

fn cookie(d: &velvet_rope::Decision) -> String {
    d.set_cookie
        .as_ref()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// Two engines (processes) over one region; engine B's clock lags A's by 2 ms (cached time).
/// At an event switching total 100 -> 10: A ticks just after the switch, then B just before
/// it by its clock. Before: B granted under the room's own 100 and A, whose view said it may
/// claim until the event's end, admitted 100. Now B grants under the newest clock's rules.
#[test]
fn a_tick_with_a_lagging_clock_grants_under_the_newer_rules() {
    let start = T0 + 10 * MIN;
    let end = start + 60 * MIN;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 100\nnew_users_per_minute = 100000\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"drop\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         total_active_users = 10\n",
        rfc3339(start),
        rfc3339(end)
    );
    let cfg = Config::from_toml(&text).unwrap();
    let mut mem = Memory::new(Engine::shared_region_size(&cfg));
    let (ptr, len) = mem.ptr();
    // SAFETY: `mem` outlives both engines and nothing else touches it.
    let a = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    a.tick(start + 1);
    b.tick(start - 1);
    let admitted = (0..200)
        .filter(|_| a.admit("r", None, start + 2).unwrap().outcome == Outcome::Admit)
        .count();
    a.tick(start + SEC);
    let active = a.stats("r").unwrap().active_users;
    assert!(
        admitted <= 10,
        "event limit 10 in force from its start: admitted {admitted} new visitors after it \
         (active {active})"
    );
}

/// A room with `disable_session_renewal` and 30-minute sessions; an event shortens sessions
/// to 5 minutes. The tick counts only the last 5 buckets as active and grants again, but the
/// steady path admitted every ticket with renewal disabled without the "counted before the
/// new window" check that `renew` has: the 10 visitors admitted before kept passing (their
/// tickets last 30 minutes) next to 10 new ones (20 in a room of 10).
#[test]
fn a_shortened_session_without_renewal_ends_the_old_sessions() {
    let start = T0 + 10 * MIN;
    let end = start + 60 * MIN;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 10\nnew_users_per_minute = 1000\n\
         session_duration = 30\ndisable_session_renewal = true\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"short\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         session_duration = 5\n",
        rfc3339(start),
        rfc3339(end)
    );
    let e = Engine::from_text(&text, T0).unwrap();
    let old: Vec<String> = (0..10)
        .map(|_| {
            let d = e.admit("r", None, T0 + SEC).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            cookie(&d)
        })
        .collect();
    for m in 1..=11 {
        e.tick(T0 + m * MIN);
    }
    e.tick(start + SEC);
    let now = start + 2 * SEC;
    let new = (0..20)
        .filter(|_| e.admit("r", None, now).unwrap().outcome == Outcome::Admit)
        .count();
    let old_in = old
        .iter()
        .filter(|c| e.admit("r", Some(c), now).unwrap().outcome == Outcome::Admit)
        .count();
    assert!(
        new + old_in <= 10,
        "total 10 in force: {new} new visitors and {old_in} earlier visitors (tickets valid \
         30 min) pass at once"
    );
}

/// Same with the event lengthening sessions (60 min, no renewal) and the room's own
/// 5-minute sessions returning at its end: tickets handed out during the event stay valid
/// for an hour while the room counts 5 minutes (before: 20 in a room of 10).
#[test]
fn an_events_long_sessions_end_with_the_event_without_renewal() {
    let start = T0 + MIN;
    let end = start + 10 * MIN;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 10\nnew_users_per_minute = 1000\n\
         session_duration = 5\ndisable_session_renewal = true\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"long\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         session_duration = 60\n",
        rfc3339(start),
        rfc3339(end)
    );
    let e = Engine::from_text(&text, T0).unwrap();
    e.tick(start + SEC);
    let old: Vec<String> = (0..10)
        .map(|_| {
            let d = e.admit("r", None, start + 2 * SEC).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            cookie(&d)
        })
        .collect();
    for m in 1..=12 {
        e.tick(start + m * MIN);
    }
    let now = start + 12 * MIN + SEC;
    let new = (0..20)
        .filter(|_| e.admit("r", None, now).unwrap().outcome == Outcome::Admit)
        .count();
    let old_in = old
        .iter()
        .filter(|c| e.admit("r", Some(c), now).unwrap().outcome == Outcome::Admit)
        .count();
    assert!(
        new + old_in <= 10,
        "total 10 after the event: {new} new visitors and {old_in} event visitors pass"
    );
}

/// A FIFO room whose event switches to `random` for ten minutes. W1 queued before the event
/// (FIFO arrival = its bucket); W2 queued during it. After the event the room's own FIFO
/// returns; W2's ticket carried arrival 0 (clamped to the queue's base), ahead of W1, and the
/// visitor who arrived 5 minutes later was served first. Now every ticket carries its bucket.
#[test]
fn a_random_events_waiters_keep_their_fifo_place_after_it() {
    let start = T0 + 5 * MIN;
    let end = T0 + 15 * MIN;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n\
         session_duration = 20\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"lottery\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         queueing_method = \"random\"\n",
        rfc3339(start),
        rfc3339(end)
    );
    let e = Engine::from_text(&text, T0).unwrap();
    assert_eq!(
        e.admit("r", None, T0 + SEC).unwrap().outcome,
        Outcome::Admit
    );
    let mut w1: Option<String> = None;
    let mut w2: Option<String> = None;
    let mut first_in: Option<&str> = None;
    let mut t = T0 + 2 * SEC;
    while t < T0 + 40 * MIN && first_in.is_none() {
        e.tick(t);
        if t >= T0 + MIN && w1.is_none() {
            let d = e.admit("r", None, t).unwrap();
            assert_eq!(d.outcome, Outcome::Queue);
            w1 = Some(cookie(&d));
        } else if t >= start + MIN && w2.is_none() {
            let d = e.admit("r", None, t).unwrap();
            assert_eq!(d.outcome, Outcome::Queue);
            w2 = Some(cookie(&d));
        }
        for (name, w) in [("W1", &mut w1), ("W2", &mut w2)] {
            if let Some(c) = w.clone() {
                let d = e.admit("r", Some(&c), t).unwrap();
                if d.outcome == Outcome::Admit && first_in.is_none() {
                    first_in = Some(name);
                }
                if let Some(s) = d.set_cookie.as_ref() {
                    *w = Some(s.split(';').next().unwrap().to_owned());
                }
            }
        }
        t += 10 * SEC;
    }
    assert_eq!(
        first_in,
        Some("W1"),
        "W1 queued at T0+1m (FIFO), W2 at T0+6m (during the random event); FIFO after the \
         event must serve W1 first"
    );
}

/// "1-64 characters": a 30-character CJK name (90 bytes) is refused (bytes are counted).
#[test]
fn event_names_count_characters() {
    let name = "展".repeat(30);
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 10\nnew_users_per_minute = 10\n\
         [[rooms.events]]\nname = \"{name}\"\nevent_start = \"2027-01-15T10:00:00Z\"\n\
         event_end = \"2027-01-15T11:00:00Z\"\n"
    );
    Config::from_toml(&text).expect("30 characters are within 1-64 characters");
    let hidden = text.replace(&name, "drop\u{202e}");
    let err = Config::from_toml(&hidden).unwrap_err().to_string();
    assert!(err.contains("bidirectional"), "{err}");
}
