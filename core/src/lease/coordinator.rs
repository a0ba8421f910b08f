//! The in-process coordinator: the embedded default lease server.
//!
//! One mutex-protected table per coordinator; requests are rare (one per client per refresh
//! interval), so the coordinator is not on any hot path. Safety rules enforced on every grant:
//! - a grant is never negative and never above `capacity - sum(unexpired grants of others)` for
//!   pooled algorithms (so the sum of unexpired grants never exceeds capacity), and never
//!   above `capacity` for `static`;
//! - for one learning-mode period after start the coordinator only gives back what clients
//!   report they hold (new clients get 0), so it never over-allocates while rebuilding state;
//! - an expired lease is dropped and its capacity is free again;
//! - a lease never outlives the coordinator's own upstream lease, if it has one.
//!
//! Its learning mode's start and end (per template) are events the host drains
//! ([`Coordinator::drain_events`]), as a leaf's loop logs its root's learning and outages.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use rustc_hash::FxHashMap;

use super::algorithm::{self, next_down, Demand};
use super::config::{AlgorithmKind, LeaseConfig, ResourceTemplate};
use super::error::LeaseError;
use super::superseded;
use super::template::TemplateSet;
use crate::admission::events::{Event, EventKind, EventLog};
use crate::clock::{Millis, MAX_NOW_MS};

/// What a client receives: how much it may use and until when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lease {
    /// The granted capacity (rate per second, or concurrent units).
    pub capacity: f64,
    /// When the lease lapses unless refreshed (ms since the Unix epoch).
    pub expires_at: Millis,
    /// How often the client should refresh, in seconds.
    pub refresh_interval_secs: f64,
    /// What the client may use if it cannot refresh (configured, else capacity / clients).
    pub safe_capacity: f64,
    /// Whether it was granted in learning mode: only what the client reported holding
    /// (Doorman's learning after a restart).
    pub learning: bool,
}

impl Lease {
    /// Whether the lease has lapsed at `now`.
    pub fn is_expired(&self, now: Millis) -> bool {
        now >= self.expires_at
    }
}

/// A full lease request, as Doorman's `GetCapacity` carries it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseRequest<'a> {
    /// Stable identifier of the client (process, thread group, host).
    pub client_id: &'a str,
    /// The resource identifier, matched against the templates.
    pub resource: &'a str,
    /// How much the client would like.
    pub wants: f64,
    /// How much the client currently holds (used in learning mode). 0 for a new client.
    pub has: f64,
    /// Number of subclients the client speaks for (its weight in `fair_share`); at least 1.
    pub subclients: u32,
    /// Priority band; higher bands are served first.
    pub priority: u32,
    /// The client is a leaf coordinator that hands its grant out in leases of its own
    /// (Doorman's tree): when its grant shrinks, its clients still hold leases issued under
    /// the larger one until that ends, so the larger one stays reserved until then (else the
    /// tree's clients together hold more than the capacity while they rebalance: Doorman's
    /// "shortfall"). A client that uses its grant itself honours a smaller one at once.
    pub leaf: bool,
}

impl<'a> LeaseRequest<'a> {
    /// A request from a client holding nothing, with one subclient, in band `priority`.
    pub fn new(client_id: &'a str, resource: &'a str, wants: f64, priority: u32) -> Self {
        Self {
            client_id,
            resource,
            wants,
            has: 0.0,
            subclients: 1,
            priority,
            leaf: false,
        }
    }
}

/// What the coordinator knows of one client of one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientGrant {
    /// The current grant.
    pub has: f64,
    /// The last reported demand.
    pub wants: f64,
    /// Weight in `fair_share`.
    pub subclients: u32,
    /// Priority band.
    pub priority: u32,
    /// When the grant lapses.
    pub expires_at: Millis,
}

#[derive(Debug)]
struct ResourceState {
    template: usize,
    clients: BTreeMap<String, ClientGrant>,
    /// Leaf clients' earlier grants whose leases still run, each until its own end (see
    /// [`superseded`](super::superseded)). A leaf of Doorman's tree hands its grant out in
    /// leases of its own, which its clients hold until they end, so what it held stays
    /// counted until then; handing it out at once lets the tree's clients together hold more
    /// than the capacity while they rebalance (Doorman's "shortfall"; the Redis root keeps
    /// the same). See [`LeaseRequest::leaf`].
    reserved: BTreeMap<String, Vec<(f64, Millis)>>,
}

