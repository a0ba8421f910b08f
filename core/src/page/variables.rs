//! The variables a page template sees: Cloudflare's (so that a Cloudflare custom page renders
//! unchanged) and velvet-rope's own.
//!
//! Cloudflare's, as its waiting-room API documents them (`custom_page_html` and the
//! `cfWaitingRoom` JSON object), with the values velvet-rope gives them:
//!
//! | variable | value |
//! | --- | --- |
//! | `inWaitingRoom` | always true |
//! | `waitTimeKnown` | queued, not in a pre-queue, and the engine has an estimate |
//! | `waitTime` | estimated wait in whole minutes (rounded, at least 1 when not 0); 0 when unknown |
//! | `waitTimeFormatted` | the same for people, in the page's language ("5 minutes"), or "unavailable" |
//! | `waitTimeHours`, `waitTimeHourMinutes` | `waitTime / 60` and `waitTime % 60` |
//! | `queueIsFull` | the visitor was rejected (a `reject` room at its limit) |
//! | `queueAll` | the room's `queue_all` |
//! | `lastUpdated` | when the page was rendered, RFC 3339 in UTC with milliseconds |
//! | `refreshIntervalSeconds` | seconds until the page refreshes itself; 0 on a reject page |
//! | `queueingMethod` | `fifo`, `random`, `passthrough` or `reject` (an event's, during its span) |
//! | `isFIFOQueue`, `isRandomQueue`, `isPassthroughQueue`, `isRejectQueue` | the same as booleans |
//! | `isEventActive` | an event is in force: its pre-queue or its span proper |
//! | `isEventPrequeueing` | the event in force is in its pre-queue |
//! | `timeUntilEventStart` | minutes until the event starts (rounded up) while pre-queueing, else 0 |
//! | `timeUntilEventStartFormatted` | the same for people, or "unavailable" |
//! | `timeUntilEventEnd` | minutes until the event in force ends (rounded up), else 0 |
//! | `timeUntilEventEndFormatted` | the same for people, or "unavailable" |
//! | `shuffleAtEventStart` | the event in force shuffles its pre-queue at its start |
//!
//! Left out: `waitTime25Percentile`, `waitTime50Percentile` and `waitTime75Percentile`
//! (the engine estimates one wait, not a distribution); they render empty and are false in
//! sections.
//!
//! velvet-rope's own: `queuePosition` and `queuePositionFormatted` (in the language's
//! digits), `queueLength` and `queueLengthFormatted`, `waitTimeSeconds`,
//! `retryAfterSeconds` and `retrySentence` (reject pages: "Please try again in 30
//! seconds."), `refreshSentence` (queue pages: "This page refreshes every 20 seconds."),
//! `timeUntilEventStartSeconds`, `eventStartTime` and `eventEndTime` (RFC 3339, empty when no
//! event is in force), `isQueued`, `isRejected`, `locale` (`de-DE`), `dir` (`ltr` or `rtl`),
//! `pageTitle` (the room's `page_title`, or the page's title in its language when that is
//! left at its default) and `roomName`. Names a template uses that are none of these render
//! empty and are false in sections.

use ramhorns::Content;
use serde::Serialize;

use crate::admission::{Decision, Outcome};
use crate::config::{EventAt, EventPhase, QueueingMethod, RoomConfig};
use crate::page::format::{counted, duration, minutes_rounded, number};
use crate::page::language::Language;
use crate::page::text::Text;
use crate::page::translations::{strings, Strings};

/// The `page_title` a room has unless its configuration sets one: the built-in pages then
/// show their own title, in their language.
pub(crate) const DEFAULT_TITLE: &str = "You are in line";

