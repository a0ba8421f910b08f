//! The admission engine: `engine*` functions over numeric engine handles (see `handles`).

use std::sync::{Arc, LazyLock, Mutex};

use napi_derive::napi;
use velvet_rope::{Config, Engine, Outcome, TicketError};
use velvet_rope_cluster::Syncer;

use crate::errors::{invalid, to_js, CONFIG};
use crate::handles::Handles;
use crate::hot::RoomAdmit;

/// The engines JavaScript holds.
pub(crate) static ENGINES: LazyLock<Handles<Engine>> = LazyLock::new(|| Handles::new("engine"));
use crate::or_now;

/// A decision as JavaScript sees it (`null` from `engineAdmit` stands for the steady admit:
/// admitted, nothing to set).
#[napi(object)]
pub struct DecisionObject {
    /// `"admit"`, `"queue"` or `"reject"`.
    pub outcome: String,
    /// Whether the request may reach the origin.
    pub admitted: bool,
    /// A complete `Set-Cookie` header value to send, or null.
    pub set_cookie: Option<String>,
    /// Queue: live waiters ahead plus one.
    pub position: Option<f64>,
    /// Queue: estimated seconds until admission.
    pub estimated_wait_secs: Option<f64>,
    /// Queue: seconds until the page should refresh. Reject: seconds until a retry.
    pub retry_after_secs: Option<f64>,
    /// Queue: live waiters in the room.
    pub queue_length: Option<f64>,
    /// Why the incoming ticket was refused (`"bad_tag"`, ...), or null.
    pub ticket_error: Option<String>,
    /// The index of the room's rule that matched the request, or null.
    pub rule: Option<u32>,
    /// A `bypass` rule matched: pass the request untouched (no cookie, nothing counted).
    pub bypassed: Option<bool>,
    /// A dry run or a `count_only` rule passed the request: `"queue"` or `"reject"`, what the
    /// outcome would have been (`outcome` is `"admit"`), or null.
    pub would_have: Option<String>,
    /// The room takes tickets from the `Velvet-Rope-Ticket` header: send `ticket` back in
    /// that response header beside `Set-Cookie`.
    pub ticket_header: Option<bool>,
    /// The new ticket `setCookie` carries (its value), or null.
    pub ticket: Option<String>,
    /// Refused (`outcome` `"reject"`, a 400 page): the request might belong to two rooms or
    /// more that would each decide it (a target that reads several ways, hosts that
    /// disagree, a host that is not one, or none).
    pub ambiguous: Option<bool>,
}

fn to_object(d: velvet_rope::Decision) -> DecisionObject {
    DecisionObject {
        outcome: d.outcome.as_str().to_owned(),
        admitted: d.outcome == Outcome::Admit,
        position: d.position.map(|v| v as f64),
        estimated_wait_secs: d.estimated_wait_secs.map(|v| v as f64),
        retry_after_secs: d.retry_after_secs.map(|v| v as f64),
        queue_length: d.queue_length.map(|v| v as f64),
        ticket_error: d.ticket_error.map(|e| e.as_str().to_owned()),
        rule: d.rule.map(u32::from),
        bypassed: Some(d.bypassed),
        would_have: d.would_have.map(|o| o.as_str().to_owned()),
        ticket_header: Some(d.ticket_header),
        ticket: d.ticket().map(str::to_owned),
        ambiguous: Some(d.ambiguous),
        set_cookie: d.set_cookie,
    }
}

fn from_object(d: &DecisionObject) -> napi::Result<velvet_rope::Decision, &'static str> {
    let outcome = match d.outcome.as_str() {
        "admit" => Outcome::Admit,
        "queue" => Outcome::Queue,
        "reject" => Outcome::Reject,
        other => return Err(invalid(format!("unknown outcome `{other}`"))),
    };
    let count = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0).map(|x| x as u64);
    Ok(velvet_rope::Decision {
        outcome,
        set_cookie: d.set_cookie.clone(),
        position: count(d.position),
        estimated_wait_secs: count(d.estimated_wait_secs),
        retry_after_secs: count(d.retry_after_secs),
        queue_length: count(d.queue_length),
        ticket_error: d
            .ticket_error
            .as_deref()
            .and_then(|name| TicketError::ALL.into_iter().find(|e| e.as_str() == name)),
        rule: d.rule.and_then(|r| u16::try_from(r).ok()),
        bypassed: d.bypassed == Some(true),
        would_have: match d.would_have.as_deref() {
            Some("queue") => Some(Outcome::Queue),
            Some("reject") => Some(Outcome::Reject),
            _ => None,
        },
        ticket_header: d.ticket_header == Some(true),
        ambiguous: d.ambiguous == Some(true) && outcome == Outcome::Reject,
    })
}

