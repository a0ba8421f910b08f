//! The root of a lease tree in Redis: the hosts' clients (or their hosts' leaf coordinators)
//! lease shares of a resource's capacity from one table every host sees, so that together they
//! never hold more than the capacity.
//!
//! A request runs one script, `lease.lua`, atomically in the store: it computes the client's
//! share with the core's algorithms over every live client (the same grants as
//! [`allocate`](velvet_rope::lease::algorithm::allocate)) and clamps it to
//! `capacity - (what the others may be using)`, counted exactly in whole units. A request
//! costs the same however many clients lease the resource: the script keeps the resource's
//! sums and, per priority band, its clients' demands in a sorted set split at the last fair
//! level, and moves the split by the few demands that changed sides (see the script's head).
//! Wants above the capacity count as the capacity (this changes only what proportional share
//! hands out past the equal shares).
//!
//! What a client held before a smaller grant stays reserved until its old lease would have
//! ended: a leaf's own clients may still use the old share until then. The store's records
//! outlive the clients' leases by a second, against clocks that drift apart (a clock stepped
//! by more frees shares early). A client whose lease ended is taken out by later requests, at
//! most 16 per request, soonest first; until then it keeps counting (which only lowers other
//! grants). A table the store lost (a restart without persistence) is made anew, and for its
//! learning period (the template's, at least a lease) the root only gives back what clients
//! report they hold, as Doorman's server does after a restart: clients are trusted to report
//! what they hold. A table another server answers for than the one that wrote it (a restart
//! that kept its data, a replica promoted, a server demoted and promoted again: its
//! `<run_id>/<replication id>` differs) learns the same way. With `replicas`, a grant is used
//! only once that many replicas hold it (`WAIT`), so a promoted replica knows every grant in
//! use. A store rolled back in place (the same process loading an older snapshot) is not
//! detected here: run it without snapshots, or with AOF `always`.
//!
//! Keys, all in the resource's hash slot: `{<prefix>-lease:<resource>}:s` (a hash: the sums,
//! when the table was made, a record per client), `:d` (the clients' deadlines) and `:b<n>`
//! (band `n`'s demands).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::ConnectionLike;
use serde::{Deserialize, Serialize};
use velvet_rope::lease::{
    AlgorithmKind, Lease, LeaseConfig, LeaseError, LeaseRequest, LeaseSource, ResourceTemplate,
    TemplateSet,
};
use velvet_rope::{Clock, Millis};

use crate::redis_cluster_store::SlotMap;
use crate::redis_store::{info_field, script_arg, store_error};
use crate::store::StoreError;

/// The root's script (see its head).
const LEASE_SCRIPT: &str = include_str!("lease.lua");

/// A margin on the store's side of every lease (ms): the store's record outlives the client's
/// lease by this much, against clocks that drift or step apart.
const CLOCK_MARGIN_MS: u64 = 1000;

/// A request as the script reads it (MessagePack, fields by name).
#[derive(Serialize)]
struct ScriptRequest {
    /// What the client wants.
    w: f64,
    /// What it reports holding.
    h: f64,
    /// Its subclients.
    s: u32,
    /// Its priority band.
    p: u32,
    /// A release (the client gives back all it holds).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    x: bool,
}

/// A resource's terms as the script reads them.
#[derive(Serialize)]
struct ScriptTerms {
    /// 0 none, 1 static, 2 proportional share, 3 fair share or reserved plus shared (the two
    /// are the same water-filling: see `allocate`'s tests in `tests/leases/root.rs`).
    k: u8,
    /// The capacity.
    c: f64,
    /// The lease's length (ms).
    l: u64,
    /// The store's margin (ms).
    m: u64,
    /// The learning period of a new table (ms).
    n: u64,
}

impl ScriptTerms {
    fn of(t: &ResourceTemplate) -> Self {
        let lease_ms = t.algorithm.lease_length_ms();
        Self {
            k: match t.algorithm.kind {
                AlgorithmKind::None => 0,
                AlgorithmKind::Static => 1,
                AlgorithmKind::ProportionalShare => 2,
                AlgorithmKind::FairShare | AlgorithmKind::ReservedPlusShared => 3,
            },
            c: t.capacity,
            l: lease_ms,
            m: CLOCK_MARGIN_MS,
            // At least a lease: every grant made before the table was lost has ended by then.
            n: t.algorithm
                .learning_mode_ms()
                .max(lease_ms + CLOCK_MARGIN_MS),
        }
    }
}

