//! Every room's figures in the OpenMetrics text format (what Prometheus scrapes), named once
//! here for every front door: `velvet_rope_` prefix, base units, `_total` counters, labels
//! `room`, `reason`, `rule`, `action`, `outcome`.
//!
//! The figures are those a tick published in the room's counters (shared by every process
//! attached to them), read without touching the request path's cache lines more than a
//! tick does; so are the rule and dry-run tallies (in counters laid out without tallies, and
//! for rules past the table's 256, this process's own, as in `stats_json`).

use std::fmt::Write as _;

use crate::admission::cluster::{self, ClusterState};
use crate::admission::decision::RoomStats;
use crate::admission::governance::is_governing;
use crate::admission::room::Room;
use crate::admission::stats::room_stats;
use crate::config::Rules;
use crate::counters::revocations::RevocationCounts;
use crate::counters::room_tallies::{AdmissionKind, TallySums, ERROR_BOUNDS, WAIT_BOUNDS};
use crate::counters::tick_block::Cell;

/// What kind of metric a family is (OpenMetrics' types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A value that goes up and down; its sample is named as the family.
    Gauge,
    /// A count that only grows; its sample is named `<family>_total`.
    Counter,
    /// Observations in buckets: `<family>_bucket` samples (cumulative, with an `le` label
    /// ending at `+Inf`), and `<family>_count` and `<family>_sum` when no bucket bound is
    /// negative (OpenMetrics: a histogram with negative bounds has no sum, and a count only
    /// with a sum; its `+Inf` bucket is its count).
    Histogram,
}

impl MetricKind {
    /// `gauge`, `counter` or `histogram`.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One sample of a family: its name's suffix, its labels (`room` first) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Appended to the family's name: `""` for a gauge, `_total` for a counter, `_bucket`,
    /// `_count` or `_sum` for a histogram.
    pub suffix: &'static str,
    /// Label names and values, in order.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: f64,
}

/// One metric family and every room's samples of it.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    /// The name, `velvet_rope_` first, without a counter's `_total`.
    pub name: &'static str,
    /// Gauge, counter or histogram.
    pub kind: MetricKind,
    /// What it measures, in one line.
    pub help: &'static str,
    /// Label names the samples carry beside `room` (and a histogram's `le`).
    pub label_names: &'static [&'static str],
    /// The samples, room by room.
    pub samples: Vec<Sample>,
}

/// What one room's samples are written from, read once per scrape.
struct View<'a> {
    room: &'a Room,
    stats: RoomStats,
    rules: Rules,
    /// Revocation counts and capacity, for a room that keeps revocations.
    revocations: Option<(RevocationCounts, usize)>,
    /// The tallies, in a region that keeps them.
    tallies: Option<TallySums>,
    /// Where a room shared through the cluster tier stands, as of its last tick, and the
    /// age of its grant then (ms; `None` before its first grant).
    cluster: Option<(ClusterState, Option<u64>)>,
}

impl View<'_> {
    /// Requests passed that would have been queued and rejected (see
    /// `Room::would_have_counts`), from the tallies read once for the view.
    fn would_have(&self) -> [u64; 2] {
        match &self.tallies {
            Some(t) => t.would_have,
            None => self.room.would_have_counts(),
        }
    }

    /// Requests refused as ones several deciding rooms might govern (see
    /// `Room::ambiguous_count`), from the tallies read once for the view.
    fn ambiguous(&self) -> u64 {
        match &self.tallies {
            Some(t) => t.ambiguous,
            None => self.room.ambiguous_count(),
        }
    }
}

/// One metric family: its name (without `_total` for a counter), type, help text, labels, and
/// what writes a room's samples of it.
struct Family {
    name: &'static str,
    kind: MetricKind,
    help: &'static str,
    labels: &'static [&'static str],
    write: fn(&mut Samples<'_>, &View<'_>),
}

