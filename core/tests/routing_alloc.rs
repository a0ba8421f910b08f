//! The router's common case allocates nothing: a plain target (`/` then letters, digits and
//! punctuation, no `%`, `\`, `#`, `;`, empty or dot segment), whatever its query. Counted with a
//! global allocator of this test binary's own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use velvet_rope::routing::{CaseRule, Route, Router};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn plain_targets_allocate_nothing() {
    for case in [CaseRule::Sensitive, CaseRule::Insensitive] {
        let router = Router::new(
            [("/shop", "shop"), ("/vault", "vault")],
            Some("site"),
            ["/static/", "/health"],
            case,
        )
        .unwrap();
        let targets: [&[u8]; 5] = [
            b"/shop/item",
            b"/static/app.css",
            b"/about/us.html?q=/../%zz",
            b"/SHOP/Item-42_x~y",
            b"/",
        ];
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let mut rooms = 0;
        for _ in 0..100 {
            for t in targets {
                if matches!(router.route(t), Route::Room(_)) {
                    rooms += 1;
                }
            }
        }
        assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), before, "{case:?}");
        assert!(rooms > 0);
    }
}
