//! `Engine`, `Decision`, `RoomStats`, `Page`: the admission side.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use velvet_rope::fork_safe_lock::ForkSafeLock;
use velvet_rope::{Config, Outcome};
use velvet_rope_cluster::Syncer;

use crate::errors::to_py;
use crate::time::or_now;

/// A configuration as Python hands it in: text (TOML or JSON) as `str`, or a file as
/// `os.PathLike` (a `str` is always text; variants are tried in order).
#[derive(FromPyObject)]
pub(crate) enum ConfigArg {
    /// TOML or JSON text.
    Text(String),
    /// `pathlib.Path` or any `os.PathLike`.
    Path(PathBuf),
}

impl ConfigArg {
    fn load(self) -> PyResult<Config> {
        match self {
            ConfigArg::Path(p) => Config::from_path(p),
            ConfigArg::Text(t) => Config::from_text(&t),
        }
        .map_err(to_py)
    }
}

/// Metric families as `Engine::metrics` hands them to Python: `(name, type, help, samples)`,
/// each sample `(name, labels, value)`.
pub(crate) type MetricsList = Vec<(
    &'static str,
    &'static str,
    &'static str,
    Vec<(String, Vec<(&'static str, String)>, f64)>,
)>;

/// Metric families as Python takes them.
pub(crate) fn families_to_py(families: Vec<velvet_rope::MetricFamily>) -> MetricsList {
    families
        .into_iter()
        .map(|f| {
            let samples = f
                .samples
                .into_iter()
                .map(|s| (format!("{}{}", f.name, s.suffix), s.labels, s.value))
                .collect();
            (f.name, f.kind.as_str(), f.help, samples)
        })
        .collect()
}

/// The admission engine: one per process (or one per state file shared by processes).
#[pyclass(frozen, module = "velvet_rope._velvet_rope")]
pub struct Engine {
    inner: Arc<velvet_rope::Engine>,
    /// The cluster tier's sync loop (a thread), with a `[cluster]` table. Behind a lock a
    /// forked child takes over (the ticker may hold it at the fork).
    sync: ForkSafeLock<Option<Syncer>>,
    /// The process that started the sync loop: another one is a forked child.
    sync_pid: AtomicU32,
    /// The steady answer (admit, nothing to set), shared: the common case allocates nothing.
    /// This one while no room accepts origin commands (see `steady_admit`), the next while
    /// one does.
    admit_steady: Py<Decision>,
    admit_steady_watched: Py<Decision>,
}

/// A header value as servers hold it: `str` or `bytes`.
fn header_bytes<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    // `bytes` first: ASGI's headers are.
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    if let Ok(s) = v.cast::<PyString>() {
        return s.to_str().map(str::as_bytes);
    }
    Err(pyo3::exceptions::PyTypeError::new_err(
        "a header value must be str or bytes",
    ))
}

/// A header's `(name, value)`: ASGI's pairs are tuples; a list of two (from JSON, say) does
/// as well.
fn header_pair<'py>(pair: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let not_a_pair =
        || pyo3::exceptions::PyTypeError::new_err("each header must be a (name, value) pair");
    if let Ok(t) = pair.cast::<PyTuple>() {
        if t.len() == 2 {
            return Ok((t.get_item(0)?, t.get_item(1)?));
        }
        return Err(not_a_pair());
    }
    // (`bytes` and `str` are sequences too, but never a pair.)
    if pair.is_instance_of::<PyBytes>() || pair.is_instance_of::<PyString>() {
        return Err(not_a_pair());
    }
    let items: Vec<Bound<'py, PyAny>> = pair.extract().map_err(|_| not_a_pair())?;
    let [name, value]: [Bound<'py, PyAny>; 2] = items.try_into().map_err(|_| not_a_pair())?;
    Ok((name, value))
}

/// A header value as text; one that is not UTF-8 counts as absent.
fn header_text<'a>(v: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
    Ok(v.map(header_bytes)
        .transpose()?
        .and_then(|b| std::str::from_utf8(b).ok()))
}

/// The cluster tier's sync loop for `engine`, if its configuration has a `[cluster]` table.
fn sync_loop(engine: &Arc<velvet_rope::Engine>) -> PyResult<Option<Syncer>> {
    Syncer::from_engine(engine.clone())
        .map_err(|e| crate::errors::ConfigError::new_err(format!("cluster: {e}")))
}

