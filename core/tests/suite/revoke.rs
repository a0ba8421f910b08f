//! Origin commands: `Velvet-Rope-Command: revoke` ends a visitor's session. The seat is freed
//! exactly once (the next arrivals fill exactly the seats revoked, never one more), the ticket
//! is refused from then on in every process sharing the counters, and what cannot be kept is
//! refused rather than half done.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;

use velvet_rope::{Config, Decision, Engine, Outcome, Revocation, RevokeRefused, TicketError};

const T0: u64 = 1_800_000_000_000; // on a minute boundary
const MIN: u64 = 60_000;

fn config(total: u64, extra: &str) -> Config {
    Config::from_toml(&format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = {total}\nnew_users_per_minute = 100000\n\
         enabled_origin_commands = [\"revoke\"]\n{extra}\n[rooms.cookie]\nsecure = false\n"
    ))
    .unwrap()
}

/// The value of a decision's cookie (what the browser sends back).
fn value(d: &Decision) -> String {
    d.ticket().expect("a ticket was issued").to_owned()
}

/// Admits `n` new visitors at `now`; their tickets.
fn fill(e: &Engine, n: usize, now: u64) -> Vec<String> {
    (0..n)
        .map(|_| {
            let d = e.admit("r", None, now).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            value(&d)
        })
        .collect()
}

/// New arrivals admitted at `now` before the first one queued.
fn admitted_until_queued(e: &Engine, now: u64) -> usize {
    let mut n = 0;
    while e.admit("r", None, now).unwrap().outcome == Outcome::Admit {
        // (Queued or rejected ends it.)
        n += 1;
        assert!(n < 10_000, "never queued");
    }
    n
}

#[test]
fn a_revoked_session_frees_its_seat_once_and_its_ticket_is_refused() {
    let e = Engine::new(config(10, ""), T0).unwrap();
    let tickets = fill(&e, 10, T0 + 1);
    let waiter = e.admit("r", None, T0 + 2).unwrap();
    assert_eq!(waiter.outcome, Outcome::Queue, "full");
    for t in &tickets[..3] {
        assert_eq!(
            e.revoke("r", t.as_bytes(), T0 + 3).unwrap(),
            Revocation::Revoked
        );
        assert_eq!(
            e.revoke("r", t.as_bytes(), T0 + 4).unwrap(),
            Revocation::AlreadyRevoked
        );
    }
    // The revoking call ticked: exactly three seats, at once, the first for the visitor who
    // was waiting.
    assert_eq!(admitted_until_queued(&e, T0 + 5), 2);
    let d = e.admit_ticket("r", Some(&value(&waiter)), T0 + 6).unwrap();
    assert_eq!(d.outcome, Outcome::Admit);
    e.tick(T0 + 1000);
    assert_eq!(e.stats("r").unwrap().active_users, 10);
    // The revoked tickets are refused, now and after their bucket (renewals too); the others
    // still pass.
    for now in [T0 + 1001, T0 + MIN + 1] {
        e.tick(now);
        for t in &tickets[..3] {
            let d = e.admit_ticket("r", Some(t), now).unwrap();
            assert_eq!(d.ticket_error, Some(TicketError::Revoked));
            assert_eq!(
                d.outcome,
                Outcome::Queue,
                "the room is full: it arrives anew"
            );
        }
        for t in &tickets[3..] {
            let d = e.admit_ticket("r", Some(t), now).unwrap();
            assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
        }
    }
    assert_eq!(e.stats("r").unwrap().ticket_rejections.revoked, 6);
    // An nginx subrequest holding a revoked ticket is not a holder.
    let header = format!("__vr_r={}", tickets[0]);
    assert_eq!(
        e.admit_holder_bytes(b"r", Some(header.as_bytes()), T0 + MIN + 2)
            .unwrap(),
        None
    );
    let stats: serde_json::Value = serde_json::from_str(&e.stats_json()).unwrap();
    let rv = &stats["rooms"]["r"]["revocations"];
    assert_eq!(
        (rv["made"].as_u64(), rv["kept"].as_u64()),
        (Some(3), Some(3))
    );
}

