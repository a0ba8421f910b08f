//! End-to-end behaviour of the admission engine, in virtual time.

use std::sync::Barrier;

use velvet_rope::{Config, Decision, Engine, Outcome, QueueingMethod, RoomConfig, TicketError};

const T0: u64 = 1_800_000_000_000; // ms since the epoch, on a minute boundary
const MIN: u64 = 60_000;

fn engine_with(room: RoomConfig) -> Engine {
    let config = Config {
        settings: Default::default(),
        tickets: Default::default(),
        rooms: vec![room],
        resources: Vec::new(),
        cluster: None,
    };
    Engine::new(config, T0).unwrap()
}

/// The `name=value` part of a Set-Cookie header: what the browser sends back.
fn cookie_of(d: &Decision) -> String {
    d.set_cookie
        .as_deref()
        .expect("a cookie was set")
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// A browser: keeps the last cookie it was given.
#[derive(Default, Clone)]
struct Browser {
    cookie: Option<String>,
}

impl Browser {
    fn visit(&mut self, e: &Engine, room: &str, now: u64) -> Decision {
        let d = e.admit(room, self.cookie.as_deref(), now).unwrap();
        if d.set_cookie.is_some() {
            self.cookie = Some(cookie_of(&d));
        }
        d
    }
}

/// A new visitor's admission cookie in `room` at `T0`, as (name, value).
fn admitted_cookie(e: &Engine, room: &str) -> (String, String) {
    let mut b = Browser::default();
    b.visit(e, room, T0);
    let cookie = b.cookie.expect("a new visitor is admitted with a cookie");
    let (name, value) = cookie.split_once('=').expect("name=value");
    (name.to_owned(), value.to_owned())
}

/// Seed: a data centre with 10 free slots and two deciders receiving 7 and 1 new users admits
/// all 8; receiving 15 it admits exactly 10 and queues 5.
#[test]
fn seed_shared_counter_example() {
    for (arrivals, admitted, queued) in [([7usize, 1usize], 8, 0), ([8, 7], 10, 5)] {
        let e = engine_with(RoomConfig::new("dc", 10, 1000));
        let barrier = Barrier::new(2);
        let results: Vec<Vec<Outcome>> = std::thread::scope(|s| {
            let handles: Vec<_> = arrivals
                .iter()
                .map(|&n| {
                    let (e, barrier) = (&e, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        (0..n)
                            .map(|_| e.admit("dc", None, T0 + 1).unwrap().outcome)
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: Vec<Outcome> = results.into_iter().flatten().collect();
        assert_eq!(
            all.iter().filter(|o| **o == Outcome::Admit).count(),
            admitted
        );
        assert_eq!(all.iter().filter(|o| **o == Outcome::Queue).count(), queued);
        e.tick(T0 + 1000);
        let st = e.stats("dc").unwrap();
        assert_eq!(st.admitted_this_minute, admitted as u64);
        assert_eq!(st.active_users, admitted as u64);
        assert_eq!(st.queue_length, queued as u64);
    }
}

#[test]
fn replayed_ticket_does_not_inflate_active_users() {
    let e = engine_with(RoomConfig::new("r", 100, 100));
    let mut b = Browser::default();
    assert_eq!(b.visit(&e, "r", T0).outcome, Outcome::Admit);
    let old = b.cookie.clone().unwrap();
    e.tick(T0 + 1000);
    assert_eq!(e.stats("r").unwrap().active_users, 1);
    // Next minute: the client ignores Set-Cookie and replays its old ticket 1,000 times.
    for i in 0..1000 {
        let d = e.admit("r", Some(&old), T0 + MIN + 10 + i).unwrap();
        assert_eq!(d.outcome, Outcome::Admit);
        assert!(
            d.set_cookie.is_some(),
            "an old ticket is re-issued every time"
        );
    }
    e.tick(T0 + MIN + 2000);
    let st = e.stats("r").unwrap();
    assert!(st.active_users <= 2, "active {}", st.active_users);
    assert_eq!(st.active_users, 1);
    assert_eq!(st.admitted_total, 1);
}

#[test]
fn sessions_expire_and_renewal_moves_the_bucket() {
    let mut room = RoomConfig::new("r", 100, 100);
    room.session_duration = 3;
    let e = engine_with(room.clone());
    let mut stays = Browser::default();
    let mut leaves = Browser::default();
    stays.visit(&e, "r", T0);
    leaves.visit(&e, "r", T0);
    e.tick(T0 + 1000);
    assert_eq!(e.stats("r").unwrap().active_users, 2);
    // `stays` keeps browsing once a minute; `leaves` is gone.
    for m in 1..=6 {
        e.tick(T0 + m * MIN);
        let d = stays.visit(&e, "r", T0 + m * MIN + 1);
        assert_eq!(d.outcome, Outcome::Admit);
        assert!(
            d.set_cookie.is_some(),
            "renewal re-issues the ticket each minute"
        );
        assert_eq!(d.ticket_error, None);
        e.tick(T0 + m * MIN + 1000);
        let active = e.stats("r").unwrap().active_users;
        // Window of session_duration + 1 buckets: `leaves` counts through minute 3.
        let expected = if m <= 3 { 2 } else { 1 };
        assert_eq!(active, expected, "minute {m}");
    }
    // The one who left comes back after its session: its ticket has expired; it is new again.
    let d = leaves.visit(&e, "r", T0 + 6 * MIN + 5);
    assert_eq!(d.ticket_error, Some(TicketError::Expired));
    assert_eq!(d.outcome, Outcome::Admit);

    // With renewal disabled, a session ends `session_duration` after admission regardless.
    room.disable_session_renewal = true;
    let e = engine_with(room);
    let mut b = Browser::default();
    b.visit(&e, "r", T0);
    for m in 1..3 {
        e.tick(T0 + m * MIN);
        let d = b.visit(&e, "r", T0 + m * MIN + 1);
        assert_eq!((d.outcome, d.set_cookie.is_none()), (Outcome::Admit, true));
    }
    e.tick(T0 + 3 * MIN);
    let d = b.visit(&e, "r", T0 + 3 * MIN + 1);
    assert_eq!(d.ticket_error, Some(TicketError::Expired));
}

/// Fills a room of `n` with `n` visitors at `now`, returning them.
fn fill(e: &Engine, room: &str, n: usize, now: u64) -> Vec<Browser> {
    (0..n)
        .map(|_| {
            let mut b = Browser::default();
            assert_eq!(b.visit(e, room, now).outcome, Outcome::Admit);
            b
        })
        .collect()
}

/// Waiters that refresh every 20 s (as the waiting page makes browsers do), with a tick every
/// 5 s, over `span`. Appends the indices of waiters admitted, in order, to `admitted`.
fn refresh_until(
    e: &Engine,
    room: &str,
    waiters: &mut [Browser],
    admitted: &mut Vec<usize>,
    span: std::ops::Range<u64>,
    newest_first: bool,
) {
    let (from, to, refresh_ms) = (span.start, span.end, 20_000);
    let mut now = from;
    while now < to {
        e.tick(now);
        if (now - from) % refresh_ms == 0 {
            let mut order: Vec<usize> = (0..waiters.len()).collect();
            if newest_first {
                order.reverse();
            }
            for i in order {
                if admitted.contains(&i) {
                    continue;
                }
                if waiters[i].visit(e, room, now + 1).outcome == Outcome::Admit {
                    admitted.push(i);
                }
            }
        }
        now += 5_000;
    }
}

#[test]
fn fifo_order_holds_across_buckets() {
    let mut room = RoomConfig::new("q", 1, 100);
    room.session_duration = 2;
    room.disable_session_renewal = true;
    let e = engine_with(room);
    fill(&e, "q", 1, T0);
    // Three waiters arrive in three different minutes and keep refreshing.
    let mut waiters: Vec<Browser> = Vec::new();
    let mut admitted = Vec::new();
    for m in 0..3u64 {
        let now = T0 + m * MIN + 2000;
        e.tick(now);
        let mut w = Browser::default();
        let d = w.visit(&e, "q", now);
        assert_eq!(d.outcome, Outcome::Queue);
        waiters.push(w);
        refresh_until(
            &e,
            "q",
            &mut waiters,
            &mut admitted,
            now + 3000..now + 55_000,
            true,
        );
        let d = waiters[m as usize].visit(&e, "q", now + 55_001);
        assert_eq!(d.position, Some(m + 1), "position of waiter {m}");
    }
    assert!(
        admitted.is_empty(),
        "the first visitor counts for 2 + 1 minutes: {admitted:?}"
    );
    // Slots free one at a time (sessions of 2 + 1 minutes); newest refresh first, yet the
    // oldest is let in first.
    refresh_until(
        &e,
        "q",
        &mut waiters,
        &mut admitted,
        T0 + 3 * MIN..T0 + 14 * MIN,
        true,
    );
    assert_eq!(admitted, vec![0, 1, 2], "admitted in arrival order");
}

#[test]
fn random_mode_admits_by_draw_and_exactly() {
    let mut room = RoomConfig::new("r", 100, 10_000);
    room.queueing_method = QueueingMethod::Random;
    room.session_duration = 1;
    room.disable_session_renewal = true;
    let e = engine_with(room);
    fill(&e, "r", 100, T0);
    let mut waiters: Vec<Browser> = Vec::new();
    for m in 0..4u64 {
        e.tick(T0 + m * 10_000);
        for _ in 0..100 {
            let mut w = Browser::default();
            assert_eq!(
                w.visit(&e, "r", T0 + m * 10_000 + 1).outcome,
                Outcome::Queue
            );
            waiters.push(w);
        }
    }
    let mut admitted = Vec::new();
    refresh_until(
        &e,
        "r",
        &mut waiters,
        &mut admitted,
        T0 + 40_000..T0 + 2 * MIN,
        false,
    );
    assert!(admitted.is_empty());
    assert_eq!(e.stats("r").unwrap().queue_length, 400);
    // Sessions expire (1 + 1 minutes): 100 slots open for 400 live waiters, each drawn with
    // probability 1/4 per refresh epoch.
    let now = T0 + 2 * MIN;
    e.tick(now);
    assert_eq!(e.stats("r").unwrap().free_slots, 100);
    for (i, w) in waiters.iter_mut().enumerate() {
        if w.visit(&e, "r", now + 1).outcome == Outcome::Admit {
            admitted.push(i);
        }
    }
    assert!(admitted.len() <= 100, "never more than the free slots");
    assert!(admitted.len() >= 60, "admitted {}", admitted.len());
    let late = admitted.iter().filter(|&&i| i >= 200).count();
    assert!(late >= 15, "late arrivals admitted: {late}");
    assert!(admitted.iter().any(|&i| i < 100));
}

#[test]
fn abandoned_waiters_stop_holding_the_queue_after_grace() {
    let mut room = RoomConfig::new("r", 1, 100);
    room.session_duration = 1;
    room.disable_session_renewal = true;
    room.refresh_interval = 20;
    room.waiter_grace_refreshes = 2;
    let e = engine_with(room);
    fill(&e, "r", 1, T0);
    e.tick(T0 + 1000);
    let mut gone = Browser::default();
    assert_eq!(gone.visit(&e, "r", T0 + 1000).outcome, Outcome::Queue);
    e.tick(T0 + MIN + 1000);
    let mut stays = Browser::default();
    assert_eq!(
        stays.visit(&e, "r", T0 + MIN + 1000).outcome,
        Outcome::Queue
    );
    // From minute 2 a slot is free. `gone` (first in line) never refreshes; `stays` does.
    let mut now = T0 + 2 * MIN + 1000;
    let mut admitted_at = None;
    while now < T0 + 5 * MIN {
        e.tick(now);
        if stays.visit(&e, "r", now + 1).outcome == Outcome::Admit {
            admitted_at = Some(now);
            break;
        }
        now += 20_000;
    }
    let at = admitted_at.expect("the live waiter got in");
    // `gone` was last counted in its arrival epoch; it stops counting two refreshes later.
    assert!(
        at - (T0 + 2 * MIN) <= 3 * 20_000,
        "waited {} ms",
        at - (T0 + 2 * MIN)
    );
    assert_eq!(e.stats("r").unwrap().queue_length, 0);
}

#[test]
fn refused_tickets_are_no_ticket_and_counted_by_reason() {
    let e = engine_with(RoomConfig::new("r", 10, 10));
    let (name, value) = admitted_cookie(&e, "r");
    let mut tampered = value.as_bytes().to_vec();
    tampered[40] = if tampered[40] == b'x' { b'y' } else { b'x' };
    let tampered = format!("{name}={}", String::from_utf8(tampered).unwrap());
    let d = e.admit("r", Some(&tampered), T0 + 1).unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::BadTag));
    assert_eq!(d.outcome, Outcome::Admit, "treated as a new visitor");
    let d = e
        .admit("r", Some(&format!("{name}=garbage!")), T0 + 1)
        .unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::BadEncoding));
    // Another room's ticket, presented as this room's cookie value.
    let two = Config::from_toml(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 10\nnew_users_per_minute = 10\n\
         [[rooms]]\nname = \"s\"\ntotal_active_users = 10\nnew_users_per_minute = 10\n",
    )
    .unwrap();
    let e2 = Engine::new(two, T0).unwrap();
    let (_, r_ticket) = admitted_cookie(&e2, "r");
    let d = e2.admit_ticket("s", Some(&r_ticket), T0 + 1).unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::WrongRoom));
    let st = e.stats("r").unwrap();
    assert_eq!(st.ticket_rejections.bad_tag, 1);
    assert_eq!(st.ticket_rejections.bad_encoding, 1);
    assert_eq!(e2.stats("s").unwrap().ticket_rejections.wrong_room, 1);
    assert!(e.admit("nope", None, T0).is_err());
}

