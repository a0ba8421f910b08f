//! Finding one cookie's value in a `Cookie` request header (`a=b; c=d`), on every request.
//!
//! **Where a cookie starts.** At the start of the header, or after `;` and optional blanks
//! (spaces, tabs): how browsers send cookies, and how servers joining several `Cookie` lines
//! join them (Node, uvicorn, HTTP/2's `cookie` crumbs). Also after `,` and optional blanks,
//! which is how gunicorn (and RFC 9110's generic rule for repeated fields) joins two `Cookie`
//! lines (`a=1,__vr_shop=T`) — but with care, since a `,` can be part of another cookie's
//! value, which no server splits on:
//! - a cookie found after `;` comes first: one found after `,` is taken only when there is
//!   none, so a `,` inside another cookie's value can never shadow the real ticket;
//! - a `,` inside a double-quoted value (`pref="x,__vr_shop=T"`) starts nothing, as servers
//!   parsing quoted values (Python's `http.cookies`) read it;
//! - a `,` in an unquoted value (`pref=x,__vr_shop=T`) cannot be told from two joined lines,
//!   so it does start a cookie. Such a value is outside RFC 6265's cookie-octets (which
//!   exclude `,`, `;`, blanks and quotes), and taking its ticket gains nothing: whoever could
//!   plant it could send the ticket as a cookie of its own, and it only counts when the
//!   visitor has no ticket of its own.
//!
//! A blank inside another cookie's value (`a=x __vr_shop=T`) starts nothing either.
//!
//! **Where a value ends.** At the first `;` or `,` (none is a cookie-octet), blanks trimmed;
//! a value in double quotes is what they hold (a `;` ends it even inside quotes, since
//! servers split on `;` first).
//!
//! A substring search for `name=` (so a header of many cookies is skipped 16 bytes at a time,
//! see [`Needle`]) followed by a check that the match starts a cookie.

use crate::needle::Needle;

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
    needle: Needle,
}

impl CookieFinder {
    /// A finder for the cookie called `name`.
    pub(crate) fn new(name: &str) -> Self {
        Self {
            needle: Needle::new(format!("{name}=").as_bytes()),
        }
    }

    /// The cookie's value in `header`, without surrounding blanks or quotes; the first of
    /// several cookies of the name (see the module's documentation for which comes first).
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
        self.find_rest(header)
            .map(|rest| exact_value(rest, short, long))
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

    /// [`CookieFinder::find_ticket`] in a request's several `Cookie` lines, read as their
    /// join with `; ` (how servers join them, and HTTP/2's `cookie` crumbs), without joining
    /// them: a ticket that starts a line or follows a `;` in any line comes before one that
    /// follows a `,` in an earlier line, as it would in the join.
    pub(crate) fn find_ticket_in_lines<'h>(
        &self,
        lines: impl Iterator<Item = &'h [u8]>,
    ) -> Option<&'h [u8]> {
        let mut after_comma = None;
        for line in lines {
            let mut ranked_low = false;
            match self.find_ranked(line, &mut ranked_low) {
                Some(rest) if !ranked_low => return Some(ticket_value(rest)),
                Some(rest) if after_comma.is_none() => after_comma = Some(rest),
                _ => {}
            }
        }
        after_comma.map(ticket_value)
    }

    /// What follows `name=` in the first cookie of the name: the first that starts the
    /// header or follows a `;`, else the first that follows a `,` outside a quoted value.
    #[inline]
    fn find_rest<'h>(&self, header: &'h [u8]) -> Option<&'h [u8]> {
        self.find_ranked(header, &mut false)
    }

    /// [`CookieFinder::find_rest`], setting `after_comma` when the cookie found follows a `,`
    /// (no cookie of the name starts the header or follows a `;`). (The flag is written
    /// through a reference: returned with the slice, the three words went through memory,
    /// which cost every request that reads a ticket 13 instructions.)
    #[inline]
    fn find_ranked<'h>(&self, header: &'h [u8], after_comma: &mut bool) -> Option<&'h [u8]> {
        let mut from = 0;
        let mut first_after_comma = None;
        while let Some(pos) = self.needle.find(&header[from..]) {
            let at = from + pos;
            match boundary(header, at) {
                Boundary::Start | Boundary::Semicolon => {
                    return Some(&header[at + self.needle.bytes().len()..]);
                }
                Boundary::Comma(comma) => {
                    if first_after_comma.is_none() && !in_quotes(header, comma) {
                        first_after_comma = Some(at);
                    }
                }
                // `name=` inside another cookie's name or value.
                Boundary::None => {}
            }
            from = at + 1;
        }
        let at = first_after_comma?;
        *after_comma = true;
        Some(&header[at + self.needle.bytes().len()..])
    }
}

