//! A Redis Cluster as the store: each room's keys carry the room as their hash tag
//! (`{<prefix>:<room>}`), so a room lives on one master, and the rooms spread over the masters
//! by their slots. The store learns which master serves which slots (`CLUSTER SLOTS`, from the
//! configured node or any node seen since) and keeps one [`RedisStore`] per master: a round's
//! calls go to their masters, one pipeline each, all masters at once (a thread each), so a
//! master that stalls delays only its own rooms; and every guarantee of the single server holds
//! per master (its identity, run id and replication id, so a promoted replica is found out;
//! `WAIT` for `replicas` on the master that took the writes).
//!
//! When a master fails, the calls for its rooms fail (those rooms' hosts keep their grants while
//! the store may still reserve them, as with a single server that stalls), and the store asks
//! again which masters serve the slots before its next round (at most once a round); a
//! `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY` or `UNBLOCKED` answer does the same.
//! Once the cluster has promoted a replica the rooms sync with it, which the state sees as
//! another server, and counts what may have been lost as the single server does after a
//! failover. Slot migrations are not followed (`ASK` is not retried at the importing node):
//! a migrating slot's rooms do not sync until it is done.

use std::collections::HashMap;
use std::time::Duration;

use crate::protocol::{Params, Reply, Report};
use crate::redis_store::{RedisStore, NOT_MASTER};
use crate::store::{Store, StoreError, SyncCall};

/// How asking one master went (see [`RedisClusterStore::sync_many`]).
enum Asked {
    /// Its answers, and the commands they took.
    Answered(u64, Vec<Result<Reply, StoreError>>),
    /// Its store could not be made.
    Failed(StoreError),
    /// The system refused a thread to ask it.
    NoThread(String),
    /// Asking it panicked (its store is dropped: its connection may hold unread answers).
    Panicked,
}

/// The hash slot of `key` (Redis Cluster's: CRC16/XMODEM of the hash tag, the part between the
/// first `{` and the next `}` when not empty, else of the whole key, modulo 16,384).
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % 16_384
}

/// A range of slots and the master serving it (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    first: u16,
    last: u16,
    master: String,
}

/// Which master of a Redis Cluster serves which slots, as last learned.
#[derive(Debug)]
pub(crate) struct SlotMap {
    /// Where to ask for the slots: the configured node first, then every master seen.
    seeds: Vec<String>,
    /// `user:password@` of the configured URL, for every node.
    auth: String,
    timeout: Duration,
    ranges: Vec<Range>,
    /// Whether the slots must be asked for again before the next call.
    stale: bool,
    /// Whether they were asked for since [`SlotMap::begin`] (at most once per round: a
    /// cluster nobody answers for does not cost every call of a round the seeds' timeouts).
    asked: bool,
    /// `CLUSTER SLOTS` asked so far.
    pub(crate) commands: u64,
}

