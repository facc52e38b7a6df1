//! Fuzzing what a DHCP server sends: a server on a shared LAN is a stranger, so any bytes that
//! reach the packet socket must give a reply or nothing, and a lease whose values stay in
//! bounds; never a panic. Seeds are dnsmasq's own OFFER, ACK and NAK (tests/corpus/dhcp_packet,
//! captured as the packet socket receives them), and replies built here with random options.

use std::net::Ipv4Addr;
use std::path::Path;

use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode};
use dhcproto::{Encodable, Encoder};
use ipnet::Ipv4Net;
use proptest::prelude::*;
use testkit::fuzz::{self, check_corpus, junk, mutants, mutated, seeds};

use super::message::{choose_routes, Reply};
use super::packet::{client_payload, is_echo_reply, udp_packet, CLIENT_PORT, SERVER_PORT};

fn corpus() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/dhcp_packet")
}

/// The transaction ID and client MAC of a BOOTP payload, so that a reply to them is taken as
/// ours.
fn ids(payload: &[u8]) -> (u32, [u8; 6]) {
    let xid = payload
        .get(4..8)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let mut mac = [0u8; 6];
    if let Some(b) = payload.get(28..34) {
        mac.copy_from_slice(b);
    }
    (xid, mac)
}

/// One IPv4 packet off the wire, as the daemon's receive loop handles it.
fn check_packet(packet: &[u8]) -> Result<(), String> {
    let _ = is_echo_reply(packet, 0x1234);
    let Some(payload) = client_payload(packet) else {
        return Ok(());
    };
    if payload.len() > packet.len() {
        return Err("a payload longer than its packet".into());
    }
    // Once as our reply, once as someone else's.
    let (xid, mac) = ids(payload);
    let _ = Reply::parse(payload, xid.wrapping_add(1), &mac);
    match Reply::parse(payload, xid, &mac) {
        Some(reply) => check_reply(&reply, payload.len()),
        None => Ok(()),
    }
}

/// What the daemon takes from a reply stays within what the packet could carry, and the
/// lease survives the lease file and the CNI result.
fn check_reply(reply: &Reply, size: usize) -> Result<(), String> {
    if let Some(m) = reply.message() {
        fuzz::short("a NAK message", &m, size)?;
    }
    let lease = match reply.lease() {
        Ok(lease) => lease,
        Err(why) => return fuzz::short("a lease refusal", &why, 200),
    };
    // Each route takes at least 5 bytes of options.
    if lease.routes.len() > size / 5 + 1 {
        return Err(format!("{} routes from {size} bytes", lease.routes.len()));
    }
    if let Some(domain) = &lease.domain {
        fuzz::short("a domain", domain, size)?;
    }
    let file = serde_json::to_vec(&lease).map_err(|e| e.to_string())?;
    let back: super::message::Lease = serde_json::from_slice(&file).map_err(|e| e.to_string())?;
    if back != lease {
        return Err(format!("{lease:?} came back from its file as {back:?}"));
    }
    let result = lease.to_result(Some(100));
    let json = result
        .to_value(cni::Version::LATEST)
        .map_err(|e| e.to_string())?;
    let again = cni::CniResult::from_value(&json).map_err(|e| e.to_string())?;
    if again.ips != result.ips || again.routes != result.routes {
        return Err(format!("{result:?} came back as {again:?}"));
    }
    Ok(())
}

/// `payload` as the server sends it: from port 67 to the client's port 68.
fn from_server(payload: &[u8]) -> Vec<u8> {
    let mut p = udp_packet(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::BROADCAST, payload)
        .expect("a server's payload fits one packet");
    p[20..22].copy_from_slice(&SERVER_PORT.to_be_bytes());
    p[22..24].copy_from_slice(&CLIENT_PORT.to_be_bytes());
    p
}

fn addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

fn net() -> impl Strategy<Value = Ipv4Net> {
    (addr(), 0..=32u8).prop_map(|(a, p)| Ipv4Net::new(a, p).unwrap_or_default().trunc())
}

