//! Routes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteMetric};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::{Family, Netlink};
use crate::error::Result;

pub const RT_TABLE_MAIN: u32 = 254;
/// The table of the host's own addresses.
pub const RT_TABLE_LOCAL: u32 = 255;
pub const RT_SCOPE_UNIVERSE: u8 = 0;
pub const RT_SCOPE_LINK: u8 = 253;
pub const RT_SCOPE_HOST: u8 = 254;
const RT_SCOPE_NOWHERE: u8 = 255;
/// `RTPROT_BOOT`: what `ip route add` uses.
const RTPROT_BOOT: u8 = 3;
const RTN_UNICAST: u8 = 1;
/// `RTN_LOCAL`: a route to one of the host's own addresses.
pub const RTN_LOCAL: u8 = 2;

/// A route. Build one with [`Route::new`] and the setters; read them with [`Netlink::routes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination; `0.0.0.0/0` or `::/0` for a default route.
    pub dst: IpNet,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
    /// Routing table; main is 254.
    pub table: u32,
    /// `RTA_PRIORITY`.
    pub metric: Option<u32>,
    /// `RT_SCOPE_*`.
    pub scope: u8,
    /// `RTPROT_*`.
    pub protocol: u8,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    /// Preferred source address.
    pub src: Option<IpAddr>,
    /// `RTN_*` type (unicast, local, blackhole, ...).
    pub kind: u8,
}

impl Route {
    /// A unicast route to `dst` in the main table, scope universe, protocol boot (like
    /// `ip route add`). Direct routes without a gateway usually want `.scope(RT_SCOPE_LINK)`.
    pub fn new(dst: IpNet) -> Route {
        Route {
            dst: dst.trunc(),
            gateway: None,
            oif: None,
            table: RT_TABLE_MAIN,
            metric: None,
            scope: RT_SCOPE_UNIVERSE,
            protocol: RTPROT_BOOT,
            mtu: None,
            advmss: None,
            src: None,
            kind: RTN_UNICAST,
        }
    }

    pub fn via(mut self, gateway: IpAddr) -> Route {
        self.gateway = Some(gateway);
        self
    }

    pub fn dev(mut self, oif: u32) -> Route {
        self.oif = Some(oif);
        self
    }

    pub fn table(mut self, table: u32) -> Route {
        self.table = table;
        self
    }

    pub fn metric(mut self, metric: u32) -> Route {
        self.metric = Some(metric);
        self
    }

    pub fn scope(mut self, scope: u8) -> Route {
        self.scope = scope;
        self
    }

    pub fn mtu(mut self, mtu: u32) -> Route {
        self.mtu = Some(mtu);
        self
    }

    pub fn advmss(mut self, advmss: u32) -> Route {
        self.advmss = Some(advmss);
        self
    }

    pub fn src(mut self, src: IpAddr) -> Route {
        self.src = Some(src);
        self
    }

    /// Whether this is a default route (prefix length 0).
    pub fn is_default(&self) -> bool {
        self.dst.prefix_len() == 0
    }

    fn to_message(&self) -> RouteMessage {
        let mut msg = RouteMessage::default();
        let h = &mut msg.header;
        h.address_family = Family::of_net(&self.dst).address_family();
        h.destination_prefix_length = self.dst.prefix_len();
        // Tables above 255 only fit in RTA_TABLE, which is always sent.
        h.table = u8::try_from(self.table).unwrap_or(0);
        h.protocol = self.protocol.into();
        h.scope = self.scope.into();
        h.kind = self.kind.into();
        let attrs = &mut msg.attributes;
        if !self.is_default() {
            attrs.push(RouteAttribute::Destination(self.dst.addr().into()));
        }
        attrs.extend(self.gateway.map(|g| RouteAttribute::Gateway(g.into())));
        attrs.extend(self.oif.map(RouteAttribute::Oif));
        attrs.extend(self.metric.map(RouteAttribute::Priority));
        attrs.extend(self.src.map(|s| RouteAttribute::PrefSource(s.into())));
        attrs.push(RouteAttribute::Table(self.table));
        let metrics: Vec<RouteMetric> = self
            .mtu
            .map(RouteMetric::Mtu)
            .into_iter()
            .chain(self.advmss.map(RouteMetric::Advmss))
            .collect();
        if !metrics.is_empty() {
            attrs.push(RouteAttribute::Metrics(metrics));
        }
        msg
    }

    /// The routes a dumped message stands for: one, or one per next hop of a multipath route,
    /// the way IPv6 keeps them (each can be deleted by its gateway and interface).
    fn from_message(mut msg: RouteMessage) -> Vec<Route> {
        let mut hops = Vec::new();
        msg.attributes.retain_mut(|a| match a {
            RouteAttribute::MultiPath(h) => {
                hops.append(h);
                false
            }
            _ => true,
        });
        let Some(route) = Route::from_single(msg) else {
            return Vec::new();
        };
        if hops.is_empty() {
            return vec![route];
        }
        hops.into_iter()
            .map(|hop| Route {
                oif: Some(hop.interface_index),
                gateway: hop.attributes.into_iter().find_map(|a| match a {
                    RouteAttribute::Gateway(g) => route_ip(g),
                    _ => None,
                }),
                ..route.clone()
            })
            .collect()
    }

