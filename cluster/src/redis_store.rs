//! The Redis store: one script call (`sync.lua`) per batch of rooms (per hash slot in a Redis
//! Cluster), over one connection with connect, read and write timeouts, re-made after any
//! error.
//!
//! Each room is a hash, `{<prefix>:<room>}:s`, beside a sorted set of its hosts' deadlines,
//! `{<prefix>:<room>}:d`, and its log of revocations, `{<prefix>:<room>}:rv`: the braces make
//! the room's name the hash tag, so every key a sync touches is on one node of a Redis
//! Cluster. They expire by themselves twice a lease and a session after the last host's last
//! sync. (Before 0.3 the state was the hash `{<prefix>:<room>}`, in another form: hosts of 0.2
//! and 0.3 do not share a room's state.)

use std::time::Duration;

use redis::ConnectionLike;

use crate::protocol::{Params, Reply, Report};
use crate::redis_cluster_store::key_slot;
use crate::store::{Store, StoreError, SyncCall};

/// The sync script (see `allocator` for what it does).
pub const SYNC_SCRIPT: &str = include_str!("sync.lua");

/// A Redis (or Redis-compatible) server.
pub struct RedisStore {
    client: redis::Client,
    conn: Option<redis::Connection>,
    script: redis::Script,
    prefix: String,
    timeout: Duration,
    replicas: u32,
    /// Which server process answers (`run_id`, read when connecting: a restart breaks the
    /// connection). The script adds the server's replication id, read in the same atomic
    /// step as the syncs (a server demoted and promoted again keeps its `run_id`, not its
    /// replication id); a room's state learns when the two change.
    run_id: String,
    /// Rooms in different hash slots go in different script calls (a Redis Cluster refuses
    /// a script over keys of several slots).
    per_slot: bool,
    commands: u64,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("connected", &self.conn.is_some())
            .field("commands", &self.commands)
            .finish()
    }
}

impl RedisStore {
    /// A store at `url` (`redis://host:port[/db]`), keys under `prefix`, giving up on any call
    /// after `timeout`. Connects on first use (and again after any error).
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::Protocol(format!("bad store URL: {e}")))?;
        Ok(Self {
            client,
            conn: None,
            script: redis::Script::new(SYNC_SCRIPT),
            prefix: prefix.to_owned(),
            timeout,
            replicas: 0,
            run_id: String::new(),
            per_slot: false,
            commands: 0,
        })
    }

    /// Makes every sync wait (`WAIT`, within the timeout) until `replicas` replicas hold its
    /// writes; a grant fewer acknowledge is refused as [`StoreError::NotReplicated`].
    pub fn with_replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    /// Sends rooms of different hash slots in different script calls (for a master of a
    /// Redis Cluster).
    pub fn per_slot(mut self) -> Self {
        self.per_slot = true;
        self
    }

    /// The hash holding `room`'s state.
    pub fn room_key(&self, room: &str) -> String {
        format!("{{{}:{room}}}:s", self.prefix)
    }

    /// The key of `room`'s log of revocations (in the room's hash slot).
    pub fn revocations_key(&self, room: &str) -> String {
        format!("{{{}:{room}}}:rv", self.prefix)
    }

    /// The key of `room`'s sorted set of its hosts' deadlines (in the room's hash slot).
    pub fn deadlines_key(&self, room: &str) -> String {
        format!("{{{}:{room}}}:d", self.prefix)
    }

    /// The keys the sync script takes for `room`, in its order (`KEYS[1..3]` of `sync.lua`).
    pub fn script_keys(&self, room: &str) -> [String; 3] {
        [
            self.room_key(room),
            self.revocations_key(room),
            self.deadlines_key(room),
        ]
    }

    fn connection(&mut self) -> Result<&mut redis::Connection, StoreError> {
        if self.conn.is_none() {
            self.commands += 1;
            let conn = self
                .client
                .get_connection_with_timeout(self.timeout)
                .map_err(|e| self.error(e))?;
            conn.set_read_timeout(Some(self.timeout))
                .and_then(|()| conn.set_write_timeout(Some(self.timeout)))
                .map_err(|e| self.error(e))?;
            // Which server process this is: a restarted or promoted one has another run_id,
            // and may have lost writes (see `allocator`).
            self.commands += 1;
            let mut conn = conn;
            let info: String = redis::cmd("INFO")
                .query(&mut conn)
                .map_err(|e| self.error(e))?;
            self.run_id = info_field(&info, "run_id");
            // The script, so that a pipeline can call it by its hash.
            self.commands += 1;
            load_script(&mut conn).map_err(|e| self.error(e))?;
            self.conn = Some(conn);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))
    }

    fn error(&self, e: redis::RedisError) -> StoreError {
        store_error(&e, self.timeout)
    }
}