/// A real ticket in every shape of `Cookie` header: where the value is followed by `;` or the
/// header's end the ticket's bytes are taken without searching for the end, elsewhere the
/// value is cut at `;`, trimmed and unquoted. Either way the visitor is recognised exactly when
/// the trimmed, unquoted value is the ticket, and a refusal is counted as badly encoded, through
/// the `&str` and the byte entry points alike.
#[test]
fn tickets_are_found_in_every_header_shape() {
    let e = engine_with(RoomConfig::new("r", 10, 10));
    let (name, t) = admitted_cookie(&e, "r");
    let (name, t) = (name.as_str(), t.as_str());
    let recognised = [
        format!("{name}={t}"),
        format!("{name}={t}; a=1"),
        format!("a=1; {name}={t}"),
        format!("a=1;{name}={t};b=2"),
        format!("a=1; {name}={t} ; b=2"),
        format!("a=1; {name}= {t}"),
        format!("{name}=\"{t}\"; b=2"),
        format!("x{name}=junk; {name}={t}"),
        format!("{name}={t}\t"),
    ];
    let refused = [
        format!("{name}={t}x; b=2"),
        format!("{name}={t} x"),
        format!("{name}={}; b=2", &t[..t.len() - 1]),
        format!("{name}=\"{t}; b=2"),
        format!("{name}={}{}", &t[..40], ';'),
        format!("{name}={};{}", &t[..40], &t[41..]),
    ];
    for (i, header) in recognised.iter().chain(&refused).enumerate() {
        let ok = i < recognised.len();
        let now = T0 + 1 + i as u64;
        let by_str = e.admit("r", Some(header), now).unwrap();
        let by_bytes = e
            .admit_header_bytes(b"r", Some(header.as_bytes()), now)
            .unwrap();
        for d in [&by_str, &by_bytes] {
            if ok {
                assert_eq!(d.ticket_error, None, "header {header:?}");
                assert!(d.set_cookie.is_none(), "a recognised visitor: {header:?}");
            } else {
                assert_eq!(d.ticket_error, Some(TicketError::BadEncoding), "{header:?}");
            }
        }
    }
    // Each refused header was admitted twice (both entry points); nothing else was refused.
    let st = e.stats("r").unwrap();
    assert_eq!(st.ticket_rejections.bad_encoding, 2 * refused.len() as u64);
}

