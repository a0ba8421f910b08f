//! One request through the filter: the decision on the request's headers, the waiting page as
//! a local reply, and the ticket's `Set-Cookie` on the upstream's response when an admitted
//! visitor needs a new one.
//!
//! Per-stream state is one small object, recycled through a per-worker pool: a worker's
//! steady state allocates nothing per request. The `Cookie` header is read in place (Envoy's
//! buffer) when the request has one `cookie` line, and joined with `; ` into the worker's
//! reusable buffer when it has several (an HTTP/1 client may send several lines; Envoy joins
//! HTTP/2's split cookies itself).

use std::cell::RefCell;

use velvet_rope::{Clock, CoarseSystemClock, Outcome};

use crate::abi::{
    self, EnvoyBuffer, FilterEnvoyPtr, Host, ModuleBuffer, ModuleHeader, CONTINUE, REQUEST_HEADER,
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
}

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
        let (count, first) = header(host, filter, b"cookie", 0);
        let decision = if count <= 1 {
            // SAFETY: Envoy's buffer, valid until this hook returns; used only within it.
            let cookie = (count == 1).then(|| unsafe { first.bytes() });
            config
                .engine
                .admit_header_bytes(config.room.as_bytes(), cookie, now)
        } else {
            let join = |j: &mut Vec<u8>| {
                j.clear();
                for i in 0..count {
                    let (_, value) = header(host, filter, b"cookie", i);
                    if i > 0 {
                        j.extend_from_slice(b"; ");
                    }
                    // SAFETY: as above.
                    j.extend_from_slice(unsafe { value.bytes() });
                }
                config
                    .engine
                    .admit_header_bytes(config.room.as_bytes(), Some(j), now)
            };
            // The worker's buffer; a fresh one while the thread is being torn down.
            JOINED
                .try_with(|j| match j.try_borrow_mut() {
                    Ok(mut j) => join(&mut j),
                    Err(_) => join(&mut Vec::new()),
                })
                .unwrap_or_else(|_| join(&mut Vec::new()))
        };
        let decision = match decision {
            Ok(d) => d,
            Err(e) => {
                // The room was checked when the configuration was made; a failure here is a
                // bug, and the request goes on rather than failing.
                abi::log(abi::LOG_ERROR, &format!("velvet-rope: {e}"));
                return CONTINUE;
            }
        };
        if decision.outcome == Outcome::Admit {
            // SAFETY: the stream is live and only this hook uses it now.
            unsafe { (*stream).set_cookie = decision.set_cookie };
            return CONTINUE;
        }
        let (accepts, accept) = header(host, filter, b"accept", 0);
        // SAFETY: as above.
        let accept = (accepts > 0)
            .then(|| std::str::from_utf8(unsafe { accept.bytes() }).ok())
            .flatten();
        let page = match config.engine.render_page(&config.room, &decision, accept) {
            Ok(Some(page)) => page,
            _ => return CONTINUE,
        };
        let named = page.headers(decision.set_cookie.as_deref());
        let mut headers: Vec<ModuleHeader> = named
            .iter()
            .map(|(k, v)| ModuleHeader::of(k.as_bytes(), v.as_bytes()))
            .collect();
        // SAFETY: Envoy's live filter; the headers and body live for the call, which copies.
        unsafe {
            (host.send_response)(
                filter,
                u32::from(page.status),
                headers.as_mut_ptr(),
                headers.len(),
                ModuleBuffer::of(page.body.as_bytes()),
                ModuleBuffer::of(b"velvet_rope_waiting_room"),
            )
        };
        STOP_ITERATION
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

/// Value `index` of request header `name`, and how many values it has (0: absent). `filter`
/// must be Envoy's live filter (every caller's contract).
fn header(host: &Host, filter: FilterEnvoyPtr, name: &[u8], index: usize) -> (usize, EnvoyBuffer) {
    let mut out = EnvoyBuffer::EMPTY;
    let mut count = 0usize;
    // SAFETY: Envoy's live filter; `out` and `count` are valid for writes.
    let found = unsafe {
        (host.get_header)(
            filter,
            REQUEST_HEADER,
            ModuleBuffer::of(name),
            &mut out,
            index,
            &mut count,
        )
    };
    if found {
        (count.max(1), out)
    } else {
        (count, EnvoyBuffer::EMPTY)
    }
}
