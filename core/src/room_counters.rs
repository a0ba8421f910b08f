//! The counters of one room, laid out in a [`Region`].
//!
//! ```text
//! offset 0     header: magic, layout version, the layout's parameters (checked on attach)
//!              open-slot pool shards          (shards x 128 B)
//!              waiter-slot pool shards        (shards x 128 B)
//!              ticket rejections by reason    (8 x u64)
//!              active-bucket tags             (buckets x u64)
//!              active-bucket counts           (buckets x i64)
//!              queue lane tags                (lanes x u64)
//!              queue lane counts              (queue_slots x lanes x i64)
//!              queue lane id sets             (lanes x lane_guard_words x u64)
//!              tick block: cells, pool readings, admitted ring (16 + 2 x shards + 2 x buckets u64)
//!              replay guards                  (buckets x guard_words x u64)
//! ```
//! Every block starts on a 128-byte boundary. The size depends only on the room's
//! configuration, never on the number of visitors.

use crossbeam_utils::CachePadded;

use crate::active_counts::{guard_words, ActiveCounts};
use crate::config::{RoomConfig, Settings};
use crate::error::{Error, Result};
use crate::queue_lanes::QueueLanes;
use crate::region::{round_up, Region};
use crate::slot_pool::SlotPool;
use crate::sync::{AtomicU64, Ordering};
use crate::tick_block::{TickBlock, CELLS};

const MAGIC: u64 = u64::from_le_bytes(*b"vrROOM\x00\x01");
const LAYOUT_VERSION: u64 = 2;

/// Number of ticket rejection reasons a region has room for.
pub(crate) const REASONS: usize = 8;

/// The parameters that decide a room's memory layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoomLayout {
    pub(crate) shards: usize,
    pub(crate) guard_words: usize,
    pub(crate) buckets: usize,
    pub(crate) queue_slots: usize,
    pub(crate) grace: usize,
    pub(crate) lane_guard_words: usize,
    /// Bucket width in seconds: counters numbered in buckets of another width are not reused.
    pub(crate) bucket_secs: u32,
}

impl RoomLayout {
    /// The layout a room's configuration calls for.
    pub(crate) fn of(room: &RoomConfig, settings: &Settings) -> Self {
        let shards = if settings.shards > 0 {
            settings.shards as usize
        } else {
            auto_shards()
        };
        Self {
            shards,
            guard_words: guard_words(room.total_active_users),
            // Window of session_duration + 1 buckets, the next bucket being prepared, one spare.
            buckets: room.session_duration as usize + 3,
            queue_slots: room.queue_buckets as usize,
            grace: room.waiter_grace_refreshes as usize,
            // Two fingerprints per word: at most half full with `max_live_waiters` waiters.
            lane_guard_words: (room.max_live_waiters as usize).next_power_of_two(),
            bucket_secs: settings.bucket_width_secs,
        }
    }

    fn lanes(&self) -> usize {
        self.grace + 1
    }

    fn offsets(&self) -> Offsets {
        let pad = std::mem::size_of::<CachePadded<AtomicU64>>();
        let mut at = round_up(64);
        let mut take = |bytes: usize| {
            let here = at;
            at += round_up(bytes);
            here
        };
        let open = take(self.shards * pad);
        let waiters = take(self.shards * pad);
        let rejections = take(REASONS * 8);
        let active_tags = take(self.buckets * 8);
        let active_counts = take(self.buckets * 8);
        let lane_tags = take(self.lanes() * 8);
        let lane_counts = take(self.queue_slots * self.lanes() * 8);
        let lane_guards = take(self.lanes() * self.lane_guard_words * 8);
        let tick = take((CELLS + 2 * self.shards + 2 * self.buckets) * 8);
        let guard = take(self.buckets * self.guard_words * 8);
        Offsets {
            tick,
            open,
            waiters,
            rejections,
            active_tags,
            active_counts,
            lane_tags,
            lane_counts,
            lane_guards,
            guard,
            total: at,
        }
    }

    /// Bytes the room needs.
    pub(crate) fn size(&self) -> usize {
        self.offsets().total
    }

