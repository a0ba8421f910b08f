//! One request through the filter: the decision on the request's headers, the waiting page as
//! a local reply, and the ticket's `Set-Cookie` on the upstream's response when an admitted
//! visitor needs a new one.
//!
//! Envoy's route picked the room (the filter's configuration names it). A room without rules
//! or header tickets is decided on the `Cookie` header alone, as it always was. A room with
//! them ([`FilterConfig::room_reads_request`]) is decided on the whole request, as core's
//! [`Request`]: `:method`, `:path` (as Envoy normalised it for its own routing) as the target,
//! `:authority` as the host, the other headers as they are (lent by Envoy, not copied), and
//! the client's address as Envoy established it (`source.address`: the peer, or behind
//! trusted proxies the address `X-Forwarded-For` vouches for, per the connection manager's
//! `xff_num_trusted_hops` or original-IP-detection extension). Then a `bypass` rule lets the
//! request through untouched; a dry run or `count_only` rule lets it through with its ticket;
//! a `reject` rule answers 403 (problem details for JSON clients). A room taking header tickets
//! also sends a new ticket back in `Velvet-Rope-Ticket`, on the upstream's response and on the
//! waiting page.
//!
//! Per-stream state is one small object, recycled through a per-worker pool: a worker's
//! steady state allocates nothing per request.
//!
//! The request's headers are read once, all of them (`get_headers`: Envoy lends their names
//! and values, which are read in place), and searched here. Asking Envoy for one header by
//! name (`get_header`) costs it about 3,200 instructions per request (callgrind, Envoy 1.40:
//! the name is copied to a lower-case string and the lookup builds the header map's index),
//! against about 760 for counting and lending all of them. The `Cookie` header is read in
//! place when the request has one `cookie` line, and joined with `; ` into the worker's
//! reusable buffer when it has several (an HTTP/1 client may send several lines; Envoy joins
//! HTTP/2's split cookies itself).
//!
//! Origin commands: the upstream's `Velvet-Rope-Command` never reaches the client, as a
//! response header or as a response trailer: the first of the stream's velvet-rope filters to
//! see the response (the last in the chain: responses pass filters in reverse) takes it off.
//! `revoke` ends the session of a request the room admitted (not one a `bypass` rule passed),
//! in a room whose `enabled_origin_commands` allow it: its ticket is refused from then on,
//! its seat freed, and the response clears the room's cookie instead of carrying the
//! filter's own ticket (a `revoke` in a trailer comes after the headers went out: the session
//! ends, but the cookie stays with the client until its ticket is refused). The ticket
//! revoked is the one the request's decision issued, else the one it brought: the request's
//! `Cookie` and `Velvet-Rope-Ticket` headers are kept from the request (in such rooms only,
//! in buffers the stream keeps for reuse).
//!
//! Several rooms may decide one request (one filter each). The filter that takes a `revoke`
//! off records it in the stream's dynamic metadata ([`METADATA_NAMESPACE`],
//! [`METADATA_COMMAND`]), which every filter of the stream reads, whatever its place in the
//! chain; a filter whose response carries no command follows the one recorded. So each room
//! that decided the request ends its session, and the header still never passes the first
//! filter. Looking the record up is a call into Envoy, made only when it can find something:
//! the worker counts its streams that have one (`RECORDED`; a stream stays on its worker),
//! so a response on a worker with none (the steady state) costs a thread-local load.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};

use smallvec::SmallVec;
use velvet_rope::request::{Request, TICKET_HEADER};
use velvet_rope::{Clock, CoarseSystemClock, Decision, Outcome, PageRequest, Revocation};

use crate::abi::{
    self, EnvoyBuffer, EnvoyHeader, FilterEnvoyPtr, Host, ModuleBuffer, ModuleHeader,
    ATTRIBUTE_SOURCE_ADDRESS, CONTINUE, METADATA_DYNAMIC, REQUEST_HEADER, RESPONSE_HEADER,
    RESPONSE_TRAILER, STOP_ITERATION,
};
use crate::filter_config::FilterConfig;

/// A stream's state.
pub struct Stream {
    config: *const FilterConfig,
    /// The ticket to set on the response (an admitted visitor whose ticket is new or
    /// renewed).
    set_cookie: Option<String>,
    /// The same ticket for the `Velvet-Rope-Ticket` response header, in a room taking header
    /// tickets (kept apart so that the other rooms' streams stay as small as they were).
    ticket: Option<String>,
    /// The room admitted the request (not passed by a `bypass` rule): an origin's `revoke`
    /// in the response is followed.
    admitted: bool,
    /// The request's `Cookie` lines (joined) and `Velvet-Rope-Ticket` header, kept for an
    /// origin's `revoke` in a room that accepts it.
    cookie: Kept,
    ticket_header: Kept,
    /// This filter followed the origin's `revoke` (on the response's headers, or trailers): it
    /// does not again.
    followed: bool,
    /// This filter recorded the origin's `revoke` in the stream's dynamic metadata, and
    /// counts in [`RECORDED`] until the stream is destroyed.
    recorded: bool,
}

