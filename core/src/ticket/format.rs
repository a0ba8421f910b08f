//! The byte layout of a sealed ticket (see the module documentation of `ticket`).

use crate::ticket::{Ticket, TicketState};

/// Format version.
pub(crate) const VERSION: u8 = 3;
/// Bytes of the clear header: version, key id, room tag.
pub(crate) const HEAD: usize = 6;
/// Bytes of the nonce a ticket carries (random; AEGIS-256's 32-byte nonce is these bytes
/// followed by zeros).
pub(crate) const NONCE: usize = 16;
/// Bytes of the encrypted body.
pub(crate) const BODY: usize = 33;
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

/// Writes a ticket's body (before encryption).
pub(crate) fn write_body(t: &Ticket, body: &mut [u8]) {
    body[0..8].copy_from_slice(&t.id.to_le_bytes());
    body[8] = match t.state {
        TicketState::Admitted => 1,
        TicketState::Queued => 2,
    };
    let fields = [
        t.arrival,
        t.accepted_at,
        t.counted,
        t.last_checkin,
        t.expires,
        t.incarnation,
    ];
    for (i, v) in fields.into_iter().enumerate() {
        body[9 + 4 * i..13 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
}

/// Reads a ticket's body (after decryption); `None` for an unknown state byte.
#[inline]
pub(crate) fn read_body(body: &[u8; BODY]) -> Option<Ticket> {
    let u32_at = |i: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&body[i..i + 4]);
        u32::from_le_bytes(w)
    };
    let mut id = [0u8; 8];
    id.copy_from_slice(&body[0..8]);
    let state = match body[8] {
        1 => TicketState::Admitted,
        2 => TicketState::Queued,
        _ => return None,
    };
    Some(Ticket {
        id: u64::from_le_bytes(id),
        state,
        arrival: u32_at(9),
        accepted_at: u32_at(13),
        counted: u32_at(17),
        last_checkin: u32_at(21),
        expires: u32_at(25),
        incarnation: u32_at(29),
    })
}