/// The steady answer (admitted, nothing to set) is `None`: JavaScript shares one object for it.
pub(crate) fn steady_or_object(d: velvet_rope::Decision) -> Option<DecisionObject> {
    let steady = d.outcome == Outcome::Admit
        && d.set_cookie.is_none()
        && d.ticket_error.is_none()
        && !d.bypassed
        && d.rule.is_none()
        && d.would_have.is_none();
    if steady {
        None
    } else {
        Some(to_object(d))
    }
}

fn load(config: &str, is_path: bool) -> napi::Result<Config, &'static str> {
    if is_path {
        Config::from_path(config)
    } else {
        Config::from_text(config)
    }
    .map_err(to_js)
}

/// An engine from configuration text (or, with `isPath`, a file), its counters in memory it
/// owns or, with `sharedMemory`, in that state file (shared by every process opening it).
#[napi]
pub fn engine_new(
    config: String,
    is_path: bool,
    shared_memory: Option<String>,
    now_ms: Option<f64>,
) -> napi::Result<u32, &'static str> {
    let config = load(&config, is_path)?;
    let now = or_now(now_ms)?;
    let engine = match shared_memory {
        Some(path) => Engine::open_state_file(config, path, now),
        None => Engine::new(config, now),
    }
    .map_err(to_js)?;
    let handle = ENGINES.insert(engine)?;
    if let Err(e) = start_sync(handle) {
        ENGINES.remove(handle);
        return Err(e);
    }
    Ok(handle)
}

/// The cluster tier's sync loops (threads), by engine handle: one per engine whose
/// configuration has a `[cluster]` table.
static SYNCERS: Mutex<Vec<(u32, Syncer)>> = Mutex::new(Vec::new());

/// Starts `handle`'s sync loop if its configuration has a `[cluster]` table.
fn start_sync(handle: u32) -> napi::Result<(), &'static str> {
    let engine = ENGINES.get(handle)?;
    let sync = Syncer::from_engine(engine)
        .map_err(|e| napi::Error::new(CONFIG, format!("cluster: {e}")))?;
    if let Some(sync) = sync {
        SYNCERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((handle, sync));
    }
    Ok(())
}

/// Takes `handle`'s sync loop out of the table, if it has one.
fn take_sync(handle: u32) -> Option<Syncer> {
    let mut syncers = SYNCERS.lock().unwrap_or_else(|p| p.into_inner());
    let i = syncers.iter().position(|(h, _)| *h == handle)?;
    Some(syncers.swap_remove(i).1)
}

/// Stops `handle`'s sync loop, if any, without waiting for it on this (JavaScript's) thread.
fn stop_sync(handle: u32) {
    if let Some(sync) = take_sync(handle) {
        // Dropping joins the loop's thread (at most one store timeout): elsewhere.
        let _ = std::thread::Builder::new()
            .name("velvet-rope-sync-stop".into())
            .spawn(move || drop(sync));
    }
}

/// Replaces `handle`'s sync loop after a reload changed its `[cluster]` table: the new loop
/// starts only once the old one has stopped (joined, on a thread of its own: JavaScript's
/// never waits), so the two never sync at once (an old round answered by the old store after
/// the new loop's first grant would overwrite it with the old store's). A bad store URL is
/// refused here, at once.
fn restart_sync(handle: u32) -> napi::Result<(), &'static str> {
    let engine = ENGINES.get(handle)?;
    if let Some(c) = engine.config().cluster.as_ref() {
        velvet_rope_cluster::store_for(c)
            .map_err(|e| napi::Error::new(CONFIG, format!("cluster: {e}")))?;
    }
    let old = take_sync(handle);
    let started = std::thread::Builder::new()
        .name("velvet-rope-sync-restart".into())
        .spawn(move || {
            drop(old);
            let Ok(Some(sync)) = Syncer::from_engine(engine.clone()) else {
                return;
            };
            let mut syncers = SYNCERS.lock().unwrap_or_else(|p| p.into_inner());
            // Unless the engine was freed (or its loop replaced again) meanwhile.
            let current = ENGINES.get(handle).is_ok_and(|e| Arc::ptr_eq(&e, &engine));
            if current && !syncers.iter().any(|(h, _)| *h == handle) {
                syncers.push((handle, sync));
            } else {
                drop(syncers);
                drop(sync);
            }
        });
    started
        .map(|_| ())
        .map_err(|e| napi::Error::new(CONFIG, format!("cluster: no thread for the sync loop: {e}")))
}