/// The options of a reply: each maybe present, with any value the wire can carry.
fn options() -> impl Strategy<Value = Vec<DhcpOption>> {
    let kind = prop_oneof![
        Just(MessageType::Offer),
        Just(MessageType::Ack),
        Just(MessageType::Nak)
    ];
    let list = |s: BoxedStrategy<DhcpOption>| proptest::option::of(s);
    (
        (
            kind,
            list(addr().prop_map(DhcpOption::ServerIdentifier).boxed()),
            list(addr().prop_map(DhcpOption::SubnetMask).boxed()),
            list(any::<u32>().prop_map(DhcpOption::AddressLeaseTime).boxed()),
            list(any::<u32>().prop_map(DhcpOption::Renewal).boxed()),
            list(any::<u32>().prop_map(DhcpOption::Rebinding).boxed()),
            list(any::<u16>().prop_map(DhcpOption::InterfaceMtu).boxed()),
        ),
        (
            list(
                proptest::collection::vec(addr(), 0..8)
                    .prop_map(DhcpOption::Router)
                    .boxed(),
            ),
            list(
                proptest::collection::vec(addr(), 0..8)
                    .prop_map(DhcpOption::DomainNameServer)
                    .boxed(),
            ),
            list("[ -~]{0,64}".prop_map(DhcpOption::DomainName).boxed()),
            list("[ -~]{0,64}".prop_map(DhcpOption::Message).boxed()),
            list(
                proptest::collection::vec((net(), addr()), 0..40)
                    .prop_map(DhcpOption::ClasslessStaticRoute)
                    .boxed(),
            ),
            list(
                proptest::collection::vec((addr(), addr()), 0..20)
                    .prop_map(DhcpOption::StaticRoutingTable)
                    .boxed(),
            ),
        ),
    )
        .prop_map(|((kind, a, b, c, d, e, f), (g, h, i, j, k, l))| {
            std::iter::once(DhcpOption::MessageType(kind))
                .chain([a, b, c, d, e, f, g, h, i, j, k, l].into_iter().flatten())
                .collect()
        })
}

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn reply_payload(xid: u32, yiaddr: Ipv4Addr, opts: &[DhcpOption]) -> Option<Vec<u8>> {
    let z = Ipv4Addr::UNSPECIFIED;
    let mut m = Message::new_with_id(xid, z, yiaddr, z, z, &MAC);
    m.set_opcode(Opcode::BootReply);
    for o in opts {
        m.opts_mut().insert(o.clone());
    }
    let mut buf = Vec::new();
    m.encode(&mut Encoder::new(&mut buf)).ok()?;
    Some(buf)
}

#[test]
fn dnsmasq_packets_and_their_mutants() {
    check_corpus(&corpus(), check_packet);
}

#[test]
fn dnsmasq_ack_gives_its_lease() {
    let ack = std::fs::read(corpus().join("dnsmasq-ack")).unwrap();
    let payload = client_payload(&ack).unwrap();
    let (xid, mac) = ids(payload);
    let reply = Reply::parse(payload, xid, &mac).unwrap();
    assert_eq!(reply.kind, MessageType::Ack);
    let lease = reply.lease().unwrap();
    assert_eq!(
        (lease.lease_secs, lease.t1_secs, lease.t2_secs, lease.mtu),
        (3600, Some(600), Some(1050), Some(1400))
    );
    assert_eq!(lease.domain.as_deref(), Some("example.test"));
    // Classless routes win over the static route and the router (RFC 3442).
    let dsts: Vec<String> = lease.routes.iter().map(|r| r.dst.to_string()).collect();
    assert_eq!(dsts, ["192.0.2.0/24", "0.0.0.0/0"]);
    let nak = std::fs::read(corpus().join("dnsmasq-nak")).unwrap();
    let payload = client_payload(&nak).unwrap();
    let (xid, mac) = ids(payload);
    let reply = Reply::parse(payload, xid, &mac).unwrap();
    assert_eq!(reply.kind, MessageType::Nak);
    assert_eq!(reply.message().as_deref(), Some("address not available"));
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn arbitrary_packets(packet in junk(600)) {
        check_packet(&packet).map_err(TestCaseError::fail)?;
        // The same bytes as a payload that passed the IPv4 and UDP checks.
        check_packet(&from_server(&packet)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn mutated_dnsmasq_packets(packet in mutated(seeds(&corpus()))) {
        check_packet(&packet).map_err(TestCaseError::fail)?;
    }

    /// A reply with random options reads as its options say, and so do its mutants.
    #[test]
    fn generated_replies(xid in any::<u32>(), yiaddr in addr(), opts in options()) {
        let Some(payload) = reply_payload(xid, yiaddr, &opts) else {
            return Ok(());
        };
        let packet = from_server(&payload);
        prop_assert_eq!(client_payload(&packet), Some(&payload[..]));
        let reply = Reply::parse(&payload, xid, &MAC).unwrap();
        check_reply(&reply, payload.len()).map_err(TestCaseError::fail)?;
        if let Ok(lease) = reply.lease() {
            let find = |want: fn(&DhcpOption) -> Option<u32>| opts.iter().find_map(want);
            let lease_time = find(|o| match o {
                DhcpOption::AddressLeaseTime(v) => Some(*v),
                _ => None,
            });
            prop_assert_eq!(lease.lease_secs, lease_time.unwrap_or(3600));
            let classless: Vec<(Ipv4Net, Ipv4Addr)> = opts
                .iter()
                .find_map(|o| match o {
                    DhcpOption::ClasslessStaticRoute(r) => Some(r.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            if !classless.is_empty() {
                prop_assert_eq!(lease.routes, choose_routes(&classless, &[], &None));
            }
        }
        for (_, m) in mutants(&packet) {
            check_packet(&m).map_err(TestCaseError::fail)?;
        }
    }
}
