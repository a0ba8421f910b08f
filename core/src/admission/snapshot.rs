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
        head_is(&self.head, &name[..n]) && (name.len() <= NAME_INLINE || full())
    }
}

/// Whether `part` (at most [`NAME_INLINE`] bytes) is where `head` starts, read as two or
/// three overlapping words: a slice's `==` here was a call to `memcmp`, 18 instructions of
/// every admit's 1,200 (callgrind, `cookie_instructions cold`).
#[inline]
fn head_is(head: &[u8; NAME_INLINE], part: &[u8]) -> bool {
    let n = part.len();
    debug_assert!(n <= NAME_INLINE);
    let w8 = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let w4 = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
    // Each arm's reads cover `0..n`: the last word ends at `n`, the first starts at 0.
    match n {
        0 => true,
        1..=3 => part[0] == head[0] && part[n / 2] == head[n / 2] && part[n - 1] == head[n - 1],
        4..=7 => w4(part, 0) == w4(head, 0) && w4(part, n - 4) == w4(head, n - 4),
        8..=16 => w8(part, 0) == w8(head, 0) && w8(part, n - 8) == w8(head, n - 8),
        _ => {
            w8(part, 0) == w8(head, 0)
                && w8(part, 8) == w8(head, 8)
                && w8(part, n - 8) == w8(head, n - 8)
        }
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
        self.find_room(name).ok_or_else(|| unknown_room(name))
    }

    /// [`Snapshot::room_bytes`] without the error: the answer comes back in a register (a
    /// `Result` with this crate's error is returned through memory).
    #[inline(always)]
    #[allow(clippy::manual_find)] // (see the loop)
    pub(crate) fn find_room(&self, name: &[u8]) -> Option<&RoomView> {
        // A handful of rooms (the usual case) is found faster by comparing names than by
        // hashing one.
        if self.rooms.len() > 8 {
            return self.find_room_hashed(name);
        }
        // (A loop, not `Iterator::find`: that was compiled as a call of its own.)
        for r in self.rooms.iter() {
            if r.name.is(name, || r.room.cfg.name.as_bytes() == name) {
                return Some(r);
            }
        }
        None
    }

    /// [`Snapshot::find_room`] among more than 8 rooms: out of line, so that its registers
    /// are not saved and restored by every lookup among a few.
    #[inline(never)]
    fn find_room_hashed(&self, name: &[u8]) -> Option<&RoomView> {
        self.by_name.get(name).map(|&i| &self.rooms[i])
    }
}

/// The error for a room name no room has (out of line: the admit path only branches to it).
#[cold]
#[inline(never)]
pub(crate) fn unknown_room(name: &[u8]) -> Error {
    Error::UnknownRoom(String::from_utf8_lossy(name).into_owned())
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::{head_is, RoomName, NAME_INLINE};
    use crate::error::Error;
    use crate::Engine;

    /// The word-wise compare answers as the slices' `==`: every length up to the inline
    /// bytes, against every name of that length that differs in one byte (wherever it is,
    /// by any of a few bit patterns), and the equal one.
    #[test]
    fn the_inline_compare_is_the_slices() {
        let room: Vec<u8> = (0..NAME_INLINE as u8).map(|i| b'a' + i).collect();
        for name_len in [0, 1, 5, 13, NAME_INLINE] {
            let head = RoomName::new(&room[..name_len]).head;
            for len in 0..=NAME_INLINE {
                let equal: Vec<u8> = head[..len].to_vec();
                assert!(head_is(&head, &equal), "{name_len} {len}");
                for at in 0..len {
                    for by in [1u8, 0x80, 0xff] {
                        let mut part = equal.clone();
                        part[at] ^= by;
                        assert!(!head_is(&head, &part), "{name_len} {len} {at} {by}");
                    }
                }
            }
        }
    }

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