impl Engine {
    /// Calls `f` with a request as the core reads it: `method`, `target` and `headers` as
    /// `decide_request` takes them (only the `Cookie` headers when `cookies_only`), its client
    /// `peer` or, when that is one of `settings.trusted_proxies`, the `X-Forwarded-For`
    /// address the proxies vouch for (none when `cookies_only`).
    fn with_request<T>(
        &self,
        method: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        peer: Option<&str>,
        cookies_only: bool,
        f: impl FnOnce(&velvet_rope::request::Request<'_>) -> PyResult<T>,
    ) -> PyResult<T> {
        let mut held = Vec::new();
        for pair in headers.try_iter()? {
            let (name, value) = header_pair(&pair?)?;
            if cookies_only && !header_bytes(&name)?.eq_ignore_ascii_case(b"cookie") {
                continue;
            }
            held.push((name, value));
        }
        let mut pairs = Vec::with_capacity(held.len());
        for (name, value) in &held {
            pairs.push((header_bytes(name)?, header_bytes(value)?));
        }
        let client = match peer {
            _ if cookies_only => None,
            None => None,
            Some(p) => match velvet_rope::request::parse_peer(p) {
                // Not an address (a Unix socket's path, say): the client is unknown.
                None => None,
                Some(addr) => {
                    let forwarded = pairs
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(b"x-forwarded-for"))
                        .map(|(_, v)| *v)
                        .collect::<Vec<_>>();
                    self.inner.client_address(addr, forwarded.into_iter())
                }
            },
        };
        f(&velvet_rope::request::Request {
            method: header_bytes(method)?,
            target: header_bytes(target)?,
            host: None,
            headers: &pairs,
            client,
        })
    }

    /// In a process forked after the engine was built (a pre-fork server's worker), the sync
    /// loop's thread is the parent's: start one here (the ticker calls this every tick). The
    /// parent's is dropped without touching its thread.
    fn restart_sync_after_fork(&self) {
        let me = std::process::id();
        if self.sync_pid.load(Ordering::Relaxed) == me {
            return;
        }
        let Some(mut sync) = self.sync.try_lock() else {
            return;
        };
        if sync.as_ref().is_some_and(|s| !s.running_here()) {
            if let Ok(fresh) = Syncer::from_engine(self.inner.clone()) {
                *sync = fresh;
            }
        }
        self.sync_pid.store(me, Ordering::Relaxed);
    }

    fn wrap(&self, py: Python<'_>, d: velvet_rope::Decision) -> PyResult<Py<Decision>> {
        // The steady answer carries nothing else (a bypass, a matched rule or a dry run's
        // verdict would be lost in the shared object).
        let steady = d.outcome == Outcome::Admit
            && d.set_cookie.is_none()
            && d.ticket_error.is_none()
            && !d.bypassed
            && d.rule.is_none()
            && d.would_have.is_none();
        if steady {
            let shared = if self.inner.accepts_origin_commands() {
                &self.admit_steady_watched
            } else {
                &self.admit_steady
            };
            return Ok(shared.clone_ref(py));
        }
        Py::new(py, Decision::from(d))
    }
}

#[pymethods]
impl Engine {
    /// An engine from a configuration: TOML or JSON text (`str`), or a file (`os.PathLike`).
    /// With `shared_memory`, its counters live in that state file, mapped by every process
    /// that opens it (the workers of gunicorn or uvicorn share exact counts; counts survive
    /// restarts). `now_ms` defaults to the system clock.
    #[new]
    #[pyo3(signature = (config, *, shared_memory = None, now_ms = None))]
    fn new(
        py: Python<'_>,
        config: ConfigArg,
        shared_memory: Option<PathBuf>,
        now_ms: Option<u64>,
    ) -> PyResult<Self> {
        let config = config.load()?;
        let now = or_now(now_ms)?;
        // Building may map a file and wait (bounded) for another process's first tick.
        let inner = py
            .detach(|| match shared_memory {
                Some(path) => velvet_rope::Engine::open_state_file(config, path, now),
                None => velvet_rope::Engine::new(config, now),
            })
            .map_err(to_py)?;
        let inner = Arc::new(inner);
        Ok(Self {
            sync: ForkSafeLock::new(sync_loop(&inner)?),
            sync_pid: AtomicU32::new(std::process::id()),
            inner,
            admit_steady: Py::new(py, Decision::from(velvet_rope::Decision::admit_steady()))?,
            admit_steady_watched: Py::new(
                py,
                Decision::from(velvet_rope::Decision::admit_steady()),
            )?,
        })
    }

