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

use std::cell::RefCell;

use crate::ticket::format::ENCODED_LEN;
use crate::ticket::Ticket;

const ENTRIES: usize = 256;
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

thread_local! {
    /// Allocated on the thread's first miss, directly on the heap (a `[_; ENTRIES]` built on
    /// the stack first would give every caller a 34 KiB frame, probed page by page on every
    /// call, hit or miss).
    static CACHE: RefCell<Option<Box<[Option<Entry>]>>> = const { RefCell::new(None) };
}

/// The slot of an encoded ticket: from characters that encode its random nonce (characters
/// 8 to 16; the eight before encode the clear header).
#[inline]
fn slot(text: &[u8; ENCODED_LEN]) -> usize {
    let mut word = [0u8; 8];
    word.copy_from_slice(&text[8..16]);
    (u64::from_le_bytes(word).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize
}

/// The ticket `text` decoded to under keyring `generation` for room `room` (its serial), if
/// this thread has seen it.
#[inline]
pub(crate) fn get(generation: u64, room: u64, text: &[u8; ENCODED_LEN]) -> Option<Ticket> {
    CACHE
        .try_with(|cache| {
            let cache = cache.try_borrow().ok()?;
            let entry = cache.as_ref()?.get(slot(text))?.as_ref()?;
            let same = constant_time_eq(&entry.text, text)
                && entry.generation == generation
                && entry.room == room;
            same.then_some(entry.ticket)
        })
        .ok()
        .flatten()
}

/// Remembers that `text` opened to `ticket` under keyring `generation`. Out of line: it runs
/// on a miss only, after the AEAD, and keeps the hit path's frame small.
#[inline(never)]
pub(crate) fn put(generation: u64, room: u64, text: &[u8; ENCODED_LEN], ticket: &Ticket) {
    let _ = CACHE.try_with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
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