/// The store's error for a Redis error: a timeout, an unreachable server, or an answer this
/// version does not expect (a server error keeps its code first: `MOVED 1234 host:port`).
pub(crate) fn store_error(e: &redis::RedisError, timeout: Duration) -> StoreError {
    if e.is_timeout() {
        StoreError::Timeout(timeout.as_millis() as u64)
    } else if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
        StoreError::Unreachable(e.to_string())
    } else {
        match e.code() {
            Some(code) => {
                StoreError::Protocol(format!("{code} {}", e.detail().unwrap_or_default()))
            }
            None => StoreError::Protocol(e.to_string()),
        }
    }
}

/// A report or the room's terms as the sync script reads them (MessagePack, fields by name).
pub fn script_arg<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    rmp_serde::to_vec_named(value).map_err(|e| StoreError::Protocol(e.to_string()))
}

/// The sync script's answer (MessagePack: an array of the reply's fields in their order, `rc`
/// and `rv` left off at the end when absent).
pub fn script_reply(answer: &[u8]) -> Result<Reply, StoreError> {
    rmp_serde::from_slice(answer)
        .map_err(|e| StoreError::Protocol(format!("{e} in {:?}", String::from_utf8_lossy(answer))))
}

/// `SCRIPT LOAD` of the sync script (a pipeline calls it by its hash).
fn load_script(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SYNC_SCRIPT)
        .query(conn)
}

/// A field of an `INFO` answer (empty when absent: a server that does not say).
pub(crate) fn info_field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Error codes of a server that is not (or no longer) the master of the room's keys: the
/// connection is made anew (and the server's identity read again) before the next batch.
pub(crate) const NOT_MASTER: [&str; 6] = [
    "MOVED",
    "ASK",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "READONLY",
    "UNBLOCKED",
];

/// One call of a batch, ready to send: its place in the batch, its report and the room's
/// terms as the script reads them.
struct Encoded {
    call: usize,
    report: Vec<u8>,
    params: Vec<u8>,
}

/// At most this many rooms in one script call (Redis runs nothing else meanwhile).
const ROOMS_PER_SCRIPT: usize = 64;

