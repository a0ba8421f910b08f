//! Query conditions of rules: a parameter's name, and a value when one is required, matched
//! percent-decoded (`+` as a space, as forms encode it) against a request's query string.
//!
//! A request's query is split into parameters once ([`Params`]), however many rules read it.

/// One query condition: a parameter's name, and its value when one is required, both
/// percent-decoded (`+` as a space) once, when the rule compiles.
#[derive(Debug)]
pub(crate) struct QueryTerm {
    name: Box<[u8]>,
    value: Option<Box<[u8]>>,
}

impl QueryTerm {
    /// The term for `name` and `value` as written in the configuration.
    pub(crate) fn new(name: &[u8], value: Option<&[u8]>) -> Self {
        let decode = |raw: &[u8]| -> Box<[u8]> { Decoded { bytes: raw, at: 0 }.collect() };
        Self {
            name: decode(name),
            value: value.map(decode),
        }
    }
}

/// Parameters a query is split into at most, once (those of a longer query past them are
/// split again by each rule that reads it).
const SPLIT: usize = 8;

/// One parameter's place in the query: its name is `start..eq`, its value `eq + 1..end`
/// (`eq == end`: no `=`, no value).
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: u16,
    eq: u16,
    end: u16,
}

/// A request's query string, split into parameters once for every rule that reads it.
#[derive(Debug)]
pub(crate) struct Params<'q> {
    query: &'q [u8],
    spans: [Span; SPLIT],
    /// How many of `spans` hold a parameter.
    len: usize,
    /// Where the parameters not split yet start (past the query's end: none).
    rest: usize,
}

impl<'q> Params<'q> {
    /// `query` (after the `?`), its first parameters split (a query longer than 64 KiB is
    /// not: each rule splits it as it reads).
    pub(crate) fn split(query: &'q [u8]) -> Self {
        let mut params = Self {
            query,
            spans: [Span::default(); SPLIT],
            len: 0,
            rest: 0,
        };
        if query.len() >= usize::from(u16::MAX) {
            return params;
        }
        let mut at = 0;
        while at <= query.len() && params.len < SPLIT {
            // One parameter, `&` to `&`, and where its `=` is: one byte loop (parameters
            // are short: no vectorised search's set-up).
            let start = at;
            let mut eq = None;
            while at < query.len() && query[at] != b'&' {
                if query[at] == b'=' && eq.is_none() {
                    eq = Some(at);
                }
                at += 1;
            }
            // (Every index is below 64 Ki: checked above.)
            params.spans[params.len] = Span {
                start: start as u16,
                eq: eq.unwrap_or(at) as u16,
                end: at as u16,
            };
            params.len += 1;
            at += 1;
        }
        params.rest = at;
        params
    }

    /// Each parameter's name and value (`None`: no `=`), in order (as [`Params::has`] reads
    /// them).
    #[cfg(test)]
    fn each(&self) -> impl Iterator<Item = (&'q [u8], Option<&'q [u8]>)> + '_ {
        let q = self.query;
        let split = self.spans[..self.len].iter().map(move |s| {
            let (start, eq, end) = (usize::from(s.start), usize::from(s.eq), usize::from(s.end));
            (&q[start..eq], (eq < end).then(|| &q[eq + 1..end]))
        });
        let rest = if self.rest <= q.len() {
            &q[self.rest..]
        } else {
            &[][..]
        };
        split.chain(Pieces {
            query: rest,
            at: if self.rest <= q.len() { 0 } else { 1 },
        })
    }

    /// Whether the query has the parameter `term` (both sides percent-decoded, `+` read as
    /// a space). With `every` (a rule that lets pass), a term with a value holds only when
    /// every occurrence of its name has that value: applications disagree on which of
    /// `?k=no&k=yes` they read (the first, the last, all).
    pub(crate) fn has(&self, term: &QueryTerm, every: bool) -> bool {
        // One parameter: `Some(answer)` when it settles the question.
        let mut seen = false;
        let mut one = |name: &[u8], value: Option<&[u8]>| -> Option<bool> {
            if !decoded_eq(name, &term.name) {
                return None;
            }
            let hit = match &term.value {
                None => true,
                Some(want) => value.is_some_and(|v| decoded_eq(v, want)),
            };
            if hit != every {
                return Some(hit);
            }
            seen |= hit;
            None
        };
        // The split parameters in a plain loop (most queries have no others).
        let q = self.query;
        for s in &self.spans[..self.len] {
            let (start, eq, end) = (usize::from(s.start), usize::from(s.eq), usize::from(s.end));
            if let Some(answer) = one(&q[start..eq], (eq < end).then(|| &q[eq + 1..end])) {
                return answer;
            }
        }
        if self.rest <= q.len() {
            let rest = Pieces {
                query: &q[self.rest..],
                at: 0,
            };
            for (name, value) in rest {
                if let Some(answer) = one(name, value) {
                    return answer;
                }
            }
        }
        seen
    }
}