/// Frees an engine's handle (the package calls it when the `Engine` object is collected).
#[napi]
pub fn engine_free(engine: u32) {
    stop_sync(engine);
    ENGINES.remove(engine);
}

/// Frees the engines environment `owner` still holds (it is torn down), and stops their sync
/// loops.
pub(crate) fn free_environment(owner: u64) {
    for handle in ENGINES.take_owned_by(owner) {
        stop_sync(handle);
    }
}

/// The cluster tier's sync loop of an engine, as `engineClusterStatus` reports it.
#[napi(object)]
pub struct ClusterStatusObject {
    /// Syncs of a room that got an answer.
    pub syncs: f64,
    /// Syncs of a room that failed.
    pub failures: f64,
    /// Runs of failures (each logged once to standard error).
    pub outages: f64,
    /// Whether the store does not answer now (decisions go on, on the last allowances, then
    /// on the fallback share).
    pub in_outage: bool,
    /// Hosts holding a lease at the last answer.
    pub hosts: f64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// The engine's sync loop's status (null without a `[cluster]` table).
#[napi]
pub fn engine_cluster_status(
    engine: u32,
) -> napi::Result<Option<ClusterStatusObject>, &'static str> {
    ENGINES.get(engine)?;
    let syncers = SYNCERS.lock().unwrap_or_else(|p| p.into_inner());
    Ok(syncers.iter().find(|(h, _)| *h == engine).map(|(_, s)| {
        let st = s.status();
        ClusterStatusObject {
            syncs: st.syncs as f64,
            failures: st.failures as f64,
            outages: st.outages as f64,
            in_outage: st.in_outage,
            hosts: st.hosts as f64,
            last_error: st.last_error,
        }
    }))
}

/// Decides one request given the ticket cookie's value itself.
#[napi]
pub fn engine_admit_ticket(
    engine: u32,
    room: String,
    ticket: Option<String>,
    now_ms: Option<f64>,
) -> napi::Result<Option<DecisionObject>, &'static str> {
    let now = or_now(now_ms)?;
    let d = ENGINES
        .with(engine, |e| e.admit_ticket(&room, ticket.as_deref(), now))?
        .map_err(to_js)?;
    Ok(steady_or_object(d))
}

/// Ends the session of the visitor holding `ticket` (a ticket value of `room`, as in its
/// cookie): its seat is freed at once and the ticket refused from then on. The outcome's
/// name: `"revoked"`, `"already_revoked"`, `"no_session"`, `"not_enabled"`, or
/// `"refused_full"`, `"refused_unsent"`, `"refused_busy"` (nothing
/// changed). It may wait (up to 20 ms) for another process's revocation lock.
#[napi]
pub fn engine_revoke(
    engine: u32,
    room: String,
    ticket: String,
    now_ms: Option<f64>,
) -> napi::Result<String, &'static str> {
    let now = or_now(now_ms)?;
    // The engine itself, not a guard of its slot: the call may wait.
    let e = ENGINES.get(engine)?;
    let r = e.revoke(&room, &latin1(&ticket), now).map_err(to_js)?;
    Ok(r.as_str().to_owned())
}

/// Ends the session of a request's visitor, for a response carrying
/// `Velvet-Rope-Command: revoke`: the ticket is `issued` (the one the request's decision
/// handed out) if given, else the room's ticket in `cookie` (the request's whole `Cookie`
/// header), else, in a room with `ticket_header = true`, `ticket_header` (its
/// `Velvet-Rope-Ticket` header). The outcome's name, as `engineRevoke` answers.
#[napi]
pub fn engine_revoke_request(
    engine: u32,
    room: String,
    cookie: Option<String>,
    ticket_header: Option<String>,
    issued: Option<String>,
    now_ms: Option<f64>,
) -> napi::Result<String, &'static str> {
    let now = or_now(now_ms)?;
    let cookie = cookie.as_deref().map(latin1);
    let header = ticket_header.as_deref().map(latin1);
    let issued = issued.as_deref().filter(|t| !t.is_empty()).map(latin1);
    let e = ENGINES.get(engine)?;
    let r = e
        .revoke_request(
            room.as_bytes(),
            cookie.as_deref(),
            header.as_deref(),
            issued.as_deref(),
            now,
        )
        .map_err(to_js)?;
    Ok(r.as_str().to_owned())
}

