//! The cluster tier over a real Redis Cluster: three masters with a replica each, started by
//! the test (`redis-server --cluster-enabled yes`, `redis-cli --cluster create`). Three rooms
//! live on three masters (by their hash tags); three hosts sync them with `redis_cluster =
//! true` and `replicas = 1`. One master is killed mid-run: its replica is promoted by the
//! cluster, the hosts find the new master, the killed node comes back as its replica, and every
//! room holds its limit throughout, never one visitor more, then fills exactly.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use velvet_rope::{Engine, Outcome};
use velvet_rope_cluster::{key_slot, Syncer};

use crate::common::{cookie_value, now, RedisServer, LEARNING_MS};

const LIMIT: u64 = 20;

/// Time between two new visitors of a room at a host.
const ARRIVALS: Duration = Duration::from_millis(150);

/// One cluster at a time: with the three tests' six-node clusters, failovers and hosts running
/// beside each other on two cores, one run of eight saw a healthy master's room fail a sync
/// (its cause not caught; alone, each test passed 8 runs of 8). Held for a test's whole run
/// (taken before its nodes start, so dropped after they stop).
fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Six nodes made into a cluster of three masters with a replica each; waits until every
/// node sees every slot served.
fn start_cluster() -> Vec<RedisServer> {
    let nodes: Vec<RedisServer> = (0..6).map(|_| RedisServer::start_cluster_node()).collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("redis-cli (Debian's redis-tools, installed with redis-server)");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    for n in &nodes {
        wait_cluster_ok(n, 20);
    }
    // Every replica in sync with its master (a replica that never synced is not promoted).
    for n in &nodes {
        crate::common::wait_for(20, "the replicas to sync", || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut n.connection())
                .unwrap_or_default();
            info.contains("role:master") || info.contains("master_link_status:up")
        });
    }
    nodes
}

/// The first of the names `<stem>0`, `<stem>1`, ... whose key `{<tag><name>}` each master
/// serves: one per master, by its port.
fn one_on_each_master(nodes: &[RedisServer], stem: &str, tag: &str) -> BTreeMap<u16, String> {
    let mut by_master: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0.. {
        let name = format!("{stem}{i}");
        let slot = key_slot(format!("{{{tag}{name}}}").as_bytes());
        let port = master_port(&nodes[0], slot).expect("every slot served");
        by_master.entry(port).or_insert(name);
        if by_master.len() == 3 {
            break;
        }
    }
    by_master
}

/// Waits until `node` says the cluster is up (every slot served).
fn wait_cluster_ok(node: &RedisServer, secs: u64) {
    crate::common::wait_for(secs, "the cluster to be up", || {
        let mut conn = node.connection();
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut conn)
            .unwrap_or_default();
        info.contains("cluster_state:ok")
    });
}

/// Whether `node` is a master serving slots.
fn serves_slots(node: &RedisServer) -> bool {
    let mut conn = node.connection();
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .unwrap_or_default();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut conn)
        .unwrap_or_default();
    info.contains("role:master")
        && nodes
            .lines()
            .any(|l| l.contains("myself") && l.split(' ').count() > 8)
}

/// The port of the master serving `slot`, as `node` sees it (none while none does).
fn master_port(node: &RedisServer, slot: u16) -> Option<u16> {
    let mut conn = node.connection();
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn).unwrap();
    for range in slots {
        let redis::Value::Array(parts) = range else {
            continue;
        };
        let (redis::Value::Int(first), redis::Value::Int(last), redis::Value::Array(master)) =
            (&parts[0], &parts[1], &parts[2])
        else {
            continue;
        };
        if (*first..=*last).contains(&i64::from(slot)) {
            if let redis::Value::Int(port) = master[1] {
                return Some(port as u16);
            }
        }
    }
    None
}

