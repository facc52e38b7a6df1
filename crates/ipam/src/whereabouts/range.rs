//! whereabouts' ranges: the span a range allocates from, its exclusions, the order in which
//! addresses are tried, and the offsets that name an address inside its pool.
//!
//! Addresses are `u128` numbers inside one family, as in host-local's ranges.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::common::{from_num, num};

/// One entry of `ipRanges` (or the top-level `range`), checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// Canonical: the network address, no host bits. The pool's `spec.range`.
    pub subnet: IpNet,
    /// The inclusive span allocated from.
    pub first: IpAddr,
    pub last: IpAddr,
    /// Never allocated, network and broadcast addresses included.
    pub exclude: Vec<IpNet>,
    /// The prefix length of the addresses handed out: the subnet's, or in node-slice mode the
    /// whole range's.
    pub prefix_len: u8,
}

fn last_of(net: &IpNet) -> u128 {
    num(net.broadcast())
}

impl Range {
    /// A range with the reference's rules: the span runs from the first address after the
    /// network address to the one before the broadcast address (for IPv6 too). `start` and
    /// `end` narrow it when they fall inside that span, and `end` only when it is not below
    /// the start; otherwise the reference ignores them, and so do we, so that a config that
    /// allocates there allocates the same addresses here. The subnet needs at least two
    /// addresses besides those two.
    pub fn new(
        subnet: IpNet,
        start: Option<IpAddr>,
        end: Option<IpAddr>,
        exclude: Vec<IpNet>,
    ) -> Result<Range, String> {
        if let IpNet::V6(n) = subnet {
            if n.addr().to_ipv4_mapped().is_some() {
                return Err(format!(
                    "{subnet} is an IPv4-mapped IPv6 network: write it as IPv4"
                ));
            }
        }
        let subnet = subnet.trunc();
        if subnet.prefix_len() + 1 >= subnet.max_prefix_len() {
            return Err(format!(
                "{subnet} has no usable addresses besides its network and broadcast \
                 addresses: use a prefix length of at most /{}",
                subnet.max_prefix_len() - 2
            ));
        }
        let v4 = subnet.addr().is_ipv4();
        let (usable_first, usable_last) = (num(subnet.network()) + 1, last_of(&subnet) - 1);
        let inside = |ip: IpAddr, from: u128| {
            let n = num(ip);
            ip.is_ipv4() == v4 && n >= from && n <= usable_last
        };
        let first = match start {
            Some(s) if inside(s, usable_first) => num(s),
            _ => usable_first,
        };
        let last = match end {
            Some(e) if inside(e, first) => num(e),
            _ => usable_last,
        };
        for net in &exclude {
            if net.addr().is_ipv4() != v4 {
                return Err(format!(
                    "exclude: {net} is not of the family of the range {subnet}"
                ));
            }
        }
        Ok(Range {
            subnet,
            first: from_num(first, v4),
            last: from_num(last, v4),
            exclude,
            prefix_len: subnet.prefix_len(),
        })
    }

    /// The part of this range inside `slice`, a node's slice of it: offsets count from the
    /// slice's network address and its own network and broadcast addresses are skipped, as in
    /// the reference; the addresses keep the whole range's prefix. The range's exclusions and
    /// its start and end still hold (the reference drops them in node-slice mode, and hands
    /// out addresses the config excludes).
    pub fn within_slice(&self, slice: IpNet) -> Range {
        let (slice_first, slice_last) =
            (num(slice.network()) + 1, last_of(&slice).saturating_sub(1));
        let v4 = self.is_v4();
        Range {
            subnet: slice,
            first: from_num(slice_first.max(num(self.first)), v4),
            last: from_num(slice_last.min(num(self.last)), v4),
            exclude: self.exclude.clone(),
            prefix_len: self.prefix_len,
        }
    }

    pub fn is_v4(&self) -> bool {
        self.subnet.addr().is_ipv4()
    }

    /// The address at `offset` from the network address, if it lies in the subnet.
    pub fn ip_at(&self, offset: u128) -> Option<IpAddr> {
        let n = num(self.subnet.network()).checked_add(offset)?;
        (n <= last_of(&self.subnet)).then(|| from_num(n, self.is_v4()))
    }

    /// The offset of `ip` from the network address: the key of its allocation in the pool.
    pub fn offset_of(&self, ip: IpAddr) -> Option<u128> {
        self.subnet
            .contains(&ip)
            .then(|| num(ip) - num(self.subnet.network()))
    }

