//! A host's in-process coordinator as a leaf under a root (Doorman's tree): its clients lease
//! from it in process, and it leases their total from the root in the background.
//!
//! Each round (the templates' refresh interval or faster), for every resource its clients
//! hold leases of, the leaf asks the root for what they want together, speaking for all their
//! subclients, and hands out only what the root granted it ([`Coordinator::make_leaf`]), in
//! leases that never outlive its own. When the root cannot be reached the leaf keeps its grant
//! until that lease ends, then falls back to the resource's `refresh_failure` share (see
//! [`LeafRound::round`]).
//!
//! The root's learning (per resource, as its answers say) and its outages are events in the
//! leaf coordinator's log ([`Coordinator::drain_events`]), besides the text log's lines.

use std::sync::Arc;
use std::time::Duration;

use velvet_rope::admission::{Event, EventKind};
use velvet_rope::lease::{
    Aggregate, Coordinator, Lease, LeaseRequest, LeaseSource, RefreshFailureMode, Upstream,
};
use velvet_rope::{Clock, Millis};

use crate::periodic::Periodic;
use crate::syncer::Log;

/// A leaf's upstream loop (a thread of its own), stopped and joined when dropped.
pub struct LeafSync {
    _thread: Periodic,
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
    /// Resources whose root table was learning at its last answer (logged as started; kept
    /// while the leaf stops asking, so that the end is logged when it asks again).
    learning: std::collections::HashSet<String>,
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
            learning: Default::default(),
            failing: false,
        }
    }

    /// Logs `kind` for `resource` (or for the root, without one) in the leaf's event log.
    fn event(&self, kind: EventKind, now: Millis, fields: Vec<(&'static str, String)>) {
        self.leaf.record_event(Event {
            at: now,
            kind,
            room: None,
            fields,
        });
    }

    /// Logs the root's learning of `resource` starting or ending, as its answer says.
    fn note_learning(&mut self, resource: &str, learning: bool, now: Millis) {
        if learning == self.learning.contains(resource) {
            return;
        }
        let kind = if learning {
            self.learning.insert(resource.to_owned());
            EventKind::LeaseLearningStarted
        } else {
            self.learning.remove(resource);
            EventKind::LeaseLearningEnded
        };
        let fields = vec![("resource", resource.to_owned()), ("source", "root".into())];
        self.event(kind, now, fields);
    }

    /// Asks the root for every resource the leaf's clients hold (or the leaf holds a grant
    /// of), and applies the answers. A resource the root did not answer for keeps its grant
    /// until that lease ends; the leaf then hands out the resource's `refresh_failure` share:
    /// nothing for `pessimistic`, the lease's safe capacity for `safe`, what its clients want
    /// for `optimistic` (the last two are uncoordinated, outside the root's guarantee).
    pub fn round(&mut self) {
        let now = self.clock.now_ms();
        let mut resources: Vec<(String, Aggregate)> = self.leaf.aggregates(now);
        for name in self.leases.keys() {
            if !resources.iter().any(|(r, _)| r == name) {
                let idle = Aggregate {
                    wants: 0.0,
                    has: 0.0,
                    subclients: 1,
                    priority: 0,
                };
                resources.push((name.clone(), idle));
            }
        }
        for (resource, a) in resources {
            let held = self
                .leases
                .get(&resource)
                .filter(|l| !l.is_expired(now))
                .map_or(0.0, |l| l.capacity);
            let req = LeaseRequest {
                client_id: &self.leaf_id,
                resource: &resource,
                wants: a.wants,
                // What its clients hold counts too: after a root restart, the root learns it.
                has: held.max(a.has),
                subclients: a.subclients.max(1),
                priority: a.priority,
                // Its clients hold leases under its grant: a smaller one keeps the larger
                // reserved while it runs.
                leaf: true,
            };
            match self.root.request_lease(&req, now) {
                Ok(lease) => {
                    if self.failing {
                        self.failing = false;
                        (self.log)("lease root reachable again");
                        self.event(EventKind::LeaseRootOutageEnded, now, Vec::new());
                    }
                    self.note_learning(&resource, lease.learning, now);
                    let fallback = match self.leaf.template(&resource).map(|t| t.refresh_failure) {
                        Ok(RefreshFailureMode::Safe) => lease.safe_capacity,
                        Ok(RefreshFailureMode::Optimistic) => a.wants,
                        _ => 0.0,
                    };
                    self.leaf.set_upstream(
                        &resource,
                        Some(Upstream {
                            capacity: lease.capacity,
                            expires_at: lease.expires_at,
                            fallback,
                        }),
                    );
                    if a.wants == 0.0 && a.subclients <= 1 && lease.capacity == 0.0 {
                        // Nobody here uses it any more: stop asking.
                        self.leases.remove(&resource);
                    } else {
                        self.leases.insert(resource.clone(), lease);
                    }
                }
                Err(e) => {
                    if !self.failing {
                        self.failing = true;
                        (self.log)(&format!(
                            "{e}: the leaf keeps its grants until they end, then hands out \
                             each resource's refresh_failure share"
                        ));
                        self.event(
                            EventKind::LeaseRootOutageBegan,
                            now,
                            vec![("error", e.to_string())],
                        );
                    }
                }
            }
        }
    }
}

impl LeafSync {
    /// Runs `round` every `interval` until dropped (the first at once).
    pub fn start(mut round: LeafRound, interval: Duration) -> Self {
        let log = round.log.clone();
        Self {
            _thread: Periodic::start("velvet-rope-leaf", interval, &log, move || round.round()),
        }
    }
}

/// With a `[cluster]` table in `config`: makes `coordinator` a leaf under the Redis root the
/// table names and starts its upstream loop (every `sync_interval_ms`), as client
/// `<host_id>#<process id>`; `None` without the table. What the bindings call when they make a
/// coordinator, so that one TOML shares leases across hosts from every front door.
pub fn leaf_for(
    config: &velvet_rope::Config,
    coordinator: Arc<Coordinator>,
) -> Result<Option<LeafSync>, velvet_rope::lease::LeaseError> {
    let Some(c) = config.cluster.as_ref() else {
        return Ok(None);
    };
    let resources = velvet_rope::lease::LeaseConfig {
        resources: config.resources.clone(),
    };
    let root = crate::lease_root::RedisLeaseRoot::new(
        &c.redis_url,
        &c.key_prefix,
        &resources,
        Duration::from_millis(c.timeout_ms),
    )?
    .with_replicas(c.replicas);
    let root = if c.redis_cluster {
        root.in_cluster()?
    } else {
        root
    };
    let host = c.host_id.clone().unwrap_or_else(crate::syncer::host_name);
    let options = crate::syncer::SyncOptions::from_config(c);
    let round = LeafRound::new(
        coordinator,
        Arc::new(root),
        format!("{host}#{}", std::process::id()),
        options.clock.clone(),
        options.log.clone(),
    );
    Ok(Some(LeafSync::start(round, options.interval)))
}