/// The `Set-Cookie` value that clears `room`'s ticket cookie (`Max-Age=0`, the cookie's own
/// path and attributes): for the response that ended the visitor's session.
#[napi]
pub fn engine_clear_cookie(engine: u32, room: String) -> napi::Result<String, &'static str> {
    ENGINES
        .with(engine, |e| e.clear_cookie(&room))?
        .map_err(to_js)
}

/// Whether a `Velvet-Rope-Command` response header value asks for a revocation: `revoke`, any
/// case, among comma-separated commands.
#[napi]
pub fn is_revoke_command(value: String) -> bool {
    velvet_rope::is_revoke_command(&latin1(&value))
}

/// Folds the counters into a new snapshot; never waits. False (and nothing done) for a
/// handle no longer live (a timer that outlived its engine).
#[napi]
pub fn engine_tick(engine: u32, now_ms: Option<f64>) -> napi::Result<bool, &'static str> {
    let now = or_now(now_ms)?;
    Ok(ENGINES.with(engine, |e| e.tick(now)).is_ok())
}

/// Replaces the configuration; a bad one throws and the running one keeps serving.
#[napi]
pub fn engine_reload(engine: u32, config: String, is_path: bool) -> napi::Result<(), &'static str> {
    let config = load(&config, is_path)?;
    let e = ENGINES.get(engine)?;
    let cluster_changed = e.config().cluster != config.cluster;
    e.reload(config).map_err(to_js)?;
    if cluster_changed {
        // A new store or new sync settings: a new loop, once the old one has stopped.
        restart_sync(engine)?;
    }
    Ok(())
}

/// A room's figures as last published by a tick.
#[napi(object)]
pub struct RoomStatsObject {
    /// Visitors counted in the session window.
    pub active_users: f64,
    /// Admissions booked to the current minute (bucket).
    pub admitted_this_minute: f64,
    /// Admissions since the counters were made.
    pub admitted_total: f64,
    /// Live waiters.
    pub queue_length: f64,
    /// FIFO: the arrival bucket up to which waiters may enter.
    pub frontier: f64,
    /// Slots free until the next tick.
    pub free_slots: f64,
    /// Recent admissions per second.
    pub admission_rate: f64,
    /// Bytes of counters the room takes.
    pub memory_bytes: f64,
    /// Refused tickets: bad_encoding, unknown_key, bad_tag, wrong_room, expired, from_future,
    /// revoked.
    pub ticket_rejections: TicketRejectionsObject,
}

/// Refused tickets by reason.
#[napi(object)]
pub struct TicketRejectionsObject {
    /// Not base64url, wrong length, unknown format.
    pub bad_encoding: f64,
    /// Sealed with a key the configuration does not have.
    pub unknown_key: f64,
    /// Altered or forged.
    pub bad_tag: f64,
    /// Another room's.
    pub wrong_room: f64,
    /// Past its expiry.
    pub expired: f64,
    /// Stamped in the future beyond the tolerated skew.
    pub from_future: f64,
    /// Revoked by the origin (`Velvet-Rope-Command: revoke`).
    pub revoked: f64,
}

/// A room's figures.
#[napi]
pub fn engine_stats(engine: u32, room: String) -> napi::Result<RoomStatsObject, &'static str> {
    let s = ENGINES.with(engine, |e| e.stats(&room))?.map_err(to_js)?;
    let r = s.ticket_rejections;
    Ok(RoomStatsObject {
        active_users: s.active_users as f64,
        admitted_this_minute: s.admitted_this_minute as f64,
        admitted_total: s.admitted_total as f64,
        queue_length: s.queue_length as f64,
        frontier: s.frontier as f64,
        free_slots: s.free_slots as f64,
        admission_rate: s.admission_rate,
        memory_bytes: s.memory_bytes as f64,
        ticket_rejections: TicketRejectionsObject {
            bad_encoding: r.bad_encoding as f64,
            unknown_key: r.unknown_key as f64,
            bad_tag: r.bad_tag as f64,
            wrong_room: r.wrong_room as f64,
            expired: r.expired as f64,
            from_future: r.from_future as f64,
            revoked: r.revoked as f64,
        },
    })
}

