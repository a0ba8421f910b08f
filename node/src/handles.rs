//! Handles: the native objects JavaScript holds, as numbers.
//!
//! napi-rs's `External` checks every handle it is given against a global registry behind a
//! mutex (a hash lookup under a lock, on every call): too slow for the admit path. A handle here
//! is a `u32`, `generation << 16 | slot`, into a fixed table of `ArcSwapOption` slots: a call
//! loads its slot lock-free (an `Arc` guard, no lock) and checks the generation, so a handle
//! that was freed, or one made up by calling the binding directly, is refused with an error,
//! never dereferenced. JavaScript frees a handle when the object holding it is collected
//! (`FinalizationRegistry`), and a call already in progress keeps its `Arc` alive.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

use crate::errors::{invalid, JsError};

/// Slots per table.
const SLOTS: usize = 1 << 16;

struct Entry<T> {
    generation: u16,
    value: Arc<T>,
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