/// The script's answer.
#[derive(Deserialize)]
struct ScriptReply {
    /// The grant.
    g: f64,
    /// Clients counted.
    n: u64,
    /// Whether a release found the client's record.
    #[serde(default)]
    x: bool,
    /// Whether the table is learning (the grant is what the client reported holding).
    #[serde(default)]
    l: bool,
}

/// Where the root's requests go: one server, or the masters of a Redis Cluster.
struct Connections {
    /// The configured server's URL (the first node asked, in a cluster).
    url: String,
    /// In a cluster: which master serves which slots.
    slots: Option<SlotMap>,
    /// Open connections, by URL.
    open: HashMap<String, Server>,
}

/// A lease root in Redis.
pub struct RedisLeaseRoot {
    conns: Mutex<Connections>,
    script: redis::Script,
    templates: TemplateSet,
    prefix: String,
    timeout: Duration,
    replicas: u32,
    store_clock: Option<Arc<dyn Clock>>,
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
        redis::Client::open(url).map_err(|e| LeaseError::InvalidConfig {
            field: "cluster.redis_url".into(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            conns: Mutex::new(Connections {
                url: url.to_owned(),
                slots: None,
                open: HashMap::new(),
            }),
            script: redis::Script::new(LEASE_SCRIPT),
            templates: TemplateSet::new(config)?,
            prefix: prefix.to_owned(),
            timeout,
            replicas: 0,
            store_clock: None,
        })
    }

    /// Makes the configured server a node of a Redis Cluster: each resource's request goes to
    /// the master serving its slot (learned with `CLUSTER SLOTS`, again after a master failed
    /// or answered that the slot moved).
    pub fn in_cluster(self) -> Result<Self, LeaseError> {
        {
            let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
            let slots =
                SlotMap::new(&conns.url, self.timeout).map_err(|e| LeaseError::InvalidConfig {
                    field: "cluster.redis_url".into(),
                    reason: e.to_string(),
                })?;
            conns.slots = Some(slots);
        }
        Ok(self)
    }

    /// Makes every request wait (`WAIT`, within half the timeout) until `replicas` replicas
    /// hold its write; a grant fewer acknowledge is refused (the leaf keeps its last grant
    /// until it ends), so that a promoted replica holds every grant a client uses.
    pub fn with_replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    /// Tests only: the script reads `clock` in place of the store's `TIME`, so that a test
    /// drives the root's time.
    #[doc(hidden)]
    pub fn with_store_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.store_clock = Some(clock);
        self
    }

    /// The hash holding `resource`'s table.
    pub fn resource_key(&self, resource: &str) -> String {
        format!("{{{}-lease:{resource}}}:s", self.prefix)
    }

    /// The sorted set of `resource`'s clients' deadlines (in the table's hash slot).
    pub fn deadlines_key(&self, resource: &str) -> String {
        format!("{{{}-lease:{resource}}}:d", self.prefix)
    }

    /// Runs the script for `resource` on the server holding its keys (connected first if
    /// needed: its `run_id` read; the script reads the replication id itself, in the same
    /// atomic step as the grant), in one pipeline with, with `replicas`, a `WAIT` after it.
    /// An answer is refused when fewer replicas than `replicas` hold the write in time (the
    /// grant stays reserved in the store, not used). After an error the connection is
    /// dropped, and in a cluster the slots are learned again when it says they may have
    /// moved.
    fn call(
        &self,
        resource: &str,
        client_id: &str,
        request: &ScriptRequest,
        terms: &ScriptTerms,
    ) -> Result<ScriptReply, StoreError> {
        let request = script_arg(request)?;
        let terms = script_arg(terms)?;
        let clock = self
            .store_clock
            .as_ref()
            .map(|c| c.now_ms().to_string())
            .unwrap_or_default();
        let key = self.resource_key(resource);
        let mut guard = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let conns = &mut *guard;
        let url = match conns.slots.as_mut() {
            Some(slots) => {
                slots.begin();
                let master = slots.master_of(key.as_bytes())?;
                slots.url(&master)
            }
            None => conns.url.clone(),
        };
        if !conns.open.contains_key(&url) {
            match Server::connect(&url, self.timeout) {
                Ok(server) => {
                    conns.open.insert(url.clone(), server);
                }
                Err(e) => {
                    // A master that died: the cluster may have promoted another.
                    if let Some(slots) = conns.slots.as_mut() {
                        slots.saw(&e);
                    }
                    return Err(e);
                }
            }
        }
        let server = conns
            .open
            .get_mut(&url)
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))?;
        let answer = server.run(
            &self.script,
            [key.as_str(), &self.deadlines_key(resource)],
            [client_id.as_bytes(), &request, &terms],
            &clock,
            self.replicas,
            self.timeout,
        );
        let reply = answer.map_err(|e| {
            let error = store_error(&e, self.timeout);
            conns.open.remove(&url);
            if let Some(slots) = conns.slots.as_mut() {
                slots.saw(&error);
            }
            error
        });
        let reply = match reply {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(refusal)) => {
                if let Some(slots) = conns.slots.as_mut() {
                    slots.saw(&refusal);
                }
                return Err(refusal);
            }
            Err(e) => return Err(e),
        };
        rmp_serde::from_slice(&reply).map_err(|e| StoreError::Protocol(e.to_string()))
    }
}

