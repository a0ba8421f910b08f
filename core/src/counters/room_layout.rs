//! The memory layout of one room's counters: which parameters decide it, where each block
//! lies, and which changes of configuration counters already laid out can still serve.
//!
//! ```text
//! offset 0     header: magic, layout version, the layout's parameters, incarnation
//!              open-slot pool shards          (shards x 128 B)
//!              waiter-slot pool shards        (shards x 128 B)
//!              ticket rejections by reason    (8 x u64)
//!              bucket ring: tags, admitted, moved (3 x buckets x u64)
//!              queue lane tags                (lanes x u64)
//!              queue lane counts              (queue_slots x lanes x i64)
//!              queue lane id sets             (lanes x lane_guard_words x u64)
//!              tick block                     (64 x u64)
//!              bucket guards                  (buckets x guard_words x u64)
//!              revocations, if the origin may revoke: header (16 x u64), tables
//!              (5 x revocation_words x u64), outbox (revocation_words x u64)
//!              tallies for the metrics        (shards x tally_words x u64), and with
//!              rule counts in them, rule keys (256 x u64)
//! ```
//! Every block starts on a 128-byte boundary. The size depends only on the room's
//! configuration, never on the number of visitors.

use crossbeam_utils::CachePadded;

use crate::config::{RoomConfig, Settings};
use crate::counters::buckets::guard_words;
use crate::counters::region::round_up;
use crate::counters::revocations::{GENERATIONS, HEADER_WORDS as REVOCATION_HEADER};
use crate::counters::room_tallies::{
    KEY_WORDS as TALLY_KEYS, RULES as TALLY_RULES, STRIDE as TALLY_STRIDE,
};
use crate::counters::tick_block::CELLS;
use crate::sync::AtomicU64;

/// Number of ticket rejection reasons a region has room for.
pub(crate) const REASONS: usize = 8;

/// Bytes of a room's header.
pub(crate) const HEADER: usize = 128;

/// The parameters that decide a room's memory layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoomLayout {
    /// Shards of each slot pool.
    pub(crate) shards: usize,
    /// Guard words per bucket (from `total_active_users`).
    pub(crate) guard_words: usize,
    /// Slots of the bucket ring (at least `session_duration + 3`).
    pub(crate) buckets: usize,
    /// Arrival buckets the FIFO queue tracks (at least `queue_buckets`).
    pub(crate) queue_slots: usize,
    /// Refresh epochs of the queue table: the live window (the epoch of a waiter's last
    /// refresh and the `waiter_grace_refreshes` it may miss) and the next one.
    pub(crate) lanes: usize,
    /// Words of each epoch's set of counted waiters (from `max_live_waiters`).
    pub(crate) lane_guard_words: usize,
    /// Bucket width in seconds: counters numbered in buckets of another width are not reused.
    pub(crate) bucket_secs: u32,
    /// Refresh epoch width in seconds (`refresh_interval`): likewise for the queue's epochs.
    pub(crate) refresh_secs: u32,
    /// Words of each revocation table (a power of two, at least `max_revocations`); 0: the
    /// origin may not revoke, and the room has no revocation block.
    pub(crate) revocation_words: usize,
    /// Words of each shard of the metrics' tallies (see `room_tallies`); 0 in regions laid
    /// out by a release before them, which count none.
    pub(crate) tally_words: usize,
}

/// Byte offsets of a layout's blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offsets {
    pub(crate) open: usize,
    pub(crate) waiters: usize,
    pub(crate) rejections: usize,
    pub(crate) ring_tags: usize,
    pub(crate) ring_admitted: usize,
    pub(crate) ring_moved: usize,
    pub(crate) lane_tags: usize,
    pub(crate) lane_counts: usize,
    pub(crate) lane_guards: usize,
    pub(crate) tick: usize,
    pub(crate) guards: usize,
    pub(crate) revocations: usize,
    pub(crate) revocation_tables: usize,
    pub(crate) outbox: usize,
    pub(crate) tallies: usize,
    pub(crate) total: usize,
}

impl RoomLayout {
    /// The layout a room's configuration needs.
    pub(crate) fn of(room: &RoomConfig, settings: &Settings) -> Self {
        Self {
            shards: shard_count(settings),
            guard_words: guard_words(room.largest_total()),
            // The window of session_duration + 1 buckets, the next bucket, one spare.
            buckets: room.longest_session() as usize + 3,
            queue_slots: room.queue_buckets as usize,
            lanes: room.waiter_grace_refreshes as usize + 2,
            // Two fingerprints per word: at most half full with `max_live_waiters` waiters.
            lane_guard_words: (room.max_live_waiters as usize).next_power_of_two(),
            bucket_secs: settings.bucket_width_secs,
            refresh_secs: room.refresh_interval,
            revocation_words: match room.revocation_capacity() {
                0 => 0,
                n => (n as usize).next_power_of_two(),
            },
            tally_words: TALLY_STRIDE,
        }
    }