#[test]
fn reject_passthrough_and_queue_all() {
    let mut room = RoomConfig::new("rej", 1, 100);
    room.queueing_method = QueueingMethod::Reject;
    let e = engine_with(room);
    assert_eq!(e.admit("rej", None, T0).unwrap().outcome, Outcome::Admit);
    let d = e.admit("rej", None, T0).unwrap();
    assert_eq!((d.outcome, d.retry_after_secs), (Outcome::Reject, Some(20)));
    let page = e.render_page("rej", &d, None).unwrap().unwrap();
    assert_eq!(page.status, 429);

    let mut room = RoomConfig::new("pass", 1, 1);
    room.queueing_method = QueueingMethod::Passthrough;
    let e = engine_with(room);
    for _ in 0..10 {
        assert_eq!(e.admit("pass", None, T0).unwrap().outcome, Outcome::Admit);
    }
    e.tick(T0 + 1000);
    assert_eq!(
        e.stats("pass").unwrap().active_users,
        10,
        "passthrough still counts"
    );

    let mut room = RoomConfig::new("all", 100, 100);
    room.queue_all = true;
    let e = engine_with(room.clone());
    let mut w = Browser::default();
    assert_eq!(w.visit(&e, "all", T0).outcome, Outcome::Queue);
    e.tick(T0 + 1000);
    assert_eq!(w.visit(&e, "all", T0 + 1001).outcome, Outcome::Queue);
    // Opening the room (reload) lets the waiter in, keeping its place.
    room.queue_all = false;
    e.reload(Config {
        settings: Default::default(),
        tickets: Default::default(),
        rooms: vec![room],
        resources: Vec::new(),
        cluster: None,
    })
    .unwrap();
    e.tick(T0 + 2000);
    assert_eq!(w.visit(&e, "all", T0 + 2001).outcome, Outcome::Admit);
}