/// Bytes of a request header kept for the response, in a buffer the stream keeps across
/// reuses (a worker's steady state allocates nothing for them).
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    present: bool,
}

/// A kept buffer larger than this is not kept for the next stream.
const KEPT_MAX: usize = 16 * 1024;

impl Kept {
    fn clear(&mut self) {
        self.present = false;
        if self.bytes.capacity() > KEPT_MAX {
            self.bytes = Vec::new();
        } else {
            self.bytes.clear();
        }
    }

    /// Keeps `values` joined with `; ` (nothing when there are none).
    fn keep<'v>(&mut self, values: impl Iterator<Item = &'v [u8]>) {
        self.clear();
        for (i, v) in values.enumerate() {
            if i > 0 {
                self.bytes.extend_from_slice(b"; ");
            }
            self.bytes.extend_from_slice(v);
            self.present = true;
        }
    }

    fn get(&self) -> Option<&[u8]> {
        self.present.then_some(&self.bytes[..])
    }
}

/// `Velvet-Rope-Command` as Envoy keeps header names (lower case).
const COMMAND_HEADER_LOWER: &[u8] = b"velvet-rope-command";

/// `Trailer` as Envoy keeps header names (lower case): the response's announcement of its
/// trailers' names.
const TRAILER_HEADER_LOWER: &[u8] = b"trailer";

/// `Velvet-Rope-Ticket` as Envoy keeps header names (lower case).
const TICKET_HEADER_LOWER: &[u8] = b"velvet-rope-ticket";

/// The namespace of the stream's dynamic metadata in which a filter records the origin's
/// command for the stream's other filters (an access log can show it:
/// `%DYNAMIC_METADATA(velvet_rope:origin_command)%`).
pub const METADATA_NAMESPACE: &[u8] = b"velvet_rope";

/// The key of the recorded command in [`METADATA_NAMESPACE`].
pub const METADATA_COMMAND: &[u8] = b"origin_command";

/// The recorded command's value when the origin asked for `revoke` (the only one recorded).
const RECORDED_REVOKE: &[u8] = b"revoke";

/// Streams kept for reuse, per worker thread.
const POOL_MAX: usize = 1024;

thread_local! {
    /// Boxed: each box is what Envoy holds while the stream lives, reused as it is.
    #[allow(clippy::vec_box)]
    static POOL: RefCell<Vec<Box<Stream>>> = const { RefCell::new(Vec::new()) };
    /// A worker's buffer for joining several `cookie` lines.
    static JOINED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// A worker's buffer for the headers of a request with more than [`ON_STACK`].
    static MANY: RefCell<Vec<EnvoyHeader>> = const { RefCell::new(Vec::new()) };
    /// The worker's live streams with the origin's `revoke` recorded in their dynamic metadata
    /// (one count per recording filter, until its stream is destroyed): while none, a filter
    /// does not look the record up. A stream's filters all run on its worker, and are all
    /// destroyed after the last of them saw the response.
    static RECORDED: Cell<usize> = const { Cell::new(0) };
}

/// Whether a stream of this worker may have the origin's `revoke` recorded (see
/// [`RECORDED`]); while the thread is torn down, assumed so.
#[inline]
fn any_recorded() -> bool {
    RECORDED.try_with(|n| n.get() > 0).unwrap_or(true)
}

/// Headers read into a buffer on the stack (a browser sends 10 to 20).
const ON_STACK: usize = 48;

impl Stream {
    /// A stream of `config`, from the worker's pool when it has one.
    pub fn take(config: *const FilterConfig) -> Box<Stream> {
        let reused = POOL
            .try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
            .ok()
            .flatten();
        match reused {
            Some(mut s) => {
                s.config = config;
                s.set_cookie = None;
                s.ticket = None;
                s.admitted = false;
                s.followed = false;
                s.recorded = false;
                s
            }
            None => Box::new(Stream {
                config,
                set_cookie: None,
                ticket: None,
                admitted: false,
                cookie: Kept::default(),
                ticket_header: Kept::default(),
                followed: false,
                recorded: false,
            }),
        }
    }

