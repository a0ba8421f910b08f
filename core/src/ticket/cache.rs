//! A small per-thread cache of tickets that passed authentication, so that a visitor's many
//! requests (a page, its scripts, images and API calls, all carrying the same cookie) pay for
//! base64 and the AEAD once instead of on every request.
//!
//! What is cached is a pure function's result: the exact 94 encoded bytes of a ticket that
//! opened under a given keyring for a given room, and what they decoded to. A hit needs the
//! same bytes (compared in constant time, so response timing cannot reveal how much of someone
//! else's ticket a guess got right), the same keyring generation (a reload with other keys
//! empties the cache in effect) and the same room (the room's name is authenticated with the
//! ticket: a ticket opened for one room is never served to another). The checks that depend on
//! the time (expiry, clock skew) run on every hit exactly as on a miss. Memory is fixed: 256
//! entries of about 150 bytes per thread.
//!
//! A cache that does not hit costs more than it saves. In a server the entry a lookup reads
//! has usually left the CPU's caches since the last request (the kernel's and the server's
//! own work in between evict it), so a miss costs a trip to memory: in a perf profile of
//! nginx with 10,000 visitors in turn, that read was the module's costliest instruction. So each
//! thread counts its hits in windows of 256 lookups: when fewer than one in 16 of a window hit
//! (a sale with far more visitors per thread than entries, each visitor's requests far
//! apart), the thread skips the cache (no lookup, nothing remembered) for about the next
//! 4,096 tickets, then samples again. What is served is unchanged either way: a skipped
//! lookup is a miss, and a miss opens the ticket.

use std::cell::{Cell, RefCell};

use crate::ticket::format::ENCODED_LEN;
use crate::ticket::Ticket;

const ENTRIES: usize = 256;
/// Lookups per sampling window.
const WINDOW: u32 = 256;
/// Fewer hits than this in a window: the cache is not paying for itself.
const MIN_HITS: u32 = WINDOW / 16;
/// Tickets opened without the cache after a window that did not pay.
const SKIP: u32 = 4096;
// The compare below reads the tail as the last eight bytes.
const _: () = assert!(ENCODED_LEN >= 8);

#[derive(Clone, Copy)]
struct Entry {
    generation: u64,
    room: u64,
    text: [u8; ENCODED_LEN],
    ticket: Ticket,
}

/// Equality of two encoded tickets in time independent of where they differ: compared eight
/// bytes at a time, every word is compared, the differences are OR-ed together, and the result
/// goes through `black_box` so the compiler cannot turn the fold into an early exit.
#[inline]
fn constant_time_eq(a: &[u8; ENCODED_LEN], b: &[u8; ENCODED_LEN]) -> bool {
    let word = |t: &[u8; ENCODED_LEN], i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&t[i..i + 8]);
        u64::from_le_bytes(w)
    };
    // Constant bounds: the loops unroll into straight-line loads, XORs and ORs.
    let mut diff = 0u64;
    let mut i = 0;
    while i + 8 <= ENCODED_LEN {
        diff |= word(a, i) ^ word(b, i);
        i += 8;
    }
    if i < ENCODED_LEN {
        // The tail, as the last eight bytes (overlapping the words before).
        diff |= word(a, ENCODED_LEN - 8) ^ word(b, ENCODED_LEN - 8);
    }
    std::hint::black_box(diff) == 0
}

/// One thread's cache and its hit counts.
struct Cache {
    /// Allocated on the thread's first miss, directly on the heap (a `[_; ENTRIES]` built on
    /// the stack first would give every caller a 34 KiB frame, probed page by page on every
    /// call, hit or miss).
    entries: RefCell<Option<Box<[Option<Entry>]>>>,
    /// Lookups and hits so far in this window.
    lookups: Cell<u32>,
    hits: Cell<u32>,
    /// Tickets left to open without looking up or remembering.
    skip: Cell<u32>,
}

thread_local! {
    static CACHE: Cache = const {
        Cache {
            entries: RefCell::new(None),
            lookups: Cell::new(0),
            hits: Cell::new(0),
            skip: Cell::new(0),
        }
    };
}

impl Cache {
    /// Counts one lookup; at the end of a window, decides whether the next tickets skip the
    /// cache.
    #[inline]
    fn count(&self, hit: bool) {
        let lookups = self.lookups.get() + 1;
        let hits = self.hits.get() + u32::from(hit);
        if lookups < WINDOW {
            self.lookups.set(lookups);
            self.hits.set(hits);
        } else {
            if hits < MIN_HITS {
                self.skip.set(SKIP);
            }
            self.lookups.set(0);
            self.hits.set(0);
        }
    }
}