    /// Decides one request. `cookie` is the request's whole `Cookie` header (`str` or `bytes`),
    /// or `None`. Never blocks.
    #[pyo3(signature = (room, cookie = None, now_ms = None))]
    fn admit(
        &self,
        py: Python<'_>,
        room: &str,
        cookie: Option<&Bound<'_, PyAny>>,
        now_ms: Option<u64>,
    ) -> PyResult<Py<Decision>> {
        let header = cookie.map(header_bytes).transpose()?;
        let d = self
            .inner
            .admit_header_bytes(room.as_bytes(), header, or_now(now_ms)?)
            .map_err(to_py)?;
        self.wrap(py, d)
    }

    /// Decides a whole request: in `room` when given (chosen by the application's own
    /// routing), else in the room the configuration's `routes` place it in; the room's rules
    /// first. `target`: the request-target (or path, with `?query`); `headers`: every request
    /// header as `(name, value)` pairs (`str` or `bytes`; ASGI's `scope["headers"]` as is);
    /// `peer`: the address the connection came from, believed as the client unless it is one
    /// of `settings.trusted_proxies` (then `X-Forwarded-For` says who the client is).
    /// Returns `(room, decision)`, or `None` when no room's routes take the request (it
    /// passes untouched). A `decision.bypassed` request passes untouched too.
    #[pyo3(signature = (method, target, headers, *, peer = None, room = None, now_ms = None))]
    #[allow(clippy::too_many_arguments)]
    fn decide_request(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        peer: Option<&str>,
        room: Option<&Bound<'_, PyString>>,
        now_ms: Option<u64>,
    ) -> PyResult<Option<(Py<PyString>, Py<Decision>)>> {
        let now = or_now(now_ms)?;
        // A named room without rules or header tickets reads only the `Cookie` headers: the
        // others are not even converted (the middleware's common case).
        let cookies_only = match room {
            Some(r) => !self
                .inner
                .room_reads_request(r.to_str()?.as_bytes())
                .map_err(to_py)?,
            None => false,
        };
        let decided =
            self.with_request(method, target, headers, peer, cookies_only, |request| {
                Ok(match room {
                    Some(room) => {
                        let d = self
                            .inner
                            .decide_request_in(room.to_str()?.as_bytes(), request, now)
                            .map_err(to_py)?;
                        Some((room.clone().unbind(), d))
                    }
                    None => self
                        .inner
                        .decide_request(request, now)
                        .map(|r| (PyString::intern(py, r.room.as_str()).unbind(), r.decision)),
                })
            })?;
        match decided {
            None => Ok(None),
            Some((name, d)) => Ok(Some((name, self.wrap(py, d)?))),
        }
    }

    /// The room `decide_request` without `room` would decide the request in, deciding
    /// nothing (arguments as `decide_request`'s): its name, or `None` when no room's routes
    /// take the request or when it would be refused as one several rooms might govern
    /// (`Decision.ambiguous`). For a front door that must know whether that room decided the
    /// request already (a middleware of a named room ahead of one of the routes).
    #[pyo3(signature = (method, target, headers, *, peer = None, now_ms = None))]
    fn room_for_request(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        peer: Option<&str>,
        now_ms: Option<u64>,
    ) -> PyResult<Option<Py<PyString>>> {
        let now = or_now(now_ms)?;
        self.with_request(method, target, headers, peer, false, |request| {
            Ok(self
                .inner
                .room_for_request(request, now)
                .map(|r| PyString::intern(py, r.as_str()).unbind()))
        })
    }

    /// `admit(room, cookie)` for a room that reads only the `Cookie` header; `None`, having
    /// decided nothing, for a room with rules or header tickets (call `decide_request` with
    /// the whole request then). What the middleware calls first: one call, as `admit` was.
    #[pyo3(signature = (room, cookie = None, now_ms = None))]
    fn admit_plain(
        &self,
        py: Python<'_>,
        room: &str,
        cookie: Option<&Bound<'_, PyAny>>,
        now_ms: Option<u64>,
    ) -> PyResult<Option<Py<Decision>>> {
        let header = cookie.map(header_bytes).transpose()?;
        let d = self
            .inner
            .admit_plain_header_bytes(room.as_bytes(), header, or_now(now_ms)?)
            .map_err(to_py)?;
        d.map(|d| self.wrap(py, d)).transpose()
    }

