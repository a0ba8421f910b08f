//! An append-only, lock-free set of 64-bit keys (ticket ids), as 32-bit fingerprints in an
//! open-addressing table of `AtomicU64` words (two fingerprints per word), probed linearly.
//!
//! Entries are only ever added until the owner clears the whole table, and every thread probes
//! the same words in the same order and claims a free lane with a compare-and-swap, so of
//! several concurrent inserts of one key exactly one succeeds. A false positive needs another
//! key with the same 32-bit fingerprint among the few entries probed: about 1 in 10^9 when the
//! table is at most half full. If a probe ever runs out (a table far fuller than it was sized
//! for), the insert reports success: callers size tables so that this does not happen, and
//! document the direction it errs in.

use crate::hash::mix64;
use crate::sync::{AtomicU64, Ordering};

/// Longest probe before giving up.
pub(crate) const MAX_PROBE: usize = 256;

/// Where `key`'s probe starts in a table of `words` words, and its non-zero fingerprint.
#[inline]
pub(crate) fn fingerprint(key: u64, words: usize) -> (usize, u64) {
    let h = mix64(key ^ 0x5bd1_e995_9e37_79b9);
    let fp = (h >> 32).max(1);
    ((h as usize) & (words - 1), fp)
}

/// What an insert found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// This call inserted the key.
    Inserted,
    /// The key was there (another call inserted it).
    Present,
    /// The probe ran out of free lanes without finding the key: the table is full there, and
    /// cannot tell whether the key was ever inserted.
    Full,
}

/// Inserts `fp` into `table` (a power-of-two number of words) unless present.
#[inline]
pub(crate) fn insert(table: &[AtomicU64], start: usize, fp: u64) -> Insert {
    let mask = table.len() - 1;
    for i in 0..MAX_PROBE.min(table.len()) {
        let cell = &table[(start + i) & mask];
        let mut cur = cell.load(Ordering::Acquire);
        loop {
            let (lo, hi) = (cur & 0xFFFF_FFFF, cur >> 32);
            if lo == fp || hi == fp {
                return Insert::Present;
            }
            let new = if lo == 0 {
                cur | fp
            } else if hi == 0 {
                cur | (fp << 32)
            } else {
                break; // full word: probe the next
            };
            match cell.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Insert::Inserted,
                Err(actual) => cur = actual,
            }
        }
    }
    Insert::Full
}

/// Inserts `fp` into `table` unless present. True if this call inserted it, or if the table
/// is full there (see the module documentation).
#[inline]
pub(crate) fn insert_if_absent(table: &[AtomicU64], start: usize, fp: u64) -> bool {
    insert(table, start, fp) != Insert::Present
}

/// Whether `fp` is in `table`: `None` if the probe ran out of free lanes without finding it
/// (a full table cannot tell).
#[inline]
pub(crate) fn find(table: &[AtomicU64], start: usize, fp: u64) -> Option<bool> {
    let mask = table.len() - 1;
    for i in 0..MAX_PROBE.min(table.len()) {
        let w = table[(start + i) & mask].load(Ordering::Acquire);
        let (lo, hi) = (w & 0xFFFF_FFFF, w >> 32);
        if lo == fp || hi == fp {
            return Some(true);
        }
        if lo == 0 || hi == 0 {
            return Some(false); // inserts fill the first free lane, so nothing lies beyond
        }
    }
    None
}

/// Whether `fp` is in `table` (false if a full table cannot tell).
#[inline]
pub(crate) fn contains(table: &[AtomicU64], start: usize, fp: u64) -> bool {
    find(table, start, fp) == Some(true)
}
