//! The calls every request makes, as raw N-API callbacks: a room's admit function (made by
//! `engineRoom`; `engineAdmit` is its form taking the engine and the room by name) and
//! `rateLimiterTryAcquire`.
//!
//! Measured here (Node 20): a raw callback taking one number and returning a boolean costs
//! 33 ns; the same function through napi-rs's generated wrapper, 148 ns. These are therefore
//! written against N-API directly (`engineAdmit` and `rateLimiterTryAcquire` registered when
//! the module loads, a room's admit function made by `engineRoom`); everything else goes
//! through napi-rs. Each callback catches panics (none crosses into JavaScript) and
//! throws errors with the same codes as the rest of the module (`errors`).

use std::ffi::{c_void, CString};
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{sys, Env, JsValue};
use napi_derive::napi;
use velvet_rope::lease::{Denied, LeaseError};

use crate::engine::{steady_or_object, RoomRef, ENGINES};
use crate::errors::{invalid, lease_to_js, to_js, JsError};
use crate::lease::LIMITERS;

/// Bytes of a string argument read on the stack before falling back to the heap (a `Cookie`
/// header rarely passes 4 KiB; a room name never does).
const STACK: usize = 4096;
/// The same for a room name (longer ones are read from the heap, and refused as unknown).
const ROOM_STACK: usize = 256;

/// Registers the raw callbacks on the module's exports, and the environment's cleanup hook
/// (see `environment`): napi-rs runs this once per environment that loads the module.
#[napi(module_exports)]
pub fn register_hot_calls(exports: Object, env: Env) -> napi::Result<()> {
    // Once per environment (the main thread's, each worker's): its handles are freed when it
    // ends.
    crate::environment::register(&env)?;
    let calls: [(&std::ffi::CStr, sys::napi_callback); 2] = [
        (c"engineAdmit", Some(engine_admit)),
        (c"rateLimiterTryAcquire", Some(rate_limiter_try_acquire)),
    ];
    for (name, callback) in calls {
        let mut f = ptr::null_mut();
        // SAFETY: `env` and `exports` come from napi-rs's module registration; `name` is a
        // NUL-terminated string; `f` is writable.
        let status = unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr(),
                name.to_bytes().len() as isize,
                callback,
                ptr::null_mut(),
                &mut f,
            )
        };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::from_reason("cannot create a native function"));
        }
        // SAFETY: as above; `f` is the function just created.
        let status =
            unsafe { sys::napi_set_named_property(env.raw(), exports.raw(), name.as_ptr(), f) };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::from_reason("cannot export a native function"));
        }
    }
    Ok(())
}

/// Throws `e` as a JavaScript `Error` with its code; returns `undefined` for the callback.
///
/// # Safety
/// `env` must be the live call's environment.
unsafe fn throw(env: sys::napi_env, e: JsError) -> sys::napi_value {
    let code = CString::new(e.status).unwrap_or_default();
    let message = CString::new(e.reason.replace('\0', " ")).unwrap_or_default();
    // SAFETY: per this function's contract; both strings are NUL-terminated.
    unsafe { sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()) };
    ptr::null_mut()
}

/// Runs a callback body, turning errors and panics into thrown JavaScript errors.
///
/// # Safety
/// `env` must be the live call's environment.
pub(crate) unsafe fn guarded(
    env: sys::napi_env,
    body: impl FnOnce() -> Result<sys::napi_value, JsError>,
) -> sys::napi_value {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        // SAFETY: per this function's contract.
        Ok(Err(e)) => unsafe { throw(env, e) },
        // SAFETY: per this function's contract.
        Err(_) => unsafe { throw(env, invalid("internal error (a panic) in velvet-rope")) },
    }
}

/// The arguments of the live call, up to `N` (missing ones are `undefined`).
///
/// # Safety
/// `env` and `info` must be the live call's.
unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<[sys::napi_value; N], JsError> {
    // SAFETY: this function's contract.
    unsafe { args_and_count(env, info) }.map(|(argv, _)| argv)
}

