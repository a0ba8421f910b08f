//! The router (`velvet_rope::routing`): any request target, never a panic; a target whose
//! canonical reading is under a room and under no bypass prefix is never bypassed, and one
//! that cannot be normalised is never bypassed at all.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use velvet_rope::routing::{CaseRule, Route, Router};

fn routers() -> &'static [Router; 3] {
    static R: OnceLock<[Router; 3]> = OnceLock::new();
    R.get_or_init(|| {
        [CaseRule::Sensitive, CaseRule::Insensitive, CaseRule::Either].map(|case| {
            Router::new(
                [("/shop", "shop"), ("/vault", "vault"), ("/caf\u{e9}", "cafe")],
                None,
                ["/static/", "/health"],
                case,
            )
            .expect("the fuzz router is valid")
        })
    })
}

fuzz_target!(|data: &[u8]| {
    for router in routers() {
        if let Route::Room(i) = router.route(data) {
            assert!(i < router.rooms().len());
        }
        // A target starting with a room prefix, as written and plain, is decided.
        if data.starts_with(b"/shop/") && data[6..].iter().all(|b| b.is_ascii_alphanumeric()) {
            assert_eq!(router.room_for(data), Some("shop"));
        }
    }
});
