//! The address conflict probe: before an interface takes its addresses, ask its link whether
//! another host already holds one of them.
//! - IPv4: an ARP probe (RFC 5227): sender address 0.0.0.0, so no neighbour learns anything
//!   from it. Any ARP from the address, or another host's probe for it, is a conflict.
//! - IPv6: a duplicate address detection solicitation (RFC 4862): from `::` to the target's
//!   solicited-node group. An advertisement for the target, or another host's solicitation
//!   for it, is a conflict.
//!
//! One probe per address, all at once, then one bounded wait: the probe is for a pod's ADD,
//! where RFC 5227's three probes over seconds would be too slow.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::packet::{checksum, PacketSocket, BROADCAST_MAC, ETH_P_ARP, ETH_P_IPV6};

/// An address another host answered for: the address and that host's MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub address: IpAddr,
    pub mac: [u8; 6],
}

/// What a received packet, and the MAC it came from, shows.
type ReadConflict<'a> = dyn Fn(&[u8], [u8; 6]) -> Option<Conflict> + 'a;

const ARP_REQUEST: u16 = 1;
const ARP_LEN: usize = 28;
const IPV6_HEADER: usize = 40;
const ICMPV6: u8 = 58;
const NEIGHBOR_SOLICITATION: u8 = 135;
const NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// The target link-layer address option of an advertisement.
const TARGET_LINK_ADDRESS: u8 = 2;

/// Probes `addresses` on the interface `ifindex` of the calling thread's namespace, from
/// `own_mac`, and waits up to `wait` for answers. The interface must be up. Returns the
/// addresses another host holds, each once, with the MAC that answered first.
pub fn conflicts(
    ifindex: u32,
    own_mac: [u8; 6],
    addresses: &[IpAddr],
    wait: Duration,
) -> io::Result<Vec<Conflict>> {
    let (mut v4, mut v6) = (Vec::<Ipv4Addr>::new(), Vec::<Ipv6Addr>::new());
    for a in addresses {
        match a {
            IpAddr::V4(a) => v4.push(*a),
            IpAddr::V6(a) => v6.push(*a),
        }
    }
    let deadline = Instant::now() + wait;
    // Both sockets are bound before the first probe leaves, so no early answer is missed.
    let arp = if v4.is_empty() {
        None
    } else {
        Some(PacketSocket::open(ifindex, ETH_P_ARP)?)
    };
    let ip6 = if v6.is_empty() {
        None
    } else {
        let s = PacketSocket::open(ifindex, ETH_P_IPV6)?;
        s.all_multicast()?;
        Some(s)
    };
    if let Some(arp) = &arp {
        for a in &v4 {
            arp.send(&BROADCAST_MAC, &arp_probe(own_mac, *a))?;
        }
    }
    if let Some(ip6) = &ip6 {
        for a in &v6 {
            ip6.send(&solicited_node_mac(*a), &dad_solicitation(*a))?;
        }
    }
    let mut found: Vec<Conflict> = Vec::new();
    let mut buf = [0u8; 1500];
    while found.len() < addresses.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !readable(&[arp.as_ref(), ip6.as_ref()], left)? {
            break;
        }
        let mut drain =
            |socket: Option<&PacketSocket>, parse: &ReadConflict<'_>| -> io::Result<()> {
                let Some(socket) = socket else { return Ok(()) };
                // A host flooding the link must not hold the probe past its deadline.
                while Instant::now() < deadline {
                    match socket.recv(&mut buf) {
                        Ok(Some((n, from))) => {
                            let new = parse(&buf[..n.min(buf.len())], from)
                                .filter(|c| found.iter().all(|f| f.address != c.address));
                            found.extend(new);
                        }
                        Ok(None) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            };
        drain(arp.as_ref(), &|p, _| arp_conflict(p, addresses, own_mac))?;
        drain(ip6.as_ref(), &|p, from| {
            dad_conflict(p, from, addresses, own_mac)
        })?;
    }
    Ok(found)
}

/// Waits up to `wait` for one of `sockets` to be readable.
fn readable(sockets: &[Option<&PacketSocket>], wait: Duration) -> io::Result<bool> {
    let mut fds: Vec<libc::pollfd> = sockets
        .iter()
        .flatten()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Rounded up, so a wait of less than a millisecond still waits.
    let ms = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    let count = libc::nfds_t::try_from(fds.len()).unwrap_or(0);
    // SAFETY: `fds` is a valid array of `count` pollfd for the duration of the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), count, ms) };
    match n {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(true)
            } else {
                Err(e)
            }
        }
    }
}

