//! The sync script's own state (the room's sums and its set of deadlines, which the in-process
//! allocator has no copy of) against a real `redis-server`: lost apart from the entries, it is
//! counted anew; a call that fails writes nothing; the keys always expire; and several rooms
//! synced in one pipeline answer as the same calls one by one.

mod common;

use std::time::Duration;

use velvet_rope_cluster::{
    allocate, script_arg, script_calls, script_reply, Params, RedisStore, Reply, Report, RoomState,
    Store, StoreError, SyncCall, SYNC_SCRIPT,
};

use common::{RedisServer, Sums};

const PARAMS: Params = Params {
    total: 100,
    minute: 80,
    lease: 1000,
    hold: 5000,
    learn: 0,
};

fn report(b: u64, active: u64, live: Vec<(u64, u64)>) -> Report {
    Report {
        b,
        active,
        admitted: 1,
        traffic: 5,
        demand: 2,
        at: active,
        am0: 1,
        am1: 0,
        live,
        ..Report::default()
    }
}

/// The script on `room` at store time `clock` (`run` ""), with any report as MessagePack.
fn call(
    conn: &mut redis::Connection,
    store: &RedisStore,
    room: &str,
    host: &str,
    report: &[u8],
    clock: u64,
) -> redis::RedisResult<Vec<u8>> {
    let [key, log, deadlines] = store.script_keys(room);
    let terms = script_arg(&PARAMS).unwrap();
    let answer: redis::Value = redis::Script::new(SYNC_SCRIPT)
        .key(key)
        .key(log)
        .key(deadlines)
        .arg(script_calls(&[(host, report, &terms)]))
        .arg("")
        .arg("")
        .arg(clock)
        .invoke(conn)?;
    match answer {
        redis::Value::Array(mut one) if one.len() == 1 => match one.remove(0) {
            redis::Value::BulkString(bytes) => Ok(bytes),
            redis::Value::ServerError(e) => Err(e.into()),
            other => panic!("unexpected answer {other:?}"),
        },
        other => panic!("unexpected answer {other:?}"),
    }
}

fn sync(
    conn: &mut redis::Connection,
    store: &RedisStore,
    host: &str,
    r: &Report,
    clock: u64,
) -> Reply {
    script_reply(&call(conn, store, "r", host, &script_arg(r).unwrap(), clock).unwrap()).unwrap()
}

/// `host`'s calls for `rooms`, with their reports in order.
fn batch<'a>(
    rooms: &'a [impl AsRef<str>],
    host: &'a str,
    reports: &'a [Report],
    params: &'a Params,
) -> Vec<SyncCall<'a>> {
    rooms
        .iter()
        .zip(reports)
        .map(|(room, report)| SyncCall {
            room: room.as_ref(),
            host,
            report,
            params,
        })
        .collect()
}

fn sums(conn: &mut redis::Connection, store: &RedisStore) -> Sums {
    common::room_sums(conn, &store.room_key("r"))
}

fn members(conn: &mut redis::Connection, store: &RedisStore) -> u64 {
    redis::cmd("ZCARD")
        .arg(store.deadlines_key("r"))
        .query(conn)
        .unwrap()
}

/// The set of deadlines lost (a `DEL`, an eviction) while the hash stays: the next call counts
/// the room anew from its entries, and answers from then on as the allocator does, which
/// never lost anything. Before the fix, a silent host was never let go and its waiters held
/// the room shut.
#[test]
fn a_lost_deadline_set_is_counted_anew() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let store = RedisStore::new(&redis.url(), "lost", Duration::from_secs(2)).unwrap();
    let mut state = RoomState::default();
    let expect = |host: &str, r: &Report, t: u64, state: &mut RoomState| {
        let mut r = r.clone();
        r.seq = state.entries.get(host).map_or(0, |e| e.seq);
        (allocate(state, host, &r, &PARAMS, t, ""), r)
    };
    // A holds waiters its allowance does not cover; B is busy.
    let a = report(10, 50, vec![(9, 5)]);
    let b = report(10, 20, Vec::new());
    let mut t = 1_000_000;
    for _ in 0..3 {
        for (h, r) in [("a", &a), ("b", &b)] {
            let (want, sent) = expect(h, r, t, &mut state);
            assert_eq!(sync(&mut conn, &store, h, &sent, t), want);
            t += 400;
        }
    }
    let _: () = redis::cmd("DEL")
        .arg(store.deadlines_key("r"))
        .query(&mut conn)
        .unwrap();
    // A goes silent; B syncs on past A's lease and reservation.
    let mut last = Reply::default();
    for _ in 0..40 {
        let (want, sent) = expect("b", &b, t, &mut state);
        last = sync(&mut conn, &store, "b", &sent, t);
        assert_eq!(last, want, "at {t}");
        let s = sums(&mut conn, &store);
        assert_eq!(
            members(&mut conn, &store),
            s.n + s.np,
            "one member per entry and per present host"
        );
        t += 400;
    }
    assert_eq!((last.hosts, last.known, last.behind), (1, 1, 0));
    assert_eq!(
        last.gt,
        b.active + last.free,
        "every free slot (the minute's 79 left bind), A let go"
    );
}

