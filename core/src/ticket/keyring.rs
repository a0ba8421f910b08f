//! Sealing and opening tickets: AES-256-GCM (ring) with key rotation, base64url with the
//! `base64` crate's SIMD engine (AVX2 where the CPU has it, detected once per keyring; the
//! scalar engine elsewhere, with the same output).

use base64::engine::simd::Simd;
use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::error::Result;
use crate::ticket::format::{
    header, header_room_tag, read_body, write_body, BODY, BODY_AT, ENCODED_LEN, HEAD, NONCE,
    SEALED_LEN, TAG, VERSION,
};
use crate::ticket::room_id::MAX_ROOM_NAME;
use crate::ticket::{RoomId, Ticket, TicketError};

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
    /// Made at random (no configured keys): lives as long as its engine or region.
    ephemeral: bool,
    /// base64url without padding, strict (canonical trailing bits).
    b64: Simd,
}

static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Keyring")
            .field("key_ids", &ids)
            .field("signing", &self.keys[self.signing].0)
            .field("ephemeral", &self.ephemeral)
            .finish()
    }
}

/// The associated data of a ticket: its clear header and the room's name.
fn aad(head: &[u8], room: &RoomId) -> ([u8; HEAD + MAX_ROOM_NAME], usize) {
    let mut buf = [0u8; HEAD + MAX_ROOM_NAME];
    buf[..HEAD].copy_from_slice(&head[..HEAD]);
    let name = room.name();
    buf[HEAD..HEAD + name.len()].copy_from_slice(name);
    (buf, HEAD + name.len())
}

impl Keyring {
    /// Builds a keyring from `(id, material)` pairs; `signing` names the sealing key (default:
    /// the highest id).
    pub fn new(keys: &[(u8, [u8; 32])], signing: Option<u8>) -> Result<Self> {
        if keys.is_empty() {
            return Err(crate::error::Error::invalid(
                "tickets.keys",
                "a keyring needs at least one key",
            ));
        }
        Self::build(keys, signing, false)
    }

    /// A keyring of one random key (id 0), for an engine with no configured keys.
    pub fn ephemeral() -> Result<Self> {
        let mut k = [0u8; 32];
        crate::random::fill(&mut k);
        Self::from_shared_key(k)
    }

    /// A keyring of one key (id 0) that is not configured but shared through a region.
    pub(crate) fn from_shared_key(key: [u8; 32]) -> Result<Self> {
        Self::build(&[(0, key)], None, true)
    }

