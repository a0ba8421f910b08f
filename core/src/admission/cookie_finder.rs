//! Finding one cookie's value in a `Cookie` request header (`a=b; c=d`), on every request.
//!
//! A substring search for `name=` (so a header of many cookies is skipped 16 bytes at a time)
//! followed by a check that the match starts a cookie. On x86-64 the search is memchr's SSE2
//! "packed pair" searcher, which is inlined into the caller: measured in nginx, what a request
//! pays for the module is mostly instruction fetches, and memchr's general `memmem` (runtime
//! CPU dispatch to out-of-line AVX2 routines) took 19 of the admit path's 90 code lines. Other
//! targets, and headers too short for a vector, use memchr's general searcher.

use memchr::memmem;

/// Finds `name`'s value in a `Cookie` header (`a=b; c=d`).
pub fn find_cookie<'h>(header: &'h str, name: &str) -> Option<&'h str> {
    // The value is a byte slice of a str cut at ASCII delimiters, so it is valid UTF-8.
    find_cookie_bytes(header.as_bytes(), name).and_then(|v| std::str::from_utf8(v).ok())
}

/// Finds `name`'s value in a `Cookie` header given as bytes (headers need not be UTF-8).
pub fn find_cookie_bytes<'h>(header: &'h [u8], name: &str) -> Option<&'h [u8]> {
    CookieFinder::new(name).find(header)
}

/// A compiled search for one cookie.
#[derive(Clone)]
pub(crate) struct CookieFinder {
    /// `name=`.
    needle: Box<[u8]>,
    /// Any target, any haystack length.
    general: memmem::Finder<'static>,
    /// x86-64 (SSE2 is part of its baseline), haystacks of at least its minimum length.
    #[cfg(target_arch = "x86_64")]
    sse2: Option<memchr::arch::x86_64::sse2::packedpair::Finder>,
}

impl CookieFinder {
    /// A finder for the cookie called `name`.
    pub(crate) fn new(name: &str) -> Self {
        let needle: Box<[u8]> = format!("{name}=").into_bytes().into();
        Self {
            general: memmem::Finder::new(&needle).into_owned(),
            #[cfg(target_arch = "x86_64")]
            sse2: memchr::arch::x86_64::sse2::packedpair::Finder::new(&needle),
            needle,
        }
    }

    /// The cookie's value in `header`, without surrounding blanks or quotes; the first of
    /// several cookies of the name.
    #[inline]
    pub(crate) fn find<'h>(&self, header: &'h [u8]) -> Option<&'h [u8]> {
        self.find_rest(header).map(value_at_start)
    }

    /// [`CookieFinder::find`] for a cookie whose valid values are exactly `short` or `long`
    /// bytes (`short < long`) of cookie-octets (no blanks, quotes or `;`), such as a ticket of
    /// either format: when the value starts with such an octet and is followed, at one of the
    /// two lengths, by `;` or the end of the header (how browsers send cookies), that many
    /// bytes are taken without searching for the end. The long length is taken only if the
    /// byte at the short one cannot end a value, so a valid short value is never read long.
    /// The answer can differ from `find`'s only when neither is a valid value: if either
    /// answer is `short` or `long` bytes free of blanks, quotes and `;`, both are those same
    /// bytes.
    #[inline]
    pub(crate) fn find_exact<'h>(
        &self,
        header: &'h [u8],
        short: usize,
        long: usize,
    ) -> Option<&'h [u8]> {
        debug_assert!(short < long);
        let rest = self.find_rest(header)?;
        let ends_at = |len: usize| match rest.get(len) {
            Some(b';') => true,
            Some(_) => false,
            None => rest.len() == len,
        };
        let starts_plainly = rest.first().is_some_and(|&b| !delimits(b));
        Some(
            if starts_plainly && ends_at(long) && !delimits(rest[short]) {
                &rest[..long]
            } else if starts_plainly && ends_at(short) {
                &rest[..short]
            } else {
                value_at_start(rest)
            },
        )
    }

    /// The ticket cookie's value, for opening: [`CookieFinder::find_exact`] at the lengths of
    /// a ticket of the previous format and of the current one (a refused value is refused for
    /// the same reason either way: a value of another length, or with characters outside
    /// base64url, is badly encoded).
    #[inline]
    pub(crate) fn find_ticket<'h>(&self, header: &'h [u8]) -> Option<&'h [u8]> {
        self.find_exact(
            header,
            crate::ticket::LEGACY_ENCODED_LEN,
            crate::ticket::ENCODED_LEN,
        )
    }

    /// What follows `name=` in the first cookie of the name.
    #[inline]
    fn find_rest<'h>(&self, header: &'h [u8]) -> Option<&'h [u8]> {
        let mut from = 0;
        while let Some(pos) = self.find_needle(&header[from..]) {
            let at = from + pos;
            if at == 0 || matches!(header[at - 1], b';' | b' ' | b'\t') {
                return Some(&header[at + self.needle.len()..]);
            }
            // `name=` inside another cookie's name or value: look further.
            from = at + 1;
        }
        None
    }

    #[inline]
    fn find_needle(&self, haystack: &[u8]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if let Some(sse2) = &self.sse2 {
            if haystack.len() >= sse2.min_haystack_len() {
                return sse2.find(haystack, &self.needle);
            }
        }
        self.find_needle_general(haystack)
    }

    /// Out of line: on x86-64 only headers shorter than the needle plus a vector take it.
    #[inline(never)]
    fn find_needle_general(&self, haystack: &[u8]) -> Option<usize> {
        self.general.find(haystack)
    }
}

