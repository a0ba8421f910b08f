//! One request through the filter: the decision on the request's headers, the waiting page as
//! a local reply, and the ticket's `Set-Cookie` on the upstream's response when an admitted
//! visitor needs a new one.
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

use std::cell::RefCell;

use velvet_rope::{Clock, CoarseSystemClock, Outcome, PageRequest};

use crate::abi::{
    self, EnvoyHeader, FilterEnvoyPtr, Host, ModuleBuffer, ModuleHeader, CONTINUE, REQUEST_HEADER,
    RESPONSE_HEADER, STOP_ITERATION,
};
use crate::filter_config::FilterConfig;

/// A stream's state.
pub struct Stream {
    config: *const FilterConfig,
    /// The ticket to set on the response (an admitted visitor whose ticket was renewed).
    set_cookie: Option<String>,
}

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
                s
            }
            None => Box::new(Stream {
                config,
                set_cookie: None,
            }),
        }
    }

    /// Returns a finished stream to the worker's pool.
    pub fn give_back(mut stream: Box<Stream>) {
        stream.set_cookie = None;
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
        match unsafe { with_request_headers(host, filter, on_headers) } {
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

    /// The upstream's response headers are in: add the renewed ticket, if any.
    ///
    /// # Safety
    /// `filter` is Envoy's live filter of this stream.
    pub unsafe fn on_response_headers(&mut self, host: &Host, filter: FilterEnvoyPtr) -> u32 {
        if let Some(c) = self.set_cookie.take() {
            // SAFETY: Envoy's live filter (this function's contract); the buffers live for
            // the call, which copies.
            unsafe {
                (host.add_header)(
                    filter,
                    RESPONSE_HEADER,
                    ModuleBuffer::of(b"set-cookie"),
                    ModuleBuffer::of(c.as_bytes()),
                )
            };
        }
        CONTINUE
    }
}

/// Lends `f` the request's headers: all of them, read from Envoy at once into a buffer on the
/// stack (or, past [`ON_STACK`], the worker's buffer). `None` if Envoy could not lend them.
///
/// # Safety
/// `filter` is Envoy's live filter of a stream whose request headers are in; the headers'
/// bytes are Envoy's, valid until the hook returns (so `f` must not keep them).
unsafe fn with_request_headers<R>(
    host: &Host,
    filter: FilterEnvoyPtr,
    f: impl FnOnce(&[EnvoyHeader]) -> R,
) -> Option<R> {
    // SAFETY: Envoy's live filter (this function's contract).
    let count = unsafe { (host.get_headers_size)(filter, REQUEST_HEADER) };
    if count == 0 {
        return Some(f(&[]));
    }
    let read = |buf: &mut [EnvoyHeader]| {
        // SAFETY: Envoy's live filter; `buf` has room for the `count` headers Envoy writes
        // (the count cannot change before it does: this thread runs the stream's hook).
        unsafe { (host.get_headers)(filter, REQUEST_HEADER, buf.as_mut_ptr()) }
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

/// The values of the headers called `name` (lower case), in order.
/// The first value of the request header `name` (lower case) as text; one that is not UTF-8
/// counts as absent.
fn first_text<'h>(headers: &'h [EnvoyHeader], name: &'h [u8]) -> Option<&'h str> {
    values(headers, name)
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
}

fn values<'h>(headers: &'h [EnvoyHeader], name: &'h [u8]) -> impl Iterator<Item = &'h [u8]> {
    headers
        .iter()
        // Most names differ in length: only those of the same length are read.
        .filter(move |h| h.key.length == name.len())
        .filter_map(move |h| {
            // SAFETY: Envoy's buffers, valid while the hook that lent `headers` runs, which
            // outlives `'h` (see `with_request_headers`).
            let key = unsafe { h.key.bytes() };
            // SAFETY: as above.
            key.eq_ignore_ascii_case(name)
                .then(|| unsafe { h.value.bytes() })
        })
}

/// The decision on a request's `headers`: an admitted request goes on (its renewed ticket, if
/// any, kept for the response); any other gets the waiting page as a local reply.
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
    let room = config.room.as_bytes();
    let mut cookies = values(headers, b"cookie");
    let decision = match (cookies.next(), cookies.next()) {
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
    };
    let decision = match decision {
        Ok(d) => d,
        Err(e) => {
            // The room was checked when the configuration was made, and a live
            // configuration's room stays in the engine: a failure here is a bug, and the
            // request goes on rather than failing (said at most once a minute).
            config.errors.log(abi::LOG_ERROR, || {
                format!(
                    "velvet-rope: filter `{}`: {e}; its requests pass undecided",
                    config.name
                )
            });
            return CONTINUE;
        }
    };
    if decision.outcome == Outcome::Admit {
        // SAFETY: the stream is live and only this hook uses it now (this function's
        // contract).
        unsafe { (*stream).set_cookie = decision.set_cookie };
        return CONTINUE;
    }
    let request = PageRequest {
        accept: first_text(headers, b"accept"),
        accept_language: first_text(headers, b"accept-language"),
        now_ms: now,
        ticket: None,
    };
    let page = match config
        .engine
        .render_page_for(&config.room, &decision, &request)
    {
        Ok(Some(page)) => page,
        _ => return CONTINUE,
    };
    let named = page.headers(decision.set_cookie.as_deref());
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