    /// Returns a finished stream to the worker's pool.
    pub fn give_back(mut stream: Box<Stream>) {
        if stream.recorded {
            let _ = RECORDED.try_with(|n| n.set(n.get().saturating_sub(1)));
        }
        stream.recorded = false;
        stream.followed = false;
        stream.set_cookie = None;
        stream.ticket = None;
        stream.admitted = false;
        stream.cookie.clear();
        stream.ticket_header.clear();
        let _ = POOL.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                if p.len() < POOL_MAX {
                    p.push(stream);
                }
            }
        });
    }

    /// The request's headers are in: decide.
    ///
    /// # Safety
    /// `stream` is this stream's live state and `filter` Envoy's live filter of it, and the
    /// stream's configuration outlives it (Envoy destroys configurations after their streams).
    /// The stream is not touched once the local reply is sent: Envoy may destroy it (and so
    /// return it to the pool) inside that call.
    pub unsafe fn on_request_headers(
        stream: *mut Stream,
        host: &Host,
        filter: FilterEnvoyPtr,
    ) -> u32 {
        // SAFETY: the stream is live, and the configuration outlives it (this function's
        // contract); the configuration is shared, never written.
        let config = unsafe { &*(*stream).config };
        let now = CoarseSystemClock.now_ms();
        let on_headers = |headers: &[EnvoyHeader]| {
            // SAFETY: this function's contract, and `headers` are the request's, lent by
            // Envoy for this hook.
            unsafe { decide(stream, config, host, filter, headers, now) }
        };
        // SAFETY: `filter` is Envoy's live filter (this function's contract).
        match unsafe { with_headers(host, filter, REQUEST_HEADER, on_headers) } {
            Some(status) => status,
            None => {
                // A failure to decide must not take the site down: the request passes.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    abi::log(
                        abi::LOG_ERROR,
                        "velvet-rope: Envoy did not lend a request's headers; such requests \
                         pass undecided",
                    )
                });
                CONTINUE
            }
        }
    }

    /// The upstream's response headers are in: take the origin's command off them (or find
    /// the `revoke` another filter of the stream took off) and follow it, then add the new or
    /// renewed ticket, if any (or, the session revoked, the cookie clearing it).
    ///
    /// # Safety
    /// `filter` is Envoy's live filter of this stream, and the stream's configuration outlives
    /// it.
    pub unsafe fn on_response_headers(&mut self, host: &Host, filter: FilterEnvoyPtr) -> u32 {
        let mut set_cookie = self.set_cookie.take();
        let mut ticket = self.ticket.take();
        // SAFETY: Envoy's live filter of a stream whose response headers are in (this
        // function's contract).
        if unsafe { self.revoke_asked(host, filter, RESPONSE_HEADER) } {
            self.followed = true;
            // SAFETY: the configuration outlives the stream (this function's contract).
            let config = unsafe { &*self.config };
            if let Some(clear) = self.revoke(config, set_cookie.as_deref()) {
                set_cookie = Some(clear);
                ticket = None;
            }
        }
        let add = |name: &[u8], value: &str| {
            // SAFETY: Envoy's live filter (this function's contract); the buffers live for
            // the call, which copies.
            unsafe {
                (host.add_header)(
                    filter,
                    RESPONSE_HEADER,
                    ModuleBuffer::of(name),
                    ModuleBuffer::of(value.as_bytes()),
                )
            };
        };
        if let Some(c) = &set_cookie {
            add(b"set-cookie", c);
        }
        if let Some(t) = ticket {
            add(TICKET_HEADER_LOWER, &t);
        }
        // Kept (moved back, not copied) for a `revoke` in the trailers: the ticket the
        // decision issued is the one to end.
        self.set_cookie = set_cookie;
        CONTINUE
    }

    /// The upstream's response trailers are in: take the origin's command off them (or find
    /// the `revoke` another filter of the stream took off) and follow it, unless this filter
    /// did on the headers. The headers went out: the cookie cannot be cleared, but the session
    /// ends all the same (its ticket refused from then on, its seat freed).
    ///
    /// # Safety
    /// `filter` is Envoy's live filter of this stream, and the stream's configuration outlives
    /// it.
    pub unsafe fn on_response_trailers(&mut self, host: &Host, filter: FilterEnvoyPtr) -> u32 {
        // SAFETY: Envoy's live filter of a stream whose response trailers are in (this
        // function's contract).
        if unsafe { self.revoke_asked(host, filter, RESPONSE_TRAILER) } {
            self.followed = true;
            // SAFETY: the configuration outlives the stream (this function's contract).
            let config = unsafe { &*self.config };
            // What the headers set (a new ticket) is with the client: it ends with the
            // session, refused from its next request on.
            let _ = self.revoke(config, self.set_cookie.as_deref());
        }
        CONTINUE
    }

    /// Takes the origin's command off the response's `which` (headers or trailers), and says
    /// whether this filter is to follow a `revoke` now: one in them (recorded for the stream's
    /// other filters) or one another filter recorded, in a request the room admitted, unless
    /// this filter already followed one.
    ///
    /// # Safety
    /// `filter` is Envoy's live filter of a stream whose response `which` are in.
    unsafe fn revoke_asked(&mut self, host: &Host, filter: FilterEnvoyPtr, which: u32) -> bool {
        // SAFETY: this function's contract.
        let asked = match unsafe { take_command(host, filter, which) } {
            Some(true) => {
                // SAFETY: this function's contract.
                unsafe { self.record_revoke(host, filter) };
                true
            }
            Some(false) => false,
            // The usual response: nothing to follow unless the room admitted the request and
            // another filter of the stream recorded a `revoke`, which is looked up only while
            // a stream of this worker has one.
            None => {
                self.admitted
                    && !self.followed
                    && any_recorded()
                    // SAFETY: this function's contract.
                    && unsafe { revoke_recorded(host, filter) }
            }
        };
        asked && self.admitted && !self.followed
    }

    /// Records the origin's `revoke` in the stream's dynamic metadata, where the stream's
    /// other filters find it.
    ///
    /// # Safety
    /// `filter` is Envoy's live filter of this stream, in a hook.
    unsafe fn record_revoke(&mut self, host: &Host, filter: FilterEnvoyPtr) {
        // SAFETY: Envoy's live filter (this function's contract); the buffers live for the
        // call, which copies them.
        unsafe {
            (host.set_dynamic_metadata_string)(
                filter,
                ModuleBuffer::of(METADATA_NAMESPACE),
                ModuleBuffer::of(METADATA_COMMAND),
                ModuleBuffer::of(RECORDED_REVOKE),
            )
        };
        if !self.recorded {
            self.recorded = true;
            let _ = RECORDED.try_with(|n| n.set(n.get() + 1));
        }
    }

    /// The origin answered `revoke`: ends the session with the ticket the request's decision
    /// issued (in `set_cookie`, the value the filter was to send), else the one the request
    /// brought. The `Set-Cookie` value clearing the room's cookie when the session is over
    /// (now or before); anything else is logged (at most a line a minute) and changes
    /// nothing.
    fn revoke(&self, config: &FilterConfig, set_cookie: Option<&str>) -> Option<String> {
        let issued = set_cookie.and_then(ticket_of);
        let outcome = config.engine.revoke_request(
            config.room.as_bytes(),
            self.cookie.get(),
            self.ticket_header.get(),
            issued.map(str::as_bytes),
            CoarseSystemClock.now_ms(),
        );
        let (level, why) = match outcome {
            Ok(r) if r.ended() => match config.engine.clear_cookie(&config.room) {
                Ok(clear) => return Some(clear),
                Err(e) => (abi::LOG_ERROR, e.to_string()),
            },
            // A visitor without a ticket of the room (one that expired, say): nothing to end.
            Ok(Revocation::NoSession) => return None,
            Ok(Revocation::NotEnabled) => (
                abi::LOG_INFO,
                "the room does not accept it (enabled_origin_commands): the session goes on"
                    .to_owned(),
            ),
            Ok(refused) => (
                abi::LOG_WARN,
                format!("refused ({}): the session goes on", refused.as_str()),
            ),
            Err(e) => (abi::LOG_ERROR, e.to_string()),
        };
        config.commands.log(level, || {
            format!(
                "velvet-rope: filter `{}`: room `{}`: the origin's revoke: {why}",
                config.name, config.room
            )
        });
        None
    }
}