/// The slot of an encoded ticket: from characters that encode its random nonce (characters
/// 8 to 16; the eight before encode the clear header).
#[inline]
fn slot(text: &[u8; ENCODED_LEN]) -> usize {
    let mut word = [0u8; 8];
    word.copy_from_slice(&text[8..16]);
    (u64::from_le_bytes(word).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize
}

/// Whether this thread is skipping the cache (see the module's documentation) for the
/// ticket at hand: then it is opened without a lookup, and not remembered. Counts it off
/// the tickets left to skip.
#[inline]
pub(crate) fn skipping() -> bool {
    CACHE
        .try_with(|cache| {
            let skip = cache.skip.get();
            if skip > 0 {
                cache.skip.set(skip - 1);
            }
            skip > 0
        })
        .unwrap_or(true)
}

/// The ticket `text` decoded to under keyring `generation` for room `room` (its serial), if
/// this thread has seen it (asked when not [`skipping`]).
#[inline]
pub(crate) fn get(generation: u64, room: u64, text: &[u8; ENCODED_LEN]) -> Option<Ticket> {
    CACHE
        .try_with(|cache| {
            let found = cache.entries.try_borrow().ok().and_then(|entries| {
                let entry = entries.as_ref()?.get(slot(text))?.as_ref()?;
                let same = constant_time_eq(&entry.text, text)
                    && entry.generation == generation
                    && entry.room == room;
                same.then_some(entry.ticket)
            });
            cache.count(found.is_some());
            found
        })
        .ok()
        .flatten()
}

/// Remembers that `text` opened to `ticket` under keyring `generation` (unless this thread
/// is skipping the cache). Out of line: it runs on a miss only, after the AEAD, and keeps the
/// hit path's frame small.
#[inline(never)]
pub(crate) fn put(generation: u64, room: u64, text: &[u8; ENCODED_LEN], ticket: &Ticket) {
    let _ = CACHE.try_with(|cache| {
        if cache.skip.get() > 0 {
            return;
        }
        if let Ok(mut cache) = cache.entries.try_borrow_mut() {
            let entries = cache.get_or_insert_with(|| vec![None; ENTRIES].into_boxed_slice());
            if let Some(e) = entries.get_mut(slot(text)) {
                *e = Some(Entry {
                    generation,
                    room,
                    text: *text,
                    ticket: *ticket,
                });
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ticket::TicketState;

    const GENERATION: u64 = 7;
    const ROOM: u64 = 3;

    fn ticket(id: u64) -> Ticket {
        Ticket {
            id,
            state: TicketState::Admitted,
            arrival: 0,
            accepted_at: 1,
            counted: 2,
            last_checkin: 3,
            expires: 4,
            incarnation: 5,
        }
    }

    /// An encoded ticket's bytes, distinct for each `n` (in the characters the slot hashes,
    /// 8 to 16, and in the last ones).
    fn text(n: u32) -> [u8; ENCODED_LEN] {
        let mut t = [b'A'; ENCODED_LEN];
        t[8..12].copy_from_slice(&n.to_le_bytes());
        t[ENCODED_LEN - 4..].copy_from_slice(&n.to_le_bytes());
        t
    }

    /// What opening a ticket asks the cache, as `Keyring::open_bytes` does: `None` while
    /// skipping, else what the lookup found.
    fn look(generation: u64, room: u64, text: &[u8; ENCODED_LEN]) -> Option<Option<Ticket>> {
        (!skipping()).then(|| get(generation, room, text))
    }

    /// One window of lookups of which `hits` are of the remembered ticket `kept` and the rest
    /// of tickets never seen.
    fn window(hits: u32, kept: &[u8; ENCODED_LEN]) {
        for i in 0..WINDOW {
            let found = if i < hits {
                look(GENERATION, ROOM, kept)
            } else {
                look(GENERATION, ROOM, &text(100_000 + i))
            };
            assert_eq!(found, Some((i < hits).then(|| ticket(1))), "lookup {i}");
        }
    }

    // Each test runs on its own thread: its own cache.

    #[test]
    fn a_window_with_one_hit_in_sixteen_keeps_the_cache() {
        let kept = text(1);
        put(GENERATION, ROOM, &kept, &ticket(1));
        window(MIN_HITS, &kept);
        assert_eq!(look(GENERATION, ROOM, &kept), Some(Some(ticket(1))));
        let other = text(2);
        put(GENERATION, ROOM, &other, &ticket(2));
        assert_eq!(look(GENERATION, ROOM, &other), Some(Some(ticket(2))));
    }

    #[test]
    fn a_window_with_fewer_hits_skips_the_cache_for_a_while_then_samples_again() {
        let kept = text(1);
        put(GENERATION, ROOM, &kept, &ticket(1));
        window(MIN_HITS - 1, &kept);
        // Skipping: neither looked up nor remembered.
        let skipped = text(2);
        put(GENERATION, ROOM, &skipped, &ticket(2));
        for _ in 0..SKIP {
            assert_eq!(look(GENERATION, ROOM, &kept), None);
        }
        // Sampling again: what was remembered before is found; what came while skipping is not.
        assert_eq!(look(GENERATION, ROOM, &kept), Some(Some(ticket(1))));
        assert_eq!(look(GENERATION, ROOM, &skipped), Some(None));
    }

    #[test]
    fn a_hit_needs_the_same_bytes_keyring_and_room() {
        let t = text(9);
        put(GENERATION, ROOM, &t, &ticket(9));
        let mut last_changed = t;
        last_changed[ENCODED_LEN - 1] ^= 1;
        assert_eq!(look(GENERATION, ROOM, &last_changed), Some(None));
        assert_eq!(look(GENERATION + 1, ROOM, &t), Some(None));
        assert_eq!(look(GENERATION, ROOM + 1, &t), Some(None));
        assert_eq!(look(GENERATION, ROOM, &t), Some(Some(ticket(9))));
    }
}
