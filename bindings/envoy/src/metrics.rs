//! The engine's metrics ([`Engine::metrics`](velvet_rope::Engine::metrics)) in Envoy's own
//! stats, so that Envoy's admin `/stats` and `/stats/prometheus` show them.
//!
//! # Names
//!
//! Every filter configuration defines, in `config_new` (the only time Envoy lets a module
//! define stats), one Envoy stat per series name of the engine's metric families, in its
//! configuration's stats scope: `DynamicModuleConfig.metrics_namespace`, else Envoy's
//! `dynamicmodulescustom`. The family's name loses its `velvet_rope_` (the namespace stands for
//! it: set `metrics_namespace: velvet_rope`); labels are `room`, then the family's own:
//!
//! - a gauge family: a gauge of the family's name (`room_active_users`);
//! - a counter family: a counter with `_total` (`room_admissions_total`), as the engine's own
//!   OpenMetrics text names it;
//! - a histogram family: its cumulative buckets as a counter `<name>_bucket` with an `le`
//!   label (up to `le="+Inf"`), and its `_count` and `_sum` (when it has them) as counters.
//!   The engine counts observations in buckets of its own; Envoy's histograms take single
//!   values into buckets of Envoy's, so the engine's buckets are published as they are
//!   (Prometheus' `histogram_quantile` reads them: each is a `..._bucket` series with `le`).
//!
//! So with `metrics_namespace: velvet_rope`, `/stats/prometheus` shows
//! `envoy_velvet_rope_room_active_users{room="shop"}` and
//! `envoy_velvet_rope_room_admissions_total{room="shop",kind="new"}` (Envoy adds `envoy_`),
//! and `/stats` shows `velvet_rope.room_active_users.room.shop`. Left out:
//! `velvet_rope_room_admission_rate` (a fraction of visitors a second: Envoy's stats hold
//! whole numbers; the other families are whole counts).
//!
//! # Publishing
//!
//! Envoy's labelled stats go through its thread-local stats cache, so they are only ever
//! updated on Envoy's main thread: the engine's ticker thread, after a tick but at most once
//! every [`PUBLISH_EVERY`], commits a publish event ([`PUBLISH_EVENT`]) through the
//! scheduler of the engine's publisher, which comes back on the main thread as
//! `config_scheduled` of that configuration (only while Envoy holds it); a configuration's
//! commit event publishes too, if it is the publisher by then. The publisher is the
//! newest committed, live configuration of the engine: one per engine, so counters shared by
//! several filters and listeners are counted once; a configuration replaced by a newer one
//! stops publishing, and one that was refused never published. Engines of the process over
//! one state file (an inline configuration changed by a listener update: a second engine
//! while the old listener drains) share the host's counters, so they publish as one, from one
//! ledger: a room by the newest live configuration among the engines that run it. Their
//! filters must then share a `metrics_namespace` too (each namespace would otherwise see
//! only the deltas its engine published).
//!
//! Gauges are set to the engine's value. Counters are cumulative totals in the engine, so the
//! publisher adds to Envoy's counter what the total grew by since it was last published (the
//! [`Ledger`], kept per engine or per state file, so that a new publisher goes on where the
//! old one stopped).
//! Only changed series are written, except that a publisher writes every series once (a zero
//! for an unchanged counter): its stats scope then holds them, and they outlive the previous
//! publisher's scope (Envoy keeps one stat per name, shared by the scopes that hold it, and
//! drops it with the last of them). A series no live configuration has written is new to Envoy
//! (0) and gets the engine's whole total. A total that went down (counters laid out anew) is
//! taken as the new base: Envoy's counter keeps its value and grows with the new counts.
//!
//! Filters sharing an engine should therefore share their `metrics_namespace` (the publisher's
//! scope is the one that shows them), and two engines should not publish rooms of one name in
//! one namespace (Envoy would show one series for both).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use velvet_rope::admission::{MetricFamily, MetricKind};

use crate::abi::{self, ConfigEnvoyPtr, ConfigScheduler, Host, MetricsResult, ModuleBuffer};

/// The event id of a publish (the configuration's commit event is 1).
pub const PUBLISH_EVENT: u64 = 2;

/// The shortest time between two publish events of one engine (a tick may come every 10 ms).
pub const PUBLISH_EVERY: Duration = Duration::from_millis(900);

/// The families Envoy's stats cannot hold: not whole numbers.
const LEFT_OUT: &[&str] = &["velvet_rope_room_admission_rate"];