#[test]
fn bad_reload_is_refused_and_counts_survive_good_ones() {
    let e = engine_with(RoomConfig::new("r", 5, 100));
    fill(&e, "r", 5, T0);
    e.tick(T0 + 1000);
    let mut bad = e.config().as_ref().clone();
    bad.rooms[0].total_active_users = 0;
    let err = e.reload(bad).unwrap_err().to_string();
    assert!(err.contains("rooms[0].total_active_users"), "{err}");
    let mut waiter = Browser::default();
    assert_eq!(waiter.visit(&e, "r", T0 + 1001).outcome, Outcome::Queue);
    let mut good = e.config().as_ref().clone();
    good.rooms[0].total_active_users = 6;
    e.reload(good).unwrap();
    e.tick(T0 + 2000);
    let st = e.stats("r").unwrap();
    assert_eq!(st.active_users, 5, "counts kept across reload");
    // The one new slot goes to the waiter, not to a newcomer.
    assert_eq!(
        e.admit("r", None, T0 + 2001).unwrap().outcome,
        Outcome::Queue
    );
    assert_eq!(waiter.visit(&e, "r", T0 + 2002).outcome, Outcome::Admit);
}

#[test]
fn new_users_per_minute_limits_each_minute() {
    let e = engine_with(RoomConfig::new("r", 1000, 7));
    for m in 0..3u64 {
        e.tick(T0 + m * MIN);
        let admitted = (0..20)
            .filter(|_| e.admit("r", None, T0 + m * MIN + 1).unwrap().outcome == Outcome::Admit)
            .count();
        assert!(admitted <= 7, "minute {m}: {admitted}");
        if m == 0 {
            assert_eq!(admitted, 7);
        }
    }
}