    /// `admit_plain` given every request header as `(name, value)` pairs (`str` or `bytes`;
    /// ASGI's `scope["headers"]` as is) instead of the `Cookie` header: the `Cookie` lines
    /// among them are read (several joined with `; `, as HTTP/2 may split them), the others
    /// only looked at. What the ASGI middleware calls first, so that finding the `Cookie`
    /// header costs it no Python.
    #[pyo3(signature = (room, headers, now_ms = None))]
    fn admit_plain_headers<'py>(
        &self,
        py: Python<'py>,
        room: &str,
        headers: &Bound<'py, PyAny>,
        now_ms: Option<u64>,
    ) -> PyResult<Option<Py<Decision>>> {
        let now = or_now(now_ms)?;
        // The first `Cookie` line, and any more (rare: only those allocate).
        let mut first: Option<Bound<'py, PyAny>> = None;
        let mut more: Vec<Bound<'py, PyAny>> = Vec::new();
        let mut take = |pair: &Bound<'py, PyAny>| -> PyResult<()> {
            // ASGI's common case (a tuple whose name is `bytes`) with as few calls into Python
            // as can be: the value is taken from the `Cookie` pairs only.
            // (Exact types are a pointer compare; a subclass's check is a call into Python.)
            let value = match pair.cast_exact::<PyTuple>() {
                Ok(t) if t.len() == 2 => {
                    let name = t.get_borrowed_item(0)?;
                    let is_cookie = match name.cast_exact::<PyBytes>() {
                        Ok(b) => b.as_bytes().eq_ignore_ascii_case(b"cookie"),
                        Err(_) => header_bytes(&name)?.eq_ignore_ascii_case(b"cookie"),
                    };
                    if !is_cookie {
                        return Ok(());
                    }
                    t.get_item(1)?
                }
                _ => {
                    let (name, value) = header_pair(pair)?;
                    if !header_bytes(&name)?.eq_ignore_ascii_case(b"cookie") {
                        return Ok(());
                    }
                    value
                }
            };
            match first {
                None => first = Some(value),
                Some(_) => more.push(value),
            }
            Ok(())
        };
        // A list (ASGI's) is read in place; any other iterable through an iterator.
        if let Ok(list) = headers.cast::<PyList>() {
            for pair in list.iter() {
                take(&pair)?;
            }
        } else {
            for pair in headers.try_iter()? {
                take(&pair?)?;
            }
        }
        let joined;
        let header = match &first {
            None => None,
            Some(one) if more.is_empty() => Some(header_bytes(one)?),
            Some(one) => {
                let mut all = header_bytes(one)?.to_vec();
                for c in &more {
                    all.extend_from_slice(b"; ");
                    all.extend_from_slice(header_bytes(c)?);
                }
                joined = all;
                Some(joined.as_slice())
            }
        };
        let d = self
            .inner
            .admit_plain_header_bytes(room.as_bytes(), header, now)
            .map_err(to_py)?;
        d.map(|d| self.wrap(py, d)).transpose()
    }

    /// Whether deciding in `room` reads more of a request than its `Cookie` header (the room
    /// has rules, or takes header tickets): such a room needs `decide_request` with the whole
    /// request (`admit_plain` answers `None` for it).
    fn room_reads_request(&self, room: &str) -> PyResult<bool> {
        self.inner
            .room_reads_request(room.as_bytes())
            .map_err(to_py)
    }

    /// Whether any room accepts origin commands (`enabled_origin_commands`): the middleware
    /// looks at responses for `Velvet-Rope-Command` only then.
    #[getter]
    fn accepts_origin_commands(&self) -> bool {
        self.inner.accepts_origin_commands()
    }

    /// The decision object returned, shared, for a visitor admitted with nothing to add to
    /// the response (no ticket to set, no rule matched, no dry run's verdict) while no room
    /// accepts origin commands: a front door that finds `decision is engine.steady_admit`
    /// passes the request on as it is, reading none of its fields. (While a room accepts
    /// origin commands, such a visitor gets another shared object, equal in every field.)
    #[getter]
    fn steady_admit(&self, py: Python<'_>) -> Py<Decision> {
        self.admit_steady.clone_ref(py)
    }

    /// Whether any room has `routes` (else `decide_request` without `room` places nothing).
    #[getter]
    fn has_routes(&self) -> bool {
        self.inner.has_routes()
    }

    /// Decides one request given the ticket cookie's value itself (no header parsing).
    #[pyo3(signature = (room, ticket = None, now_ms = None))]
    fn admit_ticket(
        &self,
        py: Python<'_>,
        room: &str,
        ticket: Option<&str>,
        now_ms: Option<u64>,
    ) -> PyResult<Py<Decision>> {
        let d = self
            .inner
            .admit_ticket(room, ticket, or_now(now_ms)?)
            .map_err(to_py)?;
        self.wrap(py, d)
    }

    /// Ends the session of the visitor holding `ticket` (the value of `room`'s ticket, as in
    /// its cookie; `str` or `bytes`): its seat is freed at once and the ticket refused from
    /// then on. The outcome's name: `"revoked"`, `"already_revoked"`, `"no_session"`,
    /// `"not_enabled"` (the room's `enabled_origin_commands` lack `"revoke"`), or
    /// `"refused_full"`, `"refused_unsent"`, `"refused_busy"`
    /// (nothing changed). Raises `UnknownRoomError` for a room not configured.
    #[pyo3(signature = (room, ticket, now_ms = None))]
    fn revoke(
        &self,
        py: Python<'_>,
        room: &str,
        ticket: &Bound<'_, PyAny>,
        now_ms: Option<u64>,
    ) -> PyResult<&'static str> {
        let ticket = header_bytes(ticket)?;
        let now = or_now(now_ms)?;
        // It may wait (bounded) for another process's revocation lock, and ticks the room.
        py.detach(|| self.inner.revoke(room, ticket, now))
            .map(|r| r.as_str())
            .map_err(to_py)
    }

    /// Ends the session of a request's visitor, for a response carrying
    /// `Velvet-Rope-Command: revoke` (what the middleware calls): the ticket is `issued` (the
    /// one the request's own decision handed out, `Decision.ticket`) if given, else the room's
    /// ticket in `cookie_header` (the request's whole `Cookie` header), else, in a room with
    /// `ticket_header = true`, `ticket_header` (its `Velvet-Rope-Ticket` header). Each is
    /// `str`, `bytes` or `None`. The outcome's name, as `revoke` answers.
    #[pyo3(signature = (room, cookie_header = None, ticket_header = None, issued = None, now_ms = None))]
    fn revoke_request(
        &self,
        py: Python<'_>,
        room: &str,
        cookie_header: Option<&Bound<'_, PyAny>>,
        ticket_header: Option<&Bound<'_, PyAny>>,
        issued: Option<&Bound<'_, PyAny>>,
        now_ms: Option<u64>,
    ) -> PyResult<&'static str> {
        let cookie = cookie_header.map(header_bytes).transpose()?;
        let header = ticket_header.map(header_bytes).transpose()?;
        let issued = issued
            .map(header_bytes)
            .transpose()?
            .filter(|t| !t.is_empty());
        let now = or_now(now_ms)?;
        py.detach(|| {
            self.inner
                .revoke_request(room.as_bytes(), cookie, header, issued, now)
        })
        .map(|r| r.as_str())
        .map_err(to_py)
    }

    /// The `Set-Cookie` value that clears `room`'s ticket cookie (`Max-Age=0`, the cookie's
    /// own path and attributes): for the response that ended the visitor's session.
    fn clear_cookie(&self, room: &str) -> PyResult<String> {
        self.inner.clear_cookie(room).map_err(to_py)
    }

    /// Folds the counters into a new snapshot. Call about once a second (the middleware does);
    /// it never waits.
    #[pyo3(signature = (now_ms = None))]
    fn tick(&self, py: Python<'_>, now_ms: Option<u64>) -> PyResult<()> {
        let now = or_now(now_ms)?;
        py.detach(|| self.inner.tick(now));
        self.restart_sync_after_fork();
        Ok(())
    }

    /// Replaces the configuration; a bad one raises and the running one keeps serving.
    fn reload(&self, py: Python<'_>, config: ConfigArg) -> PyResult<()> {
        let config = config.load()?;
        let cluster_changed = self.inner.config().cluster != config.cluster;
        py.detach(|| self.inner.reload(config)).map_err(to_py)?;
        if cluster_changed {
            // A new store or new sync settings: the old loop stops (joined) first.
            let old = self.sync.lock().take();
            py.detach(move || drop(old));
            *self.sync.lock() = sync_loop(&self.inner)?;
            self.sync_pid.store(std::process::id(), Ordering::Relaxed);
        }
        Ok(())
    }

    /// The cluster tier's sync loop in this process (with a `[cluster]` table; `None`
    /// without): syncs that got an answer, failures, outages (each logged once to standard
    /// error), whether the store is unreachable now, and the hosts it last saw.
    fn cluster_status(&self) -> Option<ClusterStatus> {
        let sync = self.sync.lock();
        sync.as_ref().map(|s| {
            let st = s.status();
            ClusterStatus {
                syncs: st.syncs,
                failures: st.failures,
                outages: st.outages,
                in_outage: st.in_outage,
                hosts: st.hosts,
                last_error: st.last_error,
            }
        })
    }

    /// A room's figures as last published by a tick.
    fn stats(&self, room: &str) -> PyResult<RoomStats> {
        self.inner.stats(room).map(RoomStats::from).map_err(to_py)
    }

    /// Every room's figures as one JSON object (what a status endpoint serves).
    fn stats_json(&self) -> String {
        self.inner.stats_json()
    }

    /// Every event logged since the last call (a room's queue starting or stopping, a
    /// scheduled event's phases, a reload done or refused, the cluster store lost or found),
    /// oldest first, each a dict: `event` (its name), `at_ms`, `room` (or None), `fields` (a
    /// dict of strings), `warning` (a refusal or an outage) and `line` (the event as one line
    /// of JSON). The middleware's tickers log them to the `velvet_rope.events` logger.
    fn drain_events<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        events_to_py(py, self.inner.drain_events())
    }

    /// Events dropped because nobody drained them in time (the log keeps 256).
    fn events_dropped(&self) -> u64 {
        self.inner.events_dropped()
    }

    /// Every room's metrics in the OpenMetrics text format (what Prometheus scrapes; serve
    /// it as `application/openmetrics-text; version=1.0.0; charset=utf-8`), ending with
    /// `# EOF`.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    /// Every room's metrics, family by family: `(name, type, help, samples)`, each sample
    /// `(name, labels, value)` with its labels as `(name, value)` pairs (`room` first).
    /// `velvet_rope.prometheus` turns them into `prometheus_client` families.
    fn metrics(&self) -> MetricsList {
        families_to_py(self.inner.metrics())
    }

    /// The waiting page for a queue or reject decision (`None` for admit). `accept` is the
    /// request's `Accept` header; `accept_language` its `Accept-Language` (in a room with
    /// `accept_language = true` it picks the built-in page's language); `now_ms` (default:
    /// the system clock) picks the event in force and its countdown.
    /// `ticket`: the `Velvet-Rope-Ticket` header the request brought (a room taking header
    /// tickets echoes it in its JSON when the decision did not change it).
    #[pyo3(signature = (room, decision, accept = None, accept_language = None, now_ms = None, ticket = None))]
    fn render_page(
        &self,
        room: &str,
        decision: &Decision,
        accept: Option<&Bound<'_, PyAny>>,
        accept_language: Option<&Bound<'_, PyAny>>,
        now_ms: Option<u64>,
        ticket: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Page>> {
        let request = velvet_rope::PageRequest {
            accept: header_text(accept)?,
            accept_language: header_text(accept_language)?,
            now_ms: or_now(now_ms)?,
            ticket: header_text(ticket)?.map(str::trim),
        };
        let page = self
            .inner
            .render_page_for(room, &decision.inner, &request)
            .map_err(to_py)?;
        Ok(page.map(|p| {
            let mut page = Page::new(p, decision.inner.set_cookie.as_deref());
            if let Some(t) = decision
                .inner
                .ticket()
                .filter(|_| decision.inner.ticket_header)
            {
                page.headers
                    .push((velvet_rope::request::TICKET_HEADER, t.to_owned()));
            }
            page
        }))
    }

    /// Names of the configured rooms.
    #[getter]
    fn rooms(&self) -> Vec<String> {
        self.inner.rooms()
    }

    /// The name of a room's ticket cookie.
    fn cookie_name(&self, room: &str) -> PyResult<String> {
        self.inner
            .config()
            .rooms
            .iter()
            .find(|r| r.name == room)
            .map(|r| r.cookie_name())
            .ok_or_else(|| to_py(velvet_rope::Error::UnknownRoom(room.to_owned())))
    }

    fn __repr__(&self) -> String {
        format!("Engine(rooms={:?})", self.inner.rooms())
    }
}

