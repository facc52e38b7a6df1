//! DHCPv4 messages (RFC 2131) on top of `dhcproto`'s wire format: what the client sends in each
//! state, and the lease an ACK describes, with its routes chosen as RFC 3442 says.

use std::net::{IpAddr, Ipv4Addr};

use cni::{CniResult, Dns, IpConfig, Route};
use dhcproto::v4::{DhcpOption, Flags, Message, MessageType, Opcode, OptionCode, UnknownOption};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Serialize};

use super::config::LeaseParams;

/// Lease time assumed when an ACK carries none (the reference's default).
const DEFAULT_LEASE_SECS: u32 = 3600;
/// A shorter lease than this is refused: the address would be gone before the pod used it.
const MIN_LEASE_SECS: u32 = 2;
/// The route scope for a classless route through 0.0.0.0: on-link.
const RT_SCOPE_LINK: u8 = 253;

/// What a client message is for; it decides the addresses and options it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Discover,
    /// Answers `offer` in the SELECTING state (broadcast, with server id and requested IP).
    Select {
        offer: Ipv4Addr,
        server: Ipv4Addr,
    },
    /// RENEWING (unicast to the server) and REBINDING (broadcast): `ciaddr` is the lease.
    Extend {
        address: Ipv4Addr,
    },
    /// Gives the lease back.
    Release {
        address: Ipv4Addr,
        server: Ipv4Addr,
    },
}

/// Builds a client message for `params`, identified by `xid` and the interface's `mac`.
pub fn client_message(kind: Kind, params: &LeaseParams, xid: u32, mac: &[u8; 6]) -> Vec<u8> {
    let unspecified = Ipv4Addr::UNSPECIFIED;
    let ciaddr = match kind {
        Kind::Extend { address } | Kind::Release { address, .. } => address,
        _ => unspecified,
    };
    let mut msg = Message::new_with_id(xid, ciaddr, unspecified, unspecified, unspecified, mac);
    msg.set_opcode(Opcode::BootRequest);
    // A client with an address can take unicast replies; before that, the broadcast flag is
    // what lets a reply reach an interface that shares its MAC (ipvlan).
    if params.broadcast && matches!(kind, Kind::Discover | Kind::Select { .. }) {
        msg.set_flags(Flags::default().set_broadcast());
    }
    let opts = msg.opts_mut();
    let msg_type = match kind {
        Kind::Discover => MessageType::Discover,
        Kind::Select { .. } | Kind::Extend { .. } => MessageType::Request,
        Kind::Release { .. } => MessageType::Release,
    };
    opts.insert(DhcpOption::MessageType(msg_type));
    opts.insert(DhcpOption::ClientIdentifier(params.client_id.clone()));
    match kind {
        Kind::Select { offer, server } => {
            opts.insert(DhcpOption::RequestedIpAddress(offer));
            opts.insert(DhcpOption::ServerIdentifier(server));
        }
        Kind::Release { server, .. } => {
            opts.insert(DhcpOption::ServerIdentifier(server));
        }
        Kind::Discover | Kind::Extend { .. } => {}
    }
    if !matches!(kind, Kind::Release { .. }) {
        if !params.request.is_empty() {
            let codes = params
                .request
                .iter()
                .map(|c| OptionCode::from(*c))
                .collect();
            opts.insert(DhcpOption::ParameterRequestList(codes));
        }
        opts.insert(DhcpOption::MaxMessageSize(1500));
    }
    // Provided options go in raw, so any code works; a provided client identifier replaces ours.
    for p in &params.provide {
        opts.insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::from(p.code),
            p.value.as_bytes().to_vec(),
        )));
    }
    let mut buf = Vec::with_capacity(548);
    // Encoding into a Vec cannot fail for the options above.
    let _ = msg.encode(&mut Encoder::new(&mut buf));
    buf
}

/// A server message that answers ours.
#[derive(Debug)]
pub struct Reply {
    pub kind: MessageType,
    pub yiaddr: Ipv4Addr,
    pub server: Option<Ipv4Addr>,
    msg: Message,
}

