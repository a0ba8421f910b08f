//! Attacks on origin commands from an adversarial review of their first version (35c2b18):
//! each test is a way a revoked session's seat was freed while its ticket (or its holder)
//! still got in, or a way the revocation machinery broke. Every test here failed against
//! 35c2b18; the doc comment of each says what it found, the test asserts that it holds now.

use velvet_rope::admission::cluster::ClusterGrant;
use velvet_rope::admission::revoke::OutgoingRevocations;
use velvet_rope::{Config, Decision, Engine, Outcome, Revocation, RevokeRefused, TicketError};

const T0: u64 = 1_800_000_000_000; // on a minute boundary
const MIN: u64 = 60_000;

fn toml(total: u64, revocable: bool, extra: &str, settings: &str) -> String {
    format!(
        "{settings}\n[[rooms]]\nname = \"r\"\ntotal_active_users = {total}\n\
         new_users_per_minute = 100000\n{}{extra}\n[rooms.cookie]\nsecure = false\n",
        if revocable {
            "enabled_origin_commands = [\"revoke\"]\n"
        } else {
            ""
        }
    )
}

fn config(total: u64, revocable: bool, extra: &str, settings: &str) -> Config {
    Config::from_toml(&toml(total, revocable, extra, settings)).unwrap()
}

fn value(d: &Decision) -> String {
    d.ticket().expect("a ticket was issued").to_owned()
}

fn fill(e: &Engine, n: usize, now: u64) -> Vec<String> {
    (0..n)
        .map(|_| {
            let d = e.admit("r", None, now).unwrap();
            assert_eq!(d.outcome, Outcome::Admit);
            value(&d)
        })
        .collect()
}

fn admitted_until_queued(e: &Engine, now: u64) -> usize {
    let mut n = 0;
    while e.admit("r", None, now).unwrap().outcome == Outcome::Admit {
        n += 1;
        assert!(n < 10_000, "never queued");
    }
    n
}

/// Finding 1. The steady path and renewals look revocations up only while the running
/// configuration enables `revoke` (`room.revocable`), but the counters keep the revocation
/// block (and the seats it freed) across a reload that drops `enabled_origin_commands`: the
/// revoked ticket is accepted again, uncounted, while its seat went to someone else.
#[test]
fn a_reload_dropping_origin_commands_keeps_revoked_tickets_refused() {
    let e = Engine::new(config(2, true, "", ""), T0).unwrap();
    let t = fill(&e, 2, T0 + 1);
    assert_eq!(
        e.revoke("r", t[0].as_bytes(), T0 + 2).unwrap(),
        Revocation::Revoked
    );
    e.reload(config(2, false, "", "")).unwrap();
    e.tick(T0 + 1000);
    // The freed seat goes to a newcomer...
    assert_eq!(admitted_until_queued(&e, T0 + 1001), 1);
    // ...and the revoked ticket still gets in without being counted: three in a room of two.
    let d = e.admit_ticket("r", Some(&t[0]), T0 + 1002).unwrap();
    assert_ne!(
        (d.outcome, d.ticket_error),
        (Outcome::Admit, None),
        "a revoked ticket whose seat was freed is admitted again after the reload"
    );
}

