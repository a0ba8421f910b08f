//! Pointer + length arguments turned into Rust slices and strings.

use crate::error::{null, Failure, VR_INVALID_UTF8};

/// Bytes at `ptr` (`len` of them); NULL with length 0 is empty.
///
/// # Safety
/// `ptr` must be NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(
    ptr: *const std::ffi::c_char,
    len: usize,
    name: &str,
) -> Result<&'a [u8], Failure> {
    if ptr.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(null(name)) };
    }
    // SAFETY: non-null, and the caller promised `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// UTF-8 text at `ptr` (`len` bytes).
///
/// # Safety
/// As for [`bytes`].
pub(crate) unsafe fn text<'a>(
    ptr: *const std::ffi::c_char,
    len: usize,
    name: &str,
) -> Result<&'a str, Failure> {
    // SAFETY: forwarded.
    let b = unsafe { bytes(ptr, len, name) }?;
    std::str::from_utf8(b)
        .map_err(|e| Failure(VR_INVALID_UTF8, format!("`{name}` is not UTF-8: {e}")))
}

/// A NUL-terminated UTF-8 string (paths).
///
/// # Safety
/// `ptr` must be NULL or point to a NUL-terminated string.
pub(crate) unsafe fn c_text<'a>(
    ptr: *const std::ffi::c_char,
    name: &str,
) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    let c = unsafe { std::ffi::CStr::from_ptr(ptr) };
    c.to_str()
        .map_err(|e| Failure(VR_INVALID_UTF8, format!("`{name}` is not UTF-8: {e}")))
}

/// Writes `value` through `out`, which must not be NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub(crate) unsafe fn write<T>(out: *mut T, value: T, name: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-null and writable per the caller.
    unsafe { out.write(value) };
    Ok(())
}
