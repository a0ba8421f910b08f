//! The request path: any Cookie header through `Engine::admit`, never a panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use velvet_rope::Engine;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::from_text(
            "[[rooms]]\nname = \"r\"\ntotal_active_users = 1000\nnew_users_per_minute = 1000\n",
            1_800_000_000_000,
        )
        .expect("the fuzz configuration is valid")
    })
}

fuzz_target!(|data: &[u8]| {
    let header = String::from_utf8_lossy(data);
    let _ = engine().admit("r", Some(&header), 1_800_000_000_001);
});
