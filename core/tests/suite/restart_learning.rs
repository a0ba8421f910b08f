//! `restart_learning`: a room whose counters are made anew (a restart without a state file)
//! learns for a session: visitors coming back with valid admission tickets are counted in,
//! and new visitors wait, so the room never holds its returning visitors and a roomful of new
//! ones on top (item 14 of the exactness review; Doorman's learning mode).

use velvet_rope::{Config, Engine, Outcome};

const T0: u64 = 1_800_000_000_000;
const MIN: u64 = 60_000;

fn config(learning: bool) -> Config {
    Config::from_text(&format!(
        "[[tickets.keys]]\nid = 1\nsecret = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n\
         [[rooms]]\nname = \"r\"\ntotal_active_users = 5\nnew_users_per_minute = 100\n\
         session_duration = 3\nrestart_learning = {learning}\n[rooms.cookie]\nsecure = false\n"
    ))
    .unwrap()
}

fn cookie(d: &velvet_rope::Decision) -> String {
    d.set_cookie
        .as_deref()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// A room of 5 fills; the process restarts (no state file) a minute later; 3 of the 5 come
/// back while new visitors arrive. How many new ones get in at once, and the most the room
/// holds (the 5 still in session, and the new ones).
fn restart(learning: bool) -> (usize, usize) {
    // The process before had long learned (its room made anew as long ago as you like).
    let before = Engine::new(config(false), T0).unwrap();
    let tickets: Vec<String> = (0..5)
        .map(|_| cookie(&before.admit("r", None, T0).unwrap()))
        .collect();
    drop(before);
    let t = T0 + MIN;
    let after = Engine::new(config(learning), t).unwrap();
    for c in &tickets[..3] {
        let d = after.admit("r", Some(c), t + 10).unwrap();
        assert_eq!(
            d.outcome,
            Outcome::Admit,
            "a returning visitor is let in: {d:?}"
        );
    }
    let new = (0..10)
        .filter(|_| after.admit("r", None, t + 20).unwrap().outcome == Outcome::Admit)
        .count();
    after.tick(t + 30);
    let later = (0..10)
        .filter(|_| after.admit("r", None, t + 40).unwrap().outcome == Outcome::Admit)
        .count();
    // The 5 admitted before are still in session (3 minutes), whether they came back or not.
    (new, 5 + new + later)
}

#[test]
fn a_restarted_room_learns_for_a_session() {
    let (new, most) = restart(false);
    assert!(
        new > 0 && most > 5,
        "without learning: {most} in a room of 5"
    );
    let (new, most) = restart(true);
    assert_eq!((new, most), (0, 5), "while learning nobody new gets in");
    // A session later (every visitor of before the restart has come back or is gone), new
    // visitors are admitted up to the limit.
    let e = Engine::new(config(true), T0).unwrap();
    assert_eq!(e.admit("r", None, T0).unwrap().outcome, Outcome::Queue);
    let after = T0 + 3 * MIN + 1;
    e.tick(after);
    let in_ = (0..10)
        .filter(|_| e.admit("r", None, after + 10).unwrap().outcome == Outcome::Admit)
        .count();
    assert_eq!(in_, 5);
}