/// Where a family's samples go, with the room's label.
struct Samples<'o> {
    out: &'o mut Vec<Sample>,
    room: &'o str,
}

impl Samples<'_> {
    fn push(&mut self, suffix: &'static str, labels: &[(&'static str, &str)], value: f64) {
        let mut all = Vec::with_capacity(labels.len() + 1);
        all.push(("room", self.room.to_owned()));
        all.extend(labels.iter().map(|&(k, v)| (k, v.to_owned())));
        self.out.push(Sample {
            suffix,
            labels: all,
            value,
        });
    }

    /// The room's value of a gauge.
    fn gauge(&mut self, value: f64) {
        self.push("", &[], value);
    }

    /// The room's count of a counter, with `labels`.
    fn counter(&mut self, labels: &[(&'static str, &str)], n: u64) {
        self.push("_total", labels, n as f64);
    }

    /// A histogram of `counts` per bucket (not cumulative; the last past every bound), with
    /// its count and `sum` when its bounds are never negative.
    fn histogram<B: std::fmt::Display>(&mut self, bounds: &[B], counts: &[u64], sum: Option<u64>) {
        let mut cumulative = 0u64;
        for (i, n) in counts.iter().enumerate() {
            cumulative += n;
            // `le` in the canonical form OpenMetrics asks for (a float: `5.0`).
            let le = bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| format!("{b}.0"));
            self.push("_bucket", &[("le", &le)], cumulative as f64);
        }
        // A histogram with negative bounds has no sum, and then no count either (OpenMetrics:
        // the count goes with the sum; the `+Inf` bucket is the count).
        if let Some(sum) = sum {
            self.push("_count", &[], cumulative as f64);
            self.push("_sum", &[], sum as f64);
        }
    }
}

