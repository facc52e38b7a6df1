//! The `ptp` plugin: a veth pair per attachment, one end in the pod, the other left in the
//! node with no bridge, and the node routing to the pod over it (point to point).
//!
//! As the reference does: each IPAM address goes on the pod's end with its prefix, but the
//! prefix route is replaced by a link route to the gateway and a route to the subnet via the
//! gateway, so all the pod's traffic goes through the node; the node's end gets each gateway
//! as a host address (/32, /128) and a host route to each pod address. Forwarding is turned
//! on for each family, and `ipMasq` masquerades the pod's traffic as bridge does.
//!
//! Deliberate changes: an address without a gateway is refused with a message (the reference
//! fails halfway and leaves the veth); a failed ADD undoes everything; the result keeps the
//! DNS settings IPAM returned; IPv6 addresses in the pod are added without DAD; an address
//! without a prefix route of its own (a /32) works; DEL is bridge's, which removes only a veth
//! and the attachment's rules even when the pod's namespace is gone.

use std::net::IpAddr;

use cni::keys::Keys;
use cni::{CmdArgs, CniError, CniResult, Interface, NetConf};
use ipnet::IpNet;
use netkit::netlink::{AddrOpts, Link, Route, RT_SCOPE_HOST, RT_SCOPE_LINK};
use netkit::{Family, NetNs, Netlink};
use serde::Deserialize;

use crate::support::check;
use crate::support::container::{self, ContainerIface};
use crate::support::ip_masq::{self, Backend as MasqBackend};
use crate::support::ipam_call::{self, Ipam};
use crate::support::sys::{open_netns, sys, sys_ctx, with_cleanup_failures};

/// The plugin, as registered in the multi-call binary's table.
pub struct Ptp;

/// ptp's own keys, as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    ip_masq: bool,
    #[serde(default)]
    ip_masq_backend: Option<String>,
    /// 0 leaves the kernel's default.
    #[serde(default)]
    mtu: u32,
}

/// The checked configuration.
struct PtpConf {
    net: NetConf,
    /// The IPAM plugin: ptp needs addresses.
    ipam_type: String,
    ip_masq: bool,
    ip_masq_backend: Option<MasqBackend>,
    mtu: Option<u32>,
}

impl PtpConf {
    fn parse(stdin: &[u8]) -> Result<PtpConf, CniError> {
        let config = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&config)?;
        let raw: Raw = cni::decode::from_value(&config)?;
        net.version()?;
        let ipam_type = net
            .ipam_type()
            .ok_or_else(|| CniError::invalid_config("ptp needs addresses: set \"ipam\""))?
            .to_owned();
        Ok(PtpConf {
            ipam_type,
            ip_masq_backend: ip_masq::parse_backend(raw.ip_masq_backend.as_deref())?,
            ip_masq: raw.ip_masq,
            mtu: (raw.mtu != 0).then_some(raw.mtu),
            net,
        })
    }
}

/// The keys this plugin reads, besides those every config carries.
pub(crate) fn keys() -> Keys {
    Keys::of::<Raw>()
}

impl cni::Plugin for Ptp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = PtpConf::parse(&args.stdin)?;
        let version = conf.net.version()?;
        let pod = open_netns(&args.netns)?;
        let node = Netlink::new().map_err(sys)?;
        let ipam = Ipam::new(&conf.ipam_type, args);
        let mut done = Done::default();
        match attach(args, &conf, &pod, &node, &ipam, &mut done) {
            Ok(mut result) => {
                result.cni_version = version.to_string();
                Ok(result)
            }
            Err(e) => Err(undo(e, args, &conf, &node, &ipam, &done)),
        }
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        crate::interface::bridge::del(args)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = PtpConf::parse(&args.stdin)?;
        let pod = open_netns(&args.netns)?;
        Ipam::new(&conf.ipam_type, args).check()?;
        let prev = check::prev_result(&conf.net)?;
        let entry = check::container_entry(&prev, args)?;
        let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;
        let link = check::pod_link(&pod_nl, args)?;
        check::kind(&link, "veth")?;
        check::up(&link)?;
        check::mac(entry, &link)?;
        check::addresses(&pod_nl, &link, &prev)?;
        check::routes(&pod_nl, &prev)?;
        check_node_side(&Netlink::new().map_err(sys)?, &prev)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = PtpConf::parse(&args.stdin)?;
        Ipam::new(&conf.ipam_type, args).status()
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let net: NetConf = cni::config::parse_plugin_config(&args.stdin)?;
        match net.ipam_type() {
            Some(t) => Ipam::new(t, args).gc(),
            None => Ok(()),
        }
    }

    fn validate(&self, config: &[u8]) -> Result<(), CniError> {
        let conf = PtpConf::parse(config)?;
        ipam_call::validate(&conf.net, config)
    }
}

