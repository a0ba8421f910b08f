//! One page for one decision: the event in force, the language, the variables, then JSON or
//! the template in force (the event's, the room's, or the built-in page).

use crate::admission::{Decision, Outcome};
use crate::config::{event_at, EventPhase, RoomConfig};
use crate::page::language::Language;
use crate::page::room_pages::RoomPages;
use crate::page::variables::{Cloudflare, Inputs, Variables};
use crate::page::{builtin, wants_json, Page, PageRequest};

/// The JSON body: the keys JSON pages always had, the event's, and Cloudflare's object.
#[derive(serde::Serialize)]
struct Json<'a> {
    room: &'a str,
    outcome: &'static str,
    position: Option<u64>,
    queue_length: Option<u64>,
    estimated_wait_secs: Option<u64>,
    refresh_after_secs: Option<u64>,
    retry_after_secs: Option<u64>,
    event_state: &'static str,
    event_start: Option<String>,
    event_end: Option<String>,
    prequeue: bool,
    shuffle_at_event_start: bool,
    language: &'static str,
    /// In a room taking tickets from a header: the ticket to send back in
    /// `Velvet-Rope-Ticket` (the one held, when this response does not change it).
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<&'a str>,
    #[serde(rename = "cfWaitingRoom")]
    cf_waiting_room: &'a Cloudflare,
}

/// A reject decision's JSON body: RFC 9457 problem details (`application/problem+json`).
#[derive(serde::Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: &'static str,
    room: &'a str,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_secs: Option<u64>,
}

/// The HTML body of a request a `reject` rule refused (not the waiting room's page: there is
/// nothing to wait for).
const REFUSED_HTML: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>403 Forbidden</title></head><body><h1>Forbidden</h1>\
<p>This request is not allowed in.</p></body></html>\n";

/// The HTML body of a request refused as one several rooms might govern.
const AMBIGUOUS_HTML: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>400 Bad Request</title></head><body><h1>Bad Request</h1>\
<p>This request's address can be read more than one way.</p></body></html>\n";

/// The page of a request refused as one several rooms might govern (see
/// [`Decision::ambiguous`]): 400, problem details for JSON clients.
fn ambiguity(cfg: &RoomConfig, request: &PageRequest<'_>) -> Page {
    let status = 400;
    if cfg.json_response_enabled && wants_json(request.accept) {
        let problem = Problem {
            kind: "urn:velvet-rope:problem:ambiguous-request",
            title: "The request's address reads more than one way",
            status,
            detail: "Its target or its hosts may be read as the address of more than one \
                     waiting room's resources: send the address in one form.",
            room: &cfg.name,
            outcome: "reject",
            retry_after_secs: None,
        };
        return Page {
            status,
            content_type: "application/problem+json",
            refresh_secs: None,
            retry_after_secs: None,
            body: serde_json::to_string(&problem).unwrap_or_default(),
        };
    }
    Page {
        status,
        content_type: "text/html; charset=utf-8",
        refresh_secs: None,
        retry_after_secs: None,
        body: AMBIGUOUS_HTML.to_owned(),
    }
}

/// The page for a reject decision: problem details for JSON clients, the room's page (a full
/// room) or a plain refusal (a `reject` rule, an ambiguous request) otherwise.
fn rejection(cfg: &RoomConfig, decision: &Decision, request: &PageRequest<'_>) -> Option<Page> {
    if decision.ambiguous {
        return Some(ambiguity(cfg, request));
    }
    let by_rule = decision.rejected_by_rule();
    let (status, retry) = if by_rule {
        (403, None)
    } else {
        (429, decision.retry_after_secs)
    };
    if cfg.json_response_enabled && wants_json(request.accept) {
        let problem = if by_rule {
            Problem {
                kind: "urn:velvet-rope:problem:refused-by-rule",
                title: "Refused by the waiting room's rules",
                status,
                detail: "A rule of this waiting room refuses this request.",
                room: &cfg.name,
                outcome: "reject",
                retry_after_secs: None,
            }
        } else {
            Problem {
                kind: "urn:velvet-rope:problem:room-full",
                title: "The waiting room is full",
                status,
                detail: "The site is at capacity and this waiting room does not queue: retry \
                         after the time given.",
                room: &cfg.name,
                outcome: "reject",
                retry_after_secs: retry,
            }
        };
        return Some(Page {
            status,
            content_type: "application/problem+json",
            refresh_secs: None,
            retry_after_secs: retry,
            body: serde_json::to_string(&problem).unwrap_or_default(),
        });
    }
    if by_rule {
        return Some(Page {
            status,
            content_type: "text/html; charset=utf-8",
            refresh_secs: None,
            retry_after_secs: None,
            body: REFUSED_HTML.to_owned(),
        });
    }
    None
}

/// The page for a queue or reject decision of room `cfg`; `None` for admit.
pub(crate) fn render(
    pages: &RoomPages,
    cfg: &RoomConfig,
    decision: &Decision,
    request: &PageRequest<'_>,
) -> Option<Page> {
    if decision.outcome == Outcome::Reject {
        if let Some(page) = rejection(cfg, decision, request) {
            return Some(page);
        }
    }
    let (status, refresh, retry) = match decision.outcome {
        Outcome::Admit => return None,
        Outcome::Queue => (
            cfg.queueing_status_code,
            Some(
                decision
                    .retry_after_secs
                    .unwrap_or(u64::from(cfg.refresh_interval)),
            ),
            None,
        ),
        Outcome::Reject => (429, None, decision.retry_after_secs),
    };
    let event = event_at(&cfg.events, request.now_ms);
    let language = if pages.accept_language {
        request
            .accept_language
            .and_then(|h| Language::negotiate(h, pages.language))
            .unwrap_or(pages.language)
    } else {
        pages.language
    };
    let vars = Variables::new(&Inputs {
        cfg,
        decision,
        language,
        event,
        now_ms: request.now_ms,
        refresh,
        title: pages.title.as_deref(),
    });
    if cfg.json_response_enabled && wants_json(request.accept) {
        let json = Json {
            room: &cfg.name,
            outcome: decision.outcome.as_str(),
            position: decision.position,
            queue_length: decision.queue_length,
            estimated_wait_secs: decision.estimated_wait_secs,
            refresh_after_secs: refresh,
            retry_after_secs: retry,
            event_state: match event.map(|e| e.phase) {
                None => "none",
                Some(EventPhase::Prequeue) => "prequeue",
                Some(EventPhase::Active) => "active",
            },
            event_start: event.map(|e| e.event.event_start.to_rfc3339()),
            event_end: event.map(|e| e.event.event_end.to_rfc3339()),
            prequeue: vars.cf.is_event_prequeueing,
            shuffle_at_event_start: vars.cf.shuffle_at_event_start,
            language: language.tag(),
            ticket: if cfg.ticket_header {
                decision.ticket().or(request.ticket)
            } else {
                None
            },
            cf_waiting_room: &vars.cf,
        };
        // Plain fields and strings: serialising cannot fail.
        let body = serde_json::to_string(&json).unwrap_or_default();
        return Some(Page {
            status,
            content_type: "application/json",
            refresh_secs: refresh,
            retry_after_secs: retry,
            body,
        });
    }
    let template = pages
        .template(event.map(|e| e.index))
        .unwrap_or_else(|| builtin::template(language));
    Some(Page {
        status,
        content_type: "text/html; charset=utf-8",
        refresh_secs: refresh,
        retry_after_secs: retry,
        body: template.render(&vars),
    })
}
