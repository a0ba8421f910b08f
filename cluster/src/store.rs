//! The seam between the sync loop and the store that holds the cluster's state.

use crate::protocol::{Params, Reply, Report};

/// Why a sync with the store failed. Nothing waits on it but the sync loop: requests are
/// decided on the last grant meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached (refused, reset, unknown host).
    #[error("store unreachable: {0}")]
    Unreachable(String),
    /// The store did not answer in time (stalled, or overloaded).
    #[error("store did not answer within {0} ms")]
    Timeout(u64),
    /// The store answered something this version does not understand.
    #[error("store answered unexpectedly: {0}")]
    Protocol(String),
    /// The store answered, but fewer replicas than configured acknowledged the grant in time:
    /// it is not applied (a failover could forget it). The store keeps it reserved.
    #[error("only {acked} of {wanted} replicas acknowledged the grant in time: not applied")]
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas configured (`cluster.replicas`).
        wanted: u32,
    },
}

/// One room's sync in a batch (see [`Store::sync_many`]).
#[derive(Debug, Clone, Copy)]
pub struct SyncCall<'a> {
    /// The room.
    pub room: &'a str,
    /// The host's store name.
    pub host: &'a str,
    /// Its report on the room.
    pub report: &'a Report,
    /// The room's limits and lease terms.
    pub params: &'a Params,
}

/// A store the cluster's hosts share: it answers one host's report on one room atomically
/// with respect to every other host's (see `allocator`).
pub trait Store: Send {
    /// Sends `host`'s `report` on `room` with the room's `params`; the store's answer. Gives
    /// up within the store's configured timeout.
    fn sync(
        &mut self,
        room: &str,
        host: &str,
        report: &Report,
        params: &Params,
    ) -> Result<Reply, StoreError>;

    /// Several rooms' syncs, each atomic as [`Store::sync`] is (not all together), in one
    /// exchange where the store can (the Redis store pipelines them: one round trip). The
    /// answers come in the calls' order; after one the store could not be reached for (or did
    /// not answer in time, or answered the exchange as a whole with an error) the rest are not
    /// tried: the answers then end with that error, fewer than the calls.
    fn sync_many(&mut self, calls: &[SyncCall<'_>]) -> Vec<Result<Reply, StoreError>> {
        let mut answers = Vec::with_capacity(calls.len());
        for c in calls {
            let answer = self.sync(c.room, c.host, c.report, c.params);
            let stop = matches!(
                answer,
                Err(StoreError::Unreachable(_)) | Err(StoreError::Timeout(_))
            );
            answers.push(answer);
            if stop {
                break;
            }
        }
        answers
    }

    /// Commands sent to the store so far (for measuring what the tier costs the store).
    fn commands(&self) -> u64;
}

/// The store a `[cluster]` table names: a [`RedisStore`](crate::RedisStore), or a
/// [`RedisClusterStore`](crate::RedisClusterStore) with `redis_cluster = true`. A bad URL is
/// refused here; nothing connects until the first sync.
pub fn store_for(c: &velvet_rope::config::ClusterConfig) -> Result<Box<dyn Store>, StoreError> {
    let timeout = std::time::Duration::from_millis(c.timeout_ms);
    Ok(if c.redis_cluster {
        Box::new(
            crate::RedisClusterStore::new(&c.redis_url, &c.key_prefix, timeout)?
                .with_replicas(c.replicas),
        )
    } else {
        Box::new(
            crate::RedisStore::new(&c.redis_url, &c.key_prefix, timeout)?.with_replicas(c.replicas),
        )
    })
}
