//! A link-layer (AF_PACKET) datagram socket bound to one interface and one EtherType: the
//! kernel adds and strips the Ethernet header, so a caller sends and reads the payload. DHCP
//! uses it before its interface has an address; the conflict probe for ARP and IPv6.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_ARP: u16 = 0x0806;
pub const ETH_P_IPV6: u16 = 0x86dd;
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// A datagram packet socket bound to one interface, receiving one EtherType. Non-blocking.
pub struct PacketSocket {
    /// Closed by [`Drop`], on a thread of its own.
    fd: ManuallyDrop<OwnedFd>,
    ifindex: i32,
    protocol: u16,
}

/// Closing a packet socket waits for an RCU grace period while the kernel unhooks it from the
/// receive path: milliseconds in which a daemon's one thread would serve nothing else.
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
    /// Opens the socket in the calling thread's namespace and binds it to `ifindex` there, for
    /// frames of `protocol`.
    pub fn open(ifindex: u32, protocol: u16) -> io::Result<PacketSocket> {
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
        let addr = sockaddr(ifindex, protocol, &[0; 6]);
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
            protocol,
        })
    }

    /// Receives every multicast frame on the interface, not only the groups it joined: a link
    /// without IPv6 yet has not joined all-nodes, where a neighbour advertisement goes.
    pub fn all_multicast(&self) -> io::Result<()> {
        // SAFETY: packet_mreq is plain old data, so all-zero is a valid value.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = self.ifindex;
        mreq.mr_type = u16::try_from(libc::PACKET_MR_ALLMULTI)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `mreq` is valid for the call and its exact size is passed with it.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                std::ptr::from_ref(&mreq).cast(),
                PACKET_MREQ_LEN,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sends `payload` in a frame of the socket's EtherType for `dst_mac`.
    pub fn send(&self, dst_mac: &[u8; 6], payload: &[u8]) -> io::Result<()> {
        let addr = sockaddr(self.ifindex, self.protocol, dst_mac);
        // SAFETY: the buffer and the address are valid for the duration of the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                payload.as_ptr().cast(),
                payload.len(),
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

    /// Receives one incoming frame's payload: its length and the sender's MAC. `Ok(None)` for
    /// our own outgoing frames; `WouldBlock` when nothing is queued.
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
#[allow(clippy::cast_possible_truncation)]
/// The size of `packet_mreq` (16 bytes), as setsockopt takes it.
const PACKET_MREQ_LEN: libc::socklen_t = {
    let size = std::mem::size_of::<libc::packet_mreq>();
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

/// The Internet checksum over the concatenation of `parts` (each of even length but the last).
pub fn checksum(parts: &[&[u8]]) -> u16 {
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
