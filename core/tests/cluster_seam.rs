//! The seam to the cluster tier: with a `[cluster]` table a room enforces the allowances it is
//! granted (exactly, as it enforces its limits alone), its fallback share before the first
//! grant and after one lapses, and reports what it holds.

use velvet_rope::admission::cluster::ClusterGrant;
use velvet_rope::{Engine, Outcome};

const T0: u64 = 1_800_000_000_000;

fn engine(extra: &str, method: &str) -> Engine {
    Engine::from_text(
        &format!(
            "[cluster]\nredis_url = \"redis://127.0.0.1:1\"\nhost_id = \"t\"\n\
             sync_interval_ms = 1000\nlease_ms = 5000\n{extra}\n\
             [[rooms]]\nname = \"r\"\ntotal_active_users = 10\nnew_users_per_minute = 1000\n\
             queueing_method = \"{method}\"\n[rooms.cookie]\nsecure = false\n"
        ),
        T0,
    )
    .unwrap()
}

fn admit_new(e: &Engine, n: usize, now: u64) -> usize {
    (0..n)
        .filter(|_| e.admit("r", None, now).unwrap().outcome == Outcome::Admit)
        .count()
}

fn grant(seq: u64, until: u64, total: u64) -> ClusterGrant {
    ClusterGrant {
        seq,
        until,
        total,
        bucket: T0 / 60_000,
        minute: 1000,
        minute_next: 1000,
        frontier: T0 / 60_000,
        waiting_elsewhere: 0,
        fallback_ppm: 200_000,
    }
}

#[test]
fn before_a_grant_the_fallback_share_holds() {
    let e = engine("fallback_share = 0.3", "fifo");
    assert_eq!(admit_new(&e, 10, T0), 3);
    let none = engine("", "fifo");
    assert_eq!(
        admit_new(&none, 10, T0),
        0,
        "no share set and no grant: nobody new"
    );
}

#[test]
fn a_grant_is_enforced_exactly_then_lapses_to_the_fallback() {
    let e = engine("", "fifo");
    assert!(e.cluster_grant("r", &grant(1, T0 + 5000, 4)).unwrap());
    e.tick(T0 + 10);
    assert_eq!(admit_new(&e, 10, T0 + 20), 4);
    e.tick(T0 + 40);
    let report = e.cluster_report("r", T0 + 50).unwrap().unwrap();
    assert_eq!(report.active, 4);
    assert_eq!(report.reserved_total, 4);
    // A smaller allowance cannot take back who is in: it is enforced as what is held.
    assert!(e.cluster_grant("r", &grant(2, T0 + 5000, 1)).unwrap());
    e.tick(T0 + 60);
    assert_eq!(admit_new(&e, 5, T0 + 70), 0);
    assert_eq!(
        e.cluster_report("r", T0 + 80)
            .unwrap()
            .unwrap()
            .reserved_total,
        4
    );
    // An older grant arriving late is dropped.
    assert!(!e.cluster_grant("r", &grant(1, T0 + 5000, 10)).unwrap());
    e.tick(T0 + 90);
    assert_eq!(admit_new(&e, 5, T0 + 100), 0);
    // Lapsed: the fallback share (20 % of 10 = 2 active), and the 4 in are more already.
    e.tick(T0 + 6000);
    assert_eq!(admit_new(&e, 5, T0 + 6010), 0);
    let lapsed = e.cluster_report("r", T0 + 6020).unwrap().unwrap();
    assert_eq!((lapsed.reserved_total, lapsed.seq), (4, 2));
}

#[test]
fn passthrough_rooms_take_no_part() {
    let e = engine("", "passthrough");
    assert_eq!(e.cluster_report("r", T0).unwrap(), None);
    assert!(!e.cluster_grant("r", &grant(1, T0 + 5000, 1)).unwrap());
    assert_eq!(admit_new(&e, 20, T0), 20);
}

#[test]
fn one_process_syncs_a_room_at_a_time() {
    let e = engine("", "fifo");
    assert!(e.cluster_sync_turn("r", T0, 1000, 2500).unwrap());
    assert!(
        !e.cluster_sync_turn("r", T0 + 1500, 1000, 2500).unwrap(),
        "busy"
    );
    e.cluster_sync_done("r", T0 + 1600).unwrap();
    assert!(
        !e.cluster_sync_turn("r", T0 + 2000, 1000, 2500).unwrap(),
        "too soon"
    );
    assert!(e.cluster_sync_turn("r", T0 + 2600, 1000, 2500).unwrap());
    // A syncing process that stopped mid-sync is taken over once its turn's time is past.
    assert!(e
        .cluster_sync_turn("r", T0 + 2600 + 2500 + 1000, 1000, 2500)
        .unwrap());
}
