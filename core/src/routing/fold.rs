//! Case folding for prefix comparison.
//!
//! A case-insensitive framework compares paths folded, but not all fold alike: Express builds
//! its route patterns as case-insensitive regular expressions, find-my-way (Fastify) lowercases
//! the decoded path with JavaScript's `toLowerCase` (full Unicode: the Kelvin sign `K` becomes
//! `k`). A bypass prefix matched under a fold the framework does not use could pass a request
//! the framework routes elsewhere, so the router tries each fold in turn (see `Router::route`)
//! and a request is decided when any of them puts it in a room.

use super::CaseRule;

/// A way of comparing a path with a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fold {
    /// Byte for byte (case-sensitive routing).
    Exact,
    /// ASCII letters folded; other bytes compared as they are.
    Ascii,
    /// Unicode lowercase (JavaScript's `toLowerCase`, Rust's `to_lowercase`).
    Lower,
    /// Unicode uppercase then lowercase (`ſ` and `s`, `ς` and `σ` fold together).
    Full,
}

impl Fold {
    /// The folds a case rule compares under.
    pub(super) fn all(case: CaseRule) -> &'static [Fold] {
        match case {
            CaseRule::Sensitive => &[Fold::Exact],
            CaseRule::Insensitive => &[Fold::Ascii, Fold::Lower, Fold::Full],
            // The ASCII fold first: it finds every room prefix the exact comparison finds, or a
            // longer one (the longest wins), unless it bypasses the path, when the exact
            // comparison still decides it.
            CaseRule::Either => &[Fold::Ascii, Fold::Exact, Fold::Lower, Fold::Full],
        }
    }

    /// How many of a case rule's first folds answer for a plain path against ASCII prefixes
    /// (the others read ASCII as the last of these does).
    pub(super) fn plain(case: CaseRule) -> usize {
        match case {
            CaseRule::Sensitive | CaseRule::Insensitive => 1,
            CaseRule::Either => 2,
        }
    }

    /// `prefix` folded, as it is compared.
    pub(super) fn prefix(self, prefix: &str) -> Box<[u8]> {
        match self {
            Fold::Exact => prefix.as_bytes().into(),
            Fold::Ascii => prefix.to_ascii_lowercase().into_bytes().into(),
            Fold::Lower | Fold::Full => {
                let mut out = String::with_capacity(prefix.len());
                for c in prefix.chars() {
                    self.push_char(c, &mut out);
                }
                out.into_bytes().into()
            }
        }
    }

    /// Appends `c` folded to `out`.
    fn push_char(self, c: char, out: &mut String) {
        match self {
            Fold::Exact => out.push(c),
            Fold::Ascii => out.push(c.to_ascii_lowercase()),
            Fold::Lower => out.extend(c.to_lowercase()),
            Fold::Full => {
                for u in c.to_uppercase() {
                    out.extend(u.to_lowercase());
                }
            }
        }
    }

    /// Whether `path`, folded, starts with `folded` (a prefix folded by [`Fold::prefix`]);
    /// with `bare`, also whether it is `folded` without its trailing `/` (see
    /// [`exact_starts_with`]). A path that is not UTF-8 is compared with ASCII letters folded
    /// only.
    pub(super) fn starts_with(self, path: &[u8], folded: &[u8], bare: bool) -> bool {
        match self {
            Fold::Exact => exact_starts_with(path, folded, bare),
            Fold::Ascii => ascii_starts_with(path, folded, bare),
            Fold::Lower | Fold::Full => {
                // The common case, an ASCII path and prefix, needs no decoding.
                let head = &path[..path.len().min(folded.len())];
                if head.is_ascii() && folded.is_ascii() {
                    return ascii_starts_with(path, folded, bare);
                }
                match std::str::from_utf8(path) {
                    Ok(text) => self.chars_start_with(text, folded, bare),
                    Err(_) => ascii_starts_with(path, folded, bare),
                }
            }
        }
    }

    /// [`Fold::starts_with`] for UTF-8 text: folds one character at a time into one small buffer.
    fn chars_start_with(self, text: &str, folded: &[u8], bare: bool) -> bool {
        let mut at = 0;
        let mut buf = String::with_capacity(16);
        for c in text.chars() {
            if at >= folded.len() {
                return true;
            }
            buf.clear();
            self.push_char(c, &mut buf);
            let piece = buf.as_bytes();
            let rest = &folded[at..];
            if rest.len() <= piece.len() {
                // The prefix ends within this character's folding.
                return piece.starts_with(rest);
            }
            if !rest.starts_with(piece) {
                return false;
            }
            at += piece.len();
        }
        at >= folded.len() || (bare && &folded[at..] == b"/")
    }
}

/// Whether `path` starts with `prefix`; with `bare`, also whether it is `prefix` without its
/// trailing `/` (`/shop` for `/shop/`: Express without strict routing and Fastify with
/// `ignoreTrailingSlash` route it to `/shop/`'s route). Prefixes are short and most differ
/// from a path within a few bytes: a loop that stops at the first difference beats a call to
/// `memcmp` (measured: a third of a plain route).
#[inline]
pub(super) fn exact_starts_with(path: &[u8], prefix: &[u8], bare: bool) -> bool {
    let n = if path.len() >= prefix.len() {
        prefix.len()
    } else if bare && path.len() + 1 == prefix.len() && prefix.last() == Some(&b'/') {
        path.len()
    } else {
        return false;
    };
    path.iter().zip(&prefix[..n]).all(|(a, b)| a == b)
}