impl Reply {
    /// Decodes `payload` when it is a reply to transaction `xid` for `mac`; anything else on the
    /// wire (other clients' replies, garbage) is `None`.
    pub fn parse(payload: &[u8], xid: u32, mac: &[u8; 6]) -> Option<Reply> {
        if !decodable(payload) {
            return None;
        }
        let msg = Message::decode(&mut Decoder::new(payload)).ok()?;
        if msg.opcode() != Opcode::BootReply || msg.xid() != xid || msg.chaddr().get(..6)? != mac {
            return None;
        }
        let kind = msg.opts().msg_type()?;
        let server = match msg.opts().get(OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(ip)) => Some(*ip),
            _ => None,
        };
        Some(Reply {
            kind,
            yiaddr: msg.yiaddr(),
            server,
            msg,
        })
    }

    /// The server's explanation in a NAK, if any.
    pub fn message(&self) -> Option<String> {
        match self.msg.opts().get(OptionCode::Message) {
            Some(DhcpOption::Message(m)) => Some(m.clone()),
            _ => None,
        }
    }

    /// The lease an ACK grants.
    pub fn lease(&self) -> Result<Lease, String> {
        let opts = self.msg.opts();
        let mask = match opts.get(OptionCode::SubnetMask) {
            Some(DhcpOption::SubnetMask(m)) => *m,
            _ => return Err("the server's DHCPACK has no subnet mask (option 1)".into()),
        };
        let prefix = ipnet::ipv4_mask_to_prefix(mask)
            .map_err(|_| format!("the server's subnet mask {mask} is not a prefix"))?;
        let address = Ipv4Net::new(self.yiaddr, prefix)
            .map_err(|_| format!("the server's subnet mask {mask} is not a prefix"))?;
        let server = self
            .server
            .ok_or("the server's DHCPACK has no server identifier (option 54)")?;
        let u32_opt = |code| match opts.get(code) {
            Some(
                DhcpOption::AddressLeaseTime(v) | DhcpOption::Renewal(v) | DhcpOption::Rebinding(v),
            ) => Some(*v),
            _ => None,
        };
        let lease_secs = u32_opt(OptionCode::AddressLeaseTime).unwrap_or(DEFAULT_LEASE_SECS);
        if lease_secs < MIN_LEASE_SECS {
            return Err(format!(
                "the server's DHCPACK grants a lease of {lease_secs} s: the address would \
                 expire before the pod could use it (at least {MIN_LEASE_SECS} s is needed)"
            ));
        }
        let routers = match opts.get(OptionCode::Router) {
            Some(DhcpOption::Router(r)) => r.clone(),
            _ => Vec::new(),
        };
        let dns = match opts.get(OptionCode::DomainNameServer) {
            Some(DhcpOption::DomainNameServer(d)) => d.clone(),
            _ => Vec::new(),
        };
        let domain = match opts.get(OptionCode::DomainName) {
            Some(DhcpOption::DomainName(d)) => Some(d.trim_end_matches('\0').to_owned()),
            _ => None,
        };
        let mtu = match opts.get(OptionCode::InterfaceMtu) {
            Some(DhcpOption::InterfaceMtu(m)) => Some(*m),
            _ => None,
        };
        let classless = match opts.get(OptionCode::ClasslessStaticRoute) {
            Some(DhcpOption::ClasslessStaticRoute(r)) => r.clone(),
            _ => Vec::new(),
        };
        let static_routes = match opts.get(OptionCode::StaticRoutingTable) {
            Some(DhcpOption::StaticRoutingTable(r)) => r.clone(),
            _ => Vec::new(),
        };
        Ok(Lease {
            address,
            server,
            lease_secs,
            t1_secs: u32_opt(OptionCode::Renewal),
            t2_secs: u32_opt(OptionCode::Rebinding),
            routers,
            dns,
            domain,
            mtu,
            routes: choose_routes(&classless, &static_routes, &routers_first(opts)),
        })
    }
}

