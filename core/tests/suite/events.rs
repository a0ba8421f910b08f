//! Scheduled events: their configuration, suspended rooms, the pre-queue, the shuffle at an
//! event's start, and exact limits at every switch of the schedule.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use velvet_rope::{Config, Decision, Engine, Outcome};

/// 2027-01-15T08:00:00Z (a whole hour).
const T0: u64 = 1_800_000_000_000;
const SEC: u64 = 1000;

fn rfc3339(ms: u64) -> String {
    velvet_rope::config::Instant::from_millis(ms).to_rfc3339()
}

/// The cookie a browser sends back for a decision's `Set-Cookie` (or the one it had).
fn cookie_of(d: &Decision, had: Option<String>) -> Option<String> {
    d.set_cookie
        .as_ref()
        .map(|c| c.split(';').next().unwrap().to_owned())
        .or(had)
}

#[test]
fn events_are_checked_when_the_configuration_loads() {
    let room = |events: &str| {
        format!(
            "[[rooms]]\nname = \"r\"\ntotal_active_users = 10\nnew_users_per_minute = 10\n{events}"
        )
    };
    let ok = room(
        "[[rooms.events]]\nname = \"a\"\nevent_start = 2027-01-15T10:00:00Z\n\
         event_end = \"2027-01-15T12:00:00+01:00\"\nprequeue_start = \"2027-01-15T09:30:00Z\"\n",
    );
    let cfg = Config::from_toml(&ok).expect("TOML date-times and strings both load");
    let e = &cfg.rooms[0].events[0];
    assert_eq!(e.event_start.to_rfc3339(), "2027-01-15T10:00:00Z");
    assert_eq!(e.event_end.to_rfc3339(), "2027-01-15T11:00:00Z");
    let overlap = room(
        "[[rooms.events]]\nname = \"morning\"\nevent_start = \"2027-01-15T09:00:00Z\"\n\
         event_end = \"2027-01-15T10:00:00Z\"\n\
         [[rooms.events]]\nname = \"drop\"\nprequeue_start = \"2027-01-15T09:45:00Z\"\n\
         event_start = \"2027-01-15T10:30:00Z\"\nevent_end = \"2027-01-15T11:00:00Z\"\n",
    );
    let err = Config::from_toml(&overlap).unwrap_err().to_string();
    assert!(
        err.contains("`morning`") && err.contains("`drop`") && err.contains("overlap"),
        "{err}"
    );
    for (events, says) in [
        (
            "[[rooms.events]]\nname = \"a\"\nevent_start = \"2027-01-15T10:00:00Z\"\nevent_end = \"2027-01-15T09:00:00Z\"\n",
            "event_end",
        ),
        (
            "[[rooms.events]]\nname = \"a\"\nprequeue_start = \"2027-01-15T10:00:00Z\"\nevent_start = \"2027-01-15T10:00:00Z\"\nevent_end = \"2027-01-15T11:00:00Z\"\n",
            "prequeue_start",
        ),
        (
            "[[rooms.events]]\nname = \"a\"\nevent_start = \"2027-01-15 10:00\"\nevent_end = \"2027-01-15T11:00:00Z\"\n",
            "RFC 3339",
        ),
        (
            "[[rooms.events]]\nname = \"a\"\nevent_start = \"2027-01-15T10:00:00Z\"\nevent_end = \"2027-01-15T11:00:00Z\"\ntotal_active_users = 0\n",
            "events[0].total_active_users",
        ),
    ] {
        let err = Config::from_toml(&room(events)).unwrap_err().to_string();
        assert!(err.contains(says), "{says}: {err}");
    }
}