/// Every room's figures as one JSON text.
#[napi]
pub fn engine_stats_json(engine: u32) -> napi::Result<String, &'static str> {
    ENGINES.with(engine, |e| e.stats_json())
}

/// One event the engine logged for the host's log.
#[napi(object)]
pub struct EventObject {
    /// Its name (`queueing_started`, ...).
    pub event: String,
    /// When (ms since the Unix epoch).
    pub at_ms: f64,
    /// The room it happened to, if any.
    pub room: Option<String>,
    /// Names of its further fields.
    pub field_names: Vec<String>,
    /// Their values, in the order of `field_names`.
    pub field_values: Vec<String>,
    /// A refusal or an outage: worth a warning.
    pub warning: bool,
    /// The event as one line of JSON.
    pub line: String,
}

/// Every event logged since the last call, oldest first.
#[napi]
pub fn engine_drain_events(engine: u32) -> napi::Result<Vec<EventObject>, &'static str> {
    ENGINES.with(engine, |e| events_to_js(e.drain_events()))
}

/// Events as `drainEvents` gives them to JavaScript.
pub(crate) fn events_to_js(events: Vec<velvet_rope::admission::Event>) -> Vec<EventObject> {
    events
        .into_iter()
        .map(|ev| {
            let (field_names, field_values) = ev
                .fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .unzip();
            EventObject {
                event: ev.kind.as_str().to_owned(),
                at_ms: ev.at as f64,
                room: ev.room.clone(),
                field_names,
                field_values,
                warning: ev.kind.is_warning(),
                line: ev.to_json(),
            }
        })
        .collect()
}

/// Every room's metrics in the OpenMetrics text format, ending with `# EOF`.
#[napi]
pub fn engine_metrics_text(engine: u32) -> napi::Result<String, &'static str> {
    ENGINES.with(engine, |e| e.metrics_text())
}

/// One sample of a metric family.
#[napi(object)]
pub struct MetricSampleObject {
    /// The sample's name (the family's, with `_total`, `_bucket`, `_count` or `_sum`).
    pub name: String,
    /// Its label names, `room` first (in order: `engine.metrics()` makes them an object).
    pub label_names: Vec<String>,
    /// Its label values, in the order of `label_names`.
    pub label_values: Vec<String>,
    /// Its value.
    pub value: f64,
}

/// One metric family: name, type, help and every room's samples.
#[napi(object)]
pub struct MetricFamilyObject {
    /// The family's name (a counter's without `_total`).
    pub name: String,
    /// `"gauge"`, `"counter"` or `"histogram"`.
    #[napi(js_name = "type")]
    pub kind: String,
    /// What it measures.
    pub help: String,
    /// The samples.
    pub samples: Vec<MetricSampleObject>,
}

/// Every room's metrics, family by family.
#[napi]
pub fn engine_metrics(engine: u32) -> napi::Result<Vec<MetricFamilyObject>, &'static str> {
    ENGINES.with(engine, |e| families_to_js(e.metrics()))
}

/// Metric families as JavaScript takes them.
pub(crate) fn families_to_js(families: Vec<velvet_rope::MetricFamily>) -> Vec<MetricFamilyObject> {
    families
        .into_iter()
        .map(|f| MetricFamilyObject {
            name: f.name.to_owned(),
            kind: f.kind.as_str().to_owned(),
            help: f.help.to_owned(),
            samples: f
                .samples
                .into_iter()
                .map(|s| {
                    let (label_names, label_values) =
                        s.labels.into_iter().map(|(k, v)| (k.to_owned(), v)).unzip();
                    MetricSampleObject {
                        name: format!("{}{}", f.name, s.suffix),
                        label_names,
                        label_values,
                        value: s.value,
                    }
                })
                .collect(),
        })
        .collect()
}