/// A connection to one server and who that server is.
struct Server {
    conn: redis::Connection,
    run_id: String,
}

impl Server {
    fn connect(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        let unreachable = |e: redis::RedisError| StoreError::Unreachable(e.to_string());
        let mut conn = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(timeout))
            .map_err(unreachable)?;
        conn.set_read_timeout(Some(timeout))
            .and_then(|()| conn.set_write_timeout(Some(timeout)))
            .map_err(unreachable)?;
        let info: String = redis::cmd("INFO")
            .query(&mut conn)
            .map_err(|e| store_error(&e, timeout))?;
        Ok(Self {
            conn,
            run_id: info_field(&info, "run_id"),
        })
    }

    /// The script's answer (`Ok(Err(_))`: answered, but not to be used), or the error of the
    /// exchange.
    fn run(
        &mut self,
        script: &redis::Script,
        keys: [&str; 2],
        args: [&[u8]; 3],
        clock: &str,
        replicas: u32,
        timeout: Duration,
    ) -> redis::RedisResult<Result<Vec<u8>, StoreError>> {
        for attempt in 0..2 {
            let mut pipe = redis::pipe();
            let call = pipe
                .cmd("EVALSHA")
                .arg(script.get_hash())
                .arg(2)
                .arg(keys[0])
                .arg(keys[1])
                .arg(args[0])
                .arg(args[1])
                .arg(args[2])
                .arg(self.run_id.as_str());
            if !clock.is_empty() {
                call.arg(clock);
            }
            if replicas > 0 {
                pipe.cmd("WAIT")
                    .arg(replicas)
                    .arg((timeout.as_millis() as u64 / 2).max(1));
            }
            let sent = 1 + usize::from(replicas > 0);
            let values = self
                .conn
                .req_packed_commands(&pipe.get_packed_pipeline(), 0, sent)?;
            let mut values = values.into_iter();
            let answer = values.next();
            if let Some(redis::Value::ServerError(e)) = &answer {
                if attempt == 0 && e.code() == "NOSCRIPT" {
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(LEASE_SCRIPT)
                        .exec(&mut self.conn)?;
                    continue;
                }
            }
            let bytes = match answer {
                Some(redis::Value::BulkString(b)) => b,
                Some(redis::Value::ServerError(e)) => {
                    return Err(redis::RedisError::from(e));
                }
                other => {
                    return Ok(Err(StoreError::Protocol(format!(
                        "unexpected answer {other:?}"
                    ))))
                }
            };
            if replicas > 0 {
                let acked = match values.next() {
                    Some(redis::Value::Int(n)) => u32::try_from(n).unwrap_or(0),
                    _ => 0,
                };
                if acked < replicas {
                    return Ok(Err(StoreError::NotReplicated {
                        acked,
                        wanted: replicas,
                    }));
                }
            }
            return Ok(Ok(bytes));
        }
        Ok(Err(StoreError::Protocol(
            "the server kept refusing the script (NOSCRIPT)".into(),
        )))
    }
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
        let lease_ms = t.algorithm.lease_length_ms();
        let terms = ScriptTerms::of(&t);
        let request = ScriptRequest {
            w: req.wants,
            h: req.has,
            s: req.subclients,
            p: req.priority,
            x: false,
        };
        let reply = self
            .call(req.resource, req.client_id, &request, &terms)
            .map_err(|e| refused(req.resource, e))?;
        let grant = if reply.g.is_finite() {
            reply.g.max(0.0)
        } else {
            0.0
        };
        let clients = reply.n.max(1);
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
            learning: reply.l,
        })
    }

    fn release_lease(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        let terms = ScriptTerms::of(self.templates.lookup(resource)?);
        let request = ScriptRequest {
            w: 0.0,
            h: 0.0,
            s: 1,
            p: 0,
            x: true,
        };
        self.call(resource, client_id, &request, &terms)
            .map(|r| r.x)
            .map_err(|e| refused(resource, e))
    }
}
