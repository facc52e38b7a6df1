//! DEL: release the IPAM reservation while the interface still exists (a DHCP release can still
//! go out), then delete the veth and this attachment's rules. Idempotent: a second DEL, an empty
//! `CNI_NETNS` or a namespace that is gone only release what is left.

use cni::{CmdArgs, CniError};
use ipnet::IpNet;
use netkit::{NetNs, Netlink};

use cni::NetConf;
use serde_json::Value;

use super::add::unique_id;
use crate::support::ipam_call::Ipam;
use crate::support::sys::{open_netns_for_del, sys};

/// What DEL needs of the config, read leniently: a config that no longer validates (or never
/// did, so ADD made nothing) must still let the attachment go.
struct DelConf {
    net: NetConf,
    mac_spoof_check: bool,
    ip_masq: bool,
}

impl DelConf {
    fn parse(stdin: &[u8]) -> Result<DelConf, CniError> {
        let raw = cni::decode::read(stdin)?;
        let net: NetConf = cni::decode::from_value(&raw)?;
        let flag = |key: &str| raw.get(key).and_then(Value::as_bool).unwrap_or(false);
        Ok(DelConf {
            mac_spoof_check: flag("macspoofchk"),
            ip_masq: flag("ipMasq"),
            net,
        })
    }
}

pub fn del(args: &CmdArgs) -> Result<(), CniError> {
    let conf = DelConf::parse(&args.stdin)?;
    let ipam = conf.net.ipam_type().map(|t| Ipam::new(t, args));
    // A pod namespace that is gone took the veth with it.
    let pod = open_netns_for_del(&args.netns)?;
    let found = match &pod {
        Some(ns) => find_container_iface(ns, &args.ifname)?,
        None => None,
    };
    // A failed release stops here, leaving the interface for the runtime's retry.
    if let Some(ipam) = &ipam {
        ipam.del()?;
    }
    let mut failures = Vec::new();
    let mut addrs = Vec::new();
    if let Some((nl, index, global)) = found {
        addrs = global;
        if let Err(e) = nl.del_link_if_exists(index) {
            failures.push(e.to_string());
        }
    }
    if conf.mac_spoof_check {
        if let Err(e) = netkit::firewall::spoofcheck::teardown(&unique_id(args)) {
            failures.push(e.to_string());
        }
    }
    if ipam.is_some() && conf.ip_masq {
        if let Err(e) = netkit::firewall::masq::teardown(
            &conf.net.name,
            &args.container_id,
            &args.ifname,
            &addrs,
        ) {
            failures.push(e.to_string());
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "DEL of {}/{} left things behind: {}",
            args.container_id,
            args.ifname,
            failures.join("; ")
        )))
    }
}

/// The container interface (a socket in its namespace, its index, and its global unicast
/// addresses for the masquerade teardown), if it still exists. Only a veth is ours: another
/// interface of that name was in the pod before a refused ADD, and stays.
fn find_container_iface(
    ns: &NetNs,
    ifname: &str,
) -> Result<Option<(Netlink, u32, Vec<IpNet>)>, CniError> {
    let nl = Netlink::in_ns(ns).map_err(sys)?;
    let Some(link) = nl
        .link_by_name(ifname)
        .map_err(sys)?
        .filter(|link| link.kind.as_deref() == Some("veth"))
    else {
        return Ok(None);
    };
    let addrs = nl
        .addrs(Some(link.index), None)
        .map_err(sys)?
        .into_iter()
        .map(|a| a.net)
        .filter(|n| is_global_unicast(&n.addr()))
        .collect();
    Ok(Some((nl, link.index, addrs)))
}

fn is_global_unicast(ip: &std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(a) => {
            !(a.is_loopback()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_unspecified())
        }
        std::net::IpAddr::V6(a) => {
            !(a.is_loopback()
                || a.is_multicast()
                || a.is_unspecified()
                || a.is_unicast_link_local())
        }
    }
}