impl ResourceState {
    fn expire(&mut self, now: Millis) {
        self.clients.retain(|_, c| c.expires_at > now);
        for r in self.reserved.values_mut() {
            r.retain(|g| g.1 > now);
        }
        self.reserved.retain(|_, r| !r.is_empty());
    }

    /// What `id`, granted `grant`, counts for: its grant, or an earlier larger one still
    /// running.
    fn held(&self, id: &str, grant: f64) -> f64 {
        self.reserved
            .get(id)
            .map_or(grant, |r| grant.max(superseded::largest(r)))
    }

    /// Sum of what clients hold in map order (a leaf's earlier larger grant still running
    /// counts), with `client`'s grant replaced by `grant`. The client's own earlier grants are
    /// not added to its new one: they are its own, and a smaller new grant cannot take back
    /// leases its clients already hold (when its upstream grant shrank, a coordinator may have
    /// handed out more than it now has until those end; refusing it everything would only
    /// starve its clients meanwhile).
    fn sum_with(&self, client: &str, grant: f64) -> f64 {
        let mut sum = 0.0;
        let mut seen = false;
        for (id, c) in &self.clients {
            if id == client {
                sum += grant;
                seen = true;
            } else {
                sum += self.held(id, c.has);
            }
        }
        if !seen {
            sum += grant;
        }
        // Earlier grants of clients whose current lease has lapsed (their old ones may run
        // longer, given an earlier `now`).
        for (id, r) in &self.reserved {
            if id != client && !self.clients.contains_key(id) {
                sum += superseded::largest(r);
            }
        }
        sum
    }

    /// Sum of what every client but `client` holds.
    fn others(&self, client: &str) -> f64 {
        self.sum_with(client, 0.0)
    }

    /// Leaf `client`'s grant is replaced at `now`: the one it held stays counted while its
    /// lease runs (with the earlier ones still running).
    fn supersede(&mut self, client: &str, now: Millis) {
        let Some(old) = self.clients.get(client).filter(|c| c.expires_at > now) else {
            return;
        };
        let held = (old.has, old.expires_at);
        let earlier = self.reserved.remove(client).unwrap_or_default();
        let kept = superseded::still_running(earlier.into_iter().chain([held]), now);
        if !kept.is_empty() {
            self.reserved.insert(client.to_owned(), kept);
        }
    }
}

#[derive(Debug)]
struct State {
    resources: FxHashMap<String, ResourceState>,
    upstream_expiry: Option<Millis>,
    /// A leaf's grants from its upstream, by resource.
    upstream: FxHashMap<String, Upstream>,
    /// A leaf hands out only what its upstream granted it (nothing for a resource it holds no
    /// grant of yet); a root hands out its templates' capacities.
    leaf: bool,
    /// Requests refused as invalid, by the resource they named (one a template matches).
    refusals: FxHashMap<String, u64>,
}

/// Resources whose refusals are counted, at most.
const MAX_REFUSED_RESOURCES: usize = 1024;

/// Where one resource stands, for the metrics (see `lease::metrics`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceFigures {
    /// The resource's identifier.
    pub(crate) resource: String,
    /// The capacity it hands out now (a leaf: its upstream grant, or its fallback).
    pub(crate) capacity: f64,
    /// Sum of the unexpired grants.
    pub(crate) granted: f64,
    /// Sum of what the clients holding them want.
    pub(crate) wanted: f64,
    /// Clients holding an unexpired grant.
    pub(crate) clients: usize,
    /// Whether it is in learning mode.
    pub(crate) learning: bool,
    /// Requests refused as invalid.
    pub(crate) refusals: u64,
}

/// The capacity `resource` (of template `t`) hands out at `now`, and the time no lease may
/// outlive. A leaf: its grant while it lasts; then its fallback (or nothing), in leases short
/// enough that its clients come back soon. A root: the template's capacity.
fn capacity_at(
    state: &State,
    resource: &str,
    t: &ResourceTemplate,
    now: Millis,
) -> (f64, Option<Millis>) {
    let upstream = state.upstream_expiry;
    if !state.leaf {
        return (t.capacity, upstream);
    }
    let short = now.saturating_add(t.algorithm.refresh_interval_ms().max(1));
    let until = |e: Millis| Some(upstream.map_or(e, |x| x.min(e)));
    match state.upstream.get(resource) {
        Some(u) if now < u.expires_at => (u.capacity.min(t.capacity), until(u.expires_at)),
        Some(u) => (u.fallback.min(t.capacity), until(short)),
        None => (0.0, until(short)),
    }
}

