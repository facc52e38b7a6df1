//! A small synchronous rtnetlink client.
//!
//! Every request carries `NLM_F_ACK` and waits for the kernel's answer, so a call returns only
//! once the change is done, and a refusal keeps its errno (and the kernel's extended-ack text).
//! A socket stays bound to the namespace it was created in: [`Netlink::in_ns`] makes one there
//! once, and it can then be driven from any thread.

mod addr;
mod bridge;
#[cfg(test)]
mod fuzz;
mod link;
mod neigh;
mod route;
mod rule;
mod tc;

use std::cell::Cell;
use std::path::PathBuf;

use netlink_packet_core::{
    parse_string, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NlasIterator,
    NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::error::{Error, Result};
use crate::netns::NetNs;

pub use addr::{Addr, AddrOpts};
pub use bridge::{BridgePortOpts, BridgeVlan};
pub use link::{validate_ifname, BridgeOpts, IpvlanMode, Link, MacvlanMode, MacvlanOpts};
pub use neigh::Neighbour;
pub use route::{
    Route, RTN_LOCAL, RT_SCOPE_HOST, RT_SCOPE_LINK, RT_SCOPE_UNIVERSE, RT_TABLE_LOCAL,
    RT_TABLE_MAIN,
};
pub use rule::Rule;
pub use tc::{ticks_per_usec, Bucket, Tbf, LATENCY_USEC};

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &std::net::IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    /// The family of a network.
    pub fn of_net(net: &ipnet::IpNet) -> Family {
        Family::of(&net.addr())
    }

    /// The family of an rtnetlink header; `None` for one that is not IP.
    fn from_address_family(af: AddressFamily) -> Option<Family> {
        match af {
            AddressFamily::Inet => Some(Family::V4),
            AddressFamily::Inet6 => Some(Family::V6),
            _ => None,
        }
    }

    /// The family as rtnetlink headers carry it.
    fn address_family(self) -> AddressFamily {
        match self {
            Family::V4 => AddressFamily::Inet,
            Family::V6 => AddressFamily::Inet6,
        }
    }
}

/// Biggest datagram the kernel sends on a dump is 32 KiB; twice that leaves room.
const RECV_BUF: usize = 64 * 1024;
/// A dump that raced with a change is taken again for up to this long, waiting a millisecond
/// more each time (at most [`DUMP_WAIT_MAX`]): on a node starting a burst of pods, links change
/// faster than a long dump under a busy CPU completes, and a short wait lets the burst move
/// on. A budget in time rather than in attempts holds however loaded the node is.
const DUMP_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);
const DUMP_WAIT_MAX: u64 = 20;
/// `NLMSGERR_ATTR_MSG`: the extended-ack text attribute.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// A synchronous rtnetlink socket.
#[derive(Debug)]
pub struct Netlink {
    socket: Socket,
    seq: Cell<u32>,
    /// The namespace the socket lives in, when it is not the creator's own; named in errors.
    ns: Option<PathBuf>,
}