/// A waiting page: status, content type, body, and every header to send.
#[napi(object)]
pub struct PageObject {
    /// HTTP status.
    pub status: u32,
    /// `Content-Type` value.
    pub content_type: String,
    /// The body (HTML or JSON).
    pub body: String,
    /// `[name, value]` pairs, `Set-Cookie` included.
    pub headers: Vec<Vec<String>>,
}

/// The page for a queue or reject decision (`null` for admit). `accept` is the request's
/// `Accept` header, `accept_language` its `Accept-Language` (it picks the built-in page's
/// language in a room with `accept_language = true`); `now_ms` (default: the system clock)
/// picks the event in force and its countdown.
#[napi]
pub fn engine_render_page(
    engine: u32,
    room: String,
    decision: DecisionObject,
    accept: Option<String>,
    accept_language: Option<String>,
    now_ms: Option<f64>,
    ticket: Option<String>,
) -> napi::Result<Option<PageObject>, &'static str> {
    let d = from_object(&decision)?;
    let request = velvet_rope::PageRequest {
        accept: accept.as_deref(),
        accept_language: accept_language.as_deref(),
        now_ms: or_now(now_ms)?,
        ticket: ticket.as_deref().map(str::trim),
    };
    let page = ENGINES
        .with(engine, |e| e.render_page_for(&room, &d, &request))?
        .map_err(to_js)?;
    Ok(page.map(|p| PageObject {
        headers: p
            .headers(d.set_cookie.as_deref())
            .into_iter()
            .chain(
                d.ticket()
                    .filter(|_| d.ticket_header)
                    .map(|t| (velvet_rope::request::TICKET_HEADER, t.to_owned())),
            )
            .map(|(k, v)| vec![k.to_owned(), v])
            .collect(),
        status: u32::from(p.status),
        content_type: p.content_type.to_owned(),
        body: p.body,
    }))
}

/// Names of the configured rooms.
#[napi]
pub fn engine_rooms(engine: u32) -> napi::Result<Vec<String>, &'static str> {
    ENGINES.with(engine, |e| e.rooms())
}

/// The name of a room's ticket cookie.
#[napi]
pub fn engine_cookie_name(engine: u32, room: String) -> napi::Result<String, &'static str> {
    ENGINES
        .with(engine, |e| e.config())?
        .rooms
        .iter()
        .find(|r| r.name == room)
        .map(|r| r.cookie_name())
        .ok_or_else(|| to_js(velvet_rope::Error::UnknownRoom(room)))
}

/// Bytes of a state file for this configuration.
#[napi]
pub fn shared_memory_size(config: String, is_path: bool) -> napi::Result<f64, &'static str> {
    Ok(Engine::shared_region_size(&load(&config, is_path)?) as f64)
}

/// A room of an engine, as a `Room`'s admit function holds it (see `hot::RoomAdmit`): the
/// engine (kept alive while the function is) and the room's name, so the admit path takes
/// neither a handle nor a string where it took both (reading the name out of V8 cost about
/// 220 instructions per call, looking the handle up about 130).
pub(crate) struct RoomRef {
    /// The engine deciding for the room.
    pub(crate) engine: Arc<Engine>,
    /// The room's name (looked up in the engine's current snapshot on every call, so a reload
    /// that drops the room makes its calls fail as an unknown room).
    pub(crate) name: Box<[u8]>,
}

/// The admit function of `room` of `engine` (`UnknownRoomError` if the engine has no such
/// room now): `admit(cookie?, nowMs?)`, `engineAdmit` for that room.
#[napi(ts_return_type = "(cookie?: string | null, nowMs?: number) => DecisionObject | undefined")]
pub fn engine_room(engine: u32, room: String) -> napi::Result<RoomAdmit, &'static str> {
    let engine = ENGINES.get(engine)?;
    if !engine.rooms().contains(&room) {
        return Err(to_js(velvet_rope::Error::UnknownRoom(room)));
    }
    Ok(RoomAdmit(RoomRef {
        engine,
        name: room.into_bytes().into_boxed_slice(),
    }))
}

/// A request as the middleware hands it over: method, target as received (`req.url`), Node's
/// `rawHeaders` (names and values alternating, one byte per character), and the address the
/// connection came from.
#[napi(object)]
pub struct RequestObject {
    /// The method.
    pub method: String,
    /// The request-target as received.
    pub target: String,
    /// `req.rawHeaders`.
    pub raw_headers: Vec<String>,
    /// `req.socket.remoteAddress`, or null.
    pub peer: Option<String>,
}

