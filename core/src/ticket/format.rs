//! The byte layout of a sealed ticket (see the module documentation of `ticket`).

use crate::ticket::{Ticket, TicketState};

/// Format version.
pub(crate) const VERSION: u8 = 3;
/// Bytes of the clear header: version, key id, room tag.
pub(crate) const HEAD: usize = 6;
/// Bytes of the nonce a ticket carries (random; AEGIS-256's 32-byte nonce is these bytes
/// followed by zeros).
pub(crate) const NONCE: usize = 16;
/// Bytes of the encrypted body: two AEGIS blocks exactly (a partial block costs the AEAD
/// about 20 ns more here).
pub(crate) const BODY: usize = 32;
/// The bits of a ticket id (the byte above them carries the state).
pub(crate) const ID_MASK: u64 = (1 << 56) - 1;
/// Bytes of the authentication tag.
pub(crate) const TAG: usize = 16;
/// Where the body starts.
pub(crate) const BODY_AT: usize = HEAD + NONCE;
/// Bytes of a sealed ticket.
pub const SEALED_LEN: usize = HEAD + NONCE + BODY + TAG;
/// Characters of an encoded ticket (base64url without padding).
pub const ENCODED_LEN: usize = (SEALED_LEN * 4).div_ceil(3);

/// The clear header of a ticket of format `version` sealed with key `key_id` for a room
/// tagged `room_tag` (the same layout in formats 2 and 3).
pub(crate) fn header(version: u8, key_id: u8, room_tag: u32) -> [u8; HEAD] {
    let t = room_tag.to_le_bytes();
    [version, key_id, t[0], t[1], t[2], t[3]]
}

/// The room tag of a clear header.
pub(crate) fn header_room_tag(head: &[u8]) -> u32 {
    u32::from_le_bytes([head[2], head[3], head[4], head[5]])
}

/// The state's byte in a body.
fn state_byte(state: TicketState) -> u8 {
    match state {
        TicketState::Admitted => 1,
        TicketState::Queued => 2,
    }
}

/// The state of a body's byte; `None` for an unknown one.
pub(crate) fn state_of(byte: u8) -> Option<TicketState> {
    match byte {
        1 => Some(TicketState::Admitted),
        2 => Some(TicketState::Queued),
        _ => None,
    }
}

/// Writes a ticket's six 32-bit fields (arrival, accepted at, counted in, last check-in,
/// expires, incarnation), little endian, from `body[at]` on (the same order in formats 2 and
/// 3).
pub(crate) fn write_fields(t: &Ticket, body: &mut [u8], at: usize) {
    let fields = [
        t.arrival,
        t.accepted_at,
        t.counted,
        t.last_checkin,
        t.expires,
        t.incarnation,
    ];
    for (i, v) in fields.into_iter().enumerate() {
        body[at + 4 * i..at + 4 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
}

/// The ticket of `id` and `state` whose six 32-bit fields are at `body[at]` on (see
/// [`write_fields`]).
#[inline]
pub(crate) fn with_fields(id: u64, state: TicketState, body: &[u8], at: usize) -> Ticket {
    let u32_at = |i: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&body[at + i..at + i + 4]);
        u32::from_le_bytes(w)
    };
    Ticket {
        id,
        state,
        arrival: u32_at(0),
        accepted_at: u32_at(4),
        counted: u32_at(8),
        last_checkin: u32_at(12),
        expires: u32_at(16),
        incarnation: u32_at(20),
    }
}

/// Writes a ticket's body (before encryption): the id's 56 bits and the state's byte above
/// them, then the six 32-bit fields.
pub(crate) fn write_body(t: &Ticket, body: &mut [u8; BODY]) {
    let head = (t.id & ID_MASK) | u64::from(state_byte(t.state)) << 56;
    body[0..8].copy_from_slice(&head.to_le_bytes());
    write_fields(t, body, 8);
}

/// Reads a ticket's body (after decryption); `None` for an unknown state byte.
#[inline]
pub(crate) fn read_body(body: &[u8; BODY]) -> Option<Ticket> {
    let mut head = [0u8; 8];
    head.copy_from_slice(&body[0..8]);
    let head = u64::from_le_bytes(head);
    let state = state_of((head >> 56) as u8)?;
    Some(with_fields(head & ID_MASK, state, body, 8))
}
