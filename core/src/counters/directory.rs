//! The header of a shared region: what marks a region as velvet-rope's, the ephemeral ticket key
//! every process sharing it uses, and the directory of rooms (name -> where its counters lie).
//!
//! ```text
//! word 0     magic "vrENGINE"          word 8, 9    directory lock, taken at (ms)
//! word 1     format version            word 10      rooms in the directory
//! word 2     region length at start    word 11      first free byte after the rooms
//! word 3     key state                 word 12      ready (written last at start)
//! word 4..8  the ephemeral key
//! byte 128   MAX_ROOMS entries of 128 bytes: offset, size, name length, name (64 bytes)
//! ```
//! Rooms are found by name, never by position: a reload that reorders or removes rooms keeps
//! each room's counts, and a room added later takes free space after the others (or is
//! refused when there is none). Entries are only ever added; all directory access holds the
//! directory lock (attaching is rare: engine creation and reload, never a request or a tick).

use std::time::{Duration, Instant};

use crate::counters::process_lock::ProcessLock;
use crate::counters::region::Region;
use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Ordering};

/// Most rooms one shared region can hold.
pub const MAX_ROOMS: usize = 256;

const MAGIC: u64 = u64::from_le_bytes(*b"vrENGINE");
const VERSION: u64 = 2;
const ENTRY_WORDS: usize = 16;
const ENTRIES_AT: usize = 16;
/// Bytes of the header, directory included.
pub(crate) const HEADER_BYTES: usize = (ENTRIES_AT + MAX_ROOMS * ENTRY_WORDS) * 8;

const W_VERSION: usize = 1;
const W_LEN: usize = 2;
const W_KEY_STATE: usize = 3;
const W_KEY: usize = 4;
const W_LOCK: usize = 8;
const W_LOCK_SINCE: usize = 9;
const W_ROOMS: usize = 10;
const W_NEXT_FREE: usize = 11;
const W_READY: usize = 12;

/// How long attaching waits for another process that holds the directory (bounded: only
/// engine creation and reload ever wait).
const ATTACH_WAIT: Duration = Duration::from_secs(2);

/// A shared region's header.
pub(crate) struct Directory {
    header: Region,
    len: usize,
}

