//! What a running engine keeps of one room while its configuration stays the same.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::admission::cookie_finder::CookieFinder;
use crate::admission::decision::Outcome;
use crate::config::{Config, RoomConfig, Rules};
use crate::config::{RuleAction, RuleConfig};
use crate::counters::room_counters::RoomCounters;
use crate::counters::room_tallies::rule_key;
use crate::page::RoomPages;
use crate::request::rule::RuleSet;
use crate::ticket::RoomId;

/// A room's configuration, counters, and what is derived from them once.
pub(crate) struct Room {
    /// The room's configuration.
    pub(crate) cfg: RoomConfig,
    /// Its counters (owned, or in a shared region).
    pub(crate) counters: Arc<RoomCounters>,
    /// Its identity in tickets.
    pub(crate) id: RoomId,
    /// `Set-Cookie` name.
    pub(crate) cookie_name: String,
    /// Finds the ticket in a `Cookie` header.
    pub(crate) cookie_finder: CookieFinder,
    /// `; Path=...; Domain=...; Secure; HttpOnly; SameSite=...`.
    pub(crate) cookie_attrs: String,
    /// Bucket width in seconds (a session of `n` buckets lasts `n` times this).
    pub(crate) bucket_secs: u32,
    /// The longest session the room or its events set, in buckets (see
    /// `RoomConfig::longest_session`).
    pub(crate) longest_session: u32,
    /// Bucket width in milliseconds.
    pub(crate) bucket_ms: u64,
    /// Refresh interval in seconds (the queue's epoch width).
    pub(crate) refresh_secs: u32,
    /// The counters' incarnation, which tickets they counted carry.
    pub(crate) incarnation: u32,
    /// With a `[cluster]` table: the share of the limits (millionths) enforced once a host
    /// has gone a lease and a session without a grant, unless a sync set another (see
    /// `cluster`).
    pub(crate) cluster_fallback_ppm: Option<u64>,
    /// With a `[cluster]` table: how long a grant is good without a sync (ms).
    pub(crate) cluster_lease_ms: u64,
    /// With a `[cluster]` table: the time between two syncs of the room (ms).
    pub(crate) cluster_sync_ms: u64,
    /// A fingerprint of this configuration of the room (see `governance`).
    pub(crate) config_hash: u64,
    /// A clustered room with counters in owned memory: in a forked child they are the
    /// parent's copy, and claim nothing until the child's first tick makes them its own
    /// (see `RoomCounters::reincarnate`).
    pub(crate) fork_guard: bool,
    /// Its pages, compiled when the configuration loaded (see [`Room::with_pages`]).
    pub(crate) pages: Arc<RoomPages>,
    /// Its `[[rooms.rules]]`, compiled, with the requests each matched that this process
    /// counts on its own (see `rule_slots`).
    pub(crate) rules: RuleSet,
    /// Per rule, its key in the counters' table of rules (see `rule_keys`).
    pub(crate) rule_keys: Box<[u64]>,
    /// Per rule, its slot in the counters' tallies, where every process sharing the counters
    /// counts it, found at its first match (a configuration that never serves claims none):
    /// 0 not looked for yet, `n + 1` slot `n`, [`NO_SLOT`] none (counters without tallies or
    /// whose table of rules is full: counted in `rules`, by this process alone).
    pub(crate) rule_slots: Box<[AtomicU32]>,
    /// The counters keep revocations: tickets are looked up in them, whether or not this
    /// configuration lets the origin revoke (a reload that dropped the command, another
    /// process's older configuration: what was revoked stays refused).
    pub(crate) revocable: bool,
    /// Requests a dry run or a `count_only` rule passed that the room would have queued
    /// (`[0]`) or rejected (`[1]`), in this process: counted here only with counters without
    /// tallies (see `count_would_have`).
    pub(crate) would_have: [AtomicU64; 2],
    /// Requests refused as ones several deciding rooms might govern, in this process:
    /// counted here only with counters without tallies (see `count_ambiguous`).
    pub(crate) ambiguous: AtomicU64,
}

/// A rule without a slot in the counters' tallies (see `Room::rule_slots`).
const NO_SLOT: u32 = u32::MAX;

