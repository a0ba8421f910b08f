//! Client addresses: CIDR blocks of rule conditions, and who the client is behind trusted
//! proxies.

use std::net::IpAddr;

use ipnet::IpNet;

/// A list of CIDR blocks, IPv4 and IPv6.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrSet {
    blocks: Box<[IpNet]>,
    /// The same blocks as masks over a 128-bit key (see [`AddressKey`]): a test is an AND
    /// and a comparison, where `IpNet::contains` builds each block's masks per call.
    keys: Box<[Block]>,
}

/// One block, compiled: a key of its family is in it when `key & mask == net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    net: u128,
    mask: u128,
    v4: bool,
}

/// An address as one number and its family: IPv6 as itself, IPv4 (and IPv4-mapped IPv6, see
/// [`canonical`]) in the low 32 bits. Worked out once per request, then tested against every
/// block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AddressKey {
    value: u128,
    v4: bool,
}

impl AddressKey {
    /// `addr`'s key.
    #[inline]
    pub(crate) fn of(addr: IpAddr) -> Self {
        match canonical(addr) {
            IpAddr::V4(v4) => Self {
                value: u128::from(u32::from(v4)),
                v4: true,
            },
            IpAddr::V6(v6) => Self {
                value: u128::from(v6),
                v4: false,
            },
        }
    }
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
            keys: blocks.iter().map(block_of).collect(),
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
        self.contains_key(AddressKey::of(addr))
    }

    /// [`CidrSet::contains`] for an address whose key was worked out already.
    #[inline]
    pub(crate) fn contains_key(&self, key: AddressKey) -> bool {
        self.keys
            .iter()
            .any(|b| b.v4 == key.v4 && key.value & b.mask == b.net)
    }
}

/// `net`, compiled.
fn block_of(net: &IpNet) -> Block {
    match net {
        IpNet::V4(v4) => Block {
            net: u128::from(u32::from(v4.network())),
            mask: u128::from(u32::from(v4.netmask())),
            v4: true,
        },
        IpNet::V6(v6) => {
            let mask = u128::from(v6.netmask());
            Block {
                net: u128::from(v6.network()) & mask,
                mask,
                v4: false,
            }
        }
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

    proptest::proptest! {
        /// The compiled blocks answer as `ipnet` does, the families kept apart (an IPv6
        /// address whose low 32 bits look like a block's IPv4 address is not in it; `::/0`
        /// holds no IPv4 client), IPv4-mapped addresses as IPv4.
        #[test]
        fn compiled_blocks_agree_with_ipnet(
            v4 in proptest::prelude::any::<[u8; 4]>(),
            v6 in proptest::prelude::any::<[u8; 16]>(),
            net4 in proptest::prelude::any::<[u8; 4]>(),
            net6 in proptest::prelude::any::<[u8; 16]>(),
            len4 in 0u8..=32,
            len6 in 0u8..=128,
            near in proptest::prelude::any::<bool>(),
        ) {
            let mut v4 = std::net::Ipv4Addr::from(v4);
            let mut v6 = std::net::Ipv6Addr::from(v6);
            if near {
                // Inside or next to the blocks, where the masks decide.
                v4 = std::net::Ipv4Addr::from(u32::from_be_bytes(net4) ^ 1);
                v6 = std::net::Ipv6Addr::from(u128::from_be_bytes(net6) ^ 1);
            }
            let blocks = [
                IpNet::V4(ipnet::Ipv4Net::new(net4.into(), len4).unwrap().trunc()),
                IpNet::V6(ipnet::Ipv6Net::new(net6.into(), len6).unwrap().trunc()),
            ];
            let texts: Vec<String> = blocks.iter().map(ToString::to_string).collect();
            let set = CidrSet::parse(&texts).unwrap();
            for addr in [IpAddr::V4(v4), IpAddr::V6(v6), IpAddr::V6(v4.to_ipv6_mapped())] {
                let want = set.blocks.iter().any(|b| b.contains(&canonical(addr)));
                proptest::prop_assert_eq!(set.contains(addr), want, "{} in {:?}", addr, texts);
            }
        }
    }

    #[test]
    fn families_stay_apart() {
        let v4 = CidrSet::parse(&["10.0.0.0/8"]).unwrap();
        assert!(!v4.contains(ip("::a00:1")));
        assert!(!v4.contains(ip("8000::a00:1")));
        let all6 = CidrSet::parse(&["::/0"]).unwrap();
        assert!(!all6.contains(ip("10.0.0.1")) && all6.contains(ip("2001:db8::1")));
        let all4 = CidrSet::parse(&["0.0.0.0/0"]).unwrap();
        assert!(all4.contains(ip("10.0.0.1")) && !all4.contains(ip("2001:db8::1")));
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
