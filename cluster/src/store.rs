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

    /// Commands sent to the store so far (for measuring what the tier costs the store).
    fn commands(&self) -> u64;
}
