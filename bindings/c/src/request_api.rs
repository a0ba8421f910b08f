//! Whole requests over the C ABI: the room chosen by the rooms' routes, the room's rules,
//! header tickets, dry runs (see the core's `velvet_rope::request`).

use std::ffi::c_char;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use engine::request::Request;
use smallvec::SmallVec;

use crate::engine_api::{checked_now, engine_ref, to_c, vr_decision, vr_engine};
use crate::error::{guard, null, vr_result, Failure, VR_INVALID_ARGUMENT};
use crate::strings::bytes;

/// Headers held on the stack before a request's header list is copied to the heap.
const INLINE_HEADERS: usize = 48;

/// One request header: name (any case) and value, neither NUL-terminated.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct vr_header {
    /// The name.
    pub name: *const c_char,
    /// Its length.
    pub name_len: usize,
    /// The value.
    pub value: *const c_char,
    /// Its length.
    pub value_len: usize,
}

/// `vr_request.client_family`: the client is unknown.
pub const VR_CLIENT_UNKNOWN: u8 = 0;
/// `vr_request.client_family`: `client_addr[0..4]` holds an IPv4 address (network order).
pub const VR_CLIENT_IPV4: u8 = 4;
/// `vr_request.client_family`: `client_addr` holds an IPv6 address (network order).
pub const VR_CLIENT_IPV6: u8 = 6;

/// One request as the server parsed it. Every pointer may be NULL with its length 0.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct vr_request {
    /// The method (`GET`).
    pub method: *const c_char,
    /// Its length.
    pub method_len: usize,
    /// The request-target as received (`/path?query`, or `http://host/path`).
    pub target: *const c_char,
    /// Its length.
    pub target_len: usize,
    /// The `Host` header (or `:authority`); NULL: looked up among `headers`.
    pub host: *const c_char,
    /// Its length.
    pub host_len: usize,
    /// Every request header (several `Cookie` headers each).
    pub headers: *const vr_header,
    /// How many.
    pub headers_len: usize,
    /// `VR_CLIENT_UNKNOWN`, `VR_CLIENT_IPV4` or `VR_CLIENT_IPV6`: the client's address as the
    /// server established it (after nginx's realip, say).
    pub client_family: u8,
    /// The address, network byte order (4 or 16 bytes used).
    pub client_addr: [u8; 16],
}

/// Where `vr_engine_decide_request` placed a request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct vr_route {
    /// 1: a room's routes took the request (`room` names it, `*decision_out` was written);
    /// 0: none did (pass the request untouched).
    pub routed: u8,
    /// Length of `room`.
    pub room_len: usize,
    /// The room's name, NUL-terminated.
    pub room: [c_char; 65],
}

/// A request's header slices.
type Headers<'a> = SmallVec<[(&'a [u8], &'a [u8]); INLINE_HEADERS]>;

/// A request read from C, but for its header list (which [`Parts::request`] borrows).
struct Parts<'a> {
    method: &'a [u8],
    target: &'a [u8],
    host: Option<&'a [u8]>,
    client: Option<IpAddr>,
}

impl<'a> Parts<'a> {
    /// The core's request over `headers`.
    fn request<'r>(&self, headers: &'r Headers<'a>) -> Request<'r>
    where
        'a: 'r,
    {
        Request {
            method: self.method,
            target: self.target,
            host: self.host,
            headers: &headers[..],
            client: self.client,
        }
    }
}