/// How a series goes into Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatKind {
    /// A gauge, set to the value.
    Gauge,
    /// A counter, added to.
    Counter,
}

/// One Envoy stat made from a family (a histogram makes three).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatDef {
    /// The family's name (`velvet_rope_room_admissions`).
    pub family: &'static str,
    /// The suffix of the family's samples that go into it (`_total`).
    pub suffix: &'static str,
    /// The stat's name in Envoy (`room_admissions_total`).
    pub name: String,
    /// Gauge or counter.
    pub kind: StatKind,
    /// Label names: `room`, the family's own, and `le` for a histogram's buckets.
    pub labels: Vec<&'static str>,
}

/// The Envoy stats the families make (see the module's documentation).
pub fn stat_defs(families: &[MetricFamily]) -> Vec<StatDef> {
    let mut defs = Vec::new();
    for f in families {
        if LEFT_OUT.contains(&f.name) {
            continue;
        }
        let base = f.name.strip_prefix("velvet_rope_").unwrap_or(f.name);
        let labels = |le: bool| {
            let mut l = vec!["room"];
            l.extend_from_slice(f.label_names);
            if le {
                l.push("le");
            }
            l
        };
        let mut def = |suffix: &'static str, kind: StatKind, le: bool| {
            defs.push(StatDef {
                family: f.name,
                suffix,
                name: format!("{base}{suffix}"),
                kind,
                labels: labels(le),
            })
        };
        match f.kind {
            MetricKind::Gauge => def("", StatKind::Gauge, false),
            MetricKind::Counter => def("_total", StatKind::Counter, false),
            MetricKind::Histogram => {
                def("_bucket", StatKind::Counter, true);
                def("_count", StatKind::Counter, false);
                def("_sum", StatKind::Counter, false);
            }
        }
    }
    defs
}

/// Where stats are defined and written: Envoy ([`EnvoyStats`]), or a test's fake.
pub trait Sink {
    /// Defines a stat; its id, or Envoy's answer.
    fn define(
        &mut self,
        kind: StatKind,
        name: &str,
        labels: &[&str],
    ) -> Result<usize, MetricsResult>;
    /// Sets a gauge, or adds to a counter.
    fn update(&mut self, kind: StatKind, id: usize, labels: &[&str], value: u64) -> MetricsResult;
}

/// Envoy's stats of one filter configuration, through its configuration-level callbacks.
pub struct EnvoyStats<'h> {
    host: &'h Host,
    config: ConfigEnvoyPtr,
}

impl<'h> EnvoyStats<'h> {
    /// The stats of `config` (Envoy's pointer to the configuration).
    ///
    /// # Safety
    /// `config` stays live while this is used, and this is used on one of Envoy's threads
    /// (the module uses it on the main thread: in `config_new`, whose configuration is being
    /// made, and in that configuration's `config_scheduled`, during which Envoy holds it).
    pub unsafe fn new(host: &'h Host, config: ConfigEnvoyPtr) -> Self {
        Self { host, config }
    }
}

/// Lends `strings` to Envoy as module buffers.
fn buffers(strings: &[&str]) -> SmallVec<[ModuleBuffer; 4]> {
    strings
        .iter()
        .map(|s| ModuleBuffer::of(s.as_bytes()))
        .collect()
}

impl Sink for EnvoyStats<'_> {
    fn define(
        &mut self,
        kind: StatKind,
        name: &str,
        labels: &[&str],
    ) -> Result<usize, MetricsResult> {
        let f = match kind {
            StatKind::Gauge => self.host.define_gauge,
            StatKind::Counter => self.host.define_counter,
        };
        let mut names = buffers(labels);
        let mut id = 0usize;
        // SAFETY: a live configuration on an Envoy thread (`new`'s contract); the name and
        // label buffers live for the call (Envoy copies them into its stat names), `id` is
        // ours to write.
        let r = unsafe {
            f(
                self.config,
                ModuleBuffer::of(name.as_bytes()),
                names.as_mut_ptr(),
                names.len(),
                &mut id,
            )
        };
        if r == abi::METRICS_SUCCESS {
            Ok(id)
        } else {
            Err(r)
        }
    }

    fn update(&mut self, kind: StatKind, id: usize, labels: &[&str], value: u64) -> MetricsResult {
        let f = match kind {
            StatKind::Gauge => self.host.set_gauge,
            StatKind::Counter => self.host.increment_counter,
        };
        let mut values = buffers(labels);
        // SAFETY: as in `define`; the label values live for the call (Envoy copies them).
        unsafe { f(self.config, id, values.as_mut_ptr(), values.len(), value) }
    }
}