/// The ticket in a `Set-Cookie` value: between the first `=` and the first `;` after it.
fn ticket_of(set_cookie: &str) -> Option<&str> {
    let (_, rest) = set_cookie.split_once('=')?;
    let ticket = rest.split(';').next().unwrap_or(rest);
    (!ticket.is_empty()).then_some(ticket)
}

/// Whether a filter of the stream recorded the origin's `revoke` in its dynamic metadata.
///
/// # Safety
/// `filter` is Envoy's live filter of a stream, in a hook.
unsafe fn revoke_recorded(host: &Host, filter: FilterEnvoyPtr) -> bool {
    let mut out = EnvoyBuffer::EMPTY;
    // SAFETY: Envoy's live filter (this function's contract); the names live for the call,
    // and `out` is written by it.
    let found = unsafe {
        (host.get_metadata_string)(
            filter,
            METADATA_DYNAMIC,
            ModuleBuffer::of(METADATA_NAMESPACE),
            ModuleBuffer::of(METADATA_COMMAND),
            &mut out,
        )
    };
    // SAFETY: when found, Envoy's buffer of the value, valid while the hook runs and the
    // metadata is not set.
    found && unsafe { out.bytes() } == RECORDED_REVOKE
}

/// Takes every `Velvet-Rope-Command` off the response's `which` (its headers, or its
/// trailers): `None` when they have none, else whether one asks for `revoke`. On the headers,
/// a `Trailer` header announcing the command as a trailer loses that name too (the trailer
/// itself is taken off when it comes).
///
/// # Safety
/// `filter` is Envoy's live filter of a stream whose response `which` are in.
unsafe fn take_command(host: &Host, filter: FilterEnvoyPtr, which: u32) -> Option<bool> {
    let scan = |headers: &[EnvoyHeader]| {
        let mut found = None;
        let mut announced = false;
        // One pass; names are compared only where the lengths are the same.
        for h in headers {
            if h.key.length == COMMAND_HEADER_LOWER.len() {
                // SAFETY: Envoy's buffers, valid while the hook that lent `headers` runs.
                let (key, value) = unsafe { (h.key.bytes(), h.value.bytes()) };
                if key.eq_ignore_ascii_case(COMMAND_HEADER_LOWER) {
                    let revoke = velvet_rope::is_revoke_command(value);
                    found = Some(found.unwrap_or(false) || revoke);
                }
            } else if which == RESPONSE_HEADER && h.key.length == TRAILER_HEADER_LOWER.len() {
                // SAFETY: as above.
                let (key, value) = unsafe { (h.key.bytes(), h.value.bytes()) };
                announced |= key.eq_ignore_ascii_case(TRAILER_HEADER_LOWER)
                    && names_command(value).next().is_some();
            }
        }
        // Rare (an origin sending the command as a trailer): the announcement without it,
        // made while the headers' bytes are lent.
        let trailer = announced.then(|| unannounced(values(headers, TRAILER_HEADER_LOWER)));
        (found, trailer)
    };
    // SAFETY: Envoy's live filter (this function's contract). The headers' bytes are not
    // used past the scan: removing the header frees them.
    let (found, trailer) = unsafe { with_headers(host, filter, which, scan) }.unwrap_or_default();
    if found.is_some() {
        // SAFETY: Envoy's live filter; the name lives for the call. No value: remove them all.
        unsafe {
            (host.set_header)(
                filter,
                which,
                ModuleBuffer::of(COMMAND_HEADER_LOWER),
                ModuleBuffer::NONE,
            )
        };
    }
    if let Some(rest) = trailer {
        let value = if rest.is_empty() {
            ModuleBuffer::NONE
        } else {
            ModuleBuffer::of(&rest)
        };
        // SAFETY: Envoy's live filter; the name and value live for the call, which copies.
        // With no value, the header is removed.
        unsafe {
            (host.set_header)(
                filter,
                RESPONSE_HEADER,
                ModuleBuffer::of(TRAILER_HEADER_LOWER),
                value,
            )
        };
    }
    found
}

