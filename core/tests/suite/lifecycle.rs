//! The room's limits hold under every lifecycle event: ticks during a rush, bucket boundaries
//! with clocks that disagree, reloads, restarts, replays. Each test here failed before the
//! engine counted every admission through its pool's ledger (issue 8).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;

use velvet_rope::ticket::{RoomId, Ticket, TicketState};
use velvet_rope::{Config, Decision, Engine, Outcome, TicketError};

const T0: u64 = 1_800_000_000_000; // on a minute boundary
const MIN: u64 = 60_000;
const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY";

fn config(rooms: &str) -> Config {
    Config::from_toml(rooms).unwrap()
}

fn room(name: &str, total: u64, per_minute: u64, extra: &str) -> String {
    format!(
        "[[rooms]]\nname = \"{name}\"\ntotal_active_users = {total}\n\
         new_users_per_minute = {per_minute}\n{extra}\n[rooms.cookie]\nsecure = false\n"
    )
}

fn with_key(rooms: &str) -> String {
    format!("[[tickets.keys]]\nid = 1\nsecret = \"{KEY}\"\n{rooms}")
}

/// The value of a decision's cookie (what the browser sends back).
fn value(d: &Decision) -> String {
    let c = d.set_cookie.as_deref().expect("a cookie was set");
    let pair = c.split(';').next().unwrap();
    pair.split_once('=').unwrap().1.to_owned()
}

/// Admits `n` new visitors at `now`; returns their ticket values.
fn fill(e: &Engine, room: &str, n: usize, now: u64) -> Vec<String> {
    (0..n)
        .map(|_| {
            let d = e.admit(room, None, now).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            value(&d)
        })
        .collect()
}

fn admits(e: &Engine, room: &str, ticket: Option<&str>, now: u64) -> bool {
    e.admit_ticket(room, ticket, now).unwrap().outcome == Outcome::Admit
}

/// Crowds of new visitors on 8 threads while another thread ticks without pause: exactly K
/// admitted every time, whichever limit binds. (Before: 34 to 39 for K = 37 on 256 shards.)
#[test]
fn crowds_during_ticks_admit_exactly_the_limit() {
    for (total, per_minute) in [(37, 100_000), (100_000, 37)] {
        let c = config(&format!(
            "[settings]\nshards = 256\n{}",
            room("r", total, per_minute, "")
        ));
        for round in 0..150 {
            let e = Engine::new(c.clone(), T0).unwrap();
            let admitted = AtomicUsize::new(0);
            let ticks = AtomicUsize::new(0);
            let stop = AtomicBool::new(false);
            let barrier = Barrier::new(9);
            std::thread::scope(|s| {
                s.spawn(|| {
                    barrier.wait();
                    let mut t = T0;
                    while !stop.load(Ordering::Relaxed) {
                        t += 1;
                        e.tick(t);
                        ticks.fetch_add(1, Ordering::Relaxed);
                    }
                });
                let crowd: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            // Start once the ticker runs, so ticks and claims overlap.
                            while ticks.load(Ordering::Relaxed) == 0 {
                                std::hint::spin_loop();
                            }
                            for _ in 0..10 {
                                if admits(&e, "r", None, T0 + 1) {
                                    admitted.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        })
                    })
                    .collect();
                for h in crowd {
                    h.join().unwrap();
                }
                stop.store(true, Ordering::Relaxed);
            });
            assert_eq!(
                admitted.load(Ordering::Relaxed),
                37,
                "round {round} (total {total}, per minute {per_minute})"
            );
            e.tick(T0 + 500);
            let st = e.stats("r").unwrap();
            assert_eq!((st.admitted_total, st.free_slots), (37, 0));
        }
    }
}

