//! Randomness for ticket ids and AEAD nonces: a per-thread ChaCha generator seeded from the
//! operating system, reseeded after `fork`.
//!
//! Why not `rand::thread_rng()` alone: nginx (and any pre-fork server) creates the engine in
//! the master and forks workers, and a child inherits its parent's generator state. rand's
//! own fork protection only takes effect at its next reseed, after the buffered output, so
//! the first few nonces of every worker would repeat across workers under the same key, and a
//! repeated nonce undoes an AEAD's guarantees (AES-GCM leaks its authentication key; AEGIS
//! its state). Here a `pthread_atfork` child handler bumps a process-wide generation (one
//! atomic load per draw to check it), and a thread whose generator is from another
//! generation reseeds from the OS before drawing. No syscall per ticket: one `getrandom` per
//! thread per process.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

static FORKS: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

thread_local! {
    static RNG: RefCell<Option<(u64, StdRng)>> = const { RefCell::new(None) };
}

/// How many times this process's ancestry forked since the handler was registered: changes in
/// a child right after `fork`. Also used by the lease clock, whose ticker thread does not
/// survive a fork.
#[inline]
pub(crate) fn fork_generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add, which is async-signal-safe
        // and valid in a freshly forked child; no prepare or parent handlers.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
    FORKS.load(Ordering::Acquire)
}

/// Fills `out` with fresh random bytes.
#[inline]
pub(crate) fn fill(out: &mut [u8]) {
    #[cfg(feature = "simulation")]
    if let Some(h) = crate::simulation::hooks() {
        if h.random(out) {
            return;
        }
    }
    let generation = fork_generation();
    let drew = RNG.try_with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut() {
            Some((g, rng)) if *g == generation => rng.fill_bytes(out),
            _ => {
                let mut rng = StdRng::from_entropy();
                rng.fill_bytes(out);
                *slot = Some((generation, rng));
            }
        }
    });
    if drew.is_err() {
        // Thread-local storage is being torn down: draw straight from the OS.
        rand::rngs::OsRng.fill_bytes(out);
    }
}

/// A fresh random u64.
#[inline]
pub(crate) fn u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child draws different bytes from its parent, even right after the fork.
    #[test]
    fn a_forked_child_does_not_repeat_the_parent() {
        let _ = u64(); // the parent's generator is live and has buffered output
        let mut pipe = [0i32; 2];
        // SAFETY: creating a pipe into a local array.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: the child only draws, writes 8 bytes and exits without unwinding.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let v = u64().to_le_bytes();
            // SAFETY: writing 8 bytes to the pipe, then leaving at once.
            unsafe {
                libc::write(pipe[1], v.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        let parent = u64().to_le_bytes();
        let mut child = [0u8; 8];
        // SAFETY: reading 8 bytes from the pipe into a local buffer; reaping the child.
        unsafe {
            assert_eq!(libc::read(pipe[0], child.as_mut_ptr().cast(), 8), 8);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        assert_ne!(parent, child, "the child repeated the parent's next draw");
    }
}