impl Netlink {
    /// A socket in the calling thread's current namespace.
    pub fn new() -> Result<Netlink> {
        let mut socket =
            Socket::new(NETLINK_ROUTE).map_err(|e| Error::io("opening a netlink socket", e))?;
        socket
            .bind_auto()
            .map_err(|e| Error::io("binding a netlink socket", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| Error::io("connecting a netlink socket", e))?;
        // Best effort: extended acks give the kernel's reason text ("Unknown device type"),
        // capped acks keep error replies small. Old kernels without them still work.
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        Ok(Netlink {
            socket,
            seq: Cell::new(1),
            ns: None,
        })
    }

    /// A socket inside `ns`, usable from any thread afterwards.
    pub fn in_ns(ns: &NetNs) -> Result<Netlink> {
        let mut nl = ns.run(Netlink::new)??;
        nl.ns = Some(ns.path().to_path_buf());
        Ok(nl)
    }

    /// `what`, plus the namespace when the socket is not in the caller's own.
    fn op(&self, what: String) -> String {
        match &self.ns {
            Some(ns) => format!("{what} in netns {}", ns.display()),
            None => what,
        }
    }

    /// Sends a change request (`NLM_F_ACK` plus `flags`) and waits for the ack.
    fn ack(&self, msg: RouteNetlinkMessage, flags: u16, what: impl Fn() -> String) -> Result<()> {
        self.exchange(msg, NLM_F_ACK | flags, &what).map(drop)
    }

    /// Sends a single-object get request and returns the reply, `None` when the kernel says the
    /// object does not exist with one of `absent` errnos.
    fn get_one(
        &self,
        msg: RouteNetlinkMessage,
        absent: &[i32],
        what: impl Fn() -> String,
    ) -> Result<Option<RouteNetlinkMessage>> {
        match self.exchange(msg, NLM_F_ACK, &what) {
            Ok(replies) => Ok(replies.into_iter().next()),
            Err(e) if e.errno().is_some_and(|n| absent.contains(&n)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Dumps objects, retrying when the dump raced with a concurrent change.
    fn dump(
        &self,
        msg: RouteNetlinkMessage,
        what: impl Fn() -> String,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let started = std::time::Instant::now();
        let mut wait = 1;
        loop {
            match self.exchange(msg.clone(), NLM_F_DUMP, &what) {
                Err(e) if e.errno() == Some(libc::EINTR) && started.elapsed() < DUMP_BUDGET => {
                    std::thread::sleep(std::time::Duration::from_millis(wait));
                    wait = (wait + 1).min(DUMP_WAIT_MAX);
                }
                other => return other,
            }
        }
    }

    /// The one request/response path: sends `msg` with a fresh sequence number, then reads
    /// replies for that sequence number until the ack, the error, or the end of the dump.
    fn exchange(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        let seq = self.seq.get();
        self.seq.set(seq.wrapping_add(1));
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket
            .send(&buf, 0)
            .map_err(|e| Error::io(self.op(what()), e))?;

        let mut replies = Vec::new();
        let mut interrupted = false;
        let mut rx: Vec<u8> = Vec::with_capacity(RECV_BUF);
        loop {
            rx.clear();
            // MSG_TRUNC makes recv report the real size, so a cut datagram is detected.
            let size = loop {
                match self.socket.recv(&mut rx, libc::MSG_TRUNC) {
                    // A signal: the request may already be applied, so wait on, never resend.
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    other => break other.map_err(|e| Error::io(self.op(what()), e))?,
                }
            };
            if size > rx.len() {
                return Err(self.decode_error(what, format!("reply of {size} bytes truncated")));
            }
            let mut offset = 0;
            while offset < rx.len() {
                let raw = &rx[offset..];
                let nl = NetlinkBuffer::new_checked(raw)
                    .map_err(|e| self.decode_error(what, e.to_string()))?;
                let len = nl.length() as usize;
                let (reply_seq, reply_flags) = (nl.sequence_number(), nl.flags());
                offset += (len + 3) & !3;
                if reply_seq != seq {
                    // A late reply to an earlier request that was abandoned on error.
                    continue;
                }
                interrupted |= reply_flags & NLM_F_DUMP_INTR != 0;
                let raw = &raw[..len];
                let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw)
                    .map_err(|e| self.decode_error(what, e.to_string()))?;
                match parsed.payload {
                    NetlinkPayload::InnerMessage(m) => replies.push(m),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(replies),
                            Some(code) => Err(Error::netlink(
                                self.op(what()),
                                code.get().abs(),
                                ext_ack_text(raw, reply_flags).as_deref(),
                            )),
                        };
                    }
                    NetlinkPayload::Done(done) if done.code < 0 => {
                        return Err(Error::netlink(self.op(what()), -done.code, None));
                    }
                    NetlinkPayload::Done(_) if interrupted => {
                        return Err(Error::netlink(
                            self.op(what()),
                            libc::EINTR,
                            Some("dump interrupted by a concurrent change"),
                        ));
                    }
                    NetlinkPayload::Done(_) => return Ok(replies),
                    NetlinkPayload::Overrun(_) => {
                        return Err(Error::netlink(self.op(what()), libc::ENOBUFS, None));
                    }
                    _ => {}
                }
            }
        }
    }

    fn decode_error(&self, what: &dyn Fn() -> String, msg: String) -> Error {
        Error::Decode {
            op: self.op(what()),
            msg,
        }
    }
}

/// The kernel's extended-ack message in an `NLMSG_ERROR` reply, if it sent one.
fn ext_ack_text(raw: &[u8], flags: u16) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // Layout: our header (16), errno (4), the echoed request (its header only when capped),
    // then the TLVs.
    let echoed = raw.get(20..)?;
    let echoed_len = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        let len = u32::from_ne_bytes(echoed.get(..4)?.try_into().ok()?) as usize;
        (len + 3) & !3
    };
    NlasIterator::new(echoed.get(echoed_len..)?)
        .filter_map(|nla| nla.ok())
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .and_then(|nla| parse_string(nla.value()).ok())
}
