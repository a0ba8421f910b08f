//! `routerNew`: which room decides a request, the core's `velvet_rope::routing::Router`, as a
//! JavaScript function of the request target.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use napi::bindgen_prelude::ToNapiValue;
use napi::sys;
use napi_derive::napi;
use velvet_rope::routing::{CaseRule, Route, Router};

use crate::errors::{invalid, JsError};
use crate::hot::{args_count_and_data, guarded};

/// UTF-16 units of a target read on the stack before falling back to the heap.
const STACK_UNITS: usize = 2048;

/// Which requests a router sends to which room.
#[napi(object)]
pub struct RouterSpec {
    /// `[prefix, room]` pairs: paths under the prefix go to the room (the longest prefix wins).
    pub rooms: Vec<Vec<String>>,
    /// The room of paths under no prefix (none: they are not decided).
    pub default_room: Option<String>,
    /// Prefixes of paths never decided.
    pub bypass: Vec<String>,
    /// Whether the application's router tells `/Shop` from `/shop`; absent: its routers may
    /// do either (an Express app's), and a path either rule puts in a room is decided.
    pub case_sensitive: Option<bool>,
}

/// A router as JavaScript receives it from `routerNew` (see [`route`]).
pub struct RouteFn(Router);

/// The router of `spec`: a function `route(target)` answering with the index of the room
/// deciding the request with that target (its request-target as received, `req.url`) in
/// the function's `rooms` array, or -1 when the request is not decided. Throws
/// `InvalidArgumentError` for a prefix that does not start with `/` (or holds `?`, `#` or
/// control characters), or when there is neither a default room nor a prefix.
#[napi(ts_return_type = "((target: string) => number) & { readonly rooms: string[] }")]
pub fn router_new(spec: RouterSpec) -> napi::Result<RouteFn, &'static str> {
    let mut pairs = Vec::with_capacity(spec.rooms.len());
    for pair in spec.rooms {
        match <[String; 2]>::try_from(pair) {
            Ok([prefix, room]) => pairs.push((prefix, room)),
            Err(_) => return Err(invalid("each of `rooms` must be a [prefix, room] pair")),
        }
    }
    let case = match spec.case_sensitive {
        Some(true) => CaseRule::Sensitive,
        Some(false) => CaseRule::Insensitive,
        None => CaseRule::Either,
    };
    Router::new(pairs, spec.default_room.as_deref(), spec.bypass, case)
        .map(RouteFn)
        .map_err(|e| invalid(e.to_string()))
}

impl ToNapiValue for RouteFn {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        let rooms = val.0.rooms().to_vec();
        let data = Box::into_raw(Box::new(val.0));
        let name = c"route";
        let mut f = ptr::null_mut();
        // SAFETY: `env` is the live call's (napi-rs converts a return value within it); the
        // name is NUL-terminated; `data` stays valid until the finalizer below frees it.
        let created = unsafe {
            sys::napi_create_function(
                env,
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(route),
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
                    Some(free_router),
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            } == sys::Status::napi_ok;
        if !created {
            // SAFETY: `data` came from `Box::into_raw` above and no finalizer owns it; a
            // function made without one is dropped unreachable (never returned, never called).
            drop(unsafe { Box::from_raw(data) });
            return Err(napi::Error::from_reason("cannot make a router function"));
        }
        // SAFETY: `env` is the live call's; `rooms` converts to an array of strings.
        let names = unsafe { Vec::<String>::to_napi_value(env, rooms) }?;
        // SAFETY: `f` and `names` are values of this call; the name is NUL-terminated.
        let status = unsafe { sys::napi_set_named_property(env, f, c"rooms".as_ptr(), names) };
        if status != sys::Status::napi_ok {
            return Err(napi::Error::from_reason("cannot make a router function"));
        }
        Ok(f)
    }
}

/// Frees a router when its function is collected.
unsafe extern "C" fn free_router(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `data` is the `Router` `RouteFn::to_napi_value` boxed for this function, and
        // N-API runs a finalizer once.
        drop(unsafe { Box::from_raw(data.cast::<Router>()) })
    }));
}