    /// The addresses that may be handed out, lowest first: inside the span, not excluded, and
    /// not in `taken` (offsets). Lazy, so a /64 costs nothing until it is walked.
    pub fn candidates<'a>(&'a self, taken: &'a HashSet<u128>) -> impl Iterator<Item = IpAddr> + 'a {
        let network = num(self.subnet.network());
        let (first, last) = (num(self.first), num(self.last));
        let mut next = Some(first);
        std::iter::from_fn(move || loop {
            let n = next.filter(|&n| n <= last)?;
            next = n.checked_add(1);
            if let Some(net) = self.exclude.iter().find(|x| {
                let x_first = num(x.network());
                x_first <= n && n <= last_of(x)
            }) {
                // Jump past the whole excluded subnet.
                next = last_of(net).checked_add(1);
                continue;
            }
            if taken.contains(&(n - network)) {
                continue;
            }
            return Some(from_num(n, self.is_v4()));
        })
    }
}

impl fmt::Display for Range {
    /// `10.1.2.0/24 (10.1.2.1 to 10.1.2.254, excluding 10.1.2.0/28)`: what an error shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} to {}", self.subnet, self.first, self.last)?;
        if !self.exclude.is_empty() {
            let list: Vec<String> = self.exclude.iter().map(ToString::to_string).collect();
            write!(f, ", excluding {}", list.join(", "))?;
        }
        write!(f, ")")
    }
}

/// An `exclude` entry: a CIDR (host bits dropped, as the reference's parser does) or a plain
/// address, which means that one address.
pub fn parse_exclude(s: &str) -> Result<IpNet, String> {
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    match s.parse::<IpAddr>() {
        Ok(ip) => Ok(IpNet::from(ip.to_canonical())),
        Err(_) => Err(format!(
            "{} is neither a CIDR nor an IP address",
            cni::quote::quote(s)
        )),
    }
}

