//! Origin commands: the origin ends a visitor's session with a `Velvet-Rope-Command: revoke`
//! response header (in rooms whose `enabled_origin_commands` say so).
//!
//! A revocation, given the visitor's newest ticket (the one the request's own decision issued,
//! or else the one it carried):
//! 1. records the ticket's id among the room's revocations (see `counters::revocations`),
//!    once per id however many requests, processes or hosts revoke it; from then on every
//!    ticket of that id is refused (reason `revoked`) and its holder arrives anew;
//! 2. counts the visitor out of the bucket its ticket says it was counted in (one less, as a
//!    move out would), so the next tick frees its seat; the revoking call runs that tick
//!    itself when no other process is ticking the room. When the visitor had moved on to a
//!    later bucket meanwhile (a newer ticket the origin did not see), the count comes off the
//!    earlier bucket: exact while both are in the session window, one too many after (the
//!    seat frees when the later bucket leaves). Never one too few. A ticket of another host
//!    or incarnation is counted out of the bucket these counters counted it in afresh, if
//!    they did;
//! 3. in a clustered room, queues the id for the cluster's store, whose other hosts refuse it
//!    from their next sync. A host that counted the visitor afresh (its ticket came from
//!    another host: a load balancer without affinity) counts it out of the bucket it counted
//!    it in, as in 2., when the id reaches it (found by two records of the count, so that a
//!    false match is all but impossible); a host that admitted the visitor itself, and whose
//!    ticket the visitor no longer holds, cannot tell the bucket from the id: that seat frees
//!    when its bucket leaves the session window. A holder of the revocation lock stopped and
//!    taken over while it records an id may leave that seat counted (never freed twice).
//!
//! What is refused and why: past the room's `max_revocations` (kept at once), past the
//! outbox of revocations not yet sent to an unreachable store, or when another process held
//! the revocation lock for 20 ms. A refused revocation changes nothing: the session goes on
//! and ends by itself. Counters made anew (a restart without a state file) forget
//! revocations, as they forget counts: their tickets are counted afresh, and refused no more.

use crate::admission::cluster;
use crate::admission::room::Room;
use crate::admission::snapshot::RoomView;
use crate::admission::tick::tick_room;
use crate::admission::Engine;
use crate::clock::{Millis, MAX_NOW_MS};
pub use crate::counters::revocations::RevokeRefused;
use crate::counters::revocations::Revoked;
use crate::counters::tick_block::Cell;
use crate::error::Result;
use crate::ticket::TicketState;

/// The most revocations one sync sends the cluster's store (the rest go with the next ones;
/// the store answers at most as many).
pub const REVOCATIONS_PER_SYNC: usize = 4096;

/// The bucket revocations are filed under: the first of the session window of the bucket the
/// room has opened (the room's clock, not the caller's: see `counters::revocations`).
fn filing_bucket(room: &Room) -> u64 {
    room.counters
        .tick_block()
        .get(Cell::Bucket)
        .saturating_sub(u64::from(room.longest_session))
}

/// Counts ticket `id` out of the bucket of the session window in which `room`'s counters
/// counted it afresh (a ticket of another host or incarnation), if they did: once per id,
/// which the caller makes sure of (the id was kept for the first time).
fn count_out_afresh(room: &Room, id: u64) {
    let buckets = room.counters.buckets();
    let opened = room.counters.tick_block().get(Cell::Bucket);
    let first = opened.saturating_sub(u64::from(room.longest_session));
    if let Some(b) = buckets.counted_afresh_surely(id, first, opened.saturating_add(1)) {
        buckets.count_out(b);
    }
}

/// Revocations a host sends the cluster's store (see [`Engine::cluster_revocations`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingRevocations {
    /// The outbox position after `ids`.
    pub upto: u64,
    /// Ticket ids revoked here and not yet sent, oldest first.
    pub ids: Vec<u64>,
    /// Where the host has read the store's log of revocations up to (`[0, 0]`: nothing).
    pub cursor: [u64; 2],
}

/// The response header an origin gives commands in.
pub const COMMAND_HEADER: &str = "Velvet-Rope-Command";

/// What a revocation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// The session is ended: its ticket is refused from now on and its seat freed.
    Revoked,
    /// It already was (another request, process or host revoked it).
    AlreadyRevoked,
    /// No valid admission ticket of the room to revoke (none, queued, expired, forged).
    NoSession,
    /// The room does not accept the command (`enabled_origin_commands`).
    NotEnabled,
    /// Refused: nothing changed (see [`RevokeRefused`]).
    Refused(RevokeRefused),
}

impl Revocation {
    /// A stable snake_case name, for logs and bindings.
    pub fn as_str(self) -> &'static str {
        match self {
            Revocation::Revoked => "revoked",
            Revocation::AlreadyRevoked => "already_revoked",
            Revocation::NoSession => "no_session",
            Revocation::NotEnabled => "not_enabled",
            Revocation::Refused(why) => match why {
                RevokeRefused::Full => "refused_full",
                RevokeRefused::Unsent => "refused_unsent",
                RevokeRefused::Busy => "refused_busy",
            },
        }
    }

    /// Whether the session is over (now or before): the response should clear the ticket.
    pub fn ended(self) -> bool {
        matches!(self, Revocation::Revoked | Revocation::AlreadyRevoked)
    }
}

/// Whether a response header value asks for a revocation: `revoke`, any case, surrounding
/// blanks ignored (several commands may be given, comma-separated).
pub fn is_revoke_command(value: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|c| c.trim_ascii().eq_ignore_ascii_case(b"revoke"))
}