/// Cloudflare's variables (also the `cfWaitingRoom` object of JSON responses).
#[derive(Debug, Clone, Content, Serialize)]
#[ramhorns(rename_all = "camelCase")]
#[serde(rename_all = "camelCase")]
pub(crate) struct Cloudflare {
    pub(crate) in_waiting_room: bool,
    pub(crate) wait_time_known: bool,
    pub(crate) wait_time: u64,
    pub(crate) wait_time_formatted: Text,
    pub(crate) queue_is_full: bool,
    pub(crate) queue_all: bool,
    pub(crate) last_updated: Text,
    pub(crate) refresh_interval_seconds: u64,
    pub(crate) queueing_method: &'static str,
    #[ramhorns(rename = "isFIFOQueue")]
    #[serde(rename = "isFIFOQueue")]
    pub(crate) is_fifo_queue: bool,
    pub(crate) is_random_queue: bool,
    pub(crate) is_passthrough_queue: bool,
    pub(crate) is_reject_queue: bool,
    pub(crate) is_event_active: bool,
    pub(crate) is_event_prequeueing: bool,
    pub(crate) time_until_event_start: u64,
    pub(crate) time_until_event_start_formatted: Text,
    pub(crate) time_until_event_end: u64,
    pub(crate) time_until_event_end_formatted: Text,
    pub(crate) shuffle_at_event_start: bool,
}

/// Every variable of a page.
#[derive(Debug, Clone, Content)]
#[ramhorns(rename_all = "camelCase")]
pub(crate) struct Variables {
    #[ramhorns(flatten)]
    pub(crate) cf: Cloudflare,
    pub(crate) wait_time_hours: u64,
    pub(crate) wait_time_hour_minutes: u64,
    pub(crate) wait_time_seconds: Option<u64>,
    pub(crate) queue_position: Option<u64>,
    pub(crate) queue_position_formatted: Text,
    pub(crate) queue_length: Option<u64>,
    pub(crate) queue_length_formatted: Text,
    pub(crate) retry_after_seconds: Option<u64>,
    pub(crate) retry_sentence: Text,
    pub(crate) refresh_sentence: Text,
    pub(crate) time_until_event_start_seconds: Option<u64>,
    pub(crate) event_start_time: Text,
    pub(crate) event_end_time: Text,
    pub(crate) is_queued: bool,
    pub(crate) is_rejected: bool,
    pub(crate) locale: &'static str,
    pub(crate) dir: &'static str,
    pub(crate) page_title: Text,
    pub(crate) room_name: Text,
}

/// What a page is rendered from.
pub(crate) struct Inputs<'a> {
    pub(crate) cfg: &'a RoomConfig,
    pub(crate) decision: &'a Decision,
    pub(crate) language: Language,
    pub(crate) event: Option<EventAt<'a>>,
    pub(crate) now_ms: u64,
    /// Seconds until the page refreshes itself (queue pages).
    pub(crate) refresh: Option<u64>,
    /// The operator's title, or `None` for the page's own.
    pub(crate) title: Option<&'a str>,
}

