//! The Redis script and the in-process allocator answer the same sequence of reports alike:
//! random reports from four hosts on two rooms, against a real `redis-server`.

mod common;

use rand::{Rng, SeedableRng};
use velvet_rope_cluster::{
    allocate, relay_revocations, script_arg, script_calls, script_reply, Params, RedisStore, Reply,
    Report, RoomState, Store, LAPSES_PER_SYNC, SYNC_SCRIPT,
};

use common::RedisServer;

fn random_report(rng: &mut rand::rngs::StdRng) -> Report {
    let b = 1000 + rng.gen_range(0..3);
    let mut live = Vec::new();
    for k in 990..=b {
        if rng.gen_bool(0.3) {
            // (A count of 0 now and then: both stores leave it out.)
            live.push((k, rng.gen_range(0..20)));
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
        held: 0,
        ..Report::default()
    }
}

/// The script called directly on `room` (with `run` as the server's run, and `clock` as the
/// store's clock when given).
#[allow(clippy::too_many_arguments)]
fn invoke(
    script: &redis::Script,
    store: &RedisStore,
    conn: &mut redis::Connection,
    room: &str,
    host: &str,
    report: &Report,
    params: &Params,
    run: &str,
    clock: Option<u64>,
) -> Reply {
    let [key, log, deadlines] = store.script_keys(room);
    let (report, terms) = (script_arg(report).unwrap(), script_arg(params).unwrap());
    let mut call = script.key(key);
    call.key(log)
        .key(deadlines)
        .arg(script_calls(&[(host, &report, &terms)]))
        .arg("")
        .arg(run);
    if let Some(clock) = clock {
        call.arg(clock);
    }
    let answer: Vec<Vec<u8>> = call.invoke(conn).unwrap();
    assert_eq!(answer.len(), 1, "one answer per room");
    script_reply(&answer[0]).unwrap()
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
        learn: 4_000_000,
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
    // The server's identity as the script reads it: `<run_id>/<replication id>`.
    let info: String = redis::cmd("INFO").query(&mut conn).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap()
            .trim()
            .to_owned()
    };
    let server_run = format!("{}/{}", field("run_id"), field("master_replid"));
    let script = redis::Script::new(SYNC_SCRIPT);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let hosts = ["h1", "h2", "h3", "h4", "h5"];
    // Each host's last grant per room, as hosts report it.
    let mut last_seq = std::collections::HashMap::<(usize, &str), u64>::new();
    let (mut stale, mut lost, mut stale_learning) = (0, 0, 0);
    for i in 0..600 {
        let r = rng.gen_range(0..rooms.len());
        let host = hosts[rng.gen_range(0..hosts.len())];
        let mut report = random_report(&mut rng);
        let seq = last_seq.get(&(r, host)).copied().unwrap_or(0);
        report.seq = seq;
        match rng.gen_range(0..20) {
            // A report older than the host's last grant (a stalled process, a lost reply).
            0 | 1 if seq > 0 => report.seq = rng.gen_range(0..seq),
            // A host holding a grant the store does not know of: both learn anew.
            2 if i >= 450 => report.seq = seq + rng.gen_range(1..1000),
            // A host relying on a reservation (a store that has none for it lost writes).
            3 => report.held = 1,
            _ => {}
        }
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        let now = secs * 1000 + micros / 1000;
        // The store's run: the server's own (as the Redis store sends it), or, now and then,
        // another one (a restart or a failover, as the script is told) or none.
        let run = match i % 97 {
            0 if i > 0 => format!("failed-over-{i}"),
            1 => String::new(),
            _ => server_run.clone(),
        };
        let expected = allocate(&mut states[r], host, &report, &params, now, &run);
        let got = if run == server_run {
            store.sync(rooms[r], host, &report, &params).unwrap()
        } else {
            invoke(
                &script, &store, &mut conn, rooms[r], host, &report, &params, &run, None,
            )
        };
        assert_eq!(
            got, expected,
            "call {i}: {host} on {} with {report:?}",
            rooms[r]
        );
        stale += got.stale;
        lost += u64::from(got.learning == 1 && i >= 450);
        stale_learning += got.stale * got.learning;
        last_seq.insert((r, host), got.seq);
    }
    assert!(
        stale > 10 && lost > 5 && stale_learning > 5,
        "stale {stale}, learning {lost}, stale while learning {stale_learning}"
    );
    assert!(
        store.commands() <= 600 + 3,
        "one connection (INFO, SCRIPT LOAD), then per sync one call: {}",
        store.commands()
    );
}

