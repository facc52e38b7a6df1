//! CHECK building blocks shared by the interface plugins: the ADD result the runtime passes
//! back as `prevResult`, and comparing it with what the kernel has.

use cni::{CmdArgs, CniError, CniResult, Interface, NetConf};
use netkit::netlink::Link;
use netkit::{Family, Netlink};

use crate::support::sys::sys;

/// A CHECK failure: the attachment is not what the ADD result says.
pub fn fail(msg: String) -> CniError {
    CniError::internal(format!("CHECK: {msg}"))
}

/// `prevResult`, which CHECK requires.
pub fn prev_result(net: &NetConf) -> Result<CniResult, CniError> {
    let prev = net.prev_result.as_ref().ok_or_else(|| {
        CniError::invalid_config(
            "CHECK needs prevResult: the runtime passes the ADD result in the config",
        )
    })?;
    CniResult::from_value_at(prev, Some("prevResult"))
}

/// The result's entry for the container interface: named `CNI_IFNAME`, in `CNI_NETNS`.
pub fn container_entry<'a>(prev: &'a CniResult, args: &CmdArgs) -> Result<&'a Interface, CniError> {
    prev.interfaces
        .iter()
        .find(|i| i.name == args.ifname && i.sandbox == args.netns)
        .ok_or_else(|| {
            fail(format!(
                "prevResult has no interface {:?} in sandbox {}",
                args.ifname, args.netns
            ))
        })
}

/// The container interface in the pod's namespace.
pub fn pod_link(pod_nl: &Netlink, args: &CmdArgs) -> Result<Link, CniError> {
    pod_nl
        .link_by_name(&args.ifname)
        .map_err(sys)?
        .ok_or_else(|| {
            fail(format!(
                "interface {:?} not found in netns {}",
                args.ifname, args.netns
            ))
        })
}

/// The link is of `kind` ("veth", "macvlan", ...).
pub fn kind(link: &Link, kind: &str) -> Result<(), CniError> {
    if link.kind.as_deref() == Some(kind) {
        return Ok(());
    }
    Err(fail(format!(
        "interface {:?} is a {}, not a {kind}",
        link.name,
        link.kind.as_deref().unwrap_or("device without a kind")
    )))
}

/// The link is up, as ADD leaves it.
pub fn up(link: &Link) -> Result<(), CniError> {
    if link.up {
        return Ok(());
    }
    Err(fail(format!("interface {:?} is down", link.name)))
}

/// The link has the MAC of its result entry, when the entry names one.
pub fn mac(entry: &Interface, link: &Link) -> Result<(), CniError> {
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

/// Every address of the result is on the link.
pub fn addresses(nl: &Netlink, link: &Link, prev: &CniResult) -> Result<(), CniError> {
    let present = nl.addrs(Some(link.index), None).map_err(sys)?;
    for ip in &prev.ips {
        if !present.iter().any(|a| a.net == ip.address) {
            return Err(fail(format!(
                "address {} is missing from {:?}",
                ip.address, link.name
            )));
        }
    }
    Ok(())
}

/// Every route of the result is in one of the namespace's tables (destination, and gateway
/// when the result gives one).
pub fn routes(nl: &Netlink, prev: &CniResult) -> Result<(), CniError> {
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