/// [`exact_starts_with`] with ASCII letters of `path` folded (`folded` is folded already).
#[inline]
pub(super) fn ascii_starts_with(path: &[u8], folded: &[u8], bare: bool) -> bool {
    let n = if path.len() >= folded.len() {
        folded.len()
    } else if bare && path.len() + 1 == folded.len() && folded.last() == Some(&b'/') {
        path.len()
    } else {
        return false;
    };
    path.iter()
        .zip(&folded[..n])
        .all(|(a, b)| a.to_ascii_lowercase() == *b)
}

/// Whether `bytes` hold an ASCII upper-case letter: 16 bytes at a time (SSE2, enabled on
/// every x86_64 target; a tail as the last 16 bytes, overlapping), shorter inputs one byte
/// at a time. (No `#[target_feature]`: see `reading::classes_by_block`.)
#[inline]
pub(crate) fn has_ascii_upper(bytes: &[u8]) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if bytes.len() >= 16 {
        use std::arch::x86_64::{
            _mm_add_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let block = |at: usize| {
            // `A..=Z` moved to the bottom of the signed range (-128..=-103): one compare.
            // SAFETY: callers pass `at + 16 <= bytes.len()`: the 16 bytes loaded lie in
            // `bytes`; `_mm_loadu_si128` needs no alignment; this is compiled only with SSE2.
            unsafe {
                let v = _mm_loadu_si128(bytes.as_ptr().add(at).cast());
                let shifted = _mm_add_epi8(v, _mm_set1_epi8(0x3f)); // 0x80 - b'A'
                _mm_movemask_epi8(_mm_cmplt_epi8(shifted, _mm_set1_epi8(-128 + 26))) != 0
            }
        };
        let mut at = 0;
        while at + 16 <= bytes.len() {
            if block(at) {
                return true;
            }
            at += 16;
        }
        return at < bytes.len() && block(bytes.len() - 16);
    }
    bytes.iter().any(u8::is_ascii_uppercase)
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::has_ascii_upper;

    /// The block search answers as the byte loop, at every length and position.
    #[test]
    fn upper_case_found_as_a_byte_loop_finds_it() {
        for len in 0..40 {
            for at in 0..=len {
                for b in 0..=255u8 {
                    let mut bytes = vec![b'a'; len];
                    if at < len {
                        bytes[at] = b;
                    }
                    assert_eq!(
                        has_ascii_upper(&bytes),
                        bytes.iter().any(u8::is_ascii_uppercase),
                        "{len} {at} {b}"
                    );
                }
            }
        }
    }

    use super::*;

    fn matches(fold: Fold, path: &str, prefix: &str) -> bool {
        fold.starts_with(path.as_bytes(), &fold.prefix(prefix), false)
    }

    #[test]
    fn folds() {
        assert!(matches(Fold::Exact, "/shop/x", "/shop"));
        assert!(!matches(Fold::Exact, "/SHOP/x", "/shop"));
        for f in [Fold::Ascii, Fold::Lower, Fold::Full] {
            assert!(matches(f, "/SHOP/x", "/shop"), "{f:?}");
            assert!(matches(f, "/shop/x", "/SHOP"), "{f:?}");
            assert!(!matches(f, "/sho", "/shop"), "{f:?}");
            assert_eq!(matches(f, "/CAFÉ/x", "/café"), f != Fold::Ascii, "{f:?}");
        }
        // The Kelvin sign lowercases to `k`; the long s only folds through uppercase.
        assert!(!matches(Fold::Ascii, "/\u{212a}ey", "/key"));
        assert!(matches(Fold::Lower, "/\u{212a}ey", "/key"));
        assert!(!matches(Fold::Lower, "/\u{17f}hop", "/shop"));
        assert!(matches(Fold::Full, "/\u{17f}hop", "/shop"));
        // A prefix ending inside one character's folding (`İ` lowercases to `i` + U+0307).
        assert!(matches(Fold::Lower, "/\u{130}x", "/i"));
        // Not UTF-8: ASCII letters only.
        assert!(Fold::Lower.starts_with(b"/SHOP\xff", &Fold::Lower.prefix("/shop"), false));
        // `bare`: the prefix without its trailing `/`, and only that.
        for f in [Fold::Exact, Fold::Ascii, Fold::Lower, Fold::Full] {
            let p = f.prefix("/shop/");
            assert!(f.starts_with(b"/shop", &p, true), "{f:?}");
            assert!(!f.starts_with(b"/shop", &p, false), "{f:?}");
            assert!(!f.starts_with(b"/sho", &p, true), "{f:?}");
            assert!(!f.starts_with(b"/shopx", &p, true), "{f:?}");
            assert!(!f.starts_with(b"/sho", &f.prefix("/shop"), true), "{f:?}");
        }
        assert!(Fold::Lower.starts_with(
            "/caf\u{c9}".as_bytes(),
            &Fold::Lower.prefix("/café/"),
            true
        ));
    }
}
