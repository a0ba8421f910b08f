//! Distributed leases against a real `redis-server`: a client on host B holds the whole
//! resource, then two clients behind host A's leaf coordinator join; the three converge to the
//! fair share, B's grant shrinking, and never hold more than the capacity together, across a
//! root restart (learning mode).

mod common;
/// The root's script held to a model of its answers, and what it costs.
#[path = "leases/root.rs"]
mod root;

use std::sync::Arc;
use std::time::{Duration, Instant};

use velvet_rope::lease::{
    ClientOptions, Coordinator, Gauge, LeaseClient, LeaseConfig, LeaseSource, RefreshFailureMode,
    Wants,
};
use velvet_rope::SystemClock;
use velvet_rope_cluster::{LeafRound, LeafSync, RedisLeaseRoot};

use common::{now, RedisServer};

const CAPACITY: f64 = 90.0;

fn config() -> LeaseConfig {
    LeaseConfig::from_toml(
        r#"
[[resources]]
identifier_glob = "db"
capacity = 90
refresh_failure = "pessimistic"
algorithm = { kind = "fair_share", lease_length = 2, refresh_interval = 0.2 }
"#,
    )
    .unwrap()
}

type Client = LeaseClient<Arc<dyn LeaseSource>, Gauge>;

fn client(source: Arc<dyn LeaseSource>, id: &str) -> Client {
    let options = ClientOptions {
        wants: Wants::Fixed(100.0),
        on_failure: RefreshFailureMode::Pessimistic,
        retry_ms: 100,
        ..ClientOptions::default()
    };
    LeaseClient::new(source, Gauge::new(0), id, "db", options)
}

/// Ticks every client for `dur`; the most they held together at any tick.
fn run(clients: &mut [Client], dur: Duration) -> f64 {
    let mut most: f64 = 0.0;
    let until = Instant::now() + dur;
    while Instant::now() < until {
        let t = now();
        for c in clients.iter_mut() {
            c.tick(t);
        }
        let total: f64 = clients.iter().map(|c| c.effective_capacity()).sum();
        most = most.max(total);
        std::thread::sleep(Duration::from_millis(20));
    }
    most
}

/// Ticks every client until each holds its fair share (30) for a second, at most `dur`; the
/// most they held together at any tick.
fn run_until_fair(clients: &mut [Client], dur: Duration) -> f64 {
    let until = Instant::now() + dur;
    let mut most: f64 = 0.0;
    let mut fair_since: Option<Instant> = None;
    while Instant::now() < until {
        most = most.max(run(clients, Duration::from_millis(100)));
        let fair = shares(clients).iter().all(|s| (s - 30.0).abs() < 1e-6);
        match (fair, fair_since) {
            (false, _) => fair_since = None,
            (true, None) => fair_since = Some(Instant::now()),
            (true, Some(t)) if t.elapsed() >= Duration::from_secs(1) => break,
            _ => {}
        }
    }
    most
}

fn shares(clients: &[Client]) -> Vec<f64> {
    clients.iter().map(|c| c.effective_capacity()).collect()
}

#[test]
fn three_clients_on_two_hosts_share_fairly_and_never_exceed_capacity() {
    let redis = RedisServer::start();
    let config = config();
    let root: Arc<dyn LeaseSource> = Arc::new(
        RedisLeaseRoot::new(&redis.url(), "t", &config, Duration::from_millis(300)).unwrap(),
    );
    // Host B: one client of the root itself, alone at first: the whole capacity, once the
    // new table's learning period (a lease and a margin) is over.
    let mut clients = vec![client(root.clone(), "b")];
    let until = Instant::now() + Duration::from_secs(10);
    while clients[0].effective_capacity() < CAPACITY {
        assert!(Instant::now() < until, "b never got the capacity");
        assert!(run(&mut clients, Duration::from_millis(100)) <= CAPACITY + 1e-9);
    }

    // Host A: a leaf coordinator under the root, with two clients. B's share shrinks, and the
    // part it gives up is handed on only once B's old lease has ended.
    let leaf = Arc::new(Coordinator::from_config(&config, now()).unwrap());
    let round = LeafRound::new(
        leaf.clone(),
        root.clone(),
        "host-a",
        Arc::new(SystemClock),
        Arc::new(|_| {}),
    );
    let _leaf_sync = LeafSync::start(round, Duration::from_millis(100));
    let leaf_source: Arc<dyn LeaseSource> = leaf.clone();
    clients.push(client(leaf_source.clone(), "a1"));
    clients.push(client(leaf_source, "a2"));
    let most = run_until_fair(&mut clients, Duration::from_secs(10));
    assert!(most <= CAPACITY + 1e-9, "held {most} together");
    let s = shares(&clients);
    for (i, share) in s.iter().enumerate() {
        assert!(
            (share - 30.0).abs() < 1e-6,
            "client {i} holds {share}: {s:?}"
        );
    }

    // The root restarts empty: it learns (gives back only what clients report holding) and
    // the leases stay fair; never over capacity meanwhile.
    let port = redis.port;
    let mut redis = redis;
    redis.kill();
    let most = run(&mut clients, Duration::from_millis(700));
    assert!(
        most <= CAPACITY + 1e-9,
        "held {most} together while the root was down"
    );
    let _redis = RedisServer::start_on(port);
    let most = run_until_fair(&mut clients, Duration::from_secs(6));
    assert!(
        most <= CAPACITY + 1e-9,
        "held {most} together after the restart"
    );
    let s = shares(&clients);
    for (i, share) in s.iter().enumerate() {
        assert!(
            (share - 30.0).abs() < 1e-6,
            "client {i} holds {share} after the restart: {s:?}"
        );
    }
}

/// Item 5 of the exactness review: the root counted a client's grant whatever its expiry, so
/// every leaf that restarted under a new id (`host#pid`) took its share away for good. A
/// grant counts only while its lease runs.
#[test]
fn a_dead_clients_grant_is_freed_when_its_lease_ends() {
    use velvet_rope::lease::LeaseRequest;
    let redis = RedisServer::start();
    let root =
        RedisLeaseRoot::new(&redis.url(), "dead", &config(), Duration::from_secs(2)).unwrap();
    // The root learns first (a table it does not know, from its first request): past that,
    // the first leaf takes it all.
    let learning = root
        .request_lease(&LeaseRequest::new("host-a#1", "db", 100.0, 0), now())
        .unwrap();
    assert_eq!(learning.capacity, 0.0);
    std::thread::sleep(Duration::from_millis(3200));
    let first = root
        .request_lease(&LeaseRequest::new("host-a#1", "db", 100.0, 0), now())
        .unwrap();
    assert_eq!(first.capacity, CAPACITY);
    // host-a#1 dies; host-a#2 (the restarted leaf) asks while that lease runs, then after.
    let during = root
        .request_lease(&LeaseRequest::new("host-a#2", "db", 100.0, 0), now())
        .unwrap();
    assert_eq!(during.capacity, 0.0, "the dead leaf's lease still runs");
    std::thread::sleep(Duration::from_millis(2000 + 1000 + 200));
    let after = root
        .request_lease(&LeaseRequest::new("host-a#2", "db", 100.0, 0), now())
        .unwrap();
    assert_eq!(
        after.capacity, CAPACITY,
        "the dead leaf's share is free once its lease (and the clock margin) ended"
    );
}