impl Variables {
    /// The variables of one page.
    pub(crate) fn new(i: &Inputs<'_>) -> Variables {
        let s: &Strings = strings(i.language);
        let d = i.decision;
        let queued = d.outcome == Outcome::Queue;
        let rejected = d.outcome == Outcome::Reject;
        let prequeue = i.event.is_some_and(|e| e.phase == EventPhase::Prequeue);
        let method = i
            .event
            .and_then(|e| e.event.queueing_method)
            .unwrap_or(i.cfg.queueing_method);
        let wait_secs = d.estimated_wait_secs.filter(|_| queued && !prequeue);
        let wait_time = wait_secs.map_or(0, minutes_rounded);
        let ms_until = |t: u64| t.saturating_sub(i.now_ms);
        let start_ms = i
            .event
            .filter(|_| prequeue)
            .map(|e| ms_until(e.event.event_start.millis()));
        let end_ms = i.event.map(|e| ms_until(e.event.event_end.millis()));
        let minutes_up = |ms: u64| ms.div_ceil(60_000);
        let formatted = |ms: Option<u64>| {
            ms.map_or_else(
                || s.unavailable.to_owned(),
                |ms| duration(ms.div_ceil(1000), s),
            )
        };
        let retry = d.retry_after_secs.filter(|_| rejected);
        let title = i.title.map_or_else(
            || {
                if rejected {
                    s.title_reject
                } else if prequeue {
                    s.title_prequeue
                } else {
                    s.title_queue
                }
                .to_owned()
            },
            str::to_owned,
        );
        let cf = Cloudflare {
            in_waiting_room: true,
            wait_time_known: wait_secs.is_some(),
            wait_time,
            wait_time_formatted: wait_secs
                .map_or_else(|| s.unavailable.to_owned(), |w| duration(w, s))
                .into(),
            queue_is_full: rejected,
            queue_all: i.cfg.queue_all,
            last_updated: rfc3339_millis(i.now_ms).into(),
            refresh_interval_seconds: i.refresh.unwrap_or(0),
            queueing_method: method.as_str(),
            is_fifo_queue: method == QueueingMethod::Fifo,
            is_random_queue: method == QueueingMethod::Random,
            is_passthrough_queue: method == QueueingMethod::Passthrough,
            is_reject_queue: method == QueueingMethod::Reject,
            is_event_active: i.event.is_some(),
            is_event_prequeueing: prequeue,
            time_until_event_start: start_ms.map_or(0, minutes_up),
            time_until_event_start_formatted: formatted(start_ms).into(),
            time_until_event_end: end_ms.map_or(0, minutes_up),
            time_until_event_end_formatted: formatted(end_ms).into(),
            shuffle_at_event_start: i.event.is_some_and(|e| e.event.shuffle_at_event_start),
        };
        Variables {
            cf,
            wait_time_hours: wait_time / 60,
            wait_time_hour_minutes: wait_time % 60,
            wait_time_seconds: wait_secs,
            queue_position: d.position.filter(|_| queued),
            queue_position_formatted: d
                .position
                .filter(|_| queued)
                .map_or_else(String::new, |p| number(p, s.digits))
                .into(),
            queue_length: d.queue_length,
            queue_length_formatted: d
                .queue_length
                .map_or_else(String::new, |n| number(n, s.digits))
                .into(),
            retry_after_seconds: retry,
            retry_sentence: retry
                .map_or_else(String::new, |r| counted(s.retry, s, r))
                .into(),
            refresh_sentence: i
                .refresh
                .filter(|_| queued)
                .map_or_else(String::new, |r| counted(s.refresh, s, r))
                .into(),
            time_until_event_start_seconds: start_ms.map(|ms| ms.div_ceil(1000)),
            event_start_time: i
                .event
                .map_or_else(String::new, |e| e.event.event_start.to_rfc3339())
                .into(),
            event_end_time: i
                .event
                .map_or_else(String::new, |e| e.event.event_end.to_rfc3339())
                .into(),
            is_queued: queued,
            is_rejected: rejected,
            locale: i.language.tag(),
            dir: i.language.dir(),
            page_title: title.into(),
            room_name: i.cfg.name.as_str().into(),
        }
    }
}

