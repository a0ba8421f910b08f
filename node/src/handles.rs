//! Handles: the native objects JavaScript holds, as numbers.
//!
//! napi-rs's `External` checks every handle it is given against a global registry behind a
//! mutex (a hash lookup under a lock, on every call): too slow for the admit path. A handle here
//! is a `u32`, `generation << 16 | slot`, into a fixed table of `ArcSwapOption` slots: a call
//! loads its slot lock-free (an `Arc` guard, no lock) and checks the generation, so a handle
//! that was freed, or one made up by calling the binding directly, is refused with an error,
//! never dereferenced. JavaScript frees a handle when the object holding it is collected
//! (`FinalizationRegistry`), and a call already in progress keeps its `Arc` alive.
//!
//! **Environments.** The tables are the process's, shared by the main thread and every
//! `worker_threads` worker, but a `FinalizationRegistry` callback never runs for an
//! environment that is torn down (a worker that ended or was terminated). So each handle
//! records the environment (the JavaScript thread) that made it, and when an environment is
//! torn down `env` frees what it still owned (see [`Handles::take_owned_by`]); otherwise
//! workers that come and go would fill the table for good.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

use crate::errors::{invalid, JsError};

/// Slots per table.
const SLOTS: usize = 1 << 16;

struct Entry<T> {
    generation: u16,
    /// The environment that made the handle (0: none known).
    owner: u64,
    value: Arc<T>,
}

thread_local! {
    /// The environment running on this thread (each JavaScript thread runs one).
    static OWNER: Cell<u64> = const { Cell::new(0) };
}

/// The next environment's number.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// Numbers the environment starting on this thread (the module is loaded once per
/// environment, on its thread); handles made on this thread from now on are its own.
pub(crate) fn enter_environment() -> u64 {
    let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
    OWNER.with(|o| o.set(owner));
    owner
}

/// A table of handles to values of one type.
pub(crate) struct Handles<T> {
    slots: Box<[ArcSwapOption<Entry<T>>]>,
    /// Free slots, and each slot's next generation (allocation and freeing only).
    free: Mutex<(Vec<u16>, Vec<u16>)>,
    what: &'static str,
}

impl<T> Handles<T> {
    /// An empty table for values called `what` in errors.
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            slots: (0..SLOTS).map(|_| ArcSwapOption::empty()).collect(),
            free: Mutex::new((
                (0..SLOTS as u32).rev().map(|s| s as u16).collect(),
                vec![0; SLOTS],
            )),
            what,
        }
    }

    /// Stores `value`; its handle.
    pub(crate) fn insert(&self, value: T) -> Result<u32, JsError> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let (slots, generations) = &mut *free;
        let slot = slots
            .pop()
            .ok_or_else(|| invalid(format!("more than {SLOTS} live {}s", self.what)))?;
        let generation = generations[usize::from(slot)];
        self.slots[usize::from(slot)].store(Some(Arc::new(Entry {
            generation,
            owner: OWNER.with(Cell::get),
            value: Arc::new(value),
        })));
        Ok(u32::from(generation) << 16 | u32::from(slot))
    }

    /// The value of `handle`, or an error if it is not a live handle of this table.
    #[inline]
    pub(crate) fn get(&self, handle: u32) -> Result<Arc<T>, JsError> {
        let slot = (handle & 0xffff) as usize;
        let entry = self.slots[slot].load();
        match &*entry {
            Some(e) if u32::from(e.generation) == handle >> 16 => Ok(e.value.clone()),
            _ => Err(self.dead(handle)),
        }
    }

    /// Runs `f` on the value of `handle` without taking a reference count.
    #[inline]
    pub(crate) fn with<R>(&self, handle: u32, f: impl FnOnce(&T) -> R) -> Result<R, JsError> {
        let slot = (handle & 0xffff) as usize;
        let entry = self.slots[slot].load();
        match &*entry {
            Some(e) if u32::from(e.generation) == handle >> 16 => Ok(f(&e.value)),
            _ => Err(self.dead(handle)),
        }
    }

    #[cold]
    #[inline(never)]
    fn dead(&self, handle: u32) -> JsError {
        invalid(format!(
            "{} handle {handle} is not live (freed, or not made by this module)",
            self.what
        ))
    }

    /// Frees every handle `owner` made and still holds (its environment is torn down); their
    /// handles. Looks at every slot: once per environment's end, not per call.
    pub(crate) fn take_owned_by(&self, owner: u64) -> Vec<u32> {
        let mut taken = Vec::new();
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let (slots, generations) = &mut *free;
        for (slot, cell) in self.slots.iter().enumerate() {
            let current = cell.load();
            if let Some(e) = &*current {
                if e.owner == owner {
                    taken.push(u32::from(e.generation) << 16 | slot as u32);
                    cell.store(None);
                    generations[slot] = generations[slot].wrapping_add(1);
                    slots.push(slot as u16);
                }
            }
        }
        taken
    }

    /// Frees `handle` (a handle that is not live is ignored).
    pub(crate) fn remove(&self, handle: u32) {
        let slot = (handle & 0xffff) as u16;
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.slots[usize::from(slot)].load();
        if matches!(&*current, Some(e) if u32::from(e.generation) == handle >> 16) {
            self.slots[usize::from(slot)].store(None);
            let (slots, generations) = &mut *free;
            generations[usize::from(slot)] = generations[usize::from(slot)].wrapping_add(1);
            slots.push(slot);
        }
    }
}