/// The families, in the order they are written.
const FAMILIES: &[Family] = &[
    Family { name: "velvet_rope_room_active_users", kind: MetricKind::Gauge, labels: &[], help: "Visitors holding a seat, as of the room's last tick.", write: |s, v| s.gauge(v.stats.active_users as f64) },
    Family { name: "velvet_rope_room_active_users_limit", kind: MetricKind::Gauge, labels: &[], help: "The room's total_active_users in force.", write: |s, v| s.gauge(v.rules.total_active_users as f64) },
    Family { name: "velvet_rope_room_new_users_per_minute_limit", kind: MetricKind::Gauge, labels: &[], help: "The room's new_users_per_minute in force.", write: |s, v| s.gauge(v.rules.new_users_per_minute as f64) },
    Family { name: "velvet_rope_room_admitted_this_minute", kind: MetricKind::Gauge, labels: &[], help: "Visitors admitted in the current minute.", write: |s, v| s.gauge(v.stats.admitted_this_minute as f64) },
    Family { name: "velvet_rope_room_queue_length", kind: MetricKind::Gauge, labels: &[], help: "Visitors waiting in the room's queue.", write: |s, v| s.gauge(v.stats.queue_length as f64) },
    Family { name: "velvet_rope_room_free_slots", kind: MetricKind::Gauge, labels: &[], help: "Seats free to hand out now.", write: |s, v| s.gauge(v.stats.free_slots as f64) },
    Family { name: "velvet_rope_room_admission_rate", kind: MetricKind::Gauge, labels: &[], help: "Admissions per second the wait estimates assume.", write: |s, v| s.gauge(v.stats.admission_rate) },
    Family { name: "velvet_rope_room_suspended", kind: MetricKind::Gauge, labels: &[], help: "1 while the room admits nobody (suspended).", write: |s, v| s.gauge(f64::from(u8::from(v.rules.suspended))) },
    Family { name: "velvet_rope_room_queue_all", kind: MetricKind::Gauge, labels: &[], help: "1 while every new visitor is queued (queue_all).", write: |s, v| s.gauge(f64::from(u8::from(v.rules.queue_all))) },
    Family { name: "velvet_rope_room_governing", kind: MetricKind::Gauge, labels: &[], help: "1 when this process's configuration governs the room's counters.", write: |s, v| s.gauge(f64::from(u8::from(is_governing(v.room)))) },
    Family { name: "velvet_rope_room_memory_bytes", kind: MetricKind::Gauge, labels: &[], help: "Bytes of the room's counters.", write: |s, v| s.gauge(v.stats.memory_bytes as f64) },
    Family { name: "velvet_rope_room_admissions", kind: MetricKind::Counter, labels: &["kind"], help: "Admissions by kind: new visitors let straight in, waiters let in from the queue, sessions renewed, and visitors of other counters counted afresh.", write: |s, v| {
        if let Some(t) = &v.tallies {
            for ((_, kind), n) in AdmissionKind::ALL.iter().zip(t.admissions) {
                s.counter(&[("kind", kind)], n);
            }
        }
    } },
    Family { name: "velvet_rope_room_decisions", kind: MetricKind::Counter, labels: &["outcome"], help: "Requests queued (the waiting page served) or rejected; admitted visitors are counted by admission, not per request.", write: |s, v| {
        if let Some(t) = &v.tallies {
            for (outcome, n) in ["queue", "reject"].into_iter().zip(t.decisions) {
                s.counter(&[("outcome", outcome)], n);
            }
        }
    } },
    Family { name: "velvet_rope_room_wait_seconds", kind: MetricKind::Histogram, labels: &[], help: "How long each waiter let in from the queue waited, from joining it.", write: |s, v| {
        if let Some(t) = &v.tallies {
            s.histogram(&WAIT_BOUNDS, &t.wait_buckets, Some(t.wait_sum));
        }
    } },
    Family { name: "velvet_rope_room_wait_error_seconds", kind: MetricKind::Histogram, labels: &[], help: "For each waiter let in that was promised a time: when it got in, minus the entry time it was last promised (positive: later than promised).", write: |s, v| {
        if let Some(t) = &v.tallies {
            s.histogram(&ERROR_BOUNDS, &t.error_buckets, None);
        }
    } },
    Family { name: "velvet_rope_ticket_rejections", kind: MetricKind::Counter, labels: &["reason"], help: "Tickets refused, by reason (the visitor arrives anew).", write: |s, v| {
        for (reason, n) in v.stats.ticket_rejections.by_reason() {
            s.counter(&[("reason", reason)], n);
        }
    } },
    Family { name: "velvet_rope_rule_matches", kind: MetricKind::Counter, labels: &["rule", "action"], help: "Requests each rule matched.", write: |s, v| {
        for (rule, action, n) in v.room.rule_tallies() {
            s.counter(&[("rule", rule), ("action", action.as_str())], n);
        }
    } },
    Family { name: "velvet_rope_dry_run_would_have", kind: MetricKind::Counter, labels: &["outcome"], help: "Requests a dry-run room (or a count_only rule) let through that it would have queued or rejected.", write: |s, v| {
        let n = v.would_have();
        for (outcome, i) in [("queue", 0), ("reject", 1)] {
            s.counter(&[("outcome", outcome)], n[i]);
        }
    } },
    Family { name: "velvet_rope_room_ambiguous_refused", kind: MetricKind::Counter, labels: &[], help: "Requests refused (400) because they might belong to this room (the routes' choice) and another that would decide them too: a target that reads several ways, two hosts that disagree, a host that is not one, or none.", write: |s, v| {
        s.counter(&[], v.ambiguous());
    } },
    Family { name: "velvet_rope_revocations", kind: MetricKind::Counter, labels: &["outcome"], help: "Origin revocations, by outcome.", write: |s, v| {
        if let Some((c, _)) = v.revocations {
            for (outcome, n) in [("made", c.made), ("received", c.received), ("refused", c.refused)] {
                s.counter(&[("outcome", outcome)], n);
            }
        }
    } },
    Family { name: "velvet_rope_cluster_grant_users", kind: MetricKind::Gauge, labels: &[], help: "Active visitors this host may hold under its last grant from the cluster's store (rooms shared through the cluster tier).", write: |s, v| {
        if let Some((c, _)) = &v.cluster {
            s.gauge(c.total as f64);
        }
    } },
    Family { name: "velvet_rope_cluster_grant_age_seconds", kind: MetricKind::Gauge, labels: &[], help: "Seconds since the store granted the host's last grant, as of the room's last tick (+Inf before the first): how long since the store last answered a sync.", write: |s, v| {
        if let Some((_, age)) = &v.cluster {
            s.gauge(age.map_or(f64::INFINITY, |ms| ms as f64 / 1000.0));
        }
    } },
    Family { name: "velvet_rope_cluster_fallback", kind: MetricKind::Gauge, labels: &[], help: "1 while the host enforces its fallback share: no grant the store may still reserve (the store unreachable past a lease and a session; outside the exactness guarantee).", write: |s, v| {
        if let Some((c, _)) = &v.cluster {
            s.gauge(f64::from(u8::from(c.fallback)));
        }
    } },
    Family { name: "velvet_rope_cluster_syncs", kind: MetricKind::Counter, labels: &["outcome"], help: "Syncs of the room through the cluster's store, answered (ok) or failed, by this host.", write: |s, v| {
        if let (Some(_), Some(t)) = (&v.cluster, &v.tallies) {
            for (outcome, n) in ["ok", "failed"].into_iter().zip(t.syncs) {
                s.counter(&[("outcome", outcome)], n);
            }
        }
    } },
    Family { name: "velvet_rope_cluster_outages", kind: MetricKind::Counter, labels: &[], help: "Outages of the cluster's store (a failed sync after answered ones) this host's syncs of the room ran into.", write: |s, v| {
        if let (Some(_), Some(t)) = (&v.cluster, &v.tallies) {
            s.counter(&[], t.outages);
        }
    } },
    Family { name: "velvet_rope_room_event_active", kind: MetricKind::Gauge, labels: &[], help: "1 while a scheduled event's rules are in force (its pre-queue included).", write: |s, v| s.gauge(f64::from(u8::from(v.rules.event.is_some()))) },
    Family { name: "velvet_rope_room_prequeue", kind: MetricKind::Gauge, labels: &[], help: "1 while a scheduled event's pre-queue holds everyone arriving until its start.", write: |s, v| s.gauge(f64::from(u8::from(v.rules.prequeue))) },
    Family { name: "velvet_rope_revocations_kept", kind: MetricKind::Gauge, labels: &[], help: "Revoked ticket ids held now.", write: |s, v| {
        if let Some((c, _)) = v.revocations {
            s.gauge(c.kept as f64);
        }
    } },
    Family { name: "velvet_rope_revocations_capacity", kind: MetricKind::Gauge, labels: &[], help: "Revoked ticket ids the room can hold.", write: |s, v| {
        if let Some((_, capacity)) = v.revocations {
            s.gauge(capacity as f64);
        }
    } },
];