    fn from_single(msg: RouteMessage) -> Option<Route> {
        let h = &msg.header;
        let unspecified = match h.address_family {
            AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => return None,
        };
        let mut route = Route {
            dst: IpNet::new(unspecified, 0).ok()?,
            gateway: None,
            oif: None,
            table: h.table.into(),
            metric: None,
            scope: h.scope.into(),
            protocol: h.protocol.into(),
            mtu: None,
            advmss: None,
            src: None,
            kind: h.kind.into(),
        };
        let prefix_len = h.destination_prefix_length;
        for attr in msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => {
                    route.dst = IpNet::new(route_ip(a)?, prefix_len).ok()?
                }
                RouteAttribute::Gateway(a) => route.gateway = route_ip(a),
                RouteAttribute::Oif(i) => route.oif = Some(i),
                RouteAttribute::Priority(p) => route.metric = Some(p),
                RouteAttribute::PrefSource(a) => route.src = route_ip(a),
                RouteAttribute::Table(t) => route.table = t,
                RouteAttribute::Metrics(metrics) => {
                    for m in metrics {
                        match m {
                            RouteMetric::Mtu(v) => route.mtu = Some(v),
                            RouteMetric::Advmss(v) => route.advmss = Some(v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(route)
    }

    fn describe(&self) -> String {
        let mut s = format!("route {}", self.dst);
        if let Some(gw) = self.gateway {
            s.push_str(&format!(" via {gw}"));
        }
        if let Some(oif) = self.oif {
            s.push_str(&format!(" dev {oif}"));
        }
        if self.table != RT_TABLE_MAIN {
            s.push_str(&format!(" table {}", self.table));
        }
        if let Some(m) = self.metric {
            s.push_str(&format!(" metric {m}"));
        }
        s
    }
}

fn route_ip(addr: RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(a) => Some(IpAddr::V4(a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(a)),
        _ => None,
    }
}

impl Netlink {
    /// Adds a route; fails with EEXIST when one to the same destination with the same metric
    /// exists (IPv4), or an identical one (IPv6).
    pub fn add_route(&self, route: &Route) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::NewRoute(route.to_message()),
            NLM_F_CREATE | NLM_F_EXCL,
            || format!("adding {}", route.describe()),
        )
    }

    /// Adds a route beside those to the same destination and metric through other next hops,
    /// as `ip route prepend` and the reference plugins do: IPv4 lists it first, IPv6 makes them
    /// one multipath route. EEXIST only when an identical route exists.
    pub fn add_route_beside(&self, route: &Route) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::NewRoute(route.to_message()),
            NLM_F_CREATE,
            || format!("adding {}", route.describe()),
        )
    }

    /// Adds a route or replaces the one with the same destination, table and metric.
    pub fn replace_route(&self, route: &Route) -> Result<()> {
        self.ack(
            RouteNetlinkMessage::NewRoute(route.to_message()),
            NLM_F_CREATE | NLM_F_REPLACE,
            || format!("replacing {}", route.describe()),
        )
    }

    /// Deletes a route matching `route`'s destination, table, and gateway/oif/metric when set;
    /// its scope and protocol are not compared (like `ip route del`). ESRCH when there is none.
    pub fn del_route(&self, route: &Route) -> Result<()> {
        let mut msg = route.to_message();
        msg.header.scope = RT_SCOPE_NOWHERE.into();
        msg.header.protocol = 0.into();
        self.ack(RouteNetlinkMessage::DelRoute(msg), 0, || {
            format!("deleting {}", route.describe())
        })
    }

    /// Routes of one family, in one table or (with `None`) in all tables; a multipath route
    /// once per next hop.
    pub fn routes(&self, family: Family, table: Option<u32>) -> Result<Vec<Route>> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family.address_family();
        let replies = self.dump(RouteNetlinkMessage::GetRoute(msg), || {
            format!("listing {family:?} routes")
        })?;
        Ok(replies
            .into_iter()
            .flat_map(|r| match r {
                RouteNetlinkMessage::NewRoute(m) => Route::from_message(m),
                _ => Vec::new(),
            })
            .filter(|r| table.is_none_or(|t| r.table == t))
            .collect())
    }

    /// The link that carries the main table's default route (lowest metric, first listed), IPv4 before
    /// IPv6 when `family` is `None`.
    pub fn default_route_iface(&self, family: Option<Family>) -> Result<Option<u32>> {
        let families = match family {
            Some(f) => vec![f],
            None => vec![Family::V4, Family::V6],
        };
        for f in families {
            let found = self
                .routes(f, Some(RT_TABLE_MAIN))?
                .into_iter()
                .filter(|r| r.is_default() && r.kind == RTN_UNICAST)
                .filter_map(|r| Some((r.metric.unwrap_or(0), r.oif?)))
                // Of equal metrics the first listed, the one the kernel uses.
                .min_by_key(|&(metric, _)| metric);
            if let Some((_, oif)) = found {
                return Ok(Some(oif));
            }
        }
        Ok(None)
    }
}
