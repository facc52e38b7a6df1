//! A link-layer (AF_PACKET) socket for the DHCP exchange, and the IPv4/UDP framing around it.
//!
//! Before the interface has an address, a server may unicast its reply to the offered address;
//! the kernel's UDP stack drops that, a packet socket still sees it. Sending through the same
//! socket needs no address and no route in the pod either, so one mechanism serves every state:
//! broadcast before the lease, unicast to the server's MAC (learnt from its reply) after.

use std::io;
use std::mem::ManuallyDrop;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// UDP ports of the DHCP server and client.
pub const SERVER_PORT: u16 = 67;
pub const CLIENT_PORT: u16 = 68;
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

const ETH_P_IP: u16 = 0x0800;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMP: u8 = 1;
const ICMP_ECHO_REQUEST: u8 = 8;
const ICMP_ECHO_REPLY: u8 = 0;
const IPV4_HEADER: usize = 20;
const UDP_HEADER: usize = 8;

/// A datagram packet socket bound to one interface, receiving IPv4. Non-blocking.
pub struct PacketSocket {
    /// Closed by [`Drop`], on a thread of its own.
    fd: ManuallyDrop<OwnedFd>,
    ifindex: i32,
}

/// Closing a packet socket waits for an RCU grace period while the kernel unhooks it from the
/// receive path: milliseconds in which the daemon's one thread would serve no other lease.
impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: the descriptor is taken once, here, and `self.fd` is not used after.
        let fd = unsafe { ManuallyDrop::take(&mut self.fd) };
        // Where no thread can be started, the closure, and the descriptor, are dropped here.
        let _ = std::thread::Builder::new()
            .name("packet-close".into())
            .spawn(move || drop(fd));
    }
}

impl PacketSocket {
    /// Opens the socket in the calling thread's namespace and binds it to `ifindex` there.
    pub fn open(ifindex: u32) -> io::Result<PacketSocket> {
        let ifindex =
            i32::try_from(ifindex).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
        // Protocol 0 until bind names it: a socket made with its protocol is hooked at once,
        // and bind must unhook it again, which waits for an RCU grace period (milliseconds).
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let addr = sockaddr(ifindex, ETH_P_IP, &[0; 6]);
        // SAFETY: `addr` is a valid sockaddr_ll and its size is passed with it.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&addr).cast(),
                SOCKADDR_LL_LEN,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket {
            fd: ManuallyDrop::new(fd),
            ifindex,
        })
    }

    /// Sends an IPv4 `packet` (built by [`udp_packet`] or [`echo_request`]) in a frame for
    /// `dst_mac`.
    pub fn send(&self, dst_mac: &[u8; 6], packet: &[u8]) -> io::Result<()> {
        let addr = sockaddr(self.ifindex, ETH_P_IP, dst_mac);
        // SAFETY: the buffer and the address are valid for the duration of the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                std::ptr::from_ref(&addr).cast(),
                SOCKADDR_LL_LEN,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one incoming IPv4 packet: its length and the sender's MAC. `Ok(None)` for our
    /// own outgoing packets; `WouldBlock` when nothing is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, [u8; 6])>> {
        // SAFETY: sockaddr_ll is plain old data, so all-zero is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = SOCKADDR_LL_LEN;
        // SAFETY: the buffer, the address and its length are valid for the duration of the call.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                std::ptr::from_mut(&mut from).cast(),
                &mut len,
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            return Ok(None);
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&from.sll_addr[..6]);
        Ok(Some((n, mac)))
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

// The casts are checked when the constants are built: they cannot truncate.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
/// `AF_PACKET` (17) as `sockaddr_ll`'s family field takes it.
const PACKET_FAMILY: libc::sa_family_t = {
    assert!(libc::AF_PACKET >= 0 && libc::AF_PACKET <= libc::sa_family_t::MAX as i32);
    libc::AF_PACKET as libc::sa_family_t
};
#[allow(clippy::cast_possible_truncation)]
/// The size of `sockaddr_ll` (20 bytes), as socket calls take it.
const SOCKADDR_LL_LEN: libc::socklen_t = {
    let size = std::mem::size_of::<libc::sockaddr_ll>();
    assert!(size <= libc::socklen_t::MAX as usize);
    size as libc::socklen_t
};

fn sockaddr(ifindex: i32, protocol: u16, mac: &[u8; 6]) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data, so all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = PACKET_FAMILY;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = ifindex;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(mac);
    addr
}

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

/// The Internet checksum over the concatenation of `parts` (each of even length but the last).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    // Fold the carries back in until the sum fits 16 bits.
    loop {
        match u16::try_from(sum) {
            Ok(folded) => return !folded,
            Err(_) => sum = (sum & 0xffff) + (sum >> 16),
        }
    }
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