/// The newest ticket (the one the request's decision issued) frees the seat where the visitor
/// is counted now; an older one frees it too (from the earlier bucket, exact while both are in
/// the session window), and never frees two.
#[test]
fn revoking_after_a_renewal_frees_one_seat_with_either_ticket() {
    for use_old in [false, true] {
        let e = Engine::new(config(4, "session_duration = 3"), T0).unwrap();
        let first = fill(&e, 4, T0 + 1);
        e.tick(T0 + MIN);
        // Every visitor comes back in the next minute: moved, and re-issued its ticket.
        let renewed: Vec<String> = first
            .iter()
            .map(|t| {
                let d = e.admit_ticket("r", Some(t), T0 + MIN + 1).unwrap();
                assert_eq!(d.outcome, Outcome::Admit);
                value(&d)
            })
            .collect();
        let (old, new) = (&first[0], &renewed[0]);
        let t = if use_old { old } else { new };
        assert_eq!(
            e.revoke_request(b"r", None, None, Some(t.as_bytes()), T0 + MIN + 2)
                .unwrap(),
            Revocation::Revoked
        );
        // Both of its tickets are refused, and the other one cannot free a second seat. Its
        // holder arrives anew and may take the seat itself.
        let mut taken = 0;
        for t in [old, new] {
            assert_eq!(
                e.revoke("r", t.as_bytes(), T0 + MIN + 3).unwrap(),
                Revocation::AlreadyRevoked
            );
            let d = e.admit_ticket("r", Some(t), T0 + MIN + 4).unwrap();
            assert_eq!(d.ticket_error, Some(TicketError::Revoked), "old: {use_old}");
            taken += usize::from(d.outcome == Outcome::Admit);
        }
        e.tick(T0 + MIN + 1000);
        assert_eq!(
            taken + admitted_until_queued(&e, T0 + MIN + 1001),
            1,
            "old: {use_old}"
        );
        assert_eq!(e.stats("r").unwrap().active_users, 4);
    }
}

/// Revocations in one process are seen by every process sharing the counters.
#[test]
fn engines_sharing_a_region_refuse_a_ticket_revoked_in_one() {
    let cfg = config(5, "");
    let size = Engine::shared_region_size(&cfg);
    let mut mem = vec![0u128; size.div_ceil(16) + 8];
    let raw = mem.as_mut_ptr() as *mut u8;
    let pad = raw.align_offset(128);
    // SAFETY: `pad < 128` and the buffer has 128 spare bytes.
    let ptr = unsafe { raw.add(pad) };
    let len = mem.len() * 16 - pad;
    // SAFETY: `mem` outlives both engines and nothing else touches it.
    let a = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { Engine::new_shared(cfg, T0, ptr, len) }.unwrap();
    let tickets = fill(&a, 5, T0 + 1);
    assert_eq!(
        a.revoke("r", tickets[0].as_bytes(), T0 + 2).unwrap(),
        Revocation::Revoked
    );
    assert_eq!(
        b.revoke("r", tickets[0].as_bytes(), T0 + 3).unwrap(),
        Revocation::AlreadyRevoked
    );
    let d = b.admit_ticket("r", Some(&tickets[0]), T0 + 4).unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::Revoked));
    assert_eq!(
        d.outcome,
        Outcome::Admit,
        "its seat was freed: it takes it anew"
    );
    assert_eq!(admitted_until_queued(&b, T0 + 5), 0);
    assert_eq!(admitted_until_queued(&a, T0 + 5), 0);
}

