//! A whole request decided: its room (by the rooms' routes, or named by the server), the
//! room's rules, its ticket (cookie or header), then the decision, carried out or (a dry
//! run, a `count_only` rule) only counted.

use std::net::IpAddr;

use crate::admission::decision::{Decision, Outcome};
use crate::admission::snapshot::{RoomView, Snapshot};
use crate::admission::Engine;
use crate::clock::{Millis, MAX_NOW_MS};
use crate::config::{RoomMode, RuleAction};
use crate::error::Result;
use crate::request::{Prepared, Request};

/// Longest room name (see `RoomConfig::name`).
const MAX_NAME: usize = 64;

/// A room's name, held inline: a routed decision names its room without allocating.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RoomLabel {
    len: u8,
    bytes: [u8; MAX_NAME],
}

impl RoomLabel {
    fn new(name: &str) -> Self {
        let mut bytes = [0; MAX_NAME];
        let n = name.len().min(MAX_NAME);
        bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        Self {
            len: n as u8,
            bytes,
        }
    }

    /// The room's name.
    pub fn as_str(&self) -> &str {
        // Room names are validated ASCII of at most 64 bytes, copied whole.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for RoomLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// A request the rooms' routes placed in a room, and the room's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// The room.
    pub room: RoomLabel,
    /// Its decision (a `bypass` rule's: admit, `bypassed`).
    pub decision: Decision,
}

impl Engine {
    /// Decides `request` in the room its routes place it in (the most specific host, then
    /// the longest path prefix, over every room's `routes`); `None` when no route takes it
    /// (it passes untouched). A request that might belong to several rooms is decided in
    /// the one of them that would not let it pass, or refused
    /// ([`Decision::ambiguous`]) when two would decide it. See [`crate::request`].
    pub fn decide_request(&self, request: &Request<'_>, now: Millis) -> Option<Routed> {
        let snap = self.current.load();
        let prepared = Prepared::new(request);
        let (index, refused) = snap.routed_room(&prepared, now)?;
        let view = snap.rooms.get(index)?;
        let decision = if refused {
            view.room.count_ambiguous();
            Decision::refused_as_ambiguous()
        } else {
            snap.decide_prepared(view, &prepared, now)
        };
        Some(Routed {
            room: RoomLabel::new(&view.room.cfg.name),
            decision,
        })
    }

    /// The room [`Engine::decide_request`] would decide `request` in, deciding nothing;
    /// `None` when no route takes it, or when it would be refused as one several rooms
    /// might govern. For a front door that must know whether a room decided the request
    /// already (a middleware of a named room ahead of one of the routes).
    pub fn room_for_request(&self, request: &Request<'_>, now: Millis) -> Option<RoomLabel> {
        let snap = self.current.load();
        let (index, refused) = snap.routed_room(&Prepared::new(request), now)?;
        let view = snap.rooms.get(index).filter(|_| !refused)?;
        Some(RoomLabel::new(&view.room.cfg.name))
    }

    /// Decides `request` in `room` (named by the server: an nginx location, an Envoy route,
    /// a middleware's `room=`), its rules first. The only error is an unknown room.
    pub fn decide_request_in(
        &self,
        room: &[u8],
        request: &Request<'_>,
        now: Millis,
    ) -> Result<Decision> {
        let snap = self.current.load();
        let view = snap.room_bytes(room)?;
        Ok(snap.decide_prepared(view, &Prepared::new(request), now))
    }

    /// Whether deciding in `room` reads more of a request than its `Cookie` header: the room
    /// has rules, or takes tickets from a header (a server that has the `Cookie` header at
    /// hand may call [`Engine::admit_header_bytes`] for the others).
    pub fn room_reads_request(&self, room: &[u8]) -> Result<bool> {
        let snap = self.current.load();
        Ok(reads_request(snap.room_bytes(room)?))
    }

    /// [`Engine::admit_header_bytes`] in a room that reads only the `Cookie` header; `None`,
    /// having decided nothing, in a room that reads more of a request (see
    /// [`Engine::room_reads_request`]; decide it with [`Engine::decide_request_in`]). Both
    /// questions from one snapshot and one lookup of the room, for a front door that asks
    /// them of every request.
    pub fn admit_plain_header_bytes(
        &self,
        room: &[u8],
        cookie_header: Option<&[u8]>,
        now: Millis,
    ) -> Result<Option<Decision>> {
        let snap = self.current.load();
        let view = snap.room_bytes(room)?;
        if reads_request(view) {
            return Ok(None);
        }
        Ok(Some(snap.decide_cookie(view, cookie_header, now)))
    }

    /// Whether any room accepts origin commands (`enabled_origin_commands`): a front door
    /// whose every response would otherwise be looked at for `Velvet-Rope-Command` may skip
    /// that (and its cost) when none does.
    pub fn accepts_origin_commands(&self) -> bool {
        self.current.load().accepts_origin_commands
    }

    /// Whether any room has routes (else [`Engine::decide_request`] places nothing).
    pub fn has_routes(&self) -> bool {
        !self.current.load().front.routes.is_empty()
    }

