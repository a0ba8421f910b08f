//! The one atomics shim of the crate.
//!
//! Every lock-free structure imports its atomics from here. Under `--cfg velvet_rope_loom`
//! they are loom's model-checked atomics; otherwise they are `std`'s. Nothing else in the
//! crate names `std::sync::atomic` directly, so every structure can be checked by loom
//! without code changes.

#[cfg(velvet_rope_loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(not(velvet_rope_loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

#[cfg(velvet_rope_loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(velvet_rope_loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::Mutex;
