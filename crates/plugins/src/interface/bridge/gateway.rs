//! The gateway side of `isGateway`: which addresses the bridge carries, the default route for
//! `isDefaultGateway`, putting the addresses on the bridge (or on its VLAN gateway port), and
//! forwarding.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cni::{CniError, CniResult, Route};
use ipnet::IpNet;
use netkit::netlink::{AddrOpts, Link};
use netkit::{Family, Netlink};

use super::config::BridgeConf;
use super::port::{self, PortOpts, PortVlans};
use crate::support::sys::{sys, sys_ctx};

/// Index of the container interface in the result (after the bridge and the host veth).
pub const CONTAINER_IFACE_INDEX: usize = 2;

/// Gateway addresses for the bridge, per family.
#[derive(Debug, Default)]
pub struct Gateways {
    pub v4: Vec<IpNet>,
    pub v6: Vec<IpNet>,
}

/// Fills in the result like the reference's `calcGateways`: every address belongs to the
/// container interface; with `isGateway` an address without a gateway gets the first host of
/// its subnet; with `isDefaultGateway` a family without a default route via a gateway gets one.
pub fn calc(result: &mut CniResult, conf: &BridgeConf) -> Gateways {
    let mut gws = Gateways::default();
    let mut has_default = [false, false];
    for ip in &mut result.ips {
        ip.interface = Some(CONTAINER_IFACE_INDEX);
        if ip.gateway.is_none() && conf.is_gateway {
            ip.gateway = Some(first_host(&ip.address));
        }
        let v4 = ip.address.addr().is_ipv4();
        let any: IpNet = if v4 {
            IpNet::new(Ipv4Addr::UNSPECIFIED.into(), 0)
        } else {
            IpNet::new(Ipv6Addr::UNSPECIFIED.into(), 0)
        }
        .unwrap_or_default();
        let found = &mut has_default[usize::from(!v4)];
        if conf.is_default_gateway && !*found {
            *found = result.routes.iter().any(|r| r.gw.is_some() && r.dst == any);
            if !*found {
                result.routes.push(Route::new(any, ip.gateway));
                *found = true;
            }
        }
        if conf.is_gateway {
            if let Some(gw) = ip.gateway {
                // Same prefix length as the address: both are on one subnet.
                let gw = IpNet::new(gw, ip.address.prefix_len()).unwrap_or(ip.address);
                if v4 {
                    gws.v4.push(gw);
                } else {
                    gws.v6.push(gw);
                }
            }
        }
    }
    gws
}

/// The subnet's network address plus one.
fn first_host(net: &IpNet) -> IpAddr {
    match net.network() {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add(1))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add(1))),
    }
}

/// The `<bridge>.<vlan>` interface that carries the gateway for an access VLAN.
pub struct VlanIface {
    pub link: Link,
    /// Its bridge-side peer, when this ADD created the pair.
    pub created_port: Option<u32>,
}

/// Puts the gateway addresses on the bridge, or on its `<bridge>.<vlan>` gateway port when the
/// port has an access VLAN, and turns forwarding on for each family that has one. `vlan_iface`
/// receives the VLAN gateway interface as soon as it exists (it goes in the result).
pub fn apply(
    nl: &Netlink,
    bridge: &Link,
    conf: &BridgeConf,
    gws: &Gateways,
    vlan_iface: &mut Option<VlanIface>,
) -> Result<(), CniError> {
    if gws.v4.is_empty() && gws.v6.is_empty() {
        return Ok(());
    }
    if conf.vlan != 0 {
        *vlan_iface = Some(ensure_vlan_iface(nl, bridge, conf.vlan, conf)?);
    }
    let target = vlan_iface.as_ref().map_or(bridge, |v| &v.link);
    for (family, list, forward_key) in [
        (Family::V4, &gws.v4, "net/ipv4/ip_forward"),
        (Family::V6, &gws.v6, "net/ipv6/conf/all/forwarding"),
    ] {
        for gw in list {
            ensure_addr(nl, target, family, *gw, conf)?;
        }
        if !list.is_empty() {
            netkit::sysctl::write(forward_key, "1")
                .map_err(sys_ctx("enabling forwarding for the gateway"))?;
        }
    }
    Ok(())
}

