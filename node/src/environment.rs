//! The end of a JavaScript environment (a `worker_threads` worker that ends or is
//! terminated, or the main thread at exit): the handles it still holds are freed then, since
//! its `FinalizationRegistry` callbacks never run (see `handles`).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use napi::{sys, Env};

use crate::handles::enter_environment;

/// Numbers the environment loading the module and asks N-API to call [`torn_down`] when it
/// ends.
pub(crate) fn register(env: &Env) -> napi::Result<()> {
    let owner = enter_environment();
    // SAFETY: `env` is the environment loading the module; the hook's data is a number, not a
    // pointer, so nothing it points to can outlive anything.
    let status = unsafe {
        sys::napi_add_env_cleanup_hook(env.raw(), Some(torn_down), owner as usize as *mut c_void)
    };
    if status != sys::Status::napi_ok {
        return Err(napi::Error::from_reason(
            "cannot register the environment's cleanup hook",
        ));
    }
    Ok(())
}

/// Frees what environment `data` (its number) still holds: its engines (their sync loops
/// stopped), coordinators (their upstream loops stopped), rate limiters and gauges.
unsafe extern "C" fn torn_down(data: *mut c_void) {
    let owner = data as usize as u64;
    // No panic may cross into N-API.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        crate::engine::free_environment(owner);
        crate::lease::free_environment(owner);
    }));
}
