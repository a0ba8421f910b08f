//! Result codes, the thread's last error message, and the panic boundary.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Result of every fallible function. Numbers are stable; retired codes stay reserved.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vr_result {
    /// Success.
    VR_OK = 0,
    /// A required pointer was NULL.
    VR_NULL_PARAMETER = 1,
    /// A string argument was not UTF-8.
    VR_INVALID_UTF8 = 2,
    /// The configuration text could not be parsed.
    VR_PARSE_ERROR = 3,
    /// The configuration parsed but a field is invalid.
    VR_INVALID_CONFIG = 4,
    /// A file could not be read.
    VR_IO_ERROR = 5,
    /// No room of that name.
    VR_UNKNOWN_ROOM = 6,
    /// A shared memory region was refused (size, alignment or layout).
    VR_REGION_REFUSED = 7,
    /// An output buffer is too small (the needed size was written).
    VR_BUFFER_TOO_SMALL = 8,
    /// A lease request or lease configuration was refused.
    VR_LEASE_ERROR = 9,
    /// A numeric argument is out of range.
    VR_INVALID_ARGUMENT = 10,
    /// A bug: the library panicked. The message says where.
    VR_PANIC = 11,
}

pub(crate) use vr_result::*;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A failure: its code and its message.
pub(crate) struct Failure(pub(crate) vr_result, pub(crate) String);

impl From<engine::Error> for Failure {
    fn from(e: engine::Error) -> Self {
        let code = match &e {
            engine::Error::Parse(_) => VR_PARSE_ERROR,
            engine::Error::Invalid { .. } => VR_INVALID_CONFIG,
            engine::Error::Io { .. } => VR_IO_ERROR,
            engine::Error::UnknownRoom(_) => VR_UNKNOWN_ROOM,
            engine::Error::Region(_) => VR_REGION_REFUSED,
            engine::Error::Lease(_) => VR_LEASE_ERROR,
            _ => VR_INVALID_ARGUMENT,
        };
        Failure(code, e.to_string())
    }
}

impl From<engine::lease::LeaseError> for Failure {
    fn from(e: engine::lease::LeaseError) -> Self {
        Failure(VR_LEASE_ERROR, e.to_string())
    }
}

/// Runs `body` behind the panic boundary, recording any failure's message for
/// [`vr_last_error`]. Success is the inlined path; failures and panics are handled out of line.
#[inline(always)]
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> vr_result {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => VR_OK,
        Ok(Err(failure)) => fail(failure),
        Err(panic) => panicked(panic),
    }
}

/// Records a failure's message for [`vr_last_error`] and returns its code.
#[cold]
#[inline(never)]
fn fail(Failure(code, message): Failure) -> vr_result {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
    code
}

/// Turns a caught panic into [`VR_PANIC`] with the panic's message.
#[cold]
#[inline(never)]
fn panicked(panic: Box<dyn std::any::Any + Send>) -> vr_result {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    fail(Failure(VR_PANIC, format!("velvet-rope panicked: {what}")))
}

/// Shorthand for a NULL-pointer failure naming the parameter.
#[cold]
pub(crate) fn null(name: &str) -> Failure {
    Failure(VR_NULL_PARAMETER, format!("`{name}` is NULL"))
}

/// Copies this thread's last error message into `buf` (NUL-terminated, truncated to
/// `buf_len - 1` bytes) and returns the message's full length in bytes. With `buf` NULL or
/// `buf_len` 0 it only returns the length. The message stays until the next failure on this
/// thread.
///
/// # Safety
/// `buf` must be NULL or valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vr_last_error(buf: *mut c_char, buf_len: usize) -> usize {
    catch_unwind(|| {
        LAST_ERROR.with(|e| {
            let msg = e.borrow();
            if !buf.is_null() && buf_len > 0 {
                let n = msg.len().min(buf_len - 1);
                // SAFETY: the caller promised `buf_len` writable bytes; `n + 1 <= buf_len`.
                unsafe {
                    std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
                    *buf.add(n) = 0;
                }
            }
            msg.len()
        })
    })
    .unwrap_or(0)
}

/// A static NUL-terminated name for a result code (`"VR_OK"`, ...; `"VR_UNKNOWN_RESULT"` for
/// numbers that are not codes). Never NULL; never freed.
#[no_mangle]
pub extern "C" fn vr_result_name(result: u32) -> *const c_char {
    let name: &'static str = match result {
        0 => "VR_OK\0",
        1 => "VR_NULL_PARAMETER\0",
        2 => "VR_INVALID_UTF8\0",
        3 => "VR_PARSE_ERROR\0",
        4 => "VR_INVALID_CONFIG\0",
        5 => "VR_IO_ERROR\0",
        6 => "VR_UNKNOWN_ROOM\0",
        7 => "VR_REGION_REFUSED\0",
        8 => "VR_BUFFER_TOO_SMALL\0",
        9 => "VR_LEASE_ERROR\0",
        10 => "VR_INVALID_ARGUMENT\0",
        11 => "VR_PANIC\0",
        _ => "VR_UNKNOWN_RESULT\0",
    };
    name.as_ptr().cast()
}

/// Drops a handle made by `Box::into_raw`, behind the panic boundary; NULL is ignored. Every
/// `vr_*_free` function is this, so ownership is handled in one place.
///
/// # Safety
/// `handle` must be NULL or a pointer from `Box::into_raw` of a `T` not freed before.
pub(crate) unsafe fn free_handle<T>(handle: *mut T) {
    if !handle.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: per this function's contract, this is the Box's pointer.
            drop(unsafe { Box::from_raw(handle) });
        }));
    }
}
