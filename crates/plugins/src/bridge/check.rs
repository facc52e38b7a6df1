//! CHECK: the attachment described by `prevResult` is still in place (the reference's checks).

use cni::{CmdArgs, CniError, CniResult, Interface};
use netkit::netlink::Link;
use netkit::{Family, Netlink};

use super::config::BridgeConf;
use super::{open_netns, sys};
use crate::ipam_call::Ipam;

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = BridgeConf::parse(&args.stdin, &args.args)?;
    let pod = open_netns(&args.netns)?;
    if let Some(t) = conf.ipam_type() {
        Ipam::new(t, args).check()?;
    }
    let prev = conf.net.prev_result.as_ref().ok_or_else(|| {
        CniError::invalid_config(
            "CHECK needs prevResult: the runtime passes the ADD result in the config",
        )
    })?;
    let prev = CniResult::from_value(prev)?;
    let node = Netlink::new().map_err(sys)?;
    let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;

    let br_entry = prev.interfaces.iter().find(|i| i.name == conf.bridge);
    let cont_entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns);
    let br = check_bridge(&node, br_entry, &conf)?;
    let cont_entry = cont_entry.ok_or_else(|| {
        fail(format!(
            "prevResult has no interface {:?} in sandbox {}",
            args.ifname, args.netns
        ))
    })?;
    let cont = pod_nl
        .link_by_name(&args.ifname)
        .map_err(sys)?
        .ok_or_else(|| {
            fail(format!(
                "interface {:?} not found in netns {}",
                args.ifname, args.netns
            ))
        })?;
    if cont.kind.as_deref() != Some("veth") {
        return Err(fail(format!(
            "container interface {:?} is not a veth",
            cont.name
        )));
    }
    check_mac(cont_entry, &cont)?;

    // The host end: a veth among the other result interfaces whose peer is the container
    // interface and whose master is the bridge.
    let mut veth_found = false;
    for entry in &prev.interfaces {
        if entry.name == br.name || entry.name == cont_entry.name {
            continue;
        }
        let link = node_link(&node, entry)?;
        let is_our_port = link.kind.as_deref() == Some("veth")
            && link.link == Some(cont.index)
            && cont.link == Some(link.index)
            && link.master == Some(br.index);
        if is_our_port {
            check_mac(entry, &link)?;
            veth_found = true;
            break;
        }
    }
    if !veth_found {
        return Err(fail(format!(
            "no veth of bridge {:?} is the peer of {:?}",
            br.name, args.ifname
        )));
    }
    check_addresses(&pod_nl, &cont, &prev)?;
    check_routes(&pod_nl, &prev)
}

fn fail(msg: String) -> CniError {
    CniError::internal(format!("CHECK: {msg}"))
}

fn check_bridge(
    node: &Netlink,
    entry: Option<&Interface>,
    conf: &BridgeConf,
) -> Result<Link, CniError> {
    let entry = entry.ok_or_else(|| {
        fail(format!(
            "prevResult has no interface for bridge {:?}",
            conf.bridge
        ))
    })?;
    let br = node_link(node, entry)?;
    if br.kind.as_deref() != Some("bridge") {
        return Err(fail(format!("{:?} is not a bridge", br.name)));
    }
    check_mac(entry, &br)?;
    if br.promisc != conf.promisc {
        return Err(fail(format!(
            "bridge {:?} promiscuous mode is {}, the config says {}",
            br.name, br.promisc, conf.promisc
        )));
    }
    Ok(br)
}

/// The node-side link a prevResult entry names; it must not claim a sandbox.
fn node_link(node: &Netlink, entry: &Interface) -> Result<Link, CniError> {
    if !entry.sandbox.is_empty() {
        return Err(fail(format!(
            "interface {:?} should be in the node's netns, not in sandbox {}",
            entry.name, entry.sandbox
        )));
    }
    node.link_by_name(&entry.name).map_err(sys)?.ok_or_else(|| {
        fail(format!(
            "interface {:?} not found in the node's netns",
            entry.name
        ))
    })
}

fn check_mac(entry: &Interface, link: &Link) -> Result<(), CniError> {
    if entry.mac.is_empty() {
        return Ok(());
    }
    let actual = link.mac.map(|m| netkit::format_mac(&m)).unwrap_or_default();
    if !entry.mac.eq_ignore_ascii_case(&actual) {
        return Err(fail(format!(
            "interface {:?} has MAC {actual}, prevResult says {}",
            link.name, entry.mac
        )));
    }
    Ok(())
}

fn check_addresses(nl: &Netlink, cont: &Link, prev: &CniResult) -> Result<(), CniError> {
    let present = nl.addrs(Some(cont.index), None).map_err(sys)?;
    for ip in &prev.ips {
        if !present.iter().any(|a| a.net == ip.address) {
            return Err(fail(format!(
                "address {} is missing from {:?}",
                ip.address, cont.name
            )));
        }
    }
    Ok(())
}

fn check_routes(nl: &Netlink, prev: &CniResult) -> Result<(), CniError> {
    let mut tables = Vec::new();
    for family in [Family::V4, Family::V6] {
        tables.extend(nl.routes(family, None).map_err(sys)?);
    }
    for r in &prev.routes {
        let found = tables
            .iter()
            .any(|k| k.dst == r.dst.trunc() && (r.gw.is_none() || k.gateway == r.gw));
        if !found {
            let via = r.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(fail(format!("route {}{via} is missing", r.dst)));
        }
    }
    Ok(())
}