/// `range`: a CIDR, or `A-B/prefix`, which sets the span to A..B inside B's subnet. Returns the
/// subnet, and the start and end the dash form gives.
pub fn parse_range(s: &str) -> Result<(IpNet, Option<IpAddr>, Option<IpAddr>), String> {
    let bad = |why: &str| format!("{} is not {why}", cni::quote::quote(s));
    match s.split_once('-') {
        Some((start, end)) => {
            let start: IpAddr = start.trim().parse().map_err(|_| {
                bad("a range like 10.1.2.10-10.1.2.20/24: its start is not an IP address")
            })?;
            let end: IpNet = end
                .trim()
                .parse()
                .map_err(|_| bad("a range like 10.1.2.10-10.1.2.20/24: its end is not an address with a prefix length"))?;
            let subnet = end.trunc();
            let start = start.to_canonical();
            if !subnet.contains(&start) {
                return Err(format!(
                    "{}: its start {start} is outside {subnet}",
                    cni::quote::quote(s)
                ));
            }
            Ok((subnet, Some(start), Some(end.addr())))
        }
        None => {
            let net: IpNet = s.trim().parse().map_err(|_| {
                bad("a CIDR like 10.1.2.0/24 or a range like 10.1.2.10-10.1.2.20/24")
            })?;
            Ok((net, None, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn range(subnet: &str, start: Option<&str>, end: Option<&str>, exclude: &[&str]) -> Range {
        Range::new(
            net(subnet),
            start.map(ip),
            end.map(ip),
            exclude.iter().map(|e| parse_exclude(e).unwrap()).collect(),
        )
        .unwrap()
    }

    #[test]
    fn the_span_and_the_bounds_the_reference_ignores() {
        let r = range("10.1.2.0/24", None, None, &[]);
        assert_eq!((r.first, r.last), (ip("10.1.2.1"), ip("10.1.2.254")));
        let r = range("10.1.2.0/24", Some("10.1.2.10"), Some("10.1.2.20"), &[]);
        assert_eq!((r.first, r.last), (ip("10.1.2.10"), ip("10.1.2.20")));
        // Outside the span, or an end below the start: ignored.
        let r = range("10.1.2.0/24", Some("10.1.3.10"), Some("10.1.2.0"), &[]);
        assert_eq!((r.first, r.last), (ip("10.1.2.1"), ip("10.1.2.254")));
        let r = range("10.1.2.0/24", Some("10.1.2.50"), Some("10.1.2.40"), &[]);
        assert_eq!((r.first, r.last), (ip("10.1.2.50"), ip("10.1.2.254")));
        // Host bits are dropped; IPv6 also loses its last address.
        let r = range("fd00::6/126", None, None, &[]);
        assert_eq!(r.subnet, net("fd00::4/126"));
        assert_eq!((r.first, r.last), (ip("fd00::5"), ip("fd00::6")));
        assert!(Range::new(net("10.1.2.0/31"), None, None, vec![])
            .unwrap_err()
            .contains("at most /30"));
        assert!(Range::new(net("fd00::/127"), None, None, vec![]).is_err());
        assert!(Range::new(net("::ffff:10.0.0.0/120"), None, None, vec![]).is_err());
        assert!(Range::new(net("10.1.2.0/24"), None, None, vec![net("fd00::/64")]).is_err());
    }

    #[test]
    fn candidates_skip_exclusions_and_taken_offsets() {
        let r = range("10.1.2.0/28", None, None, &["10.1.2.0/30", "10.1.2.6"]);
        let taken: HashSet<u128> = [5].into();
        let got: Vec<IpAddr> = r.candidates(&taken).collect();
        let want: Vec<IpAddr> = [4]
            .into_iter()
            .chain(7..=14)
            .map(|i| ip(&format!("10.1.2.{i}")))
            .collect();
        assert_eq!(got, want);
        // An exclusion at the very top of the address space does not wrap.
        let r = range("255.255.255.0/24", None, None, &["255.255.255.128/25"]);
        assert_eq!(r.candidates(&HashSet::new()).count(), 127);
        // A /64 is walked lazily.
        let r = range("fd00::/64", None, None, &[]);
        assert_eq!(r.candidates(&HashSet::new()).nth(2), Some(ip("fd00::3")));
    }

    #[test]
    fn offsets_are_from_the_network_address() {
        let r = range("10.77.0.0/24", None, None, &[]);
        assert_eq!(r.offset_of(ip("10.77.0.5")), Some(5));
        assert_eq!(r.ip_at(5), Some(ip("10.77.0.5")));
        assert_eq!(r.ip_at(256), None);
        assert_eq!(r.offset_of(ip("10.78.0.5")), None);
        let r = range("fd77:3::/64", None, None, &[]);
        assert_eq!(r.offset_of(ip("fd77:3::1:0")), Some(65536));
        assert_eq!(r.ip_at(u128::MAX), None);
    }

    #[test]
    fn range_forms() {
        assert_eq!(
            parse_range("10.1.2.10-10.1.2.20/24").unwrap(),
            (
                net("10.1.2.0/24"),
                Some(ip("10.1.2.10")),
                Some(ip("10.1.2.20"))
            )
        );
        assert_eq!(
            parse_range("10.1.2.0/24").unwrap(),
            (net("10.1.2.0/24"), None, None)
        );
        assert!(parse_range("10.1.3.10-10.1.2.20/24")
            .unwrap_err()
            .contains("outside 10.1.2.0/24"));
        assert!(parse_range("10.1.2.0")
            .unwrap_err()
            .contains("is not a CIDR"));
        assert!(parse_range("x-10.1.2.20/24").is_err());
        assert_eq!(parse_exclude("10.1.2.7").unwrap(), net("10.1.2.7/32"));
        assert_eq!(parse_exclude("10.1.2.7/30").unwrap(), net("10.1.2.4/30"));
        assert_eq!(parse_exclude("fd00::1").unwrap(), net("fd00::1/128"));
        assert!(parse_exclude("nope").is_err());
    }

    proptest::proptest! {
        /// Every candidate is inside the span, outside every exclusion, not taken, and the
        /// candidates rise; every address that qualifies is among them.
        #[test]
        fn candidates_are_exactly_the_free_addresses(
            prefix in 24u8..=29,
            start in proptest::option::of(0u8..=255),
            end in proptest::option::of(0u8..=255),
            excluded in proptest::collection::vec((0u8..=255, 26u8..=32), 0..4),
            taken in proptest::collection::hash_set(0u128..256, 0..40),
        ) {
            let at = |n: u8| IpAddr::V4(Ipv4Addr::new(10, 9, 0, n));
            let subnet = IpNet::new(at(0), prefix).unwrap();
            let exclude: Vec<IpNet> =
                excluded.iter().map(|&(n, p)| IpNet::new(at(n), p).unwrap().trunc()).collect();
            let r = Range::new(subnet, start.map(at), end.map(at), exclude.clone()).unwrap();
            let got: Vec<IpAddr> = r.candidates(&taken).collect();
            let want: Vec<IpAddr> = (num(r.first)..=num(r.last))
                .map(|n| from_num(n, true))
                .filter(|ip| !exclude.iter().any(|x| x.contains(ip)))
                .filter(|ip| !taken.contains(&r.offset_of(*ip).unwrap()))
                .collect();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(subnet.trunc().contains(&r.first) && r.first <= r.last);
        }
    }
}