impl SlotMap {
    /// A map learned first from the node at `url` (`redis://[user:password@]host:port`).
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        redis::Client::open(url)
            .map_err(|e| StoreError::Protocol(format!("bad store URL: {e}")))?;
        let rest = url.strip_prefix("redis://").ok_or_else(|| {
            StoreError::Protocol("a Redis Cluster's URL must be redis://host:port".into())
        })?;
        let auth = rest
            .rfind('@')
            .map(|at| rest[..=at].to_owned())
            .unwrap_or_default();
        Ok(Self {
            seeds: vec![url.to_owned()],
            auth,
            timeout,
            ranges: Vec::new(),
            stale: true,
            asked: false,
            commands: 0,
        })
    }

    /// A new round (or request): the slots may be asked for once more.
    pub(crate) fn begin(&mut self) {
        self.asked = false;
    }

    /// The URL of the master at `addr` (`host:port`).
    pub(crate) fn url(&self, addr: &str) -> String {
        format!("redis://{}{addr}", self.auth)
    }

    /// The master serving the slot of `key` (`host:port`), learning the slots first when
    /// they are stale; `Err` when no node could say.
    pub(crate) fn master_of(&mut self, key: &[u8]) -> Result<String, StoreError> {
        if (self.stale || self.ranges.is_empty()) && !self.asked {
            self.asked = true;
            self.learn()?;
        }
        if self.ranges.is_empty() {
            return Err(StoreError::Unreachable(
                "no node of the cluster said which masters serve its slots".into(),
            ));
        }
        let slot = key_slot(key);
        match self
            .ranges
            .iter()
            .find(|r| (r.first..=r.last).contains(&slot))
        {
            Some(r) => Ok(r.master.clone()),
            None => {
                self.stale = true;
                Err(StoreError::Protocol(format!(
                    "no master serves slot {slot}"
                )))
            }
        }
    }

    /// After `e` from a master: whether the slots must be learned again (a master that
    /// failed, or answered that the slot moved or the cluster is between masters).
    pub(crate) fn saw(&mut self, e: &StoreError) {
        if slots_moved(e) {
            self.stale = true;
        }
    }

    /// Asks the seeds in turn which masters serve which slots: the last one that answered
    /// first, then the configured node, then every master seen since.
    fn learn(&mut self) -> Result<(), StoreError> {
        let mut last = StoreError::Unreachable("no node to ask".into());
        for (i, seed) in self.seeds.clone().into_iter().enumerate() {
            self.commands += 1;
            match self.slots_from(&seed) {
                Ok(ranges) if !ranges.is_empty() => {
                    for r in &ranges {
                        let url = self.url(&r.master);
                        if !self.seeds.contains(&url) {
                            self.seeds.push(url);
                        }
                    }
                    // Asked first next time.
                    self.seeds.swap(0, i);
                    self.ranges = ranges;
                    self.stale = false;
                    return Ok(());
                }
                Ok(_) => last = StoreError::Protocol(format!("{seed} serves no slots")),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// `CLUSTER SLOTS` of the node at `url`.
    fn slots_from(&self, url: &str) -> Result<Vec<Range>, StoreError> {
        let unreachable = |e: redis::RedisError| StoreError::Unreachable(e.to_string());
        let client = redis::Client::open(url).map_err(unreachable)?;
        let mut conn = client
            .get_connection_with_timeout(self.timeout)
            .map_err(unreachable)?;
        conn.set_read_timeout(Some(self.timeout))
            .map_err(unreachable)?;
        let value: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut conn)
            .map_err(|e| StoreError::Protocol(e.to_string()))?;
        parse_slots(&value)
    }
}

/// A Redis Cluster.
pub struct RedisClusterStore {
    slots: SlotMap,
    prefix: String,
    timeout: Duration,
    replicas: u32,
    masters: HashMap<String, RedisStore>,
    commands: u64,
}

impl std::fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterStore")
            .field("prefix", &self.prefix)
            .field("slots", &self.slots)
            .field("commands", &self.commands)
            .finish()
    }
}

impl RedisClusterStore {
    /// A cluster reached first through the node at `url` (`redis://[user:password@]host:port`),
    /// keys under `prefix`, giving up on any call after `timeout`. Connects on first use.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, StoreError> {
        Ok(Self {
            slots: SlotMap::new(url, timeout)?,
            prefix: prefix.to_owned(),
            timeout,
            replicas: 0,
            masters: HashMap::new(),
            commands: 0,
        })
    }

    /// Makes every sync wait until `replicas` replicas of its master hold its writes (see
    /// [`RedisStore::with_replicas`]).
    pub fn with_replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    fn master(&mut self, addr: &str) -> Result<&mut RedisStore, StoreError> {
        if !self.masters.contains_key(addr) {
            let store = RedisStore::new(&self.slots.url(addr), &self.prefix, self.timeout)?
                .with_replicas(self.replicas)
                .per_slot();
            self.masters.insert(addr.to_owned(), store);
        }
        self.masters
            .get_mut(addr)
            .ok_or_else(|| StoreError::Protocol("no store for a master".into()))
    }
}