/// Whether dhcproto 0.13 can decode `payload` without panicking: `chaddr()` slices by the
/// wire's `hlen` (past 16, out of bounds), and a few options of fixed size are checked by debug
/// assertions (then, for 81, a length subtraction underflows). Such a reply is malformed; it is
/// dropped as garbage is. Options are walked as dhcproto walks them: consecutive ones with one
/// code are joined (RFC 3396), pad or end stops a run.
fn decodable(payload: &[u8]) -> bool {
    /// The fixed BOOTP fields and the magic cookie.
    const OPTIONS_AT: usize = 240;
    if payload.get(2).is_none_or(|&hlen| hlen > 16) {
        return false;
    }
    let fits = |code: u8, len: usize| match code {
        80 => len == 0,
        81 => len >= 3,
        94 => len == 3,
        152..=155 => len == 4,
        _ => true,
    };
    let mut rest = payload.get(OPTIONS_AT..).unwrap_or_default();
    let mut run: Option<(u8, usize)> = None;
    while let Some(&code) = rest.first() {
        match code {
            255 => break,
            0 => {
                if run.take().is_some_and(|(c, total)| !fits(c, total)) {
                    return false;
                }
                rest = &rest[1..];
                continue;
            }
            _ => {}
        }
        let Some(after) = rest
            .get(1)
            .and_then(|&len| rest.get(usize::from(len) + 2..))
        else {
            break;
        };
        let len = rest.len() - after.len() - 2;
        rest = after;
        run = match run {
            Some((c, total)) if c == code => Some((c, total + len)),
            Some((c, total)) if !fits(c, total) => return false,
            _ => Some((code, len)),
        };
    }
    run.is_none_or(|(c, total)| fits(c, total))
}

fn routers_first(opts: &dhcproto::v4::DhcpOptions) -> Option<Ipv4Addr> {
    match opts.get(OptionCode::Router) {
        Some(DhcpOption::Router(r)) => r.first().copied(),
        _ => None,
    }
}

/// RFC 3442: when the server sends classless routes (121), they are the only routes, and the
/// router option is ignored. Otherwise the static routes (33, classful destinations) plus a
/// default route through the first router.
pub fn choose_routes(
    classless: &[(Ipv4Net, Ipv4Addr)],
    static_routes: &[(Ipv4Addr, Ipv4Addr)],
    router: &Option<Ipv4Addr>,
) -> Vec<LeaseRoute> {
    if !classless.is_empty() {
        return classless
            .iter()
            .map(|(dst, gw)| LeaseRoute {
                dst: *dst,
                gw: (!gw.is_unspecified()).then_some(*gw),
            })
            .collect();
    }
    let mut routes: Vec<LeaseRoute> = static_routes
        .iter()
        .filter(|(dst, _)| !dst.is_unspecified()) // RFC 2132: 0.0.0.0 is not allowed here.
        .map(|(dst, gw)| LeaseRoute {
            dst: classful(*dst),
            gw: Some(*gw),
        })
        .collect();
    if let Some(gw) = router {
        routes.push(LeaseRoute {
            dst: Ipv4Net::default(),
            gw: Some(*gw),
        });
    }
    routes
}

/// Option 33 destinations carry no mask: the class of the address gives it.
fn classful(dst: Ipv4Addr) -> Ipv4Net {
    let prefix = match dst.octets()[0] {
        0..=127 => 8,
        128..=191 => 16,
        _ => 24,
    };
    Ipv4Net::new(dst, prefix)
        .map(|n| n.trunc())
        .unwrap_or_default()
}

/// A route the lease asks for; `gw: None` is on-link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRoute {
    pub dst: Ipv4Net,
    pub gw: Option<Ipv4Addr>,
}

