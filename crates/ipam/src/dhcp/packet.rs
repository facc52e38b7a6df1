//! The IPv4/UDP framing of the DHCP exchange, sent and read on a link-layer socket
//! ([`netkit::packet::PacketSocket`] for IPv4).
//!
//! Before the interface has an address, a server may unicast its reply to the offered address;
//! the kernel's UDP stack drops that, a packet socket still sees it. Sending through the same
//! socket needs no address and no route in the pod either, so one mechanism serves every state:
//! broadcast before the lease, unicast to the server's MAC (learnt from its reply) after.

use std::io;
use std::net::Ipv4Addr;

use netkit::packet::checksum;

/// UDP ports of the DHCP server and client.
pub const SERVER_PORT: u16 = 67;
pub const CLIENT_PORT: u16 = 68;

const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMP: u8 = 1;
const ICMP_ECHO_REQUEST: u8 = 8;
const ICMP_ECHO_REPLY: u8 = 0;
const IPV4_HEADER: usize = 20;
const UDP_HEADER: usize = 8;

/// An IPv4 header and a UDP header (client port to server port) around `payload`; an error if
/// it does not fit one IPv4 packet.
pub fn udp_packet(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> io::Result<Vec<u8>> {
    let udp_len = length_field(UDP_HEADER + payload.len())?;
    let mut udp = Vec::with_capacity(usize::from(udp_len));
    udp.extend_from_slice(&CLIENT_PORT.to_be_bytes());
    udp.extend_from_slice(&SERVER_PORT.to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, IPPROTO_UDP]);
    pseudo.extend_from_slice(&udp_len.to_be_bytes());
    let sum = match checksum(&[&pseudo, &udp]) {
        0 => 0xffff, // RFC 768: a computed zero is sent as all ones.
        s => s,
    };
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
    ipv4_packet(src, dst, IPPROTO_UDP, &udp)
}

/// An ICMP echo request from `src` to `dst`, identified by `id`.
pub fn echo_request(src: Ipv4Addr, dst: Ipv4Addr, id: u16) -> io::Result<Vec<u8>> {
    let mut icmp = vec![ICMP_ECHO_REQUEST, 0, 0, 0];
    icmp.extend_from_slice(&id.to_be_bytes());
    icmp.extend_from_slice(&1u16.to_be_bytes());
    let sum = checksum(&[&icmp]);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    ipv4_packet(src, dst, IPPROTO_ICMP, &icmp)
}

/// Whether `packet` is the echo reply to [`echo_request`] with `id`.
pub fn is_echo_reply(packet: &[u8], id: u16) -> bool {
    let Some((proto, body)) = ipv4_payload(packet) else {
        return false;
    };
    proto == IPPROTO_ICMP
        && body.len() >= 8
        && body[0] == ICMP_ECHO_REPLY
        && u16::from_be_bytes([body[4], body[5]]) == id
}

fn ipv4_packet(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> io::Result<Vec<u8>> {
    let total = length_field(IPV4_HEADER + payload.len())?;
    let mut p = Vec::with_capacity(usize::from(total));
    p.extend_from_slice(&[0x45, 0x10]); // version 4, 5 words; low-delay TOS like other clients
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0]); // id, no fragments, TTL
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let sum = checksum(&[&p[..IPV4_HEADER]]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(payload);
    Ok(p)
}

/// `len` as a 16-bit length field of IPv4 or UDP.
fn length_field(len: usize) -> io::Result<u16> {
    u16::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{len} bytes do not fit one IPv4 packet"),
        )
    })
}

/// The protocol and payload of an unfragmented IPv4 packet.
fn ipv4_payload(packet: &[u8]) -> Option<(u8, &[u8])> {
    let first = *packet.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < IPV4_HEADER || packet.len() < ihl {
        return None;
    }
    let fragmented = u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0;
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]])).min(packet.len());
    if fragmented || total < ihl {
        return None;
    }
    Some((packet[9], &packet[ihl..total]))
}

/// The UDP payload of an unfragmented IPv4 packet to the client port.
pub fn client_payload(packet: &[u8]) -> Option<&[u8]> {
    let (proto, udp) = ipv4_payload(packet)?;
    if proto != IPPROTO_UDP || udp.len() < UDP_HEADER {
        return None;
    }
    let dport = u16::from_be_bytes([udp[2], udp[3]]);
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if dport != CLIENT_PORT || udp_len < UDP_HEADER || udp_len > udp.len() {
        return None;
    }
    Some(&udp[UDP_HEADER..udp_len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_round_trip_and_checksums() {
        let src = Ipv4Addr::new(10, 0, 0, 5);
        let dst = Ipv4Addr::new(10, 0, 0, 1);
        let p = udp_packet(src, dst, b"hello").unwrap();
        assert_eq!(p.len(), 20 + 8 + 5);
        // A header with its checksum in place sums to zero.
        assert_eq!(checksum(&[&p[..20]]), 0);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&[0, 17, 0, 13]);
        assert_eq!(checksum(&[&pseudo, &p[20..]]), 0);
        // Sent to the server port, so it is not a packet for the client.
        assert_eq!(client_payload(&p), None);
        let mut reply = p.clone();
        reply[22..24].copy_from_slice(&CLIENT_PORT.to_be_bytes());
        assert_eq!(client_payload(&reply), Some(&b"hello"[..]));
        // Truncated or fragmented packets are not parsed.
        assert_eq!(client_payload(&reply[..30]), None);
        reply[6] = 0x20;
        assert_eq!(client_payload(&reply), None);
        assert_eq!(client_payload(&[]), None);
    }

    #[test]
    fn echo_request_and_reply() {
        let src = Ipv4Addr::new(10, 0, 0, 5);
        let dst = Ipv4Addr::new(10, 0, 0, 1);
        let mut p = echo_request(src, dst, 0x1234).unwrap();
        assert_eq!(checksum(&[&p[20..]]), 0);
        assert!(!is_echo_reply(&p, 0x1234), "a request is not a reply");
        p[20] = ICMP_ECHO_REPLY;
        assert!(is_echo_reply(&p, 0x1234));
        assert!(!is_echo_reply(&p, 0x1235));
        assert!(!is_echo_reply(
            &udp_packet(src, dst, b"12345678").unwrap(),
            0x1234
        ));
    }

    #[test]
    fn a_payload_too_large_for_ipv4_is_an_error() {
        let ip = Ipv4Addr::new(10, 0, 0, 5);
        let largest = vec![0u8; usize::from(u16::MAX) - IPV4_HEADER - UDP_HEADER];
        assert_eq!(udp_packet(ip, ip, &largest).unwrap().len(), 65535);
        let e = udp_packet(ip, ip, &[largest, vec![0]].concat()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
