//! A shared region (an nginx zone, a state file) is bytes handed in: any bytes in place of a
//! region laid out for a small room are attached or refused, never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use velvet_rope::{Config, Engine};

const CONFIG: &str = "[[rooms]]\nname = \"r\"\ntotal_active_users = 20\nnew_users_per_minute = 100\n\
                      session_duration = 2\nmax_live_waiters = 1024\nqueue_buckets = 16\n";

fuzz_target!(|data: &[u8]| {
    let Ok(cfg) = Config::from_toml(CONFIG) else {
        return;
    };
    let size = Engine::shared_region_size(&cfg);
    let mut words = vec![0u64; size.div_ceil(8) + 16];
    let raw = words.as_mut_ptr() as *mut u8;
    let pad = raw.align_offset(128);
    // SAFETY: `pad < 128` and the vector has 128 spare bytes.
    let base = unsafe { raw.add(pad) };
    let n = data.len().min(size);
    // SAFETY: `n <= size` bytes fit from the aligned base.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, n) };
    let now = 1_800_000_000_000;
    // SAFETY: `words` outlives the engine and nothing else touches it meanwhile.
    if let Ok(e) = unsafe { Engine::new_shared(cfg, now, base, size) } {
        let _ = e.admit("r", None, now + 1);
        e.tick(now + 1000);
    }
});