/// [`args`], and how many the caller passed.
///
/// # Safety
/// `env` and `info` must be the live call's.
unsafe fn args_and_count<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<([sys::napi_value; N], usize), JsError> {
    // SAFETY: this function's contract.
    unsafe { args_count_and_data(env, info) }.map(|(argv, argc, _)| (argv, argc))
}

/// [`args_and_count`], and the data the function was made with (`napi_create_function`).
///
/// # Safety
/// `env` and `info` must be the live call's.
pub(crate) unsafe fn args_count_and_data<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<([sys::napi_value; N], usize, *mut c_void), JsError> {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    let mut data = ptr::null_mut();
    // SAFETY: per this function's contract; `argv` has room for `argc` values, `data` is
    // writable.
    let status = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut data,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(invalid("cannot read the call's arguments"));
    }
    // N-API itself sets the slots past the arguments passed to `undefined`.
    Ok((argv, argc, data))
}

/// The JavaScript type of a value.
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn type_of(env: sys::napi_env, v: sys::napi_value) -> sys::napi_valuetype {
    let mut t = sys::ValueType::napi_undefined;
    // SAFETY: per this function's contract; `t` is writable.
    unsafe { sys::napi_typeof(env, v, &mut t) };
    t
}

/// A `u32` argument (a handle or a count).
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn u32_arg(env: sys::napi_env, v: sys::napi_value, what: &str) -> Result<u32, JsError> {
    let mut out = 0u32;
    // SAFETY: per this function's contract; `out` is writable.
    if unsafe { sys::napi_get_value_uint32(env, v, &mut out) } != sys::Status::napi_ok {
        return Err(invalid(format!("`{what}` must be a number")));
    }
    Ok(out)
}

/// A count argument: a whole number from 0 to 2^32 - 1 (`undefined`: `default`).
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn count_arg(
    env: sys::napi_env,
    v: sys::napi_value,
    what: &str,
    default: u32,
) -> Result<u32, JsError> {
    let mut n = 0f64;
    // SAFETY: per this function's contract; `n` is writable.
    match unsafe { sys::napi_get_value_double(env, v, &mut n) } {
        sys::Status::napi_ok if n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&n) => {
            Ok(n as u32)
        }
        // SAFETY: per this function's contract.
        _ if unsafe { type_of(env, v) } == sys::ValueType::napi_undefined => Ok(default),
        _ => Err(invalid(format!(
            "`{what}` must be a whole number from 0 to 2^32 - 1"
        ))),
    }
}

/// An optional time argument (milliseconds; `undefined` or `null`: the system clock).
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn now_arg(env: sys::napi_env, v: sys::napi_value) -> Result<u64, JsError> {
    // SAFETY: per this function's contract.
    match unsafe { type_of(env, v) } {
        sys::ValueType::napi_undefined | sys::ValueType::napi_null => crate::or_now(None),
        _ => {
            let mut ms = 0f64;
            // SAFETY: per this function's contract; `ms` is writable.
            if unsafe { sys::napi_get_value_double(env, v, &mut ms) } != sys::Status::napi_ok {
                return Err(invalid("`nowMs` must be a number"));
            }
            crate::or_now(Some(ms))
        }
    }
}

/// The time argument of a hot call: the system clock when the caller left it out (`index.js`
/// does when `nowMs` is `undefined`, which spares a type check per call), else [`now_arg`].
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn now_or_clock(
    env: sys::napi_env,
    v: sys::napi_value,
    passed: bool,
) -> Result<u64, JsError> {
    if passed {
        // SAFETY: per this function's contract.
        unsafe { now_arg(env, v) }
    } else {
        crate::or_now(None)
    }
}

/// How a string argument is read into bytes.
#[derive(Clone, Copy)]
enum Encoding {
    /// UTF-8.
    Utf8,
    /// One byte per character (latin1): V8 copies a one-byte string as it is, where its UTF-8
    /// conversion cost about 150 instructions more per call here (callgrind, Node 20). A
    /// character above 255 is read as its low byte (see `header_arg` for why that is sound
    /// for a cookie header).
    Latin1,
}