/// Rooms are matched by name on reload: `[a, b]` reloaded as `[b, a]`, or with a room removed
/// ahead of another of the same layout, keep each room's own counts, in an owned engine and
/// over a shared region alike.
#[test]
fn reload_matches_rooms_by_name() {
    let ab = config(&format!(
        "{}{}",
        room("a", 10, 100, ""),
        room("b", 10, 100, "")
    ));
    let ba = config(&format!(
        "{}{}",
        room("b", 10, 100, ""),
        room("a", 10, 100, "")
    ));
    let b_only = config(&room("b", 10, 100, ""));
    let size = Engine::shared_region_size(&ab);
    let mut mem = vec![0u128; size / 16 + 16];
    let base = mem.as_mut_ptr() as *mut u8;
    let pad = base.align_offset(128);
    // SAFETY: `mem` outlives the engine and nothing else touches it.
    let shared = unsafe { Engine::new_shared(ab.clone(), T0, base.add(pad), size) }.unwrap();
    for e in [&Engine::new(ab.clone(), T0).unwrap(), &shared] {
        fill(e, "a", 3, T0);
        e.reload(ba.clone()).unwrap();
        e.tick(T0 + 1000);
        assert_eq!(e.stats("a").unwrap().active_users, 3);
        assert_eq!(e.stats("b").unwrap().active_users, 0);
        e.reload(b_only.clone()).unwrap();
        e.tick(T0 + 2000);
        assert_eq!(e.stats("b").unwrap().active_users, 0);
        assert!(e.stats("a").is_err());
        e.reload(ab.clone()).unwrap();
        e.tick(T0 + 3000);
        assert_eq!(e.stats("b").unwrap().active_users, 0);
    }
    // The shared region kept room a's place and counts while it was out of the configuration.
    assert_eq!(shared.stats("a").unwrap().active_users, 3);
}

/// Clocks that disagree at a bucket boundary: requests already in the next bucket (nginx's
/// cached time) before any tick there, then a tick with a stale clock. The next bucket still
/// admits exactly `new_users_per_minute`. (Before: up to twice as many.)
#[test]
fn a_stale_tick_at_a_bucket_boundary_admits_one_minute_per_minute() {
    let e = Engine::new(config(&room("r", 1000, 10, "")), T0).unwrap();
    fill(&e, "r", 5, T0 + 1);
    let next = T0 + MIN + 1;
    let early = (0..10).filter(|_| admits(&e, "r", None, next)).count();
    assert_eq!(early, 5, "what was left of the minute's slots");
    e.tick(T0 + 2); // a stale clock
    e.tick(next + 1);
    let later = (0..20).filter(|_| admits(&e, "r", None, next + 2)).count();
    assert_eq!(
        early + later,
        10,
        "admitted with a clock in the next minute"
    );
    e.tick(next + 3);
    assert_eq!(e.stats("r").unwrap().admitted_this_minute, 10);
}

/// Visitors whose requests already move them into the next bucket while the tick is still in
/// this one are still counted: a room of 5 stays full. (Before: the tick summed up to its own
/// bucket, saw them moved out and not in, and admitted 5 more.)
#[test]
fn moves_into_the_next_bucket_are_counted_by_an_earlier_tick() {
    let e = Engine::new(config(&room("r", 5, 100, "session_duration = 1")), T0).unwrap();
    let s = 1000;
    let mut tickets = fill(&e, "r", 5, T0 + 50 * s);
    e.tick(T0 + 51 * s);
    // Sessions of one minute: the visitors come back every 50 s, each time in a new minute;
    // the third time before any tick of that minute.
    for (tick, visit) in [
        (Some(T0 + MIN), T0 + MIN + 40 * s),
        (Some(T0 + 2 * MIN), T0 + 2 * MIN + 30 * s),
        (None, T0 + 3 * MIN + 20 * s),
    ] {
        if let Some(t) = tick {
            e.tick(t);
        }
        for t in tickets.iter_mut() {
            let d = e.admit_ticket("r", Some(t), visit).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            *t = value(&d);
        }
    }
    e.tick(T0 + 2 * MIN + 59 * s); // still in the previous minute
    assert_eq!(e.stats("r").unwrap().active_users, 5);
    assert!(
        !admits(&e, "r", None, T0 + 3 * MIN + 21 * s),
        "the room is full"
    );
}

