//! The `resources` section of the configuration.
//!
//! The same structure is read from TOML and from JSON. Durations are seconds (numbers).
//!
//! ```toml
//! [[resources]]
//! identifier_glob = "mysql-shard-*"
//! capacity = 500.0
//! safe_capacity = 10.0
//! description = "queries per second per shard"
//! algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 5 }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::LeaseError;

/// The allocation algorithm of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AlgorithmKind {
    /// Everyone gets what they want; capacity is ignored.
    #[serde(alias = "NO_ALGORITHM")]
    None,
    /// Everyone gets `min(wants, capacity)`: capacity is per client.
    #[serde(alias = "STATIC")]
    Static,
    /// Equal share, then the rest in proportion to excess demand.
    #[serde(alias = "PROPORTIONAL_SHARE")]
    ProportionalShare,
    /// Exact max-min fairness weighted by subclients.
    #[default]
    #[serde(alias = "FAIR_SHARE")]
    FairShare,
    /// A reserved amount per subclient, the rest fair-shared (parameter `reserved`).
    ReservedPlusShared,
}

impl AlgorithmKind {
    /// Whether the capacity is one pool shared by all clients (so the sum of grants is bounded
    /// by it). `none` and `static` do not share: `static` bounds each grant, `none` nothing.
    pub fn shares_capacity(self) -> bool {
        !matches!(self, AlgorithmKind::None | AlgorithmKind::Static)
    }

    /// The configuration name (`fair_share`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::None => "none",
            AlgorithmKind::Static => "static",
            AlgorithmKind::ProportionalShare => "proportional_share",
            AlgorithmKind::FairShare => "fair_share",
            AlgorithmKind::ReservedPlusShared => "reserved_plus_shared",
        }
    }
}

/// What a client does when its lease expires and cannot be refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RefreshFailureMode {
    /// Use nothing (capacity 0).
    Pessimistic,
    /// Keep wanting: behave as if granted the current `wants`.
    Optimistic,
    /// Use the safe capacity of the last lease (configured, else capacity / number of clients).
    #[default]
    Safe,
}

/// How a resource is allocated and leased.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmConfig {
    /// The allocation algorithm. Default `fair_share`.
    #[serde(default)]
    pub kind: AlgorithmKind,
    /// Seconds a lease is valid without refresh. Default 60.
    #[serde(default = "default_lease_length")]
    pub lease_length: f64,
    /// Seconds between refreshes; at most `lease_length`. Default 5.
    #[serde(default = "default_refresh_interval")]
    pub refresh_interval: f64,
    /// Seconds of learning mode after start; absent means one `lease_length`, 0 disables it.
    #[serde(default)]
    pub learning_mode_duration: Option<f64>,
    /// Algorithm parameters. `reserved_plus_shared` reads `reserved` (per subclient).
    #[serde(default)]
    pub parameters: BTreeMap<String, f64>,
}

fn default_lease_length() -> f64 {
    60.0
}

fn default_refresh_interval() -> f64 {
    5.0
}

impl Default for AlgorithmConfig {
    fn default() -> Self {
        Self {
            kind: AlgorithmKind::default(),
            lease_length: default_lease_length(),
            refresh_interval: default_refresh_interval(),
            learning_mode_duration: None,
            parameters: BTreeMap::new(),
        }
    }
}

impl AlgorithmConfig {
    /// Lease length in milliseconds.
    pub fn lease_length_ms(&self) -> u64 {
        secs_to_ms(self.lease_length)
    }

    /// Refresh interval in milliseconds.
    pub fn refresh_interval_ms(&self) -> u64 {
        secs_to_ms(self.refresh_interval)
    }

    /// Learning-mode duration in milliseconds (default: one lease length).
    pub fn learning_mode_ms(&self) -> u64 {
        secs_to_ms(self.learning_mode_duration.unwrap_or(self.lease_length))
    }

    /// The `reserved` parameter of `reserved_plus_shared` (0 when absent).
    pub fn reserved(&self) -> f64 {
        self.parameters.get("reserved").copied().unwrap_or(0.0)
    }
}

/// Converts validated seconds to whole milliseconds (saturating).
pub(crate) fn secs_to_ms(secs: f64) -> u64 {
    let ms = (secs * 1000.0).round();
    if ms.is_nan() || ms <= 0.0 {
        0
    } else if ms >= u64::MAX as f64 {
        u64::MAX
    } else {
        ms as u64
    }
}

/// One entry of `resources`: a template matched against resource identifiers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceTemplate {
    /// An exact identifier or a glob (`*` any run of characters, `?` one character).
    pub identifier_glob: String,
    /// Capacity of each matching resource (QPS, concurrent operations, cost units).
    pub capacity: f64,
    /// Allocation algorithm and lease timing.
    #[serde(default)]
    pub algorithm: AlgorithmConfig,
    /// Capacity a client may use when it cannot refresh; absent means capacity / clients.
    #[serde(default)]
    pub safe_capacity: Option<f64>,
    /// Free text for humans.
    #[serde(default)]
    pub description: Option<String>,
    /// Client behaviour when a refresh fails and the lease expired. Default `safe`.
    #[serde(default)]
    pub refresh_failure: RefreshFailureMode,
}