/// Finding 1, restart flavour: a state file laid out with revocations, reopened by a
/// configuration without `enabled_origin_commands` (the layout serves it), keeps the freed
/// seat freed and forgets that the ticket was revoked.
#[test]
fn a_restart_without_origin_commands_keeps_revoked_tickets_refused() {
    let dir = std::env::temp_dir().join(format!("vr-revoke-attack-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state");
    let e = Engine::open_state_file(config(2, true, "", ""), &path, T0).unwrap();
    let t = fill(&e, 2, T0 + 1);
    assert_eq!(
        e.revoke("r", t[0].as_bytes(), T0 + 2).unwrap(),
        Revocation::Revoked
    );
    drop(e);
    let e = Engine::open_state_file(config(2, false, "", ""), &path, T0 + 1000).unwrap();
    e.tick(T0 + 1001);
    let newcomers = admitted_until_queued(&e, T0 + 1002);
    let d = e.admit_ticket("r", Some(&t[0]), T0 + 1003).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(newcomers, 1);
    assert_ne!(
        (d.outcome, d.ticket_error),
        (Outcome::Admit, None),
        "a revoked ticket whose seat was freed is admitted again after the restart"
    );
}

/// Finding 1, shared-region flavour: two engines over one region, one configured with
/// `revoke` and one without (a rolling reload of workers): the second admits the revoked
/// ticket the first freed the seat of.
#[test]
fn an_engine_without_origin_commands_on_the_same_region_refuses_revoked_tickets() {
    let (with, without) = (config(2, true, "", ""), config(2, false, "", ""));
    let size = Engine::shared_region_size(&with);
    let mut mem = vec![0u128; size.div_ceil(16) + 8];
    let raw = mem.as_mut_ptr() as *mut u8;
    let pad = raw.align_offset(128);
    // SAFETY: `pad < 128` and the buffer has 128 spare bytes.
    let ptr = unsafe { raw.add(pad) };
    let len = mem.len() * 16 - pad;
    // SAFETY: `mem` outlives both engines and nothing else touches it.
    let a = unsafe { Engine::new_shared(with, T0, ptr, len) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { Engine::new_shared(without, T0, ptr, len) }.unwrap();
    let t = fill(&a, 2, T0 + 1);
    assert_eq!(
        a.revoke("r", t[0].as_bytes(), T0 + 2).unwrap(),
        Revocation::Revoked
    );
    // (The newest engine governs the room: its tick grants the seat.)
    b.tick(T0 + 3);
    assert_eq!(admitted_until_queued(&a, T0 + 4), 1);
    let d = b.admit_ticket("r", Some(&t[0]), T0 + 4).unwrap();
    assert_ne!(
        (d.outcome, d.ticket_error),
        (Outcome::Admit, None),
        "engine b admits a ticket engine a revoked (and freed the seat of)"
    );
}

/// Finding 2. A revocation goes into the generation of the revoker's bucket (its clock, or
/// the room's open bucket if later), while a lookup only reaches `max(b, c) + 1` (the
/// presenter's bucket, the ticket's). A revoker two buckets ahead of the presenter at a
/// generation boundary is missed. With `bucket_width_secs = 1` that is a 2 s skew, well inside
/// the tolerated `max_clock_skew_secs` (30 s); with 60 s buckets it needs a two-minute skew.
#[test]
fn a_revoker_two_buckets_ahead_at_a_generation_boundary_is_seen() {
    // One-second buckets, five-bucket sessions: generations of 8 buckets. T0 / 1000 is a
    // multiple of 8, so T0 starts a generation.
    let cfg = config(
        2,
        true,
        "session_duration = 5",
        "[settings]\nbucket_width_secs = 1",
    );
    let start = T0 - 2000;
    let e = Engine::new(cfg, start).unwrap();
    let t = fill(&e, 2, start + 10);
    // The revoker's clock runs 2 s ahead.
    assert_eq!(
        e.revoke("r", t[0].as_bytes(), T0 + 10).unwrap(),
        Revocation::Revoked
    );
    // Its seat was freed: a newcomer takes it.
    assert_eq!(admitted_until_queued(&e, start + 20), 1);
    // The presenter, on the lagging clock, is let through: three in a room of two.
    let d = e.admit_ticket("r", Some(&t[0]), start + 30).unwrap();
    assert_ne!(
        (d.outcome, d.ticket_error),
        (Outcome::Admit, None),
        "a revoked ticket is admitted by a process 2 s (2 buckets) behind the revoker"
    );
}

/// Finding 3. A queued ticket keeps its id when its holder is admitted, and outlives the
/// session window when `refresh_interval x (waiter_grace_refreshes + 1)` exceeds the session
/// (here 30 minutes against 5). After a revocation the holder replays its old queued ticket
/// once the window passed: the "admitted from the queue" guard has forgotten it, the queued
/// path never looks revocations up, and the revoked visitor walks back in at the head of the
/// queue, ahead of visitors who have been waiting.
#[test]
fn a_revoked_visitors_old_queued_ticket_is_refused() {
    let e = Engine::new(config(1, true, "refresh_interval = 600", ""), T0).unwrap();
    let a = fill(&e, 1, T0);
    let queued = e.admit("r", None, T0 + 1).unwrap();
    assert_eq!(queued.outcome, Outcome::Queue);
    let q = value(&queued);
    assert_eq!(
        e.revoke("r", a[0].as_bytes(), T0 + 2).unwrap(),
        Revocation::Revoked
    );
    let d = e.admit_ticket("r", Some(&q), T0 + 3).unwrap();
    assert_eq!(d.outcome, Outcome::Admit, "the waiter gets the freed seat");
    let v = value(&d);
    assert_eq!(
        e.revoke("r", v.as_bytes(), T0 + 4).unwrap(),
        Revocation::Revoked
    );
    // Someone else takes the seat and keeps it, renewing every minute.
    let mut w = fill(&e, 1, T0 + 5)[0].clone();
    let mut y = None;
    for m in 1..=20 {
        e.tick(T0 + m * MIN);
        let d = e.admit_ticket("r", Some(&w), T0 + m * MIN + 1).unwrap();
        assert_eq!(d.outcome, Outcome::Admit);
        if let Some(t) = d.ticket() {
            w = t.to_owned();
        }
        if m == 10 {
            // A visitor who arrives meanwhile waits.
            let d = e.admit("r", None, T0 + m * MIN + 2).unwrap();
            assert_eq!(d.outcome, Outcome::Queue);
            y = Some(value(&d));
        }
    }
    // The seat frees; the revoked visitor replays its queued ticket first.
    let now = T0 + 20 * MIN + 10;
    assert_eq!(
        e.revoke("r", w.as_bytes(), now).unwrap(),
        Revocation::Revoked
    );
    let d = e.admit_ticket("r", Some(&q), now + 1).unwrap();
    let waiting = e.admit_ticket("r", y.as_deref(), now + 2).unwrap();
    assert!(
        d.outcome != Outcome::Admit || d.ticket_error == Some(TicketError::Revoked),
        "the revoked visitor's old queued ticket admits it again (the one waiting: {:?})",
        waiting.outcome
    );
}

/// Finding 4. A clock that jumped forward (a wrong `now`, a clock step) tags a generation
/// table for its far generation. The tick recovers from such a jump (it re-opens the room at
/// the caller's bucket); the revocation table does not: every generation that maps to the
/// same table is refused (`clock_behind`) until real time reaches the jump, revocations
/// received from the cluster dropped with it.
#[test]
fn a_clock_jump_leaves_revocations_working() {
    // Generations of 8 one-minute buckets; jump by a multiple of 5 generations (~28 days).
    let jump = 5 * 8 * 1000 * MIN;
    let e = Engine::new(config(10, true, "", ""), T0).unwrap();
    let far = fill(&e, 1, T0 + jump);
    assert_eq!(
        e.revoke("r", far[0].as_bytes(), T0 + jump + 1).unwrap(),
        Revocation::Revoked
    );
    // Back to real time: the room itself is re-opened at the real bucket.
    e.tick(T0 + 1000);
    let t = fill(&e, 1, T0 + 1001);
    assert_eq!(
        e.revoke("r", t[0].as_bytes(), T0 + 1002).unwrap(),
        Revocation::Revoked,
        "one jump refuses every revocation of one generation in five, for 28 days"
    );
}

/// Finding 5. `cluster_revocations_synced` records `sent.upto` as sent without checking it
/// against what was written: a report taken from other counters (a room removed and added
/// again by reloads during a sync round) or a wrong value leaves `sent > written`, and the next
/// revocation computes `written - sent`: a subtraction overflow (a panic in debug builds; in
/// release the room refuses every revocation as `unsent` for good).
#[test]
fn an_outbox_mark_past_what_was_written_changes_nothing() {
    let e = Engine::from_text(
        &toml(
            10,
            true,
            "",
            "[cluster]\nredis_url = \"redis://127.0.0.1:1\"\nhost_id = \"t\"\n\
             sync_interval_ms = 1000\nlease_ms = 5000\n",
        ),
        T0,
    )
    .unwrap();
    let grant = ClusterGrant {
        seq: 1,
        until: T0 + 5000,
        total: 10,
        bucket: T0 / MIN,
        minute: 1000,
        minute_next: 1000,
        frontier: T0 / MIN,
        waiting_elsewhere: 0,
        fallback_ppm: 200_000,
        room_spare: 0,
    };
    assert!(e.cluster_grant("r", &grant).unwrap());
    e.tick(T0 + 10);
    let t = fill(&e, 2, T0 + 20);
    let stale = OutgoingRevocations {
        upto: 5,
        ids: Vec::new(),
        cursor: [0, 0],
    };
    e.cluster_revocations_synced("r", &stale, &[], [0, 0])
        .unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.revoke("r", t[0].as_bytes(), T0 + 40).unwrap()
    }));
    assert!(
        !matches!(r, Err(_) | Ok(Revocation::Refused(RevokeRefused::Unsent))),
        "a revocation after an outbox mark past what was written panicked or was refused"
    );
}