/// The value at the start of `rest` (what follows `name=`) for a cookie whose valid values
/// are exactly `short` or `long` bytes (see [`CookieFinder::find_exact`]).
#[inline]
fn exact_value(rest: &[u8], short: usize, long: usize) -> &[u8] {
    debug_assert!(short < long);
    let ends_at = |len: usize| match rest.get(len) {
        Some(b';' | b',') => true,
        Some(_) => false,
        None => rest.len() == len,
    };
    let starts_plainly = rest.first().is_some_and(|&b| !delimits(b));
    if starts_plainly && ends_at(long) && !delimits(rest[short]) {
        &rest[..long]
    } else if starts_plainly && ends_at(short) {
        &rest[..short]
    } else {
        value_at_start(rest)
    }
}

/// [`exact_value`] at a ticket's lengths (see [`CookieFinder::find_ticket`]): the ticket in
/// `rest`, what follows its cookie's `name=`.
#[inline]
pub(crate) fn ticket_value(rest: &[u8]) -> &[u8] {
    exact_value(
        rest,
        crate::ticket::LEGACY_ENCODED_LEN,
        crate::ticket::ENCODED_LEN,
    )
}

/// What comes before a match of `name=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Boundary {
    /// The header's start (and perhaps blanks).
    Start,
    /// `;` (and perhaps blanks).
    Semicolon,
    /// `,` at this index (and perhaps blanks).
    Comma(usize),
    /// Anything else: the match is inside another cookie's name or value.
    None,
}

/// What precedes the match at `at`, blanks skipped.
#[inline]
fn boundary(header: &[u8], at: usize) -> Boundary {
    let mut i = at;
    loop {
        if i == 0 {
            return Boundary::Start;
        }
        i -= 1;
        match header[i] {
            b';' => return Boundary::Semicolon,
            b' ' | b'\t' => {}
            b',' => return Boundary::Comma(i),
            _ => return Boundary::None,
        }
    }
}

/// Whether the byte at `at` lies inside a double-quoted cookie value: a value whose first
/// byte (after `=` and blanks) is `"`, up to the next `"` (a `;` ends it regardless). Reads
/// the header from its start, so it is only asked off the common path.
#[cold]
fn in_quotes(header: &[u8], at: usize) -> bool {
    if memchr::memchr(b'"', &header[..at]).is_none() {
        return false;
    }
    #[derive(PartialEq)]
    enum State {
        Name,
        ValueStart,
        Value,
        Quoted,
    }
    let mut state = State::Name;
    for &b in &header[..at] {
        state = match (state, b) {
            (_, b';') => State::Name,
            (State::Quoted, b'"') => State::Value,
            (State::Quoted, _) => State::Quoted,
            (_, b',') => State::Name,
            (State::Name, b'=') => State::ValueStart,
            (State::Name, _) => State::Name,
            (State::ValueStart, b' ' | b'\t') => State::ValueStart,
            (State::ValueStart, b'"') => State::Quoted,
            (State::ValueStart | State::Value, _) => State::Value,
        };
    }
    state == State::Quoted
}

