//! The counters of one room, in a [`Region`] laid out by a [`RoomLayout`].
//!
//! The header holds a magic number, the layout version, the layout's parameters and the
//! counters' *incarnation*: a random number drawn when the counters are first laid out. Tickets
//! carry the incarnation of the counters that counted them; a ticket of another incarnation (a
//! restart without kept counters, a room whose counters were laid out again) was not counted
//! by these counters and is counted afresh on its first request.

use crossbeam_utils::CachePadded;

use crate::config::Settings;
use crate::counters::buckets::Buckets;
use crate::counters::queue_lanes::QueueLanes;
use crate::counters::region::Region;
use crate::counters::revocations::{Revocations, GENERATIONS, HEADER_WORDS as REVOCATION_HEADER};
use crate::counters::room_layout::{Offsets, RoomLayout, HEADER, REASONS};
use crate::counters::room_tallies::{RoomTallies, KEY_WORDS, STRIDE};
use crate::counters::slot_pool::SlotPool;
use crate::counters::tick_block::{TickBlock, CELLS};
use crate::error::{Error, Result};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"vrROOM\x00\x03");
/// Version 5: with a revocation block (a binary of version 4 would not look revocations up,
/// so it refuses such a region); 4 without one (regions of either version attach here).
const LAYOUT_VERSION: u64 = 4;
const LAYOUT_VERSION_REVOCATIONS: u64 = 5;

/// Header words: magic, version, 8 layout words, incarnation, ready (written last), and the
/// layout's ninth and tenth words (revocations and tallies; zero in regions laid out before
/// they existed, which is the same layout without them).
const H_LAYOUT: usize = 2;
const H_INCARNATION: usize = 10;
const H_READY: usize = 11;
const H_LAYOUT_9: usize = 12;
const H_LAYOUT_10: usize = 13;
const H_WORDS: usize = 14;
const _: () = assert!(H_WORDS * 8 <= HEADER);

/// A room's counters: a region and the layout that reads it.
pub(crate) struct RoomCounters {
    region: Region,
    layout: RoomLayout,
    offsets: Offsets,
    incarnation: AtomicU32,
    /// The process's fork generation when counters in owned memory were made or last made
    /// anew (see [`RoomCounters::copied_by_fork`]).
    fork_generation: AtomicU64,
}

impl RoomCounters {
    /// Counters in fresh memory owned by the engine.
    pub(crate) fn new(layout: RoomLayout) -> Self {
        let region = Region::owned(layout.size());
        let incarnation = init_header(&region, layout);
        Self {
            region,
            layout,
            offsets: layout.offsets(),
            incarnation: AtomicU32::new(incarnation),
            fork_generation: AtomicU64::new(crate::random::fork_generation()),
        }
    }

    /// Whether these are counters in owned memory that a fork copied: this process is a
    /// child of the one that made them, and its copy counts nothing the parent's does (each
    /// would hand out the same free slots, under the same grant, as the same host).
    #[inline]
    pub(crate) fn copied_by_fork(&self) -> bool {
        self.region.is_owned()
            && self.fork_generation.load(Ordering::Relaxed) != crate::random::fork_generation()
    }

    /// Makes counters a fork copied this process's own: another incarnation (another host to
    /// the cluster's store; the tickets the copy counted are counted afresh), no free slots
    /// (the parent's copy hands those out), and no grant (the parent holds it) or sync turn.
    /// The visitors the copy counted stay counted here too: that errs on the side of fewer
    /// admissions.
    pub(crate) fn reincarnate(&self, now: u64) {
        use crate::counters::tick_block::Cell;
        let n = incarnation();
        self.region.u64s(0, H_WORDS)[H_INCARNATION].store(u64::from(n), Ordering::Release);
        self.incarnation.store(n, Ordering::Release);
        for pool in [self.open_pool(), self.waiter_pool()] {
            pool.revoke(u64::MAX);
        }
        let tb = self.tick_block();
        tb.clear_grant();
        tb.set(Cell::SyncTurn, 0);
        tb.set(Cell::SyncAt, 0);
        tb.set(Cell::ClusterSince, now.max(1));
        self.fork_generation
            .store(crate::random::fork_generation(), Ordering::Relaxed);
    }