impl ResourceTemplate {
    /// A template with default algorithm settings.
    pub fn new(identifier_glob: impl Into<String>, capacity: f64, kind: AlgorithmKind) -> Self {
        Self {
            identifier_glob: identifier_glob.into(),
            capacity,
            algorithm: AlgorithmConfig {
                kind,
                ..AlgorithmConfig::default()
            },
            safe_capacity: None,
            description: None,
            refresh_failure: RefreshFailureMode::default(),
        }
    }

    /// Checks every field; `path` prefixes field names in errors (e.g. `resources[3]`).
    pub fn validate(&self, path: &str) -> Result<(), LeaseError> {
        let f = |name: &str| format!("{path}.{name}");
        if self.identifier_glob.is_empty() {
            return Err(LeaseError::config(
                f("identifier_glob"),
                "must not be empty",
            ));
        }
        let min_capacity_ok = if self.algorithm.kind == AlgorithmKind::None {
            self.capacity >= 0.0
        } else {
            self.capacity > 0.0
        };
        if !self.capacity.is_finite() || !min_capacity_ok {
            return Err(LeaseError::config(
                f("capacity"),
                format!("must be a finite positive number, got {}", self.capacity),
            ));
        }
        let a = &self.algorithm;
        if !a.lease_length.is_finite() || a.lease_length <= 0.0 {
            return Err(LeaseError::config(
                f("algorithm.lease_length"),
                format!(
                    "must be a positive number of seconds, got {}",
                    a.lease_length
                ),
            ));
        }
        if !a.refresh_interval.is_finite()
            || a.refresh_interval <= 0.0
            || a.refresh_interval > a.lease_length
        {
            return Err(LeaseError::config(
                f("algorithm.refresh_interval"),
                format!(
                    "must be positive seconds and at most lease_length ({}), got {}",
                    a.lease_length, a.refresh_interval
                ),
            ));
        }
        if let Some(l) = a.learning_mode_duration {
            if !l.is_finite() || l < 0.0 {
                return Err(LeaseError::config(
                    f("algorithm.learning_mode_duration"),
                    format!("must be zero or positive seconds, got {l}"),
                ));
            }
        }
        for (key, value) in &a.parameters {
            let known = a.kind == AlgorithmKind::ReservedPlusShared && key == "reserved";
            if !known {
                return Err(LeaseError::config(
                    f(&format!("algorithm.parameters.{key}")),
                    format!("unknown parameter for algorithm {}", a.kind.name()),
                ));
            }
            if !value.is_finite() || *value < 0.0 {
                return Err(LeaseError::config(
                    f(&format!("algorithm.parameters.{key}")),
                    format!("must be a finite number >= 0, got {value}"),
                ));
            }
        }
        if let Some(s) = self.safe_capacity {
            if !s.is_finite() || s < 0.0 || (a.kind != AlgorithmKind::None && s > self.capacity) {
                return Err(LeaseError::config(
                    f("safe_capacity"),
                    format!(
                        "must be between 0 and capacity ({}), got {s}",
                        self.capacity
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The lease part of the configuration: `resources = [...]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseConfig {
    /// Templates, tried exact match first, then globs in order.
    #[serde(default)]
    pub resources: Vec<ResourceTemplate>,
}

impl LeaseConfig {
    /// Parses TOML text (`[[resources]]` tables) and validates it.
    pub fn from_toml(text: &str) -> Result<Self, LeaseError> {
        let config: Self = toml::from_str(text).map_err(|e| LeaseError::Parse {
            format: "toml",
            message: e.to_string().trim().replace('\n', " "),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Parses JSON text (`{"resources": [...]}`) and validates it.
    pub fn from_json(text: &str) -> Result<Self, LeaseError> {
        let config: Self = serde_json::from_str(text).map_err(|e| LeaseError::Parse {
            format: "json",
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Validates a list of templates (also usable on the crate's own `Config::resources`).
    pub fn validate_templates(resources: &[ResourceTemplate]) -> Result<(), LeaseError> {
        for (i, t) in resources.iter().enumerate() {
            t.validate(&format!("resources[{i}]"))?;
        }
        let last = resources.len().saturating_sub(1);
        for (i, t) in resources.iter().enumerate() {
            if i < last && t.identifier_glob.chars().all(|c| c == '*') {
                return Err(LeaseError::config(
                    format!("resources[{i}].identifier_glob"),
                    "the catch-all `*` must be the last template (the ones after it are unreachable)",
                ));
            }
        }
        Ok(())
    }

    /// Checks every template; the error names the field, e.g. `resources[1].capacity`.
    pub fn validate(&self) -> Result<(), LeaseError> {
        Self::validate_templates(&self.resources)
    }
}