#[test]
fn a_suspended_room_passes_everyone_uncounted() {
    let text = "[[rooms]]\nname = \"r\"\ntotal_active_users = 1\nnew_users_per_minute = 1\n\
                suspended = true\n";
    let engine = Engine::from_text(text, T0).unwrap();
    for i in 0..20 {
        let d = engine.admit("r", None, T0 + i).unwrap();
        assert_eq!(d.outcome, Outcome::Admit);
        assert_eq!(d.set_cookie, None, "nothing handed out");
    }
    engine.tick(T0 + SEC);
    assert_eq!(engine.stats("r").unwrap().admitted_total, 0);
    // A reload that lifts the suspension counts from the next request on; one that puts the
    // room back into `queue_all` queues everyone on the next request.
    engine
        .reload(Config::from_toml(&text.replace("suspended = true", "")).unwrap())
        .unwrap();
    assert_eq!(
        engine.admit("r", None, T0 + 2 * SEC).unwrap().outcome,
        Outcome::Admit
    );
    assert_eq!(
        engine.admit("r", None, T0 + 2 * SEC).unwrap().outcome,
        Outcome::Queue
    );
    engine
        .reload(Config::from_toml(&text.replace("suspended = true", "queue_all = true")).unwrap())
        .unwrap();
    assert_eq!(
        engine.admit("r", None, T0 + 3 * SEC).unwrap().outcome,
        Outcome::Queue
    );
}

/// A room of 100 with an event of 10 that has a pre-queue: before it the room's limits, in the
/// pre-queue everyone waits (without a place: there is none yet), during it the event's
/// limits, after it the room's again.
#[test]
fn the_schedule_switches_the_rules() {
    let pre = T0 + 60 * SEC;
    let start = T0 + 120 * SEC;
    let end = T0 + 600 * SEC;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 100\nnew_users_per_minute = 1000\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"drop\"\nprequeue_start = \"{}\"\nevent_start = \"{}\"\n\
         event_end = \"{}\"\ntotal_active_users = 10\n",
        rfc3339(pre),
        rfc3339(start),
        rfc3339(end)
    );
    let engine = Engine::from_text(&text, T0).unwrap();
    let admits = |n: usize, at: u64| {
        (0..n)
            .filter(|_| engine.admit("r", None, at).unwrap().outcome == Outcome::Admit)
            .count()
    };
    assert_eq!(admits(3, T0 + SEC), 3, "before: the room's own limits");
    engine.tick(pre + SEC);
    let d = engine.admit("r", None, pre + SEC).unwrap();
    assert_eq!(d.outcome, Outcome::Queue, "in the pre-queue everyone waits");
    assert_eq!(d.position, None, "nobody has a place before the start");
    assert_eq!(d.estimated_wait_secs, None);
    let stats: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
    assert_eq!(stats["rooms"]["r"]["event"], "drop");
    assert_eq!(stats["rooms"]["r"]["event_phase"], "prequeue");
    engine.tick(start + SEC);
    // 3 active from before, one waiter from the pre-queue (it does not come back here): the
    // event's limit of 10 leaves 7 seats for it and new visitors.
    assert_eq!(admits(20, start + SEC), 7, "during: the event's limits");
    let stats: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
    assert_eq!(stats["rooms"]["r"]["total_active_users"], 10);
    assert_eq!(stats["rooms"]["r"]["event_phase"], "active");
    engine.tick(end + SEC);
    assert!(admits(200, end + SEC) >= 80, "after: the room's own limits");
}