/// The key of each of `rules` in the counters' table of rules (see
/// `room_tallies::rule_key`): by its name and action, so that its count follows it when a
/// reload moves it; an unnamed rule (its name is its place, `rules[2]`) by what it says
/// instead (its configuration as JSON), so that another rule in its place starts afresh, and
/// the how-manieth of the room's unnamed rules saying the same it is (a copy shadowed by the
/// first matches nothing of its own). Each version of an unnamed rule is thus a rule of its
/// own in the table (see the README).
fn rule_keys(rules: &[RuleConfig], set: &RuleSet) -> Box<[u64]> {
    let mut seen: Vec<String> = Vec::new();
    set.tallies()
        .zip(rules)
        .map(|((name, action, _), cfg)| match &cfg.name {
            Some(_) => rule_key(name, action.as_str()),
            None => {
                let what = serde_json::to_string(cfg).unwrap_or_default();
                let copy = seen.iter().filter(|w| **w == what).count();
                let key = rule_key(&format!("\u{1}unnamed {copy} {what}"), action.as_str());
                seen.push(what);
                key
            }
        })
        .collect()
}

impl Room {
    /// Whether a request may claim a slot of the room's pools now (not in a forked child
    /// holding its parent's copy of clustered counters: see `fork_guard`).
    #[inline]
    pub(crate) fn may_claim(&self) -> bool {
        !(self.fork_guard && self.counters.copied_by_fork())
    }

    /// The longest session's length in ms (of the room or any of its events): how long a
    /// visitor may stay active after its last request.
    pub(crate) fn session_ms(&self) -> u64 {
        u64::from(self.longest_session) * self.bucket_ms
    }

    /// A session's length in seconds under `rules`.
    #[inline]
    pub(crate) fn session_secs(&self, rules: &Rules) -> u32 {
        rules.session_duration.saturating_mul(self.bucket_secs)
    }

    /// How long a queued ticket lasts after its last refresh, in seconds: a session, and at
    /// least as long as a waiter holds its place without refreshing (its grace and one
    /// refresh more), so that a waiter refreshing on time never finds its ticket expired
    /// (a session shorter than the refresh interval would otherwise send it to the back).
    #[inline]
    pub(crate) fn queued_secs(&self, rules: &Rules) -> u32 {
        let hold = self
            .refresh_secs
            .saturating_mul(self.cfg.waiter_grace_refreshes.saturating_add(1));
        self.session_secs(rules).max(hold)
    }

    /// The rules in force at `now` (see `RoomConfig::rules_at`).
    pub(crate) fn rules_at(&self, now: u64) -> Rules {
        self.cfg.rules_at(now, self.bucket_ms)
    }

    /// Counts a request rule `i` matched: in the counters' tallies (every process's), or by
    /// this process alone (see `rule_slots`).
    #[inline]
    pub(crate) fn count_rule(&self, i: usize) {
        let (Some(t), Some(cell), Some(&key)) = (
            self.counters.tallies(),
            self.rule_slots.get(i),
            self.rule_keys.get(i),
        ) else {
            return self.rules.count_here(i);
        };
        let slot = match cell.load(Ordering::Relaxed) {
            0 => {
                // Threads finding it at once claim the same slot.
                let slot = t.rule_slot(key);
                cell.store(
                    slot.map_or(NO_SLOT, |s| u32::from(s) + 1),
                    Ordering::Relaxed,
                );
                slot
            }
            NO_SLOT => None,
            n => u16::try_from(n - 1).ok(),
        };
        match slot {
            Some(slot) => t.rule_matched(slot),
            None => self.rules.count_here(i),
        }
    }