/// Whether a `Velvet-Rope-Command` response header value (`str` or `bytes`) asks for a
/// revocation: `revoke`, any case, among comma-separated commands.
#[pyfunction]
pub(crate) fn is_revoke_command(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(velvet_rope::is_revoke_command(header_bytes(value)?))
}

/// Bytes of a state file for this configuration (what `Engine(shared_memory=...)` creates).
#[pyfunction]
pub(crate) fn shared_memory_size(config: ConfigArg) -> PyResult<usize> {
    Ok(velvet_rope::Engine::shared_region_size(&config.load()?))
}

/// The engine's answer for one request.
#[pyclass(frozen, module = "velvet_rope._velvet_rope")]
pub struct Decision {
    inner: velvet_rope::Decision,
}

impl From<velvet_rope::Decision> for Decision {
    fn from(inner: velvet_rope::Decision) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl Decision {
    /// `"admit"`, `"queue"` or `"reject"`.
    #[getter]
    fn outcome(&self) -> &'static str {
        self.inner.outcome.as_str()
    }

    /// Whether the request may reach the origin.
    #[getter]
    fn admitted(&self) -> bool {
        self.inner.outcome == Outcome::Admit
    }

    /// A complete `Set-Cookie` header value to send, or `None`.
    #[getter]
    fn set_cookie(&self) -> Option<&str> {
        self.inner.set_cookie.as_deref()
    }

