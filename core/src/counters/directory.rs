//! The header of a shared region: what marks a region as velvet-rope's, the ephemeral ticket key
//! every process sharing it uses, and the directory of rooms (name -> where its counters lie).
//!
//! ```text
//! word 0     magic "vrENGINE"          word 8       directory lock (see `process_lock`)
//! word 1     format version            word 10      rooms in the directory
//! word 2     region length at start    word 11      first free byte after the rooms
//! word 3     key state                 word 12      ready (written last at start)
//! word 4..8  the ephemeral key
//! byte 128   MAX_ROOMS entries of 128 bytes: offset, size, name length, name (64 bytes)
//! ```
//! Rooms are found by name, never by position: a reload that reorders or removes rooms keeps
//! each room's counts, and a room added later takes free space after the others (or is
//! refused when there is none). Entries are only ever added. Finding or adding a room and
//! laying out its counters happen under the directory lock (attaching is rare: engine creation
//! and reload, never a request or a tick), so a room header found incomplete under the lock
//! was left by a process that died laying it out, and is laid out again.

use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::counters::process_lock::ProcessLock;
use crate::counters::region::Region;
use crate::counters::room_counters::RoomCounters;
use crate::counters::room_layout::RoomLayout;
use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Ordering};

/// Most rooms one shared region can hold.
pub const MAX_ROOMS: usize = 256;

const MAGIC: u64 = u64::from_le_bytes(*b"vrENGINE");
const VERSION: u64 = 3;
const ENTRY_WORDS: usize = 16;
const ENTRIES_AT: usize = 16;
/// Bytes of the header, directory included.
pub(crate) const HEADER_BYTES: usize = (ENTRIES_AT + MAX_ROOMS * ENTRY_WORDS) * 8;

