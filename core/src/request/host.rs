//! Host names as routes and rules compare them: without case, port or trailing dot.

/// Longest host name kept (a DNS name's limit, and an IPv6 literal's with brackets).
pub(crate) const MAX_HOST: usize = 253;

/// A host name, normalised: ASCII lower case, no port, no trailing dot. Borrowed from the
/// request when it is in that form already (the common case), else kept inline: normalising
/// allocates nothing.
#[derive(Clone, Copy)]
#[allow(clippy::large_enum_variant)] // inline on purpose: normalising allocates nothing
pub(crate) enum HostName<'a> {
    /// The request's own bytes, already normal.
    Borrowed(&'a [u8]),
    /// A normalised copy.
    Inline { len: u8, bytes: [u8; MAX_HOST] },
}

impl HostName<'_> {
    /// The name's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            HostName::Borrowed(b) => b,
            HostName::Inline { len, bytes } => &bytes[..usize::from(*len)],
        }
    }
}

impl std::fmt::Debug for HostName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// A host a request names, as read. Kept inline on purpose (the request's stack frame holds
/// two: nothing is allocated).
#[derive(Debug, Clone, Copy)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum HostSeen<'a> {
    /// It names none here.
    Absent,
    /// It names one that is not a host name (bytes no host holds, too long, a bad port):
    /// matched as every host by what decides, as none by what lets pass.
    Bad,
    /// A host name.
    Name(HostName<'a>),
}

/// `raw` (a `Host` header, an `:authority`, an absolute-form target's authority) normalised:
/// blanks around it, userinfo, port and one trailing dot dropped, ASCII letters lowered.
/// `None` for anything that is not a host name (empty, a byte outside `A-Z a-z 0-9 - . _`,
/// an IPv6 literal with others than hex digits, `:` and `.`, a port that is not digits).
pub(crate) fn normalise(raw: &[u8]) -> Option<HostName<'_>> {
    let raw = raw.trim_ascii();
    let raw = match memchr::memrchr(b'@', raw) {
        Some(at) => &raw[at + 1..],
        None => raw,
    };
    let (host, port) = if raw.first() == Some(&b'[') {
        let end = memchr::memchr(b']', raw)?;
        let (host, rest) = raw.split_at(end + 1);
        let ok = host[1..end]
            .iter()
            .all(|b| b.is_ascii_hexdigit() || *b == b':' || *b == b'.');
        if !ok || end < 3 {
            return None;
        }
        (host, rest)
    } else {
        match memchr::memchr(b':', raw) {
            Some(at) => (&raw[..at], &raw[at..]),
            None => (raw, &b""[..]),
        }
    };
    if !port.is_empty() {
        let digits = port.strip_prefix(b":")?;
        if !digits.iter().all(u8::is_ascii_digit) || digits.len() > 5 {
            return None;
        }
    }
    let host = host.strip_suffix(b".").unwrap_or(host);
    if host.is_empty() || host.len() > MAX_HOST {
        return None;
    }
    let allowed =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':');
    let mut upper = false;
    for &b in host {
        if !allowed(b) {
            return None;
        }
        upper |= b.is_ascii_uppercase();
    }
    if !upper {
        return Some(HostName::Borrowed(host));
    }
    let mut bytes = [0; MAX_HOST];
    for (out, &b) in bytes.iter_mut().zip(host) {
        *out = b.to_ascii_lowercase();
    }
    Some(HostName::Inline {
        len: host.len() as u8,
        bytes,
    })
}

/// The authority of an absolute-form target (`http://user@host:port/path`), if it is one.
pub(crate) fn authority_of(target: &[u8]) -> Option<&[u8]> {
    let colon = memchr::memchr(b':', target)?;
    let scheme = &target[..colon];
    if scheme.is_empty()
        || !scheme
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b))
    {
        return None;
    }
    let rest = target[colon + 1..].strip_prefix(b"//")?;
    let end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#' | b'\\'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A host pattern of a route or a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// Every host.
    Any,
    /// This host exactly (normalised).
    Exact(Box<[u8]>),
    /// Its subdomains: the pattern `*.example.com` kept as `.example.com` (not
    /// `example.com` itself, as nginx's `*.example.com`).
    Subdomains(Box<[u8]>),
}

