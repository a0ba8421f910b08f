//! Host names as routes and rules compare them: without case, port or trailing dot.

/// Longest host name kept (a DNS name's limit, and an IPv6 literal's with brackets).
pub(crate) const MAX_HOST: usize = 253;

/// A host name, normalised but perhaps for case: the request's own bytes (nothing is copied
/// or allocated), with no port, userinfo or trailing dot, compared with patterns as their
/// ASCII lower case.
#[derive(Clone, Copy)]
pub(crate) enum HostName<'a> {
    /// Already normal (ASCII lower case).
    Lower(&'a [u8]),
    /// Normal once its ASCII upper-case letters are lowered (every other byte is a digit,
    /// `-`, `.`, `_`, or an IPv6 literal's `[`, `:`, `]`: lowering changes letters alone).
    Upper(&'a [u8]),
}

impl HostName<'_> {
    /// The name in ASCII lower case (not on the request path: it copies).
    pub(crate) fn to_lower(self) -> Vec<u8> {
        match self {
            HostName::Lower(b) => b.to_vec(),
            HostName::Upper(b) => b.to_ascii_lowercase(),
        }
    }
}

impl std::fmt::Debug for HostName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.to_lower()))
    }
}

/// A host a request names, as read (the request's stack frame holds two: nothing is
/// allocated).
#[derive(Debug, Clone, Copy)]
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
///
/// A plain name (what browsers send behind the standard ports: only `a-z 0-9 - . _`) is
/// answered by one pass over its bytes; anything else (upper case, a port, userinfo, an IPv6
/// literal, blanks, bad bytes) by [`normalise_general`], which answers every input alike.
#[inline]
pub(crate) fn normalise(raw: &[u8]) -> Option<HostName<'_>> {
    normalise_with_form(raw).map(|(host, _)| host)
}

/// How a host was written, beside the name [`normalise`] reads in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// As browsers write it: lower case, no trailing dot, no port or a port that is not the
    /// default one (which browsers send for a site served there: taken as the host's,
    /// though a router comparing the port would not), no userinfo.
    Usual,
    /// In a form browsers never send for a name they would send otherwise (upper case, a
    /// trailing dot, blanks, the default port written out, an empty port or one with leading
    /// zeros): an application that routes by the text of its `Host` header (Fastify's host
    /// constraints, a `req.hostname ===`) may not take it for that host.
    Unusual,
    /// With userinfo (`user@host`): an absolute-form target may hold it, a `Host` header
    /// may not.
    Userinfo,
}

/// [`normalise`], and how the host was written.
#[inline]
pub(crate) fn normalise_with_form(raw: &[u8]) -> Option<(HostName<'_>, Form)> {
    if raw.iter().all(|&b| PLAIN[usize::from(b)]) {
        let (host, form) = match raw.strip_suffix(b".") {
            Some(host) => (host, Form::Unusual),
            None => (raw, Form::Usual),
        };
        if host.is_empty() || host.len() > MAX_HOST {
            return None;
        }
        return Some((HostName::Lower(host), form));
    }
    normalise_general(raw)
}

/// The bytes of a plain host name, already normal: `a-z 0-9 - . _`.
static PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.' | b'_');
        b += 1;
    }
    t
};

/// [`normalise_with_form`] of any input.
#[inline(never)]
fn normalise_general(raw: &[u8]) -> Option<(HostName<'_>, Form)> {
    let trimmed = raw.trim_ascii();
    let mut form = if trimmed.len() == raw.len() {
        Form::Usual
    } else {
        Form::Unusual
    };
    let raw = match memchr::memrchr(b'@', trimmed) {
        Some(at) => {
            form = Form::Userinfo;
            &trimmed[at + 1..]
        }
        None => trimmed,
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
        let default = matches!(digits, b"" | b"80" | b"443") || digits.first() == Some(&b'0');
        if default && form == Form::Usual {
            form = Form::Unusual;
        }
    }
    let host = match host.strip_suffix(b".") {
        Some(host) => {
            if form == Form::Usual {
                form = Form::Unusual;
            }
            host
        }
        None => host,
    };
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
    if upper && form == Form::Usual {
        form = Form::Unusual;
    }
    let name = if upper {
        HostName::Upper(host)
    } else {
        HostName::Lower(host)
    };
    Some((name, form))
}