/// Whether `b` can end or surround a value: `;`, a blank (what `value_at_start` trims) or a
/// double quote.
#[inline]
fn delimits(b: u8) -> bool {
    b == b';' || b == b'"' || b.is_ascii_whitespace()
}

/// The value that starts `rest` (what follows `name=`): up to the next `;`, without
/// surrounding blanks or double quotes.
#[inline]
fn value_at_start(rest: &[u8]) -> &[u8] {
    let end = semicolon(rest).unwrap_or(rest.len());
    match rest[..end].trim_ascii() {
        [b'"', inner @ .., b'"'] => inner,
        v => v,
    }
}

#[inline]
fn semicolon(haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(one) = memchr::arch::x86_64::sse2::memchr::One::new(b';') {
        return one.find(haystack);
    }
    memchr::memchr(b';', haystack)
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn finds_cookies() {
        let h = "a=1; __vr_shop=TICKET; b=\"2\"";
        assert_eq!(find_cookie(h, "__vr_shop"), Some("TICKET"));
        assert_eq!(find_cookie(h, "b"), Some("2"));
        assert_eq!(find_cookie(h, "__vr_sho"), None);
        assert_eq!(find_cookie("", "a"), None);
        assert_eq!(find_cookie("novalue; a=", "a"), Some(""));
        assert_eq!(find_cookie("xa=1; a=2", "a"), Some("2"));
        assert_eq!(find_cookie("x=a=1; a=2", "a"), Some("2"));
    }

    /// What the finder must agree with, byte by byte with no search and no vectors: the first
    /// `name=` at the start of the header or after `;`, a space or a tab; its value up to the
    /// next `;`, trimmed, unquoted. (A space inside another cookie's value also starts a
    /// cookie here: values cannot hold spaces, and browsers send none.)
    fn reference<'h>(header: &'h [u8], name: &[u8]) -> Option<&'h [u8]> {
        let needle = [name, b"="].concat();
        let at = (0..header.len()).find(|&i| {
            header[i..].starts_with(&needle) && (i == 0 || b"; \t".contains(&header[i - 1]))
        })?;
        let rest = &header[at + needle.len()..];
        let end = rest.iter().position(|&b| b == b';').unwrap_or(rest.len());
        Some(match rest[..end].trim_ascii() {
            [b'"', inner @ .., b'"'] => inner,
            v => v,
        })
    }

    /// Headers of every length around the vector width and the needle's, with the cookie at
    /// every position, near-misses around it and separators of every kind: the finder agrees
    /// with the reference on all of them.
    #[test]
    fn agrees_on_assembled_headers() {
        let name = "__vr_shop";
        let finder = CookieFinder::new(name);
        let pieces: [&str; 12] = [
            "a=1",
            "__vr_sho=x",
            "x__vr_shop=y",
            "__vr_shop=",
            "__vr_shop=T1",
            "__vr_shop=\"T2\"",
            " __vr_shop = T3",
            "k=__vr_shop=z",
            "long_cookie_name_0123456789=some-long-value-0123456789abcdef",
            "\t__vr_shop=T4 ",
            "=",
            "",
        ];
        let seps = [";", "; ", ";\t", " ; "];
        for a in 0..pieces.len() {
            for b in 0..pieces.len() {
                for c in 0..pieces.len() {
                    for sep in seps {
                        let header = [pieces[a], pieces[b], pieces[c]].join(sep);
                        let h = header.as_bytes();
                        assert_eq!(
                            finder.find(h),
                            reference(h, name.as_bytes()),
                            "header {header:?}"
                        );
                    }
                }
            }
        }
    }

    /// Bytes that could be a valid value of `lens`: no blanks, quotes or `;`.
    fn plausible(v: &[u8], lens: [usize; 2]) -> bool {
        lens.contains(&v.len()) && !v.iter().any(|&b| delimits(b))
    }

    /// The contract of `find_exact`: whenever either answer is a plausible value, both are the
    /// same bytes.
    fn check_exact(finder: &CookieFinder, header: &[u8], lens: [usize; 2]) {
        let general = finder.find(header);
        let exact = finder.find_exact(header, lens[0], lens[1]);
        let plausible = |v: Option<&[u8]>| v.is_some_and(|v| plausible(v, lens));
        if plausible(general) || plausible(exact) {
            assert_eq!(
                general,
                exact,
                "header {:?}",
                String::from_utf8_lossy(header)
            );
        }
        assert_eq!(general.is_some(), exact.is_some());
    }

    /// A ticket of the previous format followed by a cookie that puts a `;` where a current
    /// ticket would end is read whole, not at the current length; a current ticket is read
    /// whole however it is followed.
    #[test]
    fn a_short_ticket_is_not_read_long() {
        use crate::ticket::{ENCODED_LEN as LONG, LEGACY_ENCODED_LEN as SHORT};
        let finder = CookieFinder::new("__vr_shop");
        let old = "A".repeat(SHORT);
        let gap = LONG - SHORT - 1;
        let tails = [
            format!(";{};b=2", "a".repeat(gap)),
            format!("; {};b", "a".repeat(gap - 1)),
            format!(" ;{};", "a".repeat(gap - 1)),
            format!("\t;{};", "a".repeat(gap - 1)),
            "; a=1; b=2".to_owned(),
        ];
        for (i, tail) in tails.iter().enumerate() {
            let header = format!("x=1; __vr_shop={old}{tail}");
            // The first four put a `;` right where a current ticket would end.
            assert_eq!(tail.as_bytes()[gap + 1] == b';', i < 4, "{tail}");
            assert_eq!(
                finder.find_ticket(header.as_bytes()),
                Some(old.as_bytes()),
                "{tail}"
            );
        }
        let quoted = format!("__vr_shop=\"{old}\";{};c=1", "a".repeat(gap - 2));
        assert_eq!(finder.find_ticket(quoted.as_bytes()), Some(old.as_bytes()));
        let new = "B".repeat(LONG);
        for tail in ["", ";", "; a=1", " ;"] {
            let header = format!("__vr_shop={new}{tail}");
            assert_eq!(
                finder.find_ticket(header.as_bytes()),
                Some(new.as_bytes()),
                "{tail}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// `find_exact` for 12- and 14-byte values agrees with `find` on random headers made
        /// of the cookie's name, values of those lengths, longer and shorter ones, separators,
        /// blanks and quotes.
        #[test]
        fn exact_length_search_agrees_where_it_matters(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "__vr_shop=", "AAAABBBBCCCC", "AAAABBBBCCC", "AAAABBBBCCCCD", "AAAABBBBCCCCDD",
                    "AAAABBBBCCCCDDE", "a", "ab", ";", "; ", " ", "\t", "\"", "x=1", "=",
                ]),
                0..40,
            ),
        ) {
            check_exact(&CookieFinder::new("__vr_shop"), pieces.concat().as_bytes(), [12, 14]);
        }

        /// Random headers of up to 60 pieces (the cookie's name and its parts, separators,
        /// blanks, quotes, `=`, other text), up to ~600 bytes: the finder agrees with the
        /// reference.
        #[test]
        fn agrees_on_random_headers(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "__vr_shop=", "__vr_shop", "__vr_sh", "op=", "=", ";", "; ", " ", "\t",
                    "\"", "x", "T0123456789", "a=b",
                ]),
                0..60,
            ),
        ) {
            let header = pieces.concat();
            let finder = CookieFinder::new("__vr_shop");
            proptest::prop_assert_eq!(
                finder.find(header.as_bytes()),
                reference(header.as_bytes(), b"__vr_shop")
            );
        }
    }
}