/// Whether `b` can end or surround a value: `;`, `,`, a blank (what `value_at_start` trims)
/// or a double quote.
#[inline]
fn delimits(b: u8) -> bool {
    b == b';' || b == b',' || b == b'"' || b.is_ascii_whitespace()
}

/// The value that starts `rest` (what follows `name=`): up to the next `;` or `,`, without
/// surrounding blanks; or, when it starts with `"`, what the quotes hold (up to the next `"`
/// before any `;`).
#[inline]
pub(crate) fn value_at_start(rest: &[u8]) -> &[u8] {
    let v = rest.trim_ascii_start();
    if v.first() == Some(&b'"') {
        let body = &v[1..];
        let semi = memchr::memchr(b';', body).unwrap_or(body.len());
        if let Some(close) = memchr::memchr(b'"', &body[..semi]) {
            return &body[..close];
        }
    }
    let end = separator(v).unwrap_or(v.len());
    v[..end].trim_ascii_end()
}

/// The first `;` or `,` in `haystack`.
#[inline]
pub(crate) fn separator(haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(two) = memchr::arch::x86_64::sse2::memchr::Two::new(b';', b',') {
        return two.find(haystack);
    }
    memchr::memchr2(b';', b',', haystack)
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
        // A longer name that starts like it, first: not taken for it.
        assert_eq!(
            find_cookie("__vr_shopX=1; __vr_shop=T", "__vr_shop"),
            Some("T")
        );
        assert_eq!(find_cookie("\t__vr_shop=T", "__vr_shop"), Some("T"));
    }

    /// Two `Cookie` lines joined with `,` (gunicorn): the ticket is found in either; a `,`
    /// inside a quoted value starts nothing; a `;` match beats a `,` one wherever it is; a
    /// blank inside a value starts nothing.
    #[test]
    fn comma_joined_lines_and_smuggling() {
        fn f(h: &str) -> Option<&str> {
            find_cookie(h, "__vr_shop")
        }
        assert_eq!(f("a=1,__vr_shop=T"), Some("T"));
        assert_eq!(f("a=1, __vr_shop=T"), Some("T"));
        assert_eq!(f("__vr_shop=T,b=2"), Some("T"));
        assert_eq!(f("a=1; b=2,c=3; __vr_shop=T; d=4"), Some("T"));
        assert_eq!(f("a=1; b=2,__vr_shop=T; d=4,e=5"), Some("T"));
        assert_eq!(f("pref=\"x,__vr_shop=FORGED\""), None);
        assert_eq!(f("pref=\"x,__vr_shop=FORGED\"; __vr_shop=T"), Some("T"));
        assert_eq!(f("pref=\"x,__vr_shop=F\",__vr_shop=T"), Some("T"));
        assert_eq!(f("pref=x,__vr_shop=FORGED; __vr_shop=T"), Some("T"));
        assert_eq!(f("pref=x, __vr_shop=FORGED; __vr_shop=T"), Some("T"));
        assert_eq!(f("__vr_shop=T; pref=x,__vr_shop=FORGED"), Some("T"));
        assert_eq!(f("a=x __vr_shop=FORGED"), None);
        assert_eq!(f("a=x\t__vr_shop=FORGED; __vr_shop=T"), Some("T"));
        assert_eq!(find_cookie("pref=\"x,y\"; a=1", "pref"), Some("x,y"));
        assert_eq!(find_cookie("pref=\"x;y\"", "pref"), Some("\"x"));
        assert_eq!(find_cookie("a=\"1\"  ,b=2", "a"), Some("1"));
        let finder = CookieFinder::new("__vr_shop");
        let ticket = "A".repeat(crate::ticket::ENCODED_LEN);
        for header in [
            format!("a=1,__vr_shop={ticket}"),
            format!("__vr_shop={ticket},b=2"),
            format!("a=1; __vr_shop={ticket},b=2"),
        ] {
            assert_eq!(
                finder.find_ticket(header.as_bytes()),
                Some(ticket.as_bytes()),
                "{header}"
            );
        }
    }

    /// What the finder must agree with, byte by byte with no search and no vectors: of the
    /// `name=` matches, the first preceded (blanks skipped) by the header's start or `;`, else
    /// the first preceded by a `,` that is not inside a quoted value; its value as
    /// [`reference_value`] reads it.
    fn reference<'h>(header: &'h [u8], name: &[u8]) -> Option<&'h [u8]> {
        let needle = [name, b"="].concat();
        let matches: Vec<usize> = (0..header.len())
            .filter(|&i| header[i..].starts_with(&needle))
            .collect();
        // The byte before `i`, blanks skipped (`None`: the header's start), and its index.
        let before = |i: usize| {
            header[..i]
                .iter()
                .rposition(|&b| b != b' ' && b != b'\t')
                .map(|j| (j, header[j]))
        };
        let at = matches
            .iter()
            .copied()
            .find(|&i| matches!(before(i), None | Some((_, b';'))))
            .or_else(|| {
                matches.iter().copied().find(
                    |&i| matches!(before(i), Some((j, b',')) if !reference_in_quotes(header, j)),
                )
            })?;
        Some(reference_value(&header[at + needle.len()..]))
    }

    /// Whether the `,` at `at` is inside a quoted value: the `;`-separated piece holding it
    /// is walked cookie by cookie (a cookie ends at a `,` outside quotes).
    fn reference_in_quotes(header: &[u8], at: usize) -> bool {
        let start = header[..at]
            .iter()
            .rposition(|&b| b == b';')
            .map_or(0, |i| i + 1);
        let piece = &header[start..at];
        let mut i = 0;
        loop {
            let Some(k) = piece[i..].iter().position(|&b| b == b'=' || b == b',') else {
                return false;
            };
            if piece[i + k] == b',' {
                i += k + 1;
                continue;
            }
            let mut v = i + k + 1;
            while v < piece.len() && (piece[v] == b' ' || piece[v] == b'\t') {
                v += 1;
            }
            if v < piece.len() && piece[v] == b'"' {
                match piece[v + 1..].iter().position(|&b| b == b'"') {
                    None => return true,
                    Some(c) => v += c + 2,
                }
            }
            match piece[v..].iter().position(|&b| b == b',') {
                None => return false,
                Some(c) => i = v + c + 1,
            }
        }
    }

    /// A value: blanks skipped; what double quotes hold when it starts with one (closed before
    /// any `;`); else up to the first `;` or `,`, trailing blanks trimmed.
    fn reference_value(rest: &[u8]) -> &[u8] {
        let mut s = 0;
        while s < rest.len() && rest[s].is_ascii_whitespace() {
            s += 1;
        }
        let v = &rest[s..];
        if v.first() == Some(&b'"') {
            for (k, &b) in v[1..].iter().enumerate() {
                match b {
                    b'"' => return &v[1..1 + k],
                    b';' => break,
                    _ => {}
                }
            }
        }
        let mut end = 0;
        while end < v.len() && v[end] != b';' && v[end] != b',' {
            end += 1;
        }
        while end > 0 && v[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        &v[..end]
    }

    /// Headers of every length around the vector width and the needle's, with the cookie at
    /// every position, near-misses around it and separators of every kind: the finder agrees
    /// with the reference on all of them.
    #[test]
    fn agrees_on_assembled_headers() {
        let name = "__vr_shop";
        let finder = CookieFinder::new(name);
        let pieces: [&str; 15] = [
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
            "p=\"x,__vr_shop=Q\"",
            "p=x,__vr_shop=C",
            "p=x __vr_shop=S",
            "=",
            "",
        ];
        let seps = [";", "; ", ";\t", " ; ", ",", ", "];
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

    /// A ticket after a `,` in one `Cookie` line (another cookie's unquoted value, or a
    /// gunicorn-style join) does not shadow the real ticket starting the next line, as it
    /// would not in their join; alone, it is taken.
    #[test]
    fn a_ticket_starting_a_later_line_comes_before_one_after_a_comma() {
        let finder = CookieFinder::new("__vr_shop");
        let real = "R".repeat(crate::ticket::ENCODED_LEN);
        let planted = format!(
            "pref=x,__vr_shop={}",
            "P".repeat(crate::ticket::ENCODED_LEN)
        );
        let real_line = format!("__vr_shop={real}");
        let lines = [planted.as_bytes(), real_line.as_bytes()];
        assert_eq!(
            finder.find_ticket_in_lines(lines.into_iter()),
            Some(real.as_bytes())
        );
        assert_eq!(
            finder.find_ticket_in_lines([planted.as_bytes(), b"a=1"].into_iter()),
            Some("P".repeat(crate::ticket::ENCODED_LEN).as_bytes())
        );
        assert_eq!(finder.find_ticket_in_lines(std::iter::empty()), None);
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
                    "AAAABBBBCCCCDDE", "a", "ab", ";", "; ", " ", "\t", "\"", "x=1", "=", ",",
                    ", ",
                ]),
                0..40,
            ),
        ) {
            check_exact(&CookieFinder::new("__vr_shop"), pieces.concat().as_bytes(), [12, 14]);
        }

        /// Several `Cookie` lines read as their join with `; `: the same ticket value (or
        /// none) as the join gives, on random lines of the cookie's name, tickets of both
        /// formats' lengths and other lengths, separators, blanks and quotes.
        #[test]
        fn several_lines_read_as_their_join(
            lines in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec![
                        "__vr_shop=", "pref=x,", "p=\"x,", "\"", ";", "; ", ",", ", ", " ",
                        "a=1", "=", "T", "TT", "__vr_sh",
                    ]),
                    0..12,
                ),
                0..5,
            ),
            tickets in proptest::collection::vec(0usize..4, 0..5),
        ) {
            let finder = CookieFinder::new("__vr_shop");
            let sizes = [
                crate::ticket::ENCODED_LEN,
                crate::ticket::LEGACY_ENCODED_LEN,
                crate::ticket::ENCODED_LEN - 1,
                crate::ticket::ENCODED_LEN + 1,
            ];
            let lines: Vec<Vec<u8>> = lines
                .iter()
                .enumerate()
                .map(|(i, pieces)| {
                    let mut line = pieces.concat().into_bytes();
                    // Some lines end with a ticket-sized value after the name.
                    if let Some(&k) = tickets.get(i) {
                        line.extend_from_slice(b"__vr_shop=");
                        line.extend(std::iter::repeat_n(b'A' + i as u8, sizes[k]));
                    }
                    line
                })
                .collect();
            let joined = lines.join(&b"; "[..]);
            let want = if lines.is_empty() { None } else { finder.find_ticket(&joined) };
            let got = finder.find_ticket_in_lines(lines.iter().map(Vec::as_slice));
            // As with one header (`check_exact`), the exact-length read may differ only where
            // neither answer could be a ticket (a delimiter in it): both are refused alike.
            let lens = [crate::ticket::LEGACY_ENCODED_LEN, crate::ticket::ENCODED_LEN];
            let could_be = |v: Option<&[u8]>| v.is_some_and(|v| plausible(v, lens));
            if could_be(got) || could_be(want) {
                proptest::prop_assert_eq!(
                    got,
                    want,
                    "{:?}",
                    lines.iter().map(|l| String::from_utf8_lossy(l)).collect::<Vec<_>>()
                );
            }
            proptest::prop_assert_eq!(got.is_some(), want.is_some());
        }

        /// Random headers of up to 60 pieces (the cookie's name and its parts, separators,
        /// blanks, quotes, `=`, other text), up to ~600 bytes: the finder agrees with the
        /// reference.
        #[test]
        fn agrees_on_random_headers(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "__vr_shop=", "__vr_shop", "__vr_sh", "op=", "=", ";", "; ", " ", "\t",
                    "\"", "x", "T0123456789", "a=b", ",", ", ", "=\"",
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