/// Both cores, many visitors, ticks racing with admissions: never more admitted than the
/// room holds, and the exact counters agree with what callers saw.
#[test]
fn stress_never_over_admits() {
    let total = 5_000u64;
    let mut room = RoomConfig::new("r", total, 1_000_000);
    room.session_duration = 30;
    let e = engine_with(room);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let admitted = std::sync::atomic::AtomicU64::new(0);
    let attempts = 200_000u64;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (e, admitted) = (&e, &admitted);
                s.spawn(move || {
                    for i in 0..attempts {
                        if e.admit("r", None, T0 + i / 100).unwrap().outcome == Outcome::Admit {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        let (e, stop) = (&e, &stop);
        s.spawn(move || {
            let mut now = T0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                now += 10;
                e.tick(now.min(T0 + attempts / 100));
            }
        });
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    e.tick(T0 + 10 * MIN);
    let st = e.stats("r").unwrap();
    let n = admitted.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(st.admitted_total, n, "exact counter agrees with callers");
    // Every admission is inside the session window, so the exact floor of the active count
    // holds: not one visitor over the limit, and the limit is reached.
    assert!(n <= total, "admitted {n} of {total}");
    assert!(n >= total * 97 / 100, "admitted only {n} of {total}");
}

/// A client that keeps its first queued ticket and replays it: it inflates neither the queue
/// nor admissions, and once let in it cannot come in again on the same queued ticket.
#[test]
fn replayed_queued_ticket_admits_once_and_does_not_inflate_the_queue() {
    let mut room = RoomConfig::new("r", 3, 100);
    room.session_duration = 3;
    room.disable_session_renewal = true;
    let e = engine_with(room);
    fill(&e, "r", 3, T0);
    e.tick(T0 + 1000);
    let mut waiter = Browser::default();
    assert_eq!(waiter.visit(&e, "r", T0 + 1000).outcome, Outcome::Queue);
    let first = waiter.cookie.clone().unwrap();
    // The waiter refreshes honestly every 20 s; a copy of its first ticket is replayed 500
    // times per refresh while it is valid (3 minutes: after that it is no ticket at all), in
    // the arrival epoch and in later ones, past the grace window too.
    let first_expires = T0 + 1000 + 3 * MIN;
    let mut now = T0 + 1000;
    let mut last_queued = first.clone();
    while now < T0 + 6 * MIN {
        e.tick(now);
        for _ in 0..500 {
            if now + 1 < first_expires {
                let d = e.admit("r", Some(&first), now + 1).unwrap();
                assert_eq!((d.outcome, d.ticket_error), (Outcome::Queue, None));
            }
        }
        last_queued = waiter.cookie.clone().unwrap();
        let d = waiter.visit(&e, "r", now + 2);
        e.tick(now + 3);
        if d.outcome == Outcome::Admit {
            break;
        }
        // Counted at most once per refresh epoch: the stale copy is at most in each of the
        // `waiter_grace_refreshes` (2) epochs of the window, plus the honest waiter: bounded,
        // not 500 a refresh.
        let q = e.stats("r").unwrap().queue_length;
        assert!(q <= 3, "at {} s: queue {q}", (now - T0) / 1000);
        now += 20_000;
    }
    assert!(
        now < T0 + 6 * MIN,
        "the waiter got in once the three sessions ended"
    );
    // Its last queued ticket, replayed, does not admit anyone else.
    for _ in 0..10 {
        let d = e.admit("r", Some(&last_queued), now + 4).unwrap();
        assert_eq!(d.outcome, Outcome::Queue);
    }
    e.tick(now + 1000);
    let st = e.stats("r").unwrap();
    assert_eq!(st.admitted_total, 4);
    assert_eq!(st.active_users, 1);
}

/// Counters numbered in buckets of one width cannot serve another width: such a reload is
/// refused, naming the setting, and the running configuration keeps its counts (starting
/// from zero while visitors hold seats would admit a second roomful).
#[test]
fn changing_the_bucket_width_is_refused_and_counts_stay() {
    let e = engine_with(RoomConfig::new("r", 5, 100));
    fill(&e, "r", 5, T0);
    e.tick(T0 + 1000);
    assert_eq!(e.stats("r").unwrap().active_users, 5);
    let mut cfg = e.config().as_ref().clone();
    cfg.settings.bucket_width_secs = 1;
    let err = e.reload(cfg).unwrap_err().to_string();
    assert!(err.contains("settings.bucket_width_secs"), "{err}");
    e.tick(T0 + 2000);
    assert_eq!(e.stats("r").unwrap().active_users, 5);
    assert_eq!(e.config().settings.bucket_width_secs, 60);
}

/// Rooms are found by name whether there are few (compared in turn) or many (hashed).
#[test]
fn rooms_are_found_among_few_and_many() {
    for n in [1usize, 8, 9, 40] {
        let text: String = (0..n)
            .map(|i| {
                format!("[[rooms]]\nname = \"room-{i}\"\ntotal_active_users = 1\nnew_users_per_minute = 1\n")
            })
            .collect();
        let e = Engine::from_text(&text, T0).unwrap();
        let mut ends = vec![0, n - 1];
        ends.dedup();
        for i in ends {
            let d = e.admit(&format!("room-{i}"), None, T0).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            assert!(d
                .set_cookie
                .unwrap()
                .starts_with(&format!("__vr_room-{i}=")));
        }
        assert!(e.admit("room-x", None, T0).is_err());
    }
}

/// A waiter whose browser reloads a little after each `refresh_interval` (as every browser
/// does: the interval, then the request) stays live at every tick, whatever the phase of the
/// ticks against the refresh epochs; with the default grace of two missed refreshes.
#[test]
fn a_waiter_refreshing_a_little_late_keeps_its_place() {
    let mut room = RoomConfig::new("q", 1, 100);
    room.session_duration = 30;
    room.disable_session_renewal = true;
    room.refresh_interval = 20;
    let e = engine_with(room);
    fill(&e, "q", 1, T0);
    let mut waiter = Browser::default();
    let arrival = T0 + 1_000;
    e.tick(arrival);
    assert_eq!(waiter.visit(&e, "q", arrival).outcome, Outcome::Queue);
    // Refreshes every 20.7 s (20 s + 700 ms of page load), so its refreshes fall at every
    // phase of the epochs; ticks every 100 ms for ten minutes.
    let mut next_refresh = arrival + 20_700;
    let mut now = arrival;
    while now < arrival + 10 * MIN {
        now += 100;
        if now >= next_refresh {
            assert_eq!(waiter.visit(&e, "q", now).outcome, Outcome::Queue);
            next_refresh = now + 20_700;
        }
        e.tick(now);
        assert_eq!(
            e.stats("q").unwrap().queue_length,
            1,
            "the waiter dropped out at {} ms",
            now - arrival
        );
    }
}

/// A ticket issued by the build before ticket format 3 (AES-256-GCM, 90 characters; key 1 of
/// seven-bytes, room `shop`, admitted, counted by another incarnation of the counters) comes
/// back in a browser's header after the upgrade: its holder is admitted, counted once, and
/// re-issued a ticket of the current format (94 characters), which then opens steadily.
#[test]
fn a_ticket_of_the_previous_format_is_admitted_and_reissued() {
    const FORMAT_2: &str = "AgGp4EeosDyM4FEE9CJ3hbw9hxstUiT9u2gwE6vAb3SpmybtlpoWGv3X_uAtaNLZp6HhznHpRAdbceIHi-NMxm7-MA";
    let now = 1_795_000_000_000; // the ticket was issued 10 s before and expires 300 s after
    let config =
        "[[tickets.keys]]\nid = 1\nsecret = \"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\"\n\
                  [[rooms]]\nname = \"shop\"\ntotal_active_users = 10\nnew_users_per_minute = 10\n";
    let e = Engine::from_text(config, now).unwrap();
    // The cookie after it puts a `;` where a format 3 ticket would end (94 characters).
    let header = format!("_ga=GA1.2.3; __vr_shop={FORMAT_2}; a=;b=2");
    assert_eq!(header.as_bytes()[header.find(FORMAT_2).unwrap() + 94], b';');
    let d = e.admit("shop", Some(&header), now).unwrap();
    assert_eq!(d.outcome, Outcome::Admit);
    assert_eq!(d.ticket_error, None, "the old ticket was accepted");
    let renewed = cookie_of(&d);
    let value = renewed.strip_prefix("__vr_shop=").unwrap();
    assert_eq!(value.len(), 94);
    let again = e.admit("shop", Some(&renewed), now + 1_000).unwrap();
    assert_eq!(again.outcome, Outcome::Admit);
    assert!(again.set_cookie.is_none(), "the new ticket is steady");
    e.tick(now + 2_000);
    assert_eq!(e.stats("shop").unwrap().active_users, 1);
}
