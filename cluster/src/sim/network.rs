//! The simulated store and the network to it: the allocator (the Redis script's twin) over
//! per-room state, a replica fed by a replication stream that can lag, failover, data loss,
//! stalls, outages, partitions and clock steps, all on the virtual clock.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::allocator::{allocate, relay_revocations, RoomState};
use crate::protocol::{Params, Reply, Report};
use crate::store::StoreError;

/// One sync on its way to the store.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) host_index: usize,
    pub(crate) room: String,
    pub(crate) host: String,
    pub(crate) report: Report,
    pub(crate) params: Params,
    /// When it was sent (virtual ms).
    pub(crate) sent: u64,
}

/// What becomes of a request: whether and when the store applies it, and what its sender
/// gets back and when.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// Held in the store's sockets until it resumes (a stall): applied then.
    pub(crate) queued: bool,
    /// When the sender gets `result`.
    pub(crate) reply_at: u64,
    /// What it gets.
    pub(crate) result: Result<Reply, StoreError>,
    /// The write it made, when its answer waits for the replica (a failover before the answer
    /// turns it into an error).
    pub(crate) write: Option<u64>,
}

/// The store's server and what lies between it and the hosts.
pub(crate) struct Network {
    primary: HashMap<String, RoomState>,
    /// Writes on their way to the replica: (arrival, write number, the primary's state after
    /// the write).
    stream: VecDeque<(u64, u64, HashMap<String, RoomState>)>,
    writes: u64,
    lost: HashSet<u64>,
    /// Per host, the first time a request of it was applied since the last wipe.
    heard: Vec<Option<u64>>,
    /// When the store first applied a request after the last wipe (its learning starts).
    pub(crate) born_at: Option<u64>,
    /// Per host, the most it was granted: active visitors, admissions in a bucket.
    pub(crate) most_granted: Vec<(u64, u64)>,
    /// Reports found older than their host's last grant.
    pub(crate) stale_reports: u64,
    /// The store's server process: a wipe (a restart) or a failover starts another.
    run: u64,
    replica: HashMap<String, RoomState>,
    /// The store's clock minus the virtual clock.
    pub(crate) clock_offset: i64,
    pub(crate) down_until: u64,
    pub(crate) stalled_until: u64,
    pub(crate) lag_until: u64,
    pub(crate) lag: u64,
    pub(crate) partitioned_until: Vec<u64>,
    stalled: Vec<Request>,
    replicas: u32,
    timeout: u64,
    /// Virtual time at the start (the store's clock reads it plus the offset).
    t0: u64,
}

impl Network {
    pub(crate) fn new(hosts: usize, replicas: u32, timeout: u64, t0: u64) -> Self {
        Self {
            primary: HashMap::new(),
            stream: VecDeque::new(),
            writes: 0,
            lost: HashSet::new(),
            heard: vec![None; hosts],
            born_at: None,
            most_granted: vec![(0, 0); hosts],
            stale_reports: 0,
            run: 0,
            replica: HashMap::new(),
            clock_offset: 0,
            down_until: 0,
            stalled_until: 0,
            lag_until: 0,
            lag: 0,
            partitioned_until: vec![0; hosts],
            stalled: Vec::new(),
            replicas,
            timeout,
            t0,
        }
    }

    fn store_now(&self, now: u64) -> u64 {
        (self.t0 as i64 + now as i64 + self.clock_offset).max(0) as u64
    }

    /// Whether a call from host `h` at `now` would make its sender wait (it must then run on
    /// a thread of its own).
    pub(crate) fn would_block(&self, h: usize, now: u64) -> bool {
        now < self.partitioned_until[h]
            || (now >= self.down_until && now < self.stalled_until)
            || (self.replicas > 0 && now < self.lag_until && self.lag > 0)
    }

    /// Moves writes that have reached the replica into it.
    fn replicate(&mut self, now: u64) {
        while let Some((arrive, _, _)) = self.stream.front() {
            if *arrive > now {
                break;
            }
            if let Some((_, _, state)) = self.stream.pop_front() {
                self.replica = state;
            }
        }
    }