/// A waiter let in by a tick that is late (its bucket not yet opened) is counted, and its
/// queued ticket does not admit anyone else afterwards. (Before: never counted, and the queued
/// ticket admitted again on every replay.)
#[test]
fn a_waiter_admitted_while_the_tick_is_late_is_counted_once() {
    // A visitor fills the room of one; a second waits. The first leaves (sessions of one
    // minute); the waiter comes back two minutes after the last tick, in a minute no tick
    // has opened.
    let e = Engine::new(config(&room("r", 1, 100, "session_duration = 1")), T0).unwrap();
    fill(&e, "r", 1, T0);
    let queued = value(&e.admit("r", None, T0 + 1).unwrap());
    e.tick(T0 + 3 * MIN);
    let late = T0 + 5 * MIN + 5;
    let d = e.admit_ticket("r", Some(&queued), late).unwrap();
    assert_eq!(d.outcome, Outcome::Admit, "its turn came");
    // Replays of the queued ticket (another person with a copy of the cookie) wait.
    for _ in 0..5 {
        assert_eq!(
            e.admit_ticket("r", Some(&queued), late + 1)
                .unwrap()
                .outcome,
            Outcome::Queue
        );
    }
    e.tick(late + 2);
    assert_eq!(
        e.stats("r").unwrap().active_users,
        1,
        "the waiter is counted"
    );
    assert!(
        !admits(&e, "r", None, late + 3),
        "and the room of one is full"
    );
}

/// A ticket the counters must count afresh (counted by another incarnation), replayed: counted
/// once. A ticket counted in a later bucket than the request's clock, replayed: counted once.
/// (Before: each replay added one active user.)
#[test]
fn replays_of_tickets_counted_elsewhere_count_once() {
    let cfg = config(&with_key(&room("r", 3, 100, "")));
    let e = Engine::new(cfg.clone(), T0).unwrap();
    let now_secs = (T0 / 1000) as u32;
    let foreign = e
        .keyring()
        .seal(
            &RoomId::new("r"),
            &Ticket {
                id: 99,
                state: TicketState::Admitted,
                arrival: 0,
                accepted_at: now_secs,
                counted: 0,
                last_checkin: now_secs,
                expires: now_secs + 300,
                incarnation: 0x5eed,
            },
        )
        .as_str()
        .to_owned();
    for i in 0..100 {
        assert!(admits(&e, "r", Some(&foreign), T0 + 10 + i));
    }
    // A ticket from a clock ahead of this request's (within the tolerated skew).
    let ahead = fill(&e, "r", 1, T0 + MIN + 1).pop().unwrap();
    for i in 0..100 {
        assert!(admits(&e, "r", Some(&ahead), T0 + MIN - 20 + i));
    }
    e.tick(T0 + MIN + 2);
    assert_eq!(e.stats("r").unwrap().active_users, 2);
    assert_eq!(fill(&e, "r", 1, T0 + MIN + 3).len(), 1);
    assert!(!admits(&e, "r", None, T0 + MIN + 4), "3 active: full");
}

