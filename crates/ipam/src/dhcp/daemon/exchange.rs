//! DHCP transactions on a pod's interface, driven by the daemon's runtime.
//!
//! The packet socket is made on a short-lived thread inside the pod's namespace
//! ([`NetNs::run`]) and then driven from the runtime's thread: no thread of the daemon ever
//! stays in another namespace.

use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

use dhcproto::v4::MessageType;
use netkit::packet::{PacketSocket, BROADCAST_MAC, ETH_P_IP};
use netkit::{NetNs, Netlink};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::dhcp::config::LeaseParams;
use crate::dhcp::message::{client_message, Kind, Lease, Reply};
use crate::dhcp::packet::{client_payload, echo_request, is_echo_reply, udp_packet};

/// First wait for an answer before sending again; it doubles up to `resend_max`.
const FIRST_RESEND: Duration = Duration::from_millis(500);
/// Longest wait after a DHCPRELEASE for the ping that follows it to come back.
const RELEASE_FLUSH: Duration = Duration::from_millis(100);
/// How long a link that was just set up may take to get its carrier before we send anyway.
const CARRIER_WAIT: Duration = Duration::from_secs(2);

/// Why a transaction failed.
#[derive(Debug)]
pub enum Failure {
    /// The pod's namespace cannot be opened.
    NoNetns(String),
    /// The pod's interface is gone.
    Gone(String),
    /// No usable answer before the deadline.
    NoAnswer(String),
    /// The server refused (DHCPNAK).
    Refused(String),
    /// A socket or netlink call failed.
    System(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NoNetns(m)
            | Failure::Gone(m)
            | Failure::NoAnswer(m)
            | Failure::Refused(m)
            | Failure::System(m) => f.write_str(m),
        }
    }
}

/// Retransmission limits.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The whole acquisition (or one renewal attempt) may take this long.
    pub timeout: Duration,
    /// Longest wait between two sends.
    pub resend_max: Duration,
}

/// The pod's interface, opened for one transaction.
pub struct Iface {
    ns: NetNs,
    pub nl: Netlink,
    pub index: u32,
    pub mac: [u8; 6],
    what: String,
}

impl Iface {
    /// Opens `ifname` in the namespace at `netns`.
    pub fn open(netns: &str, ifname: &str) -> Result<Iface, Failure> {
        let what = format!("interface {ifname:?} in netns {netns}");
        let ns = NetNs::open(netns).map_err(|e| {
            Failure::NoNetns(format!("cannot open the pod's network namespace: {e}"))
        })?;
        let nl = Netlink::in_ns(&ns).map_err(|e| Failure::System(e.to_string()))?;
        let link = nl
            .link_by_name(ifname)
            .map_err(|e| Failure::System(e.to_string()))?
            .ok_or_else(|| Failure::Gone(format!("there is no {what}")))?;
        let mac = link
            .mac
            .ok_or_else(|| Failure::System(format!("{what} has no MAC address")))?;
        Ok(Iface {
            ns,
            nl,
            index: link.index,
            mac,
            what,
        })
    }

    pub fn describe(&self) -> &str {
        &self.what
    }

    /// Sets the link up when it is not, and waits briefly for its carrier, so the first
    /// DISCOVER is not lost to a link that is still coming up.
    pub async fn bring_up(&self) -> Result<(), Failure> {
        let sys = |e: netkit::Error| Failure::System(format!("{}: {e}", self.what));
        let link = self.nl.link_by_index(self.index).map_err(sys)?;
        let Some(link) = link else {
            return Err(Failure::Gone(format!("{} disappeared", self.what)));
        };
        if !link.up {
            self.nl.set_up(self.index).map_err(sys)?;
        }
        if link.running {
            return Ok(());
        }
        let give_up = Instant::now() + CARRIER_WAIT;
        let mut pause = Duration::from_millis(1);
        while Instant::now() < give_up {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
            if self
                .nl
                .link_by_index(self.index)
                .map_err(sys)?
                .is_some_and(|l| l.running)
            {
                break;
            }
        }
        Ok(())
    }

    fn socket(&self) -> Result<AsyncFd<PacketSocket>, Failure> {
        let index = self.index;
        let sock = self
            .ns
            .run(move || PacketSocket::open(index, ETH_P_IP))
            .map_err(|e| Failure::System(e.to_string()))?
            .map_err(|e| {
                Failure::System(format!("opening a packet socket on {}: {e}", self.what))
            })?;
        // SAFETY: the socket owns its descriptor, which stays open and unreplaced for as long
        // as the AsyncFd holds it.
        unsafe { AsyncFd::register(sock) }.map_err(|e| Failure::System(e.to_string()))
    }
}

/// Where a message goes: broadcast, or unicast to the server that granted the lease.
#[derive(Clone, Copy)]
struct Dest {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    mac: [u8; 6],
}