/// What a leaf coordinator holds of one resource from its upstream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Upstream {
    /// The capacity it may hand out until `expires_at`.
    pub capacity: f64,
    /// When its upstream lease ends (ms, the coordinator's clock): no lease it hands out
    /// lasts longer.
    pub expires_at: Millis,
    /// What it hands out after that, until its upstream answers again (0 unless the
    /// resource's `refresh_failure` says otherwise).
    pub fallback: f64,
}

/// What a leaf coordinator's clients of one resource ask for together: what it asks its
/// upstream for (Doorman's tree).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aggregate {
    /// Sum of the clients' wants.
    pub wants: f64,
    /// Sum of what they hold.
    pub has: f64,
    /// Sum of their subclients.
    pub subclients: u32,
    /// The highest priority band among them.
    pub priority: u32,
}

/// The in-process lease coordinator.
#[derive(Debug)]
pub struct Coordinator {
    templates: TemplateSet,
    started_at: Millis,
    state: Mutex<State>,
    /// Events for the host's log: learning mode's start and end, a leaf's root.
    events: EventLog,
    /// Per template: whether the end of its learning mode is still to be logged.
    learning_unended: Box<[AtomicBool]>,
}

impl Coordinator {
    /// A coordinator over validated templates, started (learning mode begins) at `now`
    /// (taken as [`MAX_NOW_MS`] if later; [`Coordinator::from_config`] refuses such times).
    /// Logs, per template with a learning period, `lease_learning_started`.
    pub fn new(templates: TemplateSet, now: Millis) -> Self {
        let started_at = now.min(MAX_NOW_MS);
        let events = EventLog::default();
        let learning_unended = templates
            .templates()
            .iter()
            .map(|t| {
                let learns = t.algorithm.learning_mode_ms() > 0;
                if learns {
                    events.push(Event {
                        at: started_at,
                        kind: EventKind::LeaseLearningStarted,
                        room: None,
                        fields: vec![
                            ("resource", t.identifier_glob.clone()),
                            ("source", "coordinator".into()),
                            (
                                "until_ms",
                                started_at
                                    .saturating_add(t.algorithm.learning_mode_ms())
                                    .to_string(),
                            ),
                        ],
                    });
                }
                AtomicBool::new(learns)
            })
            .collect();
        Self {
            templates,
            started_at,
            state: Mutex::new(State {
                resources: FxHashMap::default(),
                upstream_expiry: None,
                upstream: FxHashMap::default(),
                leaf: false,
                refusals: FxHashMap::default(),
            }),
            events,
            learning_unended,
        }
    }

    /// Logs `lease_learning_ended` for each template whose learning period is over at `now`
    /// (at the time it ended) and not yet logged.
    fn observe_learning(&self, now: Millis) {
        for (t, unended) in self
            .templates
            .templates()
            .iter()
            .zip(&*self.learning_unended)
        {
            let until = self.learning_until(t);
            if now >= until && unended.swap(false, Ordering::AcqRel) {
                self.events.push(Event {
                    at: until,
                    kind: EventKind::LeaseLearningEnded,
                    room: None,
                    fields: vec![
                        ("resource", t.identifier_glob.clone()),
                        ("source", "coordinator".into()),
                    ],
                });
            }
        }
    }

    /// Every event logged since the last call, in the order logged, with the ends of
    /// learning periods over at `now` (logged at the first drain after them, dated when they
    /// ended): `lease_learning_started` / `lease_learning_ended` (field `source`:
    /// `coordinator` for this coordinator's own after its start, per template, `resource`
    /// its glob; `root` for a leaf's root, per resource), `lease_root_outage_began` /
    /// `lease_root_outage_ended` (a leaf's root lost and found). The log keeps
    /// [`EVENT_LOG_CAPACITY`](crate::admission::events::EVENT_LOG_CAPACITY) events (more are
    /// dropped and counted: a coordinator of more templates than that loses some of its
    /// learning lines); drain it now and then (the bindings do so on a timer), never on a
    /// request's path.
    pub fn drain_events(&self, now: Millis) -> Vec<Event> {
        self.observe_learning(now);
        self.events.drain()
    }

    /// The oldest event (after the ends of learning periods over at `now`), taken if `take`
    /// accepts it (a caller with a buffer too small for it leaves it for the next call).
    pub fn next_event_if(&self, now: Millis, take: impl FnOnce(&Event) -> bool) -> Option<Event> {
        self.observe_learning(now);
        self.events.pop_if(take)
    }

