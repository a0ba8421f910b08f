//! Everything a decision reads, swapped in whole by `tick` and `reload`.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::admission::room::Room;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ticket::Keyring;

/// A room as a snapshot sees it: the room and the queue figures of the last tick.
pub(crate) struct RoomView {
    /// The room.
    pub(crate) room: Arc<Room>,
    /// Live waiters.
    pub(crate) queue_length: u64,
    /// The oldest arrival bucket the queue tracks.
    pub(crate) queue_base: u64,
    /// `ahead[i]`: live waiters with arrival bucket below `queue_base + i`.
    pub(crate) ahead: Arc<[u64]>,
    /// Recent admissions per second.
    pub(crate) rate_per_sec: f64,
}

/// Everything a decision reads.
pub(crate) struct Snapshot {
    /// Keys that seal and open tickets.
    pub(crate) keyring: Arc<Keyring>,
    /// The running configuration.
    pub(crate) config: Arc<Config>,
    /// Tolerated clock skew of tickets.
    pub(crate) skew_secs: u32,
    /// The rooms, in configuration order.
    pub(crate) rooms: Vec<RoomView>,
    /// Room index by name.
    pub(crate) by_name: FxHashMap<Box<[u8]>, usize>,
}

impl Snapshot {
    /// A snapshot of `rooms` (in `config`'s order).
    pub(crate) fn new(keyring: Arc<Keyring>, config: Arc<Config>, rooms: Vec<RoomView>) -> Self {
        let by_name = rooms
            .iter()
            .enumerate()
            .map(|(i, v)| (v.room.cfg.name.as_bytes().into(), i))
            .collect();
        Self {
            keyring,
            skew_secs: config.settings.max_clock_skew_secs,
            config,
            rooms,
            by_name,
        }
    }

    /// The room called `name`.
    #[inline]
    pub(crate) fn room(&self, name: &str) -> Result<&RoomView> {
        self.room_bytes(name.as_bytes())
    }

    /// The room called `name`, given as bytes.
    #[inline]
    pub(crate) fn room_bytes(&self, name: &[u8]) -> Result<&RoomView> {
        // A handful of rooms (the usual case) is found faster by comparing names than by
        // hashing one.
        let found = if self.rooms.len() <= 8 {
            self.rooms
                .iter()
                .find(|r| r.room.cfg.name.as_bytes() == name)
        } else {
            self.by_name.get(name).map(|&i| &self.rooms[i])
        };
        match found {
            Some(view) => Ok(view),
            None => Err(unknown_room(name)),
        }
    }
}

/// The error for a room name no room has (out of line: the admit path only branches to it).
#[cold]
#[inline(never)]
fn unknown_room(name: &[u8]) -> Error {
    Error::UnknownRoom(String::from_utf8_lossy(name).into_owned())
}
