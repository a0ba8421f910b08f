//! The waiting page, rendered by core so that every front door serves the same one: HTML
//! from a Mustache template (the room's or an event's own, with Cloudflare's variables, or
//! the built-in pages in sixteen languages), or JSON for clients that ask for it.
//!
//! Templates are compiled once, when the configuration loads (a faulty one is refused with
//! its line and column); a request only renders. See [`variables`] for what a template sees,
//! [`Language`] for the languages and how a visitor's `Accept-Language` picks one.

mod builtin;
mod format;
mod language;
mod plural;
mod render;
mod room_pages;
mod template;
mod text;
mod translations;
pub mod variables;

pub use language::Language;
pub(crate) use render::render;
pub(crate) use room_pages::RoomPages;
pub use room_pages::MAX_TEMPLATE_BYTES;
pub use template::TemplateError;

/// A response to send instead of the origin's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type` header value.
    pub content_type: &'static str,
    /// Seconds for a `Refresh` header (queue pages).
    pub refresh_secs: Option<u64>,
    /// Seconds for a `Retry-After` header (reject pages).
    pub retry_after_secs: Option<u64>,
    /// The body.
    pub body: String,
}

impl Page {
    /// The response headers to send with this page, beside its body: `Content-Type`,
    /// `Cache-Control: no-store` (a waiting page must never be cached: it is one visitor's),
    /// `Refresh` (queue pages) or `Retry-After` (reject pages), and the decision's `Set-Cookie`
    /// when it has one. Every front door sends the same.
    pub fn headers(&self, set_cookie: Option<&str>) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("Content-Type", self.content_type.to_owned()),
            ("Cache-Control", "no-store".to_owned()),
        ];
        if let Some(r) = self.refresh_secs {
            h.push(("Refresh", r.to_string()));
        }
        if let Some(r) = self.retry_after_secs {
            h.push(("Retry-After", r.to_string()));
        }
        if let Some(c) = set_cookie {
            h.push(("Set-Cookie", c.to_owned()));
        }
        h
    }
}

/// What a page is rendered for, beside the decision: the request's headers that choose its
/// form and language, and the time (which picks the event in force and its countdown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageRequest<'a> {
    /// The request's `Accept` header: JSON is served when it prefers `application/json` and
    /// the room allows it.
    pub accept: Option<&'a str>,
    /// The request's `Accept-Language` header: in a room with `accept_language = true`, the
    /// built-in page in the language it prefers among the built-in ones (else the room's
    /// `default_template_language`).
    pub accept_language: Option<&'a str>,
    /// Milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// The ticket the request brought (in a room with `ticket_header = true`, the JSON
    /// response carries it back when the decision did not change it).
    pub ticket: Option<&'a str>,
}

/// Whether an `Accept` header prefers JSON over HTML.
pub fn wants_json(accept: Option<&str>) -> bool {
    prefers(accept, &["application/json"], &["text/html"])
}

/// Whether a status request's `Accept` header asks for the metrics' text rather than the
/// JSON status: it names `application/openmetrics-text` or `text/plain` (what Prometheus
/// sends) with a higher quality than `application/json`, or at the same quality before it.
/// Wildcards decide nothing; `q=0` refuses. A client that asks for JSON first (axios and
/// Angular send `application/json, text/plain, */*`) keeps the JSON.
pub fn wants_metrics(accept: Option<&str>) -> bool {
    prefers(
        accept,
        &["application/openmetrics-text", "text/plain"],
        &["application/json"],
    )
}