const W_VERSION: usize = 1;
const W_LEN: usize = 2;
const W_KEY_STATE: usize = 3;
const W_KEY: usize = 4;
const W_LOCK: usize = 8;
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
    /// one with a velvet-rope header is attached, anything else is refused. With `exclusive`
    /// the caller guarantees that no other process opens the region meanwhile (a state file's
    /// `flock`), so a header found incomplete was left by a process that died laying it out,
    /// and is laid out again; otherwise another process may be laying it out, and it is waited
    /// for (bounded).
    ///
    /// # Safety
    /// As [`Region::borrowed`] for `len` bytes at `base`.
    pub(crate) unsafe fn open(base: *mut u8, len: usize, exclusive: bool) -> Result<Self> {
        if len < HEADER_BYTES {
            return Err(Error::Region(format!(
                "{len} bytes given; the header alone takes {HEADER_BYTES}"
            )));
        }
        // SAFETY: forwarded from this function's contract (HEADER_BYTES <= len).
        let header = unsafe { Region::borrowed(base, HEADER_BYTES) }?;
        let w = header.u64s(0, ENTRIES_AT);
        let lay_out = || {
            w[W_VERSION].store(VERSION, Ordering::Release);
            w[W_LEN].store(len as u64, Ordering::Release);
            w[W_NEXT_FREE].store(HEADER_BYTES as u64, Ordering::Release);
            w[W_READY].store(1, Ordering::Release);
        };
        match w[0].compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => lay_out(),
            Err(_) if exclusive && w[W_READY].load(Ordering::Acquire) == 0 => {
                // Its creator died before finishing: it held no rooms yet.
                for word in &w[1..] {
                    word.store(0, Ordering::Relaxed);
                }
                lay_out();
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

    /// The region's ephemeral ticket key, made by the first process that asks. The process
    /// making it holds the key's state word as a [`ProcessLock`] while it writes, then marks
    /// it ready: a process that dies writing it (or is stopped for the lock's timeout) is taken
    /// over by the next that asks, which writes a whole key of its own, so a state file is
    /// never left with a key nobody can finish. The writer checks that it still holds the word
    /// before each word of the key.
    pub(crate) fn shared_key(&self) -> Result<[u8; 32]> {
        const READY: u64 = u64::MAX;
        let w = self.words();
        let state = &w[W_KEY_STATE];
        let key_words = &w[W_KEY..W_KEY + 4];
        let ready = || state.load(Ordering::Acquire) == READY;
        let write = || {
            if ready() {
                return true;
            }
            let Some(held) = ProcessLock::new(state).try_lock_unless(READY) else {
                return false;
            };
            let mut complete = true;
            for k in key_words {
                if !held.still_held() {
                    complete = false;
                    break;
                }
                k.store(crate::random::u64(), Ordering::Release);
            }
            crate::env::fault_point(crate::env::FaultPoint::KeyWritten);
            complete && held.publish(READY)
        };
        if !crate::env::wait_until(ATTACH_WAIT, Duration::from_micros(200), write) {
            return Err(Error::Region(
                "the region's ticket key was never written (another process holds it)".into(),
            ));
        }
        let mut key = [0u8; 32];
        for (chunk, k) in key.chunks_mut(8).zip(key_words) {
            chunk.copy_from_slice(&k.load(Ordering::Acquire).to_le_bytes());
        }
        Ok(key)
    }

    /// The counters of room `name` (needing `needed`, with `settings`): found by name and
    /// attached, or, for a room the region does not hold yet, laid out in free space after the
    /// other rooms. A room keeps its place (and its counts) across reloads and restarts.
    pub(crate) fn attach_room(
        &self,
        base: *mut u8,
        name: &str,
        needed: RoomLayout,
        settings: &Settings,
    ) -> Result<RoomCounters> {
        let name = name.as_bytes();
        if name.is_empty() || name.len() > 64 {
            return Err(Error::Region("room names take 1 to 64 bytes".into()));
        }
        let w = self.words();
        let lock = ProcessLock::new(&w[W_LOCK]);
        let mut held = None;
        if !crate::env::wait_until(ATTACH_WAIT, Duration::from_micros(200), || {
            held = lock.try_lock();
            held.is_some()
        }) {
            return Err(Error::Region(
                "another process holds the region's directory".into(),
            ));
        }
        let _held = held;
        let (offset, size) = self.find_or_add(name, needed.size())?;
        // SAFETY: `find_or_add` only returns places inside the region (checked), at multiples
        // of 128 bytes from the 128-aligned base; the region's contract covers the rest.
        let region = unsafe { Region::borrowed(base.add(offset), size) }?;
        RoomCounters::attach(region, needed, settings)
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
        let settings = Settings {
            shards: 1,
            ..Settings::default()
        };
        let layout = |name: &str| {
            let mut r = crate::config::RoomConfig::new(name, 10, 10);
            r.max_live_waiters = 1024;
            r.queue_buckets = 4;
            RoomLayout::of(&r, &settings)
        };
        let room = layout("a").size();
        let size = HEADER_BYTES + 3 * room;
        let backing = Region::owned(size);
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        // SAFETY: `backing` outlives both views and is only accessed through atomics.
        let d = unsafe { Directory::open(base, size, false) }.unwrap();
        let a = d.attach_room(base, "a", layout("a"), &settings).unwrap();
        a.open_pool().grant(4, 0);
        d.attach_room(base, "b", layout("b"), &settings).unwrap();
        // SAFETY: as above.
        let again = unsafe { Directory::open(base, size, false) }.unwrap();
        let b = again
            .attach_room(base, "b", layout("b"), &settings)
            .unwrap();
        assert_eq!(b.open_pool().free(), 0, "by name, not position");
        let a = again
            .attach_room(base, "a", layout("a"), &settings)
            .unwrap();
        assert_eq!(a.open_pool().free(), 4);
        assert_eq!(again.shared_key().unwrap(), d.shared_key().unwrap());
        again
            .attach_room(base, "c", layout("c"), &settings)
            .unwrap();
        let err = again
            .attach_room(base, "d", layout("d"), &settings)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no room for `d`"), "{err}");
    }

    /// A header whose creator died half-way (magic written, never ready) is laid out again by
    /// an exclusive opener, and waited for (then refused) by others.
    #[test]
    fn a_header_left_incomplete_is_laid_out_again() {
        let size = HEADER_BYTES + 1024;
        let backing = Region::owned(size);
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        backing.u64s(0, 1)[0].store(MAGIC, Ordering::Relaxed);
        // SAFETY: as above.
        assert!(unsafe { Directory::open(base, size, false) }.is_err());
        // SAFETY: as above.
        let d = unsafe { Directory::open(base, size, true) }.unwrap();
        assert!(d.shared_key().is_ok());
    }
}