    /// Queue: live waiters ahead plus one.
    #[getter]
    fn position(&self) -> Option<u64> {
        self.inner.position
    }

    /// Queue: estimated seconds until admission.
    #[getter]
    fn estimated_wait_secs(&self) -> Option<u64> {
        self.inner.estimated_wait_secs
    }

    /// Queue: seconds until the page should refresh. Reject: seconds until a retry.
    #[getter]
    fn retry_after_secs(&self) -> Option<u64> {
        self.inner.retry_after_secs
    }

    /// Queue: live waiters in the room.
    #[getter]
    fn queue_length(&self) -> Option<u64> {
        self.inner.queue_length
    }

    /// Why the incoming ticket was refused (`"bad_tag"`, ...), if it was.
    #[getter]
    fn ticket_error(&self) -> Option<&'static str> {
        self.inner.ticket_error.map(|e| e.as_str())
    }

    /// The index of the room's rule that matched the request, if any.
    #[getter]
    fn rule(&self) -> Option<u16> {
        self.inner.rule
    }

    /// A `bypass` rule matched: pass the request untouched (no cookie, nothing counted).
    #[getter]
    fn bypassed(&self) -> bool {
        self.inner.bypassed
    }

    /// A dry run or a `count_only` rule passed the request: `"queue"` or `"reject"`, what
    /// the outcome would have been (`outcome` is `"admit"`).
    #[getter]
    fn would_have(&self) -> Option<&'static str> {
        self.inner.would_have.map(|o| o.as_str())
    }

    /// The room takes tickets from the `Velvet-Rope-Ticket` header: send `ticket` back in
    /// that response header beside `Set-Cookie`.
    #[getter]
    fn ticket_header(&self) -> bool {
        self.inner.ticket_header
    }

    /// The new ticket `set_cookie` carries (its value), if any.
    #[getter]
    fn ticket(&self) -> Option<&str> {
        self.inner.ticket()
    }

    /// Refused (`outcome` `"reject"`, a 400 page): the request might belong to two rooms or
    /// more that would each decide it (a target that reads several ways, hosts that
    /// disagree, a host that is not one, or none).
    #[getter]
    fn ambiguous(&self) -> bool {
        self.inner.ambiguous
    }

    fn __repr__(&self) -> String {
        let position = self
            .inner
            .position
            .map_or_else(|| "None".to_owned(), |p| p.to_string());
        let error = self
            .inner
            .ticket_error
            .map_or_else(|| "None".to_owned(), |e| format!("'{e}'"));
        format!(
            "Decision(outcome='{}', position={position}, set_cookie={}, ticket_error={error})",
            self.inner.outcome.as_str(),
            if self.inner.set_cookie.is_some() {
                "'...'"
            } else {
                "None"
            },
        )
    }
}