/// Finding 6. Replies carry at most 4096 revocations (`REVOCATIONS_PER_SYNC`), but a report
/// carries the whole unsent outbox (up to `max_revocations`, 2^20): after a store outage a
/// host sends them all in one call, and `sync.lua` runs one `XADD` per id inside one script,
/// blocking the (single-threaded) Redis for every room and host for as long.
#[test]
fn a_report_carries_at_most_what_a_reply_may_carry() {
    let e = Engine::from_text(
        &toml(
            6000,
            true,
            "",
            "[cluster]\nredis_url = \"redis://127.0.0.1:1\"\nhost_id = \"t\"\n\
             sync_interval_ms = 1000\nlease_ms = 5000\n",
        ),
        T0,
    )
    .unwrap();
    let grant = ClusterGrant {
        seq: 1,
        until: T0 + 50_000,
        total: 6000,
        bucket: T0 / MIN,
        minute: 100_000,
        minute_next: 100_000,
        frontier: T0 / MIN,
        waiting_elsewhere: 0,
        fallback_ppm: 200_000,
        room_spare: 0,
    };
    assert!(e.cluster_grant("r", &grant).unwrap());
    e.tick(T0 + 10);
    let t = fill(&e, 5000, T0 + 20);
    for t in &t {
        assert_eq!(
            e.revoke("r", t.as_bytes(), T0 + 30).unwrap(),
            Revocation::Revoked
        );
    }
    let out = e.cluster_revocations("r").unwrap().unwrap();
    assert!(
        out.ids.len() <= 4096,
        "one report would carry {} revocations (one XADD each in one script)",
        out.ids.len()
    );
}