/// A router's function, `route(target)`: the index of the request's room, or -1.
unsafe extern "C" fn route(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: `env` and `info` are the live call's, as N-API passes them.
    unsafe {
        guarded(env, || {
            let ([target], _, data) = args_count_and_data::<1>(env, info)?;
            // SAFETY: this callback is only ever made by `RouteFn::to_napi_value`, with a
            // `Router` as its data, which lives until the function is collected (its
            // finalizer frees it): a function being called is not collected.
            let router = &*data.cast::<Router>();
            let mut units = [MaybeUninit::<u16>::uninit(); STACK_UNITS];
            let (mut bytes, mut heap) = ([MaybeUninit::<u8>::uninit(); STACK_UNITS], Vec::new());
            let target = target_arg(env, target, &mut units, &mut bytes, &mut heap)?;
            let index = match router.route(target) {
                Route::Room(i) => i as i32,
                Route::Bypass | Route::Unrouted => -1,
            };
            let mut out = ptr::null_mut();
            sys::napi_create_int32(env, index, &mut out);
            Ok(out)
        })
    }
}

/// A request target argument as the bytes the client sent: Node's HTTP parser makes each byte
/// one character, so a string of characters up to U+00FF is read one byte per character;
/// a string with others (made by hand, or by `inject`) is read as UTF-8. Read as UTF-16, so
/// that no character is ever taken for its low byte.
///
/// # Safety
/// `env` and `v` must belong to the live call.
unsafe fn target_arg<'b>(
    env: sys::napi_env,
    v: sys::napi_value,
    units: &'b mut [MaybeUninit<u16>; STACK_UNITS],
    bytes: &'b mut [MaybeUninit<u8>; STACK_UNITS],
    heap: &'b mut Vec<u8>,
) -> Result<&'b [u8], JsError> {
    let not_a_string = || invalid("`target` must be a string");
    let mut written = 0usize;
    // SAFETY: per this function's contract; `units` is writable for `STACK_UNITS` units;
    // N-API writes at most `STACK_UNITS - 1` and a NUL, and reports how many it wrote.
    let status = unsafe {
        sys::napi_get_value_string_utf16(
            env,
            v,
            units.as_mut_ptr().cast(),
            STACK_UNITS,
            &mut written,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(not_a_string());
    }
    let owned: Vec<u16>;
    let read: &[u16] = if written + 1 < STACK_UNITS {
        // SAFETY: N-API initialised the first `written` units (`written < STACK_UNITS`).
        unsafe { std::slice::from_raw_parts(units.as_ptr().cast::<u16>(), written) }
    } else {
        // Perhaps cut short: ask the length, then read it all.
        let mut len = 0usize;
        // SAFETY: as above; a null buffer asks only for the length.
        if unsafe { sys::napi_get_value_string_utf16(env, v, ptr::null_mut(), 0, &mut len) }
            != sys::Status::napi_ok
        {
            return Err(not_a_string());
        }
        let mut all = vec![0u16; len + 1];
        // SAFETY: as above; `all` is writable for `len + 1` units.
        let status = unsafe {
            sys::napi_get_value_string_utf16(env, v, all.as_mut_ptr(), len + 1, &mut written)
        };
        if status != sys::Status::napi_ok {
            return Err(not_a_string());
        }
        all.truncate(written);
        owned = all;
        &owned
    };
    if read.iter().all(|&u| u < 0x100) {
        if read.len() <= STACK_UNITS {
            for (byte, &unit) in bytes.iter_mut().zip(read) {
                byte.write(unit as u8);
            }
            // SAFETY: the first `read.len()` bytes were just written.
            return Ok(unsafe {
                std::slice::from_raw_parts(bytes.as_ptr().cast::<u8>(), read.len())
            });
        }
        heap.extend(read.iter().map(|&u| u as u8));
    } else {
        heap.extend_from_slice(String::from_utf16_lossy(read).as_bytes());
    }
    Ok(heap)
}
