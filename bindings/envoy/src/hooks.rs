//! The functions Envoy calls (`envoy_dynamic_module_on_*`). Envoy 1.40 looks up all of an
//! HTTP filter's hooks when a configuration names the module and refuses the configuration if
//! one is missing, so every hook is exported, the ones this filter has no use for as no-ops
//! that let the stream go on. No panic crosses into Envoy: each hook that does work runs under
//! `catch_unwind`, and a panic lets the request through (logged, at most a line a minute), as
//! a failure to decide must not take a site down.
//!
//! A configuration made by `config_new` takes effect when Envoy has taken it: at its
//! scheduled event (`config_scheduled`) or its first stream (`filter_new`), whichever comes
//! first (see `filter_config`). `config_new` also defines the configuration's stats in Envoy,
//! and `config_scheduled` publishes the engine's metrics into them (see `metrics`).

use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::{self, ConfigEnvoyPtr, ConfigScheduler, EnvoyBuffer, FilterEnvoyPtr, CONTINUE};
use crate::filter_config::FilterConfig;
use crate::metrics::{EnvoyStats, PUBLISH_EVENT};
use crate::stream::Stream;

/// Hooks run only after `on_program_init` resolved Envoy's callbacks; if that ever were not
/// so, requests pass, and it is said once.
fn unresolved() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        abi::log(
            abi::LOG_ERROR,
            "velvet-rope: Envoy's callbacks are not resolved; requests pass undecided",
        )
    });
}

/// Lines about panics in hooks: at most one a minute (a steady fault must not log per
/// request).
static PANICS: abi::RateLimitedLog = abi::RateLimitedLog::new();

/// Runs `f`, turning a panic into `fallback` (and a log line, rate-limited).
fn guarded<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            PANICS.log(abi::LOG_ERROR, || {
                format!("velvet-rope: panic in {what}; request let through")
            });
            fallback
        }
    }
}

/// A configuration's first event: "Envoy has taken me, commit" (its others are
/// [`PUBLISH_EVENT`]s).
const COMMIT_EVENT: u64 = 1;

/// Schedules `config`'s commit event on Envoy's main thread (see `filter_config`), and keeps
/// the scheduler for its publish events. Without a scheduler the configuration commits with
/// its first stream, never publishes metrics, and the log says so.
fn schedule_commit(config: &FilterConfig, config_envoy: ConfigEnvoyPtr) {
    let Some(host) = abi::host() else {
        return;
    };
    // SAFETY: `config_envoy` is the live configuration Envoy is making (`config_new` runs on
    // its main thread, inside that configuration's making).
    match unsafe { ConfigScheduler::new(host, config_envoy) } {
        Some(s) => {
            s.commit(host, COMMIT_EVENT);
            *config.scheduler.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
        }
        None => abi::log(
            abi::LOG_ERROR,
            &format!(
                "velvet-rope: filter `{}`: Envoy gave no scheduler; the configuration takes \
                 effect with its first request, and publishes no metrics",
                config.name
            ),
        ),
    }
}

/// Called once when Envoy loads the module: resolves Envoy's callbacks, and refuses to load
/// (null) with a log line naming the first one missing if this Envoy's ABI is not the one the
/// module is written for.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    guarded("program init", std::ptr::null(), || match abi::resolve() {
        Ok(_) => abi::ABI_VERSION.as_ptr().cast(),
        Err(e) => {
            // Envoy's logging callbacks are what is missing: standard error (Envoy's log).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "velvet-rope: refusing to load: {e}");
            std::ptr::null()
        }
    })
}

/// A filter configuration: its engine and room, checked but not yet in effect (null,
/// refusing the configuration, with the reason logged); its stats defined in Envoy; its
/// commit event scheduled.
///
/// # Safety
/// Envoy's contract: `config_envoy` is the configuration being made; `name` and `config`
/// point to their bytes for the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: ConfigEnvoyPtr,
    name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    guarded("config new", std::ptr::null(), || {
        // SAFETY: Envoy's buffers, valid for this call; copied before it returns.
        let (name, bytes) = unsafe { (name.bytes(), config.bytes()) };
        let name = String::from_utf8_lossy(name);
        match FilterConfig::from_bytes(&name, bytes) {
            Ok(mut c) => {
                if let Some(host) = abi::host() {
                    // SAFETY: `config_new`, on the main thread: `config_envoy` is the
                    // configuration Envoy is making.
                    unsafe { c.define_metrics(host, config_envoy) };
                }
                let c = Box::new(c);
                schedule_commit(&c, config_envoy);
                Box::into_raw(c) as *const c_void
            }
            Err(e) => {
                abi::log(abi::LOG_ERROR, &format!("velvet-rope: {e}"));
                std::ptr::null()
            }
        }
    })
}