/// The names of a `Trailer` header's value that are `Velvet-Rope-Command` (any case).
fn names_command(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|name| name.eq_ignore_ascii_case(COMMAND_HEADER_LOWER))
}

/// The names of the `Trailer` header values `values` but `Velvet-Rope-Command`, joined with
/// `, ` (empty when no other is left).
fn unannounced<'v>(values: impl Iterator<Item = &'v [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for name in values
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|name| !name.is_empty() && !name.eq_ignore_ascii_case(COMMAND_HEADER_LOWER))
    {
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(name);
    }
    out
}

/// Lends `f` the request's or the response's headers (`which`): all of them, read from Envoy
/// at once into a buffer on the stack (or, past [`ON_STACK`], the worker's buffer). `None` if
/// Envoy could not lend them.
///
/// # Safety
/// `filter` is Envoy's live filter of a stream whose `which` headers are in; the headers'
/// bytes are Envoy's, valid until the hook returns or the headers change (so `f` must not
/// keep them).
unsafe fn with_headers<R>(
    host: &Host,
    filter: FilterEnvoyPtr,
    which: u32,
    f: impl FnOnce(&[EnvoyHeader]) -> R,
) -> Option<R> {
    // SAFETY: Envoy's live filter (this function's contract).
    let count = unsafe { (host.get_headers_size)(filter, which) };
    if count == 0 {
        return Some(f(&[]));
    }
    let read = |buf: &mut [EnvoyHeader]| {
        // SAFETY: Envoy's live filter; `buf` has room for the `count` headers Envoy writes
        // (the count cannot change before it does: this thread runs the stream's hook).
        unsafe { (host.get_headers)(filter, which, buf.as_mut_ptr()) }
    };
    if count <= ON_STACK {
        // Only the entries Envoy writes are made (48 empty ones cost more than the rest).
        let mut buf = [std::mem::MaybeUninit::<EnvoyHeader>::uninit(); ON_STACK];
        for slot in &mut buf[..count] {
            slot.write(EnvoyHeader::EMPTY);
        }
        // SAFETY: the first `count` entries were just initialised; `EnvoyHeader` is plain
        // data, so the slice of them is valid.
        let headers = unsafe {
            std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<EnvoyHeader>(), count)
        };
        return read(headers).then(|| f(headers));
    }
    // The worker's buffer, taken while in use (a fresh one while the thread is being torn
    // down), then given back.
    let mut buf = MANY
        .try_with(|b| b.try_borrow_mut().map(|mut b| std::mem::take(&mut *b)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    buf.clear();
    buf.resize(count, EnvoyHeader::EMPTY);
    let r = read(&mut buf).then(|| f(&buf));
    let _ = MANY.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = buf;
        }
    });
    r
}