    /// Events dropped because the log was full.
    pub fn events_dropped(&self) -> u64 {
        self.events.dropped()
    }

    /// Adds an event to the log [`Coordinator::drain_events`] drains (a leaf's loop: its
    /// root's learning and outages).
    pub fn record_event(&self, event: Event) {
        self.events.push(event);
    }

    /// Validates `config` and builds a coordinator started at `now`. A `now` past
    /// [`MAX_NOW_MS`] (2106: most likely microseconds passed for milliseconds) is refused.
    pub fn from_config(config: &LeaseConfig, now: Millis) -> Result<Self, LeaseError> {
        if now > MAX_NOW_MS {
            return Err(LeaseError::config("now", past_2106(now)));
        }
        Ok(Self::new(TemplateSet::new(config)?, now))
    }

    /// The template governing `resource`.
    pub fn template(&self, resource: &str) -> Result<&ResourceTemplate, LeaseError> {
        self.templates.lookup(resource)
    }

    /// When this coordinator is itself a client of a higher level, the expiry of its own lease:
    /// no lease it hands out lasts longer. `None` removes the ceiling.
    pub fn set_upstream_expiry(&self, expiry: Option<Millis>) {
        self.lock().upstream_expiry = expiry;
    }

    /// Makes this coordinator a leaf under an upstream one (Doorman's tree): from now on it
    /// hands out, per resource, only what its upstream granted it ([`Coordinator::set_upstream`])
    /// and never for longer than that grant lasts; nothing for a resource it holds no grant of.
    pub fn make_leaf(&self) {
        self.lock().leaf = true;
    }

    /// A leaf's grant of `resource` from its upstream (`None`: none).
    pub fn set_upstream(&self, resource: &str, upstream: Option<Upstream>) {
        let mut state = self.lock();
        match upstream {
            Some(u) if u.capacity.is_finite() && u.capacity >= 0.0 => {
                state.upstream.insert(resource.to_owned(), u);
            }
            _ => {
                state.upstream.remove(resource);
            }
        }
    }

    /// Resources with unexpired leases at `now`, and what their clients ask for together.
    pub fn aggregates(&self, now: Millis) -> Vec<(String, Aggregate)> {
        let state = self.lock();
        let mut out: Vec<(String, Aggregate)> = state
            .resources
            .iter()
            .map(|(name, rs)| {
                let live = rs.clients.values().filter(|c| c.expires_at > now);
                let mut a = Aggregate {
                    wants: 0.0,
                    has: 0.0,
                    subclients: 0,
                    priority: 0,
                };
                for c in live {
                    a.wants += c.wants;
                    a.has += c.has;
                    a.subclients = a.subclients.saturating_add(c.subclients);
                    a.priority = a.priority.max(c.priority);
                }
                (name.clone(), a)
            })
            .filter(|(_, a)| a.subclients > 0)
            .collect();
        out.sort_by(|x, y| x.0.cmp(&y.0));
        out
    }

    /// Whether `resource` is in learning mode at `now`.
    pub fn in_learning_mode(&self, resource: &str, now: Millis) -> Result<bool, LeaseError> {
        let t = self.templates.lookup(resource)?;
        Ok(now < self.learning_until(t))
    }