const BROADCAST: Dest = Dest {
    src: Ipv4Addr::UNSPECIFIED,
    dst: Ipv4Addr::BROADCAST,
    mac: BROADCAST_MAC,
};

/// DISCOVER, OFFER, REQUEST, ACK: a new lease and the MAC its server answered from.
pub async fn acquire(
    iface: &Iface,
    params: &LeaseParams,
    timing: Timing,
) -> Result<(Lease, [u8; 6]), Failure> {
    let sock = iface.socket()?;
    let deadline = Instant::now() + timing.timeout;
    loop {
        let xid = random_xid();
        let discover = client_message(Kind::Discover, params, xid, &iface.mac);
        let (offer, _) = transact(
            &sock,
            iface,
            BROADCAST,
            &discover,
            xid,
            deadline,
            timing,
            |r| r.kind == MessageType::Offer && r.server.is_some(),
        )
        .await
        .map_err(|e| no_answer(e, "DHCPOFFER", iface, timing))?;
        let Some(server) = offer.server else { continue };
        let select = Kind::Select {
            offer: offer.yiaddr,
            server,
        };
        let request = client_message(select, params, xid, &iface.mac);
        let (reply, server_mac) = transact(
            &sock,
            iface,
            BROADCAST,
            &request,
            xid,
            deadline,
            timing,
            |r| {
                matches!(r.kind, MessageType::Ack | MessageType::Nak)
                    && r.server.is_none_or(|s| s == server)
            },
        )
        .await
        .map_err(|e| no_answer(e, "DHCPACK", iface, timing))?;
        if reply.kind == MessageType::Nak {
            // The offer went to someone else meanwhile; start over while time remains.
            if Instant::now() >= deadline {
                return Err(refused(&reply, server));
            }
            continue;
        }
        let lease = reply
            .lease()
            .map_err(|e| Failure::Refused(format!("server {server}: {e}")))?;
        return Ok((lease, server_mac));
    }
}

/// RENEWING (unicast to the server) or REBINDING (broadcast): the lease extended, or refused.
pub async fn extend(
    iface: &Iface,
    params: &LeaseParams,
    lease: &Lease,
    server_mac: Option<[u8; 6]>,
    deadline: Instant,
    timing: Timing,
) -> Result<(Lease, [u8; 6]), Failure> {
    let sock = iface.socket()?;
    let address = lease.address.addr();
    let dest = match server_mac {
        Some(mac) => Dest {
            src: address,
            dst: lease.server,
            mac,
        },
        None => Dest {
            src: address,
            ..BROADCAST
        },
    };
    let xid = random_xid();
    let request = client_message(Kind::Extend { address }, params, xid, &iface.mac);
    let (reply, mac) = transact(&sock, iface, dest, &request, xid, deadline, timing, |r| {
        matches!(r.kind, MessageType::Ack | MessageType::Nak)
    })
    .await
    .map_err(|e| no_answer(e, "DHCPACK", iface, timing))?;
    if reply.kind == MessageType::Nak {
        return Err(refused(&reply, reply.server.unwrap_or(lease.server)));
    }
    let lease = reply.lease().map_err(Failure::Refused)?;
    Ok((lease, mac))
}

/// Sends DHCPRELEASE to the server that granted the lease.
///
/// There is no answer to a release. A ping to the server follows it on the same path, and its
/// reply shows that the release has gone through the host's queues, so an interface plugin that
/// deletes the interface right after DEL does not drop it on the way. Without a reply within
/// [`RELEASE_FLUSH`], both go again in a broadcast frame, in case the server's MAC changed
/// since its last ACK (a Linux bridge takes the lowest MAC of its ports, for one).
pub async fn release(
    iface: &Iface,
    params: &LeaseParams,
    lease: &Lease,
    server_mac: [u8; 6],
) -> Result<(), Failure> {
    let sock = iface.socket()?;
    let address = lease.address.addr();
    let kind = Kind::Release {
        address,
        server: lease.server,
    };
    let xid = random_xid();
    let framing =
        |e: io::Error| Failure::System(format!("framing DHCPRELEASE on {}: {e}", iface.describe()));
    let release = udp_packet(
        address,
        lease.server,
        &client_message(kind, params, xid, &iface.mac),
    )
    .map_err(framing)?;
    // The ping is told from others by the low 16 bits of the transaction ID.
    let [.., xid_hi, xid_lo] = xid.to_be_bytes();
    let id = u16::from_be_bytes([xid_hi, xid_lo]);
    let ping = echo_request(address, lease.server, id).map_err(framing)?;
    let mut buf = vec![0u8; 1500];
    for mac in [server_mac, BROADCAST_MAC] {
        for packet in [&release, &ping] {
            sock.get_ref().send(&mac, packet).map_err(|e| {
                Failure::System(format!("sending DHCPRELEASE on {}: {e}", iface.describe()))
            })?;
        }
        let answered = tokio::time::timeout(RELEASE_FLUSH, async {
            loop {
                let Ok(mut guard) = sock.readable().await else {
                    return;
                };
                if let Ok(Ok(Some((n, _)))) = guard.try_io(|s| s.get_ref().recv(&mut buf)) {
                    if is_echo_reply(&buf[..n], id) {
                        return;
                    }
                }
            }
        })
        .await;
        if answered.is_ok() {
            break;
        }
    }
    Ok(())
}

