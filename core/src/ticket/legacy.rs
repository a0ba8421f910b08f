//! Tickets of format 2 (AES-256-GCM, 90 characters), the format before this one: opened, never
//! sealed, so that visitors admitted by a build from before an upgrade keep their place.
//!
//! ```text
//! sealed (67 bytes), then base64url without padding (90 characters):
//!   0..6   clear header, as in format 3 (version 2)
//!   6..18  nonce (96 bits)
//!   18..51 body, encrypted (33 bytes, little endian): ticket id u64 | state u8 | then the
//!          six u32 fields of format 3, in its order
//!   51..67 AES-256-GCM tag, with the header and the room's name as associated data
//! ```
//! Such a ticket is steady until its holder is renewed (the next bucket at the latest; with
//! `disable_session_renewal`, never: it lasts until it expires), and a renewal seals the
//! current format: a session's length after an upgrade, none is left. They are not cached:
//! every request that carries one pays base64 and AES-GCM (about 250 ns here), which the
//! thread's cache spared repeat requests before.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::ticket::format::{state_of, with_fields, HEAD, TAG};
use crate::ticket::{RoomId, Ticket, TicketError};

/// Format version.
pub(crate) const VERSION: u8 = 2;
/// Bytes of the nonce.
const NONCE: usize = 12;
/// Bytes of the encrypted body.
const BODY: usize = 33;
/// Where the body starts.
const BODY_AT: usize = HEAD + NONCE;
/// Bytes of a sealed ticket.
pub(crate) const SEALED_LEN: usize = HEAD + NONCE + BODY + TAG;
/// Characters of an encoded ticket (base64url without padding).
pub(crate) const ENCODED_LEN: usize = (SEALED_LEN * 4).div_ceil(3);

/// A key as format 2 uses it.
pub(crate) struct LegacyKey(LessSafeKey);

impl LegacyKey {
    /// The AES-256-GCM key of 32 bytes of material.
    pub(crate) fn new(material: &[u8; 32]) -> Option<Self> {
        let unbound = UnboundKey::new(&AES_256_GCM, material).ok()?;
        Some(Self(LessSafeKey::new(unbound)))
    }

    /// Authenticates and decrypts a decoded format 2 ticket of `room` (its header already
    /// checked) sealed with key `key_id`.
    pub(crate) fn open(
        &self,
        key_id: u8,
        sealed: &mut [u8; SEALED_LEN],
        room: &RoomId,
    ) -> Result<Ticket, TicketError> {
        let mut nonce = [0u8; NONCE];
        nonce.copy_from_slice(&sealed[HEAD..BODY_AT]);
        let (data, len) = room.header_and_name(VERSION, key_id);
        let body = self
            .0
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&data[..len]),
                &mut sealed[BODY_AT..],
            )
            .map_err(|_| TicketError::BadTag)?;
        let body: &[u8; BODY] = (&*body).try_into().map_err(|_| TicketError::BadEncoding)?;
        read_body(body).ok_or(TicketError::BadEncoding)
    }

    /// Seals a format 2 ticket, as the builds before format 3 did (for the tests that prove
    /// such tickets still open).
    #[cfg(all(test, not(velvet_rope_loom)))]
    pub(crate) fn seal(&self, key_id: u8, room: &RoomId, t: &Ticket) -> String {
        use crate::ticket::format::header;
        let mut sealed = [0u8; SEALED_LEN];
        sealed[..HEAD].copy_from_slice(&header(VERSION, key_id, room.tag()));
        let mut nonce = [0u8; NONCE];
        crate::random::fill(&mut nonce);
        sealed[HEAD..BODY_AT].copy_from_slice(&nonce);
        write_body(t, &mut sealed[BODY_AT..BODY_AT + BODY]);
        let (data, len) = room.header_and_name(VERSION, key_id);
        let (body, tag_out) = sealed[BODY_AT..].split_at_mut(BODY);
        let tag = self
            .0
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&data[..len]),
                body,
            )
            .expect("sealing 33 bytes");
        tag_out.copy_from_slice(tag.as_ref());
        base64_simd::URL_SAFE_NO_PAD.encode_to_string(sealed)
    }
}

/// Reads a format 2 body (after decryption); `None` for an unknown state byte. The id is read
/// whole (64 bits), as the build that issued the ticket keyed its replay guards (shared with
/// this build through the counters' state file and across an nginx binary upgrade): a queued
/// format 2 ticket admitted there is found admitted here. Its holder's next ticket carries
/// the low 56 bits, as every format 3 ticket does; guards are per bucket, and that ticket is
/// counted in a new one.
fn read_body(body: &[u8; BODY]) -> Option<Ticket> {
    let mut id = [0u8; 8];
    id.copy_from_slice(&body[0..8]);
    let state = state_of(body[8])?;
    Some(with_fields(u64::from_le_bytes(id), state, body, 9))
}

/// Writes a format 2 body, as the builds before format 3 did.
#[cfg(all(test, not(velvet_rope_loom)))]
fn write_body(t: &Ticket, body: &mut [u8]) {
    body[0..8].copy_from_slice(&t.id.to_le_bytes());
    body[8] = match t.state {
        crate::ticket::TicketState::Admitted => 1,
        crate::ticket::TicketState::Queued => 2,
    };
    crate::ticket::format::write_fields(t, body, 9);
}
