//! A room's identity as tickets carry it.
//!
//! A ticket names its room twice: a 32-bit tag in its clear header, so that a ticket of another
//! room is refused as `wrong_room` before any decryption, and the room's whole name as part of
//! the associated data the AEAD authenticates. Tags can collide (`liquid` and `costarring` have
//! the same FNV-1a hash); names cannot, so a ticket of one room never opens in another, whatever
//! their tags. Each `RoomId` also has a serial number unique in the process, which keys the
//! per-thread cache of opened tickets (a ticket opened for one room is never served from the
//! cache to another).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::ticket::format::{header, HEAD};

/// Longest room name (the configuration enforces it too).
pub const MAX_ROOM_NAME: usize = 64;

/// A room's identity for sealing and opening tickets.
#[derive(Debug)]
pub struct RoomId {
    /// A ticket header's place (filled per ticket), then the name: the associated data.
    associated: [u8; HEAD + MAX_ROOM_NAME],
    len: u8,
    tag: u32,
    serial: u64,
}

static SERIALS: AtomicU64 = AtomicU64::new(1);

impl RoomId {
    /// The identity of the room called `name` (at most 64 bytes; longer names are cut, and the
    /// configuration refuses them anyway).
    pub fn new(name: &str) -> Self {
        let bytes = &name.as_bytes()[..name.len().min(MAX_ROOM_NAME)];
        let mut associated = [0u8; HEAD + MAX_ROOM_NAME];
        associated[HEAD..HEAD + bytes.len()].copy_from_slice(bytes);
        Self {
            associated,
            len: bytes.len() as u8,
            tag: room_tag(name),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The room's name as bytes.
    pub fn name(&self) -> &[u8] {
        &self.associated[HEAD..HEAD + usize::from(self.len)]
    }

    /// The associated data the AEAD authenticates with a ticket of this room: the ticket's
    /// clear header (format `version`, key `key_id`, this room's tag), then the room's name.
    /// Returned with its length in a fixed-size buffer (no allocation; one fixed-size copy).
    #[inline]
    pub(crate) fn associated_data(
        &self,
        version: u8,
        key_id: u8,
    ) -> ([u8; HEAD + MAX_ROOM_NAME], usize) {
        let mut data = self.associated;
        data[..HEAD].copy_from_slice(&header(version, key_id, self.tag));
        (data, HEAD + usize::from(self.len))
    }

    /// The 32-bit tag in the clear header of this room's tickets.
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// Unique in the process, for the ticket cache.
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }
}

/// The 32-bit tag of a room name (FNV-1a). Not an identity: see [`RoomId`].
pub fn room_tag(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_collide_where_identities_do_not() {
        assert_eq!(room_tag("liquid"), room_tag("costarring"));
        let (a, b) = (RoomId::new("liquid"), RoomId::new("costarring"));
        assert_ne!(a.name(), b.name());
        assert_ne!(a.serial(), b.serial());
    }

    #[test]
    fn associated_data_is_the_header_then_the_name() {
        let room = RoomId::new("shop");
        let (data, len) = room.associated_data(3, 9);
        let mut want = header(3, 9, room_tag("shop")).to_vec();
        want.extend_from_slice(b"shop");
        assert_eq!(&data[..len], &want[..]);
    }
}