/// Revocations relay alike through both stores: each host's revocations reach every other
/// host exactly once and never its own (the positions differ: the server's clock names a
/// stream's entries).
#[test]
fn revocations_relay_alike() {
    let redis = RedisServer::start();
    let mut store =
        RedisStore::new(&redis.url(), "relay", std::time::Duration::from_secs(2)).unwrap();
    let params = Params {
        total: 200,
        minute: 150,
        lease: 3_600_000,
        hold: 3_600_000,
        learn: 4_000_000,
    };
    let mut state = RoomState {
        born: Some(0),
        ..RoomState::default()
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let hosts = ["h1", "h2", "h3"];
    // Per host: its cursor in each store, what it revoked, what it received from each.
    let mut cursors = [[[0u64; 2]; 2]; 3];
    let mut made: Vec<Vec<String>> = vec![Vec::new(); 3];
    let mut got: Vec<[Vec<String>; 2]> = vec![[Vec::new(), Vec::new()]; 3];
    let mut next_id = 1u64;
    let mut conn = redis.connection();
    for i in 0..300 {
        let h = rng.gen_range(0..hosts.len());
        let mut report = random_report(&mut rng);
        // The last rounds send nothing new: everyone catches up.
        let n = if i < 250 { rng.gen_range(0..4) } else { 0 };
        for _ in 0..n {
            let id = format!("{:016x}", next_id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            next_id += 1;
            made[h].push(id.clone());
            report.rv.push(id);
        }
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        let now = secs * 1000 + micros / 1000;
        report.rc = Some(cursors[h][0]);
        let mut expected = allocate(&mut state, hosts[h], &report, &params, now, "");
        (expected.rc, expected.rv) = relay_revocations(&mut state, hosts[h], &report, &params, now);
        report.rc = Some(cursors[h][1]);
        let answer = store.sync("r", hosts[h], &report, &params).unwrap();
        assert_eq!(answer.rv, expected.rv, "call {i}: {}", hosts[h]);
        cursors[h][0] = expected.rc.unwrap();
        cursors[h][1] = answer.rc.unwrap();
        got[h][0].extend(expected.rv.clone());
        got[h][1].extend(answer.rv.clone());
    }
    for h in 0..hosts.len() {
        let mut want: Vec<String> = (0..hosts.len())
            .filter(|&o| o != h)
            .flat_map(|o| made[o].clone())
            .collect();
        want.sort();
        for (s, received) in got[h].iter().enumerate() {
            let mut seen = received.clone();
            seen.sort();
            let before = seen.len();
            seen.dedup();
            assert_eq!(
                seen.len(),
                before,
                "{} got an id twice from store {s}",
                hosts[h]
            );
            assert_eq!(seen, want, "{} from store {s}", hosts[h]);
        }
    }
}

/// Short leases, for rooms whose hosts lapse within a test.
const SHORT_LEASES: Params = Params {
    total: 500,
    minute: 400,
    lease: 1000,
    hold: 1500,
    learn: 0,
};

/// A redis-server, a connection to it, a store of keys under `prefix` and the sync script.
fn started(prefix: &str) -> (RedisServer, redis::Connection, RedisStore, redis::Script) {
    let redis = RedisServer::start();
    let conn = redis.connection();
    let store = RedisStore::new(&redis.url(), prefix, std::time::Duration::from_secs(2)).unwrap();
    (redis, conn, store, redis::Script::new(SYNC_SCRIPT))
}

/// Hosts come and go on short leases, many lapsing at once (more than one call processes), on
/// a clock both stores are given: the script's sums kept call by call answer as the
/// allocator's recount does, and end holding what the allocator's state holds.
#[test]
fn lapses_agree() {
    let (_redis, mut conn, store, script) = started("lapse");
    let params = SHORT_LEASES;
    let mut state = RoomState::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let hosts: Vec<String> = (0..40).map(|i| format!("h{i:02}")).collect();
    let mut last_seq = std::collections::HashMap::<usize, u64>::new();
    let mut clock = 1_000_000u64;
    let (mut lapsed_at_once, mut learning, mut granted) = (0, 0, 0);
    for i in 0..3000 {
        // Now and then time jumps (everyone's lease ends together), else it creeps.
        clock += if rng.gen_ratio(1, 150) {
            rng.gen_range(1000..4000)
        } else {
            rng.gen_range(0..60)
        };
        // A few hosts sync often, the others now and then (their leases lapse between).
        let h = if rng.gen_bool(0.5) {
            rng.gen_range(0..4)
        } else {
            rng.gen_range(0..hosts.len())
        };
        let mut report = random_report(&mut rng);
        report.seq = last_seq.get(&h).copied().unwrap_or(0);
        if rng.gen_ratio(1, 40) && report.seq > 0 {
            report.seq -= 1;
        }
        let due = state
            .entries
            .iter()
            .filter(|(name, e)| {
                **name != hosts[h] && (e.present && e.exp < clock || e.gone < clock)
            })
            .count();
        lapsed_at_once = lapsed_at_once.max(due);
        let expected = allocate(&mut state, &hosts[h], &report, &params, clock, "");
        let got = invoke(
            &script,
            &store,
            &mut conn,
            "r",
            &hosts[h],
            &report,
            &params,
            "",
            Some(clock),
        );
        assert_eq!(
            got, expected,
            "call {i}: {} at {clock} with {report:?}",
            hosts[h]
        );
        last_seq.insert(h, got.seq);
        learning += got.learning;
        granted += got.gt;
    }
    assert!(
        lapsed_at_once > 2 * LAPSES_PER_SYNC,
        "some calls found more lapses due than one processes: {lapsed_at_once}"
    );
    assert!(learning < 3000 && granted > 0, "past learning, grants made");
    // The script's sums are what the allocator's state counts.
    let key = store.room_key("r");
    let agg = common::room_sums(&mut conn, &key);
    assert_eq!(agg.n, state.entries.len() as u64);
    assert_eq!(
        agg.np,
        state.entries.values().filter(|e| e.present).count() as u64
    );
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&key).query(&mut conn).unwrap();
    let mut held: Vec<&str> = fields.iter().filter_map(|f| f.strip_prefix("h:")).collect();
    held.sort();
    let mut want: Vec<&str> = state.entries.keys().map(String::as_str).collect();
    want.sort();
    assert_eq!(held, want, "the same hosts held");
    let due: u64 = redis::cmd("ZCARD")
        .arg(store.deadlines_key("r"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        due as usize,
        state.entries.len() + state.entries.values().filter(|e| e.present).count(),
        "one deadline per entry and one per present host"
    );
}

/// One more lapse due than a call processes, with the next deadline not yet due: the script
/// reads its deadlines only once the clock passes the earliest it remembers, and must not
/// remember one past a lapse it left for the next call (the allocator processes it then).
#[test]
fn a_lapse_left_for_the_next_call_is_processed_by_it() {
    let (_redis, mut conn, store, script) = started("left");
    let params = SHORT_LEASES;
    let mut state = RoomState::default();
    let mut seqs = std::collections::HashMap::<String, u64>::new();
    let mut sync = |state: &mut RoomState, host: &str, clock: u64| {
        let report = Report {
            seq: seqs.get(host).copied().unwrap_or(0),
            b: 1000,
            active: 1,
            at: 1,
            am0: 1,
            traffic: 1,
            demand: 1,
            ..Report::default()
        };
        let expected = allocate(state, host, &report, &params, clock, "");
        let got = invoke(
            &script,
            &store,
            &mut conn,
            "r",
            host,
            &report,
            &params,
            "",
            Some(clock),
        );
        assert_eq!(got, expected, "{host} at {clock}");
        seqs.insert(host.to_owned(), got.seq);
        got
    };
    let start = 1_000_000;
    // The caller and one host more than a call processes sync together; one host later.
    sync(&mut state, "caller", start);
    let quiet: Vec<String> = (0..=LAPSES_PER_SYNC).map(|i| format!("h{i:02}")).collect();
    for h in &quiet {
        sync(&mut state, h, start);
    }
    sync(&mut state, "late", start + 500);
    // Their leases have ended, the late host's has not: a call processes all but one.
    let got = sync(&mut state, "caller", start + 1200);
    assert_eq!(got.hosts, 3, "the caller, the late host and one lapse left");
    // The next call, still before the late host's lease ends, processes the one left.
    let got = sync(&mut state, "caller", start + 1300);
    assert_eq!(got.hosts, 2, "the caller and the late host");
}

/// Entries in the form earlier builds wrote (a MessagePack map of the allocator's `Entry`)
/// are read as they were: a host's own, one that lapses, and every one when the room is
/// counted anew. The script answers as the allocator does throughout (an upgrade keeps the
/// room's state).
#[test]
fn entries_of_the_form_before_are_read() {
    let (_redis, mut conn, store, script) = started("form");
    let params = SHORT_LEASES;
    let mut side = SideBySide::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut sync = |side: &mut SideBySide, conn: &mut redis::Connection, host: &str, clock| {
        let report = random_report(&mut rng);
        side.sync(&script, &store, conn, host, report, &params, clock);
    };
    let key = store.room_key("r");
    let as_before = |side: &SideBySide, conn: &mut redis::Connection, host: &str| {
        let old = rmp_serde::to_vec_named(&side.state.entries[host]).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg(format!("h:{host}"))
            .arg(old)
            .query(conn)
            .unwrap();
    };
    let t = 1_000_000;
    for h in ["a", "b", "c"] {
        sync(&mut side, &mut conn, h, t);
    }
    // Its own entry of the form before.
    as_before(&side, &mut conn, "b");
    sync(&mut side, &mut conn, "b", t + 100);
    sync(&mut side, &mut conn, "c", t + 200);
    // A lapse read from an entry of the form before.
    as_before(&side, &mut conn, "a");
    sync(&mut side, &mut conn, "c", t + 1050);
    sync(&mut side, &mut conn, "b", t + 1090);
    // The room counted anew (its deadlines lost) from entries of both forms.
    as_before(&side, &mut conn, "c");
    let _: () = redis::cmd("DEL")
        .arg(store.deadlines_key("r"))
        .query(&mut conn)
        .unwrap();
    sync(&mut side, &mut conn, "b", t + 1150);
    sync(&mut side, &mut conn, "c", t + 1200);
    // Garbage is still refused, with its own error, and nothing written.
    refused_alike(
        &mut conn,
        &store,
        "b",
        &params,
        t + 1300,
        |conn| {
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg("h:b")
                .arg(&b"\x07not an entry"[..])
                .query(conn)
                .unwrap();
        },
        "a host entry of another form",
    );
}

/// A room synced by the script and by the allocator side by side.
#[derive(Default)]
struct SideBySide {
    /// The allocator's state of the room.
    state: RoomState,
    /// Each host's last grant number, which its next report carries.
    seqs: std::collections::HashMap<String, u64>,
}

impl SideBySide {
    /// `host`'s call with `report` (its `seq` set to the host's last grant number) at store
    /// time `clock`, by the script on room `r` and by the allocator: the same answer.
    #[allow(clippy::too_many_arguments)]
    fn sync(
        &mut self,
        script: &redis::Script,
        store: &RedisStore,
        conn: &mut redis::Connection,
        host: &str,
        mut report: Report,
        params: &Params,
        clock: u64,
    ) -> Reply {
        report.seq = self.seqs.get(host).copied().unwrap_or(0);
        let expected = allocate(&mut self.state, host, &report, params, clock, "");
        let got = invoke(
            script,
            store,
            conn,
            "r",
            host,
            &report,
            params,
            "",
            Some(clock),
        );
        assert_eq!(got, expected, "{host} at {clock}");
        self.seqs.insert(host.to_owned(), got.seq);
        got
    }
}

/// How [`state_as_before`] leaves the record.
#[derive(Clone, Copy, PartialEq)]
enum Record<'a> {
    /// Dropped, as a room an earlier build synced holds it.
    Dropped,
    /// This stale record kept beside the fields: a room an earlier build synced after this
    /// one (a host ran it again for a while).
    Stale(&'a [u8]),
    /// Dropped, and a value the script cannot pack put among the sums (a bucket far from any
    /// host's, whose value is a string).
    Unpackable,
}

/// The room's state record turned back into the fields earlier builds kept (`clock`, `skew`,
/// `seq`, `born`, `frontier`, `ttl` as numbers, `agg` the sums as a MessagePack map).
fn state_as_before(conn: &mut redis::Connection, key: &str, record: Record<'_>) {
    use std::collections::BTreeMap;
    let st: Vec<u8> = redis::cmd("HGET").arg(key).arg("st").query(conn).unwrap();
    let mut at = 1;
    let mut double = || {
        let d = f64::from_le_bytes(st[at..at + 8].try_into().unwrap());
        at += 8;
        d as i64
    };
    let parts: Vec<i64> = (0..6).map(|_| double()).collect();
    let sums: Vec<i64> = (0..7).map(|_| double()).collect();
    let counts: Vec<i64> = (0..5).map(|_| double()).collect();
    /// A sum's value: a number, or (`Record::Unpackable`) a string.
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum Value {
        Number(i64),
        Text(&'static str),
    }
    let mut maps: Vec<BTreeMap<i64, Value>> = counts
        .iter()
        .map(|&count| {
            (0..count)
                .map(|_| (double(), Value::Number(double())))
                .collect()
        })
        .collect();
    if record == Record::Unpackable {
        maps[0].insert(5, Value::Text("x"));
    }
    #[derive(serde::Serialize)]
    struct Agg {
        n: i64,
        np: i64,
        rt: i64,
        act: i64,
        tr: i64,
        dm: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        nd: Option<i64>,
        m: BTreeMap<i64, Value>,
        a: BTreeMap<i64, Value>,
        c: BTreeMap<i64, Value>,
        l: BTreeMap<i64, Value>,
        u: BTreeMap<i64, Value>,
    }
    let mut maps = maps.into_iter();
    let mut next = || maps.next().unwrap();
    let agg = Agg {
        n: sums[0],
        np: sums[1],
        rt: sums[2],
        act: sums[3],
        tr: sums[4],
        dm: sums[5],
        nd: (sums[6] >= 0).then_some(sums[6]),
        m: next(),
        a: next(),
        c: next(),
        l: next(),
        u: next(),
    };
    let mut hset = redis::cmd("HSET");
    hset.arg(key);
    for (name, v) in ["clock", "skew", "seq", "born", "frontier", "ttl"]
        .iter()
        .zip(&parts)
    {
        hset.arg(*name).arg(v);
    }
    hset.arg("agg").arg(rmp_serde::to_vec_named(&agg).unwrap());
    let _: () = hset.query(conn).unwrap();
    let _: () = match record {
        Record::Stale(stale) => redis::cmd("HSET").arg(key).arg("st").arg(stale).query(conn),
        _ => redis::cmd("HDEL").arg(key).arg("st").query(conn),
    }
    .unwrap();
}

/// A room's state in the fields an earlier build kept (the sums a MessagePack map) is read as
/// it was, also beside a stale record (that build synced the room after this one): the script
/// answers as the allocator does, writes the state as one record and drops the old fields. A
/// record of another form, or a state that cannot be packed, is refused, and nothing written.
#[test]
fn a_room_state_of_the_form_before_is_read() {
    let (_redis, mut conn, store, script) = started("state");
    let params = SHORT_LEASES;
    let mut side = SideBySide::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let key = store.room_key("r");
    let t = 1_000_000;
    let (mut old_forms, mut beside) = (0, 0);
    let mut stale: Vec<u8> = Vec::new();
    for step in 0..60u64 {
        let host = ["a", "b", "c", "d"][rng.gen_range(0..4)];
        let clock = t + 90 * step;
        if step % 11 == 2 {
            stale = redis::cmd("HGET")
                .arg(&key)
                .arg("st")
                .query(&mut conn)
                .unwrap();
        }
        if step % 7 == 3 {
            state_as_before(&mut conn, &key, Record::Dropped);
            old_forms += 1;
        } else if step % 11 == 6 && !stale.is_empty() {
            state_as_before(&mut conn, &key, Record::Stale(&stale));
            beside += 1;
        }
        let report = random_report(&mut rng);
        side.sync(&script, &store, &mut conn, host, report, &params, clock);
        let fields: Vec<String> = redis::cmd("HKEYS").arg(&key).query(&mut conn).unwrap();
        let mut kept: Vec<&str> = fields
            .iter()
            .map(String::as_str)
            .filter(|f| !f.starts_with("h:"))
            .collect();
        kept.sort();
        assert_eq!(kept, ["st"], "step {step}");
    }
    assert!(old_forms >= 8 && beside >= 4, "{old_forms} {beside}");
    refused_alike(
        &mut conn,
        &store,
        "a",
        &params,
        t + 9000,
        |conn| state_as_before(conn, &key, Record::Unpackable),
        "bad argument",
    );
    // Records of another form: too short; maps' sizes that are not whole numbers.
    let mut halves = vec![1u8];
    for d in [1.0f64; 13].iter().chain(&[0.5, 0.5, 0.0, 0.0, 0.0]) {
        halves.extend_from_slice(&d.to_le_bytes());
    }
    halves.extend_from_slice(&[0; 16]);
    for garbage in [&b"\x01short"[..], &halves] {
        refused_alike(
            &mut conn,
            &store,
            "a",
            &params,
            t + 9000,
            |conn| {
                // (The old fields the refusal above left go: the record is read alone.)
                let _: () = redis::cmd("HDEL")
                    .arg(&key)
                    .arg(&["clock", "skew", "seq", "born", "frontier", "ttl", "agg"])
                    .query(conn)
                    .unwrap();
                let _: () = redis::cmd("HSET")
                    .arg(&key)
                    .arg("st")
                    .arg(garbage)
                    .query(conn)
                    .unwrap();
            },
            "a room state of another form",
        );
    }
}

/// After `spoil`, `host`'s call is refused with `error`, and the room's keys are as they were.
fn refused_alike(
    conn: &mut redis::Connection,
    store: &RedisStore,
    host: &str,
    params: &Params,
    clock: u64,
    spoil: impl FnOnce(&mut redis::Connection),
    error: &str,
) {
    spoil(conn);
    let [k, log, deadlines] = store.script_keys("r");
    let dump = |conn: &mut redis::Connection| -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        (
            redis::cmd("HGETALL").arg(&k).query(conn).unwrap(),
            redis::cmd("ZRANGE")
                .arg(&deadlines)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(conn)
                .unwrap(),
        )
    };
    let before = dump(conn);
    let answer: redis::RedisResult<Vec<redis::Value>> = redis::Script::new(SYNC_SCRIPT)
        .key(&k)
        .key(&log)
        .key(&deadlines)
        .arg(script_calls(&[(
            host,
            &script_arg(&Report::default()).unwrap(),
            &script_arg(params).unwrap(),
        )]))
        .arg("")
        .arg("")
        .arg(clock)
        .invoke(conn);
    assert!(format!("{answer:?}").contains(error), "{answer:?}");
    assert_eq!(dump(conn), before, "nothing written");
}

/// A room whose sums hold more values than one `struct` call packs (waiters in 700 arrival
/// buckets: the sums' maps `l` and `u` hold about 1,400 pairs): written and read back in
/// slices, with the allocator's answers throughout.
#[test]
fn a_state_of_many_buckets_is_kept() {
    let (_redis, mut conn, store, script) = started("wide");
    let params = SHORT_LEASES;
    let mut side = SideBySide::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let t = 1_000_000;
    for step in 0..12u64 {
        let host = ["a", "b", "c"][(step % 3) as usize];
        let clock = t + 100 * step;
        let mut report = random_report(&mut rng);
        report.live = (report.b - 700..=report.b)
            .map(|k| (k, rng.gen_range(1..4)))
            .collect();
        side.sync(&script, &store, &mut conn, host, report, &params, clock);
    }
    let st: Vec<u8> = redis::cmd("HGET")
        .arg(store.room_key("r"))
        .arg("st")
        .query(&mut conn)
        .unwrap();
    assert!(
        st.len() > 145 + 8 * 2000,
        "{} bytes: past one slice",
        st.len()
    );
    let sums = common::room_sums(&mut conn, &store.room_key("r"));
    assert_eq!(sums.n, side.state.entries.len() as u64);
}
