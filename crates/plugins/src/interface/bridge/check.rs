//! CHECK: the attachment described by `prevResult` is still in place (the reference's checks).

use cni::{CmdArgs, CniError, Interface};
use netkit::netlink::Link;
use netkit::Netlink;

use super::config::BridgeConf;
use crate::support::check::{self, fail};
use crate::support::ipam_call::Ipam;
use crate::support::sys::{open_netns, sys};

pub fn check(args: &CmdArgs) -> Result<(), CniError> {
    let conf = BridgeConf::parse(&args.stdin, &args.args)?;
    let pod = open_netns(&args.netns)?;
    if let Some(t) = conf.ipam_type() {
        Ipam::new(t, args).check()?;
    }
    let prev = check::prev_result(&conf.net)?;
    let node = Netlink::new().map_err(sys)?;
    let pod_nl = Netlink::in_ns(&pod).map_err(sys)?;

    let br_entry = prev.interfaces.iter().find(|i| i.name == conf.bridge);
    let br = check_bridge(&node, br_entry, &conf)?;
    let cont_entry = check::container_entry(&prev, args)?;
    let cont = check::pod_link(&pod_nl, args)?;
    check::kind(&cont, "veth")?;
    check::mac(cont_entry, &cont)?;

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
            check::mac(entry, &link)?;
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
    check::addresses(&pod_nl, &cont, &prev)?;
    check::routes(&pod_nl, &prev)
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
    check::kind(&br, "bridge")?;
    check::mac(entry, &br)?;
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
