//! Ranges and range sets: validation, membership, and the round-robin order of candidates.
//!
//! Addresses are handled as `u128` numbers inside one family, so stepping and comparing are
//! plain integer operations.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::common::{check_gateway_family, from_num, num};

/// One range: a subnet and the inclusive span `start..=end` to allocate from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// Canonical: the network address, no host bits.
    pub subnet: IpNet,
    pub start: IpAddr,
    pub end: IpAddr,
    /// Never allocated; defaults to the subnet's first address.
    pub gateway: IpAddr,
}

impl Range {
    /// Checks a configured range and fills in the defaults, with the reference's rules:
    /// the subnet must be canonical and leave at least two addresses (so not /31 or /32 for
    /// IPv4, /127 or /128 for IPv6); start defaults to network+1, end to the last address
    /// (for IPv4 the one before broadcast), the gateway to network+1. A gateway must be of the
    /// subnet's family (the reference does not check) but, as there, may lie outside it. An
    /// error starts with the key it is about (`rangeStart: ...`).
    pub fn new(
        subnet: Option<IpNet>,
        start: Option<IpAddr>,
        end: Option<IpAddr>,
        gateway: Option<IpAddr>,
    ) -> Result<Range, String> {
        let subnet = subnet.ok_or("subnet: required, but missing")?;
        let subnet = match subnet {
            IpNet::V6(n) if n.addr().to_ipv4_mapped().is_some() => {
                return Err(format!(
                    "subnet: {subnet} is an IPv4-mapped IPv6 network: write it as IPv4"
                ))
            }
            n => n,
        };
        if subnet.prefix_len() > subnet.max_prefix_len() - 2 {
            return Err(format!(
                "subnet: {subnet} is too small to allocate from: use a prefix length of at most \
                 /{}",
                subnet.max_prefix_len() - 2
            ));
        }
        let network = subnet.network();
        if subnet.addr() != network {
            return Err(format!(
                "subnet: {subnet} has host bits set: for a prefix length of {} the network \
                 address is {network}",
                subnet.prefix_len()
            ));
        }
        let v4 = network.is_ipv4();
        let first = from_num(num(network) + 1, v4);
        let last = if v4 {
            from_num(num(subnet.broadcast()) - 1, v4)
        } else {
            subnet.broadcast()
        };
        let in_subnet = |key: &str, ip: IpAddr| {
            if subnet.contains(&ip) {
                Ok(ip)
            } else {
                Err(format!("{key}: {ip} is not in the subnet {subnet}"))
            }
        };
        let start = start.map_or(Ok(first), |ip| in_subnet("rangeStart", ip))?;
        let end = end.map_or(Ok(last), |ip| in_subnet("rangeEnd", ip))?;
        if num(start) > num(end) {
            return Err(format!(
                "rangeStart: {start} is after rangeEnd {end} in the subnet {subnet}"
            ));
        }
        if let Some(gw) = gateway {
            check_gateway_family(gw, &subnet).map_err(|e| format!("gateway: {e}"))?;
        }
        Ok(Range {
            subnet,
            start,
            end,
            gateway: gateway.unwrap_or(first),
        })
    }

    pub fn is_v4(&self) -> bool {
        self.subnet.addr().is_ipv4()
    }

