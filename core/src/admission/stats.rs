//! A room's figures as the last tick of any process sharing its counters published them.

use crate::admission::decision::{RoomStats, TicketRejections};
use crate::admission::room::Room;
use crate::counters::tick_block::Cell;
use crate::sync::Ordering;
use crate::ticket::TicketError;

/// The published figures of `room`, read now (not from this process's snapshot: another
/// process's tick may have published since).
pub(crate) fn room_stats(room: &Room) -> RoomStats {
    let tb = room.counters.tick_block();
    let r = room.counters.rejections();
    let get = |e: TicketError| r[e as usize].load(Ordering::Relaxed);
    RoomStats {
        active_users: tb.get(Cell::Active),
        admitted_this_minute: tb.get(Cell::AdmittedThisMinute),
        admitted_total: tb.get(Cell::AdmittedTotal),
        queue_length: tb.get(Cell::QueueLength),
        frontier: tb.get(Cell::Frontier),
        free_slots: tb.get(Cell::FreeSlots),
        admission_rate: f64::from_bits(tb.get(Cell::RateBits)),
        ticket_rejections: TicketRejections {
            bad_encoding: get(TicketError::BadEncoding),
            unknown_key: get(TicketError::UnknownKey),
            bad_tag: get(TicketError::BadTag),
            wrong_room: get(TicketError::WrongRoom),
            expired: get(TicketError::Expired),
            from_future: get(TicketError::FromFuture),
            revoked: get(TicketError::Revoked),
        },
        memory_bytes: room.counters.bytes(),
    }
}

/// `room`'s figures as the JSON object `stats_json` serves.
pub(crate) fn room_stats_json(room: &Room) -> serde_json::Value {
    let st = room_stats(room);
    let r = st.ticket_rejections;
    // The rules in force when the figures were published (the last advance's clock).
    let rules = room.rules_at(room.counters.tick_block().get(Cell::LastTick));
    let bucket = room.counters.tick_block().get(Cell::Bucket);
    let revocations = room.counters.revocations().map(|r| {
        let c = r.counts(bucket);
        serde_json::json!({
            "made": c.made,
            "received": c.received,
            "refused": c.refused,
            "kept": c.kept,
            "capacity": room.counters.layout().revocation_words,
        })
    });
    let would_have = room.would_have_counts();
    serde_json::json!({
        "active_users": st.active_users,
        "admitted_this_minute": st.admitted_this_minute,
        "admitted_total": st.admitted_total,
        "queue_length": st.queue_length,
        "frontier": st.frontier,
        "free_slots": st.free_slots,
        "admission_rate": st.admission_rate,
        "memory_bytes": st.memory_bytes,
        "total_active_users": rules.total_active_users,
        "new_users_per_minute": rules.new_users_per_minute,
        "suspended": rules.suspended,
        "queue_all": rules.queue_all,
        "event": rules.event.map(|i| room.cfg.events[i].name.as_str()),
        "event_phase": rules.event.map(|_| if rules.prequeue { "prequeue" } else { "active" }),
        "governing": crate::admission::governance::is_governing(room),
        "mode": match room.cfg.mode {
            crate::config::RoomMode::On => "on",
            crate::config::RoomMode::DryRun => "dry_run",
        },
        "would_have_queued": would_have[0],
        "would_have_rejected": would_have[1],
        "ambiguous_refused": room.ambiguous_count(),
        "rules": room.rule_tallies().map(|(name, action, matched)| serde_json::json!({
            "name": name,
            "action": action.as_str(),
            "matched": matched,
        })).collect::<Vec<_>>(),
        "ticket_rejections": r
            .by_reason()
            .into_iter()
            .map(|(reason, n)| (reason.to_owned(), serde_json::Value::from(n)))
            .collect::<serde_json::Map<_, _>>(),
        "revocations": revocations,
    })
}
