//! A room's scheduled events (Cloudflare's waiting-room events): a span of time with its own
//! limits and page, an optional pre-queue before it, and a shuffle of the pre-queue at its
//! start.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::config::room::QueueingMethod;
use crate::error::{Error, Result};

/// An instant, written in the configuration as an RFC 3339 date and time with its offset
/// (`2026-12-01T10:00:00Z`, `2026-12-01T11:00:00+01:00`), as a string or a TOML date-time.
/// Held as milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    ms: u64,
}

impl Instant {
    /// The instant `ms` milliseconds after the Unix epoch.
    pub fn from_millis(ms: u64) -> Self {
        Self { ms }
    }

    /// Milliseconds since the Unix epoch.
    pub fn millis(self) -> u64 {
        self.ms
    }

    /// The latest instant a configuration may name: the end of year 9999 (RFC 3339's four
    /// digits of year).
    pub const LATEST: Instant = Instant {
        ms: 253_402_300_799_999,
    };

    /// Parses an RFC 3339 date and time (an offset is required; instants before 1970 are
    /// refused).
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let t = time::OffsetDateTime::parse(
            text.trim(),
            &time::format_description::well_known::Rfc3339,
        )
        .map_err(|e| format!("`{text}` is not an RFC 3339 date and time with an offset ({e})"))?;
        let ms = t.unix_timestamp_nanos() / 1_000_000;
        u64::try_from(ms)
            .map(Self::from_millis)
            .map_err(|_| format!("`{text}` is before 1970"))
    }

    /// The RFC 3339 form, in UTC (instants past [`Instant::LATEST`], which no valid
    /// configuration holds, are written as it).
    pub fn to_rfc3339(self) -> String {
        let ms = self.ms.min(Self::LATEST.ms);
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| "9999-12-31T23:59:59.999Z".to_owned())
    }
}

impl Serialize for Instant {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Instant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Toml(toml::value::Datetime),
        }
        let text = match Written::deserialize(d)? {
            Written::Text(s) => s,
            Written::Toml(t) => t.to_string(),
        };
        Instant::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One scheduled event of a room (`[[rooms.events]]`). Fields left out keep the room's own
/// setting for the event's span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventConfig {
    /// The event's name (shown in errors and stats): 1-64 printable characters.
    pub name: String,
    /// What the event is, for people (not shown to visitors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When the pre-queue opens: from then until `event_start` every visitor waits on the
    /// pre-queue page. None: no pre-queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prequeue_start: Option<Instant>,
    /// When the event starts: its settings take over.
    pub event_start: Instant,
    /// When the event ends: the room's own settings return.
    pub event_end: Instant,
    /// Admit the pre-queued visitors in a uniformly random order at `event_start` (then FIFO
    /// for those who arrive later), rather than in their order of arrival.
    #[serde(default)]
    pub shuffle_at_event_start: bool,
    /// The event is switched off: the room keeps its own settings through its span.
    #[serde(default)]
    pub suspended: bool,
    /// `total_active_users` during the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_active_users: Option<u64>,
    /// `new_users_per_minute` during the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_users_per_minute: Option<u64>,
    /// `session_duration` during the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_duration: Option<u32>,
    /// `disable_session_renewal` during the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_session_renewal: Option<bool>,
    /// `queueing_method` during the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_method: Option<QueueingMethod>,
    /// The page template during the event and its pre-queue (see the room's `custom_page`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_page: Option<String>,
    /// A file holding the page template during the event and its pre-queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_page_file: Option<String>,
}

impl EventConfig {
    /// When the event's span begins: its pre-queue's start, or its start.
    pub fn opens(&self) -> Instant {
        self.prequeue_start.unwrap_or(self.event_start)
    }

    /// Checks one event on its own (`at` names it in errors).
    pub(crate) fn validate(&self, at: &str) -> Result<()> {
        let f = |name: &str| format!("{at}.{name}");
        let invisible = |c: char| {
            c.is_control()
                || matches!(
                    c,
                    '\u{200b}'..='\u{200f}'
                        | '\u{202a}'..='\u{202e}'
                        | '\u{2066}'..='\u{2069}'
                        | '\u{feff}'
                )
        };
        let chars = self.name.chars().count();
        if chars == 0 || chars > 64 || self.name.chars().any(invisible) {
            return Err(Error::invalid(
                f("name"),
                "must be 1-64 characters, none of them control, zero-width or bidirectional \
                 formatting characters",
            ));
        }
        for (name, instant) in [
            ("prequeue_start", self.prequeue_start),
            ("event_start", Some(self.event_start)),
            ("event_end", Some(self.event_end)),
        ] {
            if instant.is_some_and(|i| i > Instant::LATEST) {
                return Err(Error::invalid(f(name), "must be in year 9999 or before"));
            }
        }
        if self.event_end <= self.event_start {
            return Err(Error::invalid(
                f("event_end"),
                format!(
                    "must be after event_start ({} is not after {})",
                    self.event_end.to_rfc3339(),
                    self.event_start.to_rfc3339()
                ),
            ));
        }
        if let Some(p) = self.prequeue_start {
            if p >= self.event_start {
                return Err(Error::invalid(
                    f("prequeue_start"),
                    "must be before event_start",
                ));
            }
        }
        if self.custom_page.is_some() && self.custom_page_file.is_some() {
            return Err(Error::invalid(
                f("custom_page_file"),
                "give `custom_page` or `custom_page_file`, not both",
            ));
        }
        Ok(())
    }
}

/// Where an instant falls in a room's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventPhase {
    /// In the event's pre-queue: everyone waits for `event_start`.
    Prequeue,
    /// Between `event_start` and `event_end`.
    Active,
}

/// The event of a room in force at an instant, and which part of it.
#[derive(Debug, Clone, Copy)]
pub struct EventAt<'a> {
    /// Its index in the room's `events`.
    pub index: usize,
    /// The event.
    pub event: &'a EventConfig,
    /// Pre-queue or active.
    pub phase: EventPhase,
}

/// The event in force at `now_ms` (ms since the Unix epoch) among `events`, if any; a
/// suspended event is never in force.
pub fn event_at(events: &[EventConfig], now_ms: u64) -> Option<EventAt<'_>> {
    events.iter().enumerate().find_map(|(index, event)| {
        if event.suspended || now_ms < event.opens().millis() || now_ms >= event.event_end.millis()
        {
            return None;
        }
        let phase = if now_ms < event.event_start.millis() {
            EventPhase::Prequeue
        } else {
            EventPhase::Active
        };
        Some(EventAt {
            index,
            event,
            phase,
        })
    })
}

/// Every instant (ms) at which `events` switch the room's settings: each event's pre-queue
/// start, start and end. Suspended events never switch anything.
pub(crate) fn switches(events: &[EventConfig]) -> impl Iterator<Item = u64> + '_ {
    events
        .iter()
        .filter(|e| !e.suspended)
        .flat_map(|e| {
            [
                e.prequeue_start.map(Instant::millis),
                Some(e.event_start.millis()),
                Some(e.event_end.millis()),
            ]
        })
        .flatten()
}

/// The first instant after `now_ms` at which `events` switch the room's settings (an event's
/// pre-queue start, start or end), if any. Suspended events never switch anything.
pub fn next_switch(events: &[EventConfig], now_ms: u64) -> Option<u64> {
    switches(events).filter(|&t| t > now_ms).min()
}
