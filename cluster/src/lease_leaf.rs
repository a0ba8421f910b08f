//! A host's in-process coordinator as a leaf under a root (Doorman's tree): its clients lease
//! from it in process, and it leases their total from the root in the background.
//!
//! Each round (the templates' refresh interval or faster), for every resource its clients
//! hold leases of, the leaf asks the root for what they want together, speaking for all their
//! subclients, and hands out only what the root granted it ([`Coordinator::make_leaf`]). None
//! of its leases outlives its own. When the root cannot be reached the leaf keeps its grant
//! until that lease ends, then falls back to the lease's safe capacity.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use velvet_rope::lease::{Coordinator, Lease, LeaseRequest, LeaseSource};
use velvet_rope::Clock;

use crate::syncer::Log;

struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// A leaf's upstream loop (a thread of its own), stopped and joined when dropped.
pub struct LeafSync {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LeafSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeafSync").finish()
    }
}

/// One round of a leaf: what [`LeafSync`] runs each interval (a simulation calls it itself).
pub struct LeafRound {
    leaf: Arc<Coordinator>,
    root: Arc<dyn LeaseSource>,
    leaf_id: String,
    clock: Arc<dyn Clock>,
    log: Log,
    /// The root's last lease per resource.
    leases: std::collections::HashMap<String, Lease>,
    failing: bool,
}

impl LeafRound {
    /// Rounds of `leaf` (made a leaf here) under `root`, as client `leaf_id`.
    pub fn new(
        leaf: Arc<Coordinator>,
        root: Arc<dyn LeaseSource>,
        leaf_id: impl Into<String>,
        clock: Arc<dyn Clock>,
        log: Log,
    ) -> Self {
        leaf.make_leaf();
        Self {
            leaf,
            root,
            leaf_id: leaf_id.into(),
            clock,
            log,
            leases: Default::default(),
            failing: false,
        }
    }

    /// Asks the root for every resource the leaf's clients hold, and applies the answers.
    pub fn round(&mut self) {
        let now = self.clock.now_ms();
        let mut earliest: Option<u64> = None;
        for (resource, a) in self.leaf.aggregates(now) {
            let has = self
                .leases
                .get(&resource)
                .filter(|l| !l.is_expired(now))
                .map_or(0.0, |l| l.capacity);
            let req = LeaseRequest {
                client_id: &self.leaf_id,
                resource: &resource,
                wants: a.wants,
                has,
                subclients: a.subclients.max(1),
                priority: a.priority,
            };
            match self.root.request_lease(&req, now) {
                Ok(lease) => {
                    if self.failing {
                        self.failing = false;
                        (self.log)("lease root reachable again");
                    }
                    self.leaf
                        .set_upstream_capacity(&resource, Some(lease.capacity));
                    self.leases.insert(resource.clone(), lease);
                }
                Err(e) => {
                    if !self.failing {
                        self.failing = true;
                        (self.log)(&format!(
                            "{e}: the leaf keeps its grants until they end, then hands out \
                             their safe capacity"
                        ));
                    }
                    if let Some(l) = self.leases.get(&resource).copied() {
                        if l.is_expired(now) {
                            self.leaf
                                .set_upstream_capacity(&resource, Some(l.safe_capacity));
                        }
                    }
                }
            }
            if let Some(l) = self.leases.get(&resource).filter(|l| !l.is_expired(now)) {
                earliest = Some(earliest.map_or(l.expires_at, |e| e.min(l.expires_at)));
            }
        }
        // No lease of the leaf's outlives the root's leases it holds (a resource it holds no
        // lease of has nothing to hand out, or its safe capacity once the root is gone).
        self.leaf.set_upstream_expiry(earliest);
    }
}

impl LeafSync {
    /// Runs `round` every `interval` until dropped (the first at once).
    pub fn start(mut round: LeafRound, interval: Duration) -> Self {
        let stop = Arc::new(Stop {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let stop2 = stop.clone();
        let log = round.log.clone();
        let thread = std::thread::Builder::new()
            .name("velvet-rope-leaf".into())
            .spawn(move || loop {
                round.round();
                let guard = stop2.stopped.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = stop2
                    .wake
                    .wait_timeout_while(guard, interval, |s| !*s)
                    .unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
            })
            .map_err(|e| log(&format!("could not start the leaf thread: {e}")))
            .ok();
        Self { stop, thread }
    }
}

impl Drop for LeafSync {
    fn drop(&mut self) {
        *self.stop.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.stop.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