impl Encoding {
    /// N-API's reader of this encoding.
    fn reader(
        self,
    ) -> unsafe extern "C" fn(
        sys::napi_env,
        sys::napi_value,
        *mut std::ffi::c_char,
        usize,
        *mut usize,
    ) -> sys::napi_status {
        match self {
            Encoding::Utf8 => sys::napi_get_value_string_utf8,
            Encoding::Latin1 => sys::napi_get_value_string_latin1,
        }
    }

    /// The most bytes one character takes (N-API never splits one, so a result shorter than
    /// the buffer by this much is the whole string).
    fn widest(self) -> usize {
        match self {
            Encoding::Utf8 => 4,
            Encoding::Latin1 => 1,
        }
    }
}

/// A string argument's bytes in `encoding`: in `buf` when they fit (no allocation, and no
/// zeroing: only the bytes N-API writes are read), else in `heap`; `None` if it is not a
/// string.
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn string_arg<'b, const N: usize>(
    env: sys::napi_env,
    v: sys::napi_value,
    encoding: Encoding,
    buf: &'b mut [MaybeUninit<u8>; N],
    heap: &'b mut Vec<u8>,
) -> Option<&'b [u8]> {
    let read = encoding.reader();
    let mut written = 0usize;
    // SAFETY: per this function's contract; `buf` is writable for its length; N-API writes at
    // most `N - 1` bytes and a NUL, and reports how many it wrote.
    if unsafe { read(env, v, buf.as_mut_ptr().cast(), N, &mut written) } != sys::Status::napi_ok {
        return None;
    }
    if written + encoding.widest() < N {
        // SAFETY: N-API initialised the first `written` bytes (`written < N`).
        return Some(unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), written) });
    }
    // Perhaps cut short: ask the length, then read it all.
    let mut len = 0usize;
    // SAFETY: as above; a null buffer asks only for the length.
    if unsafe { read(env, v, ptr::null_mut(), 0, &mut len) } != sys::Status::napi_ok {
        return None;
    }
    heap.resize(len + 1, 0);
    // SAFETY: as above; `heap` is writable for `len + 1` bytes.
    let status = unsafe { read(env, v, heap.as_mut_ptr().cast(), len + 1, &mut written) };
    (status == sys::Status::napi_ok).then(|| &heap[..written])
}

/// A string argument's UTF-8 bytes (see [`string_arg`]); an error naming `what` if it is not
/// a string.
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn str_arg<'b, const N: usize>(
    env: sys::napi_env,
    v: sys::napi_value,
    what: &str,
    buf: &'b mut [MaybeUninit<u8>; N],
    heap: &'b mut Vec<u8>,
) -> Result<&'b [u8], JsError> {
    // SAFETY: per this function's contract.
    unsafe { string_arg(env, v, Encoding::Utf8, buf, heap) }
        .ok_or_else(|| invalid(format!("`{what}` must be a string")))
}

/// A `Cookie` header argument (`undefined` or `null`: none), read one byte per character:
/// Node's HTTP parser makes each byte of a header one character (latin1), so these are the
/// bytes the client sent (UTF-8 would re-encode those above 127 as two). A character above
/// 255 (a string not from a parser) is read as its low byte: a ticket is ASCII, so that can
/// change only which bytes are taken for one, never let an unsealed one open.
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn header_arg<'b, const N: usize>(
    env: sys::napi_env,
    v: sys::napi_value,
    buf: &'b mut [MaybeUninit<u8>; N],
    heap: &'b mut Vec<u8>,
) -> Result<Option<&'b [u8]>, JsError> {
    // SAFETY: per this function's contract.
    if let Some(bytes) = unsafe { string_arg(env, v, Encoding::Latin1, buf, heap) } {
        return Ok(Some(bytes));
    }
    // Not a string: none, or a caller's mistake (asked only now, off the common path).
    // SAFETY: per this function's contract.
    match unsafe { type_of(env, v) } {
        sys::ValueType::napi_undefined | sys::ValueType::napi_null => Ok(None),
        _ => Err(invalid("`cookie` must be a string")),
    }
}