/// A room's figures.
#[pyclass(frozen, get_all, module = "velvet_rope._velvet_rope")]
pub struct RoomStats {
    /// Visitors counted in the session window.
    active_users: u64,
    /// Admissions booked to the current minute (bucket).
    admitted_this_minute: u64,
    /// Admissions since the counters were made.
    admitted_total: u64,
    /// Live waiters.
    queue_length: u64,
    /// FIFO: the arrival bucket up to which waiters may enter.
    frontier: u64,
    /// Slots free until the next tick.
    free_slots: u64,
    /// Recent admissions per second.
    admission_rate: f64,
    /// Bytes of counters the room takes.
    memory_bytes: usize,
    /// Refused tickets by reason.
    ticket_rejections: std::collections::BTreeMap<&'static str, u64>,
}

impl From<velvet_rope::RoomStats> for RoomStats {
    fn from(s: velvet_rope::RoomStats) -> Self {
        let r = s.ticket_rejections;
        Self {
            active_users: s.active_users,
            admitted_this_minute: s.admitted_this_minute,
            admitted_total: s.admitted_total,
            queue_length: s.queue_length,
            frontier: s.frontier,
            free_slots: s.free_slots,
            admission_rate: s.admission_rate,
            memory_bytes: s.memory_bytes,
            ticket_rejections: r.by_reason().into_iter().collect(),
        }
    }
}