/// A decided request: its room, and the room's decision.
#[napi(object)]
pub struct PlacedObject {
    /// The room that decided it.
    pub room: String,
    /// The decision.
    pub decision: DecisionObject,
}

/// A string Node made from bytes, one character per byte, as those bytes (characters above
/// U+00FF, which no HTTP parser makes, as UTF-8).
fn latin1(s: &str) -> std::borrow::Cow<'_, [u8]> {
    if s.is_ascii() {
        return std::borrow::Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        match u8::try_from(u32::from(c)) {
            Ok(b) => out.push(b),
            Err(_) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Decides a whole request: in `room` when given, else in the room the configuration's
/// `routes` place it in; the room's rules first. `null` when no route takes it.
#[napi]
pub fn engine_decide_request(
    engine: u32,
    request: RequestObject,
    room: Option<String>,
    now_ms: Option<f64>,
) -> napi::Result<Option<PlacedObject>, &'static str> {
    let now = or_now(now_ms)?;
    let engine = ENGINES.get(engine)?;
    with_request(&engine, &request, |req| {
        Ok(match room {
            Some(room) => {
                let d = engine
                    .decide_request_in(room.as_bytes(), req, now)
                    .map_err(to_js)?;
                Some(PlacedObject {
                    room,
                    decision: to_object(d),
                })
            }
            None => engine.decide_request(req, now).map(|r| PlacedObject {
                room: r.room.as_str().to_owned(),
                decision: to_object(r.decision),
            }),
        })
    })
}

/// The room `engineDecideRequest` without a room would decide the request in, deciding
/// nothing: `null` when no route takes it, or when it would be refused as one several
/// rooms might govern.
#[napi]
pub fn engine_room_for_request(
    engine: u32,
    request: RequestObject,
    now_ms: Option<f64>,
) -> napi::Result<Option<String>, &'static str> {
    let now = or_now(now_ms)?;
    let engine = ENGINES.get(engine)?;
    Ok(with_request(&engine, &request, |req| {
        engine
            .room_for_request(req, now)
            .map(|r| r.as_str().to_owned())
    }))
}

/// Calls `f` with `request` as the core reads it: its method, target and headers as
/// Latin-1 bytes, its client the peer or, behind `settings.trusted_proxies`, the
/// `X-Forwarded-For` address the proxies vouch for.
fn with_request<T>(
    engine: &velvet_rope::Engine,
    request: &RequestObject,
    f: impl FnOnce(&velvet_rope::request::Request<'_>) -> T,
) -> T {
    let raw: Vec<std::borrow::Cow<'_, [u8]>> =
        request.raw_headers.iter().map(|h| latin1(h)).collect();
    let headers: Vec<(&[u8], &[u8])> = raw
        .chunks_exact(2)
        .map(|pair| (&*pair[0], &*pair[1]))
        .collect();
    let client = match request.peer.as_deref() {
        None | Some("") => None,
        // Not an address: the client is unknown.
        Some(p) => velvet_rope::request::parse_peer(p).and_then(|addr| {
            engine.client_address(
                addr,
                headers
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(b"x-forwarded-for"))
                    .map(|(_, v)| *v),
            )
        }),
    };
    let method = latin1(&request.method);
    let target = latin1(&request.target);
    f(&velvet_rope::request::Request {
        method: &method,
        target: &target,
        host: None,
        headers: &headers,
        client,
    })
}

/// Whether any room accepts origin commands (`enabled_origin_commands`).
#[napi]
pub fn engine_accepts_origin_commands(engine: u32) -> napi::Result<bool, &'static str> {
    ENGINES.with(engine, |e| e.accepts_origin_commands())
}

/// Whether any room has `routes`.
#[napi]
pub fn engine_has_routes(engine: u32) -> napi::Result<bool, &'static str> {
    ENGINES.with(engine, |e| e.has_routes())
}

/// Whether deciding in `room` reads more of a request than its `Cookie` header (rules, or
/// header tickets).
#[napi]
pub fn engine_room_reads_request(engine: u32, room: String) -> napi::Result<bool, &'static str> {
    ENGINES
        .with(engine, |e| e.room_reads_request(room.as_bytes()))?
        .map_err(to_js)
}