    /// The client of a request that came from `peer` with these `X-Forwarded-For` values,
    /// believing only `settings.trusted_proxies` (see [`crate::request::client_address`]).
    pub fn client_address<'h>(
        &self,
        peer: IpAddr,
        forwarded: impl DoubleEndedIterator<Item = &'h [u8]>,
    ) -> Option<IpAddr> {
        crate::request::client_address(peer, forwarded, &self.current.load().front.trusted)
    }
}

/// Which room decides a request that might belong to several (see `Snapshot::strictest`).
enum Chosen {
    /// This one.
    Room(usize),
    /// None: two rooms or more would decide it; it is refused.
    Ambiguous,
}

impl Snapshot {
    /// The configuration's index of the room the routes decide `request` in, and whether it
    /// is refused there as one several rooms might govern; `None` when no route takes it.
    #[inline]
    fn routed_room(&self, request: &Prepared<'_, '_>, now: Millis) -> Option<(usize, bool)> {
        let routes = &self.front.routes;
        let primary = routes.room_for(request)?;
        if !routes.may_be_ambiguous(request) {
            return Some((primary, false));
        }
        Some(match self.strictest(primary, request, now) {
            Chosen::Room(i) => (i, false),
            Chosen::Ambiguous => (primary, true),
        })
    }

    /// Of the rooms a request that reads more than one way might belong to (see
    /// `RouteTable::any_candidate`), the one that decides it. `primary` (the routes' choice)
    /// when no other room might govern it or every one would let it pass (a `bypass` or
    /// `count_only` rule it matches, a dry run, a passthrough or suspended room); the only
    /// one that would not let it pass, when there is one; else none: two rooms would each
    /// decide it, and deciding it in either would let a visitor choose which by how it
    /// writes the request (the emptier, or the one whose ticket it holds). A request passes
    /// only when every room it might be in lets it; otherwise a reading, a host or a case
    /// could take it past the room whose resource the application serves for it.
    #[cold]
    #[inline(never)]
    fn strictest(&self, primary: usize, request: &Prepared<'_, '_>, now: Millis) -> Chosen {
        // The other rooms, each once (by index: a bit each, inline for 256 rooms): one walk
        // over the readings, then each room's rules read once at most.
        let words = self.rooms.len().div_ceil(64);
        let mut inline = [0u64; 4];
        let mut spilled = Vec::new();
        let others: &mut [u64] = if words <= inline.len() {
            &mut inline[..words]
        } else {
            spilled.resize(words, 0);
            &mut spilled
        };
        let mut any = false;
        self.front.routes.any_candidate(request, |i| {
            if i != primary && i / 64 < others.len() {
                others[i / 64] |= 1 << (i % 64);
                any = true;
            }
            false
        });
        // The common case (a path with upper case under `either`, an escape): every reading
        // in the one room. No rule is read.
        if !any {
            return Chosen::Room(primary);
        }
        let decides = |i: usize| {
            self.rooms
                .get(i)
                .is_some_and(|v| !lets_pass(v, request, now))
        };
        let mut deciding = decides(primary).then_some(primary);
        for (w, &word) in others.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if decides(i) {
                    if deciding.is_some() {
                        return Chosen::Ambiguous;
                    }
                    deciding = Some(i);
                }
            }
        }
        Chosen::Room(deciding.unwrap_or(primary))
    }

    /// The decision, carried out, on a request to `view`'s room read by its `Cookie` header
    /// alone (`Engine::admit*`: no rules).
    #[inline(always)]
    pub(crate) fn decide_cookie(
        &self,
        view: &RoomView,
        cookie_header: Option<&[u8]>,
        now: Millis,
    ) -> Decision {
        let ticket = cookie_header.and_then(|h| view.room.cookie_finder.find_ticket(h));
        carried_out(&view.room, self.decide(view, ticket, now.min(MAX_NOW_MS)))
    }

    /// Decides a prepared request in `view`'s room.
    pub(crate) fn decide_prepared(
        &self,
        view: &RoomView,
        request: &Prepared<'_, '_>,
        now: Millis,
    ) -> Decision {
        let room = &view.room;
        let mut matched = None;
        // The ticket, when the rules' pass over the `Cookie` header found it (or its absence).
        let mut read = None;
        if !room.rules.is_empty() {
            if let Some((i, rule)) = room.rules.first_match(request, &mut read) {
                room.count_rule(i);
                let index = u16::try_from(i).ok();
                match rule.action {
                    RuleAction::Bypass => {
                        let mut d = Decision::admit(None, None);
                        d.rule = index;
                        d.bypassed = true;
                        return d;
                    }
                    RuleAction::Reject => {
                        let mut d = Decision::admit(None, None);
                        d.outcome = Outcome::Reject;
                        d.rule = index;
                        // A dry run refuses nobody: it counts what it would have refused.
                        return carried_out(room, d);
                    }
                    RuleAction::Queue | RuleAction::CountOnly => {
                        matched = Some((index, rule.action))
                    }
                }
            }
        }
        let req = request.request;
        let mut ticket = match read {
            Some(rest) => rest.map(crate::admission::cookie_finder::ticket_value),
            None => room
                .cookie_finder
                .find_ticket_in_lines(req.cookie_headers()),
        };
        if ticket.is_none() && room.cfg.ticket_header {
            ticket = req
                .header(crate::request::TICKET_HEADER)
                .map(<[u8]>::trim_ascii)
                .filter(|t| !t.is_empty());
        }
        let mut d = self.decide(view, ticket, now.min(MAX_NOW_MS));
        d.ticket_header = room.cfg.ticket_header;
        let count_only = room.cfg.mode == RoomMode::DryRun;
        if let Some((index, action)) = matched {
            d.rule = index;
            if action == RuleAction::CountOnly && d.outcome != Outcome::Admit {
                return would_have(room, d);
            }
        }
        if count_only && d.outcome != Outcome::Admit {
            return would_have(room, d);
        }
        d
    }
}