#[pymethods]
impl RoomStats {
    fn __repr__(&self) -> String {
        format!(
            "RoomStats(active_users={}, admitted_this_minute={}, queue_length={}, free_slots={})",
            self.active_users, self.admitted_this_minute, self.queue_length, self.free_slots
        )
    }
}

/// A response to send instead of the origin's.
#[pyclass(frozen, get_all, module = "velvet_rope._velvet_rope")]
pub struct Page {
    /// HTTP status.
    status: u16,
    /// `Content-Type` value.
    content_type: &'static str,
    /// The body (HTML or JSON).
    body: String,
    /// Every header to send: `(name, value)` pairs, `Set-Cookie` included.
    headers: Vec<(&'static str, String)>,
}

impl Page {
    fn new(p: velvet_rope::Page, set_cookie: Option<&str>) -> Self {
        Self {
            headers: p.headers(set_cookie),
            status: p.status,
            content_type: p.content_type,
            body: p.body,
        }
    }
}

#[pymethods]
impl Page {
    fn __repr__(&self) -> String {
        format!(
            "Page(status={}, content_type={:?})",
            self.status, self.content_type
        )
    }
}

/// The cluster tier's sync loop, as `Engine.cluster_status()` reports it.
#[pyclass(frozen, get_all, module = "velvet_rope._velvet_rope")]
pub struct ClusterStatus {
    /// Syncs of a room that got an answer.
    syncs: u64,
    /// Syncs of a room that failed.
    failures: u64,
    /// Runs of failures (each logged once).
    outages: u64,
    /// Whether the store does not answer now (decisions go on, on the last allowances, then
    /// on the fallback share).
    in_outage: bool,
    /// Hosts holding a lease at the last answer.
    hosts: u64,
    /// The last failure, if any.
    last_error: Option<String>,
}

#[pymethods]
impl ClusterStatus {
    fn __repr__(&self) -> String {
        format!(
            "ClusterStatus(syncs={}, failures={}, outages={}, in_outage={}, hosts={})",
            self.syncs,
            self.failures,
            self.outages,
            if self.in_outage { "True" } else { "False" },
            self.hosts
        )
    }
}

/// Events as the dicts `Engine.drain_events` and `Coordinator.drain_events` return.
pub(crate) fn events_to_py(
    py: Python<'_>,
    events: Vec<velvet_rope::admission::Event>,
) -> PyResult<Vec<Bound<'_, pyo3::types::PyDict>>> {
    events
        .into_iter()
        .map(|e| {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("event", e.kind.as_str())?;
            d.set_item("at_ms", e.at)?;
            d.set_item("room", e.room.as_deref())?;
            let fields = pyo3::types::PyDict::new(py);
            for (k, v) in &e.fields {
                fields.set_item(*k, v)?;
            }
            d.set_item("fields", fields)?;
            d.set_item("warning", e.kind.is_warning())?;
            d.set_item("line", e.to_json())?;
            Ok(d)
        })
        .collect()
}
