//! Configuration parsing (TOML and JSON): any text in, a configuration or a clear error out.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(cfg) = velvet_rope::Config::from_text(text) {
            // Whatever parses must validate again and build an engine, or say why not.
            let _ = cfg.validate();
            let _ = velvet_rope::Engine::new(cfg, 1_800_000_000_000);
        }
    }
});
