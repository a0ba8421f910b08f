//! The values of every cookie a room's rules read (and its ticket's), found in one pass over a
//! `Cookie` header.
//!
//! A rule set that reads three cookies would otherwise search the header three times (one
//! [`CookieFinder`] each), and most visitors carry none of them, so each search runs to the
//! header's end. One pass cuts the header at each `;`, compares the name that starts each
//! piece with the wanted ones (only those of its length), and takes the first of each.
//!
//! The pass answers exactly as [`CookieFinder::find`] would for each name (and, for the
//! room's ticket cookie, as [`CookieFinder::find_ticket_in_lines`] would on that one header),
//! or not at all:
//! - a cookie found after `;` (or at the start) comes first there too, and the pass finds
//!   those: `name=` after `;` and blanks is a piece that starts with `name=`, and the first
//!   such piece is the leftmost such match;
//! - a cookie after `,` counts there only when none follows a `;`. The pass does not read
//!   those: for a header holding a `,` it answers nothing and the caller searches name by
//!   name (browsers never send one: `,` is not a cookie-octet; joined `Cookie` lines are).

#[cfg(doc)]
use crate::admission::cookie_finder::CookieFinder;

/// Most distinct cookie names read in one pass; a rule set reading more searches for each.
pub(crate) const MAX_COOKIE_NAMES: usize = 16;

/// What follows `name=` in the first cookie of each name found, by the name's index
/// ([`CookieNames::read`]): the value is at its start (`value_at_start`, or the ticket's
/// reading for the ticket cookie).
pub(crate) type CookieRests<'h> = [Option<&'h [u8]>; MAX_COOKIE_NAMES];

/// The cookie names a rule set reads.
#[derive(Debug)]
pub(crate) struct CookieNames {
    names: Vec<Box<[u8]>>,
    /// `by_len[n]`: bit `j` set when `names[j]` is `n` bytes long (the last entry: longer).
    by_len: [u16; 64],
}

impl Default for CookieNames {
    /// No names.
    fn default() -> Self {
        Self {
            names: Vec::new(),
            by_len: [0; 64],
        }
    }
}

impl CookieNames {
    /// The index of `name`, added if new; `None` past [`MAX_COOKIE_NAMES`] names.
    pub(crate) fn index(&mut self, name: &str) -> Option<usize> {
        let name = name.as_bytes();
        if let Some(j) = self.names.iter().position(|n| **n == *name) {
            return Some(j);
        }
        if self.names.len() == MAX_COOKIE_NAMES {
            return None;
        }
        self.by_len[name.len().min(63)] |= 1 << self.names.len();
        self.names.push(name.into());
        Some(self.names.len() - 1)
    }

    /// What follows each name's `name=` in `header` (where [`CookieFinder::find`] finds its
    /// value), or `None` when a `,` comes before every name was found, and the names must be
    /// searched for one at a time (a `,` after them changes nothing: a cookie after `;` comes
    /// first).
    ///
    /// One search for the bytes that matter (`;`, `,`, `=`; see [`next_special`]), not a
    /// loop over every byte: a ticket's long value is crossed in a few steps.
    #[inline]
    pub(crate) fn read<'h>(&self, header: &'h [u8]) -> Option<CookieRests<'h>> {
        let mut values = [None; MAX_COOKIE_NAMES];
        let mut missing: u32 = (1 << self.names.len()) - 1;
        // The piece being read starts at `start`; its first `=`, if seen yet.
        let (mut start, mut eq) = (0, None);
        let mut from = 0;
        while let Some(at) = next_special(header, from) {
            from = at + 1;
            match header[at] {
                b'=' => {
                    eq = eq.or(Some(at));
                    continue;
                }
                b',' => return None,
                _ => {}
            }
            self.take(header, start, eq, &mut values, &mut missing);
            if missing == 0 {
                return Some(values);
            }
            (start, eq) = (at + 1, None);
        }
        self.take(header, start, eq, &mut values, &mut missing);
        Some(values)
    }

    /// The piece of `header` from `start` (its first `=` at `eq`): what follows the `=`, when
    /// its name (after blanks, as `CookieFinder` skips them) is a missing one.
    #[inline(always)]
    fn take<'h>(
        &self,
        header: &'h [u8],
        start: usize,
        eq: Option<usize>,
        values: &mut CookieRests<'h>,
        missing: &mut u32,
    ) {
        let Some(eq) = eq else {
            return;
        };
        let mut at = start;
        while matches!(header[at], b' ' | b'\t') {
            at += 1;
        }
        let name = &header[at..eq];
        let mut candidates = u32::from(self.by_len[name.len().min(63)]) & *missing;
        while candidates != 0 {
            let j = candidates.trailing_zeros() as usize;
            if *self.names[j] == *name {
                values[j] = Some(&header[eq + 1..]);
                *missing &= !(1 << j);
                return;
            }
            candidates &= candidates - 1;
        }
    }
}

