//! Sealing and opening tickets: AEGIS-256 (the `aegis` crate: libaegis, AES instructions
//! chosen at run time) with key rotation, base64url with the `base64-simd` crate (AVX2 or
//! SSSE3 where the CPU has them, detected at run time; scalar elsewhere, same output).
//! Tickets of the previous format (AES-256-GCM) still open, see `legacy`.

use aegis::aegis256::Aegis256;
use base64_simd::{Out, URL_SAFE_NO_PAD};

use crate::error::Result;
use crate::ticket::format::{
    header_room_tag, read_body, write_body, BODY, BODY_AT, ENCODED_LEN, HEAD, NONCE, SEALED_LEN,
    TAG, VERSION,
};
use crate::ticket::legacy::{self, LegacyKey};
use crate::ticket::{RoomId, Ticket, TicketError, TicketState};

/// An encoded ticket, held inline (no allocation).
#[derive(Clone, Copy)]
pub struct EncodedTicket {
    bytes: [u8; ENCODED_LEN],
}

impl EncodedTicket {
    /// The ticket as text.
    #[inline]
    pub fn as_str(&self) -> &str {
        debug_assert!(self.bytes.is_ascii());
        // SAFETY: `bytes` is private and only ever written by `Keyring::seal`, with base64url
        // output, which is ASCII: valid UTF-8. (Checking it again cost a new visitor 10 ns.)
        unsafe { std::str::from_utf8_unchecked(&self.bytes) }
    }
}

impl std::fmt::Debug for EncodedTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key of a keyring.
struct Key {
    id: u8,
    /// AEGIS-256's key, derived from the configured material (see [`aegis_key`]).
    aegis: [u8; 32],
    /// Format 2's AES-256-GCM key: the configured material itself, as format 2 used it.
    legacy: LegacyKey,
}

/// Output length of the HKDF expansion (ring's `KeyType`).
struct KeyLen;

impl ring::hkdf::KeyType for KeyLen {
    fn len(&self) -> usize {
        32
    }
}

/// The AEGIS-256 key of configured key material: HKDF-SHA256 (salt and info name the
/// purpose), so that format 3 never uses the bytes format 2 used as its AES-256-GCM key.
fn aegis_key(material: &[u8; 32]) -> Option<[u8; 32]> {
    use ring::hkdf::{Salt, HKDF_SHA256};
    let prk = Salt::new(HKDF_SHA256, b"velvet-rope tickets").extract(material);
    let okm = prk.expand(&[b"format 3: AEGIS-256"], KeyLen).ok()?;
    let mut key = [0u8; 32];
    okm.fill(&mut key).ok()?;
    Some(key)
}

/// Sealing and opening keys.
pub struct Keyring {
    keys: Vec<Key>,
    /// Key id -> position in `keys` plus one (0: no such key).
    index: [u16; 256],
    signing: usize,
    /// Unique per keyring: tickets cached as opened under one are not trusted by another.
    generation: u64,
    /// Made at random (no configured keys): lives as long as its engine or region.
    ephemeral: bool,
}

static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|k| k.id).collect();
        f.debug_struct("Keyring")
            .field("key_ids", &ids)
            .field("signing", &self.keys[self.signing].id)
            .field("ephemeral", &self.ephemeral)
            .finish()
    }
}

/// AEGIS-256's nonce for a ticket's nonce: its 128 random bits, then zeros.
#[inline]
fn aegis_nonce(ticket_nonce: &[u8]) -> [u8; 32] {
    let mut nonce = [0u8; 32];
    nonce[..NONCE].copy_from_slice(ticket_nonce);
    nonce
}