/// What a failing ADD has to undo.
#[derive(Default)]
struct Done {
    ipam: bool,
    host_veth: Option<u32>,
    masq: Option<Vec<IpNet>>,
}

fn attach(
    args: &CmdArgs,
    conf: &PtpConf,
    pod: &NetNs,
    node: &Netlink,
    ipam: &Ipam,
    done: &mut Done,
) -> Result<CniResult, CniError> {
    let mut result = ipam.add_addresses(conf.net.version()?, &mut done.ipam)?;
    let gateways = gateways(&result)?;
    for (family, key) in [
        (Family::V4, "net/ipv4/ip_forward"),
        (Family::V6, "net/ipv6/conf/all/forwarding"),
    ] {
        if gateways
            .iter()
            .any(|(net, _)| Family::of_net(net) == family)
        {
            netkit::sysctl::write(key, "1").map_err(sys_ctx("enabling forwarding for ptp"))?;
        }
    }

    let host = container::create_veth(node, &args.ifname, Some(pod), conf.mtu)?;
    done.host_veth = Some(host.index);
    let host_ctx = || format!("host veth {:?}", host.name);
    node.set_up(host.index).map_err(sys_ctx(host_ctx()))?;

    let pod_nl = Netlink::in_ns(pod).map_err(sys)?;
    let cont_ctx = || format!("interface {:?} in netns {}", args.ifname, args.netns);
    let cont = pod_nl.link(&args.ifname).map_err(sys_ctx(cont_ctx()))?;
    for ip in &mut result.ips {
        ip.interface = Some(1);
    }
    let iface = ContainerIface {
        ns: pod,
        nl: &pod_nl,
        name: &args.ifname,
        index: cont.index,
    };
    iface.apply(&result, false, false)?;
    route_via_gateways(&pod_nl, cont.index, &gateways).map_err(sys_ctx(cont_ctx()))?;
    node_side(node, &host, &gateways).map_err(sys_ctx(host_ctx()))?;

    if conf.ip_masq {
        ip_masq::setup(
            conf.ip_masq_backend,
            &conf.net.name,
            args,
            &result,
            &mut done.masq,
        )?;
    }

    let cont = pod_nl
        .link_by_index(cont.index)
        .map_err(sys_ctx(cont_ctx()))?
        .unwrap_or(cont);
    let host = node.link_by_index(host.index).map_err(sys)?.unwrap_or(host);
    result.interfaces = vec![
        Interface {
            name: host.name.clone(),
            mac: host.mac.map(|m| netkit::format_mac(&m)).unwrap_or_default(),
            ..Interface::default()
        },
        container::result_entry(&cont, &args.netns),
    ];
    result.dns = ipam_call::result_dns(conf.net.dns.as_ref(), &result.dns);
    Ok(result)
}

/// Each address with its gateway: a point-to-point link has nothing to reach but the node, so
/// an address without a gateway is refused.
fn gateways(result: &CniResult) -> Result<Vec<(IpNet, IpAddr)>, CniError> {
    result
        .ips
        .iter()
        .map(|ip| match ip.gateway {
            Some(gw) if gw.is_ipv4() == ip.address.addr().is_ipv4() => Ok((ip.address, gw)),
            _ => Err(CniError::invalid_config(format!(
                "ptp needs a gateway for address {}: the pod reaches everything through it \
                 (host-local gives one by default; with static IPAM set \"gateway\")",
                ip.address
            ))),
        })
        .collect()
}

/// In the pod: for each address, the kernel's prefix route makes way for a link route to the
/// gateway and a route to the subnet via the gateway, both with the address as source.
fn route_via_gateways(
    pod_nl: &Netlink,
    index: u32,
    gateways: &[(IpNet, IpAddr)],
) -> netkit::Result<()> {
    for (net, gw) in gateways {
        let subnet = net.trunc();
        match pod_nl.del_route(&Route::new(subnet).dev(index)) {
            // A /32 or /128 has no prefix route to replace.
            Err(e) if e.errno() == Some(libc::ESRCH) => {}
            other => other?,
        }
        let gw_host = IpNet::from(*gw);
        pod_nl.add_route(
            &Route::new(gw_host)
                .dev(index)
                .scope(RT_SCOPE_LINK)
                .src(net.addr()),
        )?;
        if subnet != gw_host {
            pod_nl.add_route(&Route::new(subnet).dev(index).via(*gw).src(net.addr()))?;
        }
    }
    Ok(())
}

/// On the node's end: each gateway as a host address, and a host route to each pod address.
fn node_side(node: &Netlink, host: &Link, gateways: &[(IpNet, IpAddr)]) -> netkit::Result<()> {
    let mut added = Vec::new();
    for (net, gw) in gateways {
        // Two addresses with one gateway put it on the link once.
        if !added.contains(gw) {
            node.add_addr(host.index, IpNet::from(*gw), AddrOpts::default())?;
            added.push(*gw);
        }
        let route = Route::new(IpNet::from(net.addr()))
            .dev(host.index)
            .scope(RT_SCOPE_HOST);
        match node.add_route(&route) {
            Err(e) if e.errno() == Some(libc::EEXIST) => {}
            other => other?,
        }
    }
    Ok(())
}

