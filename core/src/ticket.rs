//! Tickets: the visitor's sealed proof of admission or of their place in the queue.
//!
//! ```text
//! sealed (63 bytes), then base64url without padding (84 characters):
//!   0      version (1)                  \  authenticated, in clear
//!   1      key id                       /  (AEAD associated data)
//!   2..14  nonce (96 bits)
//!   14..47 body, encrypted (33 bytes, little endian):
//!            room tag u32 | ticket id u64 | state u8 | arrival u32 | accepted at u32 (s)
//!            | counted in u32 | last check-in u32 (s) | expires u32 (s)
//!   47..63 AES-256-GCM tag
//! ```
//! Sealing uses the signing key; opening tries the key named in the ticket, so keys rotate by
//! adding a new key, making it the signing key, and dropping the old one once the longest
//! session has passed. Tag verification is constant-time (ring). Nonces come from the
//! thread's CSPRNG (seeded once per thread and process from the OS, reseeded after `fork`; no
//! syscall per ticket).
//! Every way a ticket can be refused has its own [`TicketError`], and a refused ticket is
//! treated by the engine as no ticket at all.

use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::error::Result;

const VERSION: u8 = 1;
const NONCE: usize = 12;
const BODY: usize = 33;
const TAG: usize = 16;
const HEAD: usize = 2 + NONCE;
/// Bytes of a sealed ticket.
pub const SEALED_LEN: usize = HEAD + BODY + TAG;
/// Characters of an encoded ticket.
pub const ENCODED_LEN: usize = (SEALED_LEN * 4).div_ceil(3);

/// Why an incoming ticket was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TicketError {
    /// Not base64url, wrong length, or an unknown format version.
    BadEncoding = 0,
    /// Sealed with a key id the configuration does not have.
    UnknownKey = 1,
    /// Authentication failed: the ticket was altered or forged.
    BadTag = 2,
    /// Issued by another room.
    WrongRoom = 3,
    /// Past its expiry.
    Expired = 4,
    /// Stamped further in the future than the tolerated clock skew.
    FromFuture = 5,
}

impl TicketError {
    /// Every reason, in code order.
    pub const ALL: [TicketError; 6] = [
        TicketError::BadEncoding,
        TicketError::UnknownKey,
        TicketError::BadTag,
        TicketError::WrongRoom,
        TicketError::Expired,
        TicketError::FromFuture,
    ];

    /// A stable snake_case name, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TicketError::BadEncoding => "bad_encoding",
            TicketError::UnknownKey => "unknown_key",
            TicketError::BadTag => "bad_tag",
            TicketError::WrongRoom => "wrong_room",
            TicketError::Expired => "expired",
            TicketError::FromFuture => "from_future",
        }
    }
}

impl std::fmt::Display for TicketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for TicketError {}

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
    /// Hash of the room name (see [`room_tag`]).
    pub room_tag: u32,
    /// Random id of the visitor, kept from queue to admission.
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
}

/// A 32-bit tag of a room name (FNV-1a), carried in tickets so that one room's ticket is
/// refused by another.
pub fn room_tag(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// An encoded ticket, held inline (no allocation).
#[derive(Clone, Copy)]
pub struct EncodedTicket {
    bytes: [u8; ENCODED_LEN],
}

impl EncodedTicket {
    /// The ticket as text.
    pub fn as_str(&self) -> &str {
        // base64url output is ASCII; from_utf8 cannot fail, and an empty string would only be
        // returned if it did.
        std::str::from_utf8(&self.bytes).unwrap_or("")
    }
}

impl std::fmt::Debug for EncodedTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sealing and opening keys.
pub struct Keyring {
    keys: Vec<(u8, LessSafeKey)>,
    index: [u8; 256],
    signing: usize,
    /// Unique per keyring: tickets cached as opened under one are not trusted by another.
    generation: u64,
}

static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Keyring")
            .field("key_ids", &ids)
            .field("signing", &self.keys[self.signing].0)
            .finish()
    }
}