    /// Counters in a region handed in by the host for a room that needs `needed`: a zeroed
    /// region is laid out for it; a region laid out before (by this or another process) is
    /// attached when its layout serves the room (see [`RoomLayout::serves`]), and keeps its
    /// counts.
    pub(crate) fn attach(region: Region, needed: RoomLayout, settings: &Settings) -> Result<Self> {
        if region.len() < HEADER {
            return Err(Error::Region("room region smaller than its header".into()));
        }
        let header = region.u64s(0, H_WORDS);
        if header[0].load(Ordering::Acquire) == 0 && region.len() < needed.size() {
            return Err(Error::Region(format!(
                "{} bytes given, the room needs {}",
                region.len(),
                needed.size()
            )));
        }
        let too_small = |bytes: usize| {
            Error::Region(format!(
                "{} bytes given, the room needs {bytes}",
                region.len()
            ))
        };
        let layout =
            match header[0].compare_exchange(0, MAGIC, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    write_header(header, needed, incarnation());
                    needed
                }
                Err(found) if found != MAGIC => return Err(Error::Region(
                    "not a velvet-rope room region (bad magic: a release before 0.2, or foreign \
                     data; remove the state file to start afresh: its counts are lost)"
                        .into(),
                )),
                Err(_) if header[H_READY].load(Ordering::Acquire) == 0 => {
                    // Its creator died laying it out (we hold the directory lock it held).
                    if region.len() < needed.size() {
                        return Err(too_small(needed.size()));
                    }
                    write_header(header, needed, incarnation());
                    needed
                }
                Err(_) => {
                    let version = header[1].load(Ordering::Acquire);
                    if version != LAYOUT_VERSION && version != LAYOUT_VERSION_REVOCATIONS {
                        return Err(Error::Region(format!(
                            "room region of layout version {version}; this release reads \
                             versions {LAYOUT_VERSION} and {LAYOUT_VERSION_REVOCATIONS} \
                             (remove the state file to start afresh: its counts are lost)"
                        )));
                    }
                    let mut words = [0u64; 10];
                    for (w, cell) in words.iter_mut().zip(&header[H_LAYOUT..H_LAYOUT + 8]) {
                        *w = cell.load(Ordering::Acquire);
                    }
                    words[8] = header[H_LAYOUT_9].load(Ordering::Acquire);
                    words[9] = header[H_LAYOUT_10].load(Ordering::Acquire);
                    if (version == LAYOUT_VERSION_REVOCATIONS) != (words[8] > 0) {
                        return Err(Error::Region(
                            "room header's version disagrees with its layout".into(),
                        ));
                    }
                    let have = RoomLayout::from_words(words)
                        .ok_or_else(|| Error::Region("room header holds no sane layout".into()))?;
                    have.serves(&needed, settings).map_err(Error::Region)?;
                    if region.len() < have.size() {
                        return Err(too_small(have.size()));
                    }
                    have
                }
            };
        let incarnation = header[H_INCARNATION].load(Ordering::Acquire) as u32;
        Ok(Self {
            region,
            layout,
            offsets: layout.offsets(),
            incarnation: AtomicU32::new(incarnation),
            fork_generation: AtomicU64::new(crate::random::fork_generation()),
        })
    }

    /// Whether the counters live in memory this process owns (no other process maps it).
    pub(crate) fn is_owned(&self) -> bool {
        self.region.is_owned()
    }

    /// The layout.
    pub(crate) fn layout(&self) -> RoomLayout {
        self.layout
    }

    /// The counters' incarnation (never zero).
    #[inline]
    pub(crate) fn incarnation(&self) -> u32 {
        self.incarnation.load(Ordering::Acquire)
    }

    /// Bytes of memory the counters take.
    pub(crate) fn bytes(&self) -> usize {
        self.layout.size()
    }

    /// Slots open to anyone (new arrivals when nobody waits, and eligible waiters).
    #[inline]
    pub(crate) fn open_pool(&self) -> SlotPool<'_> {
        SlotPool::new(self.shards(self.offsets.open))
    }

    /// Slots kept for waiters the frontier has reached.
    #[inline]
    pub(crate) fn waiter_pool(&self) -> SlotPool<'_> {
        SlotPool::new(self.shards(self.offsets.waiters))
    }

    fn shards(&self, at: usize) -> &[CachePadded<AtomicU64>] {
        self.region.padded_u64s(at, self.layout.shards)
    }

    /// Ticket rejection counters by reason code.
    #[inline]
    pub(crate) fn rejections(&self) -> &[AtomicU64] {
        self.region.u64s(self.offsets.rejections, REASONS)
    }

    /// The bucket ring: admissions, moves and replay guards per bucket.
    #[inline]
    pub(crate) fn buckets(&self) -> Buckets<'_> {
        let (l, o) = (&self.layout, &self.offsets);
        Buckets::new(
            self.region.u64s(o.ring_tags, l.buckets),
            self.region.u64s(o.ring_admitted, l.buckets),
            self.region.i64s(o.ring_moved, l.buckets),
            self.region.u64s(o.guards, l.buckets * l.guard_words),
            l.guard_words,
        )
    }

    /// The state `tick` carries between ticks (shared by every process using the region).
    #[inline]
    pub(crate) fn tick_block(&self) -> TickBlock<'_> {
        TickBlock::new(
            self.region.u64s(self.offsets.tick, CELLS),
            self.region.is_owned(),
        )
    }

    /// The revocation block, if the origin may revoke the room's sessions.
    #[inline]
    pub(crate) fn revocations(&self) -> Option<Revocations<'_>> {
        let (l, o) = (&self.layout, &self.offsets);
        (l.revocation_words > 0).then(|| {
            Revocations::new(
                self.region.u64s(o.revocations, REVOCATION_HEADER),
                self.region
                    .u64s(o.revocation_tables, GENERATIONS * l.revocation_words),
                self.region.u64s(o.outbox, l.revocation_words),
                l.buckets as u64,
                self.region.is_owned(),
            )
        })
    }

    /// The metrics' tallies; `None` in a region laid out by a release before them.
    #[inline]
    pub(crate) fn tallies(&self) -> Option<RoomTallies<'_>> {
        let (l, o) = (&self.layout, &self.offsets);
        (l.tally_words > 0).then(|| {
            let shards = l.shards * l.tally_words;
            let keys = if l.tally_words >= STRIDE {
                KEY_WORDS
            } else {
                0
            };
            RoomTallies::new(
                self.region.u64s(o.tallies, shards),
                self.region.u64s(o.tallies + shards * 8, keys),
                l.tally_words,
            )
        })
    }

    /// The live-waiter table.
    #[inline]
    pub(crate) fn lanes(&self) -> QueueLanes<'_> {
        let (l, o) = (&self.layout, &self.offsets);
        QueueLanes::new(
            l.queue_slots,
            l.lanes as u64 - 1,
            self.region.i64s(o.lane_counts, l.queue_slots * l.lanes),
            self.region.u64s(o.lane_tags, l.lanes),
            self.region
                .u64s(o.lane_guards, l.lanes * l.lane_guard_words),
            l.lane_guard_words,
        )
    }
}