/// The sync script's `ARGV[1]` for `calls`: a MessagePack array of `[host, report, terms]`,
/// each report and terms as [`script_arg`] encodes them.
pub fn script_calls(calls: &[(&str, &[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        calls
            .iter()
            .map(|c| c.0.len() + c.1.len() + c.2.len() + 8)
            .sum(),
    );
    // (Writing to a Vec cannot fail.)
    let _ = rmp::encode::write_array_len(&mut out, calls.len() as u32);
    for (host, report, terms) in calls {
        let _ = rmp::encode::write_array_len(&mut out, 3);
        let _ = rmp::encode::write_str(&mut out, host);
        out.extend_from_slice(report);
        out.extend_from_slice(terms);
    }
    out
}

/// The sync script's answer to a call of several rooms: one value per room (an error for the
/// whole call stands for each).
fn per_room(value: redis::Value, rooms: usize) -> Vec<redis::Value> {
    match value {
        redis::Value::Array(values) if values.len() == rooms => values,
        redis::Value::ServerError(e) => vec![redis::Value::ServerError(e); rooms],
        // (Answered as unexpected, room by room.)
        other => vec![redis::Value::SimpleString(format!("{other:?} for {rooms} rooms")); rooms],
    }
}

impl RedisStore {
    /// Sends `batch` (of `calls`) in one pipeline: the sync script once per group of rooms
    /// (every room in one, but at most [`ROOMS_PER_SCRIPT`], and one hash slot per call with
    /// [`RedisStore::per_slot`]); the server's answer to each call, in the batch's order.
    fn send(
        &mut self,
        calls: &[SyncCall<'_>],
        batch: &[Encoded],
    ) -> Result<Vec<redis::Value>, StoreError> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        if self.per_slot {
            let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
            for (i, e) in batch.iter().enumerate() {
                let slot = key_slot(self.room_key(calls[e.call].room).as_bytes());
                by_slot.entry(slot).or_default().push(i);
            }
            for (_, g) in by_slot {
                groups.extend(g.chunks(ROOMS_PER_SCRIPT).map(<[usize]>::to_vec));
            }
        } else {
            let all: Vec<usize> = (0..batch.len()).collect();
            groups.extend(all.chunks(ROOMS_PER_SCRIPT).map(<[usize]>::to_vec));
        }
        let mut pipe = redis::pipe();
        for g in &groups {
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(self.script.get_hash())
                .arg(3 * g.len());
            let mut args = Vec::with_capacity(g.len());
            for &i in g {
                let (e, c) = (&batch[i], &calls[batch[i].call]);
                for k in self.script_keys(c.room) {
                    cmd.arg(k);
                }
                args.push((c.host, e.report.as_slice(), e.params.as_slice()));
            }
            cmd.arg(script_calls(&args)).arg(self.run_id.as_str());
        }
        self.commands += groups.len() as u64;
        let packed = pipe.get_packed_pipeline();
        let conn = self.connection()?;
        match conn.req_packed_commands(&packed, 0, groups.len()) {
            Ok(values) if values.len() == groups.len() => {
                let mut answers = vec![redis::Value::Nil; batch.len()];
                for (g, value) in groups.iter().zip(values) {
                    for (&i, v) in g.iter().zip(per_room(value, g.len())) {
                        answers[i] = v;
                    }
                }
                Ok(answers)
            }
            Ok(values) => {
                self.conn = None;
                Err(StoreError::Protocol(format!(
                    "{} answers to {} calls",
                    values.len(),
                    groups.len()
                )))
            }
            Err(e) => {
                self.conn = None;
                Err(self.error(e))
            }
        }
    }

    /// The calls' answers (see [`Store::sync_many`]); `Err` when the store could not be
    /// reached (or did not answer) for any of them.
    fn exchange(
        &mut self,
        calls: &[SyncCall<'_>],
    ) -> Result<Vec<Result<Reply, StoreError>>, StoreError> {
        self.connection()?;
        let mut answers: Vec<Result<Reply, StoreError>> = Vec::with_capacity(calls.len());
        let mut batch = Vec::with_capacity(calls.len());
        for (call, c) in calls.iter().enumerate() {
            match (script_arg(c.report), script_arg(c.params)) {
                (Ok(report), Ok(params)) => {
                    answers.push(Err(StoreError::Protocol("not answered".into())));
                    batch.push(Encoded {
                        call,
                        report,
                        params,
                    });
                }
                (Err(e), _) | (_, Err(e)) => answers.push(Err(e)),
            }
        }
        // A server that lost its scripts (`SCRIPT FLUSH`) is sent the script again, and the
        // calls it refused for that once more.
        let mut not_master = false;
        for attempt in 0..2 {
            let values = self.send(calls, &batch)?;
            let mut refused = Vec::new();
            for (e, value) in batch.into_iter().zip(values) {
                answers[e.call] = match value {
                    redis::Value::BulkString(bytes) => script_reply(&bytes),
                    redis::Value::ServerError(s) if attempt == 0 && s.code() == "NOSCRIPT" => {
                        refused.push(e);
                        continue;
                    }
                    redis::Value::ServerError(s) => {
                        if NOT_MASTER.contains(&s.code()) {
                            // Asked of a server that is not the keys' master: connect anew
                            // (and read its identity) next time.
                            not_master = true;
                        }
                        Err(StoreError::Protocol(format!(
                            "{} {}",
                            s.code(),
                            s.details().unwrap_or_default()
                        )))
                    }
                    other => Err(StoreError::Protocol(format!("unexpected answer {other:?}"))),
                };
            }
            if refused.is_empty() {
                break;
            }
            self.commands += 1;
            let loaded = load_script(self.connection()?);
            if let Err(e) = loaded {
                self.conn = None;
                return Err(self.error(e));
            }
            batch = refused;
        }
        if self.replicas > 0 && answers.iter().any(Result::is_ok) {
            // Each script's writes reach the replicas as one transaction; WAIT returns how
            // many hold everything this connection wrote.
            self.commands += 1;
            let wait = redis::cmd("WAIT")
                .arg(self.replicas)
                .arg((self.timeout.as_millis() as u64 / 2).max(1))
                .query::<u32>(self.connection()?);
            let refused = match wait {
                Ok(acked) if acked >= self.replicas => None,
                Ok(acked) => Some(StoreError::NotReplicated {
                    acked,
                    wanted: self.replicas,
                }),
                Err(e) => {
                    self.conn = None;
                    return Err(self.error(e));
                }
            };
            if let Some(refused) = refused {
                for a in answers.iter_mut().filter(|a| a.is_ok()) {
                    *a = Err(refused.clone());
                }
            }
        }
        // After the WAIT (which counts this connection's writes only).
        if not_master {
            self.conn = None;
        }
        Ok(answers)
    }
}

impl Store for RedisStore {
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

    /// One pipeline for all the calls: one round trip, and one `WAIT` with `replicas`.
    fn sync_many(&mut self, calls: &[SyncCall<'_>]) -> Vec<Result<Reply, StoreError>> {
        if calls.is_empty() {
            return Vec::new();
        }
        match self.exchange(calls) {
            Ok(answers) => answers,
            Err(e) => vec![Err(e)],
        }
    }

    fn commands(&self) -> u64 {
        self.commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sync script answers an array of the reply's fields in order, with `rc` and `rv` left
    /// off at the end when it has none: every such shape reads back as the reply it holds.
    #[test]
    fn an_answer_is_read_from_its_fields_in_order() {
        let reply = Reply {
            seq: 1,
            gt: 2,
            b: 3,
            gm0: 4,
            gm1: 5,
            frontier: 6,
            behind: 7,
            hosts: 8,
            known: 9,
            learning: 1,
            free: 11,
            queued: Some(12),
            stale: 1,
            rc: None,
            rv: Vec::new(),
        };
        let fields: Vec<u64> = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 11, 12, 1];
        let bare = rmp_serde::to_vec(&fields).unwrap();
        assert_eq!(script_reply(&bare).unwrap(), reply);
        // The 13 fields, then a cursor, then (`ids`) the revocations.
        let with_cursor = |ids: Option<&[&str]>| {
            let mut out = Vec::new();
            rmp::encode::write_array_len(&mut out, if ids.is_some() { 15 } else { 14 }).unwrap();
            for f in &fields {
                rmp::encode::write_uint(&mut out, *f).unwrap();
            }
            out.extend(rmp_serde::to_vec(&[70u64, 2]).unwrap());
            if let Some(ids) = ids {
                out.extend(rmp_serde::to_vec(ids).unwrap());
            }
            out
        };
        let out = with_cursor(Some(&["00000000000000ab"]));
        let with = Reply {
            rc: Some([70, 2]),
            rv: vec!["00000000000000ab".to_owned()],
            ..reply.clone()
        };
        assert_eq!(script_reply(&out).unwrap(), with);
        // A cursor and no revocations: 14 fields.
        let out = with_cursor(None);
        let cursor = Reply {
            rc: Some([70, 2]),
            ..reply.clone()
        };
        assert_eq!(script_reply(&out).unwrap(), cursor);
        // A map of named fields (the form before) reads the same.
        assert_eq!(
            script_reply(&rmp_serde::to_vec_named(&with).unwrap()).unwrap(),
            with
        );
        // Too few fields is an error, not a reply of zeros.
        assert!(script_reply(&rmp_serde::to_vec(&fields[..5]).unwrap()).is_err());
    }
}
