//! What `admit` answers, and what `stats` reports. Outcomes are values, not errors.

use crate::ticket::TicketError;

/// The three answers to "may this visitor reach the origin now?".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Outcome {
    /// Pass the request to the origin.
    Admit = 0,
    /// Serve the waiting page.
    Queue = 1,
    /// Refuse with a retry-after (rooms with `queueing_method = "reject"`).
    Reject = 2,
}

impl Outcome {
    /// `admit`, `queue` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Admit => "admit",
            Outcome::Queue => "queue",
            Outcome::Reject => "reject",
        }
    }
}

/// The engine's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Admit, queue or reject.
    pub outcome: Outcome,
    /// A complete `Set-Cookie` header value when the ticket is new or changed.
    pub set_cookie: Option<String>,
    /// Queue: live waiters ahead of this visitor, plus one.
    pub position: Option<u64>,
    /// Queue: estimated seconds until admission, from the recent admission rate.
    pub estimated_wait_secs: Option<u64>,
    /// Queue: seconds until the waiting page should refresh. Reject: seconds until a retry.
    pub retry_after_secs: Option<u64>,
    /// Queue: live waiters in the room.
    pub queue_length: Option<u64>,
    /// Why an incoming ticket was refused (the visitor was then treated as new).
    pub ticket_error: Option<TicketError>,
    /// The index of the room's rule that matched the request (see
    /// [`Engine::decide_request`](crate::Engine::decide_request)), if any.
    pub rule: Option<u16>,
    /// A `bypass` rule matched: the request passes untouched, undecided and uncounted.
    pub bypassed: bool,
    /// In a `dry_run` room or under a `count_only` rule: what the outcome would have been
    /// (queue or reject); the request passes (`outcome` is admit).
    pub would_have: Option<Outcome>,
    /// The room takes tickets from the `Velvet-Rope-Ticket` header as well: a new ticket goes
    /// back in that response header too, beside `Set-Cookie`.
    pub ticket_header: bool,
    /// Refused (`outcome` reject, a 400 page) because the request might belong to two rooms
    /// or more that would each decide it: its target reads several ways (escapes, dot
    /// segments, case) into different rooms, or it names two hosts that disagree, a host
    /// that is not one, or none. Deciding it in either room would let a visitor choose the
    /// room by how it writes the request (see
    /// [`Engine::decide_request`](crate::Engine::decide_request)).
    pub ambiguous: bool,
}

impl Decision {
    /// The steady answer: admit, with nothing to set (a visitor already counted this minute).
    pub fn admit_steady() -> Self {
        Self::admit(None, None)
    }

    pub(crate) fn admit(set_cookie: Option<String>, ticket_error: Option<TicketError>) -> Self {
        Self {
            outcome: Outcome::Admit,
            set_cookie,
            position: None,
            estimated_wait_secs: None,
            retry_after_secs: None,
            queue_length: None,
            ticket_error,
            rule: None,
            bypassed: false,
            would_have: None,
            ticket_header: false,
            ambiguous: false,
        }
    }

    /// A request refused as one that might belong to several deciding rooms (see
    /// [`Decision::ambiguous`]).
    pub(crate) fn refused_as_ambiguous() -> Self {
        Self {
            outcome: Outcome::Reject,
            ambiguous: true,
            ..Self::admit(None, None)
        }
    }

    /// The ticket a new or changed ticket cookie holds (the value of `set_cookie`): what a
    /// client without cookies sends back in the `Velvet-Rope-Ticket` header.
    pub fn ticket(&self) -> Option<&str> {
        let c = self.set_cookie.as_deref()?;
        let value = &c[c.find('=')? + 1..];
        Some(value.split(';').next().unwrap_or(value))
    }

    /// Whether a rule refused the request outright (a `reject` rule, not a full room).
    pub fn rejected_by_rule(&self) -> bool {
        self.outcome == Outcome::Reject
            && self.rule.is_some()
            && self.retry_after_secs.is_none()
            && !self.ambiguous
    }
}

/// Ticket refusals counted by reason since the room was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TicketRejections {
    /// [`TicketError::BadEncoding`].
    pub bad_encoding: u64,
    /// [`TicketError::UnknownKey`].
    pub unknown_key: u64,
    /// [`TicketError::BadTag`].
    pub bad_tag: u64,
    /// [`TicketError::WrongRoom`].
    pub wrong_room: u64,
    /// [`TicketError::Expired`].
    pub expired: u64,
    /// [`TicketError::FromFuture`].
    pub from_future: u64,
    /// [`TicketError::Revoked`].
    pub revoked: u64,
}

impl TicketRejections {
    /// Each reason's name (as stats and metrics label it) and count, in a fixed order.
    pub fn by_reason(&self) -> [(&'static str, u64); 7] {
        [
            ("bad_encoding", self.bad_encoding),
            ("unknown_key", self.unknown_key),
            ("bad_tag", self.bad_tag),
            ("wrong_room", self.wrong_room),
            ("expired", self.expired),
            ("from_future", self.from_future),
            ("revoked", self.revoked),
        ]
    }
}

/// A room's state as the last tick (of any process sharing its counters) published it, plus
/// live rejection counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoomStats {
    /// Visitors counted in the session window (each admitted visitor once, in the bucket of
    /// its last check-in).
    pub active_users: u64,
    /// Visitors admitted for the first time in the current minute (bucket), exact.
    pub admitted_this_minute: u64,
    /// Visitors admitted for the first time since the room was created, exact.
    pub admitted_total: u64,
    /// Live waiters.
    pub queue_length: u64,
    /// The arrival bucket up to which waiters may enter (FIFO rooms).
    pub frontier: u64,
    /// Slots free for new visitors until the next tick.
    pub free_slots: u64,
    /// Recent admission rate, visitors per second.
    pub admission_rate: f64,
    /// Ticket refusals by reason.
    pub ticket_rejections: TicketRejections,
    /// Bytes of counters the room holds (fixed by its configuration).
    pub memory_bytes: usize,
}