    /// Whether `ip` is within `start..=end` (same family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.is_v4() && (num(self.start)..=num(self.end)).contains(&num(ip))
    }

    /// Whether `ip` may be handed out: in range, not the gateway, and, for IPv4, not the
    /// network or broadcast address (the reference does hand those out when an explicit
    /// range includes them; no host can use them).
    pub fn is_allocatable(&self, ip: IpAddr) -> bool {
        self.contains(ip) && ip != self.gateway && !self.is_v4_special(ip)
    }

    /// Why a requested address cannot be handed out, if it cannot.
    pub fn refuse_request(&self, ip: IpAddr) -> Option<String> {
        if ip == self.gateway {
            Some(format!("requested ip {ip} is subnet's gateway"))
        } else if self.is_v4_special(ip) {
            Some(format!(
                "requested ip {ip} is the network or broadcast address of {}",
                self.subnet
            ))
        } else {
            None
        }
    }

    fn is_v4_special(&self, ip: IpAddr) -> bool {
        self.is_v4() && (ip == self.subnet.network() || ip == self.subnet.broadcast())
    }

    fn overlaps(&self, other: &Range) -> bool {
        self.is_v4() == other.is_v4()
            && num(self.start) <= num(other.end)
            && num(other.start) <= num(self.end)
    }

    /// How many addresses may be handed out (saturating for a whole IPv6 space).
    pub fn capacity(&self) -> u128 {
        let mut excluded = u128::from(self.contains(self.gateway));
        if self.is_v4() {
            for special in [self.subnet.network(), self.subnet.broadcast()] {
                excluded += u128::from(special != self.gateway && self.contains(special));
            }
        }
        self.span() - excluded
    }

    fn span(&self) -> u128 {
        (num(self.end) - num(self.start)).saturating_add(1)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// A non-empty list of non-overlapping ranges of one family. ADD takes one address from each
/// range set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSet(Vec<Range>);

impl RangeSet {
    pub fn new(ranges: Vec<Range>) -> Result<RangeSet, String> {
        let first = ranges.first().ok_or("empty range set")?;
        if ranges.iter().any(|r| r.is_v4() != first.is_v4()) {
            return Err("mixed address families".into());
        }
        for (i, a) in ranges.iter().enumerate() {
            if let Some(b) = ranges[i + 1..].iter().find(|b| a.overlaps(b)) {
                return Err(format!("ranges {a} and {b} overlap"));
            }
        }
        Ok(RangeSet(ranges))
    }

    #[cfg(test)]
    pub fn ranges(&self) -> &[Range] {
        &self.0
    }

    pub fn is_v4(&self) -> bool {
        self.0[0].is_v4()
    }

    pub fn range_for(&self, ip: IpAddr) -> Option<&Range> {
        self.0.iter().find(|r| r.contains(ip))
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|a| other.0.iter().any(|b| a.overlaps(b)))
    }

    pub fn capacity(&self) -> u128 {
        self.0
            .iter()
            .fold(0u128, |n, r| n.saturating_add(r.capacity()))
    }

    /// Every allocatable address once, round-robin: from the one after `last` (the last
    /// address reserved from this set) around to `last` itself, or from the first range's
    /// start when `last` is not in the set. This is the reference's order.
    pub fn candidates(&self, last: Option<IpAddr>) -> Candidates<'_> {
        let left = self.0.iter().fold(0u128, |n, r| n.saturating_add(r.span()));
        let mut it = Candidates {
            ranges: &self.0,
            index: 0,
            next: num(self.0[0].start),
            left,
        };
        let resume = last.and_then(|ip| Some((self.0.iter().position(|r| r.contains(ip))?, ip)));
        if let Some((index, ip)) = resume {
            it.index = index;
            it.next = num(ip);
            it.step();
        }
        it
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// See [`RangeSet::candidates`]. Yields each address with the range it belongs to.
pub struct Candidates<'a> {
    ranges: &'a [Range],
    index: usize,
    next: u128,
    left: u128,
}

impl Candidates<'_> {
    /// Moves past `next`, wrapping from a range's end to the following range's start.
    fn step(&mut self) {
        let r = &self.ranges[self.index];
        if self.next == num(r.end) {
            self.index = (self.index + 1) % self.ranges.len();
            self.next = num(self.ranges[self.index].start);
        } else {
            self.next += 1;
        }
    }
}