    fn header(&self) -> [u64; 9] {
        [
            MAGIC,
            LAYOUT_VERSION,
            self.shards as u64,
            self.guard_words as u64,
            self.buckets as u64,
            self.queue_slots as u64,
            self.grace as u64,
            self.lane_guard_words as u64,
            u64::from(self.bucket_secs),
        ]
    }
}

/// The shard count `shards = 0` stands for: twice the machine's CPUs, rounded up to a power
/// of two, at most 64. The machine's configured CPUs, not this process's share of them: every
/// process on the host (an nginx worker pinned to one core, a server in a CPU-limited cgroup)
/// must lay a shared region out alike, and a process's layout must not change under it when
/// its affinity does. Read once per process.
fn auto_shards() -> usize {
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

#[derive(Debug, Clone, Copy)]
struct Offsets {
    tick: usize,
    open: usize,
    waiters: usize,
    rejections: usize,
    active_tags: usize,
    active_counts: usize,
    lane_tags: usize,
    lane_counts: usize,
    lane_guards: usize,
    guard: usize,
    total: usize,
}

/// A room's counters: a region and the layout that reads it.
pub(crate) struct RoomCounters {
    region: Region,
    layout: RoomLayout,
    offsets: Offsets,
}

impl RoomCounters {
    /// Counters in fresh memory owned by the engine.
    pub(crate) fn new(layout: RoomLayout) -> Self {
        let region = Region::owned(layout.size());
        let counters = Self {
            region,
            layout,
            offsets: layout.offsets(),
        };
        let header = counters.region.u64s(0, 9);
        for (cell, v) in header.iter().zip(layout.header()) {
            cell.store(v, Ordering::Relaxed);
        }
        counters
    }

    /// Counters in a region handed in by the host: a zeroed region is initialised, a region
    /// already initialised by another process is attached after its header is checked.
    #[allow(dead_code)]
    pub(crate) fn attach(region: Region, layout: RoomLayout) -> Result<Self> {
        if region.len() < layout.size() {
            return Err(Error::Region(format!(
                "{} bytes given, the room needs {}",
                region.len(),
                layout.size()
            )));
        }
        let header = region.u64s(0, 9);
        let want = layout.header();
        match header[0].compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                for (cell, v) in header.iter().zip(want).skip(1) {
                    cell.store(v, Ordering::Release);
                }
            }
            Err(found) if found != MAGIC => {
                return Err(Error::Region("not a velvet-rope room region".into()))
            }
            Err(_) => {
                // Another process is initialising the header: its last field is written last.
                let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
                while header[8].load(Ordering::Acquire) == 0 && std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
                let got: Vec<u64> = header.iter().map(|c| c.load(Ordering::Acquire)).collect();
                if got[1..] != want[1..] {
                    return Err(Error::Region(format!(
                        "layout differs: region has {:?}, configuration needs {:?}",
                        &got[1..],
                        &want[1..]
                    )));
                }
            }
        }
        Ok(Self {
            region,
            layout,
            offsets: layout.offsets(),
        })
    }

    /// The layout.
    pub(crate) fn layout(&self) -> RoomLayout {
        self.layout
    }

    /// Bytes of memory the counters take.
    pub(crate) fn bytes(&self) -> usize {
        self.region.len()
    }

    /// Slots open to anyone (new arrivals when nobody waits, and eligible waiters).
    #[inline]
    pub(crate) fn open_pool(&self) -> SlotPool<'_> {
        SlotPool::new(
            self.region
                .padded_u64s(self.offsets.open, self.layout.shards),
        )
    }

    /// Slots kept for waiters the frontier has reached.
    #[inline]
    pub(crate) fn waiter_pool(&self) -> SlotPool<'_> {
        SlotPool::new(
            self.region
                .padded_u64s(self.offsets.waiters, self.layout.shards),
        )
    }

    /// Ticket rejection counters by reason code.
    #[inline]
    pub(crate) fn rejections(&self) -> &[AtomicU64] {
        self.region.u64s(self.offsets.rejections, REASONS)
    }

    /// The ring of per-bucket active-user counts and replay guards.
    #[inline]
    pub(crate) fn active(&self) -> ActiveCounts<'_> {
        let l = &self.layout;
        ActiveCounts::new(
            self.region.u64s(self.offsets.active_tags, l.buckets),
            self.region.i64s(self.offsets.active_counts, l.buckets),
            self.region
                .u64s(self.offsets.guard, l.buckets * l.guard_words),
            l.guard_words,
        )
    }

    /// The state `tick` carries between ticks (shared by every process using the region).
    #[inline]
    pub(crate) fn tick_block(&self) -> TickBlock<'_> {
        let l = &self.layout;
        let at = self.offsets.tick;
        TickBlock::new(
            self.region.u64s(at, CELLS),
            self.region.u64s(at + CELLS * 8, l.shards),
            self.region.u64s(at + (CELLS + l.shards) * 8, l.shards),
            self.region
                .u64s(at + (CELLS + 2 * l.shards) * 8, 2 * l.buckets),
        )
    }

    /// The live-waiter table.
    #[inline]
    pub(crate) fn lanes(&self) -> QueueLanes<'_> {
        let l = &self.layout;
        QueueLanes::new(
            l.queue_slots,
            l.grace as u64,
            self.region
                .i64s(self.offsets.lane_counts, l.queue_slots * l.lanes()),
            self.region.u64s(self.offsets.lane_tags, l.lanes()),
            self.region
                .u64s(self.offsets.lane_guards, l.lanes() * l.lane_guard_words),
            l.lane_guard_words,
        )
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn default_room_size_is_fixed_and_stated() {
        let room = RoomConfig::new("r", 200, 200);
        let settings = Settings {
            shards: 4,
            ..Settings::default()
        };
        let layout = RoomLayout::of(&room, &settings);
        // The queue's replay guard (3 refresh epochs x 32,768 words) dominates, then the queue
        // table (1,024 arrival buckets x 3 epochs) and 8 active-user guards of 512 words. The
        // size depends on the configuration only, never on how many visitors come.
        assert_eq!(layout.guard_words, 512);
        assert_eq!(layout.lane_guard_words, 32_768);
        let fixed = layout.size() - 3 * 32_768 * 8 - 8 * 512 * 8;
        assert_eq!(fixed, 26_624, "everything but the guards");
        eprintln!(
            "room of 200 users, 5-minute sessions: {} bytes",
            layout.size()
        );
        // A room for 1,048,576 users: 8 guards of 16 MiB.
        let big = RoomLayout::of(&RoomConfig::new("r", 1 << 20, 1000), &settings);
        assert_eq!(big.guard_words, 1 << 21);
        assert_eq!(big.size(), fixed + 3 * 32_768 * 8 + 8 * (1 << 21) * 8);
    }

    #[test]
    fn attach_checks_the_layout() {
        let room = RoomConfig::new("r", 10, 10);
        let settings = Settings {
            shards: 2,
            ..Settings::default()
        };
        let layout = RoomLayout::of(&room, &settings);
        let region = Region::owned(layout.size());
        let base = region.u64s(0, 1).as_ptr() as *mut u8;
        let first = RoomCounters::attach(region, layout).unwrap();
        // A second view over the same bytes with another layout is refused.
        let mut other = layout;
        other.shards = 1; // smaller, so the size check passes and the header check speaks
                          // SAFETY: `first` keeps the memory alive for this test and all access is atomic.
        let borrowed = unsafe { Region::borrowed(base, layout.size()) }.unwrap();
        let err = RoomCounters::attach(borrowed, other).err().unwrap();
        assert!(err.to_string().contains("layout differs"), "{err}");
        // Too small a region is refused.
        // SAFETY: as above.
        let small = unsafe { Region::borrowed(base, 256) }.unwrap();
        assert!(RoomCounters::attach(small, layout).is_err());
        // The same layout attaches and sees the same counters.
        // SAFETY: as above.
        let again = RoomCounters::attach(
            unsafe { Region::borrowed(base, layout.size()) }.unwrap(),
            layout,
        )
        .unwrap();
        let r = first.open_pool().read();
        first.open_pool().set_target(5, &r);
        assert_eq!(again.open_pool().free(), 5);
    }
}