/// A defined stat.
#[derive(Debug, Clone, Copy)]
struct Defined {
    id: usize,
    kind: StatKind,
    labels: usize,
}

/// A configuration's stats as Envoy defined them, by family and suffix.
#[derive(Debug, Default)]
pub struct MetricIds {
    stats: HashMap<(&'static str, &'static str), Defined>,
}

impl MetricIds {
    /// Defines every stat of `families` (see [`stat_defs`]); one that Envoy refuses is logged
    /// (once: this runs once per configuration) and left out, the others work on.
    pub fn define(families: &[MetricFamily], sink: &mut impl Sink, filter: &str) -> Self {
        let mut stats = HashMap::new();
        for def in stat_defs(families) {
            match sink.define(def.kind, &def.name, &def.labels) {
                Ok(id) => {
                    stats.insert(
                        (def.family, def.suffix),
                        Defined {
                            id,
                            kind: def.kind,
                            labels: def.labels.len(),
                        },
                    );
                }
                Err(r) => abi::log(
                    abi::LOG_WARN,
                    &format!(
                        "velvet-rope: filter `{filter}`: Envoy did not define the stat `{}` \
                         ({}); it is not published",
                        def.name,
                        abi::metrics_result(r)
                    ),
                ),
            }
        }
        Self { stats }
    }

    /// How many stats are defined.
    pub fn len(&self) -> usize {
        self.stats.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.stats.is_empty()
    }
}

/// What the engine's publishers wrote of one series.
#[derive(Debug, Default)]
struct Entry {
    /// The gauge's value, or the counter's total, last written.
    value: u64,
    /// The configurations that wrote it (their scopes hold Envoy's stat).
    writers: SmallVec<[u64; 2]>,
}

/// What one publish did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Series written.
    pub written: usize,
    /// Series not written: Envoy refused them, or their labels did not match the stat's.
    pub refused: usize,
    /// The first refusal: the stat and Envoy's answer.
    pub first_refusal: Option<String>,
}

/// What an engine's publishers wrote of each series (see the module's documentation).
#[derive(Debug, Default)]
pub struct Ledger {
    series: HashMap<String, Entry>,
}

/// A sample's value as Envoy's stats hold it: a whole number, at least 0; `+Inf` (a cluster
/// grant's age before the first grant) the largest, so that an alert on it fires.
fn whole(v: f64) -> u64 {
    if v == f64::INFINITY {
        u64::MAX
    } else if v.is_finite() && v > 0.0 {
        // `as` saturates at u64::MAX.
        v.round() as u64
    } else {
        0
    }
}

impl Ledger {
    /// Writes `families` through `sink`, as configuration `me` with `ids`; `live` are the
    /// engine's live, committed configurations (`me` among them).
    pub fn publish(
        &mut self,
        families: &[MetricFamily],
        ids: &MetricIds,
        sink: &mut impl Sink,
        me: u64,
        live: &[u64],
    ) -> Report {
        let mut report = Report::default();
        let mut key = String::new();
        let mut values: SmallVec<[&str; 4]> = SmallVec::new();
        for f in families {
            for s in &f.samples {
                let Some(stat) = ids.stats.get(&(f.name, s.suffix)) else {
                    continue;
                };
                values.clear();
                values.extend(s.labels.iter().map(|(_, v)| v.as_str()));
                key.clear();
                key.push_str(f.name);
                key.push_str(s.suffix);
                for v in &values {
                    key.push('\u{1}');
                    key.push_str(v);
                }
                if values.len() != stat.labels {
                    report.refused += 1;
                    report.first_refusal.get_or_insert_with(|| {
                        format!("{key}: {} labels, not {}", values.len(), stat.labels)
                    });
                    continue;
                }
                let entry = match self.series.get_mut(key.as_str()) {
                    Some(e) => e,
                    None => self.series.entry(key.clone()).or_default(),
                };
                entry.writers.retain(|w| live.contains(w));
                let held = entry.writers.contains(&me);
                let value = whole(s.value);
                let write = match stat.kind {
                    StatKind::Gauge => (!held || entry.value != value).then_some(value),
                    StatKind::Counter if entry.writers.is_empty() => Some(value),
                    // A total that went down is the new base (nothing to add).
                    StatKind::Counter => {
                        let grown = value.saturating_sub(entry.value);
                        (!held || grown > 0).then_some(grown)
                    }
                };
                let Some(write) = write else {
                    // Unchanged, or a total that went down: the new base.
                    entry.value = value;
                    continue;
                };
                let r = sink.update(stat.kind, stat.id, &values, write);
                if r == abi::METRICS_SUCCESS {
                    report.written += 1;
                    entry.value = value;
                    if !held {
                        entry.writers.push(me);
                    }
                } else {
                    report.refused += 1;
                    report.first_refusal.get_or_insert_with(|| {
                        format!(
                            "{}{}{{{}}}: {}",
                            f.name,
                            s.suffix,
                            values.join(","),
                            abi::metrics_result(r)
                        )
                    });
                }
            }
        }
        report
    }
}

