//! Ticket decoding: any bytes in, a ticket or a refusal reason out, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use velvet_rope::ticket::{room_tag, Keyring};

fuzz_target!(|data: &[u8]| {
    let Ok(keys) = Keyring::new(&[(1, [7; 32]), (2, [9; 32])], Some(2)) else {
        return;
    };
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = keys.open(text, room_tag("shop"), 1_800_000_000, 30);
    }
});