/// The rooms' metric families, every family once (with no samples when no room has any).
pub(crate) fn families<'a>(rooms: impl Iterator<Item = &'a Room>) -> Vec<MetricFamily> {
    let views: Vec<View<'_>> = rooms
        .map(|room| {
            let tb = room.counters.tick_block();
            View {
                room,
                stats: room_stats(room),
                rules: room.rules_at(tb.get(Cell::LastTick)),
                revocations: room.counters.revocations().map(|r| {
                    (
                        r.counts(tb.get(Cell::Bucket)),
                        room.counters.layout().revocation_words,
                    )
                }),
                tallies: room.counters.tallies().map(|t| t.sums()),
                cluster: cluster::clustered(room).then(|| {
                    let at = tb.get(Cell::LastTick);
                    let state = cluster::state(room, at);
                    // A grant's lease starts when the store grants it.
                    let age = (state.until != 0).then(|| {
                        at.saturating_sub(state.until.saturating_sub(room.cluster_lease_ms))
                    });
                    (state, age)
                }),
            }
        })
        .collect();
    FAMILIES
        .iter()
        .map(|family| {
            let mut samples = Vec::new();
            for view in &views {
                let mut sink = Samples {
                    out: &mut samples,
                    room: &view.room.cfg.name,
                };
                (family.write)(&mut sink, view);
            }
            MetricFamily {
                name: family.name,
                kind: family.kind,
                help: family.help,
                label_names: family.labels,
                samples,
            }
        })
        .collect()
}