/// The authority of an absolute-form target (`http://user@host:port/path`), if it is one.
pub(crate) fn authority_of(target: &[u8]) -> Option<&[u8]> {
    // An origin-form target (`/path`): no scheme starts with `/` (nor is one empty).
    if target.first() == Some(&b'/') {
        return None;
    }
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
            // A port is refused, an IPv6 literal's colons are not (`[::1]`, not `[::1]:80`).
            .filter(|_| !name.contains(':') || (name.starts_with('[') && name.ends_with(']')))
            .ok_or_else(|| {
                format!("`{text}` is not a host name (letters, digits, `-`, `.`; no port)")
            })?;
        let bytes = &normal.to_lower()[..];
        Ok(if wild {
            let mut dotted = Vec::with_capacity(bytes.len() + 1);
            dotted.push(b'.');
            dotted.extend_from_slice(bytes);
            HostPattern::Subdomains(dotted.into())
        } else {
            HostPattern::Exact(bytes.into())
        })
    }

    /// Whether a host name matches (as its ASCII lower case would).
    #[inline]
    pub(crate) fn matches(&self, host: &HostName<'_>) -> bool {
        let (HostName::Lower(name) | HostName::Upper(name)) = *host;
        let eq = |a: &[u8], b: &[u8]| match host {
            HostName::Lower(_) => a == b,
            HostName::Upper(_) => a.eq_ignore_ascii_case(b),
        };
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(h) => eq(name, h),
            HostPattern::Subdomains(suffix) => {
                name.len() > suffix.len() && eq(&name[name.len() - suffix.len()..], suffix)
            }
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
        normalise(raw.as_bytes()).map(|h| String::from_utf8(h.to_lower()).unwrap())
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

    proptest::proptest! {
        /// A name matches a pattern as its lower case does byte for byte.
        #[test]
        fn names_match_as_their_lower_case(
            raw in "[aAbB.]{0,6}",
            pattern in proptest::sample::select(vec!["a", "ab", "a.b", "*.b", "*.ab", "*.a.b", "b.a"]),
        ) {
            let pattern = HostPattern::parse(pattern).unwrap();
            if let Some(name) = normalise(raw.as_bytes()) {
                let lower = name.to_lower();
                let want = match &pattern {
                    HostPattern::Any => true,
                    HostPattern::Exact(h) => **h == *lower,
                    HostPattern::Subdomains(s) => lower.len() > s.len() && lower.ends_with(s),
                };
                proptest::prop_assert_eq!(pattern.matches(&name), want);
            }
        }

        /// The one-pass reading of a plain name answers as the general one, on any bytes.
        #[test]
        fn plain_names_read_alike(raw in proptest::collection::vec(proptest::sample::select(
            b"aZz09-._@:[] \t\x80\x00%".to_vec()), 0..12)) {
            let short = |h: Option<(HostName<'_>, Form)>| h.map(|(h, f)| (h.to_lower(), f));
            proptest::prop_assert_eq!(
                short(normalise_with_form(&raw)),
                short(normalise_general(&raw))
            );
        }
    }

    #[test]
    fn long_plain_names() {
        for n in [252, 253, 254] {
            for name in ["a".repeat(n), format!("{}.", "a".repeat(n))] {
                let short =
                    |h: Option<(HostName<'_>, Form)>| h.map(|(h, f)| (h.to_lower().len(), f));
                assert_eq!(
                    short(normalise_with_form(name.as_bytes())),
                    short(normalise_general(name.as_bytes())),
                    "{n}"
                );
            }
        }
    }

    /// Browsers write a host in lower case, without a trailing dot, userinfo or the default
    /// port; a port of its own is theirs too.
    #[test]
    fn forms() {
        let form = |raw: &str| normalise_with_form(raw.as_bytes()).map(|(_, f)| f);
        for usual in [
            "api.example.com",
            "api.example.com:8443",
            "[::1]:8080",
            "10.0.0.1",
            "[fe80::1]",
        ] {
            assert_eq!(form(usual), Some(Form::Usual), "{usual}");
        }
        for unusual in [
            "API.example.com",
            "api.example.com.",
            "api.example.com:80",
            "api.example.com:443",
            "api.example.com:",
            "api.example.com:0443",
            " api.example.com",
            "[::1]:443",
        ] {
            assert_eq!(form(unusual), Some(Form::Unusual), "{unusual}");
        }
        for userinfo in ["x@api.example.com", "a:b@API.example.com:80"] {
            assert_eq!(form(userinfo), Some(Form::Userinfo), "{userinfo}");
        }
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
        assert_eq!(authority_of(b"//h/x"), None);
        assert_eq!(authority_of(b"/http://h/x"), None);
    }

    #[test]
    fn patterns() {
        let host = |raw: &'static str| normalise(raw.as_bytes()).unwrap();
        let exact = HostPattern::parse("Shop.Example.com").unwrap();
        assert!(exact.matches(&host("shop.example.com")));
        assert!(exact.matches(&host("SHOP.example.Com.")));
        assert!(!exact.matches(&host("www.shop.example.com")));
        assert!(!exact.matches(&host("WWW.shop.example.com")));
        let wild = HostPattern::parse("*.example.com").unwrap();
        assert!(wild.matches(&host("shop.example.com")));
        assert!(wild.matches(&host("a.b.example.com")));
        assert!(wild.matches(&host("A.B.Example.COM:443")));
        assert!(!wild.matches(&host("example.com")));
        assert!(!wild.matches(&host("Example.com")));
        assert!(!wild.matches(&host("badexample.com")));
        assert!(!wild.matches(&host("BADexample.com")));
        let v6 = HostPattern::parse("[2001:db8::1]").unwrap();
        assert!(v6.matches(&host("[2001:DB8::1]:8443")));
        for bad in [
            "shop.example.com:80",
            "*",
            "*.*.com",
            "a/b",
            "",
            "x*.com",
            "[::1]:80",
            "*.[::1]:80",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(exact.specificity() > wild.specificity());
        assert!(wild.specificity() > HostPattern::Any.specificity());
    }
}