/// A restart with configured keys: returning visitors are counted on their first request, so
/// the restarted engine does not admit a second roomful on top of them.
#[test]
fn a_restart_counts_returning_visitors() {
    let cfg = config(&with_key(&room("r", 4, 100, "")));
    let before = Engine::new(cfg.clone(), T0).unwrap();
    let tickets = fill(&before, "r", 4, T0);
    drop(before);
    let after = Engine::new(cfg, T0 + 30_000).unwrap();
    for t in &tickets[..3] {
        let d = after.admit_ticket("r", Some(t), T0 + 31_000).unwrap();
        assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    }
    // Each took a seat at once: one new visitor fits, before any tick, and no more.
    assert!(admits(&after, "r", None, T0 + 31_000));
    assert!(!admits(&after, "r", None, T0 + 31_000), "no second roomful");
    // The fourth returns to a full room: counted (above the limit: a restart's cost).
    assert!(admits(&after, "r", Some(&tickets[3]), T0 + 31_000));
    after.tick(T0 + 32_000);
    assert_eq!(after.stats("r").unwrap().active_users, 5);
    assert!(!admits(&after, "r", None, T0 + 33_000));
}

/// A state file keeps everything across a restart: counts, the ephemeral key (no keys are
/// configured here) and the tickets' incarnation, so returning visitors are steady.
#[test]
fn a_state_file_keeps_counts_and_tickets_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("vr-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.state");
    let cfg = config(&room("r", 3, 100, ""));
    let e = Engine::open_state_file(cfg.clone(), &path, T0).unwrap();
    let tickets = fill(&e, "r", 3, T0);
    drop(e);
    let e = Engine::open_state_file(cfg, &path, T0 + 5_000).unwrap();
    assert_eq!(e.stats("r").unwrap().active_users, 3);
    for t in &tickets {
        let d = e.admit_ticket("r", Some(t), T0 + 6_000).unwrap();
        assert_eq!(
            (d.outcome, d.set_cookie, d.ticket_error),
            (Outcome::Admit, None, None)
        );
    }
    assert!(!admits(&e, "r", None, T0 + 6_000));
    drop(e);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Two rooms whose 32-bit tags collide: a ticket of one is refused by the other.
#[test]
fn rooms_with_colliding_tags_do_not_share_tickets() {
    let cfg = config(&format!(
        "{}{}",
        room("liquid", 10, 100, ""),
        room("costarring", 10, 100, "")
    ));
    let e = Engine::new(cfg, T0).unwrap();
    let t = fill(&e, "liquid", 1, T0).pop().unwrap();
    assert!(admits(&e, "liquid", Some(&t), T0 + 1));
    let d = e.admit_ticket("costarring", Some(&t), T0 + 1).unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::BadTag));
    assert!(
        d.set_cookie.is_some(),
        "a new visitor of costarring, not liquid's"
    );
}

/// Emptying `tickets.keys` on reload retires the configured keys: their tickets no longer
/// open, and new tickets are sealed with an ephemeral key.
#[test]
fn emptying_the_keys_on_reload_retires_them() {
    let keyed = config(&with_key(&room("r", 10, 100, "")));
    let e = Engine::new(keyed.clone(), T0).unwrap();
    let old = fill(&e, "r", 1, T0).pop().unwrap();
    let mut plain = keyed.clone();
    plain.tickets = Default::default();
    e.reload(plain.clone()).unwrap();
    let d = e.admit_ticket("r", Some(&old), T0 + 1).unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::UnknownKey));
    let fresh = value(&d);
    // A keyed engine cannot open what the ephemeral key sealed.
    let other = Engine::new(keyed, T0).unwrap();
    assert!(other
        .admit_ticket("r", Some(&fresh), T0 + 2)
        .unwrap()
        .ticket_error
        .is_some());
    // And the ephemeral key stays across further reloads.
    e.reload(plain).unwrap();
    assert!(admits(&e, "r", Some(&fresh), T0 + 3));
    assert_eq!(
        e.admit_ticket("r", Some(&fresh), T0 + 3)
            .unwrap()
            .ticket_error,
        None
    );
}