    /// Byte offsets of the blocks.
    pub(crate) fn offsets(&self) -> Offsets {
        let pad = std::mem::size_of::<CachePadded<AtomicU64>>();
        let mut at = HEADER;
        let mut take = |bytes: usize| {
            let here = at;
            at += round_up(bytes);
            here
        };
        let open = take(self.shards * pad);
        let waiters = take(self.shards * pad);
        let rejections = take(REASONS * 8);
        let ring_tags = take(self.buckets * 8);
        let ring_admitted = take(self.buckets * 8);
        let ring_moved = take(self.buckets * 8);
        let lane_tags = take(self.lanes * 8);
        let lane_counts = take(self.queue_slots * self.lanes * 8);
        let lane_guards = take(self.lanes * self.lane_guard_words * 8);
        let tick = take(CELLS * 8);
        let guards = take(self.buckets * self.guard_words * 8);
        let (revocations, revocation_tables, outbox) = if self.revocation_words > 0 {
            (
                take(REVOCATION_HEADER * 8),
                take(GENERATIONS * self.revocation_words * 8),
                take(self.revocation_words * 8),
            )
        } else {
            let here = take(0);
            (here, here, here)
        };
        // Last: a release before tallies (which reads the blocks above where they were)
        // never looks here.
        let tallies = take(match self.tally_words {
            0 => 0,
            words if words < TALLY_STRIDE => self.shards * words * 8,
            words => (self.shards * words + TALLY_KEYS) * 8,
        });
        Offsets {
            open,
            waiters,
            rejections,
            ring_tags,
            ring_admitted,
            ring_moved,
            lane_tags,
            lane_counts,
            lane_guards,
            tick,
            guards,
            revocations,
            revocation_tables,
            outbox,
            tallies,
            total: at,
        }
    }

    /// Bytes the room needs.
    pub(crate) fn size(&self) -> usize {
        self.offsets().total
    }

    /// The parameters as stored in a room's header (after magic and version; the last two,
    /// added later, after the incarnation: a header of an earlier version holds zero there,
    /// the same layout without revocations or tallies).
    pub(crate) fn to_words(self) -> [u64; 10] {
        [
            self.shards as u64,
            self.guard_words as u64,
            self.buckets as u64,
            self.queue_slots as u64,
            self.lanes as u64,
            self.lane_guard_words as u64,
            u64::from(self.bucket_secs),
            u64::from(self.refresh_secs),
            self.revocation_words as u64,
            self.tally_words as u64,
        ]
    }

    /// The layout stored in a header, if the words make a sane one.
    pub(crate) fn from_words(w: [u64; 10]) -> Option<Self> {
        let usize_of = |v: u64| usize::try_from(v).ok().filter(|&n| n > 0);
        let layout = Self {
            shards: usize_of(w[0])?,
            guard_words: usize_of(w[1]).filter(|n| n.is_power_of_two())?,
            buckets: usize_of(w[2])?,
            queue_slots: usize_of(w[3])?,
            lanes: usize_of(w[4])?,
            lane_guard_words: usize_of(w[5]).filter(|n| n.is_power_of_two())?,
            bucket_secs: u32::try_from(w[6]).ok().filter(|&n| n > 0)?,
            refresh_secs: u32::try_from(w[7]).ok().filter(|&n| n > 0)?,
            revocation_words: usize::try_from(w[8])
                .ok()
                .filter(|&n| n == 0 || n.is_power_of_two())?,
            // Tallies of a later release may have more words per shard: this one reads its
            // own (the first) of each. Those laid out before rule counts have fewer, and no
            // table of rule keys: they count everything else.
            tally_words: usize::try_from(w[9])
                .ok()
                .filter(|&n| n == 0 || (n >= TALLY_RULES && n % 16 == 0 && n <= 1024))?,
        };
        (layout.shards <= 1024
            && layout.guard_words <= 1 << 22
            && layout.buckets <= 1 << 16
            && layout.queue_slots <= 1 << 17
            && layout.lanes <= 64
            && layout.lane_guard_words <= 1 << 23
            && layout.revocation_words <= 1 << 20)
            .then_some(layout)
    }

