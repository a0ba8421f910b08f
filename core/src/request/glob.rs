//! Header and cookie value patterns: `*` matches any run of bytes, everything else itself.

use crate::needle::Needle;

/// Longest pattern, in bytes.
pub(crate) const MAX_PATTERN: usize = 1024;

/// A compiled pattern: the literal pieces between its `*`s, the first anchored at the start
/// of the value unless the pattern starts with `*`, the last at its end unless it ends with
/// one; the pieces between are found in order with a vectorised substring search (so
/// `*Googlebot*` over a long `User-Agent` is one substring search, not a backtracking walk).
#[derive(Clone)]
pub(crate) struct Glob {
    /// The pattern as given.
    pattern: Box<[u8]>,
    /// No `*`: compared whole.
    literal: bool,
    /// What the value must start with (empty when the pattern starts with `*`).
    head: Box<[u8]>,
    /// What the value must end with (empty when the pattern ends with `*`).
    tail: Box<[u8]>,
    /// The pieces between, in order, each with its search.
    middle: Box<[Needle]>,
}

impl std::fmt::Debug for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Glob({:?})", String::from_utf8_lossy(&self.pattern))
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
    }
}

impl Eq for Glob {}

impl Glob {
    /// `text` as a pattern; the error says what is wrong.
    pub(crate) fn new(text: &str) -> Result<Self, String> {
        if text.len() > MAX_PATTERN {
            return Err(format!(
                "a pattern of {} bytes; at most {MAX_PATTERN}",
                text.len()
            ));
        }
        if text.chars().any(char::is_control) {
            return Err("a pattern must not hold control characters".into());
        }
        let literal = !text.contains('*');
        let pieces: Vec<&str> = text.split('*').collect();
        let (head, tail, middle) = if literal {
            ("", "", &pieces[..0])
        } else {
            // At least two pieces: the first before the first `*`, the last after the last.
            (
                pieces[0],
                pieces[pieces.len() - 1],
                &pieces[1..pieces.len() - 1],
            )
        };
        Ok(Self {
            pattern: text.as_bytes().into(),
            literal,
            head: head.as_bytes().into(),
            tail: tail.as_bytes().into(),
            middle: middle
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| Needle::new(p.as_bytes()))
                .collect(),
        })
    }

    /// Whether `value` matches (in time linear in its length, allocating nothing). The
    /// leftmost match of each piece is the right one to take: a later piece can only find
    /// more room after an earlier match that ends sooner.
    pub(crate) fn matches(&self, value: &[u8]) -> bool {
        if self.literal {
            return *self.pattern == *value;
        }
        if value.len() < self.head.len() + self.tail.len()
            || !value.starts_with(&self.head)
            || !value.ends_with(&self.tail)
        {
            return false;
        }
        let mut rest = &value[self.head.len()..value.len() - self.tail.len()];
        for piece in self.middle.iter() {
            match piece.find(rest) {
                Some(at) => rest = &rest[at + piece.bytes().len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn matches_like_a_shell_pattern() {
        let m = |p: &str, v: &str| Glob::new(p).unwrap().matches(v.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("abc", "abc"));
        assert!(!m("abc", "abcd"));
        assert!(!m("abc", "ABC"));
        assert!(m("*Googlebot*", "Mozilla/5.0 (compatible; Googlebot/2.1)"));
        assert!(!m("*Googlebot*", "Mozilla/5.0"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(m("a*b*c", "abc"));
        assert!(!m("a*b*c", "acb"));
        assert!(m("*.css", "x.css"));
        assert!(!m("*.css", "x.css.js"));
        assert!(m("a**b", "ab"));
        assert!(Glob::new("a\nb").is_err());
        assert!(Glob::new(&"a".repeat(2000)).is_err());
    }

    proptest::proptest! {
        /// Agrees with a plain recursive matcher.
        #[test]
        fn agrees_with_recursion(p in "[ab*]{0,8}", v in "[ab]{0,10}") {
            fn rec(p: &[u8], v: &[u8]) -> bool {
                match (p.first(), v.first()) {
                    (None, None) => true,
                    (Some(b'*'), _) => rec(&p[1..], v) || (!v.is_empty() && rec(p, &v[1..])),
                    (Some(a), Some(b)) if a == b => rec(&p[1..], &v[1..]),
                    _ => false,
                }
            }
            proptest::prop_assert_eq!(Glob::new(&p).unwrap().matches(v.as_bytes()), rec(p.as_bytes(), v.as_bytes()));
        }
    }
}