impl Keyring {
    /// Builds a keyring from `(id, material)` pairs; `signing` names the sealing key (default:
    /// the highest id). With no keys, one random ephemeral key (id 0) is made.
    pub fn new(keys: &[(u8, [u8; 32])], signing: Option<u8>) -> Result<Self> {
        let mut owned: Vec<(u8, [u8; 32])> = keys.to_vec();
        if owned.is_empty() {
            let mut k = [0u8; 32];
            crate::random::fill(&mut k);
            owned.push((0, k));
        }
        let signing_id = signing.unwrap_or_else(|| owned.iter().map(|k| k.0).max().unwrap_or(0));
        let mut index = [0u8; 256];
        let mut sealed_keys = Vec::with_capacity(owned.len());
        let mut signing_at = None;
        for (i, (id, material)) in owned.iter().enumerate() {
            let unbound = UnboundKey::new(&AES_256_GCM, material).map_err(|_| {
                crate::error::Error::invalid(format!("tickets.keys[{i}]"), "rejected by AES-256")
            })?;
            sealed_keys.push((*id, LessSafeKey::new(unbound)));
            index[*id as usize] = (i + 1) as u8;
            if *id == signing_id {
                signing_at = Some(i);
            }
        }
        let signing = signing_at.ok_or_else(|| {
            crate::error::Error::invalid("tickets.signing_key", "names no configured key")
        })?;
        Ok(Self {
            keys: sealed_keys,
            index,
            signing,
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Seals and encodes a ticket with the signing key.
    pub fn seal(&self, t: &Ticket) -> EncodedTicket {
        let (id, key) = &self.keys[self.signing];
        let mut sealed = [0u8; SEALED_LEN];
        sealed[0] = VERSION;
        sealed[1] = *id;
        let mut nonce = [0u8; NONCE];
        crate::random::fill(&mut nonce);
        sealed[2..HEAD].copy_from_slice(&nonce);
        let body = &mut sealed[HEAD..HEAD + BODY];
        body[0..4].copy_from_slice(&t.room_tag.to_le_bytes());
        body[4..12].copy_from_slice(&t.id.to_le_bytes());
        body[12] = match t.state {
            TicketState::Admitted => 1,
            TicketState::Queued => 2,
        };
        body[13..17].copy_from_slice(&t.arrival.to_le_bytes());
        body[17..21].copy_from_slice(&t.accepted_at.to_le_bytes());
        body[21..25].copy_from_slice(&t.counted.to_le_bytes());
        body[25..29].copy_from_slice(&t.last_checkin.to_le_bytes());
        body[29..33].copy_from_slice(&t.expires.to_le_bytes());
        let (head, rest) = sealed.split_at_mut(HEAD);
        let (body, tag_out) = rest.split_at_mut(BODY);
        // AES-GCM sealing of 33 bytes cannot fail (the length limit is 64 GiB); the tag stays
        // zero if it ever did, and such a ticket is refused when opened.
        if let Ok(tag) = key.seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&head[..2]),
            body,
        ) {
            tag_out.copy_from_slice(tag.as_ref());
        }
        let mut out = EncodedTicket {
            bytes: [0u8; ENCODED_LEN],
        };
        // The output buffer is exactly the encoded length, so encoding cannot fail.
        let _ =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_slice(sealed, &mut out.bytes);
        out
    }

    /// Decodes and opens a ticket for the room with `room_tag`, at `now_secs`, tolerating
    /// `skew_secs` of clock skew.
    pub fn open(
        &self,
        text: &str,
        room_tag: u32,
        now_secs: u32,
        skew_secs: u32,
    ) -> Result<Ticket, TicketError> {
        self.open_bytes(text.as_bytes(), room_tag, now_secs, skew_secs)
    }

    /// [`Keyring::open`] over the raw bytes of a cookie value (which need not be UTF-8; a
    /// ticket is base64url, so anything else is refused as badly encoded).
    #[inline]
    pub fn open_bytes(
        &self,
        text: &[u8],
        room_tag: u32,
        now_secs: u32,
        skew_secs: u32,
    ) -> Result<Ticket, TicketError> {
        let text: &[u8; ENCODED_LEN] = text.try_into().map_err(|_| TicketError::BadEncoding)?;
        let t = match crate::ticket_cache::get(self.generation, text) {
            Some(t) => t,
            None => self.open_uncached(text)?,
        };
        if t.room_tag != room_tag {
            return Err(TicketError::WrongRoom);
        }
        if t.last_checkin.max(t.accepted_at) > now_secs.saturating_add(skew_secs) {
            return Err(TicketError::FromFuture);
        }
        if t.expires <= now_secs {
            return Err(TicketError::Expired);
        }
        Ok(t)
    }

    /// A ticket this thread has not seen: authenticated, then remembered. Cold for code
    /// layout only: it keeps the cache hit path contiguous.
    #[cold]
    #[inline(never)]
    fn open_uncached(&self, text: &[u8; ENCODED_LEN]) -> Result<Ticket, TicketError> {
        let t = self.authenticate(text)?;
        crate::ticket_cache::put(self.generation, text, t);
        Ok(t)
    }

    /// Decodes and authenticates an encoded ticket (no checks that depend on the request).
    /// Out of line: the cache hit path should not carry AES-GCM's stack frame.
    #[inline(never)]
    fn authenticate(&self, text: &[u8; ENCODED_LEN]) -> Result<Ticket, TicketError> {
        let mut sealed = [0u8; SEALED_LEN + 2];
        let n = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode_slice_unchecked(text, &mut sealed)
            .map_err(|_| TicketError::BadEncoding)?;
        if n != SEALED_LEN || sealed[0] != VERSION {
            return Err(TicketError::BadEncoding);
        }
        let slot = self.index[sealed[1] as usize];
        if slot == 0 {
            return Err(TicketError::UnknownKey);
        }
        let key = &self.keys[slot as usize - 1].1;
        let mut nonce = [0u8; NONCE];
        nonce.copy_from_slice(&sealed[2..HEAD]);
        let (head, rest) = sealed.split_at_mut(HEAD);
        let body = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&head[..2]),
                &mut rest[..BODY + TAG],
            )
            .map_err(|_| TicketError::BadTag)?;
        let u32_at =
            |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&body[4..12]);
        let state = match body[12] {
            1 => TicketState::Admitted,
            2 => TicketState::Queued,
            _ => return Err(TicketError::BadEncoding),
        };
        let t = Ticket {
            room_tag: u32_at(0),
            id: u64::from_le_bytes(id),
            state,
            arrival: u32_at(13),
            accepted_at: u32_at(17),
            counted: u32_at(21),
            last_checkin: u32_at(25),
            expires: u32_at(29),
        };
        Ok(t)
    }
}