impl Directory {
    /// The header of the region at `base` (`len` bytes): a zeroed region gets a fresh header,
    /// one with a velvet-rope header is attached, anything else is refused.
    ///
    /// # Safety
    /// As [`Region::borrowed`] for `len` bytes at `base`.
    pub(crate) unsafe fn open(base: *mut u8, len: usize) -> Result<Self> {
        if len < HEADER_BYTES {
            return Err(Error::Region(format!(
                "{len} bytes given; the header alone takes {HEADER_BYTES}"
            )));
        }
        // SAFETY: forwarded from this function's contract (HEADER_BYTES <= len).
        let header = unsafe { Region::borrowed(base, HEADER_BYTES) }?;
        let w = header.u64s(0, ENTRIES_AT);
        match w[0].compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                w[W_VERSION].store(VERSION, Ordering::Release);
                w[W_LEN].store(len as u64, Ordering::Release);
                w[W_NEXT_FREE].store(HEADER_BYTES as u64, Ordering::Release);
                w[W_READY].store(1, Ordering::Release);
            }
            Err(found) if found != MAGIC => {
                return Err(Error::Region(
                    "not a velvet-rope region (bad magic: foreign data, or not zeroed)".into(),
                ))
            }
            Err(_) => {
                let until = Instant::now() + ATTACH_WAIT;
                while w[W_READY].load(Ordering::Acquire) == 0 {
                    if Instant::now() > until {
                        return Err(Error::Region(
                            "the region's header was never completed".into(),
                        ));
                    }
                    std::hint::spin_loop();
                }
                let version = w[W_VERSION].load(Ordering::Acquire);
                if version != VERSION {
                    return Err(Error::Region(format!(
                        "region of format version {version}, this library reads {VERSION}: \
                         start afresh with a zeroed region (or remove the state file)"
                    )));
                }
            }
        }
        Ok(Self { header, len })
    }

    fn words(&self) -> &[AtomicU64] {
        self.header.u64s(0, HEADER_BYTES / 8)
    }

    /// The region's ephemeral ticket key, made by the first process that asks.
    pub(crate) fn shared_key(&self) -> Result<[u8; 32]> {
        const EMPTY: u64 = 0;
        const WRITING: u64 = 1;
        const READY: u64 = 2;
        let w = self.words();
        let state = &w[W_KEY_STATE];
        let key_words = &w[W_KEY..W_KEY + 4];
        if state
            .compare_exchange(EMPTY, WRITING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            for k in key_words {
                k.store(crate::random::u64(), Ordering::Relaxed);
            }
            state.store(READY, Ordering::Release);
        }
        let until = Instant::now() + ATTACH_WAIT;
        while state.load(Ordering::Acquire) != READY {
            if Instant::now() > until {
                return Err(Error::Region(
                    "the region's ticket key was never written".into(),
                ));
            }
            std::hint::spin_loop();
        }
        let mut key = [0u8; 32];
        for (chunk, k) in key.chunks_mut(8).zip(key_words) {
            chunk.copy_from_slice(&k.load(Ordering::Acquire).to_le_bytes());
        }
        Ok(key)
    }

    /// Where the counters of room `name` lie: `(offset, size)` of its entry, or, for a room
    /// the region does not hold yet, `needed` bytes taken from the free space after the other
    /// rooms. A room keeps its place (and its counts) across reloads and restarts.
    pub(crate) fn room(&self, name: &str, needed: usize) -> Result<(usize, usize)> {
        let name = name.as_bytes();
        if name.is_empty() || name.len() > 64 {
            return Err(Error::Region("room names take 1 to 64 bytes".into()));
        }
        let w = self.words();
        let lock = ProcessLock::new(&w[W_LOCK], &w[W_LOCK_SINCE]);
        let until = Instant::now() + ATTACH_WAIT;
        let held = loop {
            if let Some(held) = lock.try_lock() {
                break held;
            }
            if Instant::now() > until {
                return Err(Error::Region(
                    "another process holds the region's directory".into(),
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let found = self.find_or_add(name, needed);
        lock.unlock(held);
        found
    }

    fn find_or_add(&self, name: &[u8], needed: usize) -> Result<(usize, usize)> {
        let w = self.words();
        let rooms = (w[W_ROOMS].load(Ordering::Acquire) as usize).min(MAX_ROOMS);
        for i in 0..rooms {
            let e = entry(w, i);
            if entry_name_is(e, name) {
                let offset = e[0].load(Ordering::Acquire);
                let size = e[1].load(Ordering::Acquire);
                // Bytes from a file are checked before they are trusted as a place in memory.
                let inside = offset >= HEADER_BYTES as u64
                    && offset % 128 == 0
                    && size >= 128
                    && offset
                        .checked_add(size)
                        .is_some_and(|end| end <= self.len as u64);
                if !inside {
                    return Err(Error::Region(format!(
                        "the region's entry for `{}` is corrupt (offset {offset}, size {size}, \
                         region {} bytes)",
                        String::from_utf8_lossy(name),
                        self.len
                    )));
                }
                return Ok((offset as usize, size as usize));
            }
        }
        if rooms == MAX_ROOMS {
            return Err(Error::Region(format!(
                "the region already holds {MAX_ROOMS} rooms"
            )));
        }
        let next = w[W_NEXT_FREE].load(Ordering::Acquire);
        let offset = usize::try_from(next)
            .ok()
            .and_then(|n| n.checked_add(127))
            .map_or(usize::MAX, |n| n / 128 * 128)
            .max(HEADER_BYTES);
        let fits = offset
            .checked_add(needed)
            .is_some_and(|end| end <= self.len);
        if !fits {
            return Err(Error::Region(format!(
                "no room for `{}` ({needed} bytes) after the {rooms} room(s) the region holds \
                 ({} of {} bytes used): rooms can be reordered or removed in place, but a new \
                 or larger room needs a larger region (restart with a fresh one)",
                String::from_utf8_lossy(name),
                offset,
                self.len
            )));
        }
        let e = entry(w, rooms);
        e[0].store(offset as u64, Ordering::Relaxed);
        e[1].store(needed as u64, Ordering::Relaxed);
        e[2].store(name.len() as u64, Ordering::Relaxed);
        for (cell, chunk) in e[3..11].iter().zip(padded_name(name).chunks(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            cell.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        w[W_NEXT_FREE].store((offset + needed) as u64, Ordering::Release);
        w[W_ROOMS].store(rooms as u64 + 1, Ordering::Release);
        Ok((offset, needed))
    }
}

fn entry(w: &[AtomicU64], i: usize) -> &[AtomicU64] {
    let at = ENTRIES_AT + i * ENTRY_WORDS;
    &w[at..at + ENTRY_WORDS]
}

fn padded_name(name: &[u8]) -> [u8; 64] {
    let mut out = [0u8; 64];
    out[..name.len()].copy_from_slice(name);
    out
}

fn entry_name_is(e: &[AtomicU64], name: &[u8]) -> bool {
    if e[2].load(Ordering::Acquire) != name.len() as u64 {
        return false;
    }
    let want = padded_name(name);
    e[3..11]
        .iter()
        .zip(want.chunks(8))
        .all(|(cell, chunk)| cell.load(Ordering::Acquire).to_le_bytes() == chunk)
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rooms_are_found_by_name_and_added_while_space_lasts() {
        let size = HEADER_BYTES + 3 * 1024;
        let backing = Region::owned(size);
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        // SAFETY: `backing` outlives both views and is only accessed through atomics.
        let d = unsafe { Directory::open(base, size) }.unwrap();
        let a = d.room("a", 1024).unwrap();
        let b = d.room("b", 1024).unwrap();
        assert_eq!(a, (HEADER_BYTES, 1024));
        assert_eq!(b, (HEADER_BYTES + 1024, 1024));
        // SAFETY: as above.
        let again = unsafe { Directory::open(base, size) }.unwrap();
        assert_eq!(again.room("b", 1024).unwrap(), b, "by name, not position");
        assert_eq!(again.room("a", 1024).unwrap(), a);
        assert_eq!(again.shared_key().unwrap(), d.shared_key().unwrap());
        again.room("c", 1024).unwrap();
        let err = again.room("d", 1024).unwrap_err().to_string();
        assert!(err.contains("no room for `d`"), "{err}");
    }
}