fn no_answer(e: io::Error, waited_for: &str, iface: &Iface, timing: Timing) -> Failure {
    if e.kind() == io::ErrorKind::TimedOut {
        Failure::NoAnswer(format!(
            "no {waited_for} from any DHCP server on {} within {}: check that a server \
             serves this network, and that the interface reaches it",
            iface.describe(),
            seconds(timing.timeout)
        ))
    } else {
        Failure::System(format!("DHCP on {}: {e}", iface.describe()))
    }
}

/// `1.5s`.
fn seconds(d: Duration) -> String {
    format!("{}s", (d.as_secs_f64() * 10.0).round() / 10.0)
}

fn refused(reply: &Reply, server: Ipv4Addr) -> Failure {
    let why = reply
        .message()
        // The server is a stranger: its text is quoted, escaped and cut.
        .map(|m| format!(": {}", cni::quote::quote(&m)))
        .unwrap_or_default();
    Failure::Refused(format!(
        "DHCP server {server} refused the request (DHCPNAK){why}"
    ))
}

/// Sends `msg` and resends it with a doubling pause until a reply that `wanted` accepts
/// arrives, or `deadline` passes (`TimedOut`).
#[allow(clippy::too_many_arguments)]
async fn transact(
    sock: &AsyncFd<PacketSocket>,
    iface: &Iface,
    mut dest: Dest,
    msg: &[u8],
    xid: u32,
    deadline: Instant,
    timing: Timing,
    wanted: impl Fn(&Reply) -> bool,
) -> io::Result<(Reply, [u8; 6])> {
    let mut pause = FIRST_RESEND.min(timing.resend_max);
    let mut buf = vec![0u8; 1500];
    let packet = udp_packet(dest.src, dest.dst, msg)?;
    loop {
        if Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        sock.get_ref().send(&dest.mac, &packet)?;
        // A unicast that goes unanswered is resent in a broadcast frame: the server's MAC may
        // have changed since its last ACK.
        dest.mac = BROADCAST_MAC;
        let resend_at = (Instant::now() + pause).min(deadline);
        pause = (pause * 2).min(timing.resend_max);
        loop {
            let ready = tokio::time::timeout_at(resend_at, sock.readable()).await;
            let Ok(guard) = ready else { break };
            let mut guard = guard?;
            match guard.try_io(|s| s.get_ref().recv(&mut buf)) {
                Ok(Ok(Some((n, mac)))) => {
                    let reply =
                        client_payload(&buf[..n]).and_then(|p| Reply::parse(p, xid, &iface.mac));
                    if let Some(reply) = reply {
                        if wanted(&reply) {
                            return Ok((reply, mac));
                        }
                    }
                }
                Ok(Ok(None)) | Err(_) => {}
                Ok(Err(e)) => return Err(e),
            }
        }
    }
}

/// A transaction id from the kernel's random pool.
fn random_xid() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most `b.len()` bytes into the valid buffer `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        // Uniqueness, not secrecy, is what matters: the time will do.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        return nanos ^ std::process::id();
    }
    u32::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use dhcproto::v4::{DhcpOption, Message, Opcode};
    use dhcproto::{Encodable, Encoder};

    use super::*;

    #[test]
    fn a_naks_text_reaches_the_error_quoted() {
        let mac = [2, 0, 0, 0, 0, 1];
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(7, z, z, z, z, &mac);
        m.set_opcode(Opcode::BootReply);
        let opts = m.opts_mut();
        opts.insert(DhcpOption::MessageType(MessageType::Nak));
        let text = format!("gone\n\u{1b}[31m{}", "x".repeat(1000));
        opts.insert(DhcpOption::Message(text));
        let mut buf = Vec::new();
        m.encode(&mut Encoder::new(&mut buf)).unwrap();
        let reply = Reply::parse(&buf, 7, &mac).unwrap();
        let Failure::Refused(msg) = refused(&reply, Ipv4Addr::new(10, 0, 0, 1)) else {
            panic!("not a refusal");
        };
        assert!(msg.len() < 300, "{msg}");
        assert!(!msg.chars().any(char::is_control), "{msg}");
        assert!(msg.contains(r#"(DHCPNAK): "gone\n\u{1b}[31mxxx"#), "{msg}");
    }
}