/// The ranges of a `CLUSTER SLOTS` answer: `[first, last, [host, port, ...], replicas...]`.
fn parse_slots(value: &redis::Value) -> Result<Vec<Range>, StoreError> {
    use redis::Value;
    let bad = || StoreError::Protocol(format!("unexpected CLUSTER SLOTS answer {value:?}"));
    let Value::Array(items) = value else {
        return Err(bad());
    };
    let mut ranges = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(parts) = item else {
            return Err(bad());
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(node))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            return Err(bad());
        };
        let host = match node.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            // An endpoint the node does not know (`cluster-preferred-endpoint-type
            // unknown-endpoint`): these slots are not served as far as this store knows.
            Some(Value::Nil) => String::new(),
            _ => return Err(bad()),
        };
        let Some(Value::Int(port)) = node.get(1) else {
            return Err(bad());
        };
        let slot = |n: i64| u16::try_from(n).ok().filter(|&s| s < 16_384);
        let (Some(first), Some(last)) = (slot(*first), slot(*last)) else {
            return Err(bad());
        };
        if host.is_empty() || host == "?" {
            continue;
        }
        // An IPv6 address goes in brackets in a URL.
        let master = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        ranges.push(Range {
            first,
            last,
            master,
        });
    }
    Ok(ranges)
}

/// Whether an error means the slots moved (or the cluster is between masters): ask again.
fn slots_moved(e: &StoreError) -> bool {
    match e {
        StoreError::Unreachable(_) | StoreError::Timeout(_) => true,
        StoreError::Protocol(m) => NOT_MASTER.iter().any(|code| m.starts_with(code)),
        StoreError::NotReplicated { .. } => false,
    }
}

impl Store for RedisClusterStore {
    fn sync(
        &mut self,
        room: &str,
        host: &str,
        report: &Report,
        params: &Params,
    ) -> Result<Reply, StoreError> {
        let call = SyncCall {
            room,
            host,
            report,
            params,
        };
        self.sync_many(&[call])
            .pop()
            .unwrap_or_else(|| Err(StoreError::Protocol("no answer".into())))
    }