/// A room name argument, as UTF-8: read as UTF-16 and narrowed into `ascii` when every unit
/// is ASCII (every room's name is: the configuration refuses others; cheaper for V8 than
/// UTF-8, and unlike latin1 it never takes a character above 255 for its low byte), else
/// read as UTF-8 into `utf8` (no room has such a name; the error names it as given).
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn room_arg<'b, const N: usize>(
    env: sys::napi_env,
    v: sys::napi_value,
    ascii: &'b mut [MaybeUninit<u8>; N],
    utf8: (&'b mut [MaybeUninit<u8>; N], &'b mut Vec<u8>),
) -> Result<&'b [u8], JsError> {
    let mut units = [MaybeUninit::<u16>::uninit(); N];
    let mut written = 0usize;
    // SAFETY: per this function's contract; `units` is writable for `N` units; N-API writes
    // at most `N - 1` and a NUL, and reports how many it wrote.
    let status = unsafe {
        sys::napi_get_value_string_utf16(env, v, units.as_mut_ptr().cast(), N, &mut written)
    };
    if status == sys::Status::napi_ok && written + 1 < N {
        // SAFETY: N-API initialised the first `written` units (`written < N`).
        let units = unsafe { std::slice::from_raw_parts(units.as_ptr().cast::<u16>(), written) };
        if units.iter().all(|&u| u < 0x80) {
            for (byte, &unit) in ascii.iter_mut().zip(units) {
                byte.write(unit as u8);
            }
            // SAFETY: the first `written` bytes were just written.
            return Ok(unsafe { std::slice::from_raw_parts(ascii.as_ptr().cast::<u8>(), written) });
        }
    }
    // SAFETY: per this function's contract.
    unsafe { str_arg(env, v, "room", utf8.0, utf8.1) }
}

/// `engineAdmit(engine, room, cookie?, nowMs?)`: decides one request; `undefined` for the
/// steady admit (admitted, nothing to set), else the decision object. Never blocks. Without a
/// fourth argument the time is the system clock's (see [`now_or_clock`]).
unsafe extern "C" fn engine_admit(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: `env` and `info` are the live call's, as N-API passes them.
    unsafe {
        guarded(env, || {
            let ([handle, room, cookie, now], argc) = args_and_count::<4>(env, info)?;
            let handle = u32_arg(env, handle, "engine")?;
            let mut room_buf = [MaybeUninit::uninit(); ROOM_STACK];
            let (mut utf8_buf, mut utf8_heap) = ([MaybeUninit::uninit(); ROOM_STACK], Vec::new());
            let room = room_arg(env, room, &mut room_buf, (&mut utf8_buf, &mut utf8_heap))?;
            let (mut cookie_buf, mut cookie_heap) = ([MaybeUninit::uninit(); STACK], Vec::new());
            let header = header_arg(env, cookie, &mut cookie_buf, &mut cookie_heap)?;
            let now = now_or_clock(env, now, argc >= 4)?;
            let decision = ENGINES
                .with(handle, |e| e.admit_header_bytes(room, header, now))?
                .map_err(to_js)?;
            decision_value(env, decision)
        })
    }
}