/// The first value of the request header `name` (lower case) as text; one that is not UTF-8
/// counts as absent.
fn first_text<'h>(headers: &'h [EnvoyHeader], name: &'h [u8]) -> Option<&'h str> {
    values(headers, name)
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
}

/// The values of the headers called `name` (lower case), in order.
fn values<'h>(headers: &'h [EnvoyHeader], name: &'h [u8]) -> impl Iterator<Item = &'h [u8]> {
    headers
        .iter()
        // Most names differ in length: only those of the same length are read.
        .filter(move |h| h.key.length == name.len())
        .filter_map(move |h| {
            // SAFETY: Envoy's buffers, valid while the hook that lent `headers` runs, which
            // outlives `'h` (see `with_headers`).
            let key = unsafe { h.key.bytes() };
            // SAFETY: as above.
            key.eq_ignore_ascii_case(name)
                .then(|| unsafe { h.value.bytes() })
        })
}

/// The decision on a request's `headers`: an admitted request goes on (its new or renewed
/// ticket, if any, kept for the response); any other gets the page for its decision (waiting,
/// full room, refused by a rule) as a local reply.
///
/// # Safety
/// As for [`Stream::on_request_headers`], and `headers` are the request's, lent by Envoy.
unsafe fn decide(
    stream: *mut Stream,
    config: &FilterConfig,
    host: &Host,
    filter: FilterEnvoyPtr,
    headers: &[EnvoyHeader],
    now: u64,
) -> u32 {
    let decision = if config.room_reads_request() {
        // SAFETY: `filter` is Envoy's live filter and `headers` its request's (this
        // function's contract).
        unsafe { decide_request(config, host, filter, headers, now) }
    } else {
        // SAFETY: as above.
        unsafe { decide_cookie(config, headers, now) }
    };
    let decision = match decision {
        Ok(d) => d,
        Err(e) => {
            // The room was checked when the configuration was made, but a reload that failed
            // to lay a new room out (a shared region too small) leaves a live filter naming a
            // room the engine lacks. Its requests are refused (503), never passed undecided,
            // as nginx answers 500 (said at most once a minute).
            config.errors.log(abi::LOG_ERROR, || {
                format!(
                    "velvet-rope: filter `{}`: {e}; its requests are refused (503)",
                    config.name
                )
            });
            // SAFETY: Envoy's live filter; the body lives for the call, which copies.
            unsafe { refuse(host, filter) };
            return STOP_ITERATION;
        }
    };
    if decision.outcome == Outcome::Admit {
        // Admitted, passed by a dry run or a `count_only` rule (with the waiter's ticket), or
        // bypassed by a rule (no ticket: untouched). Only a new or renewed ticket is kept for
        // the response; the steady visitor's request stores nothing.
        let ticket = decision
            .ticket_header
            .then(|| decision.ticket().map(str::to_owned))
            .flatten();
        // SAFETY: the stream is live and only this hook uses it now (this function's
        // contract).
        let stream = unsafe { &mut *stream };
        stream.set_cookie = decision.set_cookie;
        stream.ticket = ticket;
        stream.admitted = !decision.bypassed;
        if stream.admitted && config.room_revocable() {
            // What an origin's `revoke` needs, should the response carry one.
            stream.cookie.keep(values(headers, b"cookie"));
            stream
                .ticket_header
                .keep(values(headers, TICKET_HEADER_LOWER).take(1));
        }
        return CONTINUE;
    }
    // A room taking header tickets echoes the ticket the request brought in its JSON page
    // when the decision leaves it unchanged.
    let ticket = if decision.ticket_header {
        first_text(headers, TICKET_HEADER_LOWER)
            .map(str::trim)
            .filter(|t| !t.is_empty())
    } else {
        None
    };
    let request = PageRequest {
        accept: first_text(headers, b"accept"),
        accept_language: first_text(headers, b"accept-language"),
        now_ms: now,
        ticket,
    };
    let page = match config
        .engine
        .render_page_for(&config.room, &decision, &request)
    {
        Ok(Some(page)) => page,
        _ => {
            // A decision that is not an admission always has a page: no page means the room
            // went away under the request; refuse rather than pass it undecided.
            // SAFETY: Envoy's live filter.
            unsafe { refuse(host, filter) };
            return STOP_ITERATION;
        }
    };
    let mut named = page.headers(decision.set_cookie.as_deref());
    if decision.ticket_header {
        if let Some(t) = decision.ticket() {
            named.push((TICKET_HEADER, t.to_owned()));
        }
    }
    let mut reply: Vec<ModuleHeader> = named
        .iter()
        .map(|(k, v)| ModuleHeader::of(k.as_bytes(), v.as_bytes()))
        .collect();
    // SAFETY: Envoy's live filter; the headers and body live for the call, which copies.
    unsafe {
        (host.send_response)(
            filter,
            u32::from(page.status),
            reply.as_mut_ptr(),
            reply.len(),
            ModuleBuffer::of(page.body.as_bytes()),
            ModuleBuffer::of(b"velvet_rope_waiting_room"),
        )
    };
    STOP_ITERATION
}

