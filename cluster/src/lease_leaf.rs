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
    /// Resources whose root table was learning at its last answer (logged as started). The
    /// leaf keeps asking for them until the root's answer ends it, so the end is logged and
    /// the set holds only resources it asks for.
    learning: std::collections::HashSet<String>,
    /// Whether the root's outage was logged: the last round that asked it anything had a
    /// request fail.
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
        let mut asked = false;
        let mut failure: Option<velvet_rope::lease::LeaseError> = None;
        for (resource, a) in resources {
            asked = true;
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
                    let idle = a.wants == 0.0 && a.subclients <= 1 && lease.capacity == 0.0;
                    if idle && !lease.learning {
                        // Nobody here uses it any more: stop asking (once the root's learning
                        // is over, so that its end is seen).
                        self.leases.remove(&resource);
                    } else {
                        self.leases.insert(resource.clone(), lease);
                    }
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        // The root's outage is the round's: some request failed (a master of a Redis Cluster
        // down fails only its resources), logged once until a round answers every request.
        match failure {
            Some(e) if !self.failing => {
                self.failing = true;
                (self.log)(&format!(
                    "{e}: the leaf keeps its grants until they end, then hands out each \
                     resource's refresh_failure share"
                ));
                self.event(
                    EventKind::LeaseRootOutageBegan,
                    now,
                    vec![("error", e.to_string())],
                );
            }
            None if asked && self.failing => {
                self.failing = false;
                (self.log)("lease root reachable again");
                self.event(EventKind::LeaseRootOutageEnded, now, Vec::new());
            }
            _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use velvet_rope::lease::{LeaseConfig, LeaseError};
    use velvet_rope::FakeClock;

    /// A root that fails every request for resource `a` while `a_down`, and answers the others
    /// (and `a` when up) with what they want, learning while `learning`.
    struct Root {
        a_down: AtomicBool,
        learning: AtomicBool,
    }

    impl LeaseSource for Root {
        fn request_lease(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
            if req.resource == "a" && self.a_down.load(Ordering::Relaxed) {
                return Err(LeaseError::RefreshFailed {
                    resource: "a".into(),
                    message: "down".into(),
                });
            }
            let learning = self.learning.load(Ordering::Relaxed);
            Ok(Lease {
                capacity: if learning { req.has } else { req.wants },
                expires_at: now + 10_000,
                refresh_interval_secs: 1.0,
                safe_capacity: 0.0,
                learning,
            })
        }

        fn release_lease(&self, _: &str, _: &str) -> Result<bool, LeaseError> {
            Ok(true)
        }
    }

    fn leaf() -> (Arc<Coordinator>, Arc<Root>, Arc<FakeClock>, LeafRound) {
        let cfg = LeaseConfig::from_toml(
            "[[resources]]\nidentifier_glob = \"*\"\ncapacity = 10\n\
             algorithm = { kind = \"fair_share\", lease_length = 1, refresh_interval = 1, \
             learning_mode_duration = 0 }\n",
        )
        .unwrap();
        let leaf = Arc::new(Coordinator::from_config(&cfg, 1_000).unwrap());
        let root = Arc::new(Root {
            a_down: AtomicBool::new(false),
            learning: AtomicBool::new(false),
        });
        let clock = Arc::new(FakeClock::new(1_000));
        let round = LeafRound::new(
            leaf.clone(),
            root.clone(),
            "leaf",
            clock.clone(),
            Arc::new(|_| {}),
        );
        (leaf, root, clock, round)
    }

    fn kinds(leaf: &Coordinator, now: Millis) -> Vec<(EventKind, Option<String>)> {
        leaf.drain_events(now)
            .into_iter()
            .map(|e| {
                let resource = e
                    .fields
                    .iter()
                    .find(|(k, _)| *k == "resource")
                    .map(|(_, v)| v.clone());
                (e.kind, resource)
            })
            .collect()
    }

    /// One resource's root failing while another's answers is one outage, logged once, ended
    /// when a round answers every request (review: it was logged began/ended every round).
    #[test]
    fn an_outage_of_some_resources_is_logged_once() {
        let (leaf, root, clock, mut round) = leaf();
        root.a_down.store(true, Ordering::Relaxed);
        for _ in 0..3 {
            let now = clock.now_ms();
            leaf.request("c", "a", 1.0, 0, now).unwrap();
            leaf.request("c", "b", 1.0, 0, now).unwrap();
            round.round();
            clock.advance(100);
        }
        let now = clock.now_ms();
        assert_eq!(kinds(&leaf, now), [(EventKind::LeaseRootOutageBegan, None)]);
        root.a_down.store(false, Ordering::Relaxed);
        round.round();
        round.round();
        assert_eq!(kinds(&leaf, now), [(EventKind::LeaseRootOutageEnded, None)]);
    }

    /// A resource whose clients leave while the root learns is asked for until the root's
    /// answer ends the learning, so the end is logged (review: it was dropped, its end never
    /// logged, and a later learning period of its table went unlogged).
    #[test]
    fn a_resource_left_while_the_root_learns_still_logs_the_end() {
        let (leaf, root, clock, mut round) = leaf();
        root.learning.store(true, Ordering::Relaxed);
        leaf.request("c", "x", 5.0, 0, clock.now_ms()).unwrap();
        round.round();
        let learning = (EventKind::LeaseLearningStarted, Some("x".to_owned()));
        assert_eq!(
            kinds(&leaf, clock.now_ms()),
            std::slice::from_ref(&learning)
        );
        // Its client's lease ends: nobody here wants it, but the root still learns.
        clock.advance(5_000);
        round.round();
        round.round();
        assert!(kinds(&leaf, clock.now_ms()).is_empty());
        root.learning.store(false, Ordering::Relaxed);
        round.round();
        let ended = (EventKind::LeaseLearningEnded, Some("x".to_owned()));
        assert_eq!(kinds(&leaf, clock.now_ms()), [ended]);
        // Not asked for any more; its table learning again later is logged again.
        round.round();
        assert!(round.leases.is_empty() && round.learning.is_empty());
        root.learning.store(true, Ordering::Relaxed);
        leaf.request("c", "x", 5.0, 0, clock.now_ms()).unwrap();
        round.round();
        assert_eq!(kinds(&leaf, clock.now_ms()), [learning]);
    }
}