/// A fresh random incarnation (never zero).
fn incarnation() -> u32 {
    (crate::random::u64() as u32).max(1)
}

/// Lays out the header of fresh owned memory; returns the incarnation.
fn init_header(region: &Region, layout: RoomLayout) -> u32 {
    let header = region.u64s(0, H_WORDS);
    header[0].store(MAGIC, Ordering::Relaxed);
    let n = incarnation();
    write_header(header, layout, n);
    n
}

fn write_header(header: &[AtomicU64], layout: RoomLayout, incarnation: u32) {
    let version = if layout.revocation_words > 0 {
        LAYOUT_VERSION_REVOCATIONS
    } else {
        LAYOUT_VERSION
    };
    header[1].store(version, Ordering::Release);
    let words = layout.to_words();
    for (cell, w) in header[H_LAYOUT..H_LAYOUT + 8].iter().zip(words) {
        cell.store(w, Ordering::Release);
    }
    header[H_LAYOUT_9].store(words[8], Ordering::Release);
    header[H_LAYOUT_10].store(words[9], Ordering::Release);
    header[H_INCARNATION].store(u64::from(incarnation), Ordering::Release);
    header[H_READY].store(1, Ordering::Release);
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::config::RoomConfig;

    #[test]
    fn attach_keeps_counts_checks_the_layout_and_keeps_the_incarnation() {
        let settings = Settings {
            shards: 2,
            ..Settings::default()
        };
        let room = RoomConfig::new("r", 10, 10);
        let layout = RoomLayout::of(&room, &settings);
        let backing = Region::owned(layout.size());
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        // SAFETY: `backing` keeps the memory alive for this test and all access is atomic.
        let borrowed = || unsafe { Region::borrowed(base, layout.size()) }.unwrap();
        let first = RoomCounters::attach(borrowed(), layout, &settings).unwrap();
        first.open_pool().grant(5, 0);
        // A second view with the same layout sees the same counters and incarnation.
        let again = RoomCounters::attach(borrowed(), layout, &settings).unwrap();
        assert_eq!(again.open_pool().free(), 5);
        assert_eq!(again.incarnation(), first.incarnation());
        // A lower limit is served by the same counters; a change of numbering is refused.
        let mut lower = room.clone();
        lower.total_active_users = 3;
        assert!(
            RoomCounters::attach(borrowed(), RoomLayout::of(&lower, &settings), &settings).is_ok()
        );
        let mut other = room.clone();
        other.refresh_interval = 7;
        let err = RoomCounters::attach(borrowed(), RoomLayout::of(&other, &settings), &settings)
            .err()
            .unwrap();
        assert!(err.to_string().contains("refresh_interval"), "{err}");
        // Foreign bytes are refused, saying how to start afresh.
        let junk = Region::owned(layout.size());
        junk.u64s(0, 1)[0].store(0xAB, Ordering::Relaxed);
        let err = RoomCounters::attach(junk, layout, &settings).err().unwrap();
        assert!(err.to_string().contains("remove the state file"), "{err}");
        // A layout this release does not read is refused, naming the versions.
        backing.u64s(0, 2)[1].store(9, Ordering::Release);
        let err = RoomCounters::attach(borrowed(), layout, &settings)
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            text.contains("layout version 9") && text.contains("versions 4 and 5"),
            "{text}"
        );
        // Two owned counters have different incarnations.
        assert_ne!(
            RoomCounters::new(layout).incarnation(),
            RoomCounters::new(layout).incarnation()
        );
    }

    /// A region laid out by the release before tallies (header word 13 zero, nothing after
    /// the guards but the revocations) attaches, keeps its revocations where they were, and
    /// counts no tallies; the next fresh region has them.
    #[test]
    fn a_region_laid_out_before_tallies_attaches_without_them() {
        let settings = Settings {
            shards: 2,
            ..Settings::default()
        };
        let mut room = RoomConfig::new("r", 10, 10);
        room.enabled_origin_commands = vec![crate::config::OriginCommand::Revoke];
        let layout = RoomLayout::of(&room, &settings);
        let old = RoomLayout {
            tally_words: 0,
            ..layout
        };
        assert_eq!(
            old.size(),
            layout.size() - (2 * crate::counters::room_tallies::STRIDE + KEY_WORDS) * 8
        );
        // The tallies come last: every other block lies where the older release looks.
        assert_eq!(old.offsets().revocations, layout.offsets().revocations);
        assert_eq!(old.offsets().outbox, layout.offsets().outbox);
        assert_eq!(layout.offsets().tallies, old.size());
        let backing = Region::owned(old.size());
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        // SAFETY: `backing` keeps the memory alive for this test and all access is atomic.
        let borrowed = || unsafe { Region::borrowed(base, old.size()) }.unwrap();
        {
            let header = backing.u64s(0, H_WORDS);
            header[0].store(MAGIC, Ordering::Relaxed);
            write_header(header, old, 7);
        }
        assert_eq!(
            backing.u64s(0, H_WORDS)[H_LAYOUT_10].load(Ordering::Relaxed),
            0
        );
        let attached = RoomCounters::attach(borrowed(), layout, &settings).unwrap();
        assert_eq!(attached.layout(), old);
        assert!(attached.tallies().is_none());
        assert!(attached.revocations().is_some());
        assert_eq!(attached.incarnation(), 7);
        let fresh = RoomCounters::new(layout);
        fresh
            .tallies()
            .unwrap()
            .admitted(crate::counters::room_tallies::AdmissionKind::New);
        assert_eq!(fresh.tallies().unwrap().sums().admissions, [1, 0, 0, 0]);
    }

    /// REVIEW: a region laid out by the builds before rule counts (48 tally words per shard,
    /// no table of rule keys) was refused as "no sane layout" once the tallies grew. It
    /// attaches, and counts everything but the rules (those each process counts itself).
    #[test]
    fn a_region_laid_out_before_rule_counts_attaches_and_counts_the_rest() {
        use crate::admission::decision::Outcome;
        use crate::counters::room_tallies::{rule_key, RULES};
        let settings = Settings {
            shards: 2,
            ..Settings::default()
        };
        let layout = RoomLayout::of(&RoomConfig::new("r", 10, 10), &settings);
        let old = RoomLayout {
            tally_words: RULES,
            ..layout
        };
        assert_eq!(
            old.size(),
            layout.offsets().tallies + crate::counters::region::round_up(2 * RULES * 8)
        );
        let backing = Region::owned(old.size());
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        {
            let header = backing.u64s(0, H_WORDS);
            header[0].store(MAGIC, Ordering::Relaxed);
            write_header(header, old, 7);
        }
        // SAFETY: `backing` keeps the memory alive for this test and all access is atomic.
        let region = unsafe { Region::borrowed(base, old.size()) }.unwrap();
        let attached = RoomCounters::attach(region, layout, &settings).unwrap();
        assert_eq!(attached.layout(), old);
        let t = attached.tallies().unwrap();
        t.would_have(Outcome::Queue);
        t.admitted(crate::counters::room_tallies::AdmissionKind::New);
        assert_eq!(t.sums().would_have, [1, 0]);
        assert_eq!(t.sums().admissions, [1, 0, 0, 0]);
        assert_eq!(t.rule_slot(rule_key("health", "bypass")), None);
        assert_eq!(t.find_rule(rule_key("health", "bypass")), None);
    }

    /// REVIEW (issue 28), fixed in dc1e50a (the test failed before): docs/compatibility.md promises that "0.2 attaches a region of
    /// 0.3 and leaves the block alone". 0.2 reads header words 0..=12 only (it does not know
    /// word 13) and works the offsets out without tallies; but 0.3 put the tallies *between*
    /// the bucket guards and the revocations, so in a room with `enabled_origin_commands`
    /// 0.2 looks for the revocation block 2 shards x 384 bytes too early: its revocation lock
    /// is the tally of new admissions of shard 0, its tables overlap the tallies. A ticket 0.3
    /// revoked is honoured by 0.2 (the state file reopened after a rollback), and 0.2's
    /// revocations land in 0.3's tallies. (The tallies belong after the revocations, at the
    /// end, where a release that does not know them never looks.)
    #[test]
    fn review_a_release_before_tallies_finds_the_revocations_of_a_region_this_one_laid_out() {
        let settings = Settings {
            shards: 2,
            ..Settings::default()
        };
        let mut room = RoomConfig::new("r", 10, 10);
        room.enabled_origin_commands = vec![crate::config::OriginCommand::Revoke];
        let layout = RoomLayout::of(&room, &settings);
        let backing = Region::owned(layout.size());
        let base = backing.u64s(0, 1).as_ptr() as *mut u8;
        // SAFETY: `backing` keeps the memory alive for this test and all access is atomic.
        let borrowed = || unsafe { Region::borrowed(base, layout.size()) }.unwrap();
        // This release lays the region out, counts an admission, and revokes ticket 42.
        let new = RoomCounters::attach(borrowed(), layout, &settings).unwrap();
        new.tallies()
            .unwrap()
            .admitted(crate::counters::room_tallies::AdmissionKind::New);
        let bucket = 100;
        assert!(new.revocations().unwrap().revoke(42, bucket, false).is_ok());
        assert!(new.revocations().unwrap().is_revoked(42, bucket, bucket));
        // The previous release attaching it: the header's words 0..=12 (word 13 unknown to
        // it), i.e. this layout without tallies, and the offsets that layout gives.
        let as_before = RoomLayout {
            tally_words: 0,
            ..layout
        };
        assert!(
            borrowed().len() >= as_before.size(),
            "0.2 accepts the region's size"
        );
        let old = RoomCounters {
            region: borrowed(),
            layout: as_before,
            offsets: as_before.offsets(),
            incarnation: AtomicU32::new(new.incarnation()),
            fork_generation: AtomicU64::new(crate::random::fork_generation()),
        };
        assert!(
            old.revocations().unwrap().is_revoked(42, bucket, bucket),
            "0.2 does not see the revocation 0.3 made: it reads the revocation block at byte \
             {} of the room, 0.3 wrote it at {}",
            old.offsets.revocations,
            new.offsets.revocations
        );
    }
}