    fn learning_until(&self, t: &ResourceTemplate) -> Millis {
        self.started_at
            .saturating_add(t.algorithm.learning_mode_ms())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the table inconsistent (every update is
        // one insert or remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests `wants` of `resource` for a client holding nothing, in band `priority`.
    pub fn request(
        &self,
        client_id: &str,
        resource: &str,
        wants: f64,
        priority: u32,
        now: Millis,
    ) -> Result<Lease, LeaseError> {
        self.request_with(
            &LeaseRequest::new(client_id, resource, wants, priority),
            now,
        )
    }

    /// Requests (or refreshes) a lease with every field of the protocol. A `now` past
    /// [`MAX_NOW_MS`] (2106: most likely microseconds passed for milliseconds, which would
    /// grant a lease that never ends in real time) is refused.
    pub fn request_with(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
        let lease = self.grant(req, now);
        if matches!(lease, Err(LeaseError::InvalidRequest { .. }))
            && self.templates.lookup_index(req.resource).is_ok()
        {
            let mut state = self.lock();
            // Bounded: a client naming ever new resources a glob matches adds no more past
            // `MAX_REFUSED_RESOURCES` (their refusals go uncounted).
            let known = state.refusals.len() < MAX_REFUSED_RESOURCES
                || state.refusals.contains_key(req.resource);
            if known {
                *state.refusals.entry(req.resource.to_owned()).or_default() += 1;
            }
        }
        lease
    }

    /// Where every resource that has had a request stands at `now`, by identifier.
    pub(crate) fn figures(&self, now: Millis) -> Vec<ResourceFigures> {
        let state = self.lock();
        let mut names: Vec<&String> = state.resources.keys().collect();
        names.extend(
            state
                .refusals
                .keys()
                .filter(|r| !state.resources.contains_key(*r)),
        );
        names.sort();
        names
            .into_iter()
            .filter_map(|name| {
                let t = self.templates.lookup(name).ok()?;
                let live: Vec<&ClientGrant> = state
                    .resources
                    .get(name)
                    .map(|rs| rs.clients.values().filter(|c| c.expires_at > now).collect())
                    .unwrap_or_default();
                Some(ResourceFigures {
                    resource: name.clone(),
                    capacity: capacity_at(&state, name, t, now).0,
                    granted: live.iter().map(|c| c.has).sum(),
                    wanted: live.iter().map(|c| c.wants).sum(),
                    clients: live.len(),
                    learning: now < self.learning_until(t),
                    refusals: state.refusals.get(name).copied().unwrap_or(0),
                })
            })
            .collect()
    }

    /// `request_with` but for counting its refusals.
    fn grant(&self, req: &LeaseRequest<'_>, now: Millis) -> Result<Lease, LeaseError> {
        let bad = |field: &'static str, reason: String| LeaseError::InvalidRequest {
            resource: req.resource.to_owned(),
            field,
            reason,
        };
        if now > MAX_NOW_MS {
            return Err(bad("now", past_2106(now)));
        }
        if req.client_id.is_empty() {
            return Err(bad("client_id", "must not be empty".into()));
        }
        if !req.wants.is_finite() || req.wants < 0.0 {
            return Err(bad(
                "wants",
                format!("must be a finite number >= 0, got {}", req.wants),
            ));
        }
        if !req.has.is_finite() || req.has < 0.0 {
            return Err(bad(
                "has",
                format!("must be a finite number >= 0, got {}", req.has),
            ));
        }
        if req.subclients == 0 {
            return Err(bad("subclients", "must be at least 1".into()));
        }
        let index = self.templates.lookup_index(req.resource)?;
        let t = &self.templates.templates()[index];
        let learning = now < self.learning_until(t);
        let mut guard = self.lock();
        let state = &mut *guard;
        let (capacity, upstream) = capacity_at(state, req.resource, t, now);
        let rs = state
            .resources
            .entry(req.resource.to_owned())
            .or_insert_with(|| ResourceState {
                template: index,
                clients: BTreeMap::new(),
                reserved: BTreeMap::new(),
            });
        rs.template = index;
        rs.expire(now);
        let kind = t.algorithm.kind;

        let target = if learning {
            req.has.min(req.wants)
        } else {
            let mut demands = Vec::with_capacity(rs.clients.len() + 1);
            let mut me = None;
            for (id, c) in &rs.clients {
                if id == req.client_id {
                    me = Some(demands.len());
                    demands.push(Demand {
                        wants: req.wants,
                        subclients: req.subclients,
                        priority: req.priority,
                    });
                } else {
                    demands.push(Demand {
                        wants: c.wants,
                        subclients: c.subclients,
                        priority: c.priority,
                    });
                }
            }
            let me = me.unwrap_or_else(|| {
                demands.push(Demand {
                    wants: req.wants,
                    subclients: req.subclients,
                    priority: req.priority,
                });
                demands.len() - 1
            });
            let grants = algorithm::allocate(kind, capacity, t.algorithm.reserved(), &demands);
            grants.get(me).copied().unwrap_or(0.0)
        };

        // A leaf's grant being replaced stays counted while its lease runs.
        if req.leaf {
            rs.supersede(req.client_id, now);
        }
        // Hold the client's place in the map first, so the clamp sums in the same order as
        // every later check does.
        rs.clients
            .entry(req.client_id.to_owned())
            .or_insert(ClientGrant {
                has: 0.0,
                wants: req.wants,
                subclients: req.subclients,
                priority: req.priority,
                expires_at: now,
            });
        let grant = clamp_grant(rs, kind, capacity, req.client_id, target);
        let mut expires_at = now.saturating_add(t.algorithm.lease_length_ms());
        if let Some(up) = upstream {
            expires_at = expires_at.min(up);
        }
        rs.clients.insert(
            req.client_id.to_owned(),
            ClientGrant {
                has: grant,
                wants: req.wants,
                subclients: req.subclients,
                priority: req.priority,
                expires_at,
            },
        );
        let clients = rs.clients.len().max(1) as f64;
        let dynamic_safe = match kind {
            AlgorithmKind::None => grant,
            AlgorithmKind::Static => capacity,
            _ => capacity / clients,
        };
        let safe_capacity = t.safe_capacity.unwrap_or(dynamic_safe);
        Ok(Lease {
            capacity: grant,
            expires_at,
            refresh_interval_secs: t.algorithm.refresh_interval,
            safe_capacity,
            learning,
        })
    }

    /// Releases the client's lease on `resource`; its capacity is free at once (a leaf's
    /// earlier grants still count while their leases run: its clients may hold leases under
    /// them). Returns whether the client held a lease.
    pub fn release(&self, client_id: &str, resource: &str) -> Result<bool, LeaseError> {
        self.templates.lookup_index(resource)?;
        let mut state = self.lock();
        Ok(state
            .resources
            .get_mut(resource)
            .and_then(|rs| rs.clients.remove(client_id))
            .is_some())
    }

    /// The unexpired grants of `resource` at `now`, by client id.
    pub fn grants(&self, resource: &str, now: Millis) -> Vec<(String, ClientGrant)> {
        let state = self.lock();
        state
            .resources
            .get(resource)
            .map(|rs| {
                rs.clients
                    .iter()
                    .filter(|(_, c)| c.expires_at > now)
                    .map(|(id, c)| (id.clone(), *c))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Sum of the unexpired grants of `resource` at `now`.
    pub fn sum_granted(&self, resource: &str, now: Millis) -> f64 {
        self.grants(resource, now).iter().map(|(_, c)| c.has).sum()
    }

    /// Drops every lease expired at `now` (requests do this lazily per resource).
    pub fn expire(&self, now: Millis) {
        let mut state = self.lock();
        for rs in state.resources.values_mut() {
            rs.expire(now);
        }
    }

    /// Checks the safety invariants at `now`: no grant negative or non-finite; for pooled
    /// algorithms the sum of unexpired grants is at most capacity; for `static` each grant is
    /// at most capacity.
    pub fn check_invariants(&self, now: Millis) -> Result<(), LeaseError> {
        let state = self.lock();
        for (resource, rs) in &state.resources {
            let t = &self.templates.templates()[rs.template];
            let violated = |detail: String| LeaseError::InvariantViolated {
                resource: resource.clone(),
                detail,
            };
            let mut sum = 0.0;
            for (id, c) in rs.clients.iter().filter(|(_, c)| c.expires_at > now) {
                if !c.has.is_finite() || c.has < 0.0 {
                    return Err(violated(format!("client `{id}` holds {}", c.has)));
                }
                if t.algorithm.kind == AlgorithmKind::Static && c.has > t.capacity {
                    return Err(violated(format!(
                        "client `{id}` holds {} > per-client capacity {}",
                        c.has, t.capacity
                    )));
                }
                sum += c.has;
            }
            if t.algorithm.kind.shares_capacity() && sum > t.capacity {
                return Err(violated(format!(
                    "unexpired grants sum to {sum} > capacity {}",
                    t.capacity
                )));
            }
        }
        Ok(())
    }
}

/// Why a time past [`MAX_NOW_MS`] is refused.
#[cold]
fn past_2106(now: Millis) -> String {
    format!(
        "{now} lies past 2106 (MAX_NOW_MS, {MAX_NOW_MS}): milliseconds since the Unix epoch are \
         due (microseconds?)"
    )
}

/// Clamps a target to what the safety rules allow for this client right now.
fn clamp_grant(
    rs: &ResourceState,
    kind: AlgorithmKind,
    capacity: f64,
    client: &str,
    target: f64,
) -> f64 {
    let target = if target.is_finite() && target > 0.0 {
        target
    } else {
        0.0
    };
    match kind {
        AlgorithmKind::None => target,
        AlgorithmKind::Static => target.min(capacity),
        _ => {
            let others = rs.others(client);
            let mut grant = target.min((capacity - others).max(0.0));
            // The invariant is checked by summing in map order; walk down past rounding.
            for _ in 0..64 {
                let sum = rs.sum_with(client, grant);
                if grant <= 0.0 || sum <= capacity {
                    return grant;
                }
                grant = next_down((grant - (sum - capacity)).max(0.0));
            }
            // Not reached in practice (each pass removes the whole excess); stay safe anyway.
            0.0
        }
    }
}