    fn build(keys: &[(u8, [u8; 32])], signing: Option<u8>, ephemeral: bool) -> Result<Self> {
        let signing_id = signing.unwrap_or_else(|| keys.iter().map(|k| k.0).max().unwrap_or(0));
        let mut index = [0u8; 256];
        let mut sealed_keys = Vec::with_capacity(keys.len());
        let mut signing_at = None;
        for (i, (id, material)) in keys.iter().enumerate() {
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
            ephemeral,
            b64: Simd::url_safe(base64::engine::general_purpose::NO_PAD),
        })
    }

    /// Whether the keyring was made without configured keys.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// Seals and encodes a ticket for `room` with the signing key.
    pub fn seal(&self, room: &RoomId, t: &Ticket) -> EncodedTicket {
        let (id, key) = &self.keys[self.signing];
        let mut sealed = [0u8; SEALED_LEN];
        let head = header(*id, room.tag());
        sealed[..HEAD].copy_from_slice(&head);
        let mut nonce = [0u8; NONCE];
        crate::random::fill(&mut nonce);
        sealed[HEAD..BODY_AT].copy_from_slice(&nonce);
        write_body(t, &mut sealed[BODY_AT..BODY_AT + BODY]);
        let (aad_buf, aad_len) = aad(&head, room);
        let (body, tag_out) = sealed[BODY_AT..].split_at_mut(BODY);
        // AES-GCM sealing of 33 bytes cannot fail (the length limit is 64 GiB); the tag stays
        // zero if it ever did, and such a ticket is refused when opened.
        if let Ok(tag) = key.seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad_buf[..aad_len]),
            body,
        ) {
            tag_out.copy_from_slice(tag.as_ref());
        }
        let mut out = EncodedTicket {
            bytes: [0u8; ENCODED_LEN],
        };
        // The output buffer is exactly the encoded length, so encoding cannot fail.
        let _ = self.b64.encode_slice(sealed, &mut out.bytes);
        out
    }

    /// Decodes and opens a ticket of `room` at `now_secs`, tolerating `skew_secs` of clock
    /// skew.
    pub fn open(
        &self,
        text: &str,
        room: &RoomId,
        now_secs: u32,
        skew_secs: u32,
    ) -> Result<Ticket, TicketError> {
        self.open_bytes(text.as_bytes(), room, now_secs, skew_secs)
    }

    /// [`Keyring::open`] over the raw bytes of a cookie value (which need not be UTF-8; a
    /// ticket is base64url, so anything else is refused as badly encoded).
    #[inline]
    pub fn open_bytes(
        &self,
        text: &[u8],
        room: &RoomId,
        now_secs: u32,
        skew_secs: u32,
    ) -> Result<Ticket, TicketError> {
        let text: &[u8; ENCODED_LEN] = text.try_into().map_err(|_| TicketError::BadEncoding)?;
        let t = match crate::ticket::cache::get(self.generation, room.serial(), text) {
            Some(t) => t,
            None => self.open_uncached(text, room)?,
        };
        if t.last_checkin.max(t.accepted_at) > now_secs.saturating_add(skew_secs) {
            return Err(TicketError::FromFuture);
        }
        if t.expires <= now_secs {
            return Err(TicketError::Expired);
        }
        Ok(t)
    }

    /// Decodes and authenticates a ticket of `room` without looking at the time (for tools
    /// that inspect tickets; the engine always checks expiry and skew).
    pub fn open_any_time(&self, text: &str, room: &RoomId) -> Result<Ticket, TicketError> {
        let text: &[u8; ENCODED_LEN] = text
            .as_bytes()
            .try_into()
            .map_err(|_| TicketError::BadEncoding)?;
        self.authenticate(text, room)
    }

    /// A ticket this thread has not seen: authenticated, then remembered. Cold for code
    /// layout only: it keeps the cache hit path contiguous.
    #[cold]
    #[inline(never)]
    fn open_uncached(
        &self,
        text: &[u8; ENCODED_LEN],
        room: &RoomId,
    ) -> Result<Ticket, TicketError> {
        let t = self.authenticate(text, room)?;
        crate::ticket::cache::put(self.generation, room.serial(), text, t);
        Ok(t)
    }

    /// Decodes and authenticates an encoded ticket (no checks that depend on the time).
    /// Out of line: the cache hit path should not carry AES-GCM's stack frame.
    #[inline(never)]
    fn authenticate(&self, text: &[u8; ENCODED_LEN], room: &RoomId) -> Result<Ticket, TicketError> {
        let mut sealed = [0u8; SEALED_LEN + 2];
        let n = self
            .b64
            .decode_slice_unchecked(text, &mut sealed)
            .map_err(|_| TicketError::BadEncoding)?;
        if n != SEALED_LEN || sealed[0] != VERSION {
            return Err(TicketError::BadEncoding);
        }
        if header_room_tag(&sealed[..HEAD]) != room.tag() {
            return Err(TicketError::WrongRoom);
        }
        let slot = self.index[sealed[1] as usize];
        if slot == 0 {
            return Err(TicketError::UnknownKey);
        }
        let key = &self.keys[slot as usize - 1].1;
        let mut nonce = [0u8; NONCE];
        nonce.copy_from_slice(&sealed[HEAD..BODY_AT]);
        let (aad_buf, aad_len) = aad(&sealed[..HEAD], room);
        let body = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad_buf[..aad_len]),
                &mut sealed[BODY_AT..BODY_AT + BODY + TAG],
            )
            .map_err(|_| TicketError::BadTag)?;
        read_body(body).ok_or(TicketError::BadEncoding)
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::ticket::{room_tag, TicketState};

    const NOW: u32 = 1_795_000_000;

    fn sample() -> Ticket {
        Ticket {
            id: 0x0123_4567_89ab_cdef,
            state: TicketState::Admitted,
            arrival: 7,
            accepted_at: NOW - 10,
            counted: 99,
            last_checkin: NOW - 5,
            expires: NOW + 300,
            incarnation: 0xdead_beef,
        }
    }

    fn ring(keys: &[(u8, u8)], signing: u8) -> Keyring {
        let keys: Vec<(u8, [u8; 32])> = keys.iter().map(|&(id, b)| (id, [b; 32])).collect();
        Keyring::new(&keys, Some(signing)).unwrap()
    }

    /// The SIMD codec reads and writes exactly what the scalar one does, and refuses what it
    /// refuses: bad characters anywhere, and non-canonical trailing bits.
    #[test]
    fn the_simd_codec_matches_the_scalar_one() {
        let scalar = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let simd = Simd::url_safe(base64::engine::general_purpose::NO_PAD);
        for round in 0..2_000u32 {
            let mut raw = [0u8; SEALED_LEN];
            crate::random::fill(&mut raw);
            let mut a = [0u8; ENCODED_LEN];
            let mut b = [0u8; ENCODED_LEN];
            assert_eq!(scalar.encode_slice(raw, &mut a), Ok(ENCODED_LEN));
            assert_eq!(simd.encode_slice(raw, &mut b), Ok(ENCODED_LEN));
            assert_eq!(a, b);
            let mut out = [0u8; SEALED_LEN + 2];
            assert_eq!(simd.decode_slice_unchecked(a, &mut out), Ok(SEALED_LEN));
            assert_eq!(out[..SEALED_LEN], raw);
            // One character made invalid, or changed to another valid one.
            let at = round as usize % ENCODED_LEN;
            for c in [b'*', b'=', b'+', b'/', 0x80, b'A', b'_'] {
                let mut t = a;
                t[at] = c;
                let (x, y) = (
                    scalar.decode_slice_unchecked(t, &mut [0u8; SEALED_LEN + 2]),
                    simd.decode_slice_unchecked(t, &mut [0u8; SEALED_LEN + 2]),
                );
                assert_eq!(x.is_ok(), y.is_ok(), "{:?} at {at}", c as char);
                if let (Ok(_), Ok(_)) = (x, y) {
                    let (mut p, mut q) = ([0u8; SEALED_LEN + 2], [0u8; SEALED_LEN + 2]);
                    let _ = scalar.decode_slice_unchecked(t, &mut p);
                    let _ = simd.decode_slice_unchecked(t, &mut q);
                    assert_eq!(p, q);
                }
            }
        }
    }

    #[test]
    fn round_trip_and_length() {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        let enc = k.seal(&shop, &sample());
        assert_eq!(enc.as_str().len(), ENCODED_LEN);
        assert_eq!(ENCODED_LEN, 90);
        assert_eq!(k.open(enc.as_str(), &shop, NOW, 30), Ok(sample()));
        // Two seals of the same ticket differ (fresh nonce).
        assert_ne!(k.seal(&shop, &sample()).as_str(), enc.as_str());
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        let enc = k.seal(&shop, &sample()).as_str().to_owned();
        // Tampered: change every character of the nonce, ciphertext and tag.
        for i in 8..ENCODED_LEN - 1 {
            let mut b = enc.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let s = String::from_utf8(b).unwrap();
            assert_eq!(
                k.open(&s, &shop, NOW, 30),
                Err(TicketError::BadTag),
                "byte {i}"
            );
        }
        assert_eq!(k.open("", &shop, NOW, 30), Err(TicketError::BadEncoding));
        assert_eq!(
            k.open(&enc[1..], &shop, NOW, 30),
            Err(TicketError::BadEncoding)
        );
        let bad: String = enc
            .chars()
            .map(|c| if c == 'A' { '*' } else { c })
            .collect();
        if bad != enc {
            assert_eq!(k.open(&bad, &shop, NOW, 30), Err(TicketError::BadEncoding));
        }
        let other = ring(&[(2, 7)], 2);
        assert_eq!(
            other.open(&enc, &shop, NOW, 30),
            Err(TicketError::UnknownKey)
        );
        let same_id_other_key = ring(&[(1, 8)], 1);
        assert_eq!(
            same_id_other_key.open(&enc, &shop, NOW, 30),
            Err(TicketError::BadTag)
        );
        assert_eq!(
            k.open(&enc, &RoomId::new("other"), NOW, 30),
            Err(TicketError::WrongRoom)
        );
        assert_eq!(
            k.open(&enc, &shop, NOW + 300, 30),
            Err(TicketError::Expired)
        );
        assert_eq!(
            k.open(&enc, &shop, NOW - 100, 30),
            Err(TicketError::FromFuture)
        );
        assert!(k.open(&enc, &shop, NOW - 20, 30).is_ok(), "within skew");
    }

    /// Two rooms whose tags collide: a ticket of one never opens in the other, neither fresh
    /// nor from this thread's cache of opened tickets.
    #[test]
    fn colliding_tags_do_not_open_each_others_tickets() {
        assert_eq!(room_tag("liquid"), room_tag("costarring"));
        let k = ring(&[(1, 7)], 1);
        let (liquid, costarring) = (RoomId::new("liquid"), RoomId::new("costarring"));
        let enc = k.seal(&liquid, &sample()).as_str().to_owned();
        assert!(k.open(&enc, &liquid, NOW, 30).is_ok(), "opened and cached");
        assert_eq!(k.open(&enc, &costarring, NOW, 30), Err(TicketError::BadTag));
    }

    #[test]
    fn rotation_old_key_verifies_new_key_signs() {
        let shop = RoomId::new("shop");
        let old = ring(&[(1, 7)], 1);
        let issued_before = old.seal(&shop, &sample()).as_str().to_owned();
        let rotated = ring(&[(1, 7), (2, 9)], 2);
        assert!(rotated.open(&issued_before, &shop, NOW, 30).is_ok());
        let issued_after = rotated.seal(&shop, &sample()).as_str().to_owned();
        assert_eq!(
            old.open(&issued_after, &shop, NOW, 30),
            Err(TicketError::UnknownKey)
        );
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&issued_after)
            .unwrap();
        assert_eq!(decoded[1], 2, "new tickets carry the new key id");
        let retired = ring(&[(2, 9)], 2);
        assert_eq!(
            retired.open(&issued_before, &shop, NOW, 30),
            Err(TicketError::UnknownKey)
        );
    }
}
