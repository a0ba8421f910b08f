//! Origin commands over the C ABI: a front door whose origin answered
//! `Velvet-Rope-Command: revoke` ends the visitor's session (see the core's
//! `velvet_rope::admission::revoke`).

use std::ffi::c_char;

use engine::{Revocation, RevokeRefused};

use crate::engine_api::{checked_now, engine_ref, vr_engine};
use crate::error::{guard, null, vr_result, Failure, VR_BUFFER_TOO_SMALL};
use crate::strings::{bytes, text};

/// The session is ended: its ticket is refused from now on, its seat freed.
pub const VR_REVOKED: u32 = 0;
/// It already was (another request, process or host revoked it).
pub const VR_ALREADY_REVOKED: u32 = 1;
/// No valid admission ticket of the room to revoke.
pub const VR_NO_SESSION: u32 = 2;
/// The room does not accept the command (`enabled_origin_commands`).
pub const VR_REVOKE_NOT_ENABLED: u32 = 3;
/// Refused: the room keeps `max_revocations` at once and has that many.
pub const VR_REVOKE_REFUSED_FULL: u32 = 4;
/// Refused: revocations not yet sent to the cluster's store fill the outbox.
pub const VR_REVOKE_REFUSED_UNSENT: u32 = 5;
/// Refused: another process held the revocation lock too long.
pub const VR_REVOKE_REFUSED_BUSY: u32 = 6;

fn code(r: Revocation) -> u32 {
    match r {
        Revocation::Revoked => VR_REVOKED,
        Revocation::AlreadyRevoked => VR_ALREADY_REVOKED,
        Revocation::NoSession => VR_NO_SESSION,
        Revocation::NotEnabled => VR_REVOKE_NOT_ENABLED,
        Revocation::Refused(RevokeRefused::Full) => VR_REVOKE_REFUSED_FULL,
        Revocation::Refused(RevokeRefused::Unsent) => VR_REVOKE_REFUSED_UNSENT,
        Revocation::Refused(RevokeRefused::Busy) => VR_REVOKE_REFUSED_BUSY,
    }
}

/// Whether a `Velvet-Rope-Command` response header value asks for a revocation (`revoke`,
/// any case, among comma-separated commands). 1 or 0; 0 for NULL.
///
/// # Safety
/// `value` NULL or readable for `value_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vr_is_revoke_command(value: *const c_char, value_len: usize) -> u8 {
    if value.is_null() {
        return 0;
    }
    // SAFETY: non-null and readable per this function's contract.
    let v = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), value_len) };
    u8::from(engine::is_revoke_command(v))
}

/// Ends the session of a request's visitor in `room`, for a front door whose origin answered
/// `Velvet-Rope-Command: revoke`. The ticket is `issued` (the ticket the request's own
/// decision handed out, `vr_decision`'s cookie value) if given, else the room's ticket in
/// `cookie_header`, else (rooms with `ticket_header`) `ticket_header`; each may be NULL with
/// length 0. `*outcome_out` gets one of the `VR_REVOKED`... codes. The only error is an
/// unknown room (or bad arguments).
///
/// # Safety
/// `engine` live; strings NULL or readable for their lengths; `outcome_out` writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vr_engine_revoke_request(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    cookie_header: *const c_char,
    cookie_header_len: usize,
    ticket_header: *const c_char,
    ticket_header_len: usize,
    issued: *const c_char,
    issued_len: usize,
    now_ms: u64,
    outcome_out: *mut u32,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { bytes(room, room_len, "room") }?;
        let optional = |p: *const c_char, len: usize, name: &str| {
            // SAFETY: per this function's contract.
            unsafe { bytes(p, len, name) }.map(|b| (!p.is_null()).then_some(b))
        };
        let cookie = optional(cookie_header, cookie_header_len, "cookie_header")?;
        let header = optional(ticket_header, ticket_header_len, "ticket_header")?;
        let issued = optional(issued, issued_len, "issued")?.filter(|b| !b.is_empty());
        if outcome_out.is_null() {
            return Err(null("outcome_out"));
        }
        let now = checked_now(now_ms)?;
        let r = e.revoke_request(room, cookie, header, issued, now)?;
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { outcome_out.write(code(r)) };
        Ok(())
    })
}

/// The `Set-Cookie` value that clears `room`'s ticket cookie (for the response that carried
/// a revocation), NUL-terminated, into `buf`. `*written_out` gets its length (without the
/// NUL); when `buf_len` is too small the result is `VR_BUFFER_TOO_SMALL` and `*written_out`
/// is the size needed (NUL included).
///
/// # Safety
/// `engine` live; `room` readable for `room_len` bytes; `buf` NULL or writable for `buf_len`
/// bytes; `written_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_clear_cookie(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { text(room, room_len, "room") }?;
        if written_out.is_null() {
            return Err(null("written_out"));
        }
        let value = e.clear_cookie(room)?;
        if buf.is_null() || buf_len < value.len() + 1 {
            // SAFETY: checked non-null; writable per the contract.
            unsafe { written_out.write(value.len() + 1) };
            return Err(Failure(
                VR_BUFFER_TOO_SMALL,
                format!(
                    "the cookie needs {} bytes, {buf_len} given",
                    value.len() + 1
                ),
            ));
        }
        // SAFETY: `buf` has `buf_len > value.len()` writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(value.as_ptr(), buf.cast::<u8>(), value.len());
            *buf.add(value.len()) = 0;
            written_out.write(value.len());
        }
        Ok(())
    })
}