/// A room's admit function, `admit(cookie?, nowMs?)`: `engineAdmit` for one room, which the
/// function carries as its data (no handle to look up, no room name to read per call).
/// Without a second argument the time is the system clock's (see [`now_or_clock`]).
unsafe extern "C" fn room_admit(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: `env` and `info` are the live call's, as N-API passes them.
    unsafe {
        guarded(env, || {
            let ([cookie, now], argc, data) = args_count_and_data::<2>(env, info)?;
            // SAFETY: this callback is only ever made by `RoomAdmit::to_napi_value`, with a
            // `RoomRef` as its data, which lives until the function is collected (its
            // finalizer frees it): a function being called is not collected.
            let room = &*data.cast::<RoomRef>();
            let (mut cookie_buf, mut cookie_heap) = ([MaybeUninit::uninit(); STACK], Vec::new());
            let header = header_arg(env, cookie, &mut cookie_buf, &mut cookie_heap)?;
            let now = now_or_clock(env, now, argc >= 2)?;
            let decision = room
                .engine
                .admit_header_bytes(&room.name, header, now)
                .map_err(to_js)?;
            decision_value(env, decision)
        })
    }
}

/// A room as JavaScript receives it from `engineRoom`: its admit function (see
/// [`room_admit`]), which owns the room until the function is collected.
pub(crate) struct RoomAdmit(pub(crate) RoomRef);

impl ToNapiValue for RoomAdmit {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let data = Box::into_raw(Box::new(val.0));
        let name = c"admit";
        let mut f = ptr::null_mut();
        // SAFETY: `env` is the live call's (napi-rs converts a return value within it); the
        // name is NUL-terminated; `data` stays valid until the finalizer below frees it.
        let created = unsafe {
            sys::napi_create_function(
                env,
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(room_admit),
                data.cast(),
                &mut f,
            )
        } == sys::Status::napi_ok
            // SAFETY: as above; `f` is the function just made.
            && unsafe {
                sys::napi_add_finalizer(
                    env,
                    f,
                    data.cast(),
                    Some(free_room),
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            } == sys::Status::napi_ok;
        if !created {
            // SAFETY: `data` came from `Box::into_raw` above and no finalizer owns it; a
            // function made without one is dropped unreachable (never returned, never called).
            drop(unsafe { Box::from_raw(data) });
            return Err(napi::Error::from_reason(
                "cannot make a room's admit function",
            ));
        }
        Ok(f)
    }
}

/// Frees a room's data when its admit function is collected.
unsafe extern "C" fn free_room(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // Dropping the room releases its engine; a panic there stays here.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `data` is the `RoomRef` `RoomAdmit::to_napi_value` boxed for this function,
        // and N-API runs a finalizer once.
        drop(unsafe { Box::from_raw(data.cast::<RoomRef>()) })
    }));
}

/// A decision as `engineAdmit` returns it: `undefined` for the steady admit (a null
/// `napi_value` returned from a callback is `undefined`: no call to make one), else the
/// object.
///
/// # Safety
/// `env` must be the live call's environment.
unsafe fn decision_value(
    env: sys::napi_env,
    decision: velvet_rope::Decision,
) -> Result<sys::napi_value, JsError> {
    match steady_or_object(decision) {
        None => Ok(ptr::null_mut()),
        // SAFETY: per this function's contract.
        Some(d) => unsafe { ToNapiValue::to_napi_value(env, d) }
            .map_err(|e| invalid(format!("cannot build the decision: {e}"))),
    }
}

/// `rateLimiterTryAcquire(limiter, n)`: takes `n` permits if they are free now. Never blocks;
/// throws if `n` is more than the limiter ever gives at once.
unsafe extern "C" fn rate_limiter_try_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: `env` and `info` are the live call's, as N-API passes them.
    unsafe {
        guarded(env, || {
            let [handle, n] = args::<2>(env, info)?;
            let handle = u32_arg(env, handle, "limiter")?;
            let n = count_arg(env, n, "n", 1)?;
            let taken = match LIMITERS.with(handle, |l| l.check(n))? {
                Ok(()) => true,
                Err(Denied::ExceedsBurst { burst }) => {
                    return Err(lease_to_js(LeaseError::ExceedsLimit {
                        requested: u64::from(n),
                        limit: burst,
                    }))
                }
                Err(_) => false,
            };
            let mut out = ptr::null_mut();
            sys::napi_get_boolean(env, taken, &mut out);
            Ok(out)
        })
    }
}