/// An ARP probe for `target`, from `own_mac` and the address 0.0.0.0.
fn arp_probe(own_mac: [u8; 6], target: Ipv4Addr) -> Vec<u8> {
    let mut p = Vec::with_capacity(ARP_LEN);
    p.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]); // Ethernet, IPv4, their lengths
    p.extend_from_slice(&ARP_REQUEST.to_be_bytes());
    p.extend_from_slice(&own_mac);
    p.extend_from_slice(&[0; 4]);
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&target.octets());
    p
}

/// The conflict an ARP packet shows, if any: the sender holds one of `addresses`, or another
/// host probes for one of them.
fn arp_conflict(packet: &[u8], addresses: &[IpAddr], own_mac: [u8; 6]) -> Option<Conflict> {
    if packet.len() < ARP_LEN || packet[..6] != [0, 1, 0x08, 0x00, 6, 4] {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&packet[8..14]);
    let sender = Ipv4Addr::new(packet[14], packet[15], packet[16], packet[17]);
    let target = Ipv4Addr::new(packet[24], packet[25], packet[26], packet[27]);
    let op = u16::from_be_bytes([packet[6], packet[7]]);
    let held = |a: Ipv4Addr| addresses.contains(&IpAddr::V4(a));
    let address = if held(sender) {
        sender
    } else if sender.is_unspecified() && op == ARP_REQUEST && held(target) && mac != own_mac {
        target
    } else {
        return None;
    };
    Some(Conflict {
        address: address.into(),
        mac,
    })
}

/// A duplicate address detection solicitation for `target`: from `::` to its solicited-node
/// group.
fn dad_solicitation(target: Ipv6Addr) -> Vec<u8> {
    let dst = solicited_node(target);
    let mut icmp = vec![NEIGHBOR_SOLICITATION, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    let len = u32::try_from(icmp.len()).unwrap_or(0);
    let mut pseudo = Vec::with_capacity(40);
    pseudo.extend_from_slice(&Ipv6Addr::UNSPECIFIED.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&len.to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, ICMPV6]);
    let sum = checksum(&[&pseudo, &icmp]);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let mut p = Vec::with_capacity(IPV6_HEADER + icmp.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&u16::try_from(icmp.len()).unwrap_or(0).to_be_bytes());
    p.extend_from_slice(&[ICMPV6, 255]); // neighbour discovery's hop limit
    p.extend_from_slice(&Ipv6Addr::UNSPECIFIED.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&icmp);
    p
}

/// `ff02::1:ffXX:XXXX`, the group of every address ending in `target`'s last 24 bits.
fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let t = target.octets();
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xff, 0x02]);
    g[11..13].copy_from_slice(&[0x01, 0xff]);
    g[13..].copy_from_slice(&t[13..]);
    Ipv6Addr::from(g)
}

/// The Ethernet group of [`solicited_node`]: `33:33` and the group's last 32 bits.
fn solicited_node_mac(target: Ipv6Addr) -> [u8; 6] {
    let g = solicited_node(target).octets();
    [0x33, 0x33, g[12], g[13], g[14], g[15]]
}