    /// One pipeline per master, the masters asked at once; every call answered (a master
    /// that failed fails its calls only, and one that stalls delays only its own).
    fn sync_many(&mut self, calls: &[SyncCall<'_>]) -> Vec<Result<Reply, StoreError>> {
        self.slots.begin();
        let mut by_master: Vec<(String, Vec<usize>)> = Vec::new();
        let mut answers: Vec<Result<Reply, StoreError>> = Vec::with_capacity(calls.len());
        for (i, c) in calls.iter().enumerate() {
            let key = format!("{{{}:{}}}", self.prefix, c.room);
            match self.slots.master_of(key.as_bytes()) {
                Ok(m) => match by_master.iter_mut().find(|(a, _)| *a == m) {
                    Some((_, idx)) => idx.push(i),
                    None => by_master.push((m, vec![i])),
                },
                Err(e) => {
                    answers.push(Err(e));
                    continue;
                }
            }
            answers.push(Err(StoreError::Protocol("not sent".into())));
        }
        // Every master's store first (no I/O: each connects on first use), then the masters
        // asked at once, one thread each when there are several: a master that stalls
        // delays only its own rooms, by up to the timeout.
        let made: Vec<Result<(), StoreError>> = by_master
            .iter()
            .map(|(addr, _)| self.master(addr).map(|_| ()))
            .collect();
        let mut stores: Vec<(&String, &mut RedisStore, Vec<SyncCall<'_>>)> = Vec::new();
        for (addr, store) in self.masters.iter_mut() {
            if let Some((_, idx)) = by_master.iter().find(|(a, _)| a == addr) {
                stores.push((addr, store, idx.iter().map(|&i| calls[i]).collect()));
            }
        }
        // A master's exchange; a panic in it is its master's error only (and its store is made
        // anew: its connection may hold answers not read), never the sync loop's end.
        let ask = |store: &mut RedisStore, group: &[SyncCall<'_>]| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let before = store.commands();
                let results = store.sync_many(group);
                Asked::Answered(store.commands() - before, results)
            }))
            .unwrap_or(Asked::Panicked)
        };
        let mut by_addr: HashMap<String, Asked> = if stores.len() <= 1 {
            stores
                .into_iter()
                .map(|(addr, store, group)| (addr.clone(), ask(store, &group)))
                .collect()
        } else {
            std::thread::scope(|scope| {
                let running: Vec<_> = stores
                    .into_iter()
                    .map(|(addr, store, group)| {
                        let thread = std::thread::Builder::new()
                            .name("velvet-rope-sync".into())
                            .spawn_scoped(scope, move || ask(store, &group));
                        (addr.clone(), thread)
                    })
                    .collect();
                running
                    .into_iter()
                    .map(|(addr, thread)| {
                        let asked = match thread {
                            Ok(h) => h.join().unwrap_or(Asked::Panicked),
                            // A thread the system refuses fails its master's calls this round.
                            Err(e) => Asked::NoThread(e.to_string()),
                        };
                        (addr, asked)
                    })
                    .collect()
            })
        };
        for ((addr, idx), made) in by_master.iter().zip(made) {
            let asked = match made {
                Err(e) => Asked::Failed(e),
                Ok(()) => by_addr.remove(addr).unwrap_or_else(|| {
                    Asked::Failed(StoreError::Protocol("no store for a master".into()))
                }),
            };
            let results = match asked {
                Asked::Answered(commands, results) => {
                    self.commands += commands;
                    results
                }
                Asked::Failed(e) => vec![Err(e)],
                Asked::NoThread(e) => vec![Err(StoreError::Protocol(format!("no thread: {e}")))],
                Asked::Panicked => {
                    self.masters.remove(addr);
                    vec![Err(StoreError::Protocol("a master's sync panicked".into()))]
                }
            };
            // A master that could not be reached answers fewer: the rest share its error.
            let last = results.last().cloned();
            let mut results = results.into_iter();
            for &i in idx {
                let answer = results.next().unwrap_or_else(|| {
                    last.clone()
                        .unwrap_or_else(|| Err(StoreError::Protocol("no answer".into())))
                });
                if let Err(e) = &answer {
                    self.slots.saw(e);
                }
                answers[i] = answer;
            }
        }
        answers
    }

    fn commands(&self) -> u64 {
        self.commands + self.slots.commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis Cluster's specification: the slot of `123456789` is CRC16/XMODEM 0x31C3 mod
    /// 16,384, and a hash tag picks the part between the first braces when it is not empty.
    #[test]
    fn slots_follow_the_specification() {
        assert_eq!(key_slot(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // Every key of a room is on the room's slot.
        let s = key_slot(b"{vr:shop}:s");
        assert_eq!(key_slot(b"{vr:shop}:d"), s);
        assert_eq!(key_slot(b"{vr:shop}:rv"), s);
    }

    #[test]
    fn a_slots_answer_is_read_or_refused() {
        use redis::Value;
        let node = |port| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node(7000),
                node(7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node(7001)]),
        ]);
        assert_eq!(
            parse_slots(&answer).unwrap(),
            vec![
                Range {
                    first: 0,
                    last: 5460,
                    master: "127.0.0.1:7000".into()
                },
                Range {
                    first: 5461,
                    last: 16383,
                    master: "127.0.0.1:7001".into()
                }
            ]
        );
        let bad = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16384),
            node(7000),
        ])]);
        assert!(parse_slots(&bad).is_err());
        let v6 = Value::Array(vec![
            Value::BulkString(b"::1".to_vec()),
            Value::Int(7000),
            Value::BulkString(b"id".to_vec()),
        ]);
        let unknown = Value::Array(vec![Value::Nil, Value::Int(7001)]);
        let answer = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(10), v6]),
            Value::Array(vec![Value::Int(11), Value::Int(16383), unknown]),
        ]);
        assert_eq!(
            parse_slots(&answer).unwrap(),
            vec![Range {
                first: 0,
                last: 10,
                master: "[::1]:7000".into()
            }]
        );
        assert!(parse_slots(&Value::Nil).is_err());
    }
}