/// The parameters of a query (or of its rest) not split into spans: split as they are read.
struct Pieces<'q> {
    query: &'q [u8],
    /// Where the next parameter starts (past the end: none left; an empty query has one,
    /// empty, parameter).
    at: usize,
}

impl<'q> Iterator for Pieces<'q> {
    type Item = (&'q [u8], Option<&'q [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        let q = self.query;
        if self.at > q.len() {
            return None;
        }
        let start = self.at;
        let end = memchr::memchr(b'&', &q[start..]).map_or(q.len(), |i| start + i);
        self.at = end + 1;
        let piece = &q[start..end];
        Some(match memchr::memchr(b'=', piece) {
            Some(eq) => (&piece[..eq], Some(&piece[eq + 1..])),
            None => (piece, None),
        })
    }
}

/// Whether `raw`, percent-decoded (and `+` as a space), equals `want` (decoded already).
///
/// Decoding never lengthens: a `raw` shorter than `want` differs, and one of the same length
/// equals only byte for byte, with `+` as a space and no `%` starting an escape (an escape
/// would shorten it), which is settled without decoding. Only a longer `raw` is decoded.
#[inline]
fn decoded_eq(raw: &[u8], want: &[u8]) -> bool {
    if raw.len() < want.len() {
        return false;
    }
    if raw.len() == want.len() {
        return raw
            .iter()
            .zip(want)
            .enumerate()
            .all(|(i, (&r, &w))| match r {
                b'+' => w == b' ',
                b'%' => w == b'%' && !escape_at(raw, i),
                r => r == w,
            });
    }
    Decoded { bytes: raw, at: 0 }.eq(want.iter().copied())
}

/// Whether the `%` at `at` starts an escape (two hex digits follow it).
fn escape_at(raw: &[u8], at: usize) -> bool {
    raw.get(at + 1..at + 3)
        .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
}

/// Bytes percent-decoded one at a time (a `%` not followed by two hex digits is itself).
struct Decoded<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Iterator for Decoded<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        match b {
            b'+' => Some(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    self.bytes.get(self.at).copied().and_then(hex),
                    self.bytes.get(self.at + 1).copied().and_then(hex),
                ) {
                    (Some(h), Some(l)) => {
                        self.at += 2;
                        Some((h * 16 + l) as u8)
                    }
                    _ => Some(b'%'),
                }
            }
            b => Some(b),
        }
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    fn query_has(query: &[u8], term: &QueryTerm, every: bool) -> bool {
        Params::split(query).has(term, every)
    }

    fn query_has_any(query: &[u8], term: &QueryTerm) -> bool {
        query_has(query, term, false)
    }

    /// A term as a configuration writes it.
    fn t(name: &str, value: Option<&str>) -> QueryTerm {
        QueryTerm::new(name.as_bytes(), value.map(str::as_bytes))
    }

    /// Whether `query` has `term`, by splitting it on `&` then on the first `=` and decoding
    /// both sides: what [`Params::has`] must answer.
    fn by_splitting(query: &[u8], term: &QueryTerm, every: bool) -> bool {
        let decode = |raw: &[u8]| -> Vec<u8> { Decoded { bytes: raw, at: 0 }.collect() };
        let results: Vec<bool> = query
            .split(|&b| b == b'&')
            .filter_map(|piece| {
                let (n, v) = match piece.iter().position(|&b| b == b'=') {
                    Some(at) => (&piece[..at], Some(&piece[at + 1..])),
                    None => (piece, None),
                };
                (decode(n) == *term.name).then(|| match &term.value {
                    None => true,
                    Some(want) => v.is_some_and(|v| decode(v) == **want),
                })
            })
            .collect();
        if every {
            !results.is_empty() && results.iter().all(|&h| h)
        } else {
            results.iter().any(|&h| h)
        }
    }

    #[test]
    fn query_terms_compare_decoded() {
        assert!(query_has_any(b"a=1&preview", &t("preview", None)));
        assert!(query_has_any(b"a=1&preview=", &t("preview", None)));
        assert!(query_has_any(b"%70review=1", &t("preview", Some("1"))));
        assert!(query_has_any(b"q=a+b", &t("q", Some("a b"))));
        assert!(query_has_any(b"q=a%20b", &t("q", Some("a+b"))));
        assert!(!query_has_any(b"q=ab", &t("q", Some("a b"))));
        assert!(!query_has_any(b"previewx=1", &t("preview", None)));
        assert!(!query_has_any(b"", &t("preview", None)));
        assert!(query_has_any(b"x=%zz", &t("x", Some("%zz"))));
        assert!(query_has_any(b"x=%4", &t("x", Some("%4"))));
        assert!(!query_has_any(b"x=%41", &t("x", Some("%41x"))));
        assert!(query_has_any(b"x=%41", &t("x", Some("A"))));
    }

    proptest::proptest! {
        /// The parameters split once, and past them the rest split as it is read, answer as
        /// splitting on `&` then on the first `=` does (queries of up to 16 parameters).
        #[test]
        fn query_has_agrees_with_splitting(
            query in "([ab%+]{0,2}(=[ab=%+]{0,2})?&){0,15}[ab=%+]{0,3}",
            name in "[ab]{0,2}",
            value in proptest::option::of("[ab=]{0,2}"),
            every in proptest::prelude::any::<bool>(),
        ) {
            let term = t(&name, value.as_deref());
            proptest::prop_assert_eq!(
                query_has(query.as_bytes(), &term, every),
                by_splitting(query.as_bytes(), &term, every)
            );
        }

        /// The shortcut agrees with decoding both sides.
        #[test]
        fn decoded_eq_agrees_with_decoding(raw in "[a%4+ 1f]{0,8}", want in "[a%4+ 1f]{0,8}") {
            let want: Vec<u8> = Decoded { bytes: want.as_bytes(), at: 0 }.collect();
            let slow = Decoded { bytes: raw.as_bytes(), at: 0 }.eq(want.iter().copied());
            proptest::prop_assert_eq!(decoded_eq(raw.as_bytes(), &want), slow);
        }

        /// Past the parameters split once, the rest is split as it is read, alike.
        #[test]
        fn long_queries_read_alike(query in "[ab=&]{0,60}") {
            let pieces: Vec<(&[u8], Option<&[u8]>)> =
                Pieces { query: query.as_bytes(), at: 0 }.collect();
            let params = Params::split(query.as_bytes());
            proptest::prop_assert_eq!(params.each().collect::<Vec<_>>(), pieces);
        }
    }

    /// Where the parameters split once end and the rest begins: a trailing `&` after them
    /// (one more, empty, parameter), and a query too long to split at all.
    #[test]
    fn the_rest_of_a_query_is_read() {
        assert!(query_has(b"a&a&a&a&a&a&a&a&", &t("", None), false));
        assert!(!query_has(b"a&a&a&a&a&a&a&a", &t("", None), false));
        assert!(query_has(b"a&a&a&a&a&a&a&a&k=1", &t("k", Some("1")), true));
        let mut long = vec![b'&'; 65_534];
        long.extend_from_slice(b"k=1");
        assert!(query_has(&long, &t("k", Some("1")), false));
        assert!(query_has(&long, &t("k", Some("1")), true));
        long.extend_from_slice(b"&k=2");
        assert!(!query_has(&long, &t("k", Some("1")), true));
    }
}