/// A call that fails part-way (here a report whose waiters are malformed, in the call that
/// would let a lapsed host go) writes nothing: the room's state is as before, and the next
/// good call answers as if the bad one never came.
#[test]
fn a_failing_call_writes_nothing() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let store = RedisStore::new(&redis.url(), "fail", Duration::from_secs(2)).unwrap();
    let mut state = RoomState::default();
    let mut t = 1_000_000;
    for h in ["a", "b"] {
        let r = report(10, 30, vec![(9, 3)]);
        assert_eq!(
            sync(&mut conn, &store, h, &r, t),
            allocate(&mut state, h, &r, &PARAMS, t, "")
        );
    }
    let dump = |conn: &mut redis::Connection| -> Vec<(String, Vec<u8>)> {
        let mut all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(store.room_key("r"))
            .query(conn)
            .unwrap();
        all.sort();
        let set: Vec<(String, Vec<u8>)> = redis::cmd("ZRANGE")
            .arg(store.deadlines_key("r"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(conn)
            .unwrap();
        all.extend(set);
        all
    };
    let before = dump(&mut conn);
    // Past A's lease and reservation: B's call would let A go, but its report is malformed.
    t += 10_000;
    let bad = serde_json::json!({
        "seq": 2, "b": 10, "active": 1, "admitted": 0, "traffic": 1, "demand": 1,
        "at": 1, "am0": 0, "am1": 0, "live": [[10]], "held": 0,
    });
    let failed = call(&mut conn, &store, "r", "b", &script_arg(&bad).unwrap(), t);
    assert!(failed.is_err(), "the script refuses it");
    assert_eq!(dump(&mut conn), before, "nothing written");
    let mut r = report(10, 1, Vec::new());
    r.seq = 2;
    assert_eq!(
        sync(&mut conn, &store, "b", &r, t),
        allocate(&mut state, "b", &r, &PARAMS, t, "")
    );
}

/// Both keys always have an expiry: a one-host room's, and one whose hosts all lapsed at
/// once (its set emptied, then made anew).
#[test]
fn the_keys_always_expire() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let mut store = RedisStore::new(&redis.url(), "ttl", Duration::from_secs(2)).unwrap();
    let keys = [store.room_key("r"), store.deadlines_key("r")];
    let ttls = |conn: &mut redis::Connection| -> Vec<i64> {
        keys.iter()
            .map(|k| redis::cmd("PTTL").arg(k).query(conn).unwrap())
            .collect()
    };
    let r = report(10, 1, Vec::new());
    let first = store.sync("r", "a", &r, &PARAMS).unwrap();
    let mut r2 = r.clone();
    r2.seq = first.seq;
    store.sync("r", "a", &r2, &PARAMS).unwrap();
    assert!(
        ttls(&mut conn).iter().all(|&t| t > 0),
        "{:?}",
        ttls(&mut conn)
    );
    // Hosts that lapse all at once, on the script's clock: the set is emptied, then made anew.
    for h in ["b", "c", "d"] {
        sync(&mut conn, &store, h, &r, 2_000_000);
    }
    sync(&mut conn, &store, "e", &r, 2_000_000 + 1000);
    sync(&mut conn, &store, "e", &r, 2_000_000 + 2000);
    sync(&mut conn, &store, "f", &r, 2_000_000 + 3000);
    assert!(
        ttls(&mut conn).iter().all(|&t| t > 0),
        "{:?}",
        ttls(&mut conn)
    );
}

