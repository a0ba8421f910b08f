//! Header and cookie value patterns: `*` matches any run of bytes, everything else itself.

/// Longest pattern, in bytes.
pub(crate) const MAX_PATTERN: usize = 1024;

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    pattern: Box<[u8]>,
    /// No `*`: compared whole.
    literal: bool,
}

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
        Ok(Self {
            literal: !text.contains('*'),
            pattern: text.as_bytes().into(),
        })
    }

    /// Whether `value` matches (in time linear in both lengths, allocating nothing).
    pub(crate) fn matches(&self, value: &[u8]) -> bool {
        if self.literal {
            return *self.pattern == *value;
        }
        let p = &self.pattern;
        // The classic two-pointer match: on a mismatch, the last `*` takes one more byte.
        let (mut pi, mut vi) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while vi < value.len() {
            if pi < p.len() && p[pi] == b'*' {
                star = Some((pi, vi));
                pi += 1;
            } else if pi < p.len() && p[pi] == value[vi] {
                pi += 1;
                vi += 1;
            } else if let Some((sp, sv)) = star {
                pi = sp + 1;
                vi = sv + 1;
                star = Some((sp, sv + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|&b| b == b'*')
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
        fn agrees_with_recursion(p in "[ab*]{0,6}", v in "[ab]{0,8}") {
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
