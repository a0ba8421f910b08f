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

/// Bytes of format 3's associated data at most: a header, the name's length and the name,
/// zero-padded to whole AEGIS blocks of 16 bytes.
const ASSOCIATED_MAX: usize = (HEAD + 1 + MAX_ROOM_NAME).div_ceil(16) * 16;

/// A room's identity for sealing and opening tickets.
#[derive(Debug)]
pub struct RoomId {
    /// Format 3's associated data, but for the header's place (filled per ticket): the
    /// name's length, the name, zeros up to a whole number of 16-byte blocks.
    associated: [u8; ASSOCIATED_MAX],
    /// The name, for format 2's associated data (header, then name).
    name: [u8; MAX_ROOM_NAME],
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
        let mut associated = [0u8; ASSOCIATED_MAX];
        associated[HEAD] = bytes.len() as u8;
        associated[HEAD + 1..HEAD + 1 + bytes.len()].copy_from_slice(bytes);
        let mut stored = [0u8; MAX_ROOM_NAME];
        stored[..bytes.len()].copy_from_slice(bytes);
        Self {
            associated,
            name: stored,
            len: bytes.len() as u8,
            tag: room_tag(name),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The room's name as bytes.
    pub fn name(&self) -> &[u8] {
        &self.name[..usize::from(self.len)]
    }

    /// The associated data AEGIS-256 authenticates with a format 3 ticket of this room: the
    /// ticket's clear header (format `version`, key `key_id`, this room's tag), the name's
    /// length, the name, and zeros up to a whole number of 16-byte blocks (a partial block
    /// costs the AEAD more than a zero one; the length keeps the padding unambiguous).
    /// Returned with its length in a fixed-size buffer (no allocation; one fixed-size copy).
    #[inline]
    pub(crate) fn associated_data(&self, version: u8, key_id: u8) -> ([u8; ASSOCIATED_MAX], usize) {
        let mut data = self.associated;
        data[..HEAD].copy_from_slice(&header(version, key_id, self.tag));
        (data, (HEAD + 1 + usize::from(self.len)).div_ceil(16) * 16)
    }

    /// Format 2's associated data: the ticket's clear header, then the room's name.
    pub(crate) fn header_and_name(
        &self,
        version: u8,
        key_id: u8,
    ) -> ([u8; HEAD + MAX_ROOM_NAME], usize) {
        let mut data = [0u8; HEAD + MAX_ROOM_NAME];
        data[..HEAD].copy_from_slice(&header(version, key_id, self.tag));
        data[HEAD..HEAD + usize::from(self.len)].copy_from_slice(self.name());
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
        want.push(4);
        want.extend_from_slice(b"shop");
        want.resize(16, 0);
        assert_eq!(&data[..len], &want[..]);
        let (data, len) = room.header_and_name(2, 9);
        let mut want = header(2, 9, room_tag("shop")).to_vec();
        want.extend_from_slice(b"shop");
        assert_eq!(&data[..len], &want[..]);
        // Whole blocks at every name length, up to the longest.
        for n in 1..=MAX_ROOM_NAME {
            let (_, len) = RoomId::new(&"x".repeat(n)).associated_data(3, 0);
            assert_eq!(len % 16, 0);
            assert!(len >= HEAD + 1 + n && len < HEAD + 1 + n + 16);
        }
    }
}
