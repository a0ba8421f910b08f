//! The `[cluster]` table: many hosts sharing one room's limits through a store (Redis).
//!
//! The core only reads this table to know that its rooms' limits are allowances handed out by
//! the cluster tier (crate `velvet-rope-cluster`), and what to fall back to when no allowance
//! is current. Talking to the store is that crate's job: the core does no I/O.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How hosts share rooms through a store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// The store: `redis://[user:password@]host:port[/db]`, or `redis+unix:///path`.
    pub redis_url: String,
    /// Whether `redis_url` is a node of a Redis Cluster (`redis://host:port`): the rooms
    /// spread over its masters by their hash tags, and the store learns which master serves
    /// which room from the cluster. Default false (a single server, or one with replicas).
    pub redis_cluster: bool,
    /// This host's name in the store, the same for every process of the host (they share
    /// counters). Default: the machine's host name.
    pub host_id: Option<String>,
    /// Prefix of the store's keys. Default `vr`.
    pub key_prefix: String,
    /// Milliseconds between two syncs with the store. Default 1000.
    pub sync_interval_ms: u64,
    /// Milliseconds an allowance stays good without a sync (the store keeps it reserved at
    /// least that long). At least three sync intervals. Default 5000.
    pub lease_ms: u64,
    /// Milliseconds a store call may take before the sync gives up on it (a stalled store
    /// never holds a sync longer). Default 500.
    pub timeout_ms: u64,
    /// Share of each limit a host admits on its own once its allowance has lapsed (the store
    /// unreachable for `lease_ms`): a number in `[0, 1]`, or unset for one over the number of
    /// hosts last seen (the seed's per-host division).
    pub fallback_share: Option<f64>,
    /// Replicas that must hold a grant before a host applies it (Redis `WAIT`): with the store
    /// replicated asynchronously, a failover to a replica that missed the last writes would
    /// otherwise forget grants hosts are using, and hand their room out again. Set it to the
    /// number of replicas a failover may promote from; 0 (the default) for a store that is not
    /// replicated (a restart without its data is found out and learned from, see the README).
    pub replicas: u32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            redis_url: String::new(),
            redis_cluster: false,
            host_id: None,
            key_prefix: "vr".into(),
            sync_interval_ms: 1000,
            lease_ms: 5000,
            timeout_ms: 500,
            fallback_share: None,
            replicas: 0,
        }
    }
}

impl ClusterConfig {
    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let schemes = ["redis://", "redis+unix://", "unix://"];
        if !schemes.iter().any(|s| self.redis_url.starts_with(s)) {
            return Err(Error::invalid(
                "cluster.redis_url",
                "must be a redis:// or redis+unix:// URL (TLS is not built in)",
            ));
        }
        if self.redis_cluster && !self.redis_url.starts_with("redis://") {
            return Err(Error::invalid(
                "cluster.redis_url",
                "a Redis Cluster's node must be a redis://host:port URL",
            ));
        }
        if let Some(h) = &self.host_id {
            if h.is_empty() || h.len() > 128 || h.chars().any(|c| c.is_control()) {
                return Err(Error::invalid(
                    "cluster.host_id",
                    "must be 1 to 128 printable characters",
                ));
            }
        }
        if self.key_prefix.is_empty()
            || self.key_prefix.len() > 64
            || self.key_prefix.contains(['{', '}'])
        {
            return Err(Error::invalid(
                "cluster.key_prefix",
                "must be 1 to 64 characters without braces",
            ));
        }
        if !(20..=60_000).contains(&self.sync_interval_ms) {
            return Err(Error::invalid(
                "cluster.sync_interval_ms",
                "must be between 20 and 60000",
            ));
        }
        if self.lease_ms < 3 * self.sync_interval_ms || self.lease_ms > 3_600_000 {
            return Err(Error::invalid(
                "cluster.lease_ms",
                "must be at least three sync intervals and at most an hour",
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms > self.lease_ms {
            return Err(Error::invalid(
                "cluster.timeout_ms",
                "must be positive and at most lease_ms",
            ));
        }
        if self.replicas > 16 {
            return Err(Error::invalid(
                "cluster.replicas",
                "must be at most 16 (the replicas a grant waits for)",
            ));
        }
        if let Some(s) = self.fallback_share {
            if !(0.0..=1.0).contains(&s) {
                return Err(Error::invalid(
                    "cluster.fallback_share",
                    "must be between 0 and 1",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redis_cluster_is_reached_over_tcp() {
        let c = ClusterConfig {
            redis_url: "redis://127.0.0.1:7000".into(),
            redis_cluster: true,
            ..ClusterConfig::default()
        };
        assert!(c.validate().is_ok());
        let unix = ClusterConfig {
            redis_url: "redis+unix:///run/redis.sock".into(),
            ..c
        };
        let e = unix.validate().unwrap_err().to_string();
        assert!(e.contains("cluster.redis_url"), "{e}");
    }
}