/// `2026-12-01T10:00:00.000Z`: an instant in UTC with milliseconds, as Cloudflare's
/// `lastUpdated`.
fn rfc3339_millis(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{event_at, EventConfig, Instant};

    const T0: u64 = 1_800_000_000_000;

    fn queued(wait: Option<u64>) -> Decision {
        Decision {
            outcome: Outcome::Queue,
            set_cookie: None,
            position: Some(42),
            estimated_wait_secs: wait,
            retry_after_secs: Some(20),
            queue_length: Some(100),
            ticket_error: None,
            ..Decision::admit_steady()
        }
    }

    fn event(prequeue_min: u64, start_min: u64, end_min: u64, shuffle: bool) -> EventConfig {
        let at = |m: u64| Instant::from_millis(T0 + m * 60_000);
        EventConfig {
            name: "drop".into(),
            description: None,
            prequeue_start: Some(at(prequeue_min)),
            event_start: at(start_min),
            event_end: at(end_min),
            shuffle_at_event_start: shuffle,
            suspended: false,
            total_active_users: None,
            new_users_per_minute: None,
            session_duration: None,
            disable_session_renewal: None,
            queueing_method: Some(QueueingMethod::Random),
            custom_page: None,
            custom_page_file: None,
        }
    }

    fn vars(cfg: &RoomConfig, d: &Decision, now: u64, l: Language) -> Variables {
        Variables::new(&Inputs {
            cfg,
            decision: d,
            language: l,
            event: event_at(&cfg.events, now),
            now_ms: now,
            refresh: d.retry_after_secs.filter(|_| d.outcome == Outcome::Queue),
            title: None,
        })
    }

    #[test]
    fn a_queued_visitor_outside_events() {
        let cfg = RoomConfig::new("shop", 1, 1);
        let v = vars(&cfg, &queued(Some(3 * 3600 + 25 * 60)), T0, Language::EnUs);
        assert!(v.cf.in_waiting_room && v.cf.wait_time_known && !v.cf.queue_is_full);
        assert_eq!(v.cf.wait_time, 205);
        assert_eq!((v.wait_time_hours, v.wait_time_hour_minutes), (3, 25));
        assert_eq!(v.cf.wait_time_formatted, "3 hours and 25 minutes");
        assert_eq!(v.cf.refresh_interval_seconds, 20);
        assert_eq!(v.cf.queueing_method, "fifo");
        assert!(v.cf.is_fifo_queue && !v.cf.is_random_queue);
        assert!(!v.cf.is_event_active && !v.cf.is_event_prequeueing);
        assert_eq!(v.cf.time_until_event_start_formatted, "unavailable");
        assert_eq!(v.cf.last_updated, "2027-01-15T08:00:00.000Z");
        assert_eq!(v.queue_position, Some(42));
        assert_eq!(v.refresh_sentence, "This page refreshes every 20 seconds.");
        assert_eq!(v.page_title, "You are in line");
        assert!(v.is_queued && !v.is_rejected && v.retry_sentence.is_empty());
        let unknown = vars(&cfg, &queued(None), T0, Language::DeDe);
        assert!(!unknown.cf.wait_time_known);
        assert_eq!(unknown.cf.wait_time, 0);
        assert_eq!(unknown.cf.wait_time_formatted, "nicht verfügbar");
    }

    #[test]
    fn prequeue_and_active_event() {
        let mut cfg = RoomConfig::new("shop", 1, 1);
        cfg.events = vec![event(0, 90, 150, true)];
        let now = T0 + 30 * 60_000 + 1;
        let v = vars(&cfg, &queued(Some(60)), now, Language::EnUs);
        assert!(v.cf.is_event_active && v.cf.is_event_prequeueing && v.cf.shuffle_at_event_start);
        assert!(!v.cf.wait_time_known, "no estimate before the event starts");
        assert_eq!(v.cf.time_until_event_start, 60);
        assert_eq!(v.cf.time_until_event_start_formatted, "1 hour");
        assert_eq!(v.time_until_event_start_seconds, Some(3600));
        assert_eq!(v.cf.time_until_event_end, 120);
        assert_eq!(v.cf.queueing_method, "random");
        assert_eq!(v.page_title, "The event starts soon");
        assert_eq!(v.event_start_time, "2027-01-15T09:30:00Z");
        let active = vars(&cfg, &queued(Some(60)), T0 + 100 * 60_000, Language::EnUs);
        assert!(active.cf.is_event_active && !active.cf.is_event_prequeueing);
        assert_eq!(active.cf.time_until_event_start, 0);
        assert_eq!(active.cf.time_until_event_end, 50);
        assert_eq!(active.cf.time_until_event_end_formatted, "50 minutes");
        assert!(active.cf.wait_time_known);
        let after = vars(&cfg, &queued(Some(60)), T0 + 150 * 60_000, Language::EnUs);
        assert!(!after.cf.is_event_active && after.event_start_time.is_empty());
    }

    #[test]
    fn a_rejected_visitor() {
        let mut cfg = RoomConfig::new("shop", 1, 1);
        cfg.queueing_method = QueueingMethod::Reject;
        let d = Decision {
            outcome: Outcome::Reject,
            retry_after_secs: Some(30),
            ..queued(None)
        };
        let v = vars(&cfg, &d, T0, Language::RuRu);
        assert!(v.cf.queue_is_full && v.cf.is_reject_queue && v.is_rejected);
        assert_eq!(v.cf.refresh_interval_seconds, 0);
        assert_eq!(v.retry_sentence, "Повторите попытку через 30 секунд.");
        assert_eq!(v.page_title, "Сайт перегружен");
        assert_eq!(v.queue_position, None);
    }

    #[test]
    fn the_default_title_is_the_configuration_default() {
        assert_eq!(RoomConfig::new("r", 1, 1).page_title, DEFAULT_TITLE);
    }
}