/// Reads `request`: its parts and its headers.
///
/// # Safety
/// `request` and what it points to valid per `vr_request`'s contract, for `'a`.
unsafe fn read<'a>(request: *const vr_request) -> Result<(Parts<'a>, Headers<'a>), Failure> {
    let mut headers = Headers::new();
    // SAFETY: per the caller.
    let r = unsafe { request.as_ref() }.ok_or_else(|| null("request"))?;
    // SAFETY: per the caller, for each field.
    let (method, target, host) = unsafe {
        (
            bytes(r.method, r.method_len, "request.method")?,
            bytes(r.target, r.target_len, "request.target")?,
            bytes(r.host, r.host_len, "request.host")?,
        )
    };
    if r.headers_len > 0 {
        if r.headers.is_null() {
            return Err(null("request.headers"));
        }
        // SAFETY: non-null; the caller promised `headers_len` readable entries.
        let list = unsafe { std::slice::from_raw_parts(r.headers, r.headers_len) };
        for h in list {
            // SAFETY: per the caller, for each header.
            let pair = unsafe {
                (
                    bytes(h.name, h.name_len, "request.headers[].name")?,
                    bytes(h.value, h.value_len, "request.headers[].value")?,
                )
            };
            headers.push(pair);
        }
    }
    let client = match r.client_family {
        VR_CLIENT_UNKNOWN => None,
        VR_CLIENT_IPV4 => {
            let a = r.client_addr;
            Some(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])))
        }
        VR_CLIENT_IPV6 => Some(IpAddr::V6(Ipv6Addr::from(r.client_addr))),
        n => {
            return Err(Failure(
                VR_INVALID_ARGUMENT,
                format!("request.client_family {n} is not 0, 4 or 6"),
            ))
        }
    };
    Ok((
        Parts {
            method,
            target,
            host: (!r.host.is_null()).then_some(host),
            client,
        },
        headers,
    ))
}

/// Decides a request in the room the rooms' `routes` place it in (the most specific host,
/// then the longest path prefix), after that room's rules. Writes `*route_out`; when it says
/// routed, `*decision_out` too. A request no route takes passes untouched. Thread-safe;
/// never blocks; allocates only for a request of more than 48 headers or a target that needs
/// more than one reading.
///
/// # Safety
/// `engine` live; `request` per `vr_request`'s contract; `route_out` and `decision_out`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_decide_request(
    engine: *const vr_engine,
    request: *const vr_request,
    now_ms: u64,
    route_out: *mut vr_route,
    decision_out: *mut vr_decision,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let (parts, headers) = unsafe { read(request) }?;
        let request = parts.request(&headers);
        if route_out.is_null() {
            return Err(null("route_out"));
        }
        if decision_out.is_null() {
            return Err(null("decision_out"));
        }
        let now = checked_now(now_ms)?;
        let routed = e.decide_request(&request, now);
        let mut route = vr_route {
            routed: 0,
            room_len: 0,
            room: [0; 65],
        };
        if let Some(r) = &routed {
            // SAFETY: checked non-null; writable per this function's contract.
            unsafe { to_c(&r.decision, decision_out) }?;
            let name = r.room.as_str().as_bytes();
            route.routed = 1;
            route.room_len = name.len();
            for (out, &b) in route.room.iter_mut().zip(name) {
                *out = b as c_char;
            }
        }
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { route_out.write(route) };
        Ok(())
    })
}

/// Decides a request in `room` (chosen by the server: an nginx location, an Envoy route),
/// after the room's rules, finding its ticket in its `Cookie` headers (or, where the room
/// takes one, its `Velvet-Rope-Ticket` header). Writes `*decision_out`. Thread-safe; never
/// blocks.
///
/// # Safety
/// `engine` live; `room` readable for `room_len` bytes; `request` per `vr_request`'s
/// contract; `decision_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_decide_request_in(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    request: *const vr_request,
    now_ms: u64,
    decision_out: *mut vr_decision,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { bytes(room, room_len, "room") }?;
        // SAFETY: per this function's contract.
        let (parts, headers) = unsafe { read(request) }?;
        let request = parts.request(&headers);
        if decision_out.is_null() {
            return Err(null("decision_out"));
        }
        let now = checked_now(now_ms)?;
        let d = e.decide_request_in(room, &request, now)?;
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { to_c(&d, decision_out) }
    })
}

/// Whether deciding in `room` reads more of a request than its `Cookie` header (the room has
/// rules, or takes header tickets): a server may then call `vr_engine_decide_request_in`
/// and `vr_engine_admit` otherwise. Writes `*reads_out` (1 or 0).
///
/// # Safety
/// `engine` live; `room` readable for `room_len` bytes; `reads_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_room_reads_request(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    reads_out: *mut u8,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { bytes(room, room_len, "room") }?;
        let reads = e.room_reads_request(room)?;
        if reads_out.is_null() {
            return Err(null("reads_out"));
        }
        // SAFETY: checked non-null.
        unsafe { reads_out.write(u8::from(reads)) };
        Ok(())
    })
}