impl Engine {
    /// Ends the session of the visitor holding `ticket` (a ticket value of `room`, as in its
    /// cookie) at `now`. The only error is an unknown room.
    pub fn revoke(&self, room: &str, ticket: &[u8], now: Millis) -> Result<Revocation> {
        let snap = self.current.load();
        let view = snap.room(room)?;
        Ok(self.revoke_in(view, Some(ticket), now.min(MAX_NOW_MS)))
    }

    /// Ends the session of a request's visitor, for a front door whose origin answered
    /// `Velvet-Rope-Command: revoke`: the ticket is the one the request's decision issued
    /// (`issued`, [`crate::Decision::ticket`]) if any, else the room's ticket in the request's
    /// `Cookie` header, else (rooms with `ticket_header`) its `Velvet-Rope-Ticket` header.
    pub fn revoke_request(
        &self,
        room: &[u8],
        cookie_header: Option<&[u8]>,
        ticket_header: Option<&[u8]>,
        issued: Option<&[u8]>,
        now: Millis,
    ) -> Result<Revocation> {
        let snap = self.current.load();
        let view = snap.room_bytes(room)?;
        let r = &view.room;
        let ticket = issued
            .or_else(|| cookie_header.and_then(|h| r.cookie_finder.find_ticket(h)))
            .or_else(|| {
                ticket_header
                    .filter(|_| r.cfg.ticket_header)
                    .map(<[u8]>::trim_ascii)
                    .filter(|t| !t.is_empty())
            });
        Ok(self.revoke_in(view, ticket, now.min(MAX_NOW_MS)))
    }

    /// The `Set-Cookie` value that clears `room`'s ticket cookie (for the response that
    /// carried a revocation).
    pub fn clear_cookie(&self, room: &str) -> Result<String> {
        let snap = self.current.load();
        let r = &snap.room(room)?.room;
        Ok(format!("{}=; Max-Age=0{}", r.cookie_name, r.cookie_attrs))
    }

    /// Revocations made at this host in `room` that the cluster's store has not been sent
    /// yet: the outbox position after them, the ids, and where the host has read the store's
    /// log up to. `None` for a room whose sessions the origin may not revoke. For
    /// `velvet-rope-cluster`'s sync.
    pub fn cluster_revocations(&self, room: &str) -> Result<Option<OutgoingRevocations>> {
        let snap = self.current.load();
        let r = &snap.room(room)?.room;
        Ok(r.counters.revocations().filter(|_| r.revocable).map(|rv| {
            let (upto, ids) = rv.unsent(REVOCATIONS_PER_SYNC);
            OutgoingRevocations {
                upto,
                ids,
                cursor: rv.cursor(),
            }
        }))
    }

    /// What the store answered a sync that carried `sent` (from
    /// [`Engine::cluster_revocations`]): the outbox up to `sent.upto` reached it, `received`
    /// are other hosts' revocations (refused here from now on), and `cursor` is where the
    /// host has now read its log up to (kept as it was if the received ones could not be
    /// recorded: they are read again). How many were new here.
    pub fn cluster_revocations_synced(
        &self,
        room: &str,
        sent: &OutgoingRevocations,
        received: &[u64],
        cursor: [u64; 2],
    ) -> Result<usize> {
        let snap = self.current.load();
        let r = &snap.room(room)?.room;
        let Some(rv) = r.counters.revocations() else {
            return Ok(0);
        };
        rv.mark_sent(sent.upto);
        // A visitor this host counted afresh is counted out of the bucket it was counted in
        // (once per id: only for an id kept here for the first time). The next tick frees
        // the seat.
        let count_out = |id: u64| count_out_afresh(r, id);
        // Received first: a process that stops here reads the same entries again.
        let Some(added) = rv.receive(received, filing_bucket(r), count_out) else {
            return Ok(0);
        };
        rv.set_cursor(cursor);
        Ok(added)
    }

    fn revoke_in(&self, view: &RoomView, ticket: Option<&[u8]>, now: Millis) -> Revocation {
        let room = &view.room;
        let Some(revocations) = room.counters.revocations() else {
            return Revocation::NotEnabled;
        };
        if !room.cfg.revocable() {
            // Counters laid out for a configuration that allowed it; this one does not (they
            // still refuse what was revoked).
            return Revocation::NotEnabled;
        }
        let snap = self.current.load();
        let now_secs = (now / 1000).min(u64::from(u32::MAX)) as u32;
        let Some(t) = ticket.and_then(|text| {
            snap.keyring
                .open_bytes(text, &room.id, now_secs, snap.skew_secs)
                .ok()
                .filter(|t| t.state == TicketState::Admitted)
        }) else {
            return Revocation::NoSession;
        };
        match revocations.revoke(t.id, filing_bucket(room), cluster::clustered(room)) {
            Ok(Revoked::Now) => {
                if t.incarnation == room.incarnation && t.counted != 0 {
                    room.counters.buckets().count_out(u64::from(t.counted));
                } else if t.incarnation != room.incarnation {
                    // Another host's ticket (or an older incarnation's): counted here afresh,
                    // if at all.
                    count_out_afresh(room, t.id);
                }
                // Free the seat now rather than at the next tick, if nobody is ticking.
                let _ = tick_room(room, now, None);
                Revocation::Revoked
            }
            Ok(Revoked::Already) => Revocation::AlreadyRevoked,
            Err(why) => Revocation::Refused(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoke_command_values() {
        for yes in [
            &b"revoke"[..],
            b" Revoke ",
            b"REVOKE",
            b"x, revoke",
            b"revoke,x",
        ] {
            assert!(is_revoke_command(yes), "{yes:?}");
        }
        for no in [&b""[..], b"revoked", b"re voke", b"x"] {
            assert!(!is_revoke_command(no), "{no:?}");
        }
    }
}