/// The conflict an IPv6 packet shows, if any: an advertisement for one of `addresses`, or
/// another host's duplicate address detection for one of them.
fn dad_conflict(
    packet: &[u8],
    from: [u8; 6],
    addresses: &[IpAddr],
    own_mac: [u8; 6],
) -> Option<Conflict> {
    // Neighbour discovery comes with no extension headers and a hop limit of 255.
    if packet.len() < IPV6_HEADER + 24
        || packet[0] >> 4 != 6
        || packet[6] != ICMPV6
        || packet[7] != 255
    {
        return None;
    }
    let icmp = &packet[IPV6_HEADER..];
    let target: [u8; 16] = icmp[8..24].try_into().ok()?;
    let target = Ipv6Addr::from(target);
    if !addresses.contains(&IpAddr::V6(target)) {
        return None;
    }
    let source: [u8; 16] = packet[8..24].try_into().ok()?;
    match icmp[0] {
        NEIGHBOR_ADVERTISEMENT => {
            // The advertised link-layer address when given, else the frame's sender.
            let mac = icmp[24..]
                .chunks(8)
                .find(|o| o.len() == 8 && o[0] == TARGET_LINK_ADDRESS && o[1] == 1)
                .and_then(|o| <[u8; 6]>::try_from(&o[2..8]).ok())
                .unwrap_or(from);
            Some(Conflict {
                address: target.into(),
                mac,
            })
        }
        NEIGHBOR_SOLICITATION if Ipv6Addr::from(source).is_unspecified() && from != own_mac => {
            Some(Conflict {
                address: target.into(),
                mac: from,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const OTHER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn v4(a: &str) -> IpAddr {
        a.parse().expect("an address")
    }

    #[test]
    fn an_arp_probe_says_nothing_of_its_sender() {
        let p = arp_probe(OWN, Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(p.len(), ARP_LEN);
        assert_eq!(&p[8..14], &OWN);
        assert_eq!(&p[14..18], &[0; 4], "sender address 0.0.0.0");
        assert_eq!(&p[24..28], &[10, 0, 0, 5]);
    }

    #[test]
    fn arp_from_the_address_or_another_probe_for_it_is_a_conflict() {
        let wanted = [v4("10.0.0.5")];
        // A reply from the holder: sender 10.0.0.5.
        let mut reply = arp_probe(OTHER, Ipv4Addr::new(0, 0, 0, 0));
        reply[6..8].copy_from_slice(&2u16.to_be_bytes());
        reply[14..18].copy_from_slice(&[10, 0, 0, 5]);
        assert_eq!(
            arp_conflict(&reply, &wanted, OWN),
            Some(Conflict {
                address: wanted[0],
                mac: OTHER
            })
        );
        // Another host probing for it at the same time.
        let theirs = arp_probe(OTHER, Ipv4Addr::new(10, 0, 0, 5));
        assert!(arp_conflict(&theirs, &wanted, OWN).is_some());
        // Our own probe, and talk about other addresses, are not.
        let ours = arp_probe(OWN, Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(arp_conflict(&ours, &wanted, OWN), None);
        let other = arp_probe(OTHER, Ipv4Addr::new(10, 0, 0, 6));
        assert_eq!(arp_conflict(&other, &wanted, OWN), None);
        assert_eq!(arp_conflict(&reply[..20], &wanted, OWN), None);
    }

    #[test]
    fn a_dad_solicitation_goes_to_the_solicited_node_group_with_its_checksum() {
        let target: Ipv6Addr = "fd00::12:3456".parse().expect("an address");
        let p = dad_solicitation(target);
        assert_eq!(p.len(), IPV6_HEADER + 24);
        assert_eq!(
            Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).expect("16 bytes")),
            "ff02::1:ff12:3456".parse::<Ipv6Addr>().expect("an address")
        );
        assert_eq!(
            solicited_node_mac(target),
            [0x33, 0x33, 0xff, 0x12, 0x34, 0x56]
        );
        // With its checksum in place, the pseudo-header and message sum to zero.
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[8..40]);
        pseudo.extend_from_slice(&24u32.to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, ICMPV6]);
        assert_eq!(checksum(&[&pseudo, &p[IPV6_HEADER..]]), 0);
    }

    #[test]
    fn an_advertisement_or_another_dad_for_the_address_is_a_conflict() {
        let target: Ipv6Addr = "fd00::5".parse().expect("an address");
        let wanted = [IpAddr::V6(target)];
        let mut na = dad_solicitation(target);
        na[IPV6_HEADER] = NEIGHBOR_ADVERTISEMENT;
        na.extend_from_slice(&[TARGET_LINK_ADDRESS, 1]);
        na.extend_from_slice(&[2, 0, 0, 0, 0, 9]);
        let c = dad_conflict(&na, OTHER, &wanted, OWN).expect("a conflict");
        assert_eq!(
            c.mac,
            [2, 0, 0, 0, 0, 9],
            "the advertised MAC, not the frame's"
        );
        let theirs = dad_solicitation(target);
        assert_eq!(
            dad_conflict(&theirs, OTHER, &wanted, OWN).map(|c| c.mac),
            Some(OTHER)
        );
        assert_eq!(dad_conflict(&theirs, OWN, &wanted, OWN), None, "our own");
        let other = dad_solicitation("fd00::6".parse().expect("an address"));
        assert_eq!(dad_conflict(&other, OTHER, &wanted, OWN), None);
        let mut routed = na.clone();
        routed[7] = 64;
        assert_eq!(
            dad_conflict(&routed, OTHER, &wanted, OWN),
            None,
            "not on-link"
        );
    }
}