/// Whether a time-checked ticket may be used at `now_secs` with `skew_secs` of clock skew.
#[inline]
fn check_time(t: Ticket, now_secs: u32, skew_secs: u32) -> Result<Ticket, TicketError> {
    // A queued ticket's check-in field holds the place it was shown (see
    // `admission::place`), not a time.
    let stamped = match t.state {
        TicketState::Admitted => t.last_checkin.max(t.accepted_at),
        TicketState::Queued => t.accepted_at,
    };
    if stamped > now_secs.saturating_add(skew_secs) {
        return Err(TicketError::FromFuture);
    }
    if t.expires <= now_secs {
        return Err(TicketError::Expired);
    }
    Ok(t)
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
        let mut index = [0u16; 256];
        let mut built = Vec::with_capacity(keys.len());
        let mut signing_at = None;
        for (i, (id, material)) in keys.iter().enumerate() {
            let invalid =
                |why: &str| crate::error::Error::invalid(format!("tickets.keys[{i}]"), why);
            if index[usize::from(*id)] != 0 {
                return Err(invalid("repeats a key id"));
            }
            let legacy = LegacyKey::new(material).ok_or_else(|| invalid("rejected by AES-256"))?;
            let aegis = aegis_key(material).ok_or_else(|| invalid("rejected by HKDF"))?;
            built.push(Key {
                id: *id,
                aegis,
                legacy,
            });
            // At most 256 keys (ids are distinct bytes): positions fit.
            index[usize::from(*id)] = (i + 1) as u16;
            if *id == signing_id {
                signing_at = Some(i);
            }
        }
        let signing = signing_at.ok_or_else(|| {
            crate::error::Error::invalid("tickets.signing_key", "names no configured key")
        })?;
        Ok(Self {
            keys: built,
            index,
            signing,
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            ephemeral,
        })
    }

    /// Whether the keyring was made without configured keys.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    /// Seals and encodes a ticket for `room` with the signing key.
    pub fn seal(&self, room: &RoomId, t: &Ticket) -> EncodedTicket {
        let key = &self.keys[self.signing];
        let (data, len) = room.associated_data(VERSION, key.id);
        let mut sealed = [0u8; SEALED_LEN];
        sealed[..HEAD].copy_from_slice(&data[..HEAD]);
        crate::random::fill(&mut sealed[HEAD..BODY_AT]);
        let nonce = aegis_nonce(&sealed[HEAD..BODY_AT]);
        let mut body = [0u8; BODY];
        write_body(t, &mut body);
        let tag =
            Aegis256::<TAG>::new(&key.aegis, &nonce).encrypt_in_place(&mut body, &data[..len]);
        sealed[BODY_AT..BODY_AT + BODY].copy_from_slice(&body);
        sealed[BODY_AT + BODY..].copy_from_slice(&tag);
        let mut out = EncodedTicket {
            bytes: [0u8; ENCODED_LEN],
        };
        // The output buffer is exactly the encoded length, so encoding fills it.
        let _ = URL_SAFE_NO_PAD.encode(&sealed, Out::from_slice(&mut out.bytes));
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
        let Ok(text) = <&[u8; ENCODED_LEN]>::try_from(text) else {
            return self.open_other_length(text, room, now_secs, skew_secs);
        };
        // Asked apart from the lookup, so that the hit path stays as it was: one thread-local
        // check more costs a hit about 2 ns (`ticket/decode_cached`).
        let t = if crate::ticket::cache::skipping() {
            self.authenticate(text, room)?
        } else {
            match crate::ticket::cache::get(self.generation, room.serial(), text) {
                Some(t) => t,
                None => self.open_uncached(text, room)?,
            }
        };
        check_time(t, now_secs, skew_secs)
    }

    /// Decodes and authenticates a ticket of `room` without looking at the time (for tools
    /// that inspect tickets; the engine always checks expiry and skew).
    pub fn open_any_time(&self, text: &str, room: &RoomId) -> Result<Ticket, TicketError> {
        let text = text.as_bytes();
        match <&[u8; ENCODED_LEN]>::try_from(text) {
            Ok(text) => self.authenticate(text, room),
            Err(_) => self.authenticate_legacy(text, room),
        }
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
        crate::ticket::cache::put(self.generation, room.serial(), text, &t);
        Ok(t)
    }

    /// A value of another length than this format's: a ticket of the previous format, or
    /// badly encoded.
    #[cold]
    #[inline(never)]
    fn open_other_length(
        &self,
        text: &[u8],
        room: &RoomId,
        now_secs: u32,
        skew_secs: u32,
    ) -> Result<Ticket, TicketError> {
        check_time(self.authenticate_legacy(text, room)?, now_secs, skew_secs)
    }

    /// The key a decoded ticket's clear header names, once the header is checked: format
    /// `version`, `room`'s tag, a key of this keyring. The caller authenticates the header it
    /// received (byte 1, not the key's id: the two are equal by construction of `index`).
    #[inline]
    fn key_for(&self, head: &[u8], version: u8, room: &RoomId) -> Result<&Key, TicketError> {
        if head[0] != version {
            return Err(TicketError::BadEncoding);
        }
        if header_room_tag(head) != room.tag() {
            return Err(TicketError::WrongRoom);
        }
        match self.index[usize::from(head[1])] {
            0 => Err(TicketError::UnknownKey),
            slot => Ok(&self.keys[usize::from(slot) - 1]),
        }
    }

    /// Decodes and authenticates an encoded ticket (no checks that depend on the time).
    /// Inlined into its callers, so the ticket is not copied from frame to frame: into
    /// `open_uncached`, and into `open_bytes` for a thread skipping the cache (the common case
    /// in a sale: most tickets new to the thread). Opened through `open_uncached` there, a
    /// call and a `put` that remembered nothing, that case cost 100 instructions and 15-25 ns
    /// more (callgrind, `cookie_instructions cold`; criterion, `ticket/decode_cold`).
    #[inline(always)]
    fn authenticate(&self, text: &[u8; ENCODED_LEN], room: &RoomId) -> Result<Ticket, TicketError> {
        // (The text copied into a buffer padded with `A`s, so that base64-simd's AVX2 steps
        // cover it all, was tried three times: 90-104 instructions fewer, but slower, as its
        // 32-byte loads straddle the copy's stores; BENCHMARKS.md, 2026-11-24, -27, -28.)
        let mut sealed = [0u8; SEALED_LEN];
        URL_SAFE_NO_PAD
            .decode(text, Out::from_slice(&mut sealed))
            .map_err(|_| TicketError::BadEncoding)?;
        let key = self.key_for(&sealed[..HEAD], VERSION, room)?;
        let nonce = aegis_nonce(&sealed[HEAD..BODY_AT]);
        let (data, len) = room.associated_data(VERSION, sealed[1]);
        let (body, tag) = sealed[BODY_AT..].split_at_mut(BODY);
        let (body, tag): (&mut [u8; BODY], &[u8; TAG]) = match (body.try_into(), (&*tag).try_into())
        {
            (Ok(body), Ok(tag)) => (body, tag),
            _ => return Err(TicketError::BadEncoding),
        };
        Aegis256::<TAG>::new(&key.aegis, &nonce)
            .decrypt_in_place(body, tag, &data[..len])
            .map_err(|_| TicketError::BadTag)?;
        read_body(body).ok_or(TicketError::BadEncoding)
    }

    /// Decodes and authenticates a ticket of the previous format (see `legacy`); anything
    /// else of the wrong length is badly encoded.
    fn authenticate_legacy(&self, text: &[u8], room: &RoomId) -> Result<Ticket, TicketError> {
        if text.len() != legacy::ENCODED_LEN {
            return Err(TicketError::BadEncoding);
        }
        let mut sealed = [0u8; legacy::SEALED_LEN];
        URL_SAFE_NO_PAD
            .decode(text, Out::from_slice(&mut sealed))
            .map_err(|_| TicketError::BadEncoding)?;
        let key = self.key_for(&sealed[..HEAD], legacy::VERSION, room)?;
        key.legacy.open(sealed[1], &mut sealed, room)
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::ticket::{room_tag, TicketState};
    use base64::Engine as _;

    const NOW: u32 = 1_795_000_000;

    fn sample() -> Ticket {
        Ticket {
            id: 0x0023_4567_89ab_cdef,
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

    /// `base64-simd` reads and writes exactly what the `base64` crate's scalar engine does,
    /// and refuses what it refuses: bad characters anywhere, and non-canonical trailing bits,
    /// at the lengths of both formats.
    #[test]
    fn the_simd_codec_matches_the_scalar_one() {
        fn check<const RAW: usize, const TEXT: usize>(round: u32) {
            let scalar = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let mut raw = [0u8; RAW];
            crate::random::fill(&mut raw);
            let mut a = [0u8; TEXT];
            let mut b = [0u8; TEXT];
            assert_eq!(scalar.encode_slice(raw, &mut a), Ok(TEXT));
            assert_eq!(
                URL_SAFE_NO_PAD.encode(&raw, Out::from_slice(&mut b)),
                &a[..]
            );
            let mut out = [0u8; RAW];
            assert!(URL_SAFE_NO_PAD
                .decode(&a, Out::from_slice(&mut out))
                .is_ok());
            assert_eq!(out, raw);
            // One character made invalid, or changed to another valid one.
            let at = round as usize % TEXT;
            for c in [b'*', b'=', b'+', b'/', 0x80, b'A', b'_', b'w', b'g'] {
                let mut t = a;
                t[at] = c;
                let mut p = [0u8; 80];
                let mut q = [0u8; RAW];
                let x = scalar.decode_slice_unchecked(t, &mut p);
                let y = URL_SAFE_NO_PAD.decode(&t, Out::from_slice(&mut q));
                assert_eq!(x.is_ok(), y.is_ok(), "{:?} at {at}", c as char);
                if let (Ok(_), Ok(y)) = (x, y) {
                    assert_eq!(&p[..RAW], &y[..]);
                }
            }
        }
        for round in 0..2_000u32 {
            check::<SEALED_LEN, ENCODED_LEN>(round);
            check::<{ legacy::SEALED_LEN }, { legacy::ENCODED_LEN }>(round);
        }
    }

    /// A thread that skips its ticket cache (a window of lookups without hits: every ticket
    /// new to it, as in a sale) opens tickets as one that looks them up: the same ticket
    /// back, and the same refusals (a changed tag, another room, expired, a bad character).
    #[test]
    fn tickets_open_alike_while_the_thread_skips_its_cache() {
        let ring = ring(&[(1, 1)], 1);
        let shop = RoomId::new("shop");
        let good = ring.seal(&shop, &sample());
        let mut tampered = *good
            .as_str()
            .as_bytes()
            .first_chunk::<ENCODED_LEN>()
            .unwrap();
        // Another valid character in the tag (all six bits of character 91 are the tag's).
        let c = &mut tampered[ENCODED_LEN - 3];
        *c = if *c == b'A' { b'B' } else { b'A' };
        let mut badly = tampered;
        badly[40] = b'*';
        // (the text, its room, the time, what opening it answers)
        type Case<'a> = (&'a [u8], &'a RoomId, u32, Result<Ticket, TicketError>);
        let cases: [Case<'_>; 5] = [
            (good.as_str().as_bytes(), &shop, NOW, Ok(sample())),
            (&tampered, &shop, NOW, Err(TicketError::BadTag)),
            (&badly, &shop, NOW, Err(TicketError::BadEncoding)),
            (
                good.as_str().as_bytes(),
                &RoomId::new("shoq"),
                NOW,
                Err(TicketError::WrongRoom),
            ),
            (
                good.as_str().as_bytes(),
                &shop,
                NOW + 301,
                Err(TicketError::Expired),
            ),
        ];
        let answers = |ring: &Keyring| -> Vec<Result<Ticket, TicketError>> {
            cases
                .iter()
                .map(|(text, room, now, _)| ring.open_bytes(text, room, *now, 30))
                .collect()
        };
        let want: Vec<_> = cases.iter().map(|c| c.3).collect();
        // This test's own thread: its cache looks tickets up first (and remembers `good`).
        assert_eq!(answers(&ring), want, "looked up");
        assert_eq!(answers(&ring), want, "looked up again (hits)");
        // A window of tickets it has never seen, then the thread skips its cache.
        for i in 0..300 {
            let t = ring.seal(&shop, &Ticket { id: i, ..sample() });
            assert!(ring.open(t.as_str(), &shop, NOW, 30).is_ok());
        }
        assert!(
            crate::ticket::cache::skipping(),
            "the thread skips its cache"
        );
        assert_eq!(answers(&ring), want, "skipping the cache");
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The AEAD is AEGIS-256 as specified: test vectors 3, 4 and 5 of the specification's
    /// appendix (draft-irtf-cfrg-aegis-aead, A.3), and its vectors 6 to 9 refused.
    #[test]
    fn aegis_256_matches_the_specification() {
        let key: [u8; 32] = hex("1001000000000000000000000000000000000000000000000000000000000000")
            .try_into()
            .unwrap();
        let nonce: [u8; 32] =
            hex("1000020000000000000000000000000000000000000000000000000000000000")
                .try_into()
                .unwrap();
        let vectors = [
            (
                "0001020304050607",
                "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
                "f373079ed84b2709faee373584585d60accd191db310ef5d8b11833df9dec711",
                "8d86f91ee606e9ff26a01b64ccbdd91d",
            ),
            (
                "0001020304050607",
                "000102030405060708090a0b0c0d",
                "f373079ed84b2709faee37358458",
                "c60b9c2d33ceb058f96e6dd03c215652",
            ),
            (
                "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223242526272829",
                "101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f3031323334353637",
                "57754a7d09963e7c787583a2e7b859bb24fa1e04d49fd550b2511a358e3bca252a9b1b8b30cc4a67",
                "ab8a7d53fd0e98d727accca94925e128",
            ),
        ];
        for (ad, msg, ct, tag) in vectors {
            let (ad, mut buf) = (hex(ad), hex(msg));
            let got = Aegis256::<16>::new(&key, &nonce).encrypt_in_place(&mut buf, &ad);
            assert_eq!(buf, hex(ct));
            assert_eq!(got.to_vec(), hex(tag));
            let tag: [u8; 16] = got;
            Aegis256::<16>::new(&key, &nonce)
                .decrypt_in_place(&mut buf, &tag, &ad)
                .unwrap();
            assert_eq!(buf, hex(msg));
        }
        // Vectors 6 to 9: key and nonce swapped, ciphertext, associated data or tag changed.
        let (ct, tag) = (
            "f373079ed84b2709faee37358458",
            "c60b9c2d33ceb058f96e6dd03c215652",
        );
        let tag: [u8; 16] = hex(tag).try_into().unwrap();
        let wrong_tag: [u8; 16] = hex("c60b9c2d33ceb058f96e6dd03c215653").try_into().unwrap();
        for (k, n, ct, ad, tag) in [
            (&nonce, &key, ct, "0001020304050607", tag),
            (
                &key,
                &nonce,
                "f373079ed84b2709faee37358459",
                "0001020304050607",
                tag,
            ),
            (&key, &nonce, ct, "0001020304050608", tag),
            (&key, &nonce, ct, "0001020304050607", wrong_tag),
        ] {
            let mut buf = hex(ct);
            assert!(Aegis256::<16>::new(k, n)
                .decrypt_in_place(&mut buf, &tag, &hex(ad))
                .is_err());
        }
    }

    /// A keyring refuses a key id given twice (the header names keys by id), and takes all
    /// 256 ids.
    #[test]
    fn key_ids_are_distinct_and_all_usable() {
        assert!(Keyring::new(&[(1, [7; 32]), (1, [8; 32])], None).is_err());
        let all: Vec<(u8, [u8; 32])> = (0..=255u8).map(|id| (id, [id; 32])).collect();
        let shop = RoomId::new("shop");
        for signing in [0u8, 1, 254, 255] {
            let k = Keyring::new(&all, Some(signing)).unwrap();
            let text = k.seal(&shop, &sample());
            assert_eq!(k.open(text.as_str(), &shop, NOW, 30), Ok(sample()));
            let alone = Keyring::new(&[(signing, [signing; 32])], None).unwrap();
            assert_eq!(alone.open(text.as_str(), &shop, NOW, 30), Ok(sample()));
        }
    }

    /// A ticket sealed by the build before format 3 (`a7eb53f`, key 1 = [7; 32], room `shop`,
    /// `sample()` of that build: a 64-bit id) opens, its id whole; and one sealed by this
    /// build, which pins format 3's layout, key derivation, nonce and associated data: a
    /// change to any of them fails this test.
    #[test]
    fn tickets_of_fixed_builds_open() {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        let format_2 = "AgGp4EeosDyM4FEE9CJ3hbw9hxstUiT9u2gwE6vAb3SpmybtlpoWGv3X_uAtaNLZp6HhznHpRAdbceIHi-NMxm7-MA";
        let format_3 = "AwGp4Eeo39mjX4298Ts-MGyF4jQJm9I8nxj6VcAZN6ESH1OHuvxRKbXKJ1LUEq0iQZOemgXqhCTjL4y7xe5GzFIuYXCOiQ";
        let old = Ticket {
            id: 0x0123_4567_89ab_cdef,
            ..sample()
        };
        for (text, want) in [(format_2, old), (format_3, sample())] {
            assert_eq!(k.open(text, &shop, NOW, 30), Ok(want), "{text}");
            assert_eq!(
                ring(&[(1, 8)], 1).open(text, &shop, NOW, 30),
                Err(TicketError::BadTag)
            );
        }
    }

    /// Tickets sealed by builds before format 3 (AES-256-GCM) still open, with every check,
    /// and are refused for the same reasons as format 3's.
    #[test]
    fn format_2_tickets_still_open() {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        let old = LegacyKey::new(&[7; 32]).unwrap().seal(1, &shop, &sample());
        assert_eq!(old.len(), legacy::ENCODED_LEN);
        assert_eq!(old.len(), 90);
        assert_eq!(k.open(&old, &shop, NOW, 30), Ok(sample()));
        assert_eq!(k.open_any_time(&old, &shop), Ok(sample()));
        refused_for_each_reason(&old);
        // A format 3 header in a format 2 length, and the reverse, are refused.
        let mut raw = URL_SAFE_NO_PAD
            .decode_to_vec(k.seal(&shop, &sample()).as_str())
            .unwrap();
        raw[0] = legacy::VERSION;
        let relabelled = URL_SAFE_NO_PAD.encode_to_string(&raw);
        assert_eq!(
            k.open(&relabelled, &shop, NOW, 30),
            Err(TicketError::BadEncoding)
        );
        let mut raw =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &old)
                .unwrap();
        raw[0] = VERSION;
        let relabelled =
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &raw);
        assert_eq!(
            k.open(&relabelled, &shop, NOW, 30),
            Err(TicketError::BadEncoding)
        );
        // New tickets are format 3.
        let new = k.seal(&shop, &sample());
        assert_eq!(new.as_str().len(), ENCODED_LEN);
        let raw = base64::Engine::decode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            new.as_str(),
        )
        .unwrap();
        assert_eq!(raw[0], 3);
    }

    #[test]
    fn round_trip_and_length() {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        let enc = k.seal(&shop, &sample());
        assert_eq!(enc.as_str().len(), ENCODED_LEN);
        assert_eq!(ENCODED_LEN, 94);
        assert_eq!(k.open(enc.as_str(), &shop, NOW, 30), Ok(sample()));
        // Two seals of the same ticket differ (fresh nonce).
        assert_ne!(k.seal(&shop, &sample()).as_str(), enc.as_str());
    }

    /// `text`, a ticket of `sample()` sealed for `shop` with key 1 = [7; 32] (either format),
    /// is refused for each reason in turn: every character of its nonce, ciphertext and tag
    /// changed, another key id, another key under its id, another room, expired, from the
    /// future.
    fn refused_for_each_reason(text: &str) {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        for i in 8..text.len() - 1 {
            let mut b = text.to_owned().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let s = String::from_utf8(b).unwrap();
            assert_eq!(
                k.open(&s, &shop, NOW, 30),
                Err(TicketError::BadTag),
                "byte {i}"
            );
        }
        let refusals = [
            (
                ring(&[(2, 7)], 2).open(text, &shop, NOW, 30),
                TicketError::UnknownKey,
            ),
            (
                ring(&[(1, 8)], 1).open(text, &shop, NOW, 30),
                TicketError::BadTag,
            ),
            (
                k.open(text, &RoomId::new("other"), NOW, 30),
                TicketError::WrongRoom,
            ),
            (k.open(text, &shop, NOW + 300, 30), TicketError::Expired),
            (k.open(text, &shop, NOW - 100, 30), TicketError::FromFuture),
        ];
        for (got, want) in refusals {
            assert_eq!(got, Err(want));
        }
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let k = ring(&[(1, 7)], 1);
        let shop = RoomId::new("shop");
        let enc = k.seal(&shop, &sample()).as_str().to_owned();
        refused_for_each_reason(&enc);
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