/// What an ACK grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub address: Ipv4Net,
    pub server: Ipv4Addr,
    pub lease_secs: u32,
    /// T1 and T2 (options 58 and 59) as the server sent them; the daemon's schedule applies
    /// the defaults. Older lease files hold numbers here, which read as `Some`.
    pub t1_secs: Option<u32>,
    pub t2_secs: Option<u32>,
    pub routers: Vec<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    pub domain: Option<String>,
    pub mtu: Option<u16>,
    pub routes: Vec<LeaseRoute>,
}

impl Lease {
    /// The CNI result: the address with the first router as gateway, the routes, and the DNS
    /// servers and domain.
    pub fn to_result(&self, priority: Option<u32>) -> CniResult {
        let routes = self
            .routes
            .iter()
            .map(|r| {
                let mut route = Route::new(IpNet::V4(r.dst), r.gw.map(IpAddr::V4));
                if r.gw.is_none() {
                    route.scope = Some(RT_SCOPE_LINK);
                }
                route.priority = priority;
                route
            })
            .collect();
        CniResult {
            ips: vec![IpConfig {
                address: IpNet::V4(self.address),
                gateway: self.routers.first().map(|r| IpAddr::V4(*r)),
                interface: None,
            }],
            routes,
            dns: Dns {
                nameservers: self.dns.iter().map(ToString::to_string).collect(),
                domain: self.domain.clone().unwrap_or_default(),
                ..Dns::default()
            },
            ..CniResult::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhcp::config::Provided;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn params() -> LeaseParams {
        LeaseParams {
            client_id: b"\0c/n/eth0".to_vec(),
            request: vec![1, 3, 121],
            provide: vec![Provided {
                code: 12,
                value: "web-1".into(),
            }],
            broadcast: true,
            priority: None,
        }
    }

    fn decode(bytes: &[u8]) -> Message {
        Message::decode(&mut Decoder::new(bytes)).unwrap()
    }

    #[test]
    fn discover_carries_id_requests_and_provided_options() {
        let m = decode(&client_message(Kind::Discover, &params(), 7, &MAC));
        assert_eq!(m.xid(), 7);
        assert!(m.flags().broadcast());
        assert_eq!(m.opts().msg_type(), Some(MessageType::Discover));
        assert_eq!(
            m.opts().get(OptionCode::ClientIdentifier),
            Some(&DhcpOption::ClientIdentifier(b"\0c/n/eth0".to_vec()))
        );
        assert_eq!(
            m.opts().get(OptionCode::ParameterRequestList),
            Some(&DhcpOption::ParameterRequestList(vec![
                OptionCode::SubnetMask,
                OptionCode::Router,
                OptionCode::ClasslessStaticRoute
            ]))
        );
        assert_eq!(
            m.opts().get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("web-1".into()))
        );
    }

    #[test]
    fn renew_and_release_carry_the_address() {
        let a = Ipv4Addr::new(10, 0, 0, 5);
        let s = Ipv4Addr::new(10, 0, 0, 1);
        let m = decode(&client_message(
            Kind::Extend { address: a },
            &params(),
            1,
            &MAC,
        ));
        assert_eq!(m.ciaddr(), a);
        assert!(!m.flags().broadcast());
        let m = decode(&client_message(
            Kind::Release {
                address: a,
                server: s,
            },
            &params(),
            1,
            &MAC,
        ));
        assert_eq!(m.opts().msg_type(), Some(MessageType::Release));
        assert_eq!(
            m.opts().get(OptionCode::ServerIdentifier),
            Some(&DhcpOption::ServerIdentifier(s))
        );
        assert!(m.opts().get(OptionCode::ParameterRequestList).is_none());
    }

    fn ack(opts: Vec<DhcpOption>) -> Vec<u8> {
        let z = Ipv4Addr::UNSPECIFIED;
        let mut m = Message::new_with_id(9, z, Ipv4Addr::new(10, 0, 0, 5), z, z, &MAC);
        m.set_opcode(Opcode::BootReply);
        m.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Ack));
        m.opts_mut()
            .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 0, 0, 1)));
        for o in opts {
            m.opts_mut().insert(o);
        }
        let mut buf = Vec::new();
        m.encode(&mut Encoder::new(&mut buf)).unwrap();
        buf
    }

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn a_lease_too_short_to_use_is_refused() {
        for secs in [0, 1] {
            let bytes = ack(vec![
                DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)),
                DhcpOption::AddressLeaseTime(secs),
            ]);
            let e = Reply::parse(&bytes, 9, &MAC).unwrap().lease().unwrap_err();
            assert!(e.contains(&format!("a lease of {secs} s")), "{e}");
        }
    }

    #[test]
    fn classless_routes_replace_router_and_static_routes() {
        let bytes = ack(vec![
            DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)),
            DhcpOption::Router(vec![Ipv4Addr::new(10, 0, 0, 1)]),
            DhcpOption::StaticRoutingTable(vec![(
                Ipv4Addr::new(172, 16, 0, 0),
                Ipv4Addr::new(10, 0, 0, 9),
            )]),
            DhcpOption::ClasslessStaticRoute(vec![
                (net("192.0.2.0/24"), Ipv4Addr::new(10, 0, 0, 254)),
                (net("198.51.100.0/24"), Ipv4Addr::UNSPECIFIED),
            ]),
            DhcpOption::DomainNameServer(vec![Ipv4Addr::new(10, 0, 0, 53)]),
            DhcpOption::DomainName("example.test".into()),
            DhcpOption::AddressLeaseTime(600),
        ]);
        assert!(
            Reply::parse(&bytes, 8, &MAC).is_none(),
            "another transaction"
        );
        let lease = Reply::parse(&bytes, 9, &MAC).unwrap().lease().unwrap();
        assert_eq!(lease.address, net("10.0.0.5/24"));
        assert_eq!(
            (lease.lease_secs, lease.t1_secs, lease.t2_secs),
            (600, None, None)
        );
        let r = serde_json::to_value(lease.to_result(Some(5))).unwrap();
        assert_eq!(
            r,
            serde_json::json!({
                "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1"}],
                "routes": [
                    {"dst": "192.0.2.0/24", "gw": "10.0.0.254", "priority": 5},
                    {"dst": "198.51.100.0/24", "scope": 253, "priority": 5}
                ],
                "dns": {"nameservers": ["10.0.0.53"], "domain": "example.test"}
            })
        );
    }

    #[test]
    fn static_routes_then_default_through_router() {
        let routes = choose_routes(
            &[],
            &[
                (Ipv4Addr::new(172, 16, 0, 0), Ipv4Addr::new(10, 0, 0, 9)),
                (Ipv4Addr::new(10, 1, 0, 0), Ipv4Addr::new(10, 0, 0, 8)),
                (Ipv4Addr::new(192, 168, 7, 0), Ipv4Addr::new(10, 0, 0, 7)),
            ],
            &Some(Ipv4Addr::new(10, 0, 0, 1)),
        );
        let dsts: Vec<String> = routes.iter().map(|r| r.dst.to_string()).collect();
        assert_eq!(
            dsts,
            ["172.16.0.0/16", "10.0.0.0/8", "192.168.7.0/24", "0.0.0.0/0"]
        );
        assert!(choose_routes(&[], &[], &None).is_empty());
    }

    #[test]
    fn timers_as_the_server_sent_them() {
        let bytes = ack(vec![
            DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)),
            DhcpOption::Renewal(100),
            DhcpOption::Rebinding(200),
        ]);
        let lease = Reply::parse(&bytes, 9, &MAC).unwrap().lease().unwrap();
        assert_eq!(
            (lease.lease_secs, lease.t1_secs, lease.t2_secs),
            (DEFAULT_LEASE_SECS, Some(100), Some(200))
        );
    }

    #[test]
    fn ack_without_mask_is_refused() {
        let bytes = ack(vec![]);
        let e = Reply::parse(&bytes, 9, &MAC).unwrap().lease().unwrap_err();
        assert!(e.contains("subnet mask"), "{e}");
    }
}