/// Families as OpenMetrics text, ending with `# EOF`.
pub(crate) fn render(families: &[MetricFamily]) -> String {
    let mut out = String::with_capacity(4096);
    for family in families {
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind.as_str());
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        for sample in &family.samples {
            let _ = write!(out, "{}{}{{", family.name, sample.suffix);
            for (i, (k, v)) in sample.labels.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                let _ = write!(out, "{comma}{k}=\"{}\"", Escaped(v));
            }
            let _ = writeln!(out, "}} {}", Value(sample.value));
        }
    }
    out.push_str("# EOF\n");
    out
}

/// A sample's value as OpenMetrics writes it (`+Inf`, `-Inf`, `NaN`, or the number).
struct Value(f64);

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v if v.is_nan() => f.write_str("NaN"),
            v => write!(f, "{v}"),
        }
    }
}

/// A label value as OpenMetrics writes it: `\`, `"` and line feeds escaped.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use crate::{Engine, Outcome};

    const T0: u64 = 1_800_000_000_000;

    /// Every sample line: its name, labels and value; the families declared once each, in
    /// order, before their samples; `# EOF` last.
    fn parse(text: &str) -> Vec<(String, String, f64)> {
        let mut declared = Vec::new();
        let mut samples = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
        for line in &lines[..lines.len() - 1] {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_owned();
                assert!(!declared.contains(&name), "{name} declared twice");
                declared.push(name);
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap();
            let family = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|x| name.strip_suffix(x))
                .unwrap_or(name);
            assert_eq!(declared.last().map(String::as_str), Some(family), "{line}");
            samples.push((
                name.to_owned(),
                labels.trim_end_matches('}').to_owned(),
                value.parse().unwrap(),
            ));
        }
        samples
    }

    fn value(samples: &[(String, String, f64)], name: &str, labels: &str) -> f64 {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l == labels)
            .unwrap_or_else(|| panic!("no {name}{{{labels}}}"))
            .2
    }

    #[test]
    fn metrics_agree_with_the_crowd_served() {
        let e = Engine::from_text(
            "[[rooms]]\nname = \"shop\"\ntotal_active_users = 3\nnew_users_per_minute = 100\n\
             [[rooms]]\nname = \"q\"\ntotal_active_users = 1\nnew_users_per_minute = 1\n\
             enabled_origin_commands = [\"revoke\"]\n\
             [[rooms.rules]]\nname = \"say \\\"hi\\\"\"\naction = \"bypass\"\npaths = [\"/x\"]\n",
            T0,
        )
        .unwrap();
        let admitted = (0..5)
            .filter(|_| e.admit("shop", None, T0).unwrap().outcome == Outcome::Admit)
            .count();
        assert_eq!(admitted, 3);
        assert!(e.admit("shop", Some("__vr_shop=garbage"), T0).is_ok());
        e.tick(T0 + 1_000);
        let text = e.metrics_text();
        if let Ok(path) = std::env::var("VELVET_ROPE_METRICS_OUT") {
            std::fs::write(path, &text).unwrap();
        }
        let s = parse(&text);
        let shop = "room=\"shop\"";
        assert_eq!(value(&s, "velvet_rope_room_active_users", shop), 3.0);
        assert_eq!(value(&s, "velvet_rope_room_active_users_limit", shop), 3.0);
        assert_eq!(
            value(
                &s,
                "velvet_rope_room_admissions_total",
                "room=\"shop\",kind=\"new\""
            ),
            3.0
        );
        assert_eq!(
            value(
                &s,
                "velvet_rope_ticket_rejections_total",
                "room=\"shop\",reason=\"bad_encoding\""
            ),
            1.0
        );
        // A quote in a rule's name is escaped; revocation families only for rooms keeping them.
        assert_eq!(
            value(
                &s,
                "velvet_rope_rule_matches_total",
                "room=\"q\",rule=\"say \\\"hi\\\"\",action=\"bypass\""
            ),
            0.0
        );
        assert_eq!(value(&s, "velvet_rope_revocations_kept", "room=\"q\""), 0.0);
        assert!(!s
            .iter()
            .any(|(n, l, _)| n == "velvet_rope_revocations_kept" && l == shop));
    }

    /// Waiters let in from the queue: one sample each in the wait histogram (and in the error
    /// histogram, each having been promised a wait), and the same count by kind.
    #[test]
    fn one_wait_sample_per_waiter_let_in() {
        let e = Engine::from_text(
            "[[rooms]]\nname = \"shop\"\ntotal_active_users = 2\nnew_users_per_minute = 100\n\
             session_duration = 1\n",
            T0,
        )
        .unwrap();
        let cookie = |d: &crate::Decision| format!("__vr_shop={}", d.ticket().unwrap());
        let mut waiters = Vec::new();
        let mut queued = 0;
        for _ in 0..6 {
            let d = e.admit("shop", None, T0).unwrap();
            if d.outcome == Outcome::Queue {
                assert!(d.estimated_wait_secs.is_some());
                queued += 1;
                waiters.push(cookie(&d));
            }
        }
        assert_eq!(waiters.len(), 4);
        let mut let_in = 0;
        let mut now = T0;
        for _ in 0..8 {
            now += 30_000;
            e.tick(now);
            waiters.retain_mut(|held| {
                let d = e.admit("shop", Some(held), now).unwrap();
                if d.outcome == Outcome::Admit {
                    let_in += 1;
                    return false;
                }
                queued += 1;
                if d.set_cookie.is_some() {
                    *held = cookie(&d);
                }
                true
            });
        }
        assert!(let_in >= 2, "{let_in} let in");
        let s = parse(&e.metrics_text());
        let shop = "room=\"shop\"";
        let kind = |k: &str| {
            value(
                &s,
                "velvet_rope_room_admissions_total",
                &format!("{shop},kind=\"{k}\""),
            )
        };
        assert_eq!(kind("new"), 2.0);
        assert_eq!(kind("queue"), let_in as f64);
        assert_eq!(
            value(&s, "velvet_rope_room_wait_seconds_count", shop),
            let_in as f64
        );
        assert_eq!(
            value(
                &s,
                "velvet_rope_room_wait_seconds_bucket",
                &format!("{shop},le=\"+Inf\"")
            ),
            let_in as f64
        );
        assert_eq!(
            value(
                &s,
                "velvet_rope_room_wait_error_seconds_bucket",
                &format!("{shop},le=\"+Inf\"")
            ),
            let_in as f64
        );
        assert!(value(&s, "velvet_rope_room_wait_seconds_sum", shop) >= 30.0 * let_in as f64);
        // The error histogram has negative bounds: no sum (OpenMetrics).
        assert!(!s
            .iter()
            .any(|(n, _, _)| n == "velvet_rope_room_wait_error_seconds_sum"));
        assert_eq!(
            value(
                &s,
                "velvet_rope_room_decisions_total",
                &format!("{shop},outcome=\"queue\"")
            ),
            f64::from(queued)
        );
    }
}