/// A configuration's scheduler, shared with the engine's [`Cue`] (taken out, under the lock,
/// when the configuration goes, so that nothing commits through a deleted scheduler).
pub type SchedulerSlot = Mutex<Option<ConfigScheduler>>;

/// How the engine's ticker thread asks for a publish: through its publisher's scheduler.
#[derive(Default)]
pub struct Cue {
    pub(crate) publisher: Mutex<Option<Arc<SchedulerSlot>>>,
    last: Mutex<Option<Instant>>,
}

impl Cue {
    /// The publisher's scheduler from now on (`None`: no live configuration).
    pub fn set(&self, publisher: Option<Arc<SchedulerSlot>>) {
        *crate::filter_config::lock(&self.publisher) = publisher;
    }

    /// After a tick (on the ticker thread): commits a publish event unless one was committed
    /// less than [`PUBLISH_EVERY`] ago.
    pub fn ring(&self) {
        let Some(host) = abi::host() else {
            return;
        };
        let now = Instant::now();
        {
            let mut last = crate::filter_config::lock(&self.last);
            if last.is_some_and(|t| now.duration_since(t) < PUBLISH_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let publisher = crate::filter_config::lock(&self.publisher).clone();
        if let Some(slot) = publisher {
            if let Some(s) = crate::filter_config::lock(&slot).as_ref() {
                s.commit(host, PUBLISH_EVENT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use velvet_rope::admission::Sample;

    /// Envoy's stats as the module sees them: one value per series name (shared by the
    /// scopes that hold it: the namespace is one), dropped with the last scope holding it.
    #[derive(Default)]
    struct FakeEnvoy {
        values: HashMap<String, u64>,
        holders: HashMap<String, Vec<u64>>,
        names: Vec<(String, StatKind, usize)>,
        calls: usize,
    }

    impl FakeEnvoy {
        fn scope_gone(&mut self, seq: u64) {
            for h in self.holders.values_mut() {
                h.retain(|s| *s != seq);
            }
            let gone: Vec<String> = self
                .holders
                .iter()
                .filter(|(_, h)| h.is_empty())
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                self.holders.remove(&k);
                self.values.remove(&k);
            }
        }

        fn get(&self, name: &str) -> Option<u64> {
            self.values.get(name).copied()
        }
    }

    /// A [`FakeEnvoy`] seen through one configuration's scope.
    struct Scope<'a>(&'a mut FakeEnvoy, u64);

    impl Sink for Scope<'_> {
        fn define(
            &mut self,
            kind: StatKind,
            name: &str,
            labels: &[&str],
        ) -> Result<usize, MetricsResult> {
            if name.ends_with("_sum") {
                return Err(abi::METRICS_FROZEN);
            }
            self.0.names.push((name.to_owned(), kind, labels.len()));
            Ok(self.0.names.len())
        }

        fn update(
            &mut self,
            kind: StatKind,
            id: usize,
            labels: &[&str],
            value: u64,
        ) -> MetricsResult {
            let Some((name, k, n)) = self.0.names.get(id - 1).cloned() else {
                return abi::METRICS_NOT_FOUND;
            };
            assert_eq!(k, kind);
            if labels.len() != n {
                return abi::METRICS_INVALID_LABELS;
            }
            self.0.calls += 1;
            let series = format!("{name}{{{}}}", labels.join(","));
            let holders = self.0.holders.entry(series.clone()).or_default();
            if !holders.contains(&self.1) {
                holders.push(self.1);
            }
            let v = self.0.values.entry(series).or_default();
            match kind {
                StatKind::Gauge => *v = value,
                StatKind::Counter => *v += value,
            }
            abi::METRICS_SUCCESS
        }
    }

    fn family(
        name: &'static str,
        kind: MetricKind,
        label_names: &'static [&'static str],
        samples: Vec<Sample>,
    ) -> MetricFamily {
        MetricFamily {
            name,
            kind,
            help: "",
            label_names,
            samples,
        }
    }

    fn sample(suffix: &'static str, labels: &[(&'static str, &str)], value: f64) -> Sample {
        Sample {
            suffix,
            labels: labels.iter().map(|&(k, v)| (k, v.to_owned())).collect(),
            value,
        }
    }

