//! The Redis script and the in-process allocator answer the same sequence of reports alike:
//! random reports from four hosts on two rooms, against a real `redis-server`.

mod common;

use rand::{Rng, SeedableRng};
use velvet_rope_cluster::{allocate, Params, RedisStore, Report, RoomState, Store};

use common::RedisServer;

fn random_report(rng: &mut rand::rngs::StdRng) -> Report {
    let b = 1000 + rng.gen_range(0..3);
    let mut live = Vec::new();
    for k in 990..=b {
        if rng.gen_bool(0.3) {
            live.push((k, rng.gen_range(1..20)));
        }
    }
    let at = rng.gen_range(0..120);
    Report {
        seq: 0,
        b,
        active: rng.gen_range(0..=at),
        admitted: rng.gen_range(0..40),
        traffic: rng.gen_range(0..100),
        demand: rng.gen_range(0..30),
        at,
        am0: rng.gen_range(0..60),
        am1: rng.gen_range(0..60),
        live,
    }
}

#[test]
fn the_script_and_the_allocator_agree() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let mut store =
        RedisStore::new(&redis.url(), "agree", std::time::Duration::from_secs(2)).unwrap();
    // Both states start out of learning (born at 0) and nothing expires within the test (a
    // lease of an hour): the answers then depend on the reports alone.
    let params = Params {
        total: 200,
        minute: 150,
        lease: 3_600_000,
        hold: 3_600_000,
    };
    let rooms = ["x", "y"];
    let mut states: Vec<RoomState> = rooms
        .iter()
        .map(|_| RoomState {
            born: Some(0),
            ..RoomState::default()
        })
        .collect();
    for room in rooms {
        let _: () = redis::cmd("HSET")
            .arg(store.room_key(room))
            .arg("born")
            .arg(0)
            .query(&mut conn)
            .unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let hosts = ["h1", "h2", "h3", "h4"];
    for i in 0..400 {
        let r = rng.gen_range(0..rooms.len());
        let host = hosts[rng.gen_range(0..hosts.len())];
        let mut report = random_report(&mut rng);
        if i >= 350 && rng.gen_bool(0.2) {
            // A host holding a grant the store does not know of: both learn anew.
            report.seq = rng.gen_range(1..1000);
        }
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        let now = secs * 1000 + micros / 1000;
        let expected = allocate(&mut states[r], host, &report, &params, now);
        let got = store.sync(rooms[r], host, &report, &params).unwrap();
        assert_eq!(
            got, expected,
            "call {i}: {host} on {} with {report:?}",
            rooms[r]
        );
    }
    assert_eq!(
        store.commands(),
        401,
        "one connection, then one call per sync"
    );
}