impl<'a> Iterator for Candidates<'a> {
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        while self.left > 0 {
            self.left -= 1;
            let r = &self.ranges[self.index];
            let ip = from_num(self.next, r.is_v4());
            self.step();
            if r.is_allocatable(ip) {
                return Some((ip, r));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn range(subnet: &str, start: Option<&str>, end: Option<&str>) -> Result<Range, String> {
        Range::new(
            Some(subnet.parse().unwrap()),
            start.map(ip),
            end.map(ip),
            None,
        )
    }

    fn all(set: &RangeSet, last: Option<&str>) -> Vec<String> {
        set.candidates(last.map(ip))
            .map(|(a, _)| a.to_string())
            .collect()
    }

    #[test]
    fn defaults_v4() {
        let r = range("10.1.2.0/24", None, None).unwrap();
        assert_eq!(r.start, ip("10.1.2.1"));
        assert_eq!(r.end, ip("10.1.2.254"));
        assert_eq!(r.gateway, ip("10.1.2.1"));
        assert_eq!(r.capacity(), 253);
        assert_eq!(r.to_string(), "10.1.2.1-10.1.2.254");
    }

    #[test]
    fn defaults_v6() {
        let r = range("2001:db8:1::/64", None, None).unwrap();
        assert_eq!(r.start, ip("2001:db8:1::1"));
        assert_eq!(r.end, ip("2001:db8:1::ffff:ffff:ffff:ffff"));
        assert_eq!(r.gateway, ip("2001:db8:1::1"));
    }

    #[test]
    fn too_small() {
        for s in ["10.1.2.0/31", "10.1.2.4/32", "fd00::/127", "fd00::/128"] {
            let e = range(s, None, None).unwrap_err();
            assert!(e.contains("too small"), "{s}: {e}");
        }
        assert!(range("10.1.2.0/30", None, None).is_ok());
        assert!(range("fd00::/126", None, None).is_ok());
    }

    #[test]
    fn host_bits() {
        let e = range("10.1.2.3/24", None, None).unwrap_err();
        assert!(e.contains("host bits set"), "{e}");
        assert!(e.contains("10.1.2.0"), "{e}");
    }

    #[test]
    fn start_end_outside_or_reversed() {
        let e = range("10.1.2.0/24", Some("10.1.3.1"), None).unwrap_err();
        assert_eq!(e, "rangeStart: 10.1.3.1 is not in the subnet 10.1.2.0/24");
        let e = range("10.1.2.0/24", None, Some("10.1.3.1")).unwrap_err();
        assert_eq!(e, "rangeEnd: 10.1.3.1 is not in the subnet 10.1.2.0/24");
        let e = range("10.1.2.0/24", Some("fd00::1"), None).unwrap_err();
        assert!(e.contains("is not in the subnet"), "{e}");
        let e = range("10.1.2.0/24", Some("10.1.2.9"), Some("10.1.2.8")).unwrap_err();
        assert!(e.contains("after"), "{e}");
    }

    #[test]
    fn gateway_family_checked_not_membership() {
        let with_gw = |subnet: &str, gw: &str| {
            Range::new(Some(subnet.parse().unwrap()), None, None, Some(ip(gw)))
        };
        let e = with_gw("10.1.2.0/24", "fd00::1").unwrap_err();
        assert!(e.contains("different address families"), "{e}");
        let e = with_gw("fd00::/64", "10.1.2.1").unwrap_err();
        assert!(e.contains("different address families"), "{e}");
        // Outside the subnet is accepted, as by the reference.
        assert_eq!(
            with_gw("10.1.2.0/24", "10.9.9.1").unwrap().gateway,
            ip("10.9.9.1")
        );
        assert_eq!(
            with_gw("fd00::/64", "fd01::1").unwrap().gateway,
            ip("fd01::1")
        );
    }

    #[test]
    fn missing_subnet_and_mapped() {
        assert!(Range::new(None, None, None, None).is_err());
        let e = range("::ffff:10.1.2.0/120", None, None).unwrap_err();
        assert!(e.contains("IPv4-mapped"), "{e}");
    }

    #[test]
    fn set_rules() {
        let a = range("10.1.2.0/24", None, None).unwrap();
        let b = range("10.1.2.0/24", Some("10.1.2.100"), None).unwrap();
        let c = range("fd00::/64", None, None).unwrap();
        assert_eq!(RangeSet::new(vec![]).unwrap_err(), "empty range set");
        assert_eq!(
            RangeSet::new(vec![a.clone(), c]).unwrap_err(),
            "mixed address families"
        );
        assert_eq!(
            RangeSet::new(vec![a.clone(), b]).unwrap_err(),
            "ranges 10.1.2.1-10.1.2.254 and 10.1.2.100-10.1.2.254 overlap"
        );
        let lo = range("10.1.2.0/24", None, Some("10.1.2.99")).unwrap();
        let hi = range("10.1.2.0/24", Some("10.1.2.100"), None).unwrap();
        assert!(RangeSet::new(vec![lo, hi]).is_ok());
    }

    #[test]
    fn order_from_scratch_skips_gateway() {
        let set = RangeSet::new(vec![range("10.1.2.0/29", None, None).unwrap()]).unwrap();
        assert_eq!(
            all(&set, None),
            ["10.1.2.2", "10.1.2.3", "10.1.2.4", "10.1.2.5", "10.1.2.6"]
        );
    }

    #[test]
    fn order_after_last_wraps_across_ranges() {
        let set = RangeSet::new(vec![
            range("10.1.2.0/29", None, None).unwrap(),
            range("10.1.3.0/29", Some("10.1.3.4"), None).unwrap(),
        ])
        .unwrap();
        assert_eq!(
            all(&set, Some("10.1.2.5")),
            [
                "10.1.2.6", "10.1.3.4", "10.1.3.5", "10.1.3.6", "10.1.2.2", "10.1.2.3", "10.1.2.4",
                "10.1.2.5"
            ]
        );
        // The last address of the last range wraps to the first range.
        assert_eq!(all(&set, Some("10.1.3.6"))[0], "10.1.2.2");
        // An address outside the set restarts from the beginning.
        assert_eq!(all(&set, Some("10.9.9.9"))[0], "10.1.2.2");
    }

    #[test]
    fn explicit_bounds_skip_network_and_broadcast() {
        let r = range("10.1.2.0/30", Some("10.1.2.0"), Some("10.1.2.3")).unwrap();
        assert_eq!(r.capacity(), 1);
        let set = RangeSet::new(vec![r]).unwrap();
        assert_eq!(all(&set, None), ["10.1.2.2"]);
    }

    #[test]
    fn v6_order_and_huge_capacity() {
        let set = RangeSet::new(vec![range("fd00::/64", None, None).unwrap()]).unwrap();
        let first: Vec<_> = set
            .candidates(None)
            .take(2)
            .map(|(a, _)| a.to_string())
            .collect();
        assert_eq!(first, ["fd00::2", "fd00::3"]);
        assert_eq!(set.capacity(), (1u128 << 64) - 2);
    }

    proptest::proptest! {
        /// Each allocatable address comes exactly once, whatever the starting point.
        #[test]
        fn candidates_cover_each_address_once(start in 1u8..60, len in 0u8..20, last in 0u8..=255) {
            let end = start.saturating_add(len).min(254);
            let r = Range::new(
                Some("10.0.0.0/24".parse().unwrap()),
                Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, start))),
                Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, end))),
                None,
            ).unwrap();
            let set = RangeSet::new(vec![r.clone()]).unwrap();
            let got: Vec<IpAddr> = set
                .candidates(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))))
                .map(|(a, _)| a)
                .collect();
            let mut sorted = got.clone();
            sorted.sort();
            sorted.dedup();
            proptest::prop_assert_eq!(sorted.len(), got.len());
            proptest::prop_assert_eq!(got.len() as u128, r.capacity());
        }
    }
}