/// Several rooms in one pipeline (as the syncer sends a host's rooms) answer as the same calls
/// one by one; a server that lost its scripts gets the script again; an unreachable server
/// is one error, not one per room.
#[test]
fn a_pipeline_answers_as_calls_one_by_one() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let timeout = Duration::from_secs(2);
    let mut batched = RedisStore::new(&redis.url(), "batch", timeout).unwrap();
    let mut single = RedisStore::new(&redis.url(), "single", timeout).unwrap();
    let rooms = ["r0", "r1", "r2"];
    for prefix in [&batched, &single] {
        for room in rooms {
            // Out of learning from the start (born at 0), as in stores_agree.
            let _: () = redis::cmd("HSET")
                .arg(prefix.room_key(room))
                .arg("born")
                .arg(0)
                .query(&mut conn)
                .unwrap();
        }
    }
    let params = Params {
        lease: 3_600_000,
        hold: 3_600_000,
        learn: 4_000_000,
        ..PARAMS
    };
    let mut seqs = std::collections::HashMap::new();
    for round in 0..6u64 {
        if round == 3 {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        }
        for host in ["a", "b"] {
            let reports: Vec<Report> = rooms
                .iter()
                .enumerate()
                .map(|(i, room)| {
                    let mut r = report(10, round + i as u64, vec![(9, round)]);
                    r.seq = seqs.get(&(host, *room)).copied().unwrap_or(0);
                    r
                })
                .collect();
            let calls = batch(&rooms[..], host, &reports, &params);
            let answers = batched.sync_many(&calls);
            assert_eq!(answers.len(), rooms.len());
            for (i, answer) in answers.into_iter().enumerate() {
                let answer = answer.unwrap();
                let one = single.sync(rooms[i], host, &reports[i], &params).unwrap();
                assert_eq!(answer, one, "round {round}, {host} on {}", rooms[i]);
                seqs.insert((host, rooms[i]), answer.seq);
            }
        }
    }
    drop(redis);
    let r = report(10, 1, Vec::new());
    let calls: Vec<SyncCall<'_>> = rooms
        .iter()
        .map(|room| SyncCall {
            room,
            host: "a",
            report: &r,
            params: &params,
        })
        .collect();
    let answers = batched.sync_many(&calls);
    assert!(
        matches!(
            answers.as_slice(),
            [Err(StoreError::Unreachable(_) | StoreError::Timeout(_))]
        ),
        "{answers:?}"
    );
}