/// Whether `view`'s room lets `request` pass at `now` whatever its ticket, as
/// `decide_prepared` would decide it (its first matching rule first): a `bypass` or
/// `count_only` rule; a `reject` rule only in a dry run; otherwise a dry run, a room that
/// passes everyone, or a suspended one. (Rules read, not counted.)
fn lets_pass(view: &RoomView, request: &Prepared<'_, '_>, now: Millis) -> bool {
    #[cfg(all(test, not(velvet_rope_loom)))]
    tests::ASKED.with(|n| n.set(n.get() + 1));
    let room = &view.room;
    let dry_run = room.cfg.mode == RoomMode::DryRun;
    let mut read = None;
    let action = if room.rules.is_empty() {
        None
    } else {
        room.rules
            .first_match(request, &mut read)
            .map(|(_, rule)| rule.action)
    };
    match action {
        Some(RuleAction::Bypass | RuleAction::CountOnly) => true,
        Some(RuleAction::Reject) => dry_run,
        Some(RuleAction::Queue) | None => {
            let rules = view.rules_at(now.min(MAX_NOW_MS));
            dry_run
                || rules.suspended
                || rules.queueing_method == crate::config::QueueingMethod::Passthrough
        }
    }
}

/// Whether deciding in `view`'s room reads more of a request than its `Cookie` header: it
/// has rules, or takes tickets from a header.
fn reads_request(view: &RoomView) -> bool {
    !view.room.cfg.rules.is_empty() || view.room.cfg.ticket_header
}

/// `d` as the room carries it out: in a dry run, a queue or reject decision passed instead
/// and counted (for the callers that read no rules: `Engine::admit*`).
#[inline]
pub(crate) fn carried_out(room: &crate::admission::room::Room, d: Decision) -> Decision {
    if d.outcome != Outcome::Admit && room.cfg.mode == RoomMode::DryRun {
        return would_have(room, d);
    }
    d
}

/// `d` passed instead of carried out, and counted as what it would have been.
#[cold]
fn would_have(room: &crate::admission::room::Room, mut d: Decision) -> Decision {
    room.count_would_have(d.outcome);
    d.would_have = Some(d.outcome);
    d.outcome = Outcome::Admit;
    d
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use std::cell::Cell;

    use crate::request::Request;
    use crate::Engine;

    thread_local! {
        /// `lets_pass` calls on this thread.
        pub(super) static ASKED: Cell<usize> = const { Cell::new(0) };
    }

    /// Found by the review of the refusal: a room that lets a request pass had its rules
    /// read again for every reading, host and fold that named it (a target of many escapes
    /// under a dry-run room of 20 path rules: 177 ms). Each room is asked once.
    #[test]
    fn each_room_is_asked_once_whatever_the_readings() {
        const NOW: u64 = 1_800_000_000_000;
        let mut rules = String::new();
        for i in 0..20 {
            rules.push_str(&format!(
                "[[rooms.rules]]\naction = \"count_only\"\npaths = [\"/p{i}/\"]\n"
            ));
        }
        let engine = Engine::from_text(
            &format!(
                "[[rooms]]\nname = \"a\"\ntotal_active_users = 5\nnew_users_per_minute = 5\n\
                 routes = [{{ path = \"/a/\" }}]\n\
                 [[rooms]]\nname = \"b\"\ntotal_active_users = 5\nnew_users_per_minute = 5\n\
                 mode = \"dry_run\"\nroutes = [{{ path = \"/\" }}]\n{rules}"
            ),
            NOW,
        )
        .unwrap();
        let target = format!("/x/..%2fa/{}", "%41".repeat(200));
        let r = Request {
            method: b"GET",
            target: target.as_bytes(),
            host: None,
            headers: &[],
            client: None,
        };
        ASKED.with(|n| n.set(0));
        let routed = engine.decide_request(&r, NOW).unwrap();
        assert_eq!(routed.room.as_str(), "a");
        assert_eq!(ASKED.with(Cell::get), 2, "each of the two rooms once");
    }
}