/// Threads revoke the same sessions at once while crowds arrive and ticks run: each session
/// is revoked once, and the arrivals fill exactly the seats revoked (a `reject` room: nobody
/// waits for a seat, so every freed seat goes to an arrival counted here).
#[test]
fn concurrent_revocations_free_exactly_the_seats_revoked() {
    for round in 0..20u64 {
        let e = Engine::new(
            config(40, "queueing_method = \"reject\"\n[settings]\nshards = 8"),
            T0,
        )
        .unwrap();
        let tickets = fill(&e, 40, T0 + 1);
        let victims = &tickets[..(5 + round as usize % 10)];
        let revoked = AtomicUsize::new(0);
        let admitted = AtomicUsize::new(0);
        let barrier = Barrier::new(6);
        std::thread::scope(|s| {
            for t in 0..3 {
                let (e, revoked, barrier) = (&e, &revoked, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..victims.len() {
                        let v = &victims[(i + t) % victims.len()];
                        if e.revoke("r", v.as_bytes(), T0 + 2).unwrap() == Revocation::Revoked {
                            revoked.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            for _ in 0..3 {
                let (e, admitted, barrier) = (&e, &admitted, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for i in 0..200 {
                        if e.admit("r", None, T0 + 2 + i / 50).unwrap().outcome == Outcome::Admit {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        if i % 50 == 0 {
                            e.tick(T0 + 2 + i / 50);
                        }
                    }
                });
            }
        });
        e.tick(T0 + 1000);
        let more = admitted_until_queued(&e, T0 + 1001);
        assert_eq!(
            revoked.load(Ordering::Relaxed),
            victims.len(),
            "round {round}"
        );
        assert_eq!(
            admitted.load(Ordering::Relaxed) + more,
            victims.len(),
            "round {round}"
        );
        e.tick(T0 + 2000);
        assert_eq!(e.stats("r").unwrap().active_users, 40, "round {round}");
    }
}

/// Past `max_revocations` a revocation is refused: nothing changes, the session goes on and
/// its seat stays counted.
#[test]
fn past_its_capacity_a_revocation_is_refused_and_changes_nothing() {
    let e = Engine::new(config(10, "max_revocations = 2"), T0).unwrap();
    let tickets = fill(&e, 10, T0 + 1);
    for t in &tickets[..2] {
        assert_eq!(
            e.revoke("r", t.as_bytes(), T0 + 2).unwrap(),
            Revocation::Revoked
        );
    }
    assert_eq!(
        e.revoke("r", tickets[2].as_bytes(), T0 + 2).unwrap(),
        Revocation::Refused(RevokeRefused::Full)
    );
    let d = e.admit_ticket("r", Some(&tickets[2]), T0 + 3).unwrap();
    assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    e.tick(T0 + 1000);
    assert_eq!(admitted_until_queued(&e, T0 + 1001), 2);
    let stats: serde_json::Value = serde_json::from_str(&e.stats_json()).unwrap();
    assert_eq!(
        stats["rooms"]["r"]["revocations"]["refused"].as_u64(),
        Some(1)
    );
}

#[test]
fn what_is_not_a_session_or_not_enabled_is_left_alone() {
    let plain = Config::from_toml(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 1\nnew_users_per_minute = 100\n",
    )
    .unwrap();
    let e = Engine::new(plain, T0).unwrap();
    let t = fill(&e, 1, T0);
    assert_eq!(
        e.revoke("r", t[0].as_bytes(), T0).unwrap(),
        Revocation::NotEnabled
    );
    assert!(e
        .admit_ticket("r", Some(&t[0]), T0)
        .unwrap()
        .ticket_error
        .is_none());
    let e = Engine::new(config(1, ""), T0).unwrap();
    fill(&e, 1, T0);
    let queued = e.admit("r", None, T0).unwrap();
    assert_eq!(queued.outcome, Outcome::Queue);
    for ticket in [value(&queued).as_str(), "", "garbage"] {
        assert_eq!(
            e.revoke("r", ticket.as_bytes(), T0).unwrap(),
            Revocation::NoSession
        );
    }
    assert!(e.revoke("nope", b"x", T0).is_err());
}

/// A front door hands the request's cookie and header; the room's own ticket is found in
/// either (the header only in rooms that take it).
#[test]
fn revoke_request_finds_the_ticket_in_the_cookie_or_the_header() {
    let e = Engine::new(config(3, "ticket_header = true"), T0).unwrap();
    let t = fill(&e, 3, T0);
    let cookie = format!("a=b; __vr_r={}; c=d", t[0]);
    assert_eq!(
        e.revoke_request(b"r", Some(cookie.as_bytes()), None, None, T0)
            .unwrap(),
        Revocation::Revoked
    );
    assert_eq!(
        e.revoke_request(b"r", None, Some(format!(" {} ", t[1]).as_bytes()), None, T0)
            .unwrap(),
        Revocation::Revoked
    );
    assert_eq!(
        e.revoke_request(b"r", Some(b"x=y"), None, None, T0)
            .unwrap(),
        Revocation::NoSession
    );
    assert_eq!(
        e.clear_cookie("r").unwrap(),
        "__vr_r=; Max-Age=0; Path=/; HttpOnly; SameSite=Lax"
    );
}

/// A state file keeps revocations across a restart of every process; counters laid out
/// without room for revocations refuse a configuration that enables them, naming it.
#[test]
fn revocations_survive_a_restart_with_the_state_file() {
    let dir = std::env::temp_dir().join(format!("vr-revoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state");
    let cfg = config(3, "");
    let e = Engine::open_state_file(cfg.clone(), &path, T0).unwrap();
    let t = fill(&e, 3, T0);
    assert_eq!(
        e.revoke("r", t[0].as_bytes(), T0).unwrap(),
        Revocation::Revoked
    );
    drop(e);
    let e = Engine::open_state_file(cfg, &path, T0 + 1000).unwrap();
    let d = e.admit_ticket("r", Some(&t[0]), T0 + 1001).unwrap();
    assert_eq!(d.ticket_error, Some(TicketError::Revoked));
    drop(e);
    let other = dir.join("plain");
    let plain = Config::from_toml(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 3\nnew_users_per_minute = 100000\n",
    )
    .unwrap();
    drop(Engine::open_state_file(plain, &other, T0).unwrap());
    let err = Engine::open_state_file(config(3, ""), &other, T0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("enabled_origin_commands"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A ticket of other counters (another host's, or these counters' before a restart without
/// their state) is counted afresh here; revoking that ticket here frees the seat it took
/// (review: only a ticket of these counters' own incarnation was counted out).
#[test]
fn revoking_a_ticket_counted_afresh_frees_the_seat_it_took() {
    let text =
        "[[tickets.keys]]\nid = 1\nsecret = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n\
                [[rooms]]\nname = \"r\"\ntotal_active_users = 5\nnew_users_per_minute = 100000\n\
                enabled_origin_commands = [\"revoke\"]\n";
    let other = Engine::new(Config::from_toml(text).unwrap(), T0).unwrap();
    let here = Engine::new(Config::from_toml(text).unwrap(), T0).unwrap();
    let foreign = fill(&other, 1, T0 + 1).remove(0);
    let mine = fill(&here, 2, T0 + 1);
    let d = here.admit_ticket("r", Some(&foreign), T0 + 2).unwrap();
    assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    assert!(
        d.set_cookie.is_some(),
        "counted afresh, a ticket of these counters issued"
    );
    here.tick(T0 + 3);
    assert_eq!(here.stats("r").unwrap().active_users, 3);
    assert_eq!(
        here.revoke("r", foreign.as_bytes(), T0 + 4).unwrap(),
        Revocation::Revoked
    );
    here.tick(T0 + 5);
    assert_eq!(here.stats("r").unwrap().active_users, 2, "its seat is free");
    assert_eq!(
        admitted_until_queued(&here, T0 + 6),
        3,
        "exactly the seats free"
    );
    // The visitors of these counters' own tickets keep theirs.
    for t in &mine {
        let d = here.admit_ticket("r", Some(t), T0 + 7).unwrap();
        assert_eq!((d.outcome, d.ticket_error), (Outcome::Admit, None));
    }
}
