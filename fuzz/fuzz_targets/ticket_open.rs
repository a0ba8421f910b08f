//! Ticket decoding: any bytes in, a ticket or a refusal reason out, never a panic; and a
//! valid ticket with any change made to it is refused (no forgery gets through).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use velvet_rope::ticket::{Keyring, RoomId, Ticket, TicketState};

const NOW: u32 = 1_800_000_000;

/// One keyring and room for the whole run, so that the thread's cache of opened tickets is in
/// play too.
static KEYS: OnceLock<Option<(Keyring, RoomId)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((keys, shop)) = KEYS
        .get_or_init(|| {
            let keys = Keyring::new(&[(1, [7; 32]), (2, [9; 32])], Some(2)).ok()?;
            Some((keys, RoomId::new("shop")))
        })
        .as_ref()
    else {
        return;
    };
    // Any bytes as a cookie value.
    let _ = keys.open_bytes(data, shop, NOW, 30);
    // A valid ticket with the input XOR-ed into it: deep into the checks and the AEAD.
    let ticket = Ticket {
        id: 42,
        state: TicketState::Admitted,
        arrival: 1,
        accepted_at: NOW - 10,
        counted: 2,
        last_checkin: NOW - 5,
        expires: NOW + 300,
        incarnation: 3,
    };
    let sealed = keys.seal(shop, &ticket);
    let mut text = sealed.as_str().as_bytes().to_vec();
    for (b, x) in text.iter_mut().zip(data) {
        *b ^= x;
    }
    let opened = keys.open_bytes(&text, shop, NOW, 30);
    if text != sealed.as_str().as_bytes() {
        assert!(opened.is_err(), "a changed ticket opened: {opened:?}");
    } else {
        assert_eq!(opened, Ok(ticket));
    }
});