/// The first `;`, `,` or `=` in `header` from `from` on: memchr's SSE2 searcher called
/// directly on x86_64 (inlined, as `CookieFinder` calls it: the dispatch of `memchr3` costs
/// more than the search on a header's short pieces), its portable one elsewhere.
#[inline(always)]
fn next_special(header: &[u8], from: usize) -> Option<usize> {
    let rest = &header[from..];
    #[cfg(target_arch = "x86_64")]
    if let Some(three) = memchr::arch::x86_64::sse2::memchr::Three::new(b';', b',', b'=') {
        return three.find(rest).map(|i| from + i);
    }
    memchr::memchr3(b';', b',', b'=', rest).map(|i| from + i)
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;
    use crate::admission::cookie_finder::{value_at_start, CookieFinder};

    /// The values of `read`'s answer.
    fn values(rests: CookieRests<'_>) -> [Option<&[u8]>; MAX_COOKIE_NAMES] {
        rests.map(|r| r.map(value_at_start))
    }

    fn names(list: &[&str]) -> CookieNames {
        let mut n = CookieNames::default();
        for name in list {
            n.index(name).unwrap();
        }
        n
    }

    #[test]
    fn one_pass_finds_each_first_value() {
        let n = names(&["staff", "beta", "a"]);
        let v = values(n.read(b"xa=1; a=2; staff=\"st-1\";beta= 1 ; a=3").unwrap());
        assert_eq!(v[0], Some(&b"st-1"[..]));
        assert_eq!(v[1], Some(&b"1"[..]));
        assert_eq!(v[2], Some(&b"2"[..]));
        assert_eq!(n.read(b"a=1,staff=2"), None);
        // Every name found before the `,`: it changes nothing.
        let all = values(n.read(b"staff=1; beta=2; a=3; b=4,a=5").unwrap());
        assert_eq!(all[2], Some(&b"3"[..]));
        assert_eq!(n.read(b"").unwrap()[0], None);
        assert_eq!(n.read(b"staff").unwrap()[0], None);
        assert_eq!(values(n.read(b"staff=").unwrap())[0], Some(&b""[..]));
        // A `,` in the last piece read, or after every name was found.
        let ab = names(&["a", "b"]);
        assert_eq!(ab.read(b"a=1; b=2,c"), None);
        assert!(ab.read(b"b=1; a=2; x,y").is_some());
    }

    proptest::proptest! {
        /// Agrees with `CookieFinder::find` name by name on headers made of the bytes that
        /// matter (`;`, `,`, `=`, quotes, blanks, the names' letters).
        #[test]
        fn agrees_with_the_finder(header in "[ab;= \t\"x,]{0,40}") {
            let list = ["a", "b", "ab", "ba"];
            let n = names(&list);
            if let Some(values) = n.read(header.as_bytes()).map(values) {
                for (j, name) in list.iter().enumerate() {
                    proptest::prop_assert_eq!(
                        values[j],
                        CookieFinder::new(name).find(header.as_bytes()),
                        "{} in {:?}", name, header
                    );
                }
            } else {
                proptest::prop_assert!(header.contains(','));
            }
        }

        /// The same with long values (a ticket among the cookies), where the pass searches
        /// for the value's end.
        #[test]
        fn agrees_with_the_finder_on_long_values(
            pieces in proptest::collection::vec(("[ab]{1,2}", "[x\"; ,]{0,3}", 0usize..40), 0..6),
        ) {
            let header: String = pieces
                .iter()
                .map(|(name, tail, long)| format!("{name}={}{tail};", "y".repeat(*long)))
                .collect();
            let list = ["a", "b", "ab", "ba"];
            let n = names(&list);
            if let Some(values) = n.read(header.as_bytes()).map(values) {
                for (j, name) in list.iter().enumerate() {
                    proptest::prop_assert_eq!(
                        values[j],
                        CookieFinder::new(name).find(header.as_bytes()),
                        "{} in {:?}", name, header
                    );
                }
            }
        }
    }
}
