//! What one sync sends the store for one room and what it gets back (JSON, as the Redis script
//! reads and writes it; the in-process store uses the same types).

use serde::{Deserialize, Serialize};
use velvet_rope::admission::cluster::{ClusterGrant, HostReport};

/// One host's report on one room (field names short: it is stored as is). The host is named
/// in the store by its id and its counters' incarnation (see [`store_host`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The store's sequence number of the last grant the host wrote (0: none yet).
    pub seq: u64,
    /// The bucket of the host's last tick.
    pub b: u64,
    /// Visitors active at the host.
    pub active: u64,
    /// Admissions booked to bucket `b` at the host.
    pub admitted: u64,
    /// Traffic history the host's share follows: admissions in the last and the current bucket
    /// plus live waiters.
    pub traffic: u64,
    /// Admissions the host expects before its next sync but one (the chunk it asks for beyond
    /// its share), from the admissions since its last sync.
    pub demand: u64,
    /// The allowance of active visitors the host holds (enforced, or granted and pending).
    pub at: u64,
    /// The same for admissions in bucket `b`.
    pub am0: u64,
    /// The same for admissions in bucket `b + 1`.
    pub am1: u64,
    /// Live waiters by arrival bucket.
    pub live: Vec<(u64, u64)>,
    /// 1 when the host relies on its last grant still being reserved (it is within a lease
    /// and a session of the report that got it): a store with no entry for it lost writes.
    #[serde(default)]
    pub held: u64,
    /// Rooms whose sessions the origin may revoke: where the host has read the room's log of
    /// revocations up to (`[0, 0]`: from its start). Absent otherwise (the log is not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rc: Option<[u64; 2]>,
    /// Ticket ids revoked at the host since its last sync (16 hex digits each: the script's
    /// JSON numbers are doubles).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rv: Vec<String>,
}

impl Report {
    /// The report of `r`, asking for `demand` beyond its share.
    pub fn of(r: &HostReport, demand: u64) -> Self {
        let waiting: u64 = r.waiters.iter().map(|w| w.1).sum();
        Self {
            seq: r.seq,
            b: r.bucket,
            active: r.active,
            admitted: r.admitted,
            traffic: r.admitted_last_bucket + r.admitted + waiting,
            demand,
            at: r.reserved_total,
            am0: r.reserved_minute,
            am1: r.reserved_minute_next,
            live: r.waiters.clone(),
            held: u64::from(r.held),
            rc: None,
            rv: Vec::new(),
        }
    }

    /// The allowance of admissions in bucket `b` the host says it holds (none for a bucket
    /// its report does not cover).
    pub fn held_minute(&self, b: u64) -> u64 {
        if b == self.b {
            self.am0
        } else if b == self.b.wrapping_add(1) {
            self.am1
        } else {
            0
        }
    }
}

/// The room's limits and the lease terms, sent with every report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// `total_active_users`.
    pub total: u64,
    /// `new_users_per_minute`.
    pub minute: u64,
    /// How long a grant stays reserved without a new report (ms).
    pub lease: u64,
    /// How long a silent host's allowance of active visitors stays reserved after its lease
    /// ends (ms): the session length, for its visitors stay active that long.
    pub hold: u64,
    /// How long the store learns after it lost writes (ms): at least a lease, and the longest
    /// a host that reaches the store may take to report (a sync interval and a turn whose
    /// holder stopped). 0: a lease.
    #[serde(default)]
    pub learn: u64,
}

impl Params {
    /// How long the store learns (see [`Params::learn`]).
    pub fn learning_ms(&self) -> u64 {
        self.learn.max(self.lease)
    }
}

/// The store's answer to one report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// This grant's sequence number (per host entry, increasing).
    pub seq: u64,
    /// The allowance of active visitors.
    pub gt: u64,
    /// The bucket `gm0` is for (the report's).
    pub b: u64,
    /// The allowance of admissions in bucket `b`.
    pub gm0: u64,
    /// The allowance of admissions in bucket `b + 1`.
    pub gm1: u64,
    /// The global FIFO frontier.
    pub frontier: u64,
    /// Live waiters behind the frontier at other hosts.
    pub behind: u64,
    /// Hosts holding a current lease, this one included.
    pub hosts: u64,
    /// Hosts the store holds anything for (silent ones included), this one included.
    pub known: u64,
    /// 1 while the store is learning (it lost its state less than a lease ago: grants do not
    /// grow).
    pub learning: u64,
    /// Free slots in the whole room (what the frontier moved on).
    pub free: u64,
    /// Live waiters in the whole room (`None` from a store that does not count them: the
    /// room's spare slots are then not known).
    #[serde(default)]
    pub queued: Option<u64>,
    /// 1 when the report was older than the last grant to its host (a process that stalled
    /// past its turn, or a reply the host never got): the grant is what the store already
    /// reserved for the host.
    #[serde(default)]
    pub stale: u64,
    /// With a report's `rc`: where the host has now read the log of revocations up to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rc: Option<[u64; 2]>,
    /// Other hosts' revocations after the report's `rc` (at most [`REVOCATIONS_PER_SYNC`]),
    /// as 16 hex digits each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rv: Vec<String>,
}

/// The most revocations one reply carries (the rest come with the next syncs).
pub const REVOCATIONS_PER_SYNC: usize = velvet_rope::admission::REVOCATIONS_PER_SYNC;

/// A ticket id as the store holds it.
pub fn id_text(id: u64) -> String {
    format!("{id:016x}")
}

/// A ticket id from the store (`None` for anything but 1-16 hex digits).
pub fn id_value(text: &str) -> Option<u64> {
    (!text.is_empty() && text.len() <= 16)
        .then(|| u64::from_str_radix(text, 16).ok())
        .flatten()
}

impl Reply {
    /// The grant this reply makes, good until `until` (the host's clock when the sync was sent,
    /// plus the lease), with `fallback_ppm` to fall back on.
    pub fn grant(&self, until: u64, fallback_ppm: u64) -> ClusterGrant {
        ClusterGrant {
            seq: self.seq,
            until,
            total: self.gt,
            bucket: self.b,
            minute: self.gm0,
            minute_next: self.gm1,
            frontier: self.frontier,
            waiting_elsewhere: self.behind,
            fallback_ppm,
            // Not while learning: grants do not grow then, whatever is free.
            room_spare: match self.queued {
                Some(q) if self.learning == 0 => self.free.saturating_sub(q),
                _ => 0,
            },
        }
    }
}

/// The name a host goes by in the store: its id and its counters' incarnation. Counters made
/// anew (a restart without a state file, another process on the machine with counters of its
/// own) are another host: the old name stays reserved until its holdings lapse.
pub fn store_host(host_id: &str, incarnation: u32) -> String {
    format!("{host_id}#{incarnation:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The room's spare slots reach the host only when the store counted its waiters and is
    /// not learning (grants do not grow then): otherwise they are not known (0).
    #[test]
    fn a_grant_carries_the_spare_slots_only_when_they_are_known() {
        let reply = |queued: Option<u64>, learning: u64| Reply {
            free: 40,
            queued,
            learning,
            ..Reply::default()
        };
        assert_eq!(reply(Some(15), 0).grant(0, 0).room_spare, 25);
        assert_eq!(
            reply(Some(50), 0).grant(0, 0).room_spare,
            0,
            "more waiters than free"
        );
        assert_eq!(reply(Some(15), 1).grant(0, 0).room_spare, 0, "learning");
        assert_eq!(
            reply(None, 0).grant(0, 0).room_spare,
            0,
            "a store that does not count"
        );
    }
}
