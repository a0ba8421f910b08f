//! Every room's figures in the OpenMetrics text format (what Prometheus scrapes), named once
//! here for every front door: `velvet_rope_` prefix, base units, `_total` counters, labels
//! `room`, `reason`, `rule`, `action`, `outcome`.
//!
//! The figures are those a tick published in the room's counters (shared by every process
//! attached to them), read without touching the request path's cache lines more than a
//! tick does; rule and dry-run tallies are this process's own (as in `stats_json`).

use std::fmt::Write as _;

use crate::admission::room::Room;
use crate::admission::stats::room_stats;
use crate::counters::tick_block::Cell;
use crate::sync::Ordering;

/// One metric family: its name (without `_total` for a counter), type and help text.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

/// The families, in the order they are written.
const FAMILIES: &[Family] = &[
    Family { name: "velvet_rope_room_active_users", kind: "gauge", help: "Visitors holding a seat, as of the room's last tick." },
    Family { name: "velvet_rope_room_active_users_limit", kind: "gauge", help: "The room's total_active_users in force." },
    Family { name: "velvet_rope_room_new_users_per_minute_limit", kind: "gauge", help: "The room's new_users_per_minute in force." },
    Family { name: "velvet_rope_room_admitted_this_minute", kind: "gauge", help: "Visitors admitted in the current minute." },
    Family { name: "velvet_rope_room_queue_length", kind: "gauge", help: "Visitors waiting in the room's queue." },
    Family { name: "velvet_rope_room_free_slots", kind: "gauge", help: "Seats free to hand out now." },
    Family { name: "velvet_rope_room_admission_rate", kind: "gauge", help: "Admissions per second the wait estimates assume." },
    Family { name: "velvet_rope_room_suspended", kind: "gauge", help: "1 while the room admits nobody (suspended)." },
    Family { name: "velvet_rope_room_queue_all", kind: "gauge", help: "1 while every new visitor is queued (queue_all)." },
    Family { name: "velvet_rope_room_governing", kind: "gauge", help: "1 when this process's configuration governs the room's counters." },
    Family { name: "velvet_rope_room_memory_bytes", kind: "gauge", help: "Bytes of the room's counters." },
    Family { name: "velvet_rope_room_admissions", kind: "counter", help: "Visitors admitted since the counters were made." },
    Family { name: "velvet_rope_ticket_rejections", kind: "counter", help: "Tickets refused, by reason (the visitor arrives anew)." },
    Family { name: "velvet_rope_rule_matches", kind: "counter", help: "Requests each rule matched (this process)." },
    Family { name: "velvet_rope_dry_run_would_have", kind: "counter", help: "Requests a dry-run room let through that it would have queued or rejected (this process)." },
    Family { name: "velvet_rope_revocations", kind: "counter", help: "Origin revocations, by outcome." },
    Family { name: "velvet_rope_revocations_kept", kind: "gauge", help: "Revoked ticket ids held now." },
    Family { name: "velvet_rope_revocations_capacity", kind: "gauge", help: "Revoked ticket ids the room can hold." },
];

/// The rooms' metrics as OpenMetrics text, ending with `# EOF`.
pub(crate) fn render<'a>(rooms: impl Iterator<Item = &'a Room> + Clone) -> String {
    let mut out = String::with_capacity(4096);
    for family in FAMILIES {
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        for room in rooms.clone() {
            samples(&mut out, family, room);
        }
    }
    out.push_str("# EOF\n");
    out
}

/// `family`'s samples for `room`.
fn samples(out: &mut String, family: &Family, room: &Room) {
    let name = family.name;
    let label = Escaped(&room.cfg.name);
    let st = room_stats(room);
    let tb = room.counters.tick_block();
    let rules = room.rules_at(tb.get(Cell::LastTick));
    let flag = |b: bool| u64::from(b);
    let gauge = |out: &mut String, v: f64| {
        let _ = writeln!(out, "{name}{{room=\"{label}\"}} {v}");
    };
    match name {
        "velvet_rope_room_active_users" => gauge(out, st.active_users as f64),
        "velvet_rope_room_active_users_limit" => gauge(out, rules.total_active_users as f64),
        "velvet_rope_room_new_users_per_minute_limit" => {
            gauge(out, rules.new_users_per_minute as f64)
        }
        "velvet_rope_room_admitted_this_minute" => gauge(out, st.admitted_this_minute as f64),
        "velvet_rope_room_queue_length" => gauge(out, st.queue_length as f64),
        "velvet_rope_room_free_slots" => gauge(out, st.free_slots as f64),
        "velvet_rope_room_admission_rate" => gauge(out, st.admission_rate),
        "velvet_rope_room_suspended" => gauge(out, flag(rules.suspended) as f64),
        "velvet_rope_room_queue_all" => gauge(out, flag(rules.queue_all) as f64),
        "velvet_rope_room_governing" => gauge(
            out,
            flag(crate::admission::governance::is_governing(room)) as f64,
        ),
        "velvet_rope_room_memory_bytes" => gauge(out, st.memory_bytes as f64),
        "velvet_rope_room_admissions" => {
            let _ = writeln!(
                out,
                "{name}_total{{room=\"{label}\"}} {}",
                st.admitted_total
            );
        }
        "velvet_rope_ticket_rejections" => {
            let r = st.ticket_rejections;
            for (reason, n) in [
                ("bad_encoding", r.bad_encoding),
                ("unknown_key", r.unknown_key),
                ("bad_tag", r.bad_tag),
                ("wrong_room", r.wrong_room),
                ("expired", r.expired),
                ("from_future", r.from_future),
                ("revoked", r.revoked),
            ] {
                let _ = writeln!(
                    out,
                    "{name}_total{{room=\"{label}\",reason=\"{reason}\"}} {n}"
                );
            }
        }
        "velvet_rope_rule_matches" => {
            for (rule, action, n) in room.rules.tallies() {
                let _ = writeln!(
                    out,
                    "{name}_total{{room=\"{label}\",rule=\"{}\",action=\"{}\"}} {n}",
                    Escaped(rule),
                    action.as_str()
                );
            }
        }
        "velvet_rope_dry_run_would_have" => {
            for (outcome, i) in [("queue", 0), ("reject", 1)] {
                let n = room.would_have[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{name}_total{{room=\"{label}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        "velvet_rope_revocations"
        | "velvet_rope_revocations_kept"
        | "velvet_rope_revocations_capacity" => {
            let Some(rv) = room.counters.revocations() else {
                return;
            };
            let c = rv.counts(tb.get(Cell::Bucket));
            match name {
                "velvet_rope_revocations" => {
                    for (outcome, n) in [
                        ("made", c.made),
                        ("received", c.received),
                        ("refused", c.refused),
                    ] {
                        let _ = writeln!(
                            out,
                            "{name}_total{{room=\"{label}\",outcome=\"{outcome}\"}} {n}"
                        );
                    }
                }
                "velvet_rope_revocations_kept" => gauge(out, c.kept as f64),
                _ => gauge(out, room.counters.layout().revocation_words as f64),
            }
        }
        _ => unreachable!("a family without samples: {name}"),
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
