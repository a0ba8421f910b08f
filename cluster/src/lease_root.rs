//! The root of a lease tree in Redis: the hosts' clients (or their hosts' leaf coordinators)
//! lease shares of a resource's capacity from one table every host sees, so that together they
//! never hold more than the capacity.
//!
//! Each resource is one hash, `{<prefix>-lease:<resource>}`: a field per client with what it
//! holds, wants, and until when (the store's clock), and `born`, when the table was made. A
//! request reads the table, runs the core's algorithm (the same code as the in-process
//! [`Coordinator`](velvet_rope::lease::Coordinator)) and writes the client's record in one
//! optimistic transaction (WATCH, MULTI, EXEC, retried when another request wrote in
//! between), so the clamp `grant <= capacity - (what the others hold)` holds atomically.
//!
//! What a client held before a smaller grant stays reserved until its old lease would have
//! ended: a leaf's own clients may still use the old share until then. The store's records
//! outlive the clients' leases by a second, against clocks that drift apart (a clock stepped
//! by more frees shares early). A table the store lost (a restart without persistence) is
//! made anew, and for its learning period (the template's, at least a lease) the root only
//! gives back what clients report they hold, as Doorman's server does after a restart: clients
//! are trusted to report what they hold. A store rolled back to an older snapshot is not
//! detected here: run it without snapshots, or with AOF `always`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::Commands;
use serde::{Deserialize, Serialize};
use velvet_rope::lease::algorithm::{allocate, Demand};
use velvet_rope::lease::superseded::still_running;
use velvet_rope::lease::{
    AlgorithmKind, Lease, LeaseConfig, LeaseError, LeaseRequest, LeaseSource, TemplateSet,
};
use velvet_rope::Millis;

use crate::store::StoreError;

/// One client's record in a resource's table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Record {
    /// Its grant.
    has: f64,
    /// What it asked for.
    wants: f64,
    /// Subclients it speaks for.
    sub: u32,
    /// Priority band.
    prio: u32,
    /// When its lease ends (store clock, ms).
    exp: u64,
    /// Its earlier grants whose leases still run, as (amount, end): each stays reserved until
    /// it ends (a leaf's clients may use the old share until then). Kept short: ended ones
    /// and ones another entry covers (no smaller, ending no sooner) are dropped.
    #[serde(default)]
    held: Vec<(f64, u64)>,
}

impl Record {
    /// What this client may be using at `now`: its grant while its lease runs, and any earlier
    /// grant whose lease still runs. A client that stopped refreshing (a leaf that restarted
    /// under a new id, a process that died) holds nothing once its lease is over.
    fn reserved(&self, now: u64) -> f64 {
        let current = if self.exp > now { self.has } else { 0.0 };
        self.held
            .iter()
            .filter(|h| h.1 > now)
            .fold(current, |m, h| m.max(h.0))
    }

    /// The earlier grants still running at `now`, this record's own included, without the
    /// covered ones.
    fn superseded(&self, now: u64) -> Vec<(f64, u64)> {
        still_running(
            self.held
                .iter()
                .copied()
                .chain(std::iter::once((self.has, self.exp))),
            now,
        )
    }
}

/// A margin on the store's side of every lease (ms): the store's record outlives the client's
/// lease by this much, against clocks that drift or step apart.
const CLOCK_MARGIN_MS: u64 = 1000;

/// Most attempts of one request's transaction before it gives up (others kept writing the
/// resource's table in between).
const ATTEMPTS: usize = 16;

/// A lease root in Redis.
pub struct RedisLeaseRoot {
    client: redis::Client,
    conn: Mutex<Option<redis::Connection>>,
    templates: TemplateSet,
    prefix: String,
    timeout: Duration,
}