fn config(url: &str, host: &str, rooms: &[String]) -> String {
    let rooms: String = rooms
        .iter()
        .map(|r| {
            format!(
                "[[rooms]]\nname = \"{r}\"\ntotal_active_users = {LIMIT}\n\
                 new_users_per_minute = 100000\nsession_duration = 600\nrefresh_interval = 1\n\
                 [rooms.cookie]\nsecure = false\n"
            )
        })
        .collect();
    let header = crate::common::cluster_header(url, host, "redis_cluster = true\nreplicas = 1");
    format!("{header}\n{rooms}")
}

/// New visitors at every host for every room, and waiters coming back every 100 ms, for
/// `dur`; adds the first admissions to `admitted`, per room.
fn crowd(
    hosts: &[Arc<Engine>],
    rooms: &[String],
    waiting: &mut Vec<(usize, String, String)>,
    admitted: &mut BTreeMap<String, u64>,
    dur: Duration,
) {
    let until = Instant::now() + dur;
    let mut polled = Instant::now();
    let mut arrived = Instant::now() - ARRIVALS;
    while Instant::now() < until {
        // A new visitor per room at every host every ARRIVALS: rooms fill over seconds, so
        // the failover happens while they still admit.
        let arrive = arrived.elapsed() >= ARRIVALS;
        if arrive {
            arrived = Instant::now();
        }
        for (i, h) in hosts.iter().enumerate().filter(|_| arrive) {
            for r in rooms {
                let d = h.admit(r, None, now()).unwrap();
                match (d.outcome, d.set_cookie) {
                    (Outcome::Admit, _) => *admitted.entry(r.clone()).or_default() += 1,
                    (_, Some(c)) => waiting.push((i, r.clone(), cookie_value(c))),
                    _ => {}
                }
            }
        }
        if polled.elapsed() >= Duration::from_millis(100) {
            polled = Instant::now();
            let mut still = Vec::new();
            for (i, r, c) in waiting.drain(..) {
                let d = hosts[i].admit(&r, Some(&c), now()).unwrap();
                if d.outcome == Outcome::Admit {
                    *admitted.entry(r.clone()).or_default() += 1;
                } else {
                    still.push((i, r, d.set_cookie.map(cookie_value).unwrap_or(c)));
                }
            }
            *waiting = still;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_within(admitted: &BTreeMap<String, u64>, when: &str) {
    for (room, n) in admitted {
        assert!(*n <= LIMIT, "{room} holds {n} of {LIMIT} {when}");
    }
}

#[test]
fn a_master_killed_mid_run_never_overfills_a_room() {
    let _one = one_cluster_at_a_time();
    let mut nodes = start_cluster();
    // A room on each master: the first names whose slots the three masters serve.
    let by_master = one_on_each_master(&nodes, "room", "vr:");
    let rooms: Vec<String> = by_master.values().cloned().collect();
    let (&victim_port, victim_room) = by_master.iter().next().unwrap();
    let victim_room = victim_room.clone();
    let url = format!("redis://127.0.0.1:{}", nodes[0].port);
    let hosts: Vec<(Arc<Engine>, Syncer)> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            let engine = Arc::new(Engine::from_text(&config(&url, id, &rooms), now()).unwrap());
            let sync = Syncer::from_engine(engine.clone()).unwrap().unwrap();
            (engine, sync)
        })
        .collect();
    let engines: Vec<Arc<Engine>> = hosts.iter().map(|h| h.0.clone()).collect();
    std::thread::sleep(Duration::from_millis(LEARNING_MS));
    let mut waiting = Vec::new();
    let mut admitted = BTreeMap::new();
    crowd(
        &engines,
        &rooms,
        &mut waiting,
        &mut admitted,
        Duration::from_millis(400),
    );
    assert_within(&admitted, "before the failover");
    assert!(
        admitted.values().all(|&n| n < LIMIT),
        "the rooms are full before the failover: {admitted:?}"
    );

    // The master of the first room dies; the cluster promotes its replica after the node
    // timeout (a second) and an election.
    let victim = nodes.iter().position(|n| n.port == victim_port).unwrap();
    nodes[victim].kill();
    let survivor = (victim + 1) % nodes.len();
    crowd(
        &engines,
        &rooms,
        &mut waiting,
        &mut admitted,
        Duration::from_millis(1500),
    );
    assert_within(&admitted, "while the master was dead");
    let slot = key_slot(format!("{{vr:{victim_room}}}").as_bytes());
    crate::common::wait_for(20, "the cluster to promote the replica", || {
        master_port(&nodes[survivor], slot).is_some_and(|p| p != victim_port)
    });
    crowd(
        &engines,
        &rooms,
        &mut waiting,
        &mut admitted,
        Duration::from_millis(1000),
    );
    assert_within(&admitted, "after the promotion");

    let answered: Vec<u64> = hosts
        .iter()
        .map(|(e, _)| syncs(e, &victim_room, "ok"))
        .collect();
    // The dead master comes back as the new master's replica (its nodes.conf): grants of
    // that room are acknowledged again (`replicas = 1`).
    nodes[victim].restart();
    crate::common::wait_for(20, "the old master to come back as a replica", || {
        !serves_slots(&nodes[victim])
    });
    let until = Instant::now() + Duration::from_secs(15);
    while rooms
        .iter()
        .any(|r| admitted.get(r).copied().unwrap_or(0) < LIMIT)
        && Instant::now() < until
    {
        crowd(
            &engines,
            &rooms,
            &mut waiting,
            &mut admitted,
            Duration::from_millis(200),
        );
        assert_within(&admitted, "after the old master came back");
    }
    crowd(
        &engines,
        &rooms,
        &mut waiting,
        &mut admitted,
        Duration::from_millis(700),
    );
    for r in &rooms {
        assert_eq!(
            admitted.get(r).copied().unwrap_or(0),
            LIMIT,
            "{r} fills again, exactly ({admitted:?})"
        );
    }
    for (_, sync) in &hosts {
        assert!(!sync.status().in_outage, "{:?}", sync.status());
    }
    // The dead master's room is synced again through the promoted replica.
    for ((engine, _), before) in hosts.iter().zip(answered) {
        assert!(
            syncs(engine, &victim_room, "ok") > before,
            "{victim_room} never synced again"
        );
    }
    // Only the dead master's room missed syncs: the others' masters answered throughout.
    for (engine, _) in &hosts {
        for r in &rooms {
            let failed = syncs(engine, r, "failed");
            if *r == victim_room {
                assert!(failed > 0, "{r}'s master died, yet no sync of it failed");
            } else {
                assert_eq!(failed, 0, "{r}'s master never failed");
            }
        }
    }
}

/// Syncs of `room` by `engine`'s host with `outcome` (`ok` or `failed`; its metrics).
fn syncs(engine: &Engine, room: &str, outcome: &str) -> u64 {
    let text = engine.metrics_text();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("velvet_rope_cluster_syncs_total{")
                && l.contains(&format!("room=\"{room}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .unwrap_or_else(|| panic!("no {outcome} syncs metric for {room} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The lease root in a cluster: resources on every master, each request sent to its
/// resource's master (a single connection to one node would be answered `MOVED` for two of
/// the three), fair shares as on one server.
#[test]
fn a_lease_root_reaches_every_master() {
    use velvet_rope::lease::{LeaseConfig, LeaseRequest, LeaseSource};
    use velvet_rope::FakeClock;
    use velvet_rope_cluster::RedisLeaseRoot;

    let _one = one_cluster_at_a_time();
    let nodes = start_cluster();
    let by_master = one_on_each_master(&nodes, "db", "vr-lease:");
    let config = LeaseConfig::from_toml(
        r#"
[[resources]]
identifier_glob = "*"
capacity = 90
algorithm = { kind = "fair_share", lease_length = 2, refresh_interval = 1 }
"#,
    )
    .unwrap();
    let clock = Arc::new(FakeClock::new(1_800_000_000_000));
    let url = format!("redis://127.0.0.1:{}", nodes[0].port);
    let root = RedisLeaseRoot::new(&url, "vr", &config, Duration::from_secs(2))
        .unwrap()
        .in_cluster()
        .unwrap()
        .with_store_clock(clock.clone());
    let ask = |client: &str, resource: &str| {
        root.request_lease(&LeaseRequest::new(client, resource, 100.0, 0), 0)
            .unwrap()
            .capacity
    };
    for resource in by_master.values() {
        assert_eq!(
            ask("a", resource),
            0.0,
            "{resource}: a new table learns first"
        );
    }
    clock.advance(3_000);
    for resource in by_master.values() {
        assert_eq!(ask("a", resource), 90.0, "{resource}");
        assert_eq!(ask("b", resource), 0.0, "{resource}: a holds it all");
    }
    clock.advance(1_000);
    for resource in by_master.values() {
        assert_eq!(ask("a", resource), 45.0, "{resource}: a's fair share");
        assert_eq!(
            ask("b", resource),
            0.0,
            "{resource}: a's grant of 90 still runs"
        );
    }
    clock.advance(2_001);
    for resource in by_master.values() {
        assert_eq!(ask("a", resource), 45.0, "{resource}");
        assert_eq!(ask("b", resource), 45.0, "{resource}");
    }
    // The master of the first resource dies: its requests fail until the cluster promotes
    // the replica, then go to it (the root learns the slots again after the failed
    // connection), and the table, answered by another server, learns.
    let (&victim_port, resource) = by_master.iter().next().unwrap();
    let mut nodes = nodes;
    let victim = nodes.iter().position(|n| n.port == victim_port).unwrap();
    nodes[victim].kill();
    let try_ask = |client: &str| {
        root.request_lease(&LeaseRequest::new(client, resource, 100.0, 0), 0)
            .map(|l| l.capacity)
    };
    assert!(try_ask("a").is_err(), "the dead master answered");
    let mut answered = None;
    crate::common::wait_for(20, "the lease root to reach the promoted replica", || {
        answered = try_ask("a").ok();
        std::thread::sleep(Duration::from_millis(100));
        answered.is_some()
    });
    assert_eq!(
        answered,
        Some(0.0),
        "{resource}: another server learns first"
    );
}

/// The masters are asked at once: two masters that stall (SIGSTOP) cost a round one timeout,
/// not one each, and the third master's room is answered at once. (Asked one after another,
/// the third master was asked only after two timeouts, by when the cluster had found two
/// masters failing and the third answered `CLUSTERDOWN`: its room missed the sync.)
#[test]
fn stalled_masters_delay_only_their_own_rooms() {
    use velvet_rope_cluster::{Params, RedisClusterStore, Report, Store, SyncCall};

    let _one = one_cluster_at_a_time();
    let nodes = start_cluster();
    let by_master = one_on_each_master(&nodes, "room", "vr:");
    let timeout = Duration::from_millis(1500);
    let url = format!("redis://127.0.0.1:{}", nodes[0].port);
    let mut store = RedisClusterStore::new(&url, "vr", timeout).unwrap();
    let params = Params {
        total: 20,
        minute: 100,
        lease: 5000,
        hold: 60_000,
        learn: 0,
    };
    let report = Report::default();
    let calls: Vec<SyncCall<'_>> = by_master
        .values()
        .map(|room| SyncCall {
            room,
            host: "h",
            report: &report,
            params: &params,
        })
        .collect();
    for answer in store.sync_many(&calls) {
        answer.unwrap();
    }
    // The first two rooms' masters stall; the third's answers.
    let ports: Vec<u16> = by_master.keys().copied().collect();
    let stalled: Vec<&RedisServer> = nodes
        .iter()
        .filter(|n| ports[..2].contains(&n.port))
        .collect();
    for n in &stalled {
        n.pause();
    }
    let started = Instant::now();
    let answers = store.sync_many(&calls);
    let took = started.elapsed();
    for n in &stalled {
        n.resume();
    }
    assert!(answers[0].is_err() && answers[1].is_err(), "{answers:?}");
    assert!(answers[2].is_ok(), "{answers:?}");
    assert!(
        took < timeout * 3 / 2,
        "a round with two stalled masters took {took:?} (timeout {timeout:?})"
    );
}