/// CHECK of what ADD put on the node: its veth (the result's interface outside the pod), up,
/// with each gateway as a host address and a host route to each pod address.
fn check_node_side(node: &Netlink, prev: &CniResult) -> Result<(), CniError> {
    let name = prev
        .interfaces
        .iter()
        .find(|i| i.sandbox.is_empty())
        .map(|i| i.name.as_str())
        .ok_or_else(|| check::fail("prevResult names no veth of the node".into()))?;
    let host = node
        .link_by_name(name)
        .map_err(sys)?
        .ok_or_else(|| check::fail(format!("the node's veth {name:?} is missing")))?;
    check::kind(&host, "veth")?;
    check::up(&host)?;
    let addrs = node.addrs(Some(host.index), None).map_err(sys)?;
    let mut routes = Vec::new();
    for family in [Family::V4, Family::V6] {
        routes.extend(
            node.routes(family, Some(netkit::netlink::RT_TABLE_MAIN))
                .map_err(sys)?,
        );
    }
    for ip in &prev.ips {
        if let Some(gw) = ip.gateway.map(IpNet::from) {
            if !addrs.iter().any(|a| a.net == gw) {
                return Err(check::fail(format!(
                    "address {gw} is missing from {name:?}"
                )));
            }
        }
        let pod = IpNet::from(ip.address.addr());
        if !routes
            .iter()
            .any(|r| r.dst == pod && r.oif == Some(host.index))
        {
            return Err(check::fail(format!(
                "the node's route to {pod} dev {name:?} is missing"
            )));
        }
    }
    Ok(())
}

/// Undoes a failed ADD; cleanup failures are added to the error's details.
fn undo(
    err: CniError,
    args: &CmdArgs,
    conf: &PtpConf,
    node: &Netlink,
    ipam: &Ipam,
    done: &Done,
) -> CniError {
    let mut failures = Vec::new();
    if let Some(addrs) = &done.masq {
        failures.extend(ip_masq::undo(&conf.net.name, args, addrs));
    }
    // IPAM first, while the interface still exists.
    if done.ipam {
        if let Err(e) = ipam.del() {
            failures.push(format!("releasing the IPAM reservation: {e}"));
        }
    }
    if let Some(index) = done.host_veth {
        if let Err(e) = node.del_link_if_exists(index) {
            failures.push(e.to_string());
        }
    }
    with_cleanup_failures(err, &failures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni::IpConfig;

    fn parse(extra: &str) -> Result<PtpConf, CniError> {
        let json = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":{{"type":"host-local"}}{extra}}}"#
        );
        PtpConf::parse(json.as_bytes())
    }

    #[test]
    fn options() {
        let c = parse("").expect("parsed");
        assert!(!c.ip_masq && c.ip_masq_backend.is_none() && c.mtu.is_none());
        let c = parse(r#","ipMasq":true,"ipMasqBackend":"nftables","mtu":1400"#).expect("parsed");
        assert!(c.ip_masq);
        assert_eq!(c.ip_masq_backend, Some(MasqBackend::Nftables));
        assert_eq!(c.mtu, Some(1400));
        assert_eq!(
            parse(r#","ipMasqBackend":"pf""#).err().map(|e| e.code),
            Some(7)
        );
        assert_eq!(parse(r#","mtu":-1"#).err().map(|e| e.code), Some(6));
        let e = PtpConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"ptp"}"#)
            .err()
            .expect("refused");
        assert_eq!(
            (e.code, e.msg.as_str()),
            (7, "ptp needs addresses: set \"ipam\"")
        );
    }

    #[test]
    fn every_address_needs_a_gateway_of_its_family() {
        let ip = |a: &str, gw: Option<&str>| IpConfig {
            address: a.parse().expect("net"),
            gateway: gw.map(|g| g.parse().expect("ip")),
            interface: None,
        };
        let mut r = CniResult {
            ips: vec![
                ip("10.1.0.5/24", Some("10.1.0.1")),
                ip("fd01::5/64", Some("fd01::1")),
            ],
            ..CniResult::default()
        };
        assert_eq!(gateways(&r).ok().map(|g| g.len()), Some(2));
        r.ips.push(ip("10.2.0.5/24", None));
        let e = gateways(&r).expect_err("refused");
        assert!(
            e.msg.contains("gateway for address 10.2.0.5/24"),
            "{}",
            e.msg
        );
        r.ips = vec![ip("10.1.0.5/24", Some("fd01::1"))];
        assert!(gateways(&r).is_err());
    }
}