    /// A room's active users and admissions, and a histogram.
    fn families(active: f64, admitted: f64, waited: f64) -> Vec<MetricFamily> {
        vec![
            family(
                "velvet_rope_room_active_users",
                MetricKind::Gauge,
                &[],
                vec![sample("", &[("room", "shop")], active)],
            ),
            family(
                "velvet_rope_room_admission_rate",
                MetricKind::Gauge,
                &[],
                vec![sample("", &[("room", "shop")], 0.5)],
            ),
            family(
                "velvet_rope_room_admissions",
                MetricKind::Counter,
                &["kind"],
                vec![sample(
                    "_total",
                    &[("room", "shop"), ("kind", "new")],
                    admitted,
                )],
            ),
            family(
                "velvet_rope_room_wait_seconds",
                MetricKind::Histogram,
                &[],
                vec![
                    sample("_bucket", &[("room", "shop"), ("le", "5.0")], waited),
                    sample("_bucket", &[("room", "shop"), ("le", "+Inf")], waited),
                    sample("_count", &[("room", "shop")], waited),
                    sample("_sum", &[("room", "shop")], waited * 3.0),
                ],
            ),
        ]
    }

    const ACTIVE: &str = "room_active_users{shop}";
    const NEW: &str = "room_admissions_total{shop,new}";

    #[test]
    fn the_stats_made_of_each_kind_of_family() {
        let defs = stat_defs(&families(0.0, 0.0, 0.0));
        let names: Vec<(&str, StatKind, Vec<&str>)> = defs
            .iter()
            .map(|d| (d.name.as_str(), d.kind, d.labels.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("room_active_users", StatKind::Gauge, vec!["room"]),
                (
                    "room_admissions_total",
                    StatKind::Counter,
                    vec!["room", "kind"]
                ),
                (
                    "room_wait_seconds_bucket",
                    StatKind::Counter,
                    vec!["room", "le"]
                ),
                ("room_wait_seconds_count", StatKind::Counter, vec!["room"]),
                ("room_wait_seconds_sum", StatKind::Counter, vec!["room"]),
            ]
        );
    }

    #[test]
    fn every_family_of_a_real_engine_makes_stats() {
        let engine = velvet_rope::Engine::from_text(
            "[[rooms]]\nname = \"r\"\ntotal_active_users = 1\nnew_users_per_minute = 10\n",
            1_800_000_000_000,
        )
        .unwrap();
        let families = engine.metrics();
        let defs = stat_defs(&families);
        for f in &families {
            let made = defs.iter().filter(|d| d.family == f.name).count();
            let want = match f.kind {
                _ if LEFT_OUT.contains(&f.name) => 0,
                MetricKind::Histogram => 3,
                _ => 1,
            };
            assert_eq!(made, want, "{}", f.name);
            // Every sample of a kept family has a stat with as many labels.
            for s in &f.samples {
                if let Some(d) = defs
                    .iter()
                    .find(|d| d.family == f.name && d.suffix == s.suffix)
                {
                    assert_eq!(d.labels.len(), s.labels.len(), "{} {s:?}", f.name);
                    assert!(d.labels.iter().zip(&s.labels).all(|(a, (b, _))| a == b));
                } else {
                    assert!(LEFT_OUT.contains(&f.name), "{} {s:?}", f.name);
                }
            }
        }
    }