/// A configuration's event, on Envoy's main thread: its commit event (Envoy has taken the
/// configuration: it takes effect, and publishes the engine's metrics at once if it is the
/// engine's publisher now), or a publish event (see `metrics`).
///
/// # Safety
/// Envoy's contract: `config_envoy` is the configuration, which Envoy holds for the call, and
/// `config` is what `config_new` returned for it, still live.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    config_envoy: ConfigEnvoyPtr,
    config: *const c_void,
    event_id: u64,
) {
    guarded("config scheduled", (), || {
        // SAFETY: made by `config_new`, live until `config_destroy` (this function's contract).
        let Some(c) = (unsafe { config.cast::<FilterConfig>().as_ref() }) else {
            return;
        };
        if event_id == COMMIT_EVENT {
            c.commit_on_main_thread();
        }
        if event_id == COMMIT_EVENT || event_id == PUBLISH_EVENT {
            if let Some(host) = abi::host() {
                // SAFETY: Envoy's live configuration, held by Envoy for this call on its main
                // thread (this function's contract); used only within the call.
                let mut stats = unsafe { EnvoyStats::new(host, config_envoy) };
                c.publish_metrics(&mut stats);
            }
        }
    })
}

/// The configuration is gone (its streams first): it leaves its shared engine (the last one
/// stops the ticker and frees the engine).
///
/// # Safety
/// Envoy's contract: `config` is what `config_new` returned, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    guarded("config destroy", (), || {
        if !config.is_null() {
            // SAFETY: made by `config_new` with `Box::into_raw`, destroyed once by Envoy.
            drop(unsafe { Box::from_raw(config as *mut FilterConfig) });
        }
    })
}

/// A stream through the filter; the first commits its configuration if its event has not.
///
/// # Safety
/// Envoy's contract: `config` is what `config_new` returned, live while its streams are.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _filter: FilterEnvoyPtr,
) -> *const c_void {
    guarded("filter new", std::ptr::null(), || {
        let config = config.cast::<FilterConfig>();
        // SAFETY: made by `config_new` and live (this function's contract); null only if
        // Envoy broke it.
        if let Some(c) = unsafe { config.as_ref() } {
            // Envoy routes a request through it: it has been taken.
            c.ensure_committed();
        }
        Box::into_raw(Stream::take(config)) as *const c_void
    })
}

/// The request's headers: the decision.
///
/// # Safety
/// Envoy's contract: `filter` is the live filter of the stream `filter_new` made `stream` for.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    filter: FilterEnvoyPtr,
    stream: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    guarded("request headers", CONTINUE, || {
        let Some(host) = abi::host() else {
            unresolved();
            return CONTINUE;
        };
        // SAFETY: `stream` was made by `filter_new` and Envoy calls one hook of a stream at a
        // time, on its worker; `filter` is its live filter; its configuration outlives it.
        unsafe { Stream::on_request_headers(stream as *mut Stream, host, filter) }
    })
}

/// The upstream's response headers: the origin's command taken off (and followed), the
/// renewed ticket.
///
/// # Safety
/// As for `request_headers`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    filter: FilterEnvoyPtr,
    stream: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    guarded("response headers", CONTINUE, || {
        let Some(host) = abi::host() else {
            return CONTINUE;
        };
        // SAFETY: as in `request_headers`.
        let stream = unsafe { &mut *(stream as *mut Stream) };
        // SAFETY: `filter` is this stream's live filter (this function's contract), and its
        // configuration outlives it (Envoy destroys configurations after their streams).
        unsafe { stream.on_response_headers(host, filter) }
    })
}

/// The upstream's response trailers: the origin's command taken off (and followed, unless
/// it was on the headers).
///
/// # Safety
/// As for `request_headers`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    filter: FilterEnvoyPtr,
    stream: *const c_void,
) -> u32 {
    guarded("response trailers", CONTINUE, || {
        let Some(host) = abi::host() else {
            return CONTINUE;
        };
        // SAFETY: as in `request_headers`.
        let stream = unsafe { &mut *(stream as *mut Stream) };
        // SAFETY: `filter` is this stream's live filter (this function's contract), and its
        // configuration outlives it (Envoy destroys configurations after their streams).
        unsafe { stream.on_response_trailers(host, filter) }
    })
}

