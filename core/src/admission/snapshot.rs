//! Everything a decision reads, swapped in whole by `tick` and `reload`.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::admission::room::Room;
use crate::clock::Millis;
use crate::config::{Config, Rules};
use crate::error::{Error, Result};
use crate::request::FrontDoor;
use crate::ticket::Keyring;

/// Bytes of a room's name kept in the snapshot's array itself.
const NAME_INLINE: usize = 24;

/// A room's name as the lookup by name compares it: its length and first bytes, inline. A
/// request names its room on every call, and in a server the room's own name (behind the
/// room's pointer, then the string's) has usually left the CPU's caches since the last
/// request (a perf profile of nginx put the lookup's read of it among the module's hottest
/// instructions). Names of up to 24 bytes are compared without leaving the snapshot's
/// array; longer ones also compare the rest.
#[derive(Clone, Copy)]
pub(crate) struct RoomName {
    len: usize,
    head: [u8; NAME_INLINE],
}

impl RoomName {
    /// The inline form of `name`.
    pub(crate) fn new(name: &[u8]) -> Self {
        let mut head = [0; NAME_INLINE];
        let n = name.len().min(NAME_INLINE);
        head[..n].copy_from_slice(&name[..n]);
        Self {
            len: name.len(),
            head,
        }
    }

    /// Whether `name` is this room's name. `full` compares `name` with the whole name (behind
    /// the room's pointer); it is called only for names longer than the inline bytes.
    #[inline]
    fn is(&self, name: &[u8], full: impl FnOnce() -> bool) -> bool {
        if self.len != name.len() {
            return false;
        }
        let n = name.len().min(NAME_INLINE);
        self.head[..n] == name[..n] && (name.len() <= NAME_INLINE || full())
    }
}

/// A room as a snapshot sees it: the room and the queue figures of the last tick.
pub(crate) struct RoomView {
    /// The room's name, inline (see `RoomName`).
    pub(crate) name: RoomName,
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
    /// The rules in force over `rules_from..rules_until` (ms; see `RoomConfig::rules_span`).
    pub(crate) rules: Rules,
    /// Start of the span of `rules`.
    pub(crate) rules_from: Millis,
    /// End of the span of `rules`.
    pub(crate) rules_until: Millis,
}

impl RoomView {
    /// The rules in force at `now`: those of the view's span, or (a request after a switch
    /// the last tick did not see yet) worked out afresh.
    #[inline]
    pub(crate) fn rules_at(&self, now: Millis) -> Rules {
        if now >= self.rules_from && now < self.rules_until {
            self.rules
        } else {
            self.room.rules_at(now)
        }
    }

    /// Whether a request at `now` may claim a slot from the room's pools: only before the
    /// schedule's next switch after the last advance (read from the shared tick block, not
    /// this process's view: another process's advance may have moved it either way), since
    /// the slots the pools hold were granted under the rules before it until an advance
    /// after it moves them to the new rules (see `tick`).
    #[inline]
    pub(crate) fn may_claim(&self, now: Millis) -> bool {
        let until = self
            .room
            .counters
            .tick_block()
            .get(crate::counters::tick_block::Cell::GrantsUntil);
        (until == 0 || now < until) && self.room.may_claim()
    }
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
    /// The rooms' routes and the trusted proxies, compiled with the configuration.
    pub(crate) front: Arc<FrontDoor>,
    /// Whether any room accepts origin commands (asked by front doors on every request).
    pub(crate) accepts_origin_commands: bool,
}

impl Snapshot {
    /// A snapshot of `rooms` (in `config`'s order).
    pub(crate) fn new(
        keyring: Arc<Keyring>,
        config: Arc<Config>,
        front: Arc<FrontDoor>,
        rooms: Vec<RoomView>,
    ) -> Self {
        let by_name = rooms
            .iter()
            .enumerate()
            .map(|(i, v)| (v.room.cfg.name.as_bytes().into(), i))
            .collect();
        let accepts_origin_commands = rooms.iter().any(|v| v.room.cfg.revocable());
        Self {
            keyring,
            skew_secs: config.settings.max_clock_skew_secs,
            config,
            rooms,
            by_name,
            front,
            accepts_origin_commands,
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
                .find(|r| r.name.is(name, || r.room.cfg.name.as_bytes() == name))
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

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use crate::error::Error;
    use crate::Engine;

    const NOW: u64 = 1_800_000_000_000;

    /// Rooms whose names share their inline part: two of one length that differ after byte
    /// 24, a prefix of them longer than 24 bytes, one of exactly 24 bytes and one of 25 that
    /// starts with it, and a short one.
    const NAMES: [&str; 6] = [
        "checkout-for-the-spring-sale-a",
        "checkout-for-the-spring-sale-b",
        "checkout-for-the-spring-sale",
        "checkout-for-the-spring-",
        "checkout-for-the-spring-x",
        "shop",
    ];

    #[test]
    fn a_room_is_found_by_its_whole_name_only() {
        let config: String = NAMES
            .iter()
            .map(|n| {
                format!("[[rooms]]\nname = \"{n}\"\ntotal_active_users = 10\nnew_users_per_minute = 10\n")
            })
            .collect();
        let engine = Engine::from_text(&config, NOW).expect("valid configuration");
        for (i, name) in NAMES.iter().enumerate() {
            for _ in 0..=i {
                let d = engine.admit(name, None, NOW).expect(name);
                assert_eq!(d.outcome, crate::Outcome::Admit, "{name}");
            }
        }
        // Each room counted the visitors sent to it by name, and no other room's.
        engine.tick(NOW + 1000);
        let stats: serde_json::Value =
            serde_json::from_str(&engine.stats_json()).expect("stats are JSON");
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(stats["rooms"][name]["admitted_total"], i + 1, "{name}");
        }
        for unknown in [
            "checkout-for-the-spring-sale-c",
            "checkout-for-the-spring-sal",
            "checkout-for-the-spring-y",
            "checkout-for-the-spring",
            "checkout-for-the-spring-sale-",
            "shop2",
            "sho",
            "",
        ] {
            assert!(
                matches!(engine.admit(unknown, None, NOW), Err(Error::UnknownRoom(_))),
                "{unknown:?}"
            );
        }
    }
}