    /// Whether counters laid out as `self` can serve a room that needs `needed` (with
    /// `settings`), keeping their counts; if not, which parameter stands in the way. Capacities
    /// may be larger than needed (a room whose limit was lowered keeps its counters); numbering
    /// (bucket and epoch widths, the number of epochs) must be the same; the shard count must
    /// be the same unless `settings.shards` is automatic.
    pub(crate) fn serves(&self, needed: &RoomLayout, settings: &Settings) -> Result<(), String> {
        let checks: [(&str, bool, String); 9] = [
            (
                "settings.bucket_width_secs",
                self.bucket_secs == needed.bucket_secs,
                format!("{} s -> {} s", self.bucket_secs, needed.bucket_secs),
            ),
            (
                "refresh_interval",
                self.refresh_secs == needed.refresh_secs,
                format!("{} s -> {} s", self.refresh_secs, needed.refresh_secs),
            ),
            (
                "waiter_grace_refreshes",
                self.lanes == needed.lanes,
                format!("{} -> {}", self.lanes - 2, needed.lanes - 2),
            ),
            (
                "settings.shards",
                settings.shards == 0 || self.shards == needed.shards,
                format!("{} -> {}", self.shards, needed.shards),
            ),
            (
                "session_duration",
                self.buckets >= needed.buckets,
                format!(
                    "room for {} buckets, {} needed",
                    self.buckets - 3,
                    needed.buckets - 3
                ),
            ),
            (
                "total_active_users",
                self.guard_words >= needed.guard_words,
                format!(
                    "replay guards sized for {} users, {} needed",
                    self.guard_words / 2,
                    needed.guard_words / 2
                ),
            ),
            (
                "queue_buckets",
                self.queue_slots >= needed.queue_slots,
                format!("{} -> {}", self.queue_slots, needed.queue_slots),
            ),
            (
                "max_live_waiters",
                self.lane_guard_words >= needed.lane_guard_words,
                format!(
                    "sized for {} waiters, {} needed",
                    self.lane_guard_words, needed.lane_guard_words
                ),
            ),
            (
                "enabled_origin_commands",
                self.revocation_words >= needed.revocation_words,
                format!(
                    "revocations kept: {}, {} needed",
                    self.revocation_words, needed.revocation_words
                ),
            ),
        ];
        match checks.into_iter().find(|(_, ok, _)| !ok) {
            None => Ok(()),
            Some((field, _, how)) => Err(format!("`{field}` changes the counters' layout ({how})")),
        }
    }
}

/// The shard count of `settings`: explicit, or (`shards = 0`) twice the machine's CPUs, rounded
/// up to a power of two, at most 64. The machine's configured CPUs, not this process's share
/// of them: every process on the host (an nginx worker pinned to one core, a server in a
/// CPU-limited cgroup) must lay a shared region out alike, and a process's layout must not
/// change under it when its affinity does. Read once per process.
fn shard_count(settings: &Settings) -> usize {
    if settings.shards > 0 {
        return settings.shards as usize;
    }
    static SHARDS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SHARDS.get_or_init(|| {
        // SAFETY: `sysconf` reads a system variable; no memory is passed.
        let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let cpus = usize::try_from(configured)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        (cpus * 2).next_power_of_two().min(64)
    })
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    fn settings(shards: u32) -> Settings {
        Settings {
            shards,
            ..Settings::default()
        }
    }

    #[test]
    fn default_room_size_is_fixed_and_stated() {
        let room = RoomConfig::new("r", 200, 200);
        let layout = RoomLayout::of(&room, &settings(4));
        // The queue's replay guard (4 refresh epochs x 32,768 words) dominates, then the queue
        // table (1,024 arrival buckets x 4 epochs) and 8 buckets' guards of 512 words; the
        // metrics' tallies take 4 shards x 2,432 bytes and 2,048 of rule keys. The size
        // depends on the configuration only, never on how many visitors come.
        assert_eq!(layout.guard_words, 512);
        assert_eq!(layout.lane_guard_words, 32_768);
        let fixed = layout.size() - 4 * 32_768 * 8 - 8 * 512 * 8;
        assert_eq!(fixed, 46_848, "everything but the guards");
        // A room for 1,048,576 users: 8 guards of 16 MiB.
        let big = RoomLayout::of(&RoomConfig::new("r", 1 << 20, 1000), &settings(4));
        assert_eq!(big.guard_words, 1 << 21);
        assert_eq!(big.size(), fixed + 4 * 32_768 * 8 + 8 * (1 << 21) * 8);
    }

    #[test]
    fn counters_serve_smaller_needs_and_name_what_stands_in_the_way() {
        let room = RoomConfig::new("r", 200, 200);
        let s = settings(4);
        let have = RoomLayout::of(&room, &s);
        let mut lower = room.clone();
        lower.total_active_users = 100;
        lower.session_duration = 3;
        assert_eq!(have.serves(&RoomLayout::of(&lower, &s), &s), Ok(()));
        let mut raised = room.clone();
        raised.total_active_users = 300;
        let err = have.serves(&RoomLayout::of(&raised, &s), &s).unwrap_err();
        assert!(err.contains("`total_active_users`"), "{err}");
        let mut refresh = room.clone();
        refresh.refresh_interval = 30;
        let err = have.serves(&RoomLayout::of(&refresh, &s), &s).unwrap_err();
        assert!(
            err.contains("`refresh_interval`") && err.contains("20 s -> 30 s"),
            "{err}"
        );
        assert!(have
            .serves(&RoomLayout::of(&room, &settings(8)), &settings(8))
            .is_err());
        let words = have.to_words();
        assert_eq!(RoomLayout::from_words(words), Some(have));
        assert_eq!(RoomLayout::from_words([0; 10]), None);
    }
}
