//! The waiting page, rendered by core so that every front door serves the same one: HTML with
//! position, estimated wait and auto-refresh, or JSON for clients that ask for it.

use crate::admission::decision::{Decision, Outcome};
use crate::config::RoomConfig;

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

/// Whether an `Accept` header prefers JSON over HTML.
pub fn wants_json(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let json = accept.find("application/json");
    let html = accept.find("text/html");
    match (json, html) {
        (Some(j), Some(h)) => j < h,
        (Some(_), None) => true,
        _ => false,
    }
}

fn escape_html(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

fn human_wait(secs: u64) -> String {
    match secs {
        0..=59 => "less than a minute".into(),
        60..=119 => "about 1 minute".into(),
        s if s < 3600 => format!("about {} minutes", s / 60),
        s => format!("about {} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// Renders the page for a queue or reject decision; `None` for admit.
pub(crate) fn render(room: &RoomConfig, decision: &Decision, accept: Option<&str>) -> Option<Page> {
    let (status, refresh, retry) = match decision.outcome {
        Outcome::Admit => return None,
        Outcome::Queue => (room.queueing_status_code, decision.retry_after_secs, None),
        Outcome::Reject => (429, None, decision.retry_after_secs),
    };
    if room.json_response_enabled && wants_json(accept) {
        let body = serde_json::json!({
            "room": room.name,
            "outcome": decision.outcome.as_str(),
            "position": decision.position,
            "queue_length": decision.queue_length,
            "estimated_wait_secs": decision.estimated_wait_secs,
            "refresh_after_secs": refresh,
            "retry_after_secs": retry,
        })
        .to_string();
        return Some(Page {
            status,
            content_type: "application/json",
            refresh_secs: refresh,
            retry_after_secs: retry,
            body,
        });
    }
    let mut body = String::with_capacity(1400);
    body.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    body.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    if let Some(r) = refresh {
        body.push_str(&format!("<meta http-equiv=\"refresh\" content=\"{r}\">"));
    }
    body.push_str("<title>");
    escape_html(&room.page_title, &mut body);
    body.push_str("</title><style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}h1{font-size:1.6rem}.n{font-size:2.4rem;font-weight:700}</style></head><body><h1>");
    escape_html(&room.page_title, &mut body);
    body.push_str("</h1>");
    match decision.outcome {
        Outcome::Queue => {
            body.push_str("<p>This site is busy. You are in line and will be let in automatically; please keep this page open.</p>");
            if let Some(p) = decision.position {
                body.push_str(&format!(
                    "<p>Your place in line: <span class=\"n\" id=\"position\">{p}</span></p>"
                ));
            }
            if let Some(w) = decision.estimated_wait_secs {
                body.push_str(&format!(
                    "<p>Estimated wait: <span id=\"wait\" data-secs=\"{w}\">{}</span></p>",
                    human_wait(w)
                ));
            }
            if let Some(r) = refresh {
                body.push_str(&format!(
                    "<p><small>This page refreshes every {r} seconds.</small></p>"
                ));
            }
        }
        _ => {
            body.push_str("<p>This site is at capacity. Please try again later.</p>");
            if let Some(r) = retry {
                body.push_str(&format!(
                    "<p>Try again in <span id=\"retry\">{r}</span> seconds.</p>"
                ));
            }
        }
    }
    body.push_str("</body></html>\n");
    Some(Page {
        status,
        content_type: "text/html; charset=utf-8",
        refresh_secs: refresh,
        retry_after_secs: retry,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued() -> Decision {
        Decision {
            outcome: Outcome::Queue,
            set_cookie: None,
            position: Some(42),
            estimated_wait_secs: Some(125),
            retry_after_secs: Some(20),
            queue_length: Some(100),
            ticket_error: None,
        }
    }

    #[test]
    fn html_has_position_wait_and_refresh_and_escapes_the_title() {
        let mut room = RoomConfig::new("r", 1, 1);
        room.page_title = "<Sale & \"more\">".into();
        room.queueing_status_code = 202;
        let page = render(&room, &queued(), Some("text/html")).unwrap();
        assert_eq!(page.status, 202);
        assert_eq!(page.refresh_secs, Some(20));
        assert!(page.body.contains(">42<"));
        assert!(page.body.contains("about 2 minutes"));
        assert!(page.body.contains("http-equiv=\"refresh\" content=\"20\""));
        assert!(page.body.contains("&lt;Sale &amp; &quot;more&quot;&gt;"));
        assert!(!page.body.contains("<Sale"));
    }

    #[test]
    fn json_when_asked_and_enabled() {
        let room = RoomConfig::new("r", 1, 1);
        let page = render(&room, &queued(), Some("application/json")).unwrap();
        assert_eq!(page.content_type, "application/json");
        let v: serde_json::Value = serde_json::from_str(&page.body).unwrap();
        assert_eq!(v["position"], 42);
        assert_eq!(v["outcome"], "queue");
        let mut off = room.clone();
        off.json_response_enabled = false;
        assert!(render(&off, &queued(), Some("application/json"))
            .unwrap()
            .content_type
            .starts_with("text/html"));
        assert!(!wants_json(Some("text/html,application/json;q=0.9")));
        assert!(wants_json(Some("application/json, text/plain")));
        assert!(!wants_json(None));
    }

    #[test]
    fn headers_of_a_page() {
        let room = RoomConfig::new("r", 1, 1);
        let page = render(&room, &queued(), None).unwrap();
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
        assert!(render(&room, &Decision::admit(None, None), None).is_none());
    }
}