/// Whether `accept` prefers one of the media types `these` to all of `those`: the first 32
/// ranges are read (media types compare without case, parameters other than `q` ignored,
/// `q=0` refuses); the best-rated range naming each side counts, and at equal quality the one
/// named first wins. `false` when none of `these` is named acceptably.
fn prefers(accept: Option<&str>, these: &[&str], those: &[&str]) -> bool {
    let Some(accept) = accept else { return false };
    // The best (quality in thousandths, then earliest position) of each side.
    let mut mine: Option<(u16, usize)> = None;
    let mut theirs: Option<(u16, usize)> = None;
    for (i, item) in accept.split(',').take(32).enumerate() {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| {
                let p = p.trim();
                p.strip_prefix("q=").or_else(|| p.strip_prefix("Q="))
            })
            .next()
            .map_or(Some(1000), parse_q);
        let Some(q) = q else { continue };
        let slot = if these.iter().any(|m| media.eq_ignore_ascii_case(m)) {
            &mut mine
        } else if those.iter().any(|m| media.eq_ignore_ascii_case(m)) {
            &mut theirs
        } else {
            continue;
        };
        if slot.map_or(true, |(best, _)| q > best) {
            *slot = Some((q, i));
        }
    }
    match (mine, theirs) {
        (Some((0, _)), _) | (None, _) => false,
        (Some(_), None) | (Some(_), Some((0, _))) => true,
        // The higher quality wins; at equal quality, the one named first.
        (Some((mq, mi)), Some((tq, ti))) => mq > tq || (mq == tq && mi < ti),
    }
}