    fn apply(&mut self, r: &Request, now: u64) -> (Reply, u64, u64) {
        let store_now = self.store_now(now);
        let state = self.primary.entry(r.room.clone()).or_default();
        let run = format!("run-{}", self.run);
        let mut reply = allocate(state, &r.host, &r.report, &r.params, store_now, &run);
        (reply.rc, reply.rv) = relay_revocations(state, &r.host, &r.report, &r.params, store_now);
        let lag = if now < self.lag_until { self.lag } else { 0 };
        let arrive = now + lag;
        self.writes += 1;
        self.stream
            .push_back((arrive, self.writes, self.primary.clone()));
        self.replicate(now);
        self.born_at.get_or_insert(now);
        self.heard[r.host_index].get_or_insert(now);
        self.stale_reports += reply.stale;
        let g = &mut self.most_granted[r.host_index];
        *g = (g.0.max(reply.gt), g.1.max(reply.gm0.max(reply.gm1)));
        (reply, arrive, self.writes)
    }

    /// Whether write `w` survived every failover so far.
    pub(crate) fn survived(&self, w: u64) -> bool {
        !self.lost.contains(&w)
    }

    /// Per host, whether a request of it was applied within the learning lease after the last
    /// wipe (`None` while that lease runs).
    pub(crate) fn heard_in_learning(&self, learn: u64, now: u64) -> Option<Vec<bool>> {
        let born = self.born_at?;
        let last = born + learn - 1;
        if now < last {
            return None;
        }
        Some(
            self.heard
                .iter()
                .map(|h| h.is_some_and(|t| t <= last))
                .collect(),
        )
    }

    /// A request from a host at `now`.
    pub(crate) fn call(&mut self, r: Request, now: u64) -> Delivery {
        let timeout = now + self.timeout;
        let fail = |reply_at, e| Delivery {
            queued: false,
            reply_at,
            result: Err(e),
            write: None,
        };
        if now < self.partitioned_until[r.host_index] {
            return fail(timeout, StoreError::Timeout(self.timeout));
        }
        if now < self.down_until {
            return fail(now, StoreError::Unreachable("connection refused".into()));
        }
        if now < self.stalled_until {
            self.stalled.push(r);
            return Delivery {
                queued: true,
                reply_at: timeout,
                result: Err(StoreError::Timeout(self.timeout)),
                write: None,
            };
        }
        let (reply, arrive, write) = self.apply(&r, now);
        if self.replicas > 0 {
            // WAIT for the replica, within half the timeout (as the Redis store does).
            let wait = (self.timeout / 2).max(1);
            if arrive > now + wait {
                return Delivery {
                    queued: false,
                    reply_at: now + wait,
                    result: Err(StoreError::NotReplicated {
                        acked: 0,
                        wanted: self.replicas,
                    }),
                    write: None,
                };
            }
            return Delivery {
                queued: false,
                reply_at: arrive,
                result: Ok(reply),
                write: Some(write),
            };
        }
        Delivery {
            queued: false,
            reply_at: now,
            result: Ok(reply),
            write: None,
        }
    }

    /// The store resumes after a stall: the requests held in its sockets are applied, in
    /// order (their senders gave up on them; what they reserve stays reserved).
    pub(crate) fn resume(&mut self, now: u64) -> usize {
        let held: Vec<Request> = std::mem::take(&mut self.stalled);
        for r in &held {
            self.apply(r, now);
        }
        held.len()
    }

    /// Fails over to the replica: what reached it is the store now.
    pub(crate) fn failover(&mut self, now: u64) -> usize {
        self.replicate(now);
        let lost = self.stream.len();
        for (_, w, _) in self.stream.drain(..) {
            self.lost.insert(w);
        }
        self.primary = self.replica.clone();
        self.run += 1;
        lost
    }

    /// The store restarts without its data (its replica syncs from it: empty too).
    pub(crate) fn wipe(&mut self) {
        self.run += 1;
        self.primary.clear();
        self.replica.clear();
        for (_, w, _) in self.stream.drain(..) {
            self.lost.insert(w);
        }
        self.stalled.clear();
        self.born_at = None;
        self.heard.iter_mut().for_each(|h| *h = None);
    }
}