/// A batch is one script call, and its rooms fail one by one (found by a review of the
/// batched script): a room whose log of revocations is not a stream answers its error and
/// writes nothing, while the rooms beside it are synced; over `maxmemory`, the whole call is
/// refused before any room writes (without the script's flags, a room that first deleted a
/// lapsed host let every later room of the call write past the limit); an element that is
/// not a call answers its own error.
#[test]
fn a_batch_fails_room_by_room_and_writes_nothing_it_refuses() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let mut store = RedisStore::new(&redis.url(), "rb", Duration::from_secs(2)).unwrap();
    let exists = |conn: &mut redis::Connection, key: &str| -> bool {
        redis::cmd("EXISTS").arg(key).query(conn).unwrap()
    };
    // A log of the wrong type: that room refuses, the other syncs.
    let _: () = redis::cmd("SET")
        .arg(store.revocations_key("bad"))
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let mut revoking = report(10, 1, Vec::new());
    revoking.rc = Some([0, 0]);
    revoking.rv = vec!["0000000000000001".into()];
    let plain = report(10, 1, Vec::new());
    let calls = [
        SyncCall {
            room: "bad",
            host: "a",
            report: &revoking,
            params: &PARAMS,
        },
        SyncCall {
            room: "good",
            host: "a",
            report: &plain,
            params: &PARAMS,
        },
    ];
    let answers = store.sync_many(&calls);
    assert!(
        matches!(&answers[0], Err(StoreError::Protocol(m)) if m.starts_with("WRONGTYPE")),
        "{answers:?}"
    );
    assert!(answers[1].is_ok(), "{answers:?}");
    assert!(
        !exists(&mut conn, &store.room_key("bad")),
        "nothing written"
    );
    assert!(
        !exists(&mut conn, &store.deadlines_key("bad")),
        "nothing written"
    );

    // Over maxmemory: a room whose call deletes first (a host past its reservation) comes
    // first in the batch, a room never synced after it.
    let mut t = 1_000_000;
    sync(&mut conn, &store, "x", &plain, t);
    let mut later = plain.clone();
    // y goes on syncing (the clock moves at most a lease a call) until x's reservation is
    // about to end.
    while t <= 1_007_000 {
        later.seq = sync(&mut conn, &store, "y", &later, t).seq;
        t += 1000;
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let keys = store.script_keys("r");
    let fresh = store.script_keys("fresh");
    let terms = script_arg(&PARAMS).unwrap();
    let (first, second) = (script_arg(&later).unwrap(), script_arg(&plain).unwrap());
    let refused: redis::RedisResult<redis::Value> = redis::Script::new(SYNC_SCRIPT)
        .key(&keys[0])
        .key(&keys[1])
        .key(&keys[2])
        .key(&fresh[0])
        .key(&fresh[1])
        .key(&fresh[2])
        .arg(script_calls(&[
            ("y", &first, &terms),
            ("z", &second, &terms),
        ]))
        .arg("")
        .arg("")
        .arg(t + 60_000)
        .invoke(&mut conn);
    assert!(
        matches!(&refused, Err(e) if e.code() == Some("OOM")),
        "{refused:?}"
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert!(
        !exists(&mut conn, &fresh[0]),
        "the later room wrote nothing"
    );

    // An element that is not a call: its own error; the call before it is answered. (Sent
    // as is: a query would turn the whole answer into its first error.)
    let mut calls = script_calls(&[("z", &second, &terms)]);
    // The array's length 2, and a second element that is a number.
    calls[0] = 0x92;
    calls.push(5);
    let mut eval = redis::cmd("EVAL");
    eval.arg(SYNC_SCRIPT).arg(6);
    for k in fresh.iter().chain(keys.iter()) {
        eval.arg(k);
    }
    eval.arg(calls).arg("").arg("").arg(t);
    let answer =
        redis::ConnectionLike::req_packed_command(&mut conn, &eval.get_packed_command()).unwrap();
    let redis::Value::Array(answer) = answer else {
        panic!("{answer:?}")
    };
    assert!(
        matches!(answer[0], redis::Value::BulkString(_)),
        "{answer:?}"
    );
    assert!(
        matches!(&answer[1], redis::Value::ServerError(e) if e.details().unwrap_or_default().contains("a call is")),
        "{answer:?}"
    );
}

/// A batch of more rooms than one script call takes (64) is split: every room is answered,
/// in the calls' order, as the same call alone would be.
#[test]
fn a_batch_larger_than_one_script_call_is_answered_in_order() {
    let redis = RedisServer::start();
    let timeout = Duration::from_secs(2);
    let mut batched = RedisStore::new(&redis.url(), "big", timeout).unwrap();
    let mut single = RedisStore::new(&redis.url(), "one", timeout).unwrap();
    let rooms: Vec<String> = (0..150).map(|i| format!("room{i}")).collect();
    // Each room's report differs (its active visitors), so answers out of order would show.
    let reports: Vec<Report> = (0..rooms.len() as u64)
        .map(|i| report(10, i % 50, Vec::new()))
        .collect();
    let calls = batch(&rooms, "a", &reports, &PARAMS);
    let answers = batched.sync_many(&calls);
    assert_eq!(answers.len(), rooms.len());
    for (i, answer) in answers.into_iter().enumerate() {
        let one = single.sync(&rooms[i], "a", &reports[i], &PARAMS).unwrap();
        assert_eq!(answer.unwrap(), one, "{}", rooms[i]);
    }
    assert_eq!(
        batched.commands(),
        3 + 3,
        "one connection (INFO, SCRIPT LOAD), then three script calls in one pipeline"
    );
}