/// The stream is gone: its state goes back to the worker's pool.
///
/// # Safety
/// Envoy's contract: `stream` is what `filter_new` returned, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(stream: *const c_void) {
    guarded("filter destroy", (), || {
        if !stream.is_null() {
            // SAFETY: made by `filter_new` with `Box::into_raw`, destroyed once by Envoy.
            Stream::give_back(unsafe { Box::from_raw(stream as *mut Stream) });
        }
    })
}

/// Per-route module configurations are not supported (one filter per room; a route turns a
/// filter off with Envoy's `FilterConfig { disabled: true }`): refused, with a line saying so.
///
/// # Safety
/// Envoy's contract: `name` and `config` point to their bytes for the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_new(
    _name: EnvoyBuffer,
    _config: EnvoyBuffer,
) -> *const c_void {
    abi::log(
        abi::LOG_ERROR,
        "velvet-rope: per-route module configurations are not supported: use one filter per \
         room, and turn a filter off on a route with envoy.config.route.v3.FilterConfig \
         { disabled: true }",
    );
    std::ptr::null()
}

/// Never called: `per_route_config_new` makes no configuration.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_per_route_config_destroy(
    _config: *const c_void,
) {
}

/// Hooks this filter has no use for: each lets the stream go on.
macro_rules! pass {
    ($( $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty = $value:expr; )*) => {$(
        #[doc = concat!("`", stringify!($name), "`: nothing to do here.")]
        #[no_mangle]
        #[allow(clippy::unused_unit)]
        pub extern "C" fn $name($( $arg: $ty ),*) -> $ret {
            $( let _ = $arg; )*
            $value
        }
    )*};
}

pass! {
    envoy_dynamic_module_on_http_filter_request_body(f: FilterEnvoyPtr, s: *const c_void, e: bool) -> u32 = CONTINUE;
    envoy_dynamic_module_on_http_filter_request_trailers(f: FilterEnvoyPtr, s: *const c_void) -> u32 = CONTINUE;
    envoy_dynamic_module_on_http_filter_response_body(f: FilterEnvoyPtr, s: *const c_void, e: bool) -> u32 = CONTINUE;
    envoy_dynamic_module_on_http_filter_stream_complete(f: FilterEnvoyPtr, s: *const c_void) -> () = ();
    envoy_dynamic_module_on_http_filter_http_callout_done(f: FilterEnvoyPtr, s: *const c_void, id: u64, r: u32, h: *mut c_void, hn: usize, b: *mut c_void, bn: usize) -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_headers(f: FilterEnvoyPtr, s: *const c_void, id: u64, h: *mut c_void, hn: usize, e: bool) -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_data(f: FilterEnvoyPtr, s: *const c_void, id: u64, d: *const c_void, dn: usize, e: bool) -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_trailers(f: FilterEnvoyPtr, s: *const c_void, id: u64, t: *mut c_void, tn: usize) -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_complete(f: FilterEnvoyPtr, s: *const c_void, id: u64) -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_reset(f: FilterEnvoyPtr, s: *const c_void, id: u64, r: u32) -> () = ();
    envoy_dynamic_module_on_http_filter_scheduled(f: FilterEnvoyPtr, s: *const c_void, id: u64) -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_callout_done(c: ConfigEnvoyPtr, m: *const c_void, id: u64, r: u32, h: *mut c_void, hn: usize, b: *mut c_void, bn: usize) -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_headers(c: ConfigEnvoyPtr, m: *const c_void, id: u64, h: *mut c_void, hn: usize, e: bool) -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_data(c: ConfigEnvoyPtr, m: *const c_void, id: u64, d: *const c_void, dn: usize, e: bool) -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_trailers(c: ConfigEnvoyPtr, m: *const c_void, id: u64, t: *mut c_void, tn: usize) -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_complete(c: ConfigEnvoyPtr, m: *const c_void, id: u64) -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_reset(c: ConfigEnvoyPtr, m: *const c_void, id: u64, r: u32) -> () = ();
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(f: FilterEnvoyPtr, s: *const c_void) -> () = ();
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(f: FilterEnvoyPtr, s: *const c_void) -> () = ();
    envoy_dynamic_module_on_http_filter_local_reply(f: FilterEnvoyPtr, s: *const c_void, code: u32, d: EnvoyBuffer, reset: bool) -> u32 = CONTINUE;
}