impl HostPattern {
    /// `text` as a pattern; the error says what is wrong.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let (wild, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if name.contains(['*', '/', '@']) || name.trim() != name {
            return Err(format!(
                "`{text}` is not a host name (`shop.example.com`) or a wildcard over its \
                 subdomains (`*.example.com`)"
            ));
        }
        let normal = normalise(name.as_bytes())
            .filter(|_| !name.contains(':') || name.starts_with('['))
            .ok_or_else(|| {
                format!("`{text}` is not a host name (letters, digits, `-`, `.`; no port)")
            })?;
        let bytes = normal.as_bytes();
        Ok(if wild {
            let mut dotted = Vec::with_capacity(bytes.len() + 1);
            dotted.push(b'.');
            dotted.extend_from_slice(bytes);
            HostPattern::Subdomains(dotted.into())
        } else {
            HostPattern::Exact(bytes.into())
        })
    }

    /// Whether a normalised host matches.
    #[inline]
    pub(crate) fn matches(&self, host: &[u8]) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(h) => **h == *host,
            HostPattern::Subdomains(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        }
    }

    /// How specific the pattern is: exact hosts first, then the longest wildcard.
    pub(crate) fn specificity(&self) -> (u8, usize) {
        match self {
            HostPattern::Exact(h) => (2, h.len()),
            HostPattern::Subdomains(s) => (1, s.len()),
            HostPattern::Any => (0, 0),
        }
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    fn norm(raw: &str) -> Option<String> {
        normalise(raw.as_bytes()).map(|h| String::from_utf8(h.as_bytes().to_vec()).unwrap())
    }

    #[test]
    fn hosts_are_compared_without_case_port_or_trailing_dot() {
        assert_eq!(
            norm("Shop.Example.COM").as_deref(),
            Some("shop.example.com")
        );
        assert_eq!(
            norm("shop.example.com.:8443").as_deref(),
            Some("shop.example.com")
        );
        assert_eq!(
            norm(" shop.example.com ").as_deref(),
            Some("shop.example.com")
        );
        assert_eq!(
            norm("user@shop.example.com:80").as_deref(),
            Some("shop.example.com")
        );
        assert_eq!(norm("[::1]:8080").as_deref(), Some("[::1]"));
        assert_eq!(norm("[2001:DB8::1]").as_deref(), Some("[2001:db8::1]"));
        for bad in [
            "",
            ".",
            "shop.example.com:x",
            "a b",
            "shop\0.com",
            "sh%6fp.com",
            "[zz]",
            "a:1:2",
            "caf\u{e9}.fr",
        ] {
            assert_eq!(norm(bad), None, "{bad:?}");
        }
        assert_eq!(norm(&"a".repeat(254)), None);
    }

    #[test]
    fn authority_of_absolute_form_only() {
        assert_eq!(
            authority_of(b"http://Shop.example.com:80/x?y"),
            Some(&b"Shop.example.com:80"[..])
        );
        assert_eq!(authority_of(b"https://u@h"), Some(&b"u@h"[..]));
        assert_eq!(authority_of(b"/shop"), None);
        assert_eq!(authority_of(b"/a:b//c"), None);
        assert_eq!(authority_of(b"*"), None);
    }

    #[test]
    fn patterns() {
        let exact = HostPattern::parse("Shop.Example.com").unwrap();
        assert!(exact.matches(b"shop.example.com"));
        assert!(!exact.matches(b"www.shop.example.com"));
        let wild = HostPattern::parse("*.example.com").unwrap();
        assert!(wild.matches(b"shop.example.com"));
        assert!(wild.matches(b"a.b.example.com"));
        assert!(!wild.matches(b"example.com"));
        assert!(!wild.matches(b"badexample.com"));
        for bad in ["shop.example.com:80", "*", "*.*.com", "a/b", "", "x*.com"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(exact.specificity() > wild.specificity());
        assert!(wild.specificity() > HostPattern::Any.specificity());
    }
}