/// A reload that changes `refresh_interval` would renumber the queue's epochs (live waiters
/// and FIFO order lost): refused, naming the setting; the queue stays as it was.
#[test]
fn a_reload_that_would_wipe_the_queue_is_refused() {
    let cfg = config(&room("r", 1, 100, ""));
    let e = Engine::new(cfg.clone(), T0).unwrap();
    fill(&e, "r", 1, T0);
    for _ in 0..3 {
        assert_eq!(e.admit("r", None, T0 + 1).unwrap().outcome, Outcome::Queue);
    }
    let mut changed = cfg.clone();
    changed.rooms[0].refresh_interval = 30;
    let err = e.reload(changed).unwrap_err().to_string();
    assert!(
        err.contains("refresh_interval") && err.contains("room `r`"),
        "{err}"
    );
    e.tick(T0 + 1000);
    assert_eq!(e.stats("r").unwrap().queue_length, 3);
    // Lowering a limit keeps the counters.
    let mut lower = cfg;
    lower.rooms[0].new_users_per_minute = 50;
    e.reload(lower).unwrap();
    e.tick(T0 + 2000);
    assert_eq!(e.stats("r").unwrap().queue_length, 3);
}

/// One tick with a clock a year ahead (a clock step, a wrong `now`) does not freeze the room
/// for every process sharing it: the next tick with a sane clock re-opens the room at its own
/// bucket, and once the sessions end the room admits again. (Before the fix the room admitted
/// nobody new until real time caught up.)
#[test]
fn a_clock_that_jumped_forward_does_not_freeze_the_room() {
    let dir = std::env::temp_dir().join(format!("vr-jump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.state");
    let cfg = config(&room("r", 5, 5, "session_duration = 2"));
    let a = Engine::open_state_file(cfg.clone(), &path, T0).unwrap();
    let b = Engine::open_state_file(cfg, &path, T0).unwrap();
    fill(&a, "r", 5, T0);
    a.tick(T0 + 365 * 24 * 60 * MIN);
    for s in 1..=300 {
        b.tick(T0 + s * 1000);
    }
    let later = T0 + 300_000;
    let n = (0..10).filter(|_| admits(&b, "r", None, later)).count();
    assert_eq!(
        n, 5,
        "a full room of new visitors once the first ones' sessions ended"
    );
    drop((a, b));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A process whose clock lags the opened bucket by more than a session moves its visitor into
/// the bucket open now, not into one the room counts as ended. (Before: the visitor was moved
/// into a departed bucket and went uncounted.)
#[test]
fn a_lagging_clock_moves_visitors_into_the_open_bucket() {
    let dir = std::env::temp_dir().join(format!("vr-lag-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.state");
    let cfg = config(&format!(
        "[settings]\nbucket_width_secs = 1\n{}",
        room("r", 5, 100, "session_duration = 1")
    ));
    let a = Engine::open_state_file(cfg.clone(), &path, T0).unwrap();
    let b = Engine::open_state_file(cfg, &path, T0).unwrap();
    let t = fill(&b, "r", 1, T0 + 600).pop().unwrap();
    a.tick(T0 + 5_000);
    assert!(
        admits(&b, "r", Some(&t), T0 + 1_500),
        "its ticket is valid for its clock"
    );
    a.tick(T0 + 5_500);
    assert_eq!(a.stats("r").unwrap().active_users, 1);
    drop((a, b));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A state file whose first process died laying its header out (magic written, never
/// finished) is laid out again by the next process, not refused for ever.
#[test]
fn a_state_file_left_half_made_is_laid_out_again() {
    let dir = std::env::temp_dir().join(format!("vr-half-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rooms.state");
    let cfg = config(&room("r", 2, 100, ""));
    let mut bytes = vec![0u8; Engine::shared_region_size(&cfg)];
    bytes[..8].copy_from_slice(b"vrENGINE");
    std::fs::write(&path, bytes).unwrap();
    let e = Engine::open_state_file(cfg, &path, T0).unwrap();
    assert_eq!(fill(&e, "r", 2, T0).len(), 2);
    assert!(!admits(&e, "r", None, T0));
    drop(e);
    std::fs::remove_dir_all(dir).unwrap();
}