/// The heart of "exact at every switch": slots granted under the rules before a switch are
/// never claimed after it. A room of 40 whose event lowers the limit to 10: the tick just
/// before the switch fills the pools for 40; requests after it claim nothing until a tick
/// under the event's rules, and a crowd on four threads with a ticker running admits exactly
/// the event's 10 (6 of them already inside: exactly 4 more).
#[test]
fn a_switch_to_lower_limits_admits_exactly_the_new_limit() {
    let start = T0 + 300 * SEC;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 40\nnew_users_per_minute = 100000\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"e\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         total_active_users = 10\n",
        rfc3339(start),
        rfc3339(start + 3_600 * SEC)
    );
    for inside in [0usize, 6] {
        let engine = Engine::from_text(&text, T0).unwrap();
        let admitted = (0..inside)
            .filter(|_| engine.admit("r", None, start - 10).unwrap().outcome == Outcome::Admit)
            .count();
        assert_eq!(admitted, inside);
        engine.tick(start - 1);
        assert_eq!(engine.stats("r").unwrap().free_slots, 40 - inside as u64);
        // After the switch, before any tick under the event's rules: nobody claims.
        for _ in 0..50 {
            assert_eq!(
                engine.admit("r", None, start + 1).unwrap().outcome,
                Outcome::Queue,
                "a slot granted for the room's 40 claimed under the event's 10"
            );
        }
        // A crowd, holding their tickets, on four threads while a ticker moves the clock on
        // (within a minute: nobody's session ends).
        let clock = AtomicU64::new(start + 2);
        let stop = AtomicBool::new(false);
        let got_in = AtomicU64::new(0);
        let ticks = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let now = clock.load(Ordering::Relaxed);
                    clock.store((now + 50).min(start + 60 * SEC), Ordering::Relaxed);
                    engine.tick(now);
                    ticks.fetch_add(1, Ordering::Relaxed);
                    std::thread::yield_now();
                }
            });
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (engine, clock, got_in, ticks) = (&engine, &clock, &got_in, &ticks);
                    s.spawn(move || {
                        let mut cookies: Vec<Option<String>> = vec![None; 25];
                        let mut inside = [false; 25];
                        for _ in 0..40 {
                            // Each round after a tick at least (the ticker shares two cores
                            // with four threads: without this a crowd can be over before it
                            // ever runs).
                            let seen = ticks.load(Ordering::Relaxed);
                            while ticks.load(Ordering::Relaxed) == seen {
                                std::thread::yield_now();
                            }
                            for v in 0..25 {
                                let now = clock.load(Ordering::Relaxed);
                                let d = engine.admit("r", cookies[v].as_deref(), now).unwrap();
                                if d.outcome == Outcome::Admit && !inside[v] {
                                    inside[v] = true;
                                    got_in.fetch_add(1, Ordering::Relaxed);
                                }
                                cookies[v] = cookie_of(&d, cookies[v].take());
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(
            got_in.load(Ordering::Relaxed) as usize + inside,
            10,
            "{inside} inside before the switch: 100 visitors after it on four threads"
        );
        let now = clock.load(Ordering::Relaxed) + 1;
        engine.tick(now);
        assert_eq!(engine.stats("r").unwrap().active_users, 10);
    }
}

/// Two engines over one region (two worker processes of a host): both tick just before the
/// switch; one decides after it, before any tick under the event's rules (nobody claims),
/// then the other ticks and both decide (exactly the event's limit).
#[test]
fn a_switch_holds_across_engines_sharing_a_region() {
    let start = T0 + 300 * SEC;
    let text = format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 40\nnew_users_per_minute = 100000\n\
         [[rooms.events]]\nname = \"e\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         total_active_users = 5\n",
        rfc3339(start),
        rfc3339(start + 3_600 * SEC)
    );
    let cfg = Config::from_toml(&text).unwrap();
    let size = Engine::shared_region_size(&cfg);
    let mut mem = vec![0u128; size.div_ceil(16) + 8];
    let raw = mem.as_mut_ptr() as *mut u8;
    let pad = raw.align_offset(128);
    // SAFETY: `pad < 128` and the buffer has 128 spare bytes.
    let ptr = unsafe { raw.add(pad) };
    let len = mem.len() * 16 - pad;
    // SAFETY: `mem` outlives both engines and nothing else touches it.
    let a = unsafe { Engine::new_shared(cfg.clone(), start - 1, ptr, len) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { Engine::new_shared(cfg, start - 1, ptr, len) }.unwrap();
    a.tick(start - 1);
    b.tick(start - 1);
    // After the switch, before any tick under the event's rules: the slots in the pools were
    // granted for the room's 40, and neither engine claims one.
    let mut cookies = vec![None; 20];
    for c in cookies.iter_mut() {
        let d = b.admit("r", None, start + 2).unwrap();
        assert_eq!(d.outcome, Outcome::Queue);
        *c = cookie_of(&d, None);
    }
    // `a` ticks under the event's rules; `b`, which has not ticked since, claims again: the
    // tick block says when the slots were granted, not `b`'s view.
    a.tick(start + 3);
    // The same 20 visitors come back, to either engine: exactly the event's 5 get in.
    let mut inside = 0;
    for _ in 0..3 {
        for (i, c) in cookies.iter_mut().enumerate() {
            let e = if i % 2 == 0 { &a } else { &b };
            let d = e.admit("r", c.as_deref(), start + 4).unwrap();
            if d.outcome == Outcome::Admit && d.set_cookie.is_some() {
                inside += 1;
            }
            *c = cookie_of(&d, c.take());
        }
    }
    assert_eq!(inside, 5);
    drop((a, b));
    drop(mem);
}

/// One run of a shuffled pre-queue: `n` visitors arrive in the pre-queue in order, then `late`
/// after the start; from the start on, each round (one refresh interval, one bucket) every
/// waiter refreshes once, and the "eager" ones (even arrival index) four more times. Returns
/// each visitor's round of admission, by arrival index.
fn shuffled_run(n: usize, late: usize, prequeue_secs: u64, seed: u64) -> Vec<u64> {
    let start = T0 + 300 * SEC;
    let pre = start - prequeue_secs * SEC;
    let text = format!(
        "[settings]\nbucket_width_secs = 1\n\
         [[rooms]]\nname = \"r\"\ntotal_active_users = 1000\nnew_users_per_minute = 20\n\
         session_duration = 600\nrefresh_interval = 1\n\
         [rooms.cookie]\nsecure = false\n\
         [[rooms.events]]\nname = \"drop\"\nprequeue_start = \"{}\"\nevent_start = \"{}\"\n\
         event_end = \"{}\"\nshuffle_at_event_start = true\n",
        rfc3339(pre),
        rfc3339(start),
        rfc3339(start + 3_600 * SEC)
    );
    let engine = Engine::from_text(&text, T0).unwrap();
    // The room runs before the pre-queue opens (its FIFO frontier moves on meanwhile).
    for s in 1..=(pre - T0) / SEC {
        engine.tick(T0 + s * SEC);
    }
    let mut cookies: Vec<Option<String>> = Vec::new();
    // Arrivals in order over the pre-queue, everyone refreshing once a second.
    let seconds = prequeue_secs - 1;
    for s in 0..seconds {
        let now = pre + 1 + s * SEC;
        engine.tick(now);
        for c in cookies.iter_mut() {
            let d = engine.admit("r", c.as_deref(), now).unwrap();
            assert_eq!(d.outcome, Outcome::Queue, "the pre-queue admits nobody");
            *c = cookie_of(&d, c.take());
        }
        let arrived = ((s + 1) * n as u64 / seconds) as usize;
        while cookies.len() < arrived {
            let d = engine.admit("r", None, now).unwrap();
            assert_eq!(d.outcome, Outcome::Queue);
            assert_eq!(d.position, None);
            cookies.push(cookie_of(&d, None));
        }
    }
    assert_eq!(cookies.len(), n);
    let mut round_of = vec![u64::MAX; n + late];
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = test_rng(seed);
    for round in 0..(n + late) as u64 / 10 + 30 {
        let now = start + round * SEC + 1;
        engine.tick(now);
        if round == 1 {
            for _ in 0..late {
                let d = engine.admit("r", None, now).unwrap();
                assert_eq!(d.outcome, Outcome::Queue, "late arrivals queue behind");
                cookies.push(cookie_of(&d, None));
            }
            order.extend(n..n + late);
        }
        // Every waiter refreshes once per round, in a random order; the eager ones (even
        // arrival index) four more times.
        for i in (1..order.len()).rev() {
            order.swap(i, (rng() % (i as u64 + 1)) as usize);
        }
        for &v in &order {
            if round_of[v] != u64::MAX {
                continue;
            }
            let refreshes = if v < n && v % 2 == 0 { 5 } else { 1 };
            for _ in 0..refreshes {
                let d = engine.admit("r", cookies[v].as_deref(), now).unwrap();
                cookies[v] = cookie_of(&d, cookies[v].take());
                if d.outcome == Outcome::Admit {
                    round_of[v] = round;
                    break;
                }
            }
        }
        if round_of.iter().all(|&r| r != u64::MAX) {
            break;
        }
    }
    assert!(round_of.iter().all(|&r| r != u64::MAX), "everyone got in");
    round_of
}

/// A small xorshift generator for the test's own choices (the engine draws its own ids).
fn test_rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// The shuffle at an event's start: over many runs, a pre-queued visitor's place does not
/// depend on when it arrived (a chi-square test of independence between arrival quintile
/// and admission quintile) nor on refreshing more often than the page does; everyone who
/// arrives after the start is served after the whole pre-queue; and the limit per bucket holds
/// in every round.
#[test]
fn the_shuffle_at_the_start_is_uniform_and_cannot_be_gamed() {
    const N: usize = 200;
    const LATE: usize = 20;
    const RUNS: usize = 12;
    let mut table = [[0u64; 5]; 5];
    let (mut eager, mut calm) = (0u64, 0u64);
    for run in 0..RUNS {
        // Pre-queues longer and shorter than the 64 buckets a shuffle spreads over.
        let prequeue_secs = if run % 2 == 0 { 120 } else { 20 };
        let rounds = shuffled_run(N, LATE, prequeue_secs, run as u64);
        let last_pre = rounds[..N].iter().max().unwrap();
        let first_late = rounds[N..].iter().min().unwrap();
        // The queue is FIFO by bucket: once the frontier reaches the bucket of the late
        // arrivals, they and the pre-queue's last waiters take that round's slots together.
        assert!(
            first_late + 1 >= *last_pre,
            "late arrivals are served after the pre-queue (late from round {first_late}, \
             pre-queue until {last_pre})"
        );
        let mut per_round: HashMap<u64, usize> = HashMap::new();
        for r in &rounds {
            *per_round.entry(*r).or_default() += 1;
        }
        assert!(
            per_round.values().all(|&k| k <= 20),
            "20 per bucket: {per_round:?}"
        );
        // 20 a round: the pre-queue's 200 take rounds 0-9, two a quintile.
        for (v, &r) in rounds[..N].iter().enumerate() {
            table[v * 5 / N][(r as usize / 2).min(4)] += 1;
            if v % 2 == 0 {
                eager += r;
            } else {
                calm += r;
            }
        }
    }
    // Chi-square of independence on the 5 x 5 table: 16 degrees of freedom, 39.25 is the
    // 0.1 % critical value.
    let total: u64 = table.iter().flatten().sum();
    let rows: Vec<u64> = table.iter().map(|r| r.iter().sum()).collect();
    let cols: Vec<u64> = (0..5).map(|c| table.iter().map(|r| r[c]).sum()).collect();
    let mut chi = 0.0;
    for r in 0..5 {
        for c in 0..5 {
            let expected = rows[r] as f64 * cols[c] as f64 / total as f64;
            chi += (table[r][c] as f64 - expected).powi(2) / expected;
        }
    }
    println!("chi2 {chi:.1}, table {table:?}");
    assert!(
        chi < 39.25,
        "arrival and place are independent: chi2 = {chi:.1}, {table:?}"
    );
    // Eager refreshers are not served earlier: mean rounds within 0.6 of each other (their
    // standard error is about 0.12 over these runs).
    let half = (RUNS * N / 2) as f64;
    let (eager, calm) = (eager as f64 / half, calm as f64 / half);
    println!("mean round: eager {eager:.2}, others {calm:.2}");
    assert!(
        (eager - calm).abs() < 0.6,
        "eager refreshers' mean round {eager:.2}, others' {calm:.2}"
    );
}

/// A reload that adds an event already in force, or lowers the room's own limit, applies to
/// the next request: the slots the pools held for the old limit are not claimed.
#[test]
fn a_reload_into_an_event_applies_at_once() {
    let room = |total: u64| {
        format!(
            "[[rooms]]\nname = \"r\"\ntotal_active_users = {total}\n\
             new_users_per_minute = 100000\n"
        )
    };
    let with_event = format!(
        "{}[[rooms.events]]\nname = \"e\"\nevent_start = \"{}\"\nevent_end = \"{}\"\n\
         total_active_users = 5\n",
        room(40),
        rfc3339(T0 - 3_600 * SEC),
        rfc3339(T0 + 3_600 * SEC)
    );
    for (next, limit) in [(with_event, 5), (room(10), 10)] {
        let engine = Engine::from_text(&room(40), T0).unwrap();
        engine.tick(T0 + 10);
        assert_eq!(engine.stats("r").unwrap().free_slots, 40);
        engine.reload(Config::from_toml(&next).unwrap()).unwrap();
        let admitted = (0..40)
            .filter(|_| engine.admit("r", None, T0 + 20).unwrap().outcome == Outcome::Admit)
            .count();
        assert_eq!(admitted, limit);
    }
}
