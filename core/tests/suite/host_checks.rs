//! What hosts ask of the engine besides decisions: whether a reload would be taken, before it
//! is applied (an Envoy listener update that Envoy may still refuse), and a decision that
//! hands a visitor nothing new (an nginx subrequest, whose ticket could not reach the client).

use velvet_rope::{Config, Decision, Engine, Outcome, QueueingMethod};

const T0: u64 = 1_800_000_000_000; // on a minute boundary
const MIN: u64 = 60_000;

fn config(rooms: &str) -> Config {
    Config::from_toml(rooms).unwrap()
}

fn room(name: &str, total: u64, extra: &str) -> String {
    format!(
        "[[rooms]]\nname = \"{name}\"\ntotal_active_users = {total}\n\
         new_users_per_minute = 100\n{extra}\n[rooms.cookie]\nsecure = false\n"
    )
}

/// The `Cookie` header a browser sends back for a decision's ticket.
fn cookie(d: &Decision) -> String {
    let c = d.set_cookie.as_deref().expect("a cookie was set");
    c.split(';').next().unwrap().to_owned()
}

fn holder(e: &Engine, room: &str, cookie: Option<&str>, now: u64) -> Option<Decision> {
    e.admit_holder_bytes(room.as_bytes(), cookie.map(str::as_bytes), now)
        .unwrap()
}

#[test]
fn check_reload_says_what_reload_would_do_and_changes_nothing() {
    let cfg = config(&format!("{}{}", room("a", 2, ""), room("b", 3, "")));
    let e = Engine::new(cfg.clone(), T0).unwrap();
    // Taken: another limit, a room removed, a room added. Nothing changes until a reload.
    let mut taken = cfg.clone();
    taken.rooms[0].total_active_users = 1;
    taken.rooms.remove(1);
    taken.rooms.extend(config(&room("c", 5, "")).rooms);
    e.check_reload(&taken).unwrap();
    assert_eq!(*e.config(), cfg, "a check applied the configuration");
    assert!(e.stats("c").is_err());
    // Refused, with reload's own words: a setting the counters cannot serve, and a
    // configuration that is not valid.
    let mut renumbered = cfg.clone();
    renumbered.rooms[1].refresh_interval = 30;
    let checked = e.check_reload(&renumbered).unwrap_err().to_string();
    let reloaded = e.reload(renumbered).unwrap_err().to_string();
    assert_eq!(checked, reloaded);
    assert!(checked.contains("room `b`") && checked.contains("refresh_interval"));
    let mut invalid = cfg.clone();
    invalid.rooms[0].total_active_users = 0;
    assert!(e.check_reload(&invalid).is_err());
    assert!(e.reload(invalid).is_err());
    e.reload(taken.clone()).unwrap();
    assert_eq!(*e.config(), taken);
}

#[test]
fn a_holder_decision_admits_ticket_holders_only_and_counts_nothing_else() {
    let e = Engine::new(config(&room("r", 1, "session_duration = 5")), T0).unwrap();
    // No ticket, or a forged one: nothing counted, claimed or queued.
    assert!(holder(&e, "r", None, T0).is_none());
    assert!(holder(&e, "r", Some("__vr_r=forged"), T0).is_none());
    e.tick(T0 + 100);
    let st = e.stats("r").unwrap();
    assert_eq!((st.admitted_total, st.queue_length), (0, 0));
    // The room's one place is still free for a real visitor.
    let admitted = e.admit("r", None, T0 + 200).unwrap();
    assert_eq!(admitted.outcome, Outcome::Admit);
    let admitted = cookie(&admitted);
    let queued = e.admit("r", None, T0 + 300).unwrap();
    assert_eq!(queued.outcome, Outcome::Queue);
    let queued = cookie(&queued);
    e.tick(T0 + 400);
    // The admitted visitor passes (its steady state: nothing to send); the waiter does not,
    // and keeps its place; the room is still full for newcomers.
    let d = holder(&e, "r", Some(&admitted), T0 + 500).unwrap();
    assert_eq!((d.outcome, d.set_cookie.is_none()), (Outcome::Admit, true));
    assert!(holder(&e, "r", Some(&queued), T0 + 500).is_none());
    e.tick(T0 + 600);
    let st = e.stats("r").unwrap();
    assert_eq!((st.active_users, st.queue_length), (1, 1));
    assert_eq!(
        e.admit("r", None, T0 + 700).unwrap().outcome,
        Outcome::Queue
    );
    // A later minute: the holder's count is renewed, whether or not the renewed ticket
    // reaches it; asked again with the old ticket, it is still one active user.
    let later = T0 + 2 * MIN;
    e.tick(later);
    for _ in 0..3 {
        let d = holder(&e, "r", Some(&admitted), later + 10).unwrap();
        assert_eq!((d.outcome, d.set_cookie.is_some()), (Outcome::Admit, true));
    }
    e.tick(later + 20);
    assert_eq!(e.stats("r").unwrap().active_users, 1);
    assert!(e.admit_holder_bytes(b"nope", None, T0).is_err());
}

#[test]
fn a_holder_decision_in_a_passthrough_room_lets_everyone_pass_uncounted() {
    let mut cfg = config(&room("p", 1, ""));
    cfg.rooms[0].queueing_method = QueueingMethod::Passthrough;
    let e = Engine::new(cfg, T0).unwrap();
    for _ in 0..3 {
        let d = holder(&e, "p", None, T0).unwrap();
        assert_eq!((d.outcome, d.set_cookie), (Outcome::Admit, None));
    }
    e.tick(T0 + 100);
    assert_eq!(e.stats("p").unwrap().admitted_total, 0);
}
