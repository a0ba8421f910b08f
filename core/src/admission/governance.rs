//! Which configuration governs a room whose counters several engines share.
//!
//! Engines in several processes can map one room's counters (nginx workers, gunicorn
//! workers, a state file) and each advances them with the limits of its own configuration.
//! Two configurations taking turns would each refill the pools to their own limits: a room of
//! 2 next to a room of 6 holds 6, and neither limit means anything. So one configuration
//! governs the room at a time, recorded in its counters by fingerprint: only engines of that
//! configuration advance the room; the others go on deciding on its counters (every claim
//! still needs a slot the governing configuration granted) and say so in their stats.
//!
//! The newest wins: an engine that attaches to the counters (built, or reloaded with a room
//! whose configuration changed) takes the room over. That is what a reload is (nginx's new
//! workers while the old ones drain, gunicorn's after a HUP); two different applications
//! sharing one state file are governed by whichever started last, and the older one's stats
//! say it no longer governs. A configuration whose engines have all stopped (none advanced the
//! room for three tick periods) is taken over by the next engine that ticks, so a room is
//! never left without a governor.

use crate::admission::room::Room;
use crate::counters::tick_block::{Cell, TickBlock};
use crate::env;

/// A fingerprint of what governs a room: its configuration, the settings that number its
/// counters, and the cluster table (never zero: zero means "nobody yet").
pub(crate) fn fingerprint(room: &crate::config::RoomConfig, config: &crate::config::Config) -> u64 {
    let text =
        serde_json::to_string(&(room, &config.settings, &config.cluster)).unwrap_or_default();
    // FNV-1a, 64 bits: stable across processes and builds.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// How long a governing configuration may go without advancing the room before another takes
/// it over: three of the longest tick periods a front door may use (a tick at least once per
/// bucket and per refresh interval), and at least three seconds.
fn takeover_ms(room: &Room) -> u64 {
    let period_secs = u64::from(room.refresh_secs)
        .min(room.bucket_ms / 1000)
        .max(1);
    (3 * period_secs * 1000).max(3000)
}

/// Makes `room`'s configuration the one that governs its counters (an engine attaching).
pub(crate) fn claim(room: &Room, tb: &TickBlock<'_>) {
    tb.set(Cell::ConfigBeat, env::monotonic_ms());
    tb.set(Cell::ConfigHash, room.config_hash);
}

/// Whether `room`'s configuration governs its counters now (then this advance goes ahead and
/// says so), taking the room over from a configuration whose engines stopped advancing it.
/// Called under the room's tick lock.
pub(crate) fn governs(room: &Room, tb: &TickBlock<'_>) -> bool {
    // The beat first, the clock after: a beat written in between (a newer configuration
    // attaching) is then never ahead of the clock read.
    let current = tb.get(Cell::ConfigHash);
    let beat = tb.get(Cell::ConfigBeat);
    let now = env::monotonic_ms();
    let mine = current == room.config_hash;
    let takeover = takeover_ms(room);
    // A beat far ahead of the clock is another boot's (a state file kept across a reboot).
    let orphaned =
        current == 0 || beat > now.saturating_add(takeover) || now.saturating_sub(beat) > takeover;
    if !(mine || orphaned) {
        return false;
    }
    if !mine {
        tb.set(Cell::ConfigHash, room.config_hash);
    }
    tb.set(Cell::ConfigBeat, now);
    true
}

/// Whether `room`'s configuration is the one governing its counters (for stats).
pub(crate) fn is_governing(room: &Room) -> bool {
    room.counters.tick_block().get(Cell::ConfigHash) == room.config_hash
}