/// Answers 503 with no body: a request the filter cannot decide is not let through.
///
/// # Safety
/// `filter` is Envoy's live filter, in a request hook.
unsafe fn refuse(host: &Host, filter: FilterEnvoyPtr) {
    let mut reply = [ModuleHeader::of(b"cache-control", b"no-store")];
    // SAFETY: per this function's contract; the header and the details live for the call,
    // which copies.
    unsafe {
        (host.send_response)(
            filter,
            503,
            reply.as_mut_ptr(),
            reply.len(),
            ModuleBuffer::of(b""),
            ModuleBuffer::of(b"velvet_rope_undecidable"),
        )
    };
}

/// The decision in a room that reads only the `Cookie` header (no rules, no header tickets):
/// the one `cookie` line read in place, several joined in the worker's buffer.
///
/// # Safety
/// `headers` are the request's, lent by Envoy for the running hook.
unsafe fn decide_cookie(
    config: &FilterConfig,
    headers: &[EnvoyHeader],
    now: u64,
) -> velvet_rope::Result<Decision> {
    let room = config.room.as_bytes();
    let mut cookies = values(headers, b"cookie");
    match (cookies.next(), cookies.next()) {
        (first, None) => config.engine.admit_header_bytes(room, first, now),
        _ => {
            let join = |j: &mut Vec<u8>| {
                j.clear();
                for (i, value) in values(headers, b"cookie").enumerate() {
                    if i > 0 {
                        j.extend_from_slice(b"; ");
                    }
                    j.extend_from_slice(value);
                }
                config.engine.admit_header_bytes(room, Some(j), now)
            };
            // The worker's buffer; a fresh one while the thread is being torn down.
            JOINED
                .try_with(|j| match j.try_borrow_mut() {
                    Ok(mut j) => join(&mut j),
                    Err(_) => join(&mut Vec::new()),
                })
                .unwrap_or_else(|_| join(&mut Vec::new()))
        }
    }
}

/// Request headers as core reads them: on the stack for a usual request (a browser sends 10
/// to 20), on the heap past [`ON_STACK`] (rare, and only in a room with rules).
type Pairs<'h> = SmallVec<[(&'h [u8], &'h [u8]); ON_STACK]>;

/// The decision on the whole request, in a room with rules or header tickets.
///
/// # Safety
/// `filter` is Envoy's live filter of a stream whose request headers are in, and `headers`
/// are those headers, lent by Envoy for the running hook.
unsafe fn decide_request(
    config: &FilterConfig,
    host: &Host,
    filter: FilterEnvoyPtr,
    headers: &[EnvoyHeader],
    now: u64,
) -> velvet_rope::Result<Decision> {
    let mut method: &[u8] = b"";
    let mut target: &[u8] = b"";
    let mut authority = None;
    let mut pairs = Pairs::new();
    for h in headers {
        // SAFETY: Envoy's buffers, valid while the hook runs (this function's contract).
        let (name, value) = unsafe { (h.key.bytes(), h.value.bytes()) };
        match name {
            b":method" => method = value,
            b":path" => target = value,
            b":authority" => authority = Some(value),
            // `:scheme` and the like describe the request, they are not headers a rule or
            // the ticket could be in.
            [b':', ..] => {}
            _ => pairs.push((name, value)),
        }
    }
    let request = Request {
        method,
        target,
        host: authority,
        headers: &pairs,
        // SAFETY: Envoy's live filter (this function's contract).
        client: unsafe { client_address(host, filter) },
    };
    config
        .engine
        .decide_request_in(config.room.as_bytes(), &request, now)
}