/// A fresh random ticket id (fork-safe CSPRNG).
#[inline]
pub(crate) fn random_id() -> u64 {
    crate::random::u64()
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    const NOW: u32 = 1_795_000_000;

    fn sample() -> Ticket {
        Ticket {
            room_tag: room_tag("shop"),
            id: 0x0123_4567_89ab_cdef,
            state: TicketState::Admitted,
            arrival: 7,
            accepted_at: NOW - 10,
            counted: 99,
            last_checkin: NOW - 5,
            expires: NOW + 300,
        }
    }

    fn ring(keys: &[(u8, u8)], signing: u8) -> Keyring {
        let keys: Vec<(u8, [u8; 32])> = keys.iter().map(|&(id, b)| (id, [b; 32])).collect();
        Keyring::new(&keys, Some(signing)).unwrap()
    }

    #[test]
    fn round_trip_and_length() {
        let k = ring(&[(1, 7)], 1);
        let enc = k.seal(&sample());
        assert_eq!(enc.as_str().len(), ENCODED_LEN);
        assert_eq!(ENCODED_LEN, 84);
        assert_eq!(
            k.open(enc.as_str(), room_tag("shop"), NOW, 30),
            Ok(sample())
        );
        // Two seals of the same ticket differ (fresh nonce).
        assert_ne!(k.seal(&sample()).as_str(), enc.as_str());
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let k = ring(&[(1, 7)], 1);
        let shop = room_tag("shop");
        let enc = k.seal(&sample()).as_str().to_owned();
        // Tampered: flip one bit in every position of the ciphertext and tag.
        for i in 20..ENCODED_LEN - 1 {
            let mut b = enc.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let s = String::from_utf8(b).unwrap();
            assert_eq!(
                k.open(&s, shop, NOW, 30),
                Err(TicketError::BadTag),
                "byte {i}"
            );
        }
        assert_eq!(k.open("", shop, NOW, 30), Err(TicketError::BadEncoding));
        assert_eq!(
            k.open(&enc[1..], shop, NOW, 30),
            Err(TicketError::BadEncoding)
        );
        let bad: String = enc
            .chars()
            .map(|c| if c == 'A' { '*' } else { c })
            .collect();
        if bad != enc {
            assert_eq!(k.open(&bad, shop, NOW, 30), Err(TicketError::BadEncoding));
        }
        let other = ring(&[(2, 7)], 2);
        assert_eq!(
            other.open(&enc, shop, NOW, 30),
            Err(TicketError::UnknownKey)
        );
        let same_id_other_key = ring(&[(1, 8)], 1);
        assert_eq!(
            same_id_other_key.open(&enc, shop, NOW, 30),
            Err(TicketError::BadTag)
        );
        assert_eq!(
            k.open(&enc, room_tag("other"), NOW, 30),
            Err(TicketError::WrongRoom)
        );
        assert_eq!(k.open(&enc, shop, NOW + 300, 30), Err(TicketError::Expired));
        assert_eq!(
            k.open(&enc, shop, NOW - 100, 30),
            Err(TicketError::FromFuture)
        );
        assert!(k.open(&enc, shop, NOW - 20, 30).is_ok(), "within skew");
    }

    #[test]
    fn rotation_old_key_verifies_new_key_signs() {
        let old = ring(&[(1, 7)], 1);
        let issued_before = old.seal(&sample()).as_str().to_owned();
        let rotated = ring(&[(1, 7), (2, 9)], 2);
        let shop = room_tag("shop");
        assert!(rotated.open(&issued_before, shop, NOW, 30).is_ok());
        let issued_after = rotated.seal(&sample()).as_str().to_owned();
        assert_eq!(
            old.open(&issued_after, shop, NOW, 30),
            Err(TicketError::UnknownKey)
        );
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&issued_after)
            .unwrap();
        assert_eq!(decoded[1], 2, "new tickets carry the new key id");
        let retired = ring(&[(2, 9)], 2);
        assert_eq!(
            retired.open(&issued_before, shop, NOW, 30),
            Err(TicketError::UnknownKey)
        );
    }
}
