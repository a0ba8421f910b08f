//! Ticket decoding: any bytes in, a ticket or a refusal reason out, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use velvet_rope::ticket::{Keyring, RoomId};

fuzz_target!(|data: &[u8]| {
    let Ok(keys) = Keyring::new(&[(1, [7; 32]), (2, [9; 32])], Some(2)) else {
        return;
    };
    let shop = RoomId::new("shop");
    let _ = keys.open_bytes(data, &shop, 1_800_000_000, 30);
});