/// The client's address as Envoy established it (`source.address`); `None` if Envoy has none
/// that is an IP address (a Unix socket's peer).
///
/// # Safety
/// `filter` is Envoy's live filter of a stream in a hook.
unsafe fn client_address(host: &Host, filter: FilterEnvoyPtr) -> Option<IpAddr> {
    let mut out = EnvoyBuffer::EMPTY;
    // SAFETY: Envoy's live filter (this function's contract); `out` is written by the call.
    let found = unsafe { (host.get_attribute_string)(filter, ATTRIBUTE_SOURCE_ADDRESS, &mut out) };
    // SAFETY: when found, Envoy's buffer of the address text, valid while the hook runs.
    found
        .then(|| parse_address(unsafe { out.bytes() }))
        .flatten()
}

/// An address as Envoy writes it (`192.0.2.1:5678`, `[2001:db8::1]:5678`, or without the
/// port), an IPv4-mapped IPv6 address as the IPv4 address it carries (a dual-stack listener's
/// IPv4 peer, which rules name as IPv4).
pub fn parse_address(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?;
    let ip = match text.parse::<SocketAddr>() {
        Ok(s) => s.ip(),
        Err(_) => text.parse::<IpAddr>().ok()?,
    };
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticket_of_a_set_cookie_value() {
        assert_eq!(
            ticket_of("__vr_shop=abc.def; Path=/; HttpOnly"),
            Some("abc.def")
        );
        assert_eq!(ticket_of("__vr_shop=abc"), Some("abc"));
        assert_eq!(ticket_of("__vr_shop=; Max-Age=0; Path=/"), None);
        assert_eq!(ticket_of("junk"), None);
    }

    #[test]
    fn the_command_is_taken_out_of_a_trailer_announcement() {
        let rest = |values: &[&str]| {
            String::from_utf8(unannounced(values.iter().map(|v| v.as_bytes()))).unwrap()
        };
        assert_eq!(rest(&["Velvet-Rope-Command"]), "");
        assert_eq!(
            rest(&["grpc-status, velvet-rope-command ,grpc-message"]),
            "grpc-status, grpc-message"
        );
        assert_eq!(rest(&["X-A", "VELVET-ROPE-COMMAND, X-B"]), "X-A, X-B");
        assert_eq!(names_command(b"a, Velvet-Rope-Command").count(), 1);
        assert_eq!(names_command(b"velvet-rope-commands, x").count(), 0);
    }

    #[test]
    fn kept_headers_are_joined_and_cleared() {
        let mut k = Kept::default();
        assert_eq!(k.get(), None);
        k.keep([&b"a=1"[..], b"b=2"].into_iter());
        assert_eq!(k.get(), Some(&b"a=1; b=2"[..]));
        k.keep(std::iter::empty());
        assert_eq!(k.get(), None, "none kept: absent, not empty");
        k.keep([&b""[..]].into_iter());
        assert_eq!(k.get(), Some(&b""[..]));
        k.bytes.reserve(KEPT_MAX * 2);
        k.clear();
        assert_eq!(
            (k.get(), k.bytes.capacity()),
            (None, 0),
            "a large buffer is let go"
        );
    }

    #[test]
    fn addresses_as_envoy_writes_them() {
        let ip = |s: &str| parse_address(s.as_bytes());
        assert_eq!(ip("198.51.100.7:0"), Some("198.51.100.7".parse().unwrap()));
        assert_eq!(ip("198.51.100.7"), Some("198.51.100.7".parse().unwrap()));
        assert_eq!(
            ip("[2001:db8:1::5]:443"),
            Some("2001:db8:1::5".parse().unwrap())
        );
        assert_eq!(ip("2001:db8:1::5"), Some("2001:db8:1::5".parse().unwrap()));
        assert_eq!(
            ip("[::ffff:10.1.2.3]:80"),
            Some("10.1.2.3".parse().unwrap()),
            "a dual-stack listener's IPv4 peer"
        );
        assert_eq!(ip("/run/envoy.sock"), None);
        assert_eq!(ip(""), None);
        assert_eq!(parse_address(b"\xff1.2.3.4"), None);
    }
}