    #[test]
    fn gauges_are_set_and_counters_grow_by_the_new_counts_once() {
        let mut envoy = FakeEnvoy::default();
        let ids = MetricIds::define(&families(0.0, 0.0, 0.0), &mut Scope(&mut envoy, 1), "f");
        assert_eq!(ids.len(), 4, "_sum was refused, the rest defined");
        let mut ledger = Ledger::default();
        let r = ledger.publish(
            &families(3.0, 3.0, 1.0),
            &ids,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        assert_eq!((r.written, r.refused), (5, 0), "{r:?}");
        assert_eq!(envoy.get(ACTIVE), Some(3));
        assert_eq!(envoy.get(NEW), Some(3));
        assert_eq!(envoy.get("room_wait_seconds_bucket{shop,+Inf}"), Some(1));
        // Nothing changed: nothing written.
        let calls = envoy.calls;
        ledger.publish(
            &families(3.0, 3.0, 1.0),
            &ids,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        assert_eq!(envoy.calls, calls);
        // More admissions: the counter grows by them, the gauge is set.
        ledger.publish(
            &families(2.0, 5.0, 1.0),
            &ids,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        assert_eq!(envoy.get(ACTIVE), Some(2));
        assert_eq!(envoy.get(NEW), Some(5));
        // Counters laid out anew (the total went down): the new base, nothing taken off.
        ledger.publish(
            &families(2.0, 1.0, 1.0),
            &ids,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        assert_eq!(envoy.get(NEW), Some(5));
        ledger.publish(
            &families(2.0, 3.0, 1.0),
            &ids,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        assert_eq!(envoy.get(NEW), Some(7), "the 2 new counts added");
    }

    #[test]
    fn a_new_publisher_goes_on_where_the_old_one_stopped() {
        // A listener update: configuration 2 replaces 1, which drains, then goes.
        let mut envoy = FakeEnvoy::default();
        let zero = families(0.0, 0.0, 0.0);
        let one = MetricIds::define(&zero, &mut Scope(&mut envoy, 1), "f");
        let two = MetricIds::define(&zero, &mut Scope(&mut envoy, 2), "f");
        let mut ledger = Ledger::default();
        ledger.publish(
            &families(3.0, 3.0, 0.0),
            &one,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        ledger.publish(
            &families(4.0, 4.0, 0.0),
            &two,
            &mut Scope(&mut envoy, 2),
            2,
            &[1, 2],
        );
        assert_eq!(envoy.get(NEW), Some(4), "not counted twice");
        envoy.scope_gone(1);
        assert_eq!(envoy.get(NEW), Some(4), "held by the new scope");
        ledger.publish(
            &families(4.0, 6.0, 0.0),
            &two,
            &mut Scope(&mut envoy, 2),
            2,
            &[2],
        );
        assert_eq!(envoy.get(NEW), Some(6));
        assert_eq!(envoy.get(ACTIVE), Some(4));
    }

    #[test]
    fn a_series_whose_every_writer_went_starts_again_from_the_whole_total() {
        // Configuration 2 (newest) published and goes; the older 1, which never published,
        // takes over: Envoy dropped the stats with 2's scope.
        let mut envoy = FakeEnvoy::default();
        let zero = families(0.0, 0.0, 0.0);
        let one = MetricIds::define(&zero, &mut Scope(&mut envoy, 1), "f");
        let two = MetricIds::define(&zero, &mut Scope(&mut envoy, 2), "f");
        let mut ledger = Ledger::default();
        ledger.publish(
            &families(3.0, 3.0, 0.0),
            &two,
            &mut Scope(&mut envoy, 2),
            2,
            &[1, 2],
        );
        envoy.scope_gone(2);
        assert_eq!(envoy.get(NEW), None);
        ledger.publish(
            &families(3.0, 4.0, 0.0),
            &one,
            &mut Scope(&mut envoy, 1),
            1,
            &[1],
        );
        assert_eq!(envoy.get(NEW), Some(4), "the whole total, not the 1 new");
        assert_eq!(envoy.get(ACTIVE), Some(3), "the gauge set again too");
    }

    #[test]
    fn a_sample_with_other_labels_is_refused_and_said() {
        let mut envoy = FakeEnvoy::default();
        let zero = families(0.0, 0.0, 0.0);
        let ids = MetricIds::define(&zero, &mut Scope(&mut envoy, 1), "f");
        let mut bad = families(1.0, 1.0, 0.0);
        bad[2].samples[0].labels.pop();
        let r = Ledger::default().publish(&bad, &ids, &mut Scope(&mut envoy, 1), 1, &[1]);
        assert_eq!(r.refused, 1);
        assert!(r.first_refusal.unwrap().contains("1 labels, not 2"));
        assert_eq!(envoy.get(ACTIVE), Some(1), "the others written");
    }

    #[test]
    fn values_are_whole_numbers() {
        assert_eq!(whole(2.4), 2);
        assert_eq!(whole(2.5), 3);
        assert_eq!(whole(-1.0), 0);
        assert_eq!(whole(f64::NAN), 0);
        assert_eq!(whole(f64::INFINITY), u64::MAX);
        assert_eq!(whole(1e30), u64::MAX);
    }
}
