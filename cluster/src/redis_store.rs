//! The Redis store: one script call per room per sync (`sync.lua`), over one connection with
//! connect, read and write timeouts, re-made after any error.
//!
//! Each room is one hash, `{<prefix>:<room>}`: the braces make the whole name the hash tag, so
//! every key a sync touches is one key, on one node of a Redis Cluster. The hash expires by
//! itself twice a lease and a session after the last host's last sync.

use std::time::Duration;

use crate::protocol::{Params, Reply, Report};
use crate::store::{Store, StoreError};

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
    /// The server's `run_id`, read when connecting: the script learns when it changes.
    run_id: String,
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
            commands: 0,
        })
    }

    /// Makes every sync wait (`WAIT`, within the timeout) until `replicas` replicas hold its
    /// writes; a grant fewer acknowledge is refused as [`StoreError::NotReplicated`].
    pub fn with_replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    /// The hash holding `room`'s state.
    pub fn room_key(&self, room: &str) -> String {
        format!("{{{}:{room}}}", self.prefix)
    }

    /// The key of `room`'s log of revocations (in the room's hash slot).
    pub fn revocations_key(&self, room: &str) -> String {
        format!("{}:rv", self.room_key(room))
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
                .arg("server")
                .query(&mut conn)
                .map_err(|e| self.error(e))?;
            self.run_id = info
                .lines()
                .find_map(|l| l.strip_prefix("run_id:"))
                .unwrap_or_default()
                .trim()
                .to_owned();
            self.conn = Some(conn);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Unreachable("no connection".into()))
    }

    fn error(&self, e: redis::RedisError) -> StoreError {
        if e.is_timeout() {
            StoreError::Timeout(self.timeout.as_millis() as u64)
        } else if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
            StoreError::Unreachable(e.to_string())
        } else {
            StoreError::Protocol(e.to_string())
        }
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
        let key = self.room_key(room);
        let report =
            serde_json::to_string(report).map_err(|e| StoreError::Protocol(e.to_string()))?;
        let params =
            serde_json::to_string(params).map_err(|e| StoreError::Protocol(e.to_string()))?;
        self.connection()?;
        self.commands += 1;
        let mut invocation = self.script.key(key);
        invocation.key(self.revocations_key(room));
        invocation
            .arg(host)
            .arg(report)
            .arg(params)
            .arg(self.run_id.as_str());
        let result: Result<String, redis::RedisError> = match self.conn.as_mut() {
            Some(conn) => invocation.invoke(conn),
            None => return Err(StoreError::Unreachable("no connection".into())),
        };
        let text = match result {
            Ok(text) => text,
            Err(e) => {
                self.conn = None;
                return Err(self.error(e));
            }
        };
        let reply: Reply = serde_json::from_str(&text)
            .map_err(|e| StoreError::Protocol(format!("{e} in {text:?}")))?;
        if self.replicas > 0 {
            // The script's writes reach the replicas as one transaction; WAIT returns how many
            // hold everything this connection wrote.
            self.commands += 1;
            let wait = redis::cmd("WAIT")
                .arg(self.replicas)
                .arg((self.timeout.as_millis() as u64 / 2).max(1))
                .query::<u32>(
                    self.conn
                        .as_mut()
                        .ok_or_else(|| StoreError::Unreachable("no connection".into()))?,
                );
            match wait {
                Ok(acked) if acked >= self.replicas => {}
                Ok(acked) => {
                    return Err(StoreError::NotReplicated {
                        acked,
                        wanted: self.replicas,
                    })
                }
                Err(e) => {
                    self.conn = None;
                    return Err(self.error(e));
                }
            }
        }
        Ok(reply)
    }

    fn commands(&self) -> u64 {
        self.commands
    }
}