    /// Each rule's name, action and the requests it matched: of every process sharing the
    /// counters (those with a slot), plus those this one counted alone (see `rule_slots`).
    pub(crate) fn rule_tallies(&self) -> impl Iterator<Item = (&str, RuleAction, u64)> + '_ {
        let tallies = self.counters.tallies();
        self.rules
            .tallies()
            .zip(self.rule_keys.iter())
            .map(move |((name, action, here), &key)| {
                let shared = tallies
                    .and_then(|t| t.find_rule(key).map(|slot| t.rule_matches(slot)))
                    .unwrap_or(0);
                (name, action, shared.wrapping_add(here))
            })
    }

    /// Counts a request passed that would have been queued or rejected (`outcome`).
    pub(crate) fn count_would_have(&self, outcome: Outcome) {
        match self.counters.tallies() {
            Some(t) => t.would_have(outcome),
            None => {
                let i = usize::from(outcome == Outcome::Reject);
                self.would_have[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts a request refused as one several deciding rooms might govern (this room the
    /// routes' choice).
    pub(crate) fn count_ambiguous(&self) {
        match self.counters.tallies() {
            Some(t) => t.refused_ambiguous(),
            None => {
                self.ambiguous.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Requests refused as ones several deciding rooms might govern: of every process
    /// sharing the counters, or of this one in counters without tallies.
    pub(crate) fn ambiguous_count(&self) -> u64 {
        match self.counters.tallies() {
            Some(t) => t.sums().ambiguous,
            None => self.ambiguous.load(Ordering::Relaxed),
        }
    }

    /// Requests passed that would have been queued (`[0]`) and rejected (`[1]`): of every
    /// process sharing the counters, or of this one in counters without tallies.
    pub(crate) fn would_have_counts(&self) -> [u64; 2] {
        match self.counters.tallies() {
            Some(t) => t.sums().would_have,
            None => self
                .would_have
                .each_ref()
                .map(|w| w.load(Ordering::Relaxed)),
        }
    }
}

impl Room {
    /// The room `cfg` of `config` over `counters`.
    pub(crate) fn new(cfg: &RoomConfig, config: &Config, counters: Arc<RoomCounters>) -> Self {
        let c = &cfg.cookie;
        let mut attrs = format!("; Path={}", c.path);
        if let Some(d) = &c.domain {
            attrs.push_str(&format!("; Domain={d}"));
        }
        if c.secure {
            attrs.push_str("; Secure");
        }
        if c.http_only {
            attrs.push_str("; HttpOnly");
        }
        attrs.push_str(&format!("; SameSite={}", c.same_site));
        let layout = counters.layout();
        // Config::validate compiled them already; were they refused here, the room would
        // decide every request (no rule lets anything pass).
        let rules = RuleSet::compile(
            &cfg.rules,
            config.settings.path_case,
            &cfg.cookie_name(),
            "",
        )
        .unwrap_or_default();
        let rule_keys = rule_keys(&cfg.rules, &rules);
        let rule_slots = rule_keys.iter().map(|_| AtomicU32::new(0)).collect();
        Self {
            cfg: cfg.clone(),
            id: RoomId::new(&cfg.name),
            cookie_name: cfg.cookie_name(),
            cookie_finder: CookieFinder::new(&cfg.cookie_name()),
            cookie_attrs: attrs,
            bucket_secs: config.settings.bucket_width_secs,
            longest_session: cfg.longest_session(),
            bucket_ms: u64::from(layout.bucket_secs) * 1000,
            refresh_secs: layout.refresh_secs,
            incarnation: counters.incarnation(),
            cluster_fallback_ppm: config.cluster.as_ref().map(|c| {
                c.fallback_share
                    .map_or(0, crate::admission::cluster::share_ppm)
            }),
            cluster_lease_ms: config.cluster.as_ref().map_or(0, |c| c.lease_ms),
            cluster_sync_ms: config.cluster.as_ref().map_or(0, |c| c.sync_interval_ms),
            config_hash: crate::admission::governance::fingerprint(cfg, config),
            fork_guard: config.cluster.is_some()
                && cfg.queueing_method != crate::config::QueueingMethod::Passthrough
                && counters.is_owned(),
            pages: Arc::new(RoomPages::builtin(cfg)),
            rules,
            rule_keys,
            rule_slots,
            would_have: [AtomicU64::new(0), AtomicU64::new(0)],
            ambiguous: AtomicU64::new(0),
            revocable: layout.revocation_words > 0,
            counters,
        }
    }

    /// The same room, the counts this process kept itself of its rules' hits (when its rules
    /// are the same) and of its dry run carried over from `previous`, the room it replaces at
    /// a reload (those in the counters' tallies stay where they are).
    pub(crate) fn with_tallies_of(self, previous: &Room) -> Self {
        if previous.cfg.rules == self.cfg.rules {
            self.rules.carry_from(&previous.rules);
        }
        let pairs = self.would_have.iter().zip(previous.would_have.iter());
        for (mine, theirs) in pairs.chain([(&self.ambiguous, &previous.ambiguous)]) {
            mine.store(
                theirs.load(std::sync::atomic::Ordering::Relaxed),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        self
    }

    /// The same room serving `pages` (compiled from its configuration by
    /// [`RoomPages::compile`]) instead of the built-in pages [`Room::new`] gives it.
    pub(crate) fn with_pages(mut self, pages: Arc<RoomPages>) -> Self {
        self.pages = pages;
        self
    }
}
