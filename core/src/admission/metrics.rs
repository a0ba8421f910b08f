//! Every room's figures in the OpenMetrics text format (what Prometheus scrapes), named once
//! here for every front door: `velvet_rope_` prefix, base units, `_total` counters, labels
//! `room`, `reason`, `rule`, `action`, `outcome`.
//!
//! The figures are those a tick published in the room's counters (shared by every process
//! attached to them), read without touching the request path's cache lines more than a
//! tick does; rule and dry-run tallies are this process's own (as in `stats_json`).

use std::fmt::Write as _;

use crate::admission::decision::RoomStats;
use crate::admission::governance::is_governing;
use crate::admission::room::Room;
use crate::admission::stats::room_stats;
use crate::config::Rules;
use crate::counters::revocations::RevocationCounts;
use crate::counters::tick_block::Cell;
use crate::sync::Ordering;

/// What one room's samples are written from, read once per scrape.
struct View<'a> {
    room: &'a Room,
    stats: RoomStats,
    rules: Rules,
    /// Revocation counts and capacity, for a room that keeps revocations.
    revocations: Option<(RevocationCounts, usize)>,
}

/// One metric family: its name (without `_total` for a counter), type, help text, and what
/// writes a room's samples of it.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    write: fn(&mut Samples<'_>, &View<'_>),
}

/// Where a family's samples go: the text, the family's name and the room's label.
struct Samples<'o> {
    out: &'o mut String,
    name: &'static str,
    room: &'o str,
}

impl Samples<'_> {
    /// `name{room="..."} value`.
    fn gauge(&mut self, value: f64) {
        let _ = writeln!(
            self.out,
            "{}{{room=\"{}\"}} {value}",
            self.name,
            Escaped(self.room)
        );
    }

    /// `name_total{room="...",<label>="<value>"} n`.
    fn counter(&mut self, labels: &[(&str, &str)], n: u64) {
        let _ = write!(
            self.out,
            "{}_total{{room=\"{}\"",
            self.name,
            Escaped(self.room)
        );
        for (k, v) in labels {
            let _ = write!(self.out, ",{k}=\"{}\"", Escaped(v));
        }
        let _ = writeln!(self.out, "}} {n}");
    }
}

/// The families, in the order they are written.
const FAMILIES: &[Family] = &[
    Family { name: "velvet_rope_room_active_users", kind: "gauge", help: "Visitors holding a seat, as of the room's last tick.", write: |s, v| s.gauge(v.stats.active_users as f64) },
    Family { name: "velvet_rope_room_active_users_limit", kind: "gauge", help: "The room's total_active_users in force.", write: |s, v| s.gauge(v.rules.total_active_users as f64) },
    Family { name: "velvet_rope_room_new_users_per_minute_limit", kind: "gauge", help: "The room's new_users_per_minute in force.", write: |s, v| s.gauge(v.rules.new_users_per_minute as f64) },
    Family { name: "velvet_rope_room_admitted_this_minute", kind: "gauge", help: "Visitors admitted in the current minute.", write: |s, v| s.gauge(v.stats.admitted_this_minute as f64) },
    Family { name: "velvet_rope_room_queue_length", kind: "gauge", help: "Visitors waiting in the room's queue.", write: |s, v| s.gauge(v.stats.queue_length as f64) },
    Family { name: "velvet_rope_room_free_slots", kind: "gauge", help: "Seats free to hand out now.", write: |s, v| s.gauge(v.stats.free_slots as f64) },
    Family { name: "velvet_rope_room_admission_rate", kind: "gauge", help: "Admissions per second the wait estimates assume.", write: |s, v| s.gauge(v.stats.admission_rate) },
    Family { name: "velvet_rope_room_suspended", kind: "gauge", help: "1 while the room admits nobody (suspended).", write: |s, v| s.gauge(f64::from(u8::from(v.rules.suspended))) },
    Family { name: "velvet_rope_room_queue_all", kind: "gauge", help: "1 while every new visitor is queued (queue_all).", write: |s, v| s.gauge(f64::from(u8::from(v.rules.queue_all))) },
    Family { name: "velvet_rope_room_governing", kind: "gauge", help: "1 when this process's configuration governs the room's counters.", write: |s, v| s.gauge(f64::from(u8::from(is_governing(v.room)))) },
    Family { name: "velvet_rope_room_memory_bytes", kind: "gauge", help: "Bytes of the room's counters.", write: |s, v| s.gauge(v.stats.memory_bytes as f64) },
    Family { name: "velvet_rope_room_admissions", kind: "counter", help: "Visitors admitted since the counters were made.", write: |s, v| s.counter(&[], v.stats.admitted_total) },
    Family { name: "velvet_rope_ticket_rejections", kind: "counter", help: "Tickets refused, by reason (the visitor arrives anew).", write: |s, v| {
        for (reason, n) in v.stats.ticket_rejections.by_reason() {
            s.counter(&[("reason", reason)], n);
        }
    } },
    Family { name: "velvet_rope_rule_matches", kind: "counter", help: "Requests each rule matched (this process).", write: |s, v| {
        for (rule, action, n) in v.room.rules.tallies() {
            s.counter(&[("rule", rule), ("action", action.as_str())], n);
        }
    } },
    Family { name: "velvet_rope_dry_run_would_have", kind: "counter", help: "Requests a dry-run room let through that it would have queued or rejected (this process).", write: |s, v| {
        for (outcome, i) in [("queue", 0), ("reject", 1)] {
            s.counter(&[("outcome", outcome)], v.room.would_have[i].load(Ordering::Relaxed));
        }
    } },
    Family { name: "velvet_rope_revocations", kind: "counter", help: "Origin revocations, by outcome.", write: |s, v| {
        if let Some((c, _)) = v.revocations {
            for (outcome, n) in [("made", c.made), ("received", c.received), ("refused", c.refused)] {
                s.counter(&[("outcome", outcome)], n);
            }
        }
    } },
    Family { name: "velvet_rope_revocations_kept", kind: "gauge", help: "Revoked ticket ids held now.", write: |s, v| {
        if let Some((c, _)) = v.revocations {
            s.gauge(c.kept as f64);
        }
    } },
    Family { name: "velvet_rope_revocations_capacity", kind: "gauge", help: "Revoked ticket ids the room can hold.", write: |s, v| {
        if let Some((_, capacity)) = v.revocations {
            s.gauge(capacity as f64);
        }
    } },
];

/// The rooms' metrics as OpenMetrics text, ending with `# EOF`.
pub(crate) fn render<'a>(rooms: impl Iterator<Item = &'a Room>) -> String {
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
            }
        })
        .collect();
    let mut out = String::with_capacity(4096);
    for family in FAMILIES {
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        for view in &views {
            let mut samples = Samples {
                out: &mut out,
                name: family.name,
                room: &view.room.cfg.name,
            };
            (family.write)(&mut samples, view);
        }
    }
    out.push_str("# EOF\n");
    out
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
            let family = name.strip_suffix("_total").unwrap_or(name);
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
        assert_eq!(value(&s, "velvet_rope_room_admissions_total", shop), 3.0);
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
}
