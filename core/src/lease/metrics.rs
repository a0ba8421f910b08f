//! A coordinator's figures as metric families (see `admission::metrics` for the format and
//! the conventions): per resource its capacity, what is granted and wanted, its clients,
//! whether it is learning, and the requests refused.

use crate::admission::metrics::{render, MetricFamily, MetricKind, Sample};
use crate::clock::Millis;
use crate::lease::coordinator::{Coordinator, ResourceFigures};

/// A gauge or counter family with one sample per resource, read by `value`.
struct Family {
    name: &'static str,
    kind: MetricKind,
    help: &'static str,
    value: fn(&ResourceFigures) -> f64,
}

const FAMILIES: &[Family] = &[
    Family { name: "velvet_rope_lease_capacity", kind: MetricKind::Gauge, help: "Capacity the coordinator hands out for the resource now (a leaf: its upstream grant, or its fallback).", value: |f| f.capacity },
    Family { name: "velvet_rope_lease_granted", kind: MetricKind::Gauge, help: "Sum of the resource's unexpired grants.", value: |f| f.granted },
    Family { name: "velvet_rope_lease_wanted", kind: MetricKind::Gauge, help: "Sum of what the clients holding a grant of the resource want.", value: |f| f.wanted },
    Family { name: "velvet_rope_lease_clients", kind: MetricKind::Gauge, help: "Clients holding an unexpired grant of the resource.", value: |f| f.clients as f64 },
    Family { name: "velvet_rope_lease_learning", kind: MetricKind::Gauge, help: "1 while the resource is in learning mode (after a start, grants only what clients say they hold).", value: |f| f64::from(u8::from(f.learning)) },
    Family { name: "velvet_rope_lease_refusals", kind: MetricKind::Counter, help: "Lease requests of the resource refused as invalid.", value: |f| f.refusals as f64 },
];

impl Coordinator {
    /// Every resource's metrics at `now` (the resources that have had a request), family by
    /// family; every family is there, in the same order, with no samples when no resource
    /// has any.
    pub fn metrics(&self, now: Millis) -> Vec<MetricFamily> {
        let figures = self.figures(now);
        FAMILIES
            .iter()
            .map(|family| MetricFamily {
                name: family.name,
                kind: family.kind,
                help: family.help,
                label_names: &[],
                samples: figures
                    .iter()
                    .map(|f| Sample {
                        suffix: if family.kind == MetricKind::Counter {
                            "_total"
                        } else {
                            ""
                        },
                        labels: vec![("resource", f.resource.clone())],
                        value: (family.value)(f),
                    })
                    .collect(),
            })
            .collect()
    }

    /// [`Coordinator::metrics`] in the OpenMetrics text format, ending with `# EOF`.
    pub fn metrics_text(&self, now: Millis) -> String {
        render(&self.metrics(now))
    }
}

#[cfg(test)]
mod tests {
    use crate::lease::{Coordinator, LeaseConfig, LeaseRequest};

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn metrics_follow_the_grants_the_learning_and_the_refusals() {
        let config = LeaseConfig::from_toml(
            "[[resources]]\nidentifier_glob = \"api*\"\ncapacity = 100\n\
             algorithm = { kind = \"fair_share\", lease_length = 10, refresh_interval = 1, learning_mode_duration = 5 }\n",
        )
        .unwrap();
        let c = Coordinator::from_config(&config, T0).unwrap();
        let value = |now: u64, name: &str| {
            c.metrics_text(now)
                .lines()
                .find(|l| l.starts_with(&format!("{name}{{resource=\"api\"}} ")))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        };
        assert_eq!(
            value(T0, "velvet_rope_lease_capacity"),
            None,
            "no request yet"
        );
        // Learning: grants what a client says it holds.
        let lease = c
            .request_with(
                &LeaseRequest {
                    has: 20.0,
                    ..LeaseRequest::new("a", "api", 60.0, 0)
                },
                T0,
            )
            .unwrap();
        assert_eq!(lease.capacity, 20.0);
        assert_eq!(value(T0, "velvet_rope_lease_learning"), Some(1.0));
        let after = T0 + 6_000;
        c.request("a", "api", 60.0, 0, after).unwrap();
        c.request("b", "api", 60.0, 0, after).unwrap();
        assert_eq!(value(after, "velvet_rope_lease_learning"), Some(0.0));
        assert_eq!(value(after, "velvet_rope_lease_capacity"), Some(100.0));
        assert_eq!(value(after, "velvet_rope_lease_clients"), Some(2.0));
        assert_eq!(value(after, "velvet_rope_lease_wanted"), Some(120.0));
        let granted = value(after, "velvet_rope_lease_granted").unwrap();
        assert!((99.0..=100.0).contains(&granted), "{granted}");
        assert!(c.request("a", "api", -1.0, 0, after).is_err());
        assert!(c.request("a", "nothing-matches", 1.0, 0, after).is_err());
        assert_eq!(value(after, "velvet_rope_lease_refusals_total"), Some(1.0));
        // Expired leases leave: nobody holds anything.
        let later = after + 11_000;
        assert_eq!(value(later, "velvet_rope_lease_clients"), Some(0.0));
        assert_eq!(value(later, "velvet_rope_lease_granted"), Some(0.0));
    }
}
