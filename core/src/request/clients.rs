//! Client addresses: CIDR blocks of rule conditions, and who the client is behind trusted
//! proxies.

use std::net::IpAddr;

use ipnet::IpNet;

/// A list of CIDR blocks, IPv4 and IPv6.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrSet {
    blocks: Box<[IpNet]>,
}

impl CidrSet {
    /// Blocks from text (`10.0.0.0/8`, `2001:db8::/32`, or a single address); the error names
    /// the entry and what is wrong.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let blocks = entries
            .iter()
            .map(|e| {
                let e = e.as_ref();
                e.parse::<IpNet>()
                    .map(|n| canonical_net(n.trunc()))
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!(
                            "`{e}` is not an address or a CIDR block (`10.0.0.0/8`, \
                             `2001:db8::/32`, `192.0.2.7`)"
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            blocks: blocks.into(),
        })
    }

    /// Whether the set holds no block.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Whether `addr` is in a block (an IPv4 address mapped into IPv6, `::ffff:a.b.c.d`, as
    /// the IPv4 address).
    #[inline]
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        self.blocks.iter().any(|b| b.contains(&addr))
    }
}

/// `net`, a block of IPv4-mapped IPv6 addresses (`::ffff:10.0.0.0/104`) as the IPv4 block
/// (`10.0.0.0/8`): clients are compared as IPv4 (see [`canonical`]).
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, IpNet::V4),
            None => net,
        },
        net => net,
    }
}

/// A peer's address as a server reports it: an IPv6 one may carry its zone
/// (`fe80::1%eth0`, which addresses carry for link-local peers), dropped here; `None` for
/// anything that is not an address (the client is then unknown).
pub fn parse_peer(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let bare = match text.split_once('%') {
        Some((addr, _zone)) if addr.contains(':') => addr,
        _ => text,
    };
    bare.parse().ok()
}

/// `addr`, an IPv4-mapped IPv6 address as IPv4.
pub(crate) fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// The client of a request that reached us from `peer`, believing `X-Forwarded-For` only from
/// `trusted` proxies: walking the addresses from the nearest, the first that is not a trusted
/// proxy (nginx's `real_ip_recursive on`). `None` when an address a trusted proxy passed on
/// is not an address (the client is then unknown: rules that let pass do not match it).
/// `forwarded` holds each `X-Forwarded-For` header's value, in the order received.
pub fn client_address<'h>(
    peer: IpAddr,
    forwarded: impl DoubleEndedIterator<Item = &'h [u8]>,
    trusted: &CidrSet,
) -> Option<IpAddr> {
    let mut client = canonical(peer);
    if trusted.is_empty() || !trusted.contains(client) {
        return Some(client);
    }
    for header in forwarded.rev() {
        for hop in header.rsplit(|&b| b == b',') {
            let hop = hop.trim_ascii();
            if hop.is_empty() {
                continue;
            }
            let addr = parse_hop(hop)?;
            client = canonical(addr);
            if !trusted.contains(client) {
                return Some(client);
            }
        }
    }
    Some(client)
}

/// One `X-Forwarded-For` entry: an address, an IPv6 one possibly in brackets, either with a
/// port.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?;
    if let Ok(a) = text.parse::<IpAddr>() {
        return Some(a);
    }
    if let Ok(s) = text.parse::<std::net::SocketAddr>() {
        return Some(s.ip());
    }
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.parse().ok())
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_hold_v4_v6_and_mapped() {
        let set =
            CidrSet::parse(&["10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "10.1.2.3/8"]).unwrap();
        assert!(set.contains(ip("10.200.0.1")));
        assert!(set.contains(ip("::ffff:10.0.0.1")));
        assert!(set.contains(ip("2001:db8::5")));
        assert!(set.contains(ip("192.0.2.7")));
        let mapped = CidrSet::parse(&["::ffff:10.0.0.0/104"]).unwrap();
        assert!(mapped.contains(ip("10.1.2.3")) && mapped.contains(ip("::ffff:10.1.2.3")));
        assert_eq!(parse_peer("fe80::1%eth0"), Some(ip("fe80::1")));
        assert_eq!(parse_peer("::ffff:127.0.0.1"), Some(ip("::ffff:127.0.0.1")));
        assert_eq!(parse_peer("nonsense"), None);
        assert!(!set.contains(ip("192.0.2.8")));
        assert!(!set.contains(ip("11.0.0.1")));
        let e = CidrSet::parse(&["10.0.0.0/33"]).unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
        assert!(CidrSet::parse(&["example.com"]).is_err());
    }

    #[test]
    fn the_client_is_the_first_untrusted_hop() {
        let trusted = CidrSet::parse(&["10.0.0.0/8"]).unwrap();
        let xff = |v: &[&'static str]| v.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        // An untrusted peer: its header is not believed.
        assert_eq!(
            client_address(ip("203.0.113.9"), xff(&["10.0.0.1"]).into_iter(), &trusted),
            Some(ip("203.0.113.9"))
        );
        // Through two trusted proxies.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                xff(&["198.51.100.1, 203.0.113.5, 10.0.0.1"]).into_iter(),
                &trusted
            ),
            Some(ip("203.0.113.5"))
        );
        // Split headers read as one list, last hop last.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                xff(&["198.51.100.1", "10.0.0.9"]).into_iter(),
                &trusted
            ),
            Some(ip("198.51.100.1"))
        );
        // Ports and brackets.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                xff(&["[2001:db8::1]:443"]).into_iter(),
                &trusted
            ),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(
            client_address(ip("10.0.0.2"), xff(&["192.0.2.1:80"]).into_iter(), &trusted),
            Some(ip("192.0.2.1"))
        );
        // Garbage from a trusted hop: unknown.
        assert_eq!(
            client_address(ip("10.0.0.2"), xff(&["unknown"]).into_iter(), &trusted),
            None
        );
        // Every hop trusted: the farthest.
        assert_eq!(
            client_address(ip("10.0.0.2"), xff(&["10.9.9.9"]).into_iter(), &trusted),
            Some(ip("10.9.9.9"))
        );
        // No trusted proxies: the peer.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                xff(&["1.2.3.4"]).into_iter(),
                &CidrSet::default()
            ),
            Some(ip("10.0.0.2"))
        );
    }
}