/// Makes sure `link` has `gw`. Another IPv4 address, or an overlapping IPv6 one, is an error,
/// or is replaced with `forceAddress`.
fn ensure_addr(
    nl: &Netlink,
    link: &Link,
    family: Family,
    gw: IpNet,
    conf: &BridgeConf,
) -> Result<(), CniError> {
    let ctx = || format!("gateway address {gw} on {:?}", link.name);
    let addrs = nl
        .addrs(Some(link.index), Some(family))
        .map_err(sys_ctx(ctx()))?;
    for a in &addrs {
        if a.net == gw {
            return Ok(());
        }
        let conflicts =
            family == Family::V4 || a.net.contains(&gw.addr()) || gw.contains(&a.net.addr());
        if !conflicts {
            continue;
        }
        if !conf.force_address {
            return Err(CniError::invalid_config(format!(
                "{:?} already has the address {}, not the gateway {gw}: set forceAddress to \
                 replace it, or give this network its own bridge",
                link.name, a.net
            )));
        }
        // The node's own uplink bridge keeps its address, whatever a network's config says.
        let leads = nl
            .default_route_iface(Some(family))
            .map_err(sys_ctx(ctx()))?;
        if leads == Some(link.index) {
            return Err(CniError::invalid_config(format!(
                "forceAddress: {:?} carries the node's default route: its address {} is the \
                 node's, and a network does not replace it; give this network its own bridge",
                link.name, a.net
            )));
        }
        nl.del_addr(link.index, a.net).map_err(sys_ctx(ctx()))?;
    }
    let opts = AddrOpts {
        nodad: !conf.enable_dad && family == Family::V6,
        noprefixroute: false,
    };
    match nl.add_addr(link.index, gw, opts) {
        Err(e) if e.errno() != Some(libc::EEXIST) => return Err(sys_ctx(ctx())(e)),
        _ => {}
    }
    // Pin the bridge's MAC: otherwise it follows the lowest port MAC and changes as ports come
    // and go.
    if let Some(mac) = link.mac {
        nl.set_mac(link.index, mac).map_err(sys_ctx(ctx()))?;
    }
    Ok(())
}

/// The `<bridge>.<vlan>` veth that carries the gateway address for an access VLAN: its peer
/// is a port of the bridge in that VLAN. Created once, shared by the VLAN's attachments.
fn ensure_vlan_iface(
    nl: &Netlink,
    bridge: &Link,
    vlan: u16,
    conf: &BridgeConf,
) -> Result<VlanIface, CniError> {
    let name = format!("{}.{vlan}", bridge.name);
    // The bridge's own name is valid (the bridge exists), so only the length can be wrong.
    if netkit::netlink::validate_ifname(&name).is_err() {
        return Err(CniError::invalid_config(format!(
            "the VLAN gateway interface name {name:?} is longer than 15 bytes: use a shorter \
             bridge name"
        )));
    }
    if let Some(link) = nl.link_by_name(&name).map_err(sys)? {
        return Ok(VlanIface {
            link,
            created_port: None,
        });
    }
    let opts = PortOpts {
        mtu: Some(bridge.mtu),
        hairpin: false,
        isolated: false,
        vlans: PortVlans {
            access: vlan,
            trunk: &[],
            preserve_default: conf.preserve_default_vlan,
        },
    };
    let port = port::create_port(nl, bridge, &name, None, &opts)?;
    let link = nl
        .link(&name)
        .and_then(|link| nl.set_up(link.index).map(|()| link))
        .map_err(|e| {
            let _ = nl.del_link(port.index);
            sys_ctx(format_args!("VLAN gateway interface {name:?}"))(e)
        })?;
    Ok(VlanIface {
        link,
        created_port: Some(port.index),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni::IpConfig;

    fn conf(extra: &str) -> BridgeConf {
        let json = format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"bridge"{extra}}}"#);
        BridgeConf::parse(json.as_bytes(), "").unwrap()
    }

    fn ip(addr: &str, gw: Option<&str>) -> IpConfig {
        IpConfig {
            address: addr.parse().unwrap(),
            gateway: gw.map(|g| g.parse().unwrap()),
            interface: None,
        }
    }

    #[test]
    fn gateway_defaults_to_first_host() {
        let mut r = CniResult {
            ips: vec![
                ip("10.1.2.9/24", None),
                ip("2001:db8::9/64", Some("2001:db8::fe")),
            ],
            ..CniResult::default()
        };
        let gws = calc(&mut r, &conf(r#","isGateway":true"#));
        assert_eq!(r.ips[0].gateway, Some("10.1.2.1".parse().unwrap()));
        assert!(r.ips.iter().all(|i| i.interface == Some(2)));
        assert_eq!(gws.v4, vec!["10.1.2.1/24".parse::<IpNet>().unwrap()]);
        assert_eq!(gws.v6, vec!["2001:db8::fe/64".parse::<IpNet>().unwrap()]);
        assert!(r.routes.is_empty());
    }

    #[test]
    fn no_gateway_without_is_gateway() {
        let mut r = CniResult {
            ips: vec![ip("10.1.2.9/24", None)],
            ..CniResult::default()
        };
        let gws = calc(&mut r, &conf(""));
        assert_eq!(r.ips[0].gateway, None);
        assert!(gws.v4.is_empty());
    }

    #[test]
    fn default_route_added_once_per_family() {
        let mut r = CniResult {
            ips: vec![
                ip("10.1.2.9/24", None),
                ip("10.3.0.9/16", None),
                ip("2001:db8::9/64", None),
            ],
            routes: vec![Route::new(
                "::/0".parse().unwrap(),
                Some("2001:db8::1".parse().unwrap()),
            )],
            ..CniResult::default()
        };
        calc(&mut r, &conf(r#","isDefaultGateway":true"#));
        let defaults: Vec<_> = r
            .routes
            .iter()
            .filter(|r| r.dst.prefix_len() == 0)
            .collect();
        assert_eq!(defaults.len(), 2, "{:?}", r.routes);
        assert_eq!(r.routes[1].gw, Some("10.1.2.1".parse().unwrap()));
    }
}