impl std::fmt::Debug for RedisLeaseRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLeaseRoot")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisLeaseRoot {
    /// A root at `url` for the resources of `config`, keys under `prefix`, giving up on a call
    /// after `timeout`.
    pub fn new(
        url: &str,
        prefix: &str,
        config: &LeaseConfig,
        timeout: Duration,
    ) -> Result<Self, LeaseError> {
        let client = redis::Client::open(url).map_err(|e| LeaseError::InvalidConfig {
            field: "cluster.redis_url".into(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            client,
            conn: Mutex::new(None),
            templates: TemplateSet::new(config)?,
            prefix: prefix.to_owned(),
            timeout,
        })
    }

    /// The hash holding `resource`'s table.
    pub fn resource_key(&self, resource: &str) -> String {
        format!("{{{}-lease:{resource}}}", self.prefix)
    }

    /// Runs `f` on the connection (made first if needed; dropped after an error).
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let conn = self
                .client
                .get_connection_with_timeout(self.timeout)
                .map_err(|e| StoreError::Unreachable(e.to_string()))?;
            conn.set_read_timeout(Some(self.timeout))
                .and_then(|()| conn.set_write_timeout(Some(self.timeout)))
                .map_err(|e| StoreError::Unreachable(e.to_string()))?;
            *guard = Some(conn);
        }
        let conn = guard
            .as_mut()
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))?;
        f(conn).map_err(|e| {
            *guard = None;
            if e.is_timeout() {
                StoreError::Timeout(self.timeout.as_millis() as u64)
            } else {
                StoreError::Unreachable(e.to_string())
            }
        })
    }
}

/// WATCH, read and compute (`body` fills the atomic pipeline), MULTI/EXEC; again when another
/// client wrote `key` in between, at most [`ATTEMPTS`] times, after a random pause that grows
/// with each attempt (1 to 2^k ms, at most 64, and never past `budget` in all): clients that
/// collided once do not collide again in lockstep.
fn transaction<T>(
    con: &mut redis::Connection,
    key: &str,
    budget: Duration,
    mut body: impl FnMut(&mut redis::Connection, &mut redis::Pipeline) -> redis::RedisResult<Option<T>>,
) -> redis::RedisResult<T> {
    use rand::Rng;
    let deadline = std::time::Instant::now() + budget;
    for attempt in 0..ATTEMPTS {
        redis::cmd("WATCH").arg(key).exec(con)?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        if let Some(done) = body(con, &mut pipe)? {
            return Ok(done);
        }
        let most = 1u64 << attempt.min(6);
        let pause = Duration::from_micros(rand::thread_rng().gen_range(1000..=most * 1000));
        if std::time::Instant::now() + pause > deadline {
            break;
        }
        std::thread::sleep(pause);
    }
    redis::cmd("UNWATCH").exec(con)?;
    Err(redis::RedisError::from((
        redis::ErrorKind::TryAgain,
        "the resource's table kept changing",
    )))
}

/// The store's clock, in ms.
fn store_now(con: &mut redis::Connection) -> redis::RedisResult<u64> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con)?;
    Ok(secs * 1000 + micros / 1000)
}

fn refused(resource: &str, e: StoreError) -> LeaseError {
    LeaseError::RefreshFailed {
        resource: resource.to_owned(),
        message: e.to_string(),
    }
}

