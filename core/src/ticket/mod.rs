//! Tickets: the visitor's sealed proof of admission or of their place in the queue.
//!
//! ```text
//! sealed (70 bytes), then base64url without padding (94 characters):
//!   0      version (3)                  \  header: in clear, authenticated
//!   1      key id                        | (AEAD associated data, together with
//!   2..6   room tag u32                 /   the room's whole name)
//!   6..22  nonce (128 random bits)
//!   22..54 body, encrypted (32 bytes, little endian):
//!            ticket id (56 bits) and state (8 bits) u64 | arrival u32 | accepted at u32 (s)
//!            | counted in u32 | last check-in u32 (s) | expires u32 (s) | incarnation u32
//!   54..70 AEGIS-256 tag (128 bits)
//! ```
//! The AEAD is AEGIS-256 (draft-irtf-cfrg-aegis-aead: a 256-bit key, like the AES-256-GCM of
//! format 2, at about a third of its cost for a ticket here: 55 against 144 ns, with the body
//! and the associated data in whole 16-byte blocks). Its key is derived from the configured
//! key material with HKDF-SHA256, so it is never the AES-256-GCM key of format 2. Its 256-bit nonce is the ticket's 128 random bits followed by zeros: a repeat is
//! as likely as two equal 128-bit draws (below 2^-49 after 2^40 tickets under one key;
//! format 2's 96 random bits reached that at 2^24). Format 2 tickets still open (`legacy`),
//! so an upgrade keeps its admitted visitors.
//!
//! Sealing uses the signing key; opening tries the key named in the ticket, so keys rotate by
//! adding a new key, making it the signing key, and dropping the old one once the longest
//! session has passed. Tag verification is constant-time (libaegis). Nonces come from the
//! thread's CSPRNG (seeded once per thread and process from the OS, reseeded after `fork`; no
//! syscall per ticket). Every way a ticket can be refused has its own [`TicketError`], and a
//! refused ticket is treated by the engine as no ticket at all.

mod cache;
mod error;
mod format;
mod keyring;
mod legacy;
mod room_id;

pub use error::TicketError;
pub use format::{ENCODED_LEN, SEALED_LEN};
/// Characters of a ticket of the previous format (still opened, never issued).
pub const LEGACY_ENCODED_LEN: usize = legacy::ENCODED_LEN;
pub use keyring::{EncodedTicket, Keyring};
pub use room_id::{room_tag, RoomId, MAX_ROOM_NAME};

/// Whether a ticket's holder is admitted or waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketState {
    /// Admitted: may reach the origin until the ticket expires.
    Admitted,
    /// Waiting in the queue.
    Queued,
}

/// The contents of a ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Random id of the visitor, kept from queue to admission: 56 bits in format 3 (the bits
    /// above are dropped when a ticket is sealed); a format 2 ticket's is read whole.
    pub id: u64,
    /// Admitted or queued.
    pub state: TicketState,
    /// Queue order key: the arrival bucket (FIFO rooms) or 0.
    pub arrival: u32,
    /// When the holder was admitted (or queued), seconds since the Unix epoch.
    pub accepted_at: u32,
    /// Admitted: the bucket the holder was last counted in. Queued: the refresh epoch.
    pub counted: u32,
    /// Last request, seconds since the Unix epoch.
    pub last_checkin: u32,
    /// Expiry, seconds since the Unix epoch.
    pub expires: u32,
    /// Incarnation of the counters that counted the holder (see `counters::room_counters`).
    pub incarnation: u32,
}

/// A fresh random ticket id (fork-safe CSPRNG).
#[inline]
pub(crate) fn random_id() -> u64 {
    crate::random::u64() & format::ID_MASK
}
