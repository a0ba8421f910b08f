//! A real `redis-server` (Debian's) on a free 127.0.0.1 port, persistence off, stopped when
//! dropped; and a cluster of engines syncing through it.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use velvet_rope::{Clock, Engine, Outcome, SystemClock};
use velvet_rope_cluster::Syncer;

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its own working directory (a replica writes the data it receives there, and a server
    /// loads a `dump.rdb` it finds there: never a directory another server uses).
    dir: std::path::PathBuf,
    /// Its arguments beyond the port and the directory (a restart uses them again).
    extra: Vec<String>,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().unwrap().port()
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> Self {
        Self::start_on(free_port())
    }

    /// Starts a server on `port` (a restart of one that was killed).
    pub fn start_on(port: u16) -> Self {
        Self::start_with(port, &[])
    }

    /// Starts a replica of the server on 127.0.0.1:`primary`, on a free port, and waits for
    /// it to be in sync.
    pub fn start_replica_of(primary: u16) -> Self {
        let p = primary.to_string();
        let server = Self::start_with(free_port(), &["--replicaof", "127.0.0.1", &p]);
        let mut conn = server.connection();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut conn)
                .unwrap();
            if info.contains("master_link_status:up") {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "the replica never synced: {info}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start_with(port: u16, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "vr-redis-{}-{port}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let mut server = Self {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        server.spawn();
        server
    }

    /// A node of a Redis Cluster on a free port (its cluster bus on another), failing over
    /// after a second without its master.
    pub fn start_cluster_node() -> Self {
        let bus = free_port().to_string();
        Self::start_with(
            free_port(),
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-port",
                &bus,
                // A replica syncs at once (not after the default 5 s), so that it can be
                // promoted as soon as the test needs it.
                "--repl-diskless-sync-delay",
                "0",
                // The masters that are up keep serving their slots while one fails over.
                "--cluster-require-full-coverage",
                "no",
            ],
        )
    }

    /// Starts the server again after [`RedisServer::kill`]: same port, same directory (a
    /// cluster node reads back its `nodes.conf`), same arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--dir", &self.dir.to_string_lossy()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (make test installs Debian's redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.ping() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A connection for the test's own commands.
    pub fn connection(&self) -> redis::Connection {
        let c = redis::Client::open(self.url()).unwrap();
        let conn = c
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        conn
    }

    fn ping(&self) -> bool {
        let Ok(c) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = c.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut conn).is_ok()
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) with the pid of our own child process.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    /// SIGSTOP: the server stalls (connections stay open, nothing answers).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How long a store that knows nobody learns with these hosts' settings (a sync interval, a
/// turn whose holder stopped: four timeouts and half a second, and an interval; then a lease
/// of margin for the store's clock), and a little more.
pub const LEARNING_MS: u64 = 100 + (4 * 200 + 500) + 100 + 600 + 300;

/// The settings, tickets and `[cluster]` table (with `cluster_extra` in it) of one host of
/// a test cluster: the timings [`LEARNING_MS`] is computed from.
pub fn cluster_header(url: &str, host: &str, cluster_extra: &str) -> String {
    format!(
        r#"
[settings]
bucket_width_secs = 1

[tickets]
keys = [{{ id = 1, secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" }}]

[cluster]
redis_url = "{url}"
host_id = "{host}"
sync_interval_ms = 100
lease_ms = 600
timeout_ms = 200
{cluster_extra}
"#
    )
}

/// The configuration of one host of a test cluster.
pub fn host_config(url: &str, host: &str, room: &str, extra: &str) -> String {
    let header = cluster_header(url, host, "");
    format!(
        r#"{header}
[[rooms]]
name = "r"
refresh_interval = 1
{room}
[rooms.cookie]
secure = false
{extra}
"#
    )
}

/// One host: an engine and its sync loop.
pub struct Host {
    /// The engine.
    pub engine: Arc<Engine>,
    /// Its sync loop.
    pub sync: Syncer,
}

impl Host {
    /// A host of `config`.
    pub fn new(config: &str) -> Self {
        let engine = Arc::new(Engine::from_text(config, now()).unwrap());
        let sync = Syncer::from_engine(engine.clone()).unwrap().unwrap();
        Self { engine, sync }
    }

    /// A new visitor's decision and the cookie it holds after it.
    pub fn arrive(&self) -> (Outcome, Option<String>) {
        let d = self.engine.admit("r", None, now()).unwrap();
        (d.outcome, d.set_cookie.map(cookie_value))
    }

    /// A returning visitor holding `cookie`.
    pub fn again(&self, cookie: &str) -> (Outcome, Option<String>) {
        let d = self.engine.admit("r", Some(cookie), now()).unwrap();
        (d.outcome, d.set_cookie.map(cookie_value))
    }

    /// Visitors active here, as last published.
    pub fn active(&self) -> u64 {
        self.engine.stats("r").unwrap().active_users
    }
}

/// The `name=value` part of a `Set-Cookie`.
pub fn cookie_value(set_cookie: String) -> String {
    set_cookie.split(';').next().unwrap_or_default().to_owned()
}

/// The wall clock, in ms.
pub fn now() -> u64 {
    SystemClock.now_ms()
}

/// Waits until `cond` holds, at most `secs` seconds.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sets `server`'s role: a master (`None`) or a replica of 127.0.0.1:`port`, and waits for a
/// replica's link.
pub fn set_role(server: &RedisServer, master: Option<u16>) {
    let mut conn = server.connection();
    match master {
        None => redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .exec(&mut conn)
            .unwrap(),
        Some(port) => {
            redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(port)
                .exec(&mut conn)
                .unwrap();
            wait_for(10, "the replica's link", || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut server.connection())
                    .unwrap();
                info.contains("master_link_status:up")
            });
        }
    }
}

/// A room's sums as the sync script keeps them, in its state record (field `st`; see
/// `encode_state` in sync.lua): hosts held `n`, those present `np`, reserved totals `rt`,
/// active visitors `act`, traffic `tr`.
#[derive(Debug, PartialEq, Eq)]
pub struct Sums {
    pub n: u64,
    pub np: u64,
    pub rt: u64,
    pub act: u64,
    pub tr: u64,
}

/// The sums of the room whose hash is `key` (see [`Sums`]).
pub fn room_sums(conn: &mut redis::Connection, key: &str) -> Sums {
    let st: Vec<u8> = redis::cmd("HGET").arg(key).arg("st").query(conn).unwrap();
    assert_eq!(st.first(), Some(&1), "a state record of the first form");
    // After the form byte, doubles: clock, skew, seq, born, frontier, ttl, then the sums
    // (see `encode_state`).
    let double = |i: usize| f64::from_le_bytes(st[1 + 8 * i..9 + 8 * i].try_into().unwrap()) as u64;
    Sums {
        n: double(6),
        np: double(7),
        rt: double(8),
        act: double(9),
        tr: double(10),
    }
}