impl LeaseSource for RedisLeaseRoot {
    fn request_lease(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
        let bad = |field: &'static str, reason: &str| LeaseError::InvalidRequest {
            resource: req.resource.to_owned(),
            field,
            reason: reason.to_owned(),
        };
        if req.client_id.is_empty() {
            return Err(bad("client_id", "must not be empty"));
        }
        if !req.wants.is_finite() || req.wants < 0.0 {
            return Err(bad("wants", "must be a finite number >= 0"));
        }
        if !req.has.is_finite() || req.has < 0.0 {
            return Err(bad("has", "must be a finite number >= 0"));
        }
        if req.subclients == 0 {
            return Err(bad("subclients", "must be at least 1"));
        }
        let t = self.templates.lookup(req.resource)?.clone();
        let key = self.resource_key(req.resource);
        let me = format!("c:{}", req.client_id);
        let lease_ms = t.algorithm.lease_length_ms();
        // At least a lease: every grant made before the table was lost has ended by then.
        let learning_ms = t
            .algorithm
            .learning_mode_ms()
            .max(lease_ms + CLOCK_MARGIN_MS);
        let (grant, clients) = self
            .with_conn(|con| {
                transaction(con, &key, self.timeout, |con, pipe| {
                    let now_store = store_now(con)?;
                    let fields: BTreeMap<String, String> = con.hgetall(&key)?;
                    let born = fields
                        .get("born")
                        .and_then(|b| b.parse::<u64>().ok())
                        .unwrap_or(now_store);
                    let learning = now_store < born.saturating_add(learning_ms);
                    let mut records: BTreeMap<&str, Record> = BTreeMap::new();
                    let mut gone = Vec::new();
                    for (f, v) in &fields {
                        let Some(id) = f.strip_prefix("c:") else {
                            continue;
                        };
                        if f == &me {
                            // This client's own record is read below and rewritten: never
                            // deleted after it (a client that refreshed after its lease
                            // ended had its new record deleted, and its grant unreserved).
                            if let Ok(r) = serde_json::from_str::<Record>(v) {
                                records.insert(id, r);
                            }
                            continue;
                        }
                        match serde_json::from_str::<Record>(v) {
                            Ok(r) if r.reserved(now_store) > 0.0 || r.exp > now_store => {
                                records.insert(id, r);
                            }
                            _ => gone.push(f.clone()),
                        }
                    }
                    let mine = records.remove(req.client_id).unwrap_or_default();
                    let target = if learning {
                        req.has.min(req.wants)
                    } else {
                        let mut demands: Vec<Demand> = records
                            .values()
                            .filter(|r| r.exp > now_store)
                            .map(|r| Demand {
                                wants: r.wants,
                                subclients: r.sub,
                                priority: r.prio,
                            })
                            .collect();
                        demands.push(Demand {
                            wants: req.wants,
                            subclients: req.subclients,
                            priority: req.priority,
                        });
                        let grants = allocate(
                            t.algorithm.kind,
                            t.capacity,
                            t.algorithm.reserved(),
                            &demands,
                        );
                        grants.last().copied().unwrap_or(0.0)
                    };
                    let target = if target.is_finite() {
                        target.max(0.0)
                    } else {
                        0.0
                    };
                    let others: f64 = records.values().map(|r| r.reserved(now_store)).sum();
                    let grant = match t.algorithm.kind {
                        AlgorithmKind::None => target,
                        AlgorithmKind::Static => target.min(t.capacity),
                        _ => target.min((t.capacity - others).max(0.0)),
                    };
                    // What it held stays reserved while its old leases run.
                    let record = Record {
                        has: grant,
                        wants: req.wants,
                        sub: req.subclients,
                        prio: req.priority,
                        exp: now_store + lease_ms + CLOCK_MARGIN_MS,
                        held: mine.superseded(now_store),
                    };
                    let json = serde_json::to_string(&record).unwrap_or_default();
                    pipe.hset_nx(&key, "born", born).ignore();
                    pipe.hset(&key, &me, json).ignore();
                    for f in &gone {
                        pipe.hdel(&key, f).ignore();
                    }
                    pipe.pexpire(&key, (2 * lease_ms + learning_ms) as i64)
                        .ignore();
                    let clients = records.values().filter(|r| r.exp > now_store).count() + 1;
                    // None when another request wrote the table meanwhile: read and run again.
                    pipe.query::<Option<()>>(con)
                        .map(|done| done.map(|()| (grant, clients)))
                })
            })
            .map_err(|e| refused(req.resource, e))?;
        let dynamic_safe = match t.algorithm.kind {
            AlgorithmKind::None => grant,
            AlgorithmKind::Static => t.capacity,
            _ => t.capacity / clients as f64,
        };
        Ok(Lease {
            capacity: grant,
            // On the client's clock: it ends before the store's record does (the store's
            // clock started later), so the client never uses a share the root has freed.
            expires_at: now.saturating_add(lease_ms),
            refresh_interval_secs: t.algorithm.refresh_interval,
            safe_capacity: t.safe_capacity.unwrap_or(dynamic_safe),
        })
    }

    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        self.templates.lookup(resource)?;
        let key = self.resource_key(resource);
        let field = format!("c:{client_id}");
        self.with_conn(|con| con.hdel::<_, _, u64>(&key, &field))
            .map(|n| n > 0)
            .map_err(|e| refused(resource, e))
    }
}