/// A q-value (`0` to `1`, at most three decimals) in thousandths; `None` if malformed.
fn parse_q(v: &str) -> Option<u16> {
    let v = v.trim();
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_value = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u16, |n, b| n * 10 + u16::from(b - b'0'));
    match whole {
        "0" => Some(frac_value),
        "1" if frac_value == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Decision, Outcome};
    use crate::config::{EventConfig, Instant, QueueingMethod, RoomConfig};

    const T0: u64 = 1_800_000_000_000;

    fn queued() -> Decision {
        Decision {
            outcome: Outcome::Queue,
            set_cookie: None,
            position: Some(42),
            estimated_wait_secs: Some(125),
            retry_after_secs: Some(20),
            queue_length: Some(100),
            ticket_error: None,
            ..Decision::admit_steady()
        }
    }

    fn rejected() -> Decision {
        Decision {
            outcome: Outcome::Reject,
            position: None,
            estimated_wait_secs: None,
            retry_after_secs: Some(30),
            queue_length: None,
            ..queued()
        }
    }

    fn req(accept_language: Option<&str>) -> PageRequest<'_> {
        PageRequest {
            accept: Some("text/html"),
            accept_language,
            now_ms: T0,
            ticket: None,
        }
    }

    fn page(room: &RoomConfig, d: &Decision, r: &PageRequest<'_>) -> Page {
        let pages = RoomPages::compile(room, "rooms[0]").unwrap();
        render(&pages, room, d, r).unwrap()
    }

    fn event(shuffle: bool) -> EventConfig {
        let at = |m: u64| Instant::from_millis(T0 + m * 60_000);
        EventConfig {
            name: "launch".into(),
            description: None,
            prequeue_start: Some(at(0)),
            event_start: at(45),
            event_end: at(120),
            shuffle_at_event_start: shuffle,
            suspended: false,
            total_active_users: None,
            new_users_per_minute: None,
            session_duration: None,
            disable_session_renewal: None,
            queueing_method: None,
            custom_page: None,
            custom_page_file: None,
        }
    }

    #[test]
    fn html_has_position_wait_and_refresh_and_escapes_the_title() {
        let mut room = RoomConfig::new("r", 1, 1);
        room.page_title = "<Sale & \"more\">".into();
        room.queueing_status_code = 202;
        let page = page(&room, &queued(), &req(None));
        assert_eq!(page.status, 202);
        assert_eq!(page.refresh_secs, Some(20));
        assert!(page.body.contains("id=\"position\">42<"), "{}", page.body);
        assert!(page.body.contains("data-secs=\"125\">2 minutes<"));
        assert!(page.body.contains("http-equiv=\"refresh\" content=\"20\""));
        assert!(page.body.contains("&lt;Sale &amp; &quot;more&quot;&gt;"));
        assert!(!page.body.contains("<Sale"));
        assert!(page.body.contains("<html lang=\"en-US\" dir=\"ltr\">"));
        assert!(page.body.contains("This page refreshes every 20 seconds."));
    }

    #[test]
    fn json_when_asked_and_enabled() {
        let room = RoomConfig::new("r", 1, 1);
        let r = PageRequest {
            accept: Some("application/json"),
            ..req(None)
        };
        let page = self::page(&room, &queued(), &r);
        assert_eq!(page.content_type, "application/json");
        let v: serde_json::Value = serde_json::from_str(&page.body).unwrap();
        assert_eq!(v["position"], 42);
        assert_eq!(v["outcome"], "queue");
        assert_eq!(v["refresh_after_secs"], 20);
        assert_eq!(v["event_state"], "none");
        assert_eq!(v["event_start"], serde_json::Value::Null);
        assert_eq!(v["prequeue"], false);
        assert_eq!(v["language"], "en-US");
        assert_eq!(v["cfWaitingRoom"]["waitTime"], 2);
        assert_eq!(v["cfWaitingRoom"]["waitTimeFormatted"], "2 minutes");
        assert_eq!(v["cfWaitingRoom"]["isFIFOQueue"], true);
        let mut off = room.clone();
        off.json_response_enabled = false;
        assert!(self::page(&off, &queued(), &r)
            .content_type
            .starts_with("text/html"));
        assert!(!wants_json(Some("text/html,application/json;q=0.9")));
        assert!(wants_json(Some("application/json, text/plain")));
        assert!(!wants_json(None));
    }

    /// Prometheus' `Accept` asks for the metrics; a client asking for JSON first, a browser,
    /// curl's `*/*` or a refused `text/plain` keep the JSON status.
    #[test]
    fn who_wants_the_metrics() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_metrics(Some(prometheus)));
        assert!(wants_metrics(Some("text/plain")));
        assert!(wants_metrics(Some(
            "text/plain;version=0.0.4, application/json;q=0.5"
        )));
        assert!(wants_metrics(Some("Application/OpenMetrics-Text")));
        for json in [
            "application/json, text/plain, */*",
            "*/*",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "text/plain;q=0",
            "text/plain;q=0.5, application/json",
            "text/plain;q=bogus",
            "",
        ] {
            assert!(!wants_metrics(Some(json)), "{json}");
        }
        assert!(!wants_metrics(None));
        // The best-rated range of a type counts, not only the first.
        assert!(wants_json(Some(
            "application/json;q=0, text/html;q=0.5, application/json"
        )));
    }

    #[test]
    fn json_of_a_prequeue() {
        let mut room = RoomConfig::new("r", 1, 1);
        room.events = vec![event(true)];
        let r = PageRequest {
            accept: Some("application/json"),
            now_ms: T0 + 15 * 60_000,
            ..req(None)
        };
        let v: serde_json::Value = serde_json::from_str(&page(&room, &queued(), &r).body).unwrap();
        assert_eq!(v["event_state"], "prequeue");
        assert_eq!(v["prequeue"], true);
        assert_eq!(v["shuffle_at_event_start"], true);
        assert_eq!(v["event_start"], "2027-01-15T08:45:00Z");
        assert_eq!(v["cfWaitingRoom"]["timeUntilEventStart"], 30);
        assert_eq!(v["cfWaitingRoom"]["isEventPrequeueing"], true);
    }

    #[test]
    fn headers_of_a_page() {
        let room = RoomConfig::new("r", 1, 1);
        let page = page(&room, &queued(), &PageRequest::default());
        let h = page.headers(Some("__vr_r=x; Path=/"));
        assert_eq!(
            h,
            vec![
                ("Content-Type", "text/html; charset=utf-8".to_owned()),
                ("Cache-Control", "no-store".to_owned()),
                ("Refresh", "20".to_owned()),
                ("Set-Cookie", "__vr_r=x; Path=/".to_owned()),
            ]
        );
    }

    #[test]
    fn admit_has_no_page() {
        let room = RoomConfig::new("r", 1, 1);
        let pages = RoomPages::compile(&room, "rooms[0]").unwrap();
        assert!(render(&pages, &room, &Decision::admit(None, None), &req(None)).is_none());
    }

    #[test]
    fn every_language_renders_the_queue_prequeue_and_reject_pages() {
        for l in Language::ALL {
            let mut room = RoomConfig::new("r", 1, 1);
            room.default_template_language = l.tag().into();
            room.events = vec![event(true)];
            let after = PageRequest {
                now_ms: T0 + 200 * 60_000,
                ..req(None)
            };
            let q = page(&room, &queued(), &after).body;
            let tag = format!("<html lang=\"{}\" dir=\"{}\">", l.tag(), l.dir());
            assert!(q.contains(&tag), "{}: {q}", l.tag());
            assert!(q.contains("id=\"position\""), "{}", l.tag());
            assert!(q.contains("id=\"wait\""), "{}", l.tag());
            assert!(q.contains("http-equiv=\"refresh\""), "{}", l.tag());
            let during = PageRequest {
                now_ms: T0 + 15 * 60_000,
                ..req(None)
            };
            let p = page(&room, &queued(), &during).body;
            assert!(
                p.contains("id=\"countdown\" data-secs=\"1800\""),
                "{}",
                l.tag()
            );
            assert!(!p.contains("id=\"position\""), "{}", l.tag());
            assert!(p.contains("http-equiv=\"refresh\""), "{}", l.tag());
            let r = page(&room, &rejected(), &after).body;
            assert!(r.contains("id=\"retry\" data-secs=\"30\""), "{}", l.tag());
            assert!(!r.contains("http-equiv=\"refresh\""), "{}", l.tag());
            // Three different pages, none left in English outside the English one.
            assert!(q != p && p != r);
            if l != Language::EnUs {
                for english in ["You are in line", "Estimated wait", "try again"] {
                    assert!(!q.contains(english) && !r.contains(english), "{}", l.tag());
                }
            }
        }
    }

    #[test]
    fn prequeue_page_counts_down_and_tells_of_the_draw() {
        let mut room = RoomConfig::new("r", 1, 1);
        room.events = vec![event(true)];
        let during = PageRequest {
            now_ms: T0 + 15 * 60_000,
            ..req(None)
        };
        let p = page(&room, &queued(), &during).body;
        assert!(p.contains("The event starts soon"), "{p}");
        assert!(p.contains(">30 minutes<"), "{p}");
        assert!(p.contains("drawn at random"), "{p}");
        room.events = vec![event(false)];
        let p = page(&room, &queued(), &during).body;
        assert!(!p.contains("drawn at random"), "{p}");
        room.default_template_language = "de".into();
        room.events = vec![event(true)];
        let p = page(&room, &queued(), &during).body;
        assert!(p.contains("Zeit bis zum Beginn: <span"), "{p}");
        assert!(p.contains(">30 Minuten<"), "{p}");
        assert!(p.contains("ausgelost"), "{p}");
    }

    #[test]
    fn right_to_left_languages() {
        let mut room = RoomConfig::new("r", 1, 1);
        for (tag, digits) in [("ar-EG", "٤٢"), ("he-IL", "42"), ("fa-IR", "۴۲")] {
            room.default_template_language = tag.into();
            let q = page(&room, &queued(), &req(None)).body;
            assert!(q.contains(&format!("lang=\"{tag}\" dir=\"rtl\"")), "{q}");
            assert!(q.contains(&format!("id=\"position\">{digits}<")), "{q}");
        }
        room.default_template_language = "ar-EG".into();
        let r = page(&room, &rejected(), &req(None)).body;
        assert!(r.contains("بعد ٣٠ ثانية"), "{r}");
    }

    #[test]
    fn accept_language_picks_the_page_when_the_room_allows_it() {
        let mut room = RoomConfig::new("r", 1, 1);
        let german = Some("de-AT,de;q=0.9,en;q=0.5");
        let q = page(&room, &queued(), &req(german)).body;
        assert!(
            q.contains("lang=\"en-US\""),
            "accept_language is off by default"
        );
        room.accept_language = true;
        let q = page(&room, &queued(), &req(german)).body;
        assert!(q.contains("lang=\"de-DE\""), "{q}");
        assert!(q.contains("Sie sind in der Warteschlange"), "{q}");
        let q = page(&room, &queued(), &req(Some("sv-SE"))).body;
        assert!(
            q.contains("lang=\"en-US\""),
            "no match: the room's language"
        );
        room.default_template_language = "fr-FR".into();
        let q = page(&room, &queued(), &req(Some("sv, *;q=0.1"))).body;
        assert!(q.contains("lang=\"fr-FR\""), "{q}");
        // The operator's title stays whatever the language.
        room.page_title = "Drop day".into();
        let q = page(&room, &queued(), &req(Some("ja"))).body;
        assert!(q.contains("<title>Drop day</title>") && q.contains("lang=\"ja-JP\""));
    }

    #[test]
    fn a_cloudflare_custom_page_renders_unchanged() {
        let mut room = RoomConfig::new("r", 1, 1);
        room.custom_page = Some(
            "<p>{{#waitTimeKnown}}{{waitTime}} mins ({{waitTimeHours}}h{{waitTimeHourMinutes}}) \
             {{waitTimeFormatted}}{{/waitTimeKnown}}{{^waitTimeKnown}}Queue all enabled\
             {{/waitTimeKnown}}{{#queueIsFull}}full{{/queueIsFull}} {{queuePosition}}/\
             {{queueLength}} {{{pageTitle}}} {{pageTitle}}</p>"
                .into(),
        );
        room.page_title = "<b>Sale</b>".into();
        let q = page(&room, &queued(), &req(None));
        assert_eq!(
            q.body,
            "<p>2 mins (0h2) 2 minutes 42/100 <b>Sale</b> &lt;b&gt;Sale&lt;/b&gt;</p>"
        );
        assert_eq!(
            q.refresh_secs,
            Some(20),
            "the Refresh header still refreshes it"
        );
        let unknown = Decision {
            estimated_wait_secs: None,
            ..queued()
        };
        assert_eq!(
            page(&room, &unknown, &req(None)).body,
            "<p>Queue all enabled 42/100 <b>Sale</b> &lt;b&gt;Sale&lt;/b&gt;</p>"
        );
        room.queueing_method = QueueingMethod::Reject;
        assert!(page(&room, &rejected(), &req(None)).body.contains("full"));
    }

    #[test]
    fn an_event_template_applies_through_its_prequeue_and_span() {
        let mut room = RoomConfig::new("r", 1, 1);
        room.custom_page = Some("room {{locale}}".into());
        let mut e = event(false);
        e.custom_page = Some("event {{#isEventPrequeueing}}in {{timeUntilEventStartFormatted}}{{/isEventPrequeueing}}{{^isEventPrequeueing}}ends in {{timeUntilEventEndFormatted}}{{/isEventPrequeueing}}".into());
        room.events = vec![e];
        room.default_template_language = "pl-PL".into();
        let at = |m: u64| PageRequest {
            now_ms: T0 + m * 60_000,
            ..req(None)
        };
        assert_eq!(page(&room, &queued(), &at(10)).body, "event in 35 minut");
        assert_eq!(
            page(&room, &queued(), &at(98)).body,
            "event ends in 22 minuty"
        );
        assert_eq!(page(&room, &queued(), &at(120)).body, "room pl-PL");
        room.events[0].custom_page = None;
        assert_eq!(page(&room, &queued(), &at(10)).body, "room pl-PL");
    }
}
