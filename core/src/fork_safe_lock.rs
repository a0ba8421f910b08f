//! A lock for a process's own state that survives `fork`.
//!
//! A `std::sync::Mutex` held by some thread when the process forks stays held in the child,
//! by a thread that does not exist there: the child can never take it (a pre-fork server such
//! as gunicorn `--preload` forks while the engine's ticker thread ticks). This lock records
//! the process that holds it instead of a thread: the memory it lives in is private to the
//! process, so a holder of another process id held it in the parent, before the fork, and the
//! child takes it over. (What that thread was doing is left half done in the child's copy; the
//! state guarded here is written so that it stays usable: see the engine.)
//!
//! Threads of one process exclude each other as with a mutex; `lock` waits by sleeping in
//! short steps (it guards work that takes microseconds to milliseconds: ticks and reloads).
//! Public for the bindings, whose own per-engine state (a sync loop) has the same need.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A mutual-exclusion lock that a forked child can take over (see the module documentation).
pub struct ForkSafeLock<T> {
    /// The holder's process id, or 0.
    owner: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and one guard exists at a time per process
// (the owner word is taken with a compare-and-swap); a guard of the parent process cannot be
// used in the child (its thread does not exist there).
unsafe impl<T: Send> Sync for ForkSafeLock<T> {}
// SAFETY: as above; moving the lock moves the value.
unsafe impl<T: Send> Send for ForkSafeLock<T> {}

/// Access to a [`ForkSafeLock`]'s value; released when dropped.
pub struct Guard<'a, T> {
    lock: &'a ForkSafeLock<T>,
    me: u32,
}

impl<T> ForkSafeLock<T> {
    /// A free lock around `value`.
    pub fn new(value: T) -> Self {
        Self {
            owner: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if no thread of this process holds it (one of another process held it
    /// before a fork, and is taken over). Never waits.
    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        let me = std::process::id();
        let mut current = self.owner.load(Ordering::Acquire);
        loop {
            if current == me {
                return None;
            }
            match self
                .owner
                .compare_exchange(current, me, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(Guard { lock: self, me }),
                Err(actual) => current = actual,
            }
        }
    }

    /// Takes the lock, waiting for another thread of this process to release it.
    pub fn lock(&self) -> Guard<'_, T> {
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl<T> std::fmt::Debug for ForkSafeLock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkSafeLock")
            .field("owner", &self.owner.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T> std::ops::Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one of this process (see `try_lock`), and guards of
        // other processes live in other address spaces.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // A child that took the lock over leaves its parent's guards (which it never runs)
        // alone: only our own mark is cleared.
        let _ = self
            .lock
            .owner
            .compare_exchange(self.me, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_holder_per_process_and_a_forked_child_takes_over() {
        let lock = ForkSafeLock::new(5u32);
        let mut g = lock.try_lock().expect("free");
        *g += 1;
        assert!(lock.try_lock().is_none(), "held by this process");
        // The state a child would inherit: held by its parent.
        lock.owner.store(std::process::id() + 1, Ordering::Release);
        std::mem::forget(g);
        let taken = lock
            .try_lock()
            .expect("another process's hold is taken over");
        assert_eq!(*taken, 6);
        drop(taken);
        assert_eq!(lock.owner.load(Ordering::Acquire), 0);
    }

    /// A real fork while another thread holds the lock: the child takes it at once.
    #[test]
    fn a_child_forked_mid_hold_takes_the_lock() {
        let lock = std::sync::Arc::new(ForkSafeLock::new(()));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let l2 = lock.clone();
        let holder = std::thread::spawn(move || {
            let _g = l2.lock();
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
        });
        held_rx.recv().unwrap();
        // SAFETY: the child only uses the lock (atomics and no allocation) and leaves with
        // `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = lock.try_lock().is_some();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(lock.try_lock().is_none(), "still held here");
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(lock.try_lock().is_some());
    }
}
